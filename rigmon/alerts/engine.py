"""The alert engine: rules, then samples one at a time with the time; transitions out.

It does no I/O and reads no clock of its own (``now`` is an argument), so a test drives it
through any scenario with injected time. It keeps the history its rules need: for each
entity, the series of the variables that ``increase()``, ``avg_over()``… look back at.

An alert is pending while its condition holds for less than the rule's ``for``, then
firing; it resolves when the rule's ``clear`` condition holds (by default: ``when`` no
longer does). A firing alert holds back the alerts of the rules it ``inhibits`` on the same
entity (one thermal event is one page, not three): they are not told while it fires, and one
told before is resolved as superseded. Conditions are three-valued (see ``rules``): an unknown one changes nothing
for a while, but an alert whose condition stays unknown longer than its ``for`` and the
engine's ``unknown_timeout`` resolves, with that reason: it never fires for ever on a value
the hardware stopped giving.
"""

from __future__ import annotations

import bisect
import functools
import logging
import math
import string
from array import array
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

from ..model.project import entities_for
from ..model.sample import Sample, SystemInfo
from .entities import (
    BOX,
    DEPRECATED,
    ENTITY,
    ITS_GPU,
    KINDS,
    LABELS,
    MISSING,
    NVML_SENSOR,
    gpu_entities,
    host_entities,
    inhibit_scope,
    sensor_aliases,
    sensor_keys,
)
from .rules import SEVERITY_RANK, Rule, batch
from .xid import xid_meaning

BEST_FAN_VAR = "speed_rpm_per_asked"  # GpuFanStalled's ever_max(): exported and kept across restarts

log = logging.getLogger("rigmon.alerts")


# Plain classes and namedtuples, no dataclasses: a one-shot `rigmon status` builds the engine,
# and the dataclasses module with its class building costs it more than all its rules' compile.


class PsuGroup(namedtuple("PsuGroup", "name watts gpus include_cpu sensor", defaults=(None, False, None))):
    """One power budget: ``name`` and ``watts``; ``gpus`` the GPU indexes it feeds (None: every
    GPU); ``include_cpu`` adds the CPU package's power; ``sensor`` an hwmon power input that
    measures the group (chip/sensor or chip/device/sensor)."""

    __slots__ = ()


def subject_of(labels: dict[str, str], sep: str = ", ") -> str:
    """What an alert is about, for people: its labels without the long uuid and name."""
    return sep.join(f"{k}={v}" for k, v in labels.items() if k not in ("uuid", "name")) or "host"


def notification_key(alertname: str, labels: dict[str, str]) -> str:
    """One alert's notifications, the first and the reminders, under one key."""
    return alertname + "".join(f",{k}={v}" for k, v in sorted(labels.items()))


class Alert:
    """One rule's alert on one entity, pending or firing."""

    __slots__ = (
        "rule",
        "key",
        "labels",
        "active_since",
        "state",
        "fired_at",
        "context",
        "summary",
        "description",
        "unknown_since",
        "announced",
        "written",
    )

    def __init__(
        self,
        rule: Rule,
        key: tuple,
        labels: dict[str, str],
        active_since: float,
        state: str = "pending",
        fired_at: float | None = None,
        context: dict[str, Any] | None = None,
        summary: str = "",
        description: str = "",
        unknown_since: float | None = None,
        announced: bool = False,
        written: dict[str, tuple[tuple, str]] | None = None,
    ):
        self.rule = rule
        self.key = key
        self.labels = labels
        self.active_since = active_since
        self.state = state  # pending | firing
        self.fired_at = fired_at
        self.context = {} if context is None else context  # what its texts were last written from
        self.summary = summary
        self.description = description
        self.unknown_since = unknown_since  # when its condition became unknown, while it stays so
        # whether its firing was told (notified, exported): a firing alert that a rule of the same
        # entity inhibits is held back, and told once that rule resolves
        self.announced = announced
        # each text's template -> (the values it read, the text): a text is written again only
        # when one of the values it reads changed
        self.written = {} if written is None else written

    def __repr__(self) -> str:
        return f"<Alert {self.rule.name} {self.state} {self.labels}>"

    @property
    def values(self) -> dict[str, Any]:
        """The plain values it was last described with (for notifications)."""
        return {k: v for k, v in self.context.items() if isinstance(v, (int, float, str, bool)) or v is None}

    @property
    def name(self) -> str:
        return self.rule.name

    @property
    def severity(self) -> str:
        return self.rule.severity

    @property
    def subject(self) -> str:
        return subject_of(self.labels)

    @property
    def notification_key(self) -> str:
        return notification_key(self.rule.name, self.labels)


