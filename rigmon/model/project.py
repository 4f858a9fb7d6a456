"""A sample projected through the table of readings: the code each per-poll output runs, generated.

From ``rigmon.model.readings`` this module writes straight-line Python for each output read at
every poll (the Prometheus families, the InfluxDB lines, the alert engine's variables) and
compiles it the first time that output asks: per poll there is no loop over the table, no
``getattr`` by name, one attribute access per value. ``tests/bench/bench_generated.py`` holds
each against plain closures over the same table (same output, 8 GPUs, rich scenario): the
closures take 1.7× the CPU for the Prometheus families (265 µs a poll against 157), 3.1× for
the InfluxDB lines (392 against 126) and 2.8× for the alert variables (182 against 65). What
runs once a second or less (the burn-in's ticks, a GPU's ``gpu_info`` fields) uses those
closures (``getter``). ``python -m rigmon.model.project`` prints the generated code.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from . import generated
from .readings import ENTITIES, FAMILIES, READINGS, Family, Reading
from .text import printable

if TYPE_CHECKING:
    from .sample import GpuInfo, GpuReading, Sample, SensorTemperature

Generated = Callable[..., Any]  # a function written from the table and compiled (SOURCES has its code)
SOURCES: dict[str, str] = {}  # each generated function's code, by name (python -m rigmon.model.project)

_NEVER_NONE = {"g", "s", "r", "f"}  # roots that are always there; everything else may be None


class GpuFan:
    """One fan of a GPU, as the table's ``gpu_fan`` readings see it."""

    __slots__ = ("speed_ratio", "target_speed_ratio", "speed_rpm")

    def __init__(self, speed_ratio: float | None, target_speed_ratio: float | None, speed_rpm: float | None):
        self.speed_ratio, self.target_speed_ratio, self.speed_rpm = speed_ratio, target_speed_ratio, speed_rpm


def gpu_fans(g: GpuReading) -> list[GpuFan]:
    speeds, targets, rpms = g.fan_speed_ratios or (), g.fan_target_ratios or (), g.fan_speed_rpm or ()
    return [
        GpuFan(
            speeds[n] if n < len(speeds) else None,
            targets[n] if n < len(targets) else None,
            rpms[n] if n < len(rpms) else None,
        )
        for n in range(max(len(speeds), len(targets), len(rpms)))
    ]


def unique_temperatures(temperatures: Iterable[SensorTemperature]) -> Iterator[SensorTemperature]:
    """hwmon temperatures, one per (chip, device, label): two sockets repeat a label ("Core 0")
    and stay two where the device tells them apart; where it does not, the first one stands."""
    seen: set[tuple[str, str | None, str]] = set()
    for t in temperatures:
        key = (t.chip, t.device, t.label)
        if key not in seen:
            seen.add(key)
            yield t


_ARGS = {"gpu": ("g", "i", "s"), "gpu_fan": ("f", "g", "s"), "host": ("s", "h")}


def getter(reading: Reading) -> Callable[[dict[str, Any]], object]:
    """get(env) -> the reading's value, a plain closure over its table entry: ``env`` holds the
    roots by name (``g``, ``i``, ``s``, ``h``, ``f``, ``r``), and a None along the path is None.
    What the outputs read once a poll or less uses these; the per-poll outputs run generated code
    where ``tests/bench/bench_generated.py`` shows it pays."""
    get = reading.get
    if callable(get):
        fn, names = get, _ARGS.get(reading.entity, ("r", "h"))
        return lambda env: fn(*(env.get(n) for n in names))
    root, *attrs = _path(reading)

    def value(env: dict[str, Any]) -> object:
        v = env.get(root)
        for attr in attrs:
            if v is None:
                return None
            v = getattr(v, attr)
        return v

    return value


