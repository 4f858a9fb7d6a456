"""The typed, immutable sample: what one poll saw, in base units.

Every record is a NamedTuple: immutable, typed, and about four times cheaper to build than a
frozen dataclass, which matters when eight GPUs are read every second.

Readers build it; everything downstream (status, exporters, sinks, the alert engine) reads
it and never talks to pynvml or psutil. Units: watts, joules, degrees Celsius, hertz,
bytes, seconds, ratios in 0..1. ``None`` means "not read": unsupported by this hardware,
not due this poll, or the read failed (the reader's status says which).
"""

from __future__ import annotations

import functools
import math
from collections import namedtuple
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Self

from .polled import POLLED
from .text import printable


class ClockEventReason(NamedTuple):
    """A clock-event ("throttle") reason: the one table of them."""

    name: str  # NVML's name, lower case: the sample's field, the metric's reason label
    bit: int  # in nvmlDeviceGetCurrentClocksEventReasons' mask
    short: str  # in the status table (capitals: a real slowdown)
    worst: int  # rank, worst first: the status table shows the worst one and "+N"
    slowdown: bool = False  # the GPU slowed below what it was asked (sw_power_cap is normal under full load)
    seconds_field: int | None = None  # the NVML field counting ns in this state (NVML_FI_DEV_CLOCKS_EVENT_REASON_*)


CLOCK_EVENT_REASONS: tuple[ClockEventReason, ...] = (  # in NVML's bit order
    ClockEventReason("gpu_idle", 0x1, "idle", 10),
    ClockEventReason("applications_clocks_setting", 0x2, "app-clocks", 7),
    ClockEventReason("sw_power_cap", 0x4, "pwr-cap", 4, seconds_field=74),
    ClockEventReason("hw_slowdown", 0x8, "HW-SLOW", 2, slowdown=True),
    ClockEventReason("sync_boost", 0x10, "sync-boost", 8),
    ClockEventReason("sw_thermal_slowdown", 0x20, "sw-thermal", 3, slowdown=True, seconds_field=269),
    ClockEventReason("hw_thermal_slowdown", 0x40, "HW-THERMAL", 0, slowdown=True, seconds_field=270),
    ClockEventReason("hw_power_brake_slowdown", 0x80, "PWR-BRAKE", 1, slowdown=True, seconds_field=271),
    ClockEventReason("display_clock_setting", 0x100, "display", 9),
    # NVML's docs (R570 on) say no more than "Board limit" and "Reliability": a limit of the board
    # (its own power or thermal envelope, not the limit set) and the chip's reliability voltage
    # limit, which a card boosting at its top voltage meets in normal use. Shown, not alerted on.
    ClockEventReason("board_limit", 0x200, "board-limit", 5),
    ClockEventReason("reliability", 0x400, "reliability", 6),
)
CLOCK_EVENT_BITS: tuple[tuple[str, int], ...] = tuple((r.name, r.bit) for r in CLOCK_EVENT_REASONS)
SLOWDOWNS: tuple[str, ...] = tuple(r.name for r in CLOCK_EVENT_REASONS if r.slowdown)
TIMED_REASONS: tuple[str, ...] = tuple(r.name for r in CLOCK_EVENT_REASONS if r.seconds_field is not None)


if TYPE_CHECKING:

    class _Fields(tuple[Any, ...]):
        """The type checker's view of a record whose fields come from a table (a namedtuple)."""

        _fields: ClassVar[tuple[str, ...]]

        def __new__(cls, *args: Any, **kwargs: Any) -> Self: ...
        def __getattr__(self, name: str) -> Any: ...
        def _replace(self, **kwargs: Any) -> Self: ...
        def _asdict(self) -> dict[str, Any]: ...

    class _ClockEventFields(_Fields): ...

    class _ThrottleFields(_Fields): ...

