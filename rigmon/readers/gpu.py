"""The GPU reader: what reads NVML (through nvidia-ml-py's ``pynvml``, with ``nvml`` and ``xid``).

Static facts are read once at ``open()``; ``read()`` takes one reading of every GPU.
Every call goes through ``_Device.get``, which owns the error policy:

- NotSupported (and FunctionNotFound) is remembered per GPU and call, and never asked again;
  where an older call exists the reader falls back to it.
- GpuIsLost marks that GPU lost; the other GPUs go on.
- Any other error leaves that one value empty for this poll and is counted.

Slow calls are not paid on every poll: the energy counter and the cumulative throttle
times (~3 ms and ~0.6 ms per GPU on an H200) are read every ``slow_interval`` seconds (the
energy counter also at each poll where the GPU's processes change, and the next), PCIe
throughput (~21 ms, it samples a 20 ms window) only when asked for. XID critical errors
arrive on an NVML event thread (``xid``) and are handed out with the next reading.

Each call belongs to a family (``rigmon.model.polled``: gpu_power, gpu_thermal, gpu_clocks,
gpu_ecc, gpu_pcie, gpu_processes, gpu_fans, …), as node_exporter's collectors are one per
subsystem: after each ``read()``, ``statuses`` holds every family's time across the GPUs and
whether any of its calls failed (rigmon_reader_success{reader="gpu_ecc"}), so one failing
subsystem shows as itself, not as the whole reader.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..model import nvml_state
from ..model.polled import CLOCKS, ECC, FANS, FIELD_VALUES, MEMORY, PCIE, POLLED, POWER, PROCESSES, XID
from ..model.recording import VALUE_FIELDS, call_key, error_value
from ..model.sample import (
    CLOCK_EVENT_REASONS,
    ClockEvents,
    EccCounts,
    GpuIdentity,
    GpuInfo,
    GpuReading,
    ReaderStatus,
    RemappedRows,
    RetiredPages,
    SystemInfo,
    ThrottleSeconds,
    XidEvent,
)
from .gpu_facts import ALL_CLOCK_EVENTS, facts, missing_gpus
from .gpu_values import (
    MAX_DEVICES,
    _bounded,
    _build,
    _cuda_version,
    _mig,
    _num,
    _numbers,
    _per_fan,
    _plan_name,
    _processes,
    _resolved,
    _stepped,
    _text,
    _watts,
    sysfs_bus,
)
from .nvml import CALL_ERRORS, LIBRARY_MISMATCH, NVML, NotInBindings, make_error, pynvml, real_backend
from .xid import XidWatcher

__all__ = ["NVML", "GpuReader", "make_error", "real_backend"]  # the bindings, as the reader has them

log = logging.getLogger(__name__)


_NO_FIELDS: dict[int, float] = {}
# The field values every poll asks for in one call (the table's field_id entries).
_POLL_FIELDS = tuple(dict.fromkeys(p.field_id for p in POLLED if p.field_id is not None))
# Cumulative nanoseconds spent in each throttling state (field-value API), by reason.
THROTTLE_FIELDS = {r.seconds_field: r.name for r in CLOCK_EVENT_REASONS if r.seconds_field is not None}
_THROTTLE_FIELD_IDS = tuple(THROTTLE_FIELDS)
# (error type 0 corrected | 1 uncorrected, counter 0 volatile | 1 aggregate), in EccCounts' order.
_ECC_ARGS = ((0, 0), (1, 0), (0, 1), (1, 1))
_ECC_KEYS = tuple(call_key("nvmlDeviceGetTotalEccErrors", args) for args in _ECC_ARGS)
_REMAPPED_ROWS = "nvmlDeviceGetRemappedRows"
# Counters that change rarely (link errors, ECC, row remaps), read every slow_interval unless a
# rule looks at them over a short window: PCIe replays alone are ~18 % of a poll's NVML time.
_RARE = frozenset({*(_plan_name(p) for p in POLLED if p.rare), _REMAPPED_ROWS, *_ECC_KEYS})
# The enforced power limit, read every poll: where it moves, a setting may have (the limit set
# with nvidia-smi -pl is read on the slow interval), so the rare ones are read again at once.
_ENFORCED_LIMIT = _plan_name(next(p for p in POLLED if p.field == "power_limit_watts"))
_PCIE_GENERATION = _plan_name(next(p for p in POLLED if p.field == "pcie_generation"))
_PSTATE = _plan_name(next(p for p in POLLED if p.field == "performance_state"))
_POWER_USAGE = _plan_name(next(p for p in POLLED if p.field == "power_watts"))
# An energy counter that stands still while the GPU draws this much energy (and more than 4 of
# its reads at that power) is stuck: jobs and the burn-in integrate the power instead.
STUCK_JOULES = 20_000.0


def _by_family(
    plan: list[tuple[str, str, list[tuple[Any, ...]]]],
) -> list[tuple[str, list[tuple[str, list[tuple[Any, ...]]]]]]:
    """(name, family, calls) entries as [(family, [(name, calls), ...]), ...], in the order of
    each family's first entry: a poll times each family once a GPU."""
    groups: dict[str, list[tuple[str, list[tuple[Any, ...]]]]] = {}
    for name, family, calls in plan:
        groups.setdefault(family, []).append((name, calls))
    return list(groups.items())