def label_text(value: object) -> str:
    """A reading's value as a label: "" for none, 1/0 for a bool, a whole number without its point."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def _path(reading: Reading) -> list[str]:
    """A reading's ``get`` as its root and attributes ("g.power_watts")."""
    if not isinstance(reading.get, str):
        raise ValueError(f"{reading.name}: no path to read")
    return reading.get.split(".")


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, object] = {
            "_gpu_fans": gpu_fans,
            "_unique": unique_temperatures,
            "_process_series": process_series,
            "_label": label_text,
        }
        self._temps = 0

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def value(self, reading: Reading) -> str:
        """An expression for the reading's value, None-safe along its path."""
        get = reading.get
        if callable(get):
            key = f"_fn_{len(self.names)}"
            self.names[key] = get
            args = {"gpu": "g, i, s", "gpu_fan": "f, g, s", "host": "s, h"}.get(reading.entity, "r, h")
            return f"{key}({args})"
        root, *attrs = _path(reading)
        expr = root
        nullable = root not in _NEVER_NONE
        for attr in attrs:
            if nullable:
                self._temps += 1
                tmp = f"_t{self._temps}"
                expr = f"(None if ({tmp} := {expr}) is None else {tmp}.{attr})"
            else:
                expr = f"{expr}.{attr}"
            nullable = True
        return expr

    def assign(self, depth: int, target: str, readings: Iterable[Reading]) -> None:
        """target["name"] = value, one line a reading."""
        for r in readings:
            self.emit(depth, f"{target}[{r.name!r}] = {self.value(r)}")

    def compile(self, name: str) -> Generated:
        source = "\n".join(self.lines)
        namespace = dict(self.names)
        exec(generated.compiled(source, f"<rigmon.model.project {name}>"), namespace)  # our own table, not input
        fn = namespace[name]
        SOURCES[name] = source
        return fn  # type: ignore[return-value]  # what exec made: a function of the source above


# Where each host-side entity's records are, and its label values (in Entity order; "" where
# unknown: Prometheus reads an empty label as none, the InfluxDB point leaves the tag out).
_HOST_LOOPS = {
    "cpu": ("h.cpu_temperatures", "[str(r.socket), r.chip, r.sensor]"),
    "temperature": ("_unique(h.temperatures)", "[r.chip, r.label, r.device or '']"),
    "fan": ("h.fans", "[r.chip, r.label, r.device or '']"),
    "fan_control": ("h.fan_controls", "[r.chip, r.fan, r.device]"),
    "cpu_energy": ("h.cpu_energy", "[r.zone]"),
    "voltage": ("h.voltages", "[r.chip, r.sensor, r.device]"),
    "power_input": ("h.powers", "[r.chip, r.sensor, r.device]"),
    "current_input": ("h.currents", "[r.chip, r.sensor, r.device]"),
}


# A MIG instance's labels after its GPU's (gpu_mig's, in Entity order)
_MIG_LABELS = "[gi, gu, str(r.gpu_instance), '' if r.compute_instance is None else str(r.compute_instance), r.profile]"


class ProcessSeries:
    """One of the top GPU processes, as the gpu_process readings see it."""

    __slots__ = ("gpu", "uuid", "pid", "user", "job", "memory_bytes", "sm_ratio")

    def __init__(
        self, gpu: str, uuid: str, pid: str, user: str, job: str, memory_bytes: int | None, sm_ratio: float | None
    ):
        self.gpu, self.uuid, self.pid, self.user, self.job = gpu, uuid, pid, user, job
        self.memory_bytes, self.sm_ratio = memory_bytes, sm_ratio


def process_series(s: Sample, count: int) -> list[ProcessSeries]:
    """The ``count`` GPU processes holding the most device memory, across the GPUs: bounded
    series, never one per short-lived PID."""
    if count <= 0:
        return []
    who = {p.pid: p for p in s.processes}
    held = [(p.used_memory_bytes, g, p) for g in s.gpus for p in g.processes or ()]
    held.sort(key=lambda x: -(x[0] or 0))  # where NVML gives no memory (WSL), it is unknown: not 0
    out: list[ProcessSeries] = []
    for memory, g, p in held[:count]:
        info = who.get(p.pid)
        out.append(
            ProcessSeries(
                str(g.index),
                g.uuid,
                str(p.pid),
                (info.user if info else None) or "",
                (info.job if info else None) or "",
                memory,
                p.sm_ratio,
            )
        )
    return out