else:
    _ClockEventFields = namedtuple(
        "ClockEvents", [r.name for r in CLOCK_EVENT_REASONS], defaults=(None,) * len(CLOCK_EVENT_REASONS)
    )
    _ThrottleFields = namedtuple("ThrottleSeconds", TIMED_REASONS, defaults=(None,) * len(TIMED_REASONS))


class ClockEvents(_ClockEventFields):
    """Which clock-event reasons are active; None where the GPU does not report the reason."""

    __slots__ = ()

    @staticmethod
    def decode(mask: int, supported: int) -> ClockEvents:
        return _decode_clock_events(mask, supported)

    def active(self) -> tuple[str, ...]:
        return tuple(name for name, _ in CLOCK_EVENT_BITS if getattr(self, name))


@functools.lru_cache(maxsize=512)
def _decode_clock_events(mask: int, supported: int) -> ClockEvents:
    # Immutable, and a GPU's mask takes few values: decoded once, shared after.
    return ClockEvents(*((bool(mask & bit) if supported & bit else None) for _, bit in CLOCK_EVENT_BITS))


class ThrottleSeconds(_ThrottleFields):
    """Cumulative time spent in each throttling state since the driver loaded (seconds)."""

    __slots__ = ()


class TemperatureThresholds(NamedTuple):
    shutdown: float | None = None
    slowdown: float | None = None
    memory_max: float | None = None
    gpu_max: float | None = None


class EccCounts(NamedTuple):
    corrected_volatile: int | None = None
    uncorrected_volatile: int | None = None
    corrected_aggregate: int | None = None
    uncorrected_aggregate: int | None = None


class RemappedRows(NamedTuple):
    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


class RetiredPages(NamedTuple):
    """Pre-Ampere ECC boards (V100, T4, P100) retire memory pages instead of remapping rows."""

    single_bit: int | None = None  # pages retired for repeated correctable (single-bit) errors
    double_bit: int | None = None  # pages retired for an uncorrectable (double-bit) error
    pending: bool | None = None  # a retirement waits for a reset (nvidia-smi -r or a reboot)


class GpuProcess(NamedTuple):
    pid: int
    used_memory_bytes: int | None
    sm_ratio: float | None = None  # its share of the SMs' time (nvmlDeviceGetProcessUtilization), where given
    gpu_instance: int | None = None  # the MIG GPU instance it runs in (None: the GPU is not in MIG mode)
    compute_instance: int | None = None  # …and the compute instance within it


class MigInstance(NamedTuple):
    """One MIG instance of a GPU in MIG mode: what NVML gives of it (no utilisation: NVML has none)."""

    gpu_instance: int  # the GPU instance id (nvidia-smi's GI ID)
    compute_instance: int | None  # the compute instance id within it (CI ID)
    uuid: str  # MIG-…
    profile: str  # 3g.40gb, from the device's name ("" where it gives none)
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    processes: int | None = None  # the GPU's compute processes that run in it


class ProcessInfo(NamedTuple):
    """Who a GPU process is, from /proc: read once while it holds a GPU."""

    pid: int
    user: str | None = None
    command: str | None = None  # its command line, shortened
    unit: str | None = None  # docker:ID, podman:ID, k8s:ID, slurm:JOB, systemd:NAME.service; None in a session
    job: str = ""  # what its GPU time and energy are booked to: OWNER/ the unit, else torchrun:PID…, else pgid:PGID
    start_time: float | None = None  # unix seconds
    ppid: int | None = None
    pgid: int | None = None
    job_start: float | None = None  # a launcher's job: when the launcher started
    job_command: str | None = None  # …and its command line