class Transition(
    namedtuple(
        "Transition",
        "status alertname severity labels summary description hint starts_at ends_at time values reason headline",
        defaults=("", ""),
    )
):
    """An alert that fired (``status`` "firing") or resolved ("resolved"): its rule's name and
    severity, the entity's labels, the texts, when it started and ended, when this happened,
    the values it was described with, ``reason``: why a resolved alert resolved, when not
    because its condition cleared, and ``headline``: its rule's headline, a template over the
    labels that a notifier fills in with them once it has added the box's ``instance``."""

    __slots__ = ()

    @property
    def subject(self) -> str:
        return subject_of(self.labels)

    @property
    def key(self) -> str:
        return notification_key(self.alertname, self.labels)

    def line(self) -> str:
        state = "FIRING" if self.status == "firing" else "resolved"
        reason = f" ({self.reason})" if self.reason else ""
        return f"{state} {self.severity} {self.alertname}: {self.summary}{reason}"


class _Formatter(string.Formatter):
    """Templates show "n/a" for missing values instead of failing."""

    def get_value(self, key, args, kwargs):
        return kwargs.get(key) if isinstance(key, str) else super().get_value(key, args, kwargs)

    def format_field(self, value, format_spec):
        if value is None:
            return "n/a"
        try:
            return super().format_field(value, format_spec)
        except Exception:  # a spec that does not fit the value ({p:c} of 10**9): the value as it is
            return str(value)


_FORMAT = _Formatter()


def render(template: str, values: dict[str, Any]) -> str:
    try:
        return _FORMAT.vformat(template, (), values)
    except Exception:  # never a reason for a rule, or the others, to stop: the template as written
        return template


@functools.lru_cache(maxsize=1024)
def _template_names(template: str) -> tuple[str, ...]:
    """The names a (checked) template reads: ``{name}`` and ``{name:spec}`` only, nothing nested."""
    return tuple(name for _, name, _, _ in string.Formatter().parse(template) if name)


_PLAIN = frozenset((type(None), bool, int, float, str))


def hint_of(alert: Alert) -> str:
    """The alert's hint, its values filled in as its summary's (n/a before it was described)."""
    hint = alert.rule.spec.hint
    return _render_again(alert, hint, alert.context) if "{" in hint else hint


def _render_again(alert: Alert, template: str, values: dict[str, Any]) -> str:
    """render(template, values), or the alert's last text from it where every value it reads is
    the same (same type, same value, same sign: -0.0 is written apart from 0.0)."""
    read = []
    for name in _template_names(template):
        v = values.get(name)
        cls = v.__class__
        if cls not in _PLAIN:  # a tuple of 1 and one of 1.0 are equal but written apart: no shortcut
            return render(template, values)
        read.append((cls, v, cls is float and math.copysign(1.0, v) < 0))
    key = tuple(read)
    last = alert.written.get(template)
    if last is not None and last[0] == key:
        return last[1]
    text = alert.written[template] = (key, render(template, values))
    return text[1]


def _measured(sample: Sample, sensor: str) -> float | None:
    """The hwmon power input named chip/sensor or chip/device/sensor, where it answers."""
    if sample.host is None:
        return None
    for p in sample.host.powers:
        if sensor in (f"{p.chip}/{p.sensor}", f"{p.chip}/{p.device}/{p.sensor}"):
            return p.value
    return None