def _family(r: Reading) -> str:
    """The name of the reading's Prometheus family (the table names each by then)."""
    family = r.family
    if isinstance(family, Family):
        return family.name
    return family or ""


def _gpu_parts(entity: str, **flags: bool) -> tuple[list[Reading], list[Reading], list[Reading]]:
    """A GPU entity's readings split by when they are read: always, every poll of a GPU that
    answers, and from its start-up facts."""
    rs = [
        r
        for r in READINGS
        if r.entity == entity and r.get is not None and all(getattr(r, k) == v for k, v in flags.items())
    ]
    return ([r for r in rs if r.always], [r for r in rs if not r.always and not r.static], [r for r in rs if r.static])


# --- Prometheus -----------------------------------------------------------------------------------
def _prometheus() -> Generated:
    """fill(sample, families, process_series): add every reading's sample to its family (a dict
    by name), with the top ``process_series`` GPU processes."""
    w = _Writer()
    fams = {name: f"_F{n}" for n, name in enumerate(FAMILIES)}
    w.emit(0, "def fill(s, families, process_series=0):")
    for name, local in fams.items():
        w.emit(1, f"{local} = families[{name!r}].add_metric")

    def add(depth: int, r: Reading, labels: str) -> None:
        w.emit(depth, f"v = {w.value(r)}")
        parts = ([labels] if labels else []) + [repr(label) for label in r.labels]
        value = "int(v)" if r.unit == "bool" else "v"
        labels = f"({', '.join(parts)},)" if parts else "()"
        present = "v" if FAMILIES[_family(r)].sparse else "v is not None"
        w.emit(depth, f"if {present}: {fams[_family(r)]}({labels}, {value})")

    def settings(depth: int, family: Family, rs: list[Reading]) -> None:
        """An info family: one series a GPU, each of its readings a label (in the family's order)."""
        by_label = {r.labels[0]: r for r in rs}
        if set(by_label) != set(family.labels) or len(rs) != len(family.labels):
            raise ValueError(f"{family.name}: each label is one reading's")
        values = ", ".join(f"_label({w.value(by_label[label])})" for label in family.labels)
        w.emit(depth, f"{fams[family.name]}((gi, gu, {values}), 1)")

    always, polled, static = _gpu_parts("gpu")
    fan = [r for r in READINGS if r.entity == "gpu_fan" and r.family and r.get is not None]
    w.emit(1, "h = s.host")
    w.emit(1, "info = {x.index: x for x in s.gpu_info}")
    w.emit(1, "for g in s.gpus:")
    w.emit(2, "gi, gu = str(g.index), g.uuid")
    w.emit(2, "i = info.get(g.index)")
    for r in always:
        if r.family:
            add(2, r, "gi, gu")
    w.emit(2, "if g.lost: continue")
    for r in polled:
        if r.family:
            add(2, r, "gi, gu")
    w.emit(2, "for n, f in enumerate(_gpu_fans(g)):")
    w.emit(3, "fn = str(n)")
    for r in fan:
        add(3, r, "gi, gu, fn")
    mig = [r for r in READINGS if r.entity == "gpu_mig" and r.family]
    w.emit(2, "for r in g.mig_instances or ():")
    w.emit(3, f"labels = {_MIG_LABELS}")
    for r in mig:
        add(3, r, "*labels")
    w.emit(2, "if i is not None:")
    for r in static:
        if r.family and FAMILIES[_family(r)].type != "info":
            add(3, r, "gi, gu")
    for family in FAMILIES.values():
        if family.type == "info":
            settings(3, family, [r for r in static if _family(r) == family.name])
    w.emit(2, "pass")
    for r in READINGS:
        if r.entity == "host" and r.family and FAMILIES[_family(r)].group == "gpu":
            add(1, r, "")
    rs = [r for r in READINGS if r.entity == "gpu_process" and r.family]
    w.emit(1, "for r in _process_series(s, process_series):")
    w.emit(2, "labels = [r.gpu, r.uuid, r.pid, r.user, r.job]")
    for r in rs:
        add(2, r, "*labels")
    w.emit(1, "if h is None: return")
    for entity, (records, labels) in _HOST_LOOPS.items():
        rs = [r for r in READINGS if r.entity == entity and r.family]
        if rs:
            w.emit(1, f"for r in {records}:")
            w.emit(2, f"labels = {labels}")
            for r in rs:
                add(2, r, "*labels")
    for r in READINGS:
        if r.entity == "host" and r.family and FAMILIES[_family(r)].group == "host":
            add(1, r, "")
    return w.compile("fill")