# Of the calls' own failures (``CALL_ERRORS``), what means "this driver has no such call":
# the older call is tried instead
_NOT_HERE = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_FunctionNotFound,
    LIBRARY_MISMATCH,
    ctypes.ArgumentError,
)


def _error_name(exc: BaseException) -> str:
    return error_value(exc)["nvml_error"]  # as a recording names it


SLEEPING = ("suspended", "suspending")  # a PCI device's runtime_status while it sleeps
LOST_PROBE_SECONDS = 30.0  # how often a lost GPU is asked whether it answers again


class GpuLost(Exception):
    pass


class _Device:
    """One GPU's handle and what we have learnt about it."""

    __slots__ = (
        "index",
        "handle",
        "info",
        "unsupported",
        "lost",
        "errors",
        "last_slow",
        "energy",
        "energy_read",
        "energy_seen",
        "energy_checked",
        "still_joules",
        "still_watts",
        "energy_stuck",
        "throttle",
        "pcie_rx",
        "pcie_tx",
        "supported_events",
        "fields_unsupported",
        "plan",
        "slow_plan",
        "slow_raw",
        "ecc",
        "remapped",
        "poll_fields",
        "probe_at",
        "not_recorded",
        "unrecorded",
        "pids",
        "energy_again",
        "retired_pages",
        "read_retired_pages",
        "fans",
        "enforced",
        "not_in_driver",
        "not_in_bindings",
        "link_by_pstate",
        "stood_in",
        "failures",
        "bus",
        "asleep",
        "power_watched",
        "prepared",
    )

    def __init__(self, index: int, handle: Any):
        self.index = index
        self.handle = handle
        self.info: GpuInfo | None = None
        self.unsupported: set[str] = set()
        self.not_in_driver: set[str] = set()  # of those, the calls the driver has no symbol for (older than it)
        self.not_in_bindings: set[str] = set()  # …and those the installed nvidia-ml-py has no function for
        self.link_by_pstate: dict[int, int] = {}  # P-state -> the highest PCIe generation seen in it
        self.stood_in: set[str] = set()  # unsupported calls an older call answered for: nothing is missing
        self.not_recorded: set[str] = set()  # of those, the calls a replayed recording holds no answer for
        self.unrecorded: set[str] = set()  # …and all of those, including the ones an older call stood in for
        self.pids: frozenset[int] = frozenset()  # the processes on it at the last poll
        self.energy_again = False  # read the energy counter at the next poll too (its processes just changed)
        self.lost = False
        self.probe_at = 0.0  # while lost: when to ask it again (a reset can bring it back)
        self.errors: dict[tuple[str, str], int] = {}  # (call, NVML error) -> failures
        self.last_slow = float("-inf")
        self.energy: float | None = None
        self.energy_read = False  # the counter was read at this poll: checked against the power
        self.energy_seen: float | None = None  # the counter where it last moved
        self.energy_checked = 0.0  # when it was last checked
        self.still_joules = 0.0  # the power's energy since it last moved
        self.still_watts: float | None = None  # the power at the last check
        self.energy_stuck: bool | None = None  # it stands still while the GPU draws power
        self.throttle: ThrottleSeconds | None = None
        self.pcie_rx: float | None = None
        self.pcie_tx: float | None = None
        self.supported_events = ALL_CLOCK_EVENTS
        self.fields_unsupported: set[int] = set()
        # the calls, by family: [(family, [(name, [(key, fn, args), ...older fallbacks]), ...]), ...]
        self.plan: list[tuple[str, list[tuple[str, list[tuple[Any, ...]]]]]] = []
        self.slow_plan: list[tuple[str, list[tuple[str, list[tuple[Any, ...]]]]]] = []  # the rare counters
        self.slow_raw: dict[str, Any] = {}  # their latest answers
        self.ecc: EccCounts | None = None  # ...the ECC counters and the remapped rows of them, made once
        self.remapped: RemappedRows | None = None
        self.poll_fields = True  # False once every per-poll field value said NotSupported
        self.retired_pages: RetiredPages | None = None
        self.read_retired_pages = False  # an ECC board without row remapping (pre-Ampere)
        self.fans: tuple[tuple[str, str, str], ...] = ()  # per fan: its (speed, target, rpm) plan names
        self.enforced: Any = None  # the enforced power limit at the last poll
        self.failures = 0  # calls that failed (an error, not an answer such as NotSupported) since start
        self.bus: str | None = None  # its PCI address as sysfs names it (0000:01:00.0)
        self.asleep = False  # runtime-suspended at the last look: asked nothing until it wakes
        self.power_watched = False  # its runtime power management is on (a laptop's, an RTD3 desktop's)
        self.prepared = False  # its facts read and its plan made (a GPU asleep at start: once it wakes)

    def get(self, key: str, fn: Callable, *args: Any) -> Any:
        """Call ``fn(handle, *args)`` under the error policy; None where there is no answer."""
        if key in self.unsupported:
            return None
        try:
            return fn(self.handle, *args)
        except CALL_ERRORS as e:
            self.failed(key, e)
        return None

    def failed(self, key: str, exc: BaseException) -> bool:
        """Apply the error policy to a failed call; True when the call is not supported here."""
        if isinstance(exc, _NOT_HERE):
            self.unsupported.add(key)
            if isinstance(exc, NotInBindings):
                self.not_in_bindings.add(key)  # the bindings lack it: neither the driver nor the board
            elif not isinstance(exc, pynvml.NVMLError_NotSupported) and not getattr(exc, "not_recorded", False):
                self.not_in_driver.add(key)  # the driver lacks the call, not the board the reading
            if getattr(exc, "not_recorded", False):
                self.not_recorded.add(key)
                self.unrecorded.add(key)
            return True
        if isinstance(exc, pynvml.NVMLError_GpuIsLost):
            raise GpuLost from None
        if isinstance(exc, pynvml.NVMLError_NotFound):
            return False  # nothing to report now (no process samples yet): no answer, no error
        self.failures += 1
        name = (key.partition(":")[0], _error_name(exc))  # the call without its arguments, and the error
        if name not in self.errors:
            log.warning("GPU %d: %s failed: %s", self.index, key, exc)
        self.errors[name] = self.errors.get(name, 0) + 1
        return False

    def first(self, *calls: tuple) -> Any:
        """The first answer of (key, fn, *args) calls: newer calls first, older as fallback."""
        for key, fn, *args in calls:
            value = self.get(key, fn, *args)
            if value is not None:
                return value
        return None