class _History:
    """One entity's history at one evaluation: what increase(), rate(), avg_over()… read."""

    __slots__ = ("_series", "_ever", "_key", "_now", "_extremes")
    _EMPTY = ((), (), ())

    def __init__(self, series: dict, ever: dict | None, key: tuple, now: float, extremes: dict | None = None):
        self._series, self._ever, self._key, self._now = series, ever, key, now
        self._extremes = extremes if extremes is not None else {}

    def _window(self, var: str, seconds: float):
        times, vals, _ = self._series.get((self._key, var), self._EMPTY)
        return vals[bisect.bisect_left(times, self._now - seconds) :]

    def increase(self, var: str, seconds: float) -> float | None:
        times, _, counted = self._series.get((self._key, var), self._EMPTY)
        start = bisect.bisect_left(times, self._now - seconds)
        return counted[-1] - counted[start] if start < len(times) else None

    def rate(self, var: str, seconds: float) -> float | None:
        rise = self.increase(var, seconds)
        return rise / seconds if rise is not None and seconds > 0 else None

    def avg_over(self, var: str, seconds: float) -> float | None:
        series = self._window(var, seconds)
        return sum(series) / len(series) if series else None

    def max_over(self, var: str, seconds: float) -> float | None:
        return self._extreme(var, seconds, max)

    def min_over(self, var: str, seconds: float) -> float | None:
        return self._extreme(var, seconds, min)

    def _extreme(self, var: str, seconds: float, pick) -> float | None:
        """The window's max (or min), carried from the last evaluation: while the point that
        held it is still in the window, only the points added since are compared (a 15-minute
        window at 1 s is 900 points; one is new). A point's time only moves forward (a constant
        run's last point moves on), so the carried one is in the window while its time is."""
        times, vals, _ = self._series.get((self._key, var), self._EMPTY)
        if not times:
            return None
        start = self._now - seconds
        memo_key = (self._key, var, seconds, pick)
        memo = self._extremes.get(memo_key)
        if memo is not None and memo[1] >= start:
            best, at, upto = memo
            higher = pick is max
            for i in range(bisect.bisect_right(times, upto), len(vals)):  # the points since: usually one
                v = vals[i]
                if (v >= best) if higher else (v <= best):  # as good: the later holder stays longer
                    best, at = v, times[i]
        else:
            first = bisect.bisect_left(times, start)
            if first >= len(vals):
                self._extremes.pop(memo_key, None)
                return None
            window = vals[first:]
            best = pick(window)
            at = times[first + len(window) - 1 - window[::-1].index(best)]  # the latest point that holds it
        self._extremes[memo_key] = (best, at, times[-1])
        return best

    def ever_max(self, var: str) -> float | None:
        return self._ever.get(var) if self._ever else None


def _held_entity(key: tuple, target_kind: str) -> tuple | None:
    """The entity whose alerts of a ``target_kind`` rule a firing alert on ``key`` holds back;
    None: all of them (specs.inhibit_scope)."""
    scope = inhibit_scope(key[0], target_kind)
    if scope == ENTITY:
        return key
    if scope == BOX:
        return ("host",)
    if scope == ITS_GPU:
        return ("gpu", key[1])
    return None


class _Complete:
    """An entity's every variable, and the names its expressions see, worked out when first
    asked: an alert's step reads them only to start, clear or describe it."""

    __slots__ = ("_engine", "_sample", "_key", "_read", "_history", "_values", "_names")

    def __init__(self, engine: AlertEngine, sample: Sample, key: tuple, read: dict, history: _History):
        self._engine, self._sample, self._key, self._read, self._history = engine, sample, key, read, history
        self._values: dict | None = None
        self._names: dict | None = None

    @property
    def values(self) -> dict:
        if self._values is None:
            self._values = self._engine.entity(self._sample, self._key) or self._read
        return self._values

    @property
    def names(self) -> dict:
        if self._names is None:
            self._names = self._engine.names(self._key, self.values, self._history)
        return self._names