# --- InfluxDB -------------------------------------------------------------------------------------
def influx_tag(value: object) -> str:
    """A measurement, tag key, tag value or field key, escaped for line protocol ("_" for empty).

    InfluxDB keeps a backslash in a tag as it is (``\\\\`` would be stored doubled) and knows
    no escape for a newline, nor for a backslash before ``,``, ``=``, a space or the end: the
    text is made printable first (a newline is ``\\n``), and such a backslash is written
    ``\\x5c``. What InfluxDB stores is then the printable text, character for character, but
    for such a backslash."""
    text = printable(value)
    if "\\" in text:
        text = _LONE_BACKSLASH.sub(r"\\x5c", text)
    return text.replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ") or "_"


_LONE_BACKSLASH = re.compile(r"\\(?=[,= ]|$)")


def influx_value(value: object) -> str | None:
    """A field value in line protocol, by its type; None for no value and for NaN and the
    infinities (InfluxDB rejects the whole point for one)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}i"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'


def influx_head(measurement: str, tags: Mapping[str, object]) -> str:
    """The measurement and its tags, sorted by key, as they begin a point."""
    return influx_tag(measurement) + "".join(f",{influx_tag(k)}={influx_tag(v)}" for k, v in sorted(tags.items()))


def _append_value(append: Callable[[str], None], key: str, value: object) -> None:
    text = influx_value(value)
    if text is not None:
        append(key + text)


_HEADS: dict[tuple[object, ...], str] = {}  # each point's measurement and tags, escaped once: they hardly change


def _point_head(key: tuple[object, ...], measurement: str, tags: Mapping[str, object]) -> str:
    if len(_HEADS) > 10_000:
        _HEADS.clear()
    head = _HEADS[key] = influx_head(measurement, tags)
    return head


# repr of the floats that recur (limits, clocks, whole degrees): 0.1-0.5 µs each. Bounded small:
# readings that vary fill it, slowly (on the rich replay, 4,096 took about 90 minutes, a creep
# the daemon's RSS showed for that long); 1,024 hold the recurring ones and fill within minutes
_FLOATS: dict[float, str] = {}
_FLOATS_KEPT = 1024


def _float_text(value: float) -> str:
    """repr(value), kept for the next time it comes (not for ±0.0: equal, written apart)."""
    text = repr(value)
    if value:
        if len(_FLOATS) >= _FLOATS_KEPT:
            _FLOATS.clear()
        _FLOATS[value] = text
    return text


# what the generated line-protocol code calls
_LINE_NAMES = {
    "_append": _append_value,
    "_HEADS": _HEADS,
    "_head": _point_head,
    "_floats": _FLOATS.get,
    "_float": _float_text,
}


def _fields(w: _Writer, depth: int, key: str, r: Reading) -> None:
    """a(key=value) for one reading, with its unit's usual type written inline (any other type,
    and None, NaN and the infinities, as influx_value says). ``key`` is a Python expression."""
    w.emit(depth, f"v = {w.value(r)}")
    if r.unit == "bool":
        w.emit(depth, f"if v is True: a({key} + 'true')")
        w.emit(depth, f"elif v is False: a({key} + 'false')")
    elif r.unit in ("count", "bytes"):
        w.emit(depth, f"if v.__class__ is int: a({key} + str(v) + 'i')")
    elif r.unit != "text":
        w.emit(depth, f"if v.__class__ is float and v - v == 0.0: a({key} + (_floats(v) or _float(v)))")  # finite
    else:
        w.emit(depth, f"if v is not None: _append(a, {key}, v)")
        return
    w.emit(depth, f"elif v is not None: _append(a, {key}, v)")


def _emit_head(w: _Writer, depth: int, key: str, measurement: str, tags: str) -> None:
    """head = the point's escaped measurement and tags, made once per ``key`` (expressions)."""
    w.emit(depth, f"key = {key}")
    w.emit(depth, "head = _HEADS.get(key)")
    w.emit(depth, "if head is None:")
    w.emit(depth + 1, f"head = _head(key, {measurement!r}, {tags})")
    w.emit(depth, "fields = []; a = fields.append")


