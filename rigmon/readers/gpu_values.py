"""The GPU reader's answers made values: each NVML answer range-checked and in base units, and
the ``GpuReading`` built from one poll's answers by code written from the per-poll table.

Every number NVML gives is untrusted: a count past what the hardware can have, a text past
MAX_TEXT, a value that is not a number, reads as no value (None)."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from typing import Any

from ..model import generated
from ..model.polled import MEMORY_V2, POLLED, Polled
from ..model.recording import call_key
from ..model.sample import COOLING_FIELDS, GpuProcess, GpuReading, MigInstance
from ..model.text import printable
from .nvml import pynvml

log = logging.getLogger("rigmon.readers.gpu")

MHZ = 1e6

_ARGUMENTS = {MEMORY_V2: pynvml.nvmlMemory_v2}  # the table's named arguments, as pynvml takes them


def _resolved(args: tuple) -> tuple:
    return tuple(_ARGUMENTS.get(a, a) for a in args)


def _plan_name(polled: Polled) -> str:
    """A table entry's place in the plan: its first call's key (entries that share the call share it)."""
    fn, args = polled.calls[0]
    return call_key(fn, _resolved(args))


def _builder() -> Callable:
    """build(...) -> GpuReading: each field's expression by name, the tuple made in field order
    without keyword binding. Generated because it pays: per-field closures giving the same
    readings take 1.5× its CPU (45 µs a poll of 8 GPUs against 30; tests/bench/bench_generated.py)."""
    exprs = {
        "index": "d.index",
        "uuid": "d.info.uuid",
        "lost": "False",
        "energy_joules": "d.energy",
        "energy_counter_stuck": "d.energy_stuck",
        "clock_events": "events",
        "throttle_seconds": "d.throttle",
        "fan_speed_ratios": "speeds",
        "fan_target_ratios": "targets",
        "fan_speed_rpm": "rpms",
        "pcie_rx_bytes_per_second": "d.pcie_rx",
        "pcie_tx_bytes_per_second": "d.pcie_tx",
        "ecc_errors": "ecc",
        "remapped_rows": "rows",
        "retired_pages": "d.retired_pages",
        "asleep": "False if d.power_watched else None",  # where runtime power management is off: never asleep
        "processes": "procs",
        "mig_instances": "mig",
        "pcie_full_in_other_pstate": "stepped",
        **dict.fromkeys(COOLING_FIELDS, "None"),  # the cooling baselines' (readers.cooling), after the poll
    }
    for p in POLLED:
        answer = f"fields.get({p.field_id})" if p.field_id is not None else f"get({_plan_name(p)!r})"
        if p.attr:
            answer = f"_attr({answer}, {p.attr!r})"
        exprs[p.field] = f"_{p.convert}({answer})"
    missing = [f for f in GpuReading._fields if f not in exprs]
    if missing:
        raise ImportError(f"GpuReading fields without a source: {missing}")
    source = (
        "def build(d, get, fields, events, speeds, targets, rpms, ecc, rows, procs, stepped, mig):\n"
        "    return _new(_GpuReading, (" + ", ".join(exprs[f] for f in GpuReading._fields) + ",))\n"
    )
    namespace = {
        "_new": tuple.__new__,
        "_GpuReading": GpuReading,
        "_attr": _attr,
        "_watts": _watts,
        "_celsius": _celsius,
        "_hertz": _hertz,
        "_ratio": _ratio,
        "_count": _num,
    }
    exec(generated.compiled(source, "<rigmon.readers.gpu build>"), namespace)  # our own table, not input
    namespace["build"].source = source
    return namespace["build"]


def _processes(procs: Any, samples: Any) -> tuple[GpuProcess, ...] | None:
    """The compute processes with their SM share: the latest of the driver's samples per PID."""
    if not isinstance(procs, list):
        return None
    latest: dict[Any, tuple[Any, Any]] = {}
    for sample in samples if isinstance(samples, list) else ():
        pid, stamp = _attr(sample, "pid"), _num(_attr(sample, "timeStamp")) or 0
        if not (isinstance(stamp, int) or math.isfinite(stamp)):
            stamp = 0
        if pid not in latest or stamp >= latest[pid][0]:
            latest[pid] = (stamp, _attr(sample, "smUtil"))
    return tuple(
        GpuProcess(
            _attr(p, "pid"),
            _attr(p, "usedGpuMemory"),
            _ratio(latest[_attr(p, "pid")][1]) if _attr(p, "pid") in latest else None,
            _instance(getattr(p, "gpuInstanceId", None)),
            _instance(getattr(p, "computeInstanceId", None)),
        )
        for p in procs
    )


MAX_INSTANCES = 64  # MIG instances on one GPU: 7 on an H100; an id past this is not one
MAX_MEMORY = 1 << 50  # bytes: no GPU holds a PiB