class GpuInfo(NamedTuple):
    """Facts read once at start-up."""

    index: int  # type: ignore[assignment]  # a field, where a tuple has a method
    uuid: str
    name: str
    serial: str | None = None
    pci_bus_id: str | None = None
    vbios_version: str | None = None
    compute_capability: str | None = None
    power_limit_default_watts: float | None = None
    power_limit_min_watts: float | None = None
    power_limit_max_watts: float | None = None
    temperature_thresholds: TemperatureThresholds = TemperatureThresholds()
    max_sm_clock_hertz: float | None = None
    max_memory_clock_hertz: float | None = None
    max_pcie_generation: int | None = None  # what the link can reach: the GPU and the slot/riser
    max_pcie_width: int | None = None
    gpu_max_pcie_generation: int | None = None  # what the GPU itself supports
    expected_pcie_generation: int | None = None  # from the config, where a riser is forced lower
    expected_pcie_width: int | None = None  # from the config, where the slot or riser has fewer lanes
    applications_sm_clock_hertz: float | None = None  # the SM clock applications run at (base; boost goes above)
    supported_clock_events: tuple[str, ...] = ()
    ecc_enabled: bool | None = None
    persistence_mode: bool | None = None
    mig_enabled: bool | None = None
    fan_count: int | None = None
    mig_pending: bool | None = None  # MIG mode as it will be after the next GPU reset


# what the cooling baselines make of a GPU's polls (rigmon.readers.cooling): its Drift as fields
COOLING_FIELDS = (
    "cooling_state",
    "cooling_learning_seconds",
    "cooling_drift_celsius",
    "cooling_drift_own_celsius",
    "cooling_fan_drift_ratio",
    "cooling_at_watts",
    "cooling_blind_seconds",
    "cooling_baseline_excess_celsius",
)


def cooling_values(d: Drift) -> tuple[Any, ...]:
    """A GPU's ``Drift`` as the values of its ``COOLING_FIELDS``, in their order."""
    return (d.state, d.learning_seconds, d.drift, d.own, d.fan_drift, d.load, d.blind, d.excess)


# GpuReading's fields: who it is, the per-poll readings of the table (rigmon.model.polled), then what
# the reader makes of several answers or reads every slow_interval.
_GPU_READING_FIELDS = (
    "index",
    "uuid",
    "lost",
    "asleep",
    *(p.field for p in POLLED),
    "pcie_full_in_other_pstate",
    "energy_joules",
    "energy_counter_stuck",
    "clock_events",
    "throttle_seconds",
    "fan_speed_ratios",
    "fan_target_ratios",
    "fan_speed_rpm",
    "pcie_rx_bytes_per_second",
    "pcie_tx_bytes_per_second",
    "ecc_errors",
    "remapped_rows",
    "retired_pages",
    "processes",
    "mig_instances",
    *COOLING_FIELDS,
)


if TYPE_CHECKING:

    class GpuReading(_Fields):
        """The type checker's view of ``GpuReading``: its fields come from the tables."""

        index: int  # type: ignore[assignment]  # a field, where a tuple has a method
        uuid: str
        lost: bool
        asleep: bool | None

else:

    class GpuReading(
        namedtuple("GpuReading", _GPU_READING_FIELDS, defaults=(False,) + (None,) * (len(_GPU_READING_FIELDS) - 3))
    ):
        """One GPU at one poll. ``lost`` means the GPU fell off the bus (all readings None);
        ``asleep`` that its PCI device is runtime-suspended (a laptop's or an RTD3 desktop's idle
        GPU): it was asked nothing, so as not to wake it (all readings None); None where its
        runtime power management is off (every server's GPU), which never sleeps.

        Besides the table's readings: ``energy_joules`` (since the driver loaded), ``clock_events``
        (ClockEvents), ``throttle_seconds`` (ThrottleSeconds), per fan ``fan_speed_ratios`` (as NVML
        reports them: the intended speed), ``fan_target_ratios`` (what the driver asks for) and
        ``fan_speed_rpm`` (measured), ``pcie_rx/tx_bytes_per_second``, ``ecc_errors`` (EccCounts),
        ``remapped_rows`` (RemappedRows), ``retired_pages`` (RetiredPages), ``processes``, and in
        MIG mode ``mig_instances`` (MigInstance: what NVML gives of each instance)."""

        __slots__ = ()