def _influx() -> tuple[Generated, Generated, Generated, Generated]:
    """gpu_line(g, i, s, host, ns) → the GPU's point or None; gpu_info_fields(i, s) → dict;
    host_lines(s, h, host, ns, out) appends each host-side point; mig_lines(g, host, ns, out) a
    GPU's MIG instances' points. Generated for every poll (gpu_info_fields is a closure: it runs
    once a GPU a day)."""
    w = _Writer()
    w.names.update(_LINE_NAMES)
    always, polled, static = _gpu_parts("gpu", influx=True)
    in_gpu = [r for r in static if (r.measurement or "gpu") == "gpu"]
    w.emit(0, "def gpu_line(g, i, s, host, ns):")
    w.emit(1, "name = i.name if i is not None else ''")
    _emit_head(
        w,
        1,
        "('gpu', host, g.index, g.uuid, name)",
        "gpu",
        "{'host': host, 'gpu': str(g.index), 'uuid': g.uuid, 'name': name}",
    )
    for r in always:
        _fields(w, 1, repr(influx_tag(r.name) + "="), r)
    w.emit(1, "if not g.lost:")
    for r in polled:
        _fields(w, 2, repr(influx_tag(r.name) + "="), r)
    w.emit(2, "if i is not None:")
    for r in in_gpu:
        _fields(w, 3, repr(influx_tag(r.name) + "="), r)
    w.emit(2, "fans = _gpu_fans(g)")
    for r in READINGS:
        if r.entity == "gpu_fan" and r.influx and r.get is not None:
            w.emit(2, "for n, f in enumerate(fans):")
            _fields(w, 3, f"f'fan{{n}}_{r.name}='", r)
    w.emit(1, "return f\"{head} {','.join(fields)} {ns}\" if fields else None")
    gpu_line = w.compile("gpu_line")

    w = _Writer()
    w.names.update(_LINE_NAMES)
    w.emit(0, "def mig_lines(g, host, ns, out):")
    w.emit(1, "gi, gu = str(g.index), g.uuid")
    w.emit(1, "for r in g.mig_instances or ():")
    w.emit(2, f"labels = {_MIG_LABELS}")
    names = ENTITIES["gpu_mig"].influx_tags
    _emit_head(
        w,
        2,
        "('gpu_mig', host, *labels)",
        "gpu_mig",
        f"{{'host': host, **{{k: x for k, x in zip({names!r}, labels) if x != ''}}}}",
    )
    for r in READINGS:
        if r.entity == "gpu_mig" and r.influx:
            _fields(w, 2, repr(influx_tag(r.name) + "="), r)
    w.emit(2, "if fields: out.append(f\"{head} {','.join(fields)} {ns}\")")
    mig_lines = w.compile("mig_lines")

    info = [(r.name, getter(r)) for r in static if r.measurement == "gpu_info"]

    def info_fields(i: GpuInfo, s: Sample) -> dict[str, object]:  # once a GPU a day or at a change: a closure
        env = {"i": i, "s": s}
        return {name: get(env) for name, get in info}

    w = _Writer()
    w.names.update(_LINE_NAMES)
    w.emit(0, "def host_lines(s, h, host, ns, out):")
    for entity, (records, labels) in _HOST_LOOPS.items():
        rs = [r for r in READINGS if r.entity == entity and r.influx]
        if not rs:
            continue
        measurement, names = ENTITIES[entity].measurement, ENTITIES[entity].influx_tags
        w.emit(1, f"for r in {records}:")
        w.emit(2, f"labels = {labels}")
        _emit_head(
            w,
            2,
            f"({measurement!r}, host, *labels)",
            measurement or entity,  # an unknown label ("") is no tag
            f"{{'host': host, **{{k: x for k, x in zip({names!r}, labels) if x != ''}}}}",
        )
        for r in rs:
            _fields(w, 2, repr(influx_tag(r.name) + "="), r)
        w.emit(2, "if fields: out.append(f\"{head} {','.join(fields)} {ns}\")")
    _emit_head(w, 1, "('host', host)", "host", "{'host': host}")
    for r in READINGS:
        if r.entity == "host" and r.influx:
            _fields(w, 1, repr(influx_tag(r.name) + "="), r)
    w.emit(1, "if fields: out.append(f\"{head} {','.join(fields)} {ns}\")")
    return gpu_line, info_fields, w.compile("host_lines"), mig_lines