class GpuReader:
    name = "gpu"

    def __init__(
        self,
        nvml: Any = None,
        *,
        slow_interval: float = 5.0,
        pcie_throughput: bool = False,
        processes: bool = True,
        xid_events: bool = True,
        event_thread: bool = True,
        indices: list[int] | None = None,
        expected_pcie_generation: dict[int, int] | None = None,
        expected_pcie_width: dict[int, int] | None = None,
        rare_counters_every_poll: bool = False,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        retry_interval: float = 60.0,
        runtime_status: Callable[[list[str]], dict[str, str]] | None = None,
    ):
        self._nvml = nvml if nvml is not None else NVML
        self._slow_interval = slow_interval
        self._pcie_throughput = pcie_throughput
        self._processes = processes
        self._xid_events = xid_events
        self._indices = indices
        self._expected_pcie = expected_pcie_generation or {}
        self._expected_width = expected_pcie_width or {}
        self._rare_every_poll = rare_counters_every_poll
        self._monotonic = monotonic
        self._wall = wall
        self.devices: list[_Device] = []
        self.system = SystemInfo()
        self.unavailable: str | None = None  # why there are no GPUs, when there are none
        self._xid = XidWatcher(self._nvml, wall, thread=event_thread)
        self._opened = False
        # NVML that cannot start is tried again, soon at first and then every retry_interval: a
        # mended driver is read without a restart
        self._retry_interval = max(retry_interval, 1.0)
        self._init_error: str | None = None  # why nvmlInit failed, while it fails
        self._tries = 0
        self._retry_at: float | None = None
        self._known: dict[str, GpuIdentity] = {}  # the GPUs the box has had, by UUID (kept across restarts)
        # a GPU whose PCI device is runtime-suspended is not asked anything until it wakes
        self._runtime_status = runtime_status
        # this poll's families: seconds spent in each, and those where a call failed
        self._took: dict[str, float] = {}
        self._failed: set[str] = set()
        self._last_ok: dict[str, bool] = {}  # each family's success when it was last read
        # the last whole poll's (took, failed, last_ok): made into ``statuses`` only when asked
        self._last: tuple[dict[str, float], set[str], dict[str, bool]] = ({}, set(), {})

    # --- start-up ------------------------------------------------------------------------
    def remember(self, gpus: Iterable[GpuIdentity]) -> None:
        """The GPUs an earlier daemon saw (``rigmon.sinks.known``): one NVML no longer lists is
        missing (SystemInfo.missing_gpus), whether NVML starts or not."""
        self._known.update((g.uuid, g) for g in gpus if g.uuid)

    def open(self) -> None:
        self._start()

    def _start(self) -> bool:
        """nvmlInit and the GPUs it lists. Where NVML cannot start, why is kept (the sample's
        SystemInfo.nvml_error) and it is tried again: after 2, 4, 8… seconds, then every
        ``retry_interval``."""
        nv = self._nvml
        try:
            nv.nvmlInit()
        except CALL_ERRORS as e:
            error = _error_name(e)
            if error != self._init_error:
                self.unavailable = f"NVML cannot start: {error}, {nvml_state.cause(error)}"
                level = logging.WARNING if error == nvml_state.NO_DRIVER and not self._known else logging.ERROR
                log.log(
                    level, "%s; running without GPUs, trying again every %.0f s", self.unavailable, self._retry_interval
                )
            self._init_error = error
            self._tries += 1
            self._retry_at = self._monotonic() + min(self._retry_interval, 2.0**self._tries)
            self._publish()
            return False
        if self._init_error is not None:
            log.warning("NVML answers again (it failed with %s): reading the GPUs", self._init_error)
        self._init_error, self._retry_at, self.unavailable = None, None, None
        self._opened = True
        self.system = SystemInfo(
            driver_version=self._system(nv.nvmlSystemGetDriverVersion),
            nvml_version=self._system(nv.nvmlSystemGetNVMLVersion),
            cuda_driver_version=_cuda_version(self._system(nv.nvmlSystemGetCudaDriverVersion_v2)),
        )
        count = _bounded(self._system(nv.nvmlDeviceGetCount), MAX_DEVICES, "nvmlDeviceGetCount") or 0
        for index in range(count):
            if self._indices is not None and index not in self._indices:
                continue
            try:
                device = _Device(index, nv.nvmlDeviceGetHandleByIndex(index))
            except CALL_ERRORS as e:
                log.error("GPU %d: no handle (%s); it is reported as lost", index, _error_name(e))
                device = _Device(index, None)
                device.lost = True
                device.info = GpuInfo(index=index, uuid="", name="unknown")
                self.devices.append(device)
                continue
            # NVML answers the bus id from the table nvmlInit made: it does not wake the GPU
            try:
                pci = device.get("nvmlDeviceGetPciInfo", nv.nvmlDeviceGetPciInfo)
            except GpuLost:
                pci = None  # the facts' reads find it lost
            bus_id = _text(getattr(pci, "busId", None))
            device.bus = sysfs_bus(bus_id)
            state = self._power_states([device.bus]).get(device.bus) if device.bus is not None else None
            device.power_watched = state is not None
            if state in SLEEPING:  # asleep: who it was the box remembers; read once it wakes
                device.asleep = True
                known = next((g for g in self._known.values() if g.pci_bus_id == bus_id), None)
                device.info = GpuInfo(
                    index=index,
                    uuid=known.uuid if known else "",
                    name=known.name if known else "asleep",
                    pci_bus_id=bus_id,
                )
                log.info("GPU %d (%s) is runtime-suspended: it is read once it wakes", index, device.bus)
            else:
                self._prepare(device, pci)
            self.devices.append(device)
        if self.devices and not any(d.power_watched for d in self.devices):
            self._runtime_status = None  # no GPU's runtime power management is on (a server): never asked again
        if count == 0:
            self.unavailable = "NVML found no GPUs"
            log.warning("%s", self.unavailable)
        if self._xid_events:
            self._xid.start([d for d in self.devices if not d.lost and not d.asleep])
        self._publish()
        return True

    def _prepare(self, device: _Device, pci: Any) -> None:
        """A GPU's facts read once and its plan of calls: at start, or when it first wakes."""
        index = device.index
        device.prepared = True
        try:
            device.info = facts(device, self._nvml, pci, self._expected_pcie, self._expected_width)
            plan = self._plan(device)
            rare = [] if self._rare_every_poll else [entry for entry in plan if entry[0] in _RARE]
            device.plan = _by_family([entry for entry in plan if entry not in rare])
            device.slow_plan = _by_family(rare)
        except GpuLost:
            device.lost = True
            device.info = GpuInfo(index=index, uuid="", name="unknown")
            log.error("GPU %d is lost (fell off the bus?)", index)
        except (TypeError, ValueError, AttributeError, IndexError, KeyError) as e:
            # answers of a kind NVML never gives (a damaged recording): that GPU only
            device.lost = True
            device.handle = None
            device.info = GpuInfo(index=index, uuid="", name="unknown")
            log.error("GPU %d: unexpected answers at start (%s: %s); it is left out", index, type(e).__name__, e)

    def _publish(self) -> None:
        """The box's GPUs as the sample says them: NVML's state, how many the box has had, and
        which of those NVML no longer lists (a GPU lost at start is listed, as lost)."""
        listed = {d.info.uuid for d in self.devices if d.info is not None and d.info.uuid}
        unnamed = {d.index for d in self.devices if d.info is None or not d.info.uuid}
        for d in self.devices:
            if d.info is not None and d.info.uuid and not d.asleep:
                self._known[d.info.uuid] = GpuIdentity(d.info.uuid, d.index, d.info.name, d.info.pci_bus_id)
        missing = missing_gpus(self._known.values(), listed, unnamed, self._indices)
        self.system = self.system._replace(
            nvml_error=self._init_error, gpus_known=len(self._known), missing_gpus=missing
        )

    def _sleeps(self, d: _Device, state: str | None) -> bool:
        """Whether GPU ``d`` sleeps now (its PCI device's runtime ``state``, None where its runtime
        power management is off): asked nothing while it does; its facts read once it first wakes."""
        d.power_watched = state is not None
        if state in SLEEPING:
            d.asleep = True
            return True
        if d.asleep:
            d.asleep = False
            log.info("GPU %d (%s) woke: it is read again", d.index, d.bus)
            if not d.prepared:  # asleep since start
                try:
                    pci = d.get("nvmlDeviceGetPciInfo", self._nvml.nvmlDeviceGetPciInfo)
                except GpuLost:
                    pci = None
                self._prepare(d, pci)
                self._publish()
        return False

    def _power_states(self, buses: list[str]) -> dict[str, str]:
        """The runtime power state (sysfs's ``active``, ``suspended``…) of the PCI buses
        ``buses`` (else every GPU's) whose runtime power management is on; the others, every
        server's GPU, are not in it."""
        if self._runtime_status is None:
            return {}
        asking = buses or [d.bus for d in self.devices if d.bus is not None]
        if not asking:
            return {}
        try:
            return self._runtime_status(asking)
        except Exception as e:  # sysfs unreadable: every GPU is read as awake, as before
            log.warning("GPU runtime power states unreadable (%s): every GPU is read", e)
            self._runtime_status = None
            return {}

    def _system(self, fn: Callable) -> Any:
        try:
            value = fn()
        except CALL_ERRORS as e:
            log.info("%s: %s", fn.__name__, e)
            return None
        return value.decode() if isinstance(value, bytes) else value

    # --- XID events ----------------------------------------------------------------------
    # --- every poll ----------------------------------------------------------------------
    def read(self) -> tuple[tuple[GpuReading, ...], tuple[XidEvent, ...]]:
        now = self._monotonic()
        if self._retry_at is not None and now >= self._retry_at:
            self._start()
        readings = []
        self._took, self._failed = {}, set()
        states = self._power_states([]) if self._runtime_status is not None else None
        for d in self.devices:
            if states is not None and self._sleeps(d, states.get(d.bus) if d.bus is not None else None):
                readings.append(GpuReading(index=d.index, uuid=d.info.uuid, asleep=True))
                continue
            probe = d.lost and d.handle is not None and d.info is not None and now >= d.probe_at
            if not d.lost or probe:
                try:
                    readings.append(self._read(d, now))
                    if d.lost:
                        d.lost = False
                        log.warning("GPU %d (%s) answers again (reset?)", d.index, d.info.uuid)
                    continue
                except GpuLost:
                    if not d.lost:
                        log.error("GPU %d (%s) is lost: it fell off the bus or stopped answering", d.index, d.info.uuid)
                    d.lost, d.probe_at = True, now + LOST_PROBE_SECONDS
            readings.append(GpuReading(index=d.index, uuid=d.info.uuid, lost=True))
            # a GPU that does not answer: none of its families is read
            self._failed.update(family for family, _ in d.plan + d.slow_plan)
            self._failed.update(name for name in self._last_ok if name != XID)
        took = self._xid.drain()
        if took is not None:
            self._took[XID] = took
            if self._xid.failures:
                self._failed.add(XID)
        last_ok, failed = self._last_ok, self._failed
        for name in self._took:
            last_ok[name] = name not in failed
        for name in failed:
            last_ok[name] = False
        self._last = (self._took, failed, last_ok.copy())  # whole: what a scrape in between sees
        return tuple(readings), self._xid.take()

    @property
    def statuses(self) -> tuple[ReaderStatus, ...]:
        """Each family at the last poll: its time across the GPUs, and whether all its calls
        answered. A family read every slow_interval keeps its last success between its reads
        (0 s at a poll that did not read it). Made when asked (a scrape), not at every poll."""
        took, _, last_ok = self._last
        return tuple(ReaderStatus(name, ok, took.get(name, 0.0)) for name, ok in sorted(last_ok.items()))

    def _plan(self, d: _Device) -> list[tuple[str, list[tuple]]]:
        """The calls every poll makes for this GPU: (name, [(key, fn, args), ...older fallbacks]),
        each key the one a recording keeps the answer under."""
        nv = self._nvml

        def call(fn: str, *args: Any) -> tuple:
            args = _resolved(args)
            return (call_key(fn, args), getattr(nv, fn), args)

        plan, seen = [], set()
        for p in POLLED:  # the table's, one plan entry for the readings that share a call
            name = _plan_name(p) if p.calls else None
            if name is not None and name not in seen:
                seen.add(name)
                plan.append((name, p.family, [call(fn, *args) for fn, args in p.calls]))
        plan += [
            (
                "reasons",
                CLOCKS,
                [call("nvmlDeviceGetCurrentClocksEventReasons"), call("nvmlDeviceGetCurrentClocksThrottleReasons")],
            ),
            (_REMAPPED_ROWS, ECC, [call(_REMAPPED_ROWS)]),
        ]
        if d.info.ecc_enabled:
            plan += [
                (key, ECC, [call("nvmlDeviceGetTotalEccErrors", *args)])
                for key, args in zip(_ECC_KEYS, _ECC_ARGS, strict=True)
            ]
        if d.info.mig_enabled:  # each instance's memory (NVML gives no utilisation in MIG mode)
            plan.append(("mig", MEMORY, [call("nvmlDeviceGetMigInstances")]))
        if self._processes:
            plan.append(("processes", PROCESSES, [call("nvmlDeviceGetComputeRunningProcesses")]))
            # each process's SM share over the driver's recent samples (0: all it keeps)
            plan.append(("process_util", PROCESSES, [call("nvmlDeviceGetProcessUtilization", 0)]))
        fans = d.info.fan_count
        if fans is None:  # an old driver without a fan count: one fan, the old call
            plan.append(("fan0", FANS, [call("nvmlDeviceGetFanSpeed")]))
            d.fans = (("fan0", "", ""),)
        else:  # fans == 0 on passive boards: the call would take 0.6 ms a poll to fail
            # the speed NVML reports is the intended one (a blocked fan still reports it); the
            # target is what the driver asks for; only the rpm is measured
            d.fans = tuple((f"fan{i}", f"target{i}", f"rpm{i}") for i in range(fans))
            for i in range(fans):
                plan += [
                    (f"fan{i}", FANS, [call("nvmlDeviceGetFanSpeed_v2", i)]),
                    (f"target{i}", FANS, [call("nvmlDeviceGetTargetFanSpeed", i)]),
                    (f"rpm{i}", FANS, [call("nvmlDeviceGetFanSpeedRPM", i)]),
                ]
        return [(name, family, [a for a in alts if a[0] not in d.unsupported]) for name, family, alts in plan]

    def _run_plan(self, d: _Device, slow: bool = False) -> dict[str, Any]:
        raw: dict[str, Any] = {}
        handle = d.handle
        pruned = False
        took, clock = self._took, time.perf_counter
        took_get = took.get
        started = clock()  # each family timed as a whole: from where the one before ended
        for family, entries in d.slow_plan if slow else d.plan:
            for name, alternatives in entries:
                if not alternatives:  # every call of it unsupported here (the plan drops it after this poll)
                    continue
                key, fn, args = alternatives[0]
                try:  # the usual case: the first call answers
                    raw[name] = fn(handle, *args)
                    continue
                except CALL_ERRORS as e:
                    error = e
                failures = d.failures  # a failure counted (not "unsupported here") fails the family
                skipped: list[str] = []
                while d.failed(key, error):  # not supported: the older call, if any, from now on
                    alternatives.pop(0)
                    pruned = True
                    skipped.append(key)
                    if not alternatives:
                        break
                    key, fn, args = alternatives[0]
                    try:
                        raw[name] = fn(handle, *args)
                    except CALL_ERRORS as e:
                        error = e
                        continue
                    # an older call answered: the newer one's absence (from a recording, or the
                    # driver) hides nothing
                    d.not_recorded.difference_update(skipped)
                    d.stood_in.update(skipped)
                    break
                if d.failures != failures:
                    self._failed.add(family)
            ended = clock()
            took[family] = took_get(family, 0.0) + ended - started
            started = ended
        if pruned and slow:
            d.slow_plan = _by_family([(n, f, a) for f, entries in d.slow_plan for n, a in entries if a])
        elif pruned:
            d.plan = _by_family([(n, f, a) for f, entries in d.plan for n, a in entries if a])
        return raw

    def _read(self, d: _Device, now: float) -> GpuReading:
        slow = now - d.last_slow >= self._slow_interval
        if slow:
            self._read_slow(d)
            d.last_slow = now
            d.poll_fields = any(f not in d.fields_unsupported for f in _POLL_FIELDS)
        raw = self._run_plan(d)
        if self._rare_every_poll:  # a rule asked for them every poll: they are in this poll's plan
            self._counts(d, raw)
        enforced = raw.get(_ENFORCED_LIMIT)
        if enforced != d.enforced:
            if d.enforced is not None and not slow and d.slow_plan:
                self._read_rare(d)
            d.enforced = enforced
        if d.slow_raw:
            raw.update(d.slow_raw)
        get = raw.get
        reasons = get("reasons")
        procs = get("processes")
        if isinstance(procs, list):
            # the energy counter at every change of the GPU's processes and the poll after, so a
            # job's energy ends and starts where the job does, whatever slow_interval says
            pids = frozenset(getattr(p, "pid", None) for p in procs)
            if pids != d.pids or d.energy_again:
                if not slow:
                    self._timed(d, POWER, self._read_energy, d)
                d.energy_again, d.pids = pids != d.pids, pids
        speeds = targets = rpms = None
        if d.fans:  # none on passive boards
            speeds, targets, rpms = (
                _per_fan(raw, d.fans, 0, 100),
                _per_fan(raw, d.fans, 1, 100),
                _per_fan(raw, d.fans, 2, 1),
            )
        if d.energy_read:
            d.energy_read = False
            self._check_energy(d, now, _watts(get(_POWER_USAGE)))
        fields = _NO_FIELDS
        if d.poll_fields:  # one batched call: its own family
            failures, started = d.failures, time.perf_counter()
            fields = self._fields(d, _POLL_FIELDS)
            self._took[FIELD_VALUES] = self._took.get(FIELD_VALUES, 0.0) + time.perf_counter() - started
            if d.failures != failures:
                self._failed.add(FIELD_VALUES)
        processes = _processes(procs, get("process_util"))
        return _build(
            d,
            get,
            fields,
            ClockEvents.decode(reasons, d.supported_events) if isinstance(reasons, int) else None,
            speeds,
            targets,
            rpms,
            d.ecc,
            d.remapped,
            processes,
            _stepped(d, get(_PCIE_GENERATION), get(_PSTATE)),
            _mig(get("mig"), processes) if "mig" in raw else None,
        )

    def _timed(self, d: _Device, family: str, fn: Callable, *args: Any) -> Any:
        """fn(*args), its time and any failed call counted to the family."""
        failures, started = d.failures, time.perf_counter()
        try:
            return fn(*args)
        finally:
            self._took[family] = self._took.get(family, 0.0) + time.perf_counter() - started
            if d.failures != failures:
                self._failed.add(family)

    def _read_rare(self, d: _Device) -> None:
        """The rare counters' calls, and the ECC counts and remapped rows made of them once: a
        poll between takes them as they are."""
        raw = d.slow_raw = self._run_plan(d, slow=True)
        self._counts(d, raw)

    @staticmethod
    def _counts(d: _Device, raw: dict[str, Any]) -> None:
        """The ECC counts and remapped rows of the rare counters' answers ``raw``."""
        ecc = [_num(raw.get(key)) for key in _ECC_KEYS]
        d.ecc = EccCounts(*ecc) if any(c is not None for c in ecc) else None
        rows = raw.get(_REMAPPED_ROWS)
        d.remapped = RemappedRows(rows[0], rows[1], bool(rows[2]), bool(rows[3])) if _numbers(rows, 4) else None

    def _read_slow(self, d: _Device) -> None:
        if d.slow_plan:
            self._read_rare(d)
        self._timed(d, POWER, self._read_energy, d)
        self._timed(d, CLOCKS, self._read_throttle, d)
        if d.read_retired_pages:
            self._timed(d, ECC, self._read_retired_pages, d)
        if self._pcie_throughput:
            self._timed(d, PCIE, self._read_pcie_throughput, d)

    def _read_throttle(self, d: _Device) -> None:
        throttle = self._fields(d, _THROTTLE_FIELD_IDS)
        if throttle:
            d.throttle = ThrottleSeconds(
                **{name: throttle[fid] / 1e9 for fid, name in THROTTLE_FIELDS.items() if fid in throttle}
            )

    def _read_retired_pages(self, d: _Device) -> None:
        # 0: pages retired for repeated single-bit errors, 1: for a double-bit error
        nv = self._nvml
        single = d.get("nvmlDeviceGetRetiredPages:0", nv.nvmlDeviceGetRetiredPages, 0)
        double = d.get("nvmlDeviceGetRetiredPages:1", nv.nvmlDeviceGetRetiredPages, 1)
        pending = d.get("nvmlDeviceGetRetiredPagesPendingStatus", nv.nvmlDeviceGetRetiredPagesPendingStatus)
        if single is not None or double is not None or pending is not None:
            d.retired_pages = RetiredPages(
                len(single) if single is not None else None,
                len(double) if double is not None else None,
                bool(pending) if pending is not None else None,
            )

    def _read_pcie_throughput(self, d: _Device) -> None:
        # KB/s over a 20 ms window the call itself waits out.
        nv = self._nvml
        rx = d.get("nvmlDeviceGetPcieThroughput:1", nv.nvmlDeviceGetPcieThroughput, 1)
        tx = d.get("nvmlDeviceGetPcieThroughput:0", nv.nvmlDeviceGetPcieThroughput, 0)
        d.pcie_rx = rx * 1000 if rx is not None else None
        d.pcie_tx = tx * 1000 if tx is not None else None

    def _read_energy(self, d: _Device) -> None:
        energy = _num(d.get("nvmlDeviceGetTotalEnergyConsumption", self._nvml.nvmlDeviceGetTotalEnergyConsumption))
        d.energy = energy / 1000 if energy is not None else None
        d.energy_read = True

    def _check_energy(self, d: _Device, now: float, watts: float | None) -> None:
        """``energy_counter_stuck``: the counter stands still while the GPU draws power (a
        driver's fault seen on real boards), said once when it starts and once when it moves
        again; unknown without a counter or a power reading. Only a check whose power moved
        counts: a replay holding one recorded tick for a minute is no evidence."""
        energy, since, d.energy_checked = d.energy, now - d.energy_checked, now
        if energy is None or watts is None:
            d.energy_stuck = None
            return
        fresh, d.still_watts = watts != d.still_watts, watts
        if energy != d.energy_seen or d.energy_stuck is None:
            if d.energy_stuck:
                log.info("GPU %d: its energy counter moves again", d.index)
            d.energy_seen, d.still_joules, d.energy_stuck = energy, 0.0, False
            return
        if fresh:
            d.still_joules += watts * max(0.0, min(since, 4 * self._slow_interval))
        if not d.energy_stuck and d.still_joules >= max(STUCK_JOULES, 4 * self._slow_interval * watts):
            d.energy_stuck = True
            log.warning(
                "GPU %d: its energy counter stands still at %.0f J while it draws %.0f W: jobs and the burn-in "
                "integrate its power instead",
                d.index,
                energy,
                watts,
            )

    def _fields(self, d: _Device, field_ids: tuple[int, ...]) -> dict[int, float]:
        """Field values by id; a field that answers NotSupported is not asked again."""
        wanted = [f for f in field_ids if f not in d.fields_unsupported]
        if not wanted:
            return {}
        values = d.get("nvmlDeviceGetFieldValues", self._nvml.nvmlDeviceGetFieldValues, wanted)
        if values is None:
            return {}
        out = {}
        for v in values:
            try:
                status = v.nvmlReturn
                if status == pynvml.NVML_SUCCESS:
                    value = _num(getattr(v.value, VALUE_FIELDS[v.valueType]))
                    if value is not None:
                        out[v.fieldId] = value
                elif status in (
                    pynvml.NVML_ERROR_NOT_SUPPORTED,
                    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                    pynvml.NVML_ERROR_INVALID_ARGUMENT,
                ):
                    d.fields_unsupported.add(v.fieldId)
                    if getattr(v, "not_recorded", False) is True:
                        d.not_recorded.add(f"nvmlDeviceGetFieldValues:{v.fieldId}")
                elif status == pynvml.NVML_ERROR_GPU_IS_LOST:
                    raise GpuLost
            except (AttributeError, KeyError, TypeError):  # an element NVML would never answer: not read
                continue
        return out

    # --- state for status, doctor and the exporter ----------------------------------------
    @property
    def info(self) -> tuple[GpuInfo, ...]:
        return tuple(d.info for d in self.devices)

    def unsupported(self) -> dict[int, tuple[str, ...]]:
        """The calls each GPU does not support (a replay's: those its recording answered so)."""
        return {d.index: tuple(sorted(d.unsupported - d.unrecorded)) for d in self.devices}

    def not_in_driver(self) -> dict[int, tuple[str, ...]]:
        """Of those, the calls the driver itself lacks (FunctionNotFound, or the bindings' version
        mismatch): the driver's age, not the board, is why."""
        return {d.index: tuple(sorted(d.not_in_driver - d.unrecorded - d.stood_in)) for d in self.devices}

    def not_in_bindings(self) -> dict[int, tuple[str, ...]]:
        """The calls the installed nvidia-ml-py has no function for and no older call stood in for."""
        return {d.index: tuple(sorted(d.not_in_bindings - d.stood_in)) for d in self.devices}

    def missing(self) -> dict[int, tuple[str, ...]]:
        """The calls each GPU does not support that no older call stood in for: what is not read."""
        return {d.index: tuple(sorted(d.unsupported - d.unrecorded - d.stood_in)) for d in self.devices}

    def collect(self):
        """NVML calls that failed (NotSupported and NotFound are answers, not failures), per GPU."""
        from prometheus_client.core import CounterMetricFamily

        errors = CounterMetricFamily(
            "rigmon_nvml_errors",
            "NVML calls that failed since start, by GPU, call and error (a call the GPU does not support is not one).",
            labels=["gpu", "call", "error"],
        )
        for d in self.devices:
            for (call, error), count in sorted(dict(d.errors).items()):
                errors.add_metric([str(d.index), call, error], count)
        yield errors

    def not_recorded(self) -> tuple[str, ...]:
        """The calls a replayed recording has no answer for (they read as NotSupported) and no
        older call stood in for, once for all GPUs."""
        return tuple(sorted({key for d in self.devices for key in d.not_recorded}))

    def close(self) -> None:
        """Stop reading. Returns at once: where the XID thread is inside NVML's wait, freeing
        the event set or shutting NVML down under it is not safe, so the thread does both
        when its wait ends (a daemon thread: a process that exits first does not wait)."""
        if self._xid.stop(then=self._release):
            self._release()

    def _release(self) -> None:
        self._xid.free()
        if self._opened:
            try:
                self._nvml.nvmlShutdown()
            except CALL_ERRORS:
                pass
            self._opened = False