class XidEvent(NamedTuple):
    gpu_index: int
    uuid: str
    xid: int
    time: float


class SensorTemperature(NamedTuple):
    chip: str
    label: str
    celsius: float
    high_celsius: float | None = None
    critical_celsius: float | None = None
    device: str | None = None  # which chip of that name (coretemp.1, nvme1, 0000:00:18.3), where known


class CpuTemperature(NamedTuple):
    """The one temperature chosen to stand for a CPU socket, and which sensor it came from."""

    socket: int
    chip: str
    sensor: str
    celsius: float
    high_celsius: float | None = None
    critical_celsius: float | None = None
    drift_celsius: float | None = None  # how much hotter than its baseline at the same load (readers.cooling)
    fan_drift_ratio: float | None = None  # the fan headers' duty on their curve over its baseline's at that load
    limit_celsius: float | None = None  # what it runs at by design at most: the chip's TjMax, or its family's
    limit_from: str | None = None  # where that limit comes from (the sensor, AMD's figure for the family, the config)


class FanReading(NamedTuple):
    chip: str
    label: str
    rpm: float
    turned: bool = False  # has read above 0 rpm (kept across restarts): a header with a fan on it
    device: str | None = None  # which chip of that name, where known
    rpm_drift: float | None = None  # its rpm over its baseline's at the same PWM duty, less 1 (readers.cooling)
    duty: float | None = None  # the PWM duty its header drives it at (0..1), where hwmon gives one


class FanControl(NamedTuple):
    """What hwmon says of a fan header beyond its speed (psutil gives only the rpm)."""

    chip: str
    device: str
    fan: str  # fan1… (its label where the driver gives one)
    pwm_ratio: float | None  # duty 0..1 (pwmN / 255)
    pwm_mode: int | None  # pwmN_enable: 0 full speed/off, 1 manual, 2 and up automatic (driver-specific)
    min_rpm: float | None  # fanN_min: below it the chip raises its alarm
    alarm: bool | None  # fanN_alarm


class Electrical(NamedTuple):
    """A chip's voltage (volts), power (watts) or current (amperes) input: a PSU's draw, a rail."""

    chip: str
    device: str
    sensor: str  # its label, else in0, power1, curr1…
    value: float
    alarm: bool | None = None  # the chip's alarm for it (inN_alarm: out of its limits), where it has one


class CpuEnergy(NamedTuple):
    """A RAPL zone's energy counter, made monotonic across hardware wrap-arounds."""

    zone: str
    joules: float


class HostReading(NamedTuple):
    temperatures: tuple[SensorTemperature, ...] = ()
    cpu_temperatures: tuple[CpuTemperature, ...] = ()
    fans: tuple[FanReading, ...] = ()
    cpu_utilization_ratio: float | None = None
    cpu_count: int | None = None
    load1: float | None = None
    load5: float | None = None
    load15: float | None = None
    memory_total_bytes: int | None = None
    memory_available_bytes: int | None = None
    cpu_energy: tuple[CpuEnergy, ...] = ()
    fan_controls: tuple[FanControl, ...] = ()
    voltages: tuple[Electrical, ...] = ()
    powers: tuple[Electrical, ...] = ()
    currents: tuple[Electrical, ...] = ()
    notes: tuple[str, ...] = ()
    intrusions: tuple[Electrical, ...] = ()  # chassis intrusion alarms (value 1 while raised), where a chip has one