# --- alert entities -------------------------------------------------------------------------------
def _entities(wanted: dict[str, frozenset[str]] | None = None) -> tuple[Generated, Generated]:
    """gpu_entities(s, xid_totals, last_xids, gpu=None) and host_entities(s, kind=None):
    {(kind, ...): {variable: value}}; with ``gpu`` (an index) only that GPU's, with ``kind``
    only that kind's ("cpu", "fan", "host").

    ``wanted``: only these kinds, each with only these variables (and its labels), for code that
    reads no more: the alert engine's conditions. None: every kind, every variable."""

    def keep(kind: str, readings: Iterable[Reading]) -> list[Reading]:
        return [r for r in readings if wanted is None or r.name in wanted.get(kind, ())]

    def wants(kind: str) -> bool:
        return wanted is None or kind in wanted

    w = _Writer()
    always, polled, static = (keep("gpu", part) for part in _gpu_parts("gpu", rule=True))
    fan = keep("gpu_fan", [r for r in READINGS if r.entity == "gpu_fan" and r.rule and r.get is not None])
    w.emit(0, "def gpu_entities(s, xid_totals, last_xids, gpu=None):")
    w.emit(1, "out = {}")
    if wants("gpu") or wants("gpu_fan"):
        w.emit(1, "info = {x.index: x for x in s.gpu_info}")
        w.emit(1, "for g in s.gpus:")
        w.emit(2, "if gpu is not None and g.index != gpu: continue")
        w.emit(2, "i = info.get(g.index)")
        w.emit(2, "labels = {'gpu': str(g.index), 'uuid': g.uuid, 'name': i.name if i else ''}")
    if wants("gpu"):
        counts = {"xid_total": "xid_totals.get(g.index, 0)", "last_xid": "last_xids.get(g.index, 0)"}
        values = [f"{r.name!r}: {w.value(r)}" for r in always] + [
            f"{name!r}: {value}" for name, value in counts.items() if wanted is None or name in wanted["gpu"]
        ]
        w.emit(2, f"v = {{**labels, {', '.join(values)}}}")
        if polled:
            w.emit(2, "if not g.lost:")
            w.assign(3, "v", polled)
        if static:
            w.emit(2, "if i is not None:")
            w.assign(3, "v", static)
        w.emit(2, "out[('gpu', g.index)] = v")
    if wants("gpu_fan"):
        w.emit(2, "if g.lost: continue")
        w.emit(2, "for n, f in enumerate(_gpu_fans(g)):")
        fan_values = "".join(f", {r.name!r}: {w.value(r)}" for r in fan)
        w.emit(3, f"out[('gpu_fan', g.index, n)] = {{**labels, 'fan': str(n){fan_values}}}")
    w.emit(1, "return out")
    gpu = w.compile("gpu_entities")

    w = _Writer()
    w.emit(0, "def host_entities(s, kind=None):")
    w.emit(1, "out = {}")
    w.emit(1, "h = s.host")
    keys = {"cpu": "('cpu', r.socket)", "fan": "('fan', r.chip, r.device, r.label)"}
    for entity, key in keys.items():
        if not wants(entity):
            continue
        rs = keep(entity, [r for r in READINGS if r.entity == entity and r.rule])
        records, labels = _HOST_LOOPS[entity]
        names = ENTITIES[entity].prometheus_labels
        w.emit(1, f"if h is not None and kind in (None, {entity!r}):")
        w.emit(2, f"for r in {records}:")
        w.emit(3, f"labels = {labels}")
        entries = ", ".join(
            [f"{n!r}: labels[{k}]" for k, n in enumerate(names)] + [f"{r.name!r}: {w.value(r)}" for r in rs]
        )
        w.emit(3, f"out[{key}] = {{{entries}}}")
    if wants("host"):
        rs = keep("host", [r for r in READINGS if r.entity == "host" and r.rule])
        w.emit(1, "if kind in (None, 'host'):")
        w.emit(2, "out[('host',)] = {" + ", ".join(f"{r.name!r}: {w.value(r)}" for r in rs) + "}")
    w.emit(1, "return out")
    return gpu, w.compile("host_entities")


