"""What a reading can mean: the ranges beside the table of readings, and the check every sample
passes before anything downstream sees it.

NVML, hwmon, /proc, a recording and the history file are input like any other: a temperature of
2**53, an infinite fan speed or a negative power is no reading of hardware. Such a value is
*invalid*: the check makes it None (a record whose one value it is, a sensor or a fan, is left
out), so it is not exported, charted, stored or alerted on as a value; it is counted in
``rigmon_readings_invalid_total{reading}`` and logged once per series.

A range is a unit's (``UNIT_RANGES``) unless the reading has its own (``READING_RANGES``).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .readings import READINGS
from .sample import (
    CpuEnergy,
    CpuTemperature,
    Electrical,
    FanControl,
    FanReading,
    GpuInfo,
    GpuProcess,
    GpuReading,
    HostReading,
    Sample,
    SensorTemperature,
)
from .text import printable

if TYPE_CHECKING:
    from prometheus_client.core import Metric

log = logging.getLogger(__name__)

# (lowest, highest) a value in this unit can mean on any box; both ends included
UNIT_RANGES: dict[str, tuple[float, float]] = {
    "celsius": (-70.0, 250.0),
    "watts": (0.0, 100_000.0),  # a GPU, a PSU, a whole box: 100 kW is none of them
    "joules": (0.0, 1e15),  # energy since the driver loaded: 100 kW for 300 years
    "hertz": (0.0, 1e11),
    "bytes": (0.0, 2.0**50),  # memory and throughput per second alike: a PiB is no box's
    "ratio": (0.0, 1.0),
    "rpm": (0.0, 100_000.0),
    "count": (0.0, 2.0**53),
    "seconds": (0.0, 1e13),
    "volts": (-1000.0, 1000.0),
    "amperes": (-1000.0, 1000.0),
    "bool": (0.0, 1.0),
}
# readings whose hardware gives a narrower or wider range than their unit's
READING_RANGES: dict[tuple[str, str], tuple[float, float]] = {
    ("gpu", "performance_state"): (0.0, 32.0),
    ("gpu", "pcie_generation"): (0.0, 16.0),
    ("gpu", "pcie_width"): (0.0, 64.0),
    ("gpu", "max_pcie_generation"): (0.0, 16.0),
    ("gpu", "gpu_max_pcie_generation"): (0.0, 16.0),
    ("gpu", "max_pcie_width"): (0.0, 64.0),
    ("gpu_fan", "speed_ratio"): (0.0, 10.0),  # NVML's intended speed may pass 100 %
    ("gpu_fan", "target_speed_ratio"): (0.0, 10.0),
    ("gpu_process", "sm_ratio"): (0.0, 1.0),
    ("host", "load1"): (0.0, 1e6),
    ("host", "load5"): (0.0, 1e6),
    ("host", "load15"): (0.0, 1e6),
    ("fan_control", "pwm_mode"): (0.0, 255.0),
}


def range_of(entity: str, name: str, unit: str) -> tuple[float, float]:
    return READING_RANGES.get((entity, name)) or UNIT_RANGES.get(unit, (-math.inf, math.inf))


def reading_range(entity: str, name: str) -> tuple[float, float] | None:
    """What the reading ``name`` of ``entity`` can mean; None where the table has no such reading."""
    unit = next((r.unit for r in READINGS if r.entity == entity and r.name == name), None)
    return range_of(entity, name, unit) if unit is not None else None


def _fields(record: type[Any], entity: str, root: str) -> tuple[tuple[int, str, float, float], ...]:
    """(field index, reading name, lowest, highest) of each field of ``record`` that a reading
    of ``entity`` reads as ``root.field``."""
    out = []
    for r in READINGS:
        if r.entity != entity or not isinstance(r.get, str) or r.unit == "text":
            continue
        parts = r.get.split(".")
        if len(parts) == 2 and parts[0] == root and parts[1] in record._fields:
            lo, hi = range_of(entity, r.name, r.unit)
            out.append((record._fields.index(parts[1]), r.name, lo, hi))
    return tuple(out)


def _nested(entity: str, root: str, attribute: str, record: type[Any]) -> tuple[tuple[int, str, float, float], ...]:
    """The same for a record held in ``root.attribute`` (``g.ecc_errors.corrected_volatile``)."""
    out = []
    for r in READINGS:
        if (
            r.entity == entity
            and isinstance(r.get, str)
            and r.get.startswith(f"{root}.{attribute}.")
            and r.unit not in ("text", "bool")
        ):
            field = r.get.split(".")[2]
            lo, hi = range_of(entity, r.name, r.unit)
            out.append((record._fields.index(field), r.name, lo, hi))
    return tuple(out)


class _Spec:
    """What to check in one kind of record, worked out once from the tables."""

    def __init__(self) -> None:
        from .sample import EccCounts, RemappedRows, RetiredPages, TemperatureThresholds, ThrottleSeconds

        self.gpu = Checks(_fields(GpuReading, "gpu", "g"))
        self.gpu_nested = tuple(
            (GpuReading._fields.index(attr), Checks(_nested("gpu", "g", attr, rec)))
            for attr, rec in (
                ("throttle_seconds", ThrottleSeconds),
                ("ecc_errors", EccCounts),
                ("remapped_rows", RemappedRows),
                ("retired_pages", RetiredPages),
            )
        )
        fan = {
            "fan_speed_ratios": "speed_ratio",
            "fan_target_ratios": "target_speed_ratio",
            "fan_speed_rpm": "speed_rpm",
        }
        self.gpu_fans = tuple(
            (GpuReading._fields.index(field), name, *(reading_range("gpu_fan", name) or (0.0, 0.0)))
            for field, name in fan.items()
        )
        self.processes = GpuReading._fields.index("processes")
        self.process = Checks(
            (
                (1, "memory_bytes", *UNIT_RANGES["bytes"]),
                (2, "sm_ratio", *range_of("gpu_process", "sm_ratio", "ratio")),
            )
        )
        self.info = Checks(_fields(GpuInfo, "gpu", "i"))
        self.thresholds = (
            GpuInfo._fields.index("temperature_thresholds"),
            Checks(_nested("gpu", "i", "temperature_thresholds", TemperatureThresholds)),
        )
        # the host's own readings, and the CPU utilisation the cpu kind reads from it too: each once
        self.host = Checks(dict.fromkeys(_fields(HostReading, "host", "h") + _fields(HostReading, "cpu", "h")))
        # host records: (HostReading field, its checks, the field a record is nothing without)
        records = (
            ("cpu_temperatures", CpuTemperature, "cpu", "celsius"),
            ("temperatures", SensorTemperature, "temperature", "celsius"),
            ("fans", FanReading, "fan", "rpm"),
            ("fan_controls", FanControl, "fan_control", None),
            ("voltages", Electrical, "voltage", "value"),
            ("powers", Electrical, "power_input", "value"),
            ("currents", Electrical, "current_input", "value"),
            ("cpu_energy", CpuEnergy, "cpu_energy", "joules"),
        )
        self.records = tuple(
            (
                HostReading._fields.index(field),
                Checks(_fields(record, entity, "r") + (_limits(record) if record is SensorTemperature else ())),
                record._fields.index(main) if main else None,
            )
            for field, record, entity, main in records
        )


def _limits(record: type[Any]) -> tuple[tuple[int, str, float, float], ...]:
    lo, hi = UNIT_RANGES["celsius"]
    return (
        (record._fields.index("high_celsius"), "high_celsius", lo, hi),
        (record._fields.index("critical_celsius"), "critical_celsius", lo, hi),
    )


_SPEC: _Spec | None = None


class Checks(tuple[tuple[int, str, float, float], ...]):
    """(field index, reading, lowest, highest) of each checked field of one kind of record, and
    ``passes``: the common case (every value None or in its range) tested in one compiled
    expression, not a loop a poll."""

    passes: Callable[[Sequence[Any]], bool]

    def __new__(cls, checks: Iterable[tuple[int, str, float, float]]) -> Checks:
        self = super().__new__(cls, checks)
        bounds: dict[str, Any] = {}
        terms = []
        for n, (index, _, lo, hi) in enumerate(self):
            bounds[f"lo{n}"], bounds[f"hi{n}"] = lo, hi
            terms.append(f"((v := r[{int(index)}]) is None or lo{n} <= v <= hi{n})")  # NaN fails both
        self.passes = eval("lambda r: " + (" and ".join(terms) or "True"), bounds)  # the tables' own indices
        return self


def _bad(record: Sequence[Any], checks: Checks) -> list[tuple[int, str]] | None:
    """The checks ``record`` fails: (field index, reading) each; None when it passes them all."""
    if checks.passes(record):
        return None
    bad: list[tuple[int, str]] | None = None
    for index, name, lo, hi in checks:
        v = record[index]
        if v is not None and not (lo <= v <= hi):  # NaN fails both
            if bad is None:
                bad = []
            bad.append((index, name))
    return bad


def _cleared(record: Any, bad: list[tuple[int, str]]) -> Any:
    values = list(record)
    for index, _ in bad:
        values[index] = None
    return type(record)(*values)


class Invalid:
    """Counts what the check threw out, by reading, and logs each series the first time; also a
    collector (``rigmon_readings_invalid_total``). Bounded: at most MAX_TOLD series are
    remembered as told."""

    MAX_TOLD = 4096

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._told: set[tuple[object, ...]] = set()
        self._lock = threading.Lock()
        self._info_in: tuple[GpuInfo, ...] | None = None
        self._info_out: tuple[GpuInfo, ...] | None = None

    def note(self, reading: str, series: tuple[object, ...], value: object, where: str = "", count: int = 1) -> None:
        with self._lock:
            self.counts[reading] += count
            key = (reading, *series)
            if key in self._told or len(self._told) >= self.MAX_TOLD:
                return
            self._told.add(key)
        shown = printable(repr(value))[:40]
        log.warning(
            "invalid reading ignored: %s of %s is %s, outside what it can mean%s",
            reading,
            printable("/".join(str(s) for s in series))[:120] or "the host",
            shown,
            where,
        )

    def check(self, sample: Sample) -> Sample:
        """The sample with every invalid value made None (or its record left out)."""
        global _SPEC
        spec = _SPEC = _SPEC or _Spec()
        gpus = sample.gpus
        changed: dict[str, Any] = {}
        out: list[GpuReading] | None = None
        for n, g in enumerate(gpus):
            if g.lost:
                continue
            new = g
            bad = _bad(g, spec.gpu)
            if bad:
                for i, name in bad:
                    self.note(name, ("gpu", g.index), g[i])
                new = _cleared(new, bad)
            for index, checks in spec.gpu_nested:
                inner = g[index]
                if inner is not None and checks:
                    bad = _bad(inner, checks)
                    if bad:
                        for i, name in bad:
                            self.note(name, ("gpu", g.index), inner[i])
                        new = new._replace(**{g._fields[index]: _cleared(inner, bad)})
            for index, name, lo, hi in spec.gpu_fans:
                fans = g[index]
                if fans and not all(v is None or lo <= v <= hi for v in fans):
                    for k, v in enumerate(fans):
                        if v is not None and not (lo <= v <= hi):
                            self.note(name, ("gpu", g.index, "fan", k), v)
                    new = new._replace(
                        **{g._fields[index]: tuple(v if v is None or lo <= v <= hi else None for v in fans)}
                    )
            processes = g[spec.processes]
            if processes:
                kept: list[GpuProcess] = []
                for p in processes:
                    bad = _bad(p, spec.process)
                    if bad:
                        for i, name in bad:
                            self.note(name, ("gpu", g.index, "pid", p.pid), p[i])
                        p = _cleared(p, bad)
                    kept.append(p)
                if kept != list(processes):
                    new = new._replace(processes=tuple(kept))
            if new is not g:
                if out is None:
                    out = list(gpus)
                out[n] = new
        if out is not None:
            changed["gpus"] = tuple(out)
        info = self._info(sample.gpu_info, spec)
        if info is not sample.gpu_info:
            changed["gpu_info"] = info
        host = sample.host
        if host is not None:
            checked = self._host(host, spec)
            if checked is not host:
                changed["host"] = checked
        return sample._replace(**changed) if changed else sample

    def _info(self, infos: tuple[GpuInfo, ...], spec: _Spec) -> tuple[GpuInfo, ...]:
        """GpuInfo is read once: checked once, the same answer after (a poller may hand the
        same records in a new tuple)."""
        if self._info_out is not None and (infos is self._info_in or infos == self._info_in):
            return infos if self._info_out is self._info_in else self._info_out  # whole: as handed in
        out: list[GpuInfo] = []
        for i in infos:
            bad = _bad(i, spec.info)
            if bad:
                for k, name in bad:
                    self.note(name, ("gpu", i.index), i[k])
                i = _cleared(i, bad)
            index, checks = spec.thresholds
            inner: Any = i[index]
            if inner is not None:
                bad = _bad(inner, checks)
                if bad:
                    for k, name in bad:
                        self.note(name, ("gpu", i.index), inner[k])
                    i = i._replace(temperature_thresholds=_cleared(inner, bad))
            out.append(i)
        result = infos if all(a is b for a, b in zip(out, infos, strict=True)) else tuple(out)
        self._info_in, self._info_out = infos, result
        return result

    def _host(self, h: HostReading, spec: _Spec) -> HostReading:
        new = h
        bad = _bad(h, spec.host)
        if bad:
            for k, name in bad:
                self.note(name, ("host",), h[k])
            new = _cleared(h, bad)
        for field, checks, main in spec.records:
            records: Any = h[field]
            if not records:
                continue
            kept_records: list[Any] = []
            touched = False
            for r in records:
                bad = _bad(r, checks)
                if bad:
                    touched = True
                    series = (h._fields[field], *(x for x in r if isinstance(x, str)))
                    for k, name in bad:
                        self.note(name, series, r[k])
                    if any(k == main for k, _ in bad):
                        continue  # the record's own value: no record
                    r = _cleared(r, bad)
                kept_records.append(r)
            if touched:
                kept: dict[str, Any] = {h._fields[field]: tuple(kept_records)}
                new = new._replace(**kept)
        return new

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(
            "rigmon_readings_invalid",
            "Readings ignored as outside what they can mean (non-finite, out of range), by reading.",
            labels=["reading"],
        )
        with self._lock:
            counts = sorted(self.counts.items())
        for name, count in counts:
            family.add_metric([name], count)
        yield family