class GpuIdentity(NamedTuple):
    """A GPU the box has had: who it was, kept across restarts (``rigmon.sinks.known``)."""

    uuid: str
    index: int  # type: ignore[assignment]  # a field, where a tuple has a method
    name: str
    pci_bus_id: str | None = None

    @staticmethod
    def parse(entry: object) -> GpuIdentity | None:
        """One as a file keeps it ([uuid, index, name, bus id or null]: known.json, a recording's
        header), else None: the texts short and made printable, the index one NVML can give."""
        if not isinstance(entry, list) or len(entry) != 4:
            return None
        uuid, index, name, bus = entry
        texts = (uuid, name) + ((bus,) if bus is not None else ())
        if not all(isinstance(t, str) and 0 < len(t) <= 256 for t in texts):
            return None
        if index.__class__ is not int or not 0 <= index < 64:  # NVML's limit per box
            return None
        return GpuIdentity(printable(uuid), index, printable(name), printable(bus) if isinstance(bus, str) else None)

    def entry(self) -> list[object]:
        """As a file keeps it (``parse`` reads it back)."""
        return [self.uuid, self.index, self.name, self.pci_bus_id]


class SystemInfo(NamedTuple):
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_error: str | None = None  # why NVML cannot start (pynvml's NVMLError_<name>), None while it answers
    gpus_known: int | None = None  # GPUs the box has had, here now or before (kept across restarts)
    missing_gpus: tuple[GpuIdentity, ...] = ()  # of those, the ones NVML no longer lists


class ReaderStatus(NamedTuple):
    """How one reader fared at this poll: node_exporter's collector_success and duration."""

    name: str
    ok: bool
    duration_seconds: float
    error: str | None = None


class Drift(NamedTuple):
    """One subject's cooling against its own baseline at one poll (``rigmon.readers.cooling``)."""

    subject: str  # "0" (a GPU's index), "cpu0" (a socket), "chip/device/fan" (a fan header)
    state: str  # learning | measuring | comparing | no comparison
    learning_seconds: float | None  # learning: how long until its baseline is learned; else 0
    drift: float | None  # °C hotter than its baseline at the same loads (a fan: its rpm over the baseline's - 1)
    fan_drift: float | None = None  # its fans' (a CPU: its headers') duty over its baseline's at the same loads
    own: float | None = None  # a GPU: its drift beyond what every GPU of the box shares
    load: float | None = None  # the load it compared at (W for a GPU, a ratio for a CPU or a fan's duty)
    baseline: float | None = None  # the baseline at that load: °C over the room, or rpm
    blind: float | None = None  # learned: seconds it has compared nothing for (0 while it compares)
    excess: float | None = None  # a GPU: °C its baseline runs above its siblings' (same model, box) at the same power


class Cooling(NamedTuple):
    """The box's cooling at one poll, against its own past: each GPU's (by index), CPU socket's
    (by socket) and fan header's ("chip/device/fan") drift, and the rise every GPU shares."""

    gpus: dict[int, Drift]
    cpus: dict[int, Drift]
    fans: dict[str, Drift]
    shared: float | None  # °C that every GPU with a drift (two or more) runs hotter, else None
    reference: str  # inlet | idle | none | pending: what the room's temperature is taken from


class Sample(NamedTuple):
    time: float
    host: HostReading | None
    gpus: tuple[GpuReading, ...]
    gpu_info: tuple[GpuInfo, ...]
    system: SystemInfo
    events: tuple[XidEvent, ...] = ()
    readers: tuple[ReaderStatus, ...] = ()
    processes: tuple[ProcessInfo, ...] = ()  # who the GPU processes are (where /proc tells)
    cooling: Cooling | None = None  # against each subject's own past, where the pipeline keeps a baseline

    def gpu(self, index: int) -> GpuReading | None:
        return next((g for g in self.gpus if g.index == index), None)


def mean_of(values: Iterable[float | None]) -> float | None:
    """The mean of the readings there are (None: none)."""
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def fan_key(f: FanReading) -> str:
    """A fan header as the cooling baselines name it: "chip/device/fan"."""
    return f"{f.chip}/{f.device or ''}/{f.label}"


def to_jsonable(obj: Any) -> Any:
    """A plain-JSON view of any sample object (records become objects, tuples lists, NaN and
    infinities null: JSON has no such numbers)."""
    if hasattr(obj, "_asdict"):
        return {name: to_jsonable(value) for name, value in obj._asdict().items()}
    if isinstance(obj, (tuple, list)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