def _mig(answer: Any, processes: tuple[GpuProcess, ...] | None) -> tuple[MigInstance, ...] | None:
    """The MIG instances rigmon's own call answered (``nvmlDeviceGetMigInstances``), each checked
    as any answer is, with the GPU's processes that run in it counted."""
    if not isinstance(answer, list):
        return None
    out = []
    for m in answer[:MAX_INSTANCES]:
        gpu_instance = _instance(_attr(m, "gpuInstanceId"))
        if gpu_instance is None:
            continue  # an instance without its id is no instance rigmon can name
        compute = _instance(_attr(m, "computeInstanceId"))
        used, total = _attr(m, "memoryUsed"), _attr(m, "memoryTotal")
        out.append(
            MigInstance(
                gpu_instance,
                compute,
                _text(getattr(m, "uuid", None)) or "",
                _profile(_text(getattr(m, "name", None))),
                used if used.__class__ is int and 0 <= used <= MAX_MEMORY else None,
                total if total.__class__ is int and 0 <= total <= MAX_MEMORY else None,
                None
                if processes is None
                else sum(
                    1
                    for p in processes
                    if p.gpu_instance == gpu_instance and (compute is None or p.compute_instance in (None, compute))
                ),
            )
        )
    return tuple(sorted(out, key=lambda m: (m.gpu_instance, m.compute_instance or 0)))


def _profile(name: str | None) -> str:
    """ "NVIDIA H100 80GB HBM3 MIG 3g.40gb" → "3g.40gb" (a MIG device's name ends in its profile)."""
    words = (name or "").split()
    return words[-1][:32] if len(words) >= 2 and words[-2] == "MIG" else ""


def _instance(value: Any) -> int | None:
    """A MIG instance id, None where the GPU is not in MIG mode (NVML's 0xFFFFFFFF) or it is no id."""
    return value if value.__class__ is int and 0 <= value < MAX_INSTANCES else None


def _per_fan(
    raw: dict[str, Any], fans: tuple[tuple[str, str, str], ...], which: int, divisor: int
) -> tuple[float | None, ...] | None:
    """One reading of every fan, in fan order (None where that fan did not answer); None when
    no fan answered it at all."""
    values = tuple(_num(raw.get(names[which])) for names in fans)
    values = tuple(v / divisor if v is not None else None for v in values)
    return values if any(v is not None for v in values) else None


def _text(value: Any) -> str | None:
    """A name, serial or version as text, bounded (a damaged answer can be anything)."""
    if value is None:
        return None
    text = printable(value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value))
    return text[:MAX_TEXT] if len(text) > MAX_TEXT else text


MAX_DEVICES = 64  # NVML's own limit per box
MAX_FANS = 32  # fans on one board: a handful; a count above this is a damaged answer
MAX_TEXT = 256  # characters of a name, serial, uuid or version


def _bounded(value: Any, limit: int, what: str) -> int | None:
    """A count NVML answered, or None where it cannot be one: a count sizes what a poll reads,
    and a damaged one (10**12 fans) must not size anything."""
    if value is None:
        return None
    if value.__class__ is not int or not 0 <= value <= limit:
        log.warning("%s: %r is not a count (0 to %d); taken as not read", what, value, limit)
        return None
    return value


# NVML answers numbers where these read; a replayed recording may hold anything, and a
# value of the wrong kind is "not read" (None), never an exception that takes the GPU down.
def _stepped(d: Any, generation: Any, pstate: Any) -> bool | None:
    """Whether the link was seen at the generation it should reach in another P-state than the
    one it is in now: a link that steps down with the P-state (a busy card held in P2 at Gen3
    of Gen4), not one that never trains up or one that dropped in the P-state it reached it in.
    None where the generation, the P-state or the target is not known."""
    info = d.info
    target = (info.expected_pcie_generation or info.max_pcie_generation) if info is not None else None
    if generation.__class__ is not int or pstate.__class__ is not int or not target or not 0 <= pstate <= 32:
        return None
    seen = d.link_by_pstate
    stepped = any(g >= target for p, g in seen.items() if p != pstate)
    if generation > seen.get(pstate, 0):
        seen[pstate] = generation
    return stepped


def _num(value: Any) -> Any:
    cls = value.__class__
    if cls is int:  # what NVML answers nearly always: one check
        return value
    if cls is float:  # NaN and the infinities too: the check of every sample counts and drops them
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value  # an int or float subclass (numpy's, a ctypes wrapper's)


def _attr(obj: Any, name: str) -> Any:
    return _num(getattr(obj, name, None)) if obj is not None else None


def _numbers(value: Any, count: int) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == count and all(_num(v) is not None for v in value)


def _ratio(percent: Any) -> float | None:
    return percent / 100 if percent is not None else None


def _watts(milliwatts: int | None) -> float | None:
    milliwatts = _num(milliwatts)
    return milliwatts / 1000 if milliwatts is not None else None


def _hertz(mhz: int | None) -> float | None:
    mhz = _num(mhz)
    return mhz * MHZ if mhz is not None else None


def _celsius(value: float | None) -> float | None:
    value = _num(value)
    return float(value) if value is not None else None


def _cuda_version(value: int | None) -> str | None:
    return f"{value // 1000}.{value % 1000 // 10}" if value else None


_build = _builder()


_BUS_ID = re.compile(r"(?:[0-9a-fA-F]{4})?([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")


def sysfs_bus(bus_id: str | None) -> str | None:
    """NVML's PCI bus id (``00000000:01:00.0``: an 8-digit domain) as sysfs names the device
    (``0000:01:00.0``); None where it is no bus id (a damaged answer names no path)."""
    match = _BUS_ID.fullmatch(bus_id or "")
    return "{}:{}:{}.{}".format(*match.groups()).lower() if match else None