class AlertEngine:
    def __init__(
        self,
        rules: Sequence[Rule],
        psu_groups: Sequence[PsuGroup] = (),
        expected_sensors: Sequence[str] = (),
        unknown_timeout: float = 120.0,
    ):
        self.rules = [r for r in rules if r.spec.enabled]
        self._rule_kinds = {r.name: r.kind for r in self.rules}
        self.unknown_timeout = unknown_timeout
        self.psu_groups = tuple(psu_groups)
        self.alerts: dict[tuple, Alert] = {}
        # the newest sample and its entities: what the conditions read, and complete (for texts)
        self._latest: tuple[Sample, dict[tuple, dict]] | None = None
        self._complete: tuple[Sample, dict[tuple, dict]] | None = None
        self._xid_totals: dict[int, int] = {}
        self._last_xid: dict[int, int] = {}
        self._ever_max: dict[tuple, dict[str, float]] = {}
        self._seen_sensors: set[tuple[str, str]] = set()
        # a GPU fan's best rpm per asked speed an earlier daemon saw ((uuid, fan) -> rpm): a
        # fan that slowed before a restart is still held against what it once did
        self._remembered_best: dict[tuple[str, str], float] = {}
        self._previous_sample: Sample | None = None
        # (entity key, variable) -> (times, values) of the variables history functions look back at,
        # appended once per evaluated sample: a window is a bisect, not a rescan of the history.
        self._tracked = {(rule.kind, var) for rule in self.rules for var in rule.history_variables}
        # a constant run keeps only its first and latest point (counters change rarely, and an
        # hour-long window of them would otherwise hold 3,600 equal values per GPU); not for
        # avg_over(), where every sample weighs
        self._averaged = {(rule.kind, var) for rule in self.rules for var in rule.averaged}
        self._kinds = {rule.kind for rule in self.rules}
        self._series: dict[tuple, tuple[array, array, array]] = {}
        # how far back each variable is kept: the longest window of the rules that look back at it
        # (a minute more), not the longest of all: GPU utilisation over 15 minutes is not held for
        # the hour an ECC counter's rule looks back, and the history stops growing sooner
        self._keep: dict[tuple[str, str], float] = {}
        for rule in self.rules:
            for var in rule.history_variables:
                self._keep[(rule.kind, var)] = max(self._keep.get((rule.kind, var), 0.0), rule.longest_window + 60.0)
        for name in expected_sensors:
            self._seen_sensors.add(_expected_key(name))

        self._unknown = {kind: dict.fromkeys(names) for kind, names in KINDS.items()}
        self._extremes: dict[tuple, tuple[float, float, float]] = {}  # max_over/min_over carried between polls
        self._tracked_by_kind: dict[str, tuple[str, ...]] = {}
        for kind, var in sorted(self._tracked):
            self._tracked_by_kind[kind] = (*self._tracked_by_kind.get(kind, ()), var)
        # each kind's conditions as one compiled function over an entity: (kind, function,
        # [(the rule's place in self.rules, rule)]); and the entities built with only what they read
        by_kind: dict[str, list[tuple[int, Rule]]] = {}
        for order, rule in enumerate(self.rules):
            by_kind.setdefault(rule.kind, []).append((order, rule))
        self._batches = [(kind, batch([rule.when for _, rule in rules]), rules) for kind, rules in by_kind.items()]
        wanted: dict[str, set[str]] = {}
        for rule in self.rules:
            wanted.setdefault(rule.kind, set()).update(rule.when.reads, rule.history_variables)
        self._read_entities = entities_for(wanted)

    # --- entities ------------------------------------------------------------------------

    def remember_sensors(self, sensors) -> None:
        """Sensors an earlier daemon saw answer ((kind, name)): a restart keeps them expected."""
        self._seen_sensors |= set(sensors)

    def remember_fan_best(self, best) -> None:
        """GPU fans' best rpm per asked speed an earlier daemon saw ({(uuid, fan): rpm}): where a
        fan now does worse, a restart keeps GpuFanStalled's yardstick."""
        self._remembered_best.update(best)

    def fan_best(self) -> tuple[tuple[str, str, str, float], ...]:
        """Each GPU fan's best rpm per asked speed so far ((gpu, uuid, fan, rpm)): GpuFanStalled's
        yardstick, exported so the PromQL rule needs no look-back window."""
        latest = self._latest[1] if self._latest is not None else {}
        out = []
        for key, values in latest.items():
            if key[0] == "gpu_fan":
                best = self._ever_max.get(key, {}).get(BEST_FAN_VAR)
                if best is not None and best > 0:
                    out.append((values["gpu"], values["uuid"], values["fan"], best))
        return tuple(sorted(out))

    def entities(self, sample: Sample, complete: bool = True) -> dict[tuple, dict]:
        """What the rules see in ``sample``: {(kind, ...): {variable: value}}; every variable of
        every kind, or (``complete=False``) the kinds the rules are about with the variables
        their conditions read (with the labels, the PSU groups and the sensors)."""
        cached = self._complete if complete else self._latest
        if cached is not None and cached[0] is sample:
            return cached[1]
        if complete:
            entities = gpu_entities(sample, self._xid_totals, self._last_xid)
            entities.update(host_entities(sample))
        else:
            gpu, host = self._read_entities
            entities = gpu(sample, self._xid_totals, self._last_xid)
            entities.update(host(sample))
        for group in self.psu_groups:
            measured = _measured(sample, group.sensor) if group.sensor else None
            if measured is not None:  # the PSU's own reading: everything on it, not the GPUs alone
                watts = measured
            else:
                gpus = [g for g in sample.gpus if not g.lost and (group.gpus is None or g.index in group.gpus)]
                watts = sum(g.power_watts or 0 for g in gpus)
                if group.include_cpu:
                    watts += self._cpu_watts(sample)
            entities[("psu", group.name)] = {
                "psu": group.name,
                "draw_watts": watts,
                "budget_watts": group.watts,
                "measured": measured is not None,
            }
        present = sensor_keys(sample)
        self._named_by_device(present, sample)
        system = sample.system
        # NVML that cannot start is NvmlUnavailable's to say, not a missing sensor's
        quiet = NVML_SENSOR if system is not None and system.nvml_error else None
        for kind, name in self._seen_sensors | present:
            if (kind, name) != quiet:
                entities[("sensor", kind, name)] = {
                    "sensor_kind": kind,
                    "sensor": name,
                    "present": (kind, name) in present,
                }
        self._missing_gpus(system, entities)
        if complete:
            self._complete = (sample, entities)
        return entities

    def _named_by_device(self, present: set[tuple[str, str]], sample: Sample) -> None:
        """A sensor remembered (or expected) by chip/label, as rigmon named sensors before it
        named them by device too, is the one present by that chip and label: it takes its
        name, so it is not missing for its name's sake."""
        unmatched = [key for key in self._seen_sensors if key not in present and key[0] in ("fan", "temperature")]
        if not unmatched:
            return
        aliases = sensor_aliases(sample)
        for key in unmatched:
            named = aliases.get(key)
            if named is not None:
                self._seen_sensors.discard(key)
                self._seen_sensors.add(named)

    def _missing_gpus(self, system: SystemInfo | None, entities: dict[tuple, dict]) -> None:
        """Each GPU the box has had that NVML no longer lists, as a GPU of its own (keyed by its
        UUID: NVML numbers the GPUs it lists afresh, so its old index may be another's now),
        ``missing`` and nothing else known; one whose alert still stands, no longer missing."""
        for g in system.missing_gpus if system is not None else ():
            entities[("gpu", MISSING, g.uuid)] = {"gpu": str(g.index), "uuid": g.uuid, "name": g.name, "missing": True}
        for (_, key), alert in self.alerts.items():
            if key[:2] == ("gpu", MISSING) and key not in entities:
                entities[key] = {**alert.labels, "missing": False}

    def entity(self, sample: Sample, key: tuple) -> dict | None:
        """One entity of ``sample`` with every variable (what an alert's texts read), without
        building the others: an alert firing on one GPU of eight all day describes that one."""
        cached = self._complete
        if cached is not None and cached[0] is sample:
            return cached[1].get(key)
        kind = key[0]
        if kind in ("gpu", "gpu_fan"):
            return gpu_entities(sample, self._xid_totals, self._last_xid, key[1]).get(key)
        if kind in ("cpu", "fan", "host"):
            return host_entities(sample, kind).get(key)
        return None  # PSU groups and sensors: the rules' entities hold every variable

    def _cpu_watts(self, sample: Sample) -> float:
        """CPU package power from the RAPL energy counter's rise since the previous sample."""
        previous = self._previous_sample
        if previous is None or sample.host is None or previous.host is None or sample.time <= previous.time:
            return 0.0
        before = {e.zone: e.joules for e in previous.host.cpu_energy}
        joules = sum(
            e.joules - before[e.zone]
            for e in sample.host.cpu_energy
            if e.zone in before and e.zone.startswith("package")
        )
        return max(joules, 0.0) / (sample.time - previous.time)

    # --- evaluation ----------------------------------------------------------------------
    def evaluate(self, sample: Sample, now: float) -> list[Transition]:
        """Take in a new sample (each once, oldest first) and evaluate every rule on it at ``now``."""
        if self._latest is not None and self._latest[0] is sample:
            entities = self._latest[1]  # the same sample again, at a later time
        else:
            self._count_events(sample)
            entities = self.entities(sample, complete=False)
            self._track(entities, sample.time)
            self._latest = (sample, entities)
            self._previous_sample = sample
            self._seen_sensors |= {
                (e["sensor_kind"], e["sensor"]) for k, e in entities.items() if k[0] == "sensor" and e["present"]
            }
        by_kind: dict[str, list[tuple[tuple, dict, _History]]] = {}
        series, ever_max, kinds = self._series, self._ever_max, self._kinds
        for key, values in entities.items():
            if key[0] in kinds:
                by_kind.setdefault(key[0], []).append(
                    (key, values, _History(series, ever_max.get(key), key, now, self._extremes))
                )
        alerts = self.alerts
        alerted = {key for _, key in alerts}
        steps = []
        for kind, conditions, rules in self._batches:  # each kind's conditions, compiled together, per entity
            for key, values, history in by_kind.get(kind, ()):
                held = conditions(values, history)  # what the values lack is unknown
                if key not in alerted and not any(held):
                    continue  # the common case: nothing fires, nothing to resolve
                for (order, rule), condition in zip(rules, held, strict=True):
                    if condition or (rule.name, key) in alerts:
                        steps.append((order, rule, key, history, condition))
        stepped: list[tuple[Alert, Transition]] = []
        steps.sort(key=lambda step: step[0])  # in rule order, each rule's entities in order
        for _, rule, key, history, condition in steps:
            before = alerts.get((rule.name, key))
            try:
                for t in self._step(rule, key, _Complete(self, sample, key, entities[key], history), now, condition):
                    stepped.append((alerts.get((rule.name, key)) or before, t))
            except Exception as e:  # a fault in one rule stays in that rule: the others go on
                rule.failures += 1
                if rule.failures == 1:
                    log.error(
                        "rule %s failed on %s and is skipped where it fails: %s: %s",
                        rule.name,
                        key,
                        type(e).__name__,
                        e,
                    )
        return self._told(stepped, now)

    def _told(self, stepped: list[tuple[Alert, Transition]], now: float) -> list[Transition]:
        """The transitions to tell: a firing alert inhibits the rules it names on its entity."""
        # (rule name, entity, or None for all of its entities) -> the firing rule holding it back
        held: dict[tuple[str, tuple | None], str] = {}
        kinds = self._rule_kinds
        for alert in self.alerts.values():
            if alert.state == "firing":
                for target in alert.rule.inhibits:
                    held.setdefault((target, _held_entity(alert.key, kinds[target])), alert.name)
        told = []
        for alert, t in stepped:
            if t.status == "firing":
                alert.announced = (alert.name, alert.key) not in held and (alert.name, None) not in held
                if alert.announced:
                    told.append(t)
            elif alert.announced:  # resolved: told only if its firing was
                alert.announced = False
                told.append(t)
        for alert in self.alerts.values():
            if alert.state != "firing":
                continue
            by = held.get((alert.name, alert.key)) or held.get((alert.name, None))
            if by is not None and alert.announced:
                alert.announced = False
                told.append(self._transition(alert, "resolved", now, reason=f"superseded by {by}"))
            elif by is None and not alert.announced:
                alert.announced = True
                told.append(self._transition(alert, "firing", now))
        return told

    def _track(self, entities: dict[tuple, dict], time: float) -> None:
        """Append the newest values of the variables history functions use; keep for each a
        reset-corrected running total (so increase() is a subtraction) and the largest value."""
        all_series, tracked, averaged, keep = self._series, self._tracked_by_kind, self._averaged, self._keep
        for key, values in entities.items():
            kind = key[0]
            names = tracked.get(kind)
            if not names:
                continue
            ever = self._ever_max.get(key)
            if ever is None:
                ever = self._ever_max[key] = {}
                if kind == "gpu_fan" and self._remembered_best:
                    best = self._remembered_best.get((values.get("uuid"), values.get("fan")))
                    if best is not None:
                        ever[BEST_FAN_VAR] = best
            for var in names:
                value = values.get(var)
                if value is None:
                    continue
                value = float(value)
                series = all_series.get((key, var))
                if series is None:
                    series = all_series[(key, var)] = (array("d"), array("d"), array("d"))
                times, vals, counted = series
                if len(vals) >= 2 and vals[-1] == value == vals[-2] and (kind, var) not in averaged:
                    times[-1] = time  # the run goes on: its latest point moves, nothing is added
                elif vals:
                    previous = vals[-1]
                    counted.append(counted[-1] + (value - previous if value >= previous else value))
                    times.append(time)
                    vals.append(value)
                else:
                    counted.append(0.0)
                    times.append(time)
                    vals.append(value)
                if value > ever.get(var, -math.inf):
                    ever[var] = value
                horizon = time - keep[(kind, var)]
                if times[0] < horizon:  # forget what no window reaches
                    cut = bisect.bisect_left(times, horizon)
                    del times[:cut], vals[:cut], counted[:cut]

    def _count_events(self, sample: Sample) -> None:
        for event in sample.events:
            self._xid_totals[event.gpu_index] = self._xid_totals.get(event.gpu_index, 0) + 1
            self._last_xid[event.gpu_index] = event.xid

    def names(self, key: tuple, values: dict, history: _History) -> dict[str, Any]:
        """Everything an expression sees for one entity, in one dict (for an alert's step and
        its texts): its variables (None where the entity lacks one: unknown) and its history,
        ``_h``, for increase(), rate()…"""
        names = self._unknown[key[0]].copy()
        names.update(values)
        names["_h"] = history
        return names

    def _step(self, rule: Rule, key: tuple, entity: _Complete, now: float, condition: Any) -> list[Transition]:
        alert_key = (rule.name, key)
        alert = self.alerts.get(alert_key)
        if alert is None:
            if not condition:
                return []
            labels = {label: str(entity.values.get(label, "")) for label in LABELS[rule.kind]}
            alert = self.alerts[alert_key] = Alert(rule, key, labels, active_since=now)
        if rule.clear is not None and alert.state == "firing":
            cleared = rule.clear.evaluate(entity.names)
            if cleared is None and condition:
                cleared = False  # the clear condition cannot tell, but the alert's condition still holds
        else:
            cleared = None if condition is None else not condition
        if cleared is None:
            alert.unknown_since = alert.unknown_since if alert.unknown_since is not None else now
            if now - alert.unknown_since < max(rule.for_seconds, self.unknown_timeout):
                return []
            del self.alerts[alert_key]
            if alert.state == "pending":
                return []
            return [
                self._transition(
                    alert,
                    "resolved",
                    now,
                    reason=f"condition no longer evaluable for {now - alert.unknown_since:.0f} s",
                )
            ]
        alert.unknown_since = None
        if alert.state == "pending":
            if cleared:
                del self.alerts[alert_key]
                return []
            if now - alert.active_since >= rule.for_seconds:
                alert.state, alert.fired_at = "firing", now
                self._describe(alert, entity.names)
                return [self._transition(alert, "firing", now)]
            return []
        if cleared:
            del self.alerts[alert_key]
            return [self._transition(alert, "resolved", now)]
        if condition:
            self._describe(alert, entity.names)  # keep the values current for status and reminders
        return []

    def _describe(self, alert: Alert, names: dict) -> None:
        context = names.copy()
        del context["_h"]  # the one name of names() that is no variable
        context.update(alert.rule.params)
        ever = self._ever_max.get(alert.key, {})
        context.update({f"ever_max_{k}": v for k, v in ever.items()})
        context["for_seconds"] = alert.rule.for_seconds
        for old, new in DEPRECATED.get(alert.rule.kind, {}).items():  # templates written for the old names
            context.setdefault(old, context.get(new))
        for name, expression in alert.rule.values.items():
            context[name] = expression.evaluate(names)
        context["xid_meaning"] = xid_meaning(names.get("last_xid"))
        context["remap_state"] = (
            "failed"
            if names.get("remap_failure")
            else "pending: a GPU reset is needed"
            if names.get("remap_pending")
            else ""
        )
        alert.context = context
        alert.summary = _render_again(alert, alert.rule.spec.summary, context)
        alert.description = _render_again(alert, alert.rule.spec.description, context)

    def _transition(self, alert: Alert, status: str, now: float, reason: str = "") -> Transition:
        description = f"{alert.description} (resolved: {reason})".lstrip() if reason else alert.description
        return Transition(
            status=status,
            alertname=alert.name,
            severity=alert.severity,
            labels=dict(alert.labels),
            summary=alert.summary,
            description=description,
            hint=hint_of(alert),
            starts_at=alert.fired_at or alert.active_since,
            ends_at=now if status == "resolved" else None,
            time=now,
            values=dict(alert.values),
            reason=reason,
            headline=alert.rule.spec.headline,
        )

    def resolved(self, alert: Alert, now: float, reason: str) -> Transition:
        """A firing alert resolved for ``reason`` (its rule changed): the caller has let it go."""
        return self._transition(alert, "resolved", now, reason=reason)

    def adopt(
        self,
        rule: Rule,
        key: tuple,
        labels: dict[str, str],
        active_since: float,
        state: str,
        fired_at: float | None,
        summary: str,
        description: str,
        announced: bool = True,
    ) -> Alert:
        """An alert carried over a reload, as it was: its next evaluation goes on from there."""
        if state not in ("pending", "firing"):
            raise ValueError(f"not an alert state: {state!r}")
        alert = Alert(
            rule,
            key,
            labels,
            active_since=active_since,
            state=state,
            fired_at=float(fired_at) if fired_at is not None else None,
            summary=summary,
            description=description,
            announced=state == "firing" and announced,
        )
        self.alerts[(rule.name, key)] = alert
        return alert

    def transition_of(self, alert: Alert, now: float) -> Transition:
        """A firing alert as a transition, for reminders."""
        return self._transition(alert, "firing", now)

    def firing(self) -> list[Alert]:
        out = [a for a in self.alerts.values() if a.state == "firing" and a.announced]
        return sorted(out, key=lambda a: (-SEVERITY_RANK[a.severity], a.name, a.subject))


def _expected_key(name: str) -> tuple[str, str]:
    if name.upper() == "NVML":
        return NVML_SENSOR
    kind, _, rest = name.partition(":")
    if rest and kind in ("fan", "temperature"):
        return (kind, rest)
    return ("fan", name)