_ENTITY_CODE: dict[frozenset[tuple[str, frozenset[str]]], tuple[Generated, Generated]] = {}


def entities_for(wanted: dict[str, set[str]]) -> tuple[Generated, Generated]:
    """gpu_entities and host_entities that build only the ``wanted`` kinds and variables
    (generated once for each distinct ``wanted``)."""
    key = frozenset((kind, frozenset(names)) for kind, names in wanted.items())
    if key not in _ENTITY_CODE:
        _ENTITY_CODE[key] = _entities({kind: frozenset(names) for kind, names in wanted.items()})
    return _ENTITY_CODE[key]


# --- the burn-in's ticks --------------------------------------------------------------------------
def _burnin() -> Generated:
    """burnin_gpu(g, i, s) → the burn-in's dict of one GPU at one tick (once a second: a closure)."""
    _, polled, static = _gpu_parts("gpu", burnin=True)
    polled_gets = [(r.name, getter(r)) for r in polled]
    static_gets = [(r.name, getter(r)) for r in static]

    def burnin_gpu(g: GpuReading, i: GpuInfo | None, s: Sample) -> dict[str, object]:
        env: dict[str, Any] = {"g": g, "i": i, "s": s}
        d: dict[str, object] = {"lost": g.lost}
        if not g.lost:
            d.update((name, get(env)) for name, get in polled_gets)
        if i is not None:
            d.update((name, get(env)) for name, get in static_gets)
        return d

    return burnin_gpu


# Each output's code is generated when that output first asks for it (PEP 562): a one-shot
# status, which only evaluates rules, writes no Prometheus, InfluxDB or burn-in code.
_GENERATED: dict[str, Callable[[], tuple[Generated, ...]]] = {
    "fill_prometheus": lambda: (_prometheus(),),
    "influx_gpu_line influx_gpu_info_fields influx_host_lines influx_mig_lines": _influx,
    "gpu_entities host_entities": _entities,
    "burnin_gpu": lambda: (_burnin(),),
}


def __getattr__(name: str) -> Generated:
    for names, generate in _GENERATED.items():
        if name in names.split():
            globals().update(zip(names.split(), generate(), strict=True))
            made: Generated = globals()[name]
            return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Print the generated code."""
    for name in (
        "fill_prometheus",
        "influx_gpu_line",
        "influx_host_lines",
        "influx_mig_lines",
        "gpu_entities",
        "host_entities",
    ):
        __getattr__(name)
    for source in SOURCES.values():
        print(source, end="\n\n")


if __name__ == "__main__":
    main()
