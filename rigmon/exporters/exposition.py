"""The exposition formats, written with each series' name and labels escaped once.

prometheus_client writes every sample afresh: it sorts, validates and escapes the labels and
the name of each of the ~1,200 samples of an 8-GPU box on every render (7 ms of CPU a poll for
OpenMetrics, the format Prometheus asks for). The series of a box hardly change from poll to
poll, so here the text before each value (``name{labels} ``) and each family's HELP and TYPE
lines are made once, by prometheus_client's own escaping functions, and kept; a render joins
them with the values. The bytes are prometheus_client's (tests compare them, format by
format). What this writer does not know (timestamps, exemplars, native histograms, a name
outside the legacy character set, an escaping scheme other than the identity ones, a format
it does not recognise) is handed to prometheus_client whole.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from prometheus_client import exposition as text_format
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om_format
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

_INF = float("inf")
# escaping schemes that leave a legacy name as it is (DOTS doubles its underscores)
_IDENTITY = {getattr(om_format, name) for name in ("UNDERSCORES", "ALLOWUTF8", "VALUES") if hasattr(om_format, name)}
_LEGACY = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789")
_TEXT_TYPES = {"counter": "counter", "gauge": "gauge", "info": "gauge"}  # what the text format calls them
_SLACK = 256  # prefixes kept beyond twice the last render's series before the unused are let go


class Family(Metric):
    """A counter or gauge family that keeps each sample as a row, (label values, value), until
    it is written: the writer here joins the row's kept prefix with its value, with no dict of
    labels and no Sample made per sample and render. prometheus_client (the fallback, and
    anything else that reads ``samples``) gets the usual Samples, made when it asks."""

    def __init__(self, name: str, documentation: str, typ: str, labelnames: tuple[str, ...]):
        if typ not in ("counter", "gauge"):
            raise ValueError(f"{name}: a Family is a counter or a gauge, not {typ}")
        super().__init__(name, documentation, typ)  # checks the name, once
        self.labelnames = tuple(labelnames)
        self.sample_name = name + "_total" if typ == "counter" else name
        self.rows: list[tuple[tuple[str, ...], float]] = []

    def empty(self) -> Family:
        """A new family like this one with no samples (its name not checked again)."""
        family = object.__new__(Family)
        family.__dict__.update(self.__dict__)
        family.rows = []
        return family

    def add_metric(self, labels: tuple[str, ...], value: float) -> None:
        self.rows.append((labels, value))

    @property
    def samples(self) -> list[Sample]:
        names, name = self.labelnames, self.sample_name
        return [Sample(name, dict(zip(names, labels, strict=True)), value) for labels, value in self.rows]

    @samples.setter
    def samples(self, value: list) -> None:  # Metric.__init__ sets it empty
        if value:
            raise TypeError("a Family's samples are added with add_metric")


class _Unhandled(Exception):
    """Something this writer does not write: prometheus_client writes the whole exposition."""


def _legacy(name: str) -> bool:
    return bool(name) and not name[0].isdigit() and set(name) <= _LEGACY


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _value(v) -> str:
    f = float(v)
    if -_INF < f < 1e6:  # finite, and short enough that Go's formatting is Python's repr
        return repr(f)
    return floatToGoString(f)


class Exposition:
    """Renders a registry in the format an encoder of prometheus_client's would, keeping the
    escaped prefix of every series between renders. One per registry; not thread-safe (its
    caller renders one at a time: the /metrics server on its loop)."""

    def __init__(self):
        # per format: each series' prefix, kept while the series is rendered. Series come and go
        # (a process's, a job's): when more than twice the last render's are kept, the next
        # render keeps only its own, so the cache follows the series and churn never grows it.
        self._prefixes: dict[bool, dict[tuple, str]] = {True: {}, False: {}}
        self._live: dict[bool, int] = {True: 0, False: 0}
        self._heads: dict[tuple, str] = {}

    def encoder(self, encoder: Callable) -> Callable[[object], bytes]:
        """A render like ``encoder``'s (one from ``choose_encoder``), written here where it can be."""
        func, keywords = encoder, {}
        if isinstance(encoder, functools.partial):
            func, keywords = encoder.func, dict(encoder.keywords)
        escaping = keywords.pop("escaping", getattr(om_format, "UNDERSCORES", None))
        version = keywords.pop("version", "1.0.0")
        if keywords or escaping not in _IDENTITY | {None}:
            return encoder
        if func is om_format.generate_latest and version == "1.0.0":
            return functools.partial(self._render, encoder, True)
        if func is text_format.generate_latest:
            return functools.partial(self._render, encoder, False)
        return encoder

    def _render(self, fallback: Callable, om: bool, registry) -> bytes:
        try:
            return self._write(registry, om)
        except _Unhandled:
            return fallback(registry)

    def _write(self, registry, om: bool) -> bytes:
        prefixes, heads = self._prefixes[om], self._heads
        keep = {} if len(prefixes) > 2 * self._live[om] + _SLACK else None  # this render's series only
        count = 0
        out: list[str] = []  # a string per family: its lines live only while it is written
        for metric in registry.collect():
            key = (om, metric.name, metric.type, metric.documentation, metric.unit)
            head = heads.get(key)
            if head is None:
                head = heads[key] = self._head(metric, om)
            lines = [head]
            append = lines.append
            if type(metric) is Family:
                name, labelnames = metric.sample_name, metric.labelnames
                for labels, v in metric.rows:
                    series = (name, labels)
                    prefix = prefixes.get(series)
                    if prefix is None:
                        labelled = dict(zip(labelnames, labels, strict=True))
                        prefix = prefixes[series] = self._prefix(metric, name, labelled, om)
                    if keep is not None:
                        keep[series] = prefix
                    append(f"{prefix}{_value(v)}\n" if v is not None or not om else f"{prefix}\n")
                count += len(metric.rows)
                out.append("".join(lines))
                continue
            for s in metric.samples:
                if s.timestamp is not None or s.exemplar is not None or getattr(s, "native_histogram", None):
                    raise _Unhandled
                series = (s.name, tuple(s.labels.items()))
                prefix = prefixes.get(series)
                if prefix is None:
                    prefix = prefixes[series] = self._prefix(metric, s.name, s.labels, om)
                if keep is not None:
                    keep[series] = prefix
                count += 1
                v = s.value
                append(f"{prefix}{_value(v)}\n" if v is not None or not om else f"{prefix}\n")
            out.append("".join(lines))
        if om:
            out.append("# EOF\n")
        self._live[om] = count
        if keep is not None:
            self._prefixes[om] = keep
        # a lone surrogate (a label from a damaged recording) is written as its escape, never a failed scrape
        return "".join(out).encode("utf-8", "backslashreplace")

    @staticmethod
    def _head(metric, om: bool) -> str:
        if not _legacy(metric.name):
            raise _Unhandled
        if om:
            unit = f"# UNIT {metric.name} {metric.unit}\n" if metric.unit else ""
            doc = _escape_value(metric.documentation)
            return f"# HELP {metric.name} {doc}\n# TYPE {metric.name} {metric.type}\n{unit}"
        if metric.type not in _TEXT_TYPES:
            raise _Unhandled  # histograms, summaries, statesets: their own munging
        name = metric.name + {"counter": "_total", "info": "_info"}.get(metric.type, "")
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        return f"# HELP {name} {doc}\n# TYPE {name} {_TEXT_TYPES[metric.type]}\n"

    @staticmethod
    def _prefix(metric, name: str, labels: dict, om: bool) -> str:
        if not _legacy(name) or not all(_legacy(k) for k in labels):
            raise _Unhandled
        if not om and name in (metric.name + "_created", metric.name + "_gsum", metric.name + "_gcount"):
            raise _Unhandled  # the text format moves these to families of their own
        text = ",".join(f'{k}="{_escape_value(v)}"' for k, v in sorted(labels.items()))
        return f"{name}{{{text}}} " if text else f"{name} "
