"""The table of readings: every value rigmon exports, named once.

Each ``Reading`` says where its value is in a sample, its unit, its Prometheus family and
label values, whether it is an InfluxDB field (and of which measurement), whether alert
rules can use it and whether the burn-in keeps it. Its ``name`` is the one name it has
everywhere: the InfluxDB field and the rule variable. Names follow the Prometheus scheme in
base units (``power_watts``, ``utilization_gpu_ratio``, ``pcie_replays``: a counter without
``_total``); the Prometheus family is the entity's prefix and the name, with a label where
one family holds several readings (``rigmon_gpu_utilization_ratio{kind="gpu"}``).

The Prometheus collector, the line-protocol encoder, the alert entities and the burn-in's
ticks are generated from this table (``rigmon.model.project``), and so are the docs' metrics and
InfluxDB tables (``python -m rigmon.model.readings docs/*.md``). Adding a reading is an entry here
and the reader line that fills the sample.

A ``get`` is a path from the entity's record (``g`` a GpuReading, ``i`` its GpuInfo, ``s`` the
Sample, ``h`` the HostReading, ``r`` the record of a host entity: a CPU socket, a sensor, a
fan, a RAPL zone), None-safe at every step, or a function of those, or None for a variable
the alert engine gives (XID counts, PSU budgets).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from . import nvml_state
from .sample import CLOCK_EVENT_BITS, TIMED_REASONS

if TYPE_CHECKING:
    from .sample import GpuInfo, GpuReading, HostReading, Sample


class Family(NamedTuple):
    """A Prometheus metric family: its name (a counter without ``_total``), type, help and the
    labels its readings add to the entity's."""

    name: str
    type: str  # gauge | counter
    help: str
    labels: tuple[str, ...] = ()
    group: str = "gpu"  # gpu: with every sample; host: when the host reader ran; processes: when asked for
    sparse: bool = False  # a bool family with a series only while its reading is true (one per active state)


# The settings of a GPU read once at start that no rule compares against: one series per GPU,
# each setting a label, rather than a gauge each that Prometheus would store every scrape.
SETTINGS_LABELS = (
    "power_limit_min_watts",
    "power_limit_max_watts",
    "power_limit_default_watts",
    "shutdown_celsius",
    "gpu_max_celsius",
    "memory_max_celsius",
    "max_sm_clock_hertz",
    "max_memory_clock_hertz",
    "applications_sm_clock_hertz",
    "gpu_max_pcie_generation",
    "mig_enabled",
    "mig_pending",
)


class Entity(NamedTuple):
    """What a reading belongs to: one record per GPU, fan, CPU socket… with its labels."""

    kind: str
    prometheus_labels: tuple[str, ...]  # label names, in order
    influx_tags: tuple[str, ...]  # tag names besides host
    measurement: str | None  # the InfluxDB measurement of its fields (None: none)
    rule_kind: str | None  # the alert rule kind whose variables its rule readings are


class Reading(NamedTuple):
    name: str
    entity: str
    get: str | Callable[..., Any] | None
    unit: str  # watts, joules, celsius, hertz, bytes, seconds, ratio, count, bool, rpm, text
    doc: str
    family: str | Family | None = None  # a family of FAMILIES by name, or its own; None: not in Prometheus
    labels: tuple[str, ...] = ()  # values of the family's own labels
    influx: bool = True  # an InfluxDB field of the entity's measurement
    rule: bool = True  # a variable of the entity's alert rule kind
    burnin: bool = False  # kept in the burn-in's ticks
    old: str | None = None  # its rule-variable name before 0.2: accepted for one release, with a warning
    measurement: str | None = None  # another measurement than the entity's (gpu_info)
    always: bool = False  # read for a lost GPU too
    static: bool = False  # from what is read once at start (GpuInfo): rules see it for a lost GPU too
    page: bool = False  # kept in the page's history (a week) and shown on its card: a GPU's own field


ENTITIES = {
    "gpu": Entity("gpu", ("gpu", "uuid"), ("gpu", "uuid", "name"), "gpu", "gpu"),
    "gpu_fan": Entity("gpu_fan", ("gpu", "uuid", "fan"), ("gpu", "uuid", "name"), "gpu", "gpu_fan"),
    "cpu": Entity("cpu", ("socket", "chip", "sensor"), ("socket", "chip", "sensor"), "cpu_temp", "cpu"),
    "temperature": Entity(
        "temperature", ("chip", "sensor", "device"), ("chip", "sensor", "device"), "temperature", None
    ),
    "fan": Entity("fan", ("chip", "fan", "device"), ("chip", "fan", "device"), "fan", "fan"),
    "fan_control": Entity("fan_control", ("chip", "fan", "device"), ("chip", "fan", "device"), "fan_control", None),
    "voltage": Entity("voltage", ("chip", "sensor", "device"), ("chip", "sensor", "device"), "voltage", None),
    "power_input": Entity(
        "power_input", ("chip", "sensor", "device"), ("chip", "sensor", "device"), "power_input", None
    ),
    "current_input": Entity(
        "current_input", ("chip", "sensor", "device"), ("chip", "sensor", "device"), "current_input", None
    ),
    "gpu_process": Entity("gpu_process", ("gpu", "uuid", "pid", "user", "job"), (), None, None),
    "gpu_mig": Entity(
        "gpu_mig",
        ("gpu", "uuid", "gpu_instance", "compute_instance", "profile"),
        ("gpu", "uuid", "gpu_instance", "compute_instance", "profile"),
        "gpu_mig",
        None,
    ),
    "cpu_energy": Entity("cpu_energy", ("zone",), ("zone",), "cpu_energy", None),
    "host": Entity("host", (), (), "host", "host"),
    "psu": Entity("psu", ("psu",), ("psu",), None, "psu"),
    "sensor": Entity("sensor", ("sensor_kind", "sensor"), (), None, "sensor"),
}

LAST = " (from the last poll)"

# Prometheus families in exposition order. ``gpu_info``, ``gpu_missing``, ``gpu_xid_errors`` and
# ``nvml_error_info`` are filled by the exporter itself (identity labels; XID counts since start;
# NVML's error), not by readings: their labels are EXPORTER_LABELS'.
# a table, one line per entry: the formatter leaves it as written
# fmt: off
FAMILIES = {f.name: f for f in (
    Family("rigmon_gpu_info", "gauge", "GPU identity; always 1."),
    Family("rigmon_gpu_missing", "gauge", "1 for each GPU the box has had (kept across restarts) that NVML no "
                                          "longer lists."),
    Family("rigmon_gpu_up", "gauge", "1 if the GPU answers, 0 if it is lost (fell off the bus)."),
    Family("rigmon_gpu_power_watts", "gauge", "Power draw (NVML's 1 s average on Ampere and newer)."),
    Family("rigmon_gpu_power_limit_watts", "gauge", "Enforced power limit."),
    Family("rigmon_gpu_settings_info", "info", "The GPU's settings read at start, one label each (empty where "
                                               "the GPU gives none): power-limit bounds, temperature limits, "
                                               "maximum and application clocks, its own PCIe generation, MIG mode "
                                               "now and after the next reset; always 1.", SETTINGS_LABELS),
    Family("rigmon_gpu_energy_joules", "counter", "Energy used since the driver loaded."),
    Family("rigmon_gpu_temperature_celsius", "gauge", "GPU core and memory temperature.", ("sensor",)),
    Family("rigmon_gpu_temperature_threshold_celsius", "gauge", "The temperature at which the GPU slows down "
                                                                "(its other limits: rigmon_gpu_settings_info).",
           ("threshold",)),
    Family("rigmon_gpu_utilization_ratio", "gauge", "Share of the last sample period the GPU (kind=gpu) or its "
                                                    "memory controller (kind=memory) was busy.", ("kind",)),
    Family("rigmon_gpu_clock_hertz", "gauge", "Current clocks.", ("clock",)),
    Family("rigmon_gpu_clock_event_active", "gauge", "1 while a clock-event (throttle) reason is active, absent "
                                                     "while it is not (rigmon_gpu_up says whether the GPU "
                                                     "answers). sw_power_cap is normal under full load.",
           ("reason",), sparse=True),
    Family("rigmon_gpu_clock_event_seconds", "counter", "Time spent throttled, by reason, since the driver loaded.",
           ("reason",)),
    Family("rigmon_gpu_memory_used_bytes", "gauge", "Device memory in use."),
    Family("rigmon_gpu_memory_total_bytes", "gauge", "Device memory size."),
    Family("rigmon_gpu_performance_state", "gauge", "P-state: 0 is maximum performance, 15 minimum."),
    Family("rigmon_gpu_fan_speed_ratio", "gauge", "Fan speed NVML reports: the intended speed (may exceed 1; a "
                                                  "blocked fan still reports it)."),
    Family("rigmon_gpu_fan_target_speed_ratio", "gauge", "Fan speed the driver asks for."),
    Family("rigmon_gpu_fan_speed_rpm", "gauge", "Measured fan speed (where the board reports it)."),
    Family("rigmon_gpu_pcie_link_generation", "gauge", "PCIe link generation (drops at idle by design): "
                                                       "link=current, max (what GPU and slot allow), expected "
                                                       "(config).", ("link",)),
    Family("rigmon_gpu_pcie_link_width", "gauge", "PCIe link width in lanes (drops at idle by design).", ("link",)),
    Family("rigmon_gpu_pcie_replays", "counter", "PCIe replays: link errors (risers, seating)."),
    Family("rigmon_gpu_pcie_throughput_bytes_per_second", "gauge", "PCIe throughput over 20 ms.", ("direction",)),
    Family("rigmon_gpu_ecc_errors", "counter", "ECC errors (counter=volatile since boot, aggregate lifetime).",
           ("type", "counter")),
    Family("rigmon_gpu_remapped_rows", "counter", "Memory rows remapped, by cause.", ("cause",)),
    Family("rigmon_gpu_remapped_rows_pending", "gauge", "1 if a row remap waits for a GPU reset."),
    Family("rigmon_gpu_remapped_rows_failure", "gauge", "1 if a row remap failed."),
    Family("rigmon_gpu_retired_pages", "counter", "Memory pages retired (boards before Ampere), by cause.",
           ("cause",)),
    Family("rigmon_gpu_retired_pages_pending", "gauge", "1 if a page retirement waits for a GPU reset."),
    Family("rigmon_gpu_processes", "gauge", "Compute processes on the GPU."),
    Family("rigmon_gpu_processes_memory_bytes", "gauge", "Device memory held by compute processes."),
    Family("rigmon_gpu_xid_errors", "counter", "XID critical errors seen since rigmon started, by code.", ("xid",)),
    Family("rigmon_gpu_process_memory_bytes", "gauge", "Device memory held by one of the top gpu.process_series "
                                                       "processes.", group="processes"),
    Family("rigmon_gpu_process_sm_utilization_ratio", "gauge", "That process's share of the SMs' time, where the "
                                                               "GPU gives it.", group="processes"),
    Family("rigmon_gpus", "gauge", "GPUs answering now (state=answering), found at start (state=at_start), and "
                                   "that the box has had, kept across restarts (state=known).", ("state",)),
    Family("rigmon_nvml_up", "gauge", "1 while NVML answers, 0 while it cannot start (rigmon_nvml_error_info says "
                                      "why; rigmon tries it again)."),
    Family("rigmon_nvml_error_info", "gauge", "Why NVML cannot start: NVML's error (DriverNotLoaded, "
                                              "LibRmVersionMismatch, NoPermission, LibraryNotFound…); always 1, absent "
                                              "while NVML answers."),
    Family("rigmon_cpu_temperature_celsius", "gauge", "One temperature per CPU socket; sensor says which was used "
                                                      "(Tdie/Tccd over Tctl, Package over Core).", group="host"),
    Family("rigmon_cpu_temperature_threshold_celsius", "gauge", "CPU temperature limits from the sensor.",
           ("threshold",), group="host"),
    Family("rigmon_sensor_temperature_celsius", "gauge", "Every hwmon temperature sensor.", group="host"),
    Family("rigmon_fan_speed_rpm", "gauge", "Fan speed from hwmon (0 may mean stopped or not connected).",
           group="host"),
    Family("rigmon_fan_turned", "gauge", "1 if the fan has read above 0 rpm, since rigmon started or before "
                                         "(kept in state_dir across restarts); 0: an empty header.", group="host"),
    Family("rigmon_fan_pwm_ratio", "gauge", "Fan header PWM duty (0-1) from hwmon.", group="host"),
    Family("rigmon_fan_control_mode", "gauge", "hwmon pwmN_enable: 0 full speed (or off), 1 manual, 2 and up "
                                               "automatic (driver-specific).", group="host"),
    Family("rigmon_fan_min_rpm", "gauge", "The fan's minimum speed in the chip: below it the chip raises its alarm.",
           group="host"),
    Family("rigmon_fan_alarm", "gauge", "1 while the chip's alarm for the fan is raised.", group="host"),
    Family("rigmon_cpu_utilization_ratio", "gauge", "CPU busy share across all cores since the previous poll.",
           group="host"),
    Family("rigmon_cpu_cores", "gauge", "Logical CPUs.", group="host"),
    Family("rigmon_load_average", "gauge", "System load average.", ("window",), group="host"),
    Family("rigmon_memory_total_bytes", "gauge", "Host memory size.", group="host"),
    Family("rigmon_memory_available_bytes", "gauge", "Host memory available.", group="host"),
    Family("rigmon_cpu_energy_joules", "counter", "CPU energy by RAPL zone, made monotonic across wraps.",
           group="host"),
    Family("rigmon_host_sensors_visible", "gauge", "1 if any hwmon temperature or fan sensor is visible.",
           group="host"),
    Family("rigmon_hwmon_voltage_volts", "gauge", "hwmon voltage inputs (rails, a PSU's outputs).", group="host"),
    Family("rigmon_hwmon_power_watts", "gauge", "hwmon power inputs (a PSU's draw: corsair-psu, …).", group="host"),
    Family("rigmon_hwmon_current_amperes", "gauge", "hwmon current inputs.", group="host"),
)}
# fmt: on


# --- values derived from several fields ---------------------------------------------------------
def _power_ratio(g: GpuReading, i: GpuInfo | None, s: Sample) -> float | None:
    power, limit = g.power_watts, g.power_limit_watts
    return power / limit if power is not None and limit else None


def _clock_event_mask(g: GpuReading, i: GpuInfo | None, s: Sample) -> float | None:
    ce = g.clock_events
    if ce is None:
        return None
    return sum(bit for (name, bit), active in zip(CLOCK_EVENT_BITS, ce, strict=True) if active)


def _retired_pages(g: GpuReading, i: GpuInfo | None, s: Sample) -> float | None:
    p = g.retired_pages
    counts = [c for c in (p.single_bit, p.double_bit) if c is not None] if p is not None else []
    return sum(counts) if counts else None


def _process_count(g: GpuReading, i: GpuInfo | None, s: Sample) -> float | None:
    return len(g.processes) if g.processes is not None else None


def _process_memory(g: GpuReading, i: GpuInfo | None, s: Sample) -> float | None:
    """What the processes hold where NVML gives it (not under WDDM or WSL: then unknown, never 0)."""
    held = [p.used_memory_bytes for p in g.processes or () if p.used_memory_bytes is not None]
    return sum(held) if held or g.processes == () else None


# Display servers and compositors: a desktop's GPU holds them whether or not a job runs. Below
# DISPLAY_FLOOR each, their memory is no job's (a compositor holds tens of MiB; a training
# process that happens to be called so holds GiB).
DISPLAY_PROGRAMS = frozenset(
    {
        "Xorg",
        "X",
        "Xwayland",
        "gnome-shell",
        "mutter",
        "kwin_x11",
        "kwin_wayland",
        "kwin",
        "plasmashell",
        "sway",
        "weston",
        "Hyprland",
        "cinnamon",
        "muffin",
        "xfwm4",
        "picom",
        "compton",
        "compiz",
        "gamescope",
        "gdm-x-session",
        "sddm-greeter",
        "mate-session",
        "marco",
        "budgie-wm",
        "labwc",
        "wayfire",
        "river",
    }
)
DISPLAY_FLOOR = 1 << 30


def _job_memory(g: GpuReading, i: GpuInfo | None, s: Sample) -> float | None:
    """What the compute processes hold, less the display servers' and compositors' (each under
    DISPLAY_FLOOR): a job's memory, not a desktop's."""
    if g.processes is None:
        return None
    commands = {p.pid: p.command for p in s.processes} if s.processes else {}
    held = known = 0
    for p in g.processes:
        used = p.used_memory_bytes
        if used is None:
            continue
        known += 1
        program = (commands.get(p.pid) or "").split(" ", 1)[0].rsplit("/", 1)[-1]
        if used < DISPLAY_FLOOR and program in DISPLAY_PROGRAMS:
            continue
        held += used
    return held if known or not g.processes else None


def _cooling_words(g: GpuReading, i: GpuInfo | None, s: Sample) -> str | None:
    """What GpuCoolingDrift says it drifted by: °C, and its fans' duty where it has fans that moved."""
    own, fan = g.cooling_drift_own_celsius, g.cooling_fan_drift_ratio
    if own is None:
        return None
    text = f"{own:+.0f} °C over the room"
    return text + f", its fans {fan * 100:+.0f} points" if fan is not None and abs(fan) >= 0.05 else text


def _fastest_fan(g: GpuReading, i: GpuInfo | None, s: Sample) -> float | None:
    return max((r for r in g.fan_speed_rpm or () if r is not None), default=None)


def _target_pcie(g: GpuReading, i: GpuInfo | None, s: Sample) -> float | None:
    return (i.expected_pcie_generation or i.max_pcie_generation) if i is not None else None


def _target_width(g: GpuReading, i: GpuInfo | None, s: Sample) -> float | None:
    return (i.expected_pcie_width or i.max_pcie_width) if i is not None else None


class GpuFan(Protocol):
    """One fan of a GPU as the ``gpu_fan`` readings read it (``project.GpuFan``)."""

    speed_ratio: float | None
    target_speed_ratio: float | None
    speed_rpm: float | None


def _asked(f: GpuFan, g: GpuReading, s: Sample) -> float | None:
    """A GPU fan: what it is asked for, the reported speed where no target is given."""
    return f.target_speed_ratio if f.target_speed_ratio is not None else f.speed_ratio


def _rpm_per_asked(f: GpuFan, g: GpuReading, s: Sample) -> float | None:
    asked = _asked(f, g, s)
    return f.speed_rpm / asked if f.speed_rpm is not None and asked else None


def _answering(s: Sample, h: HostReading | None) -> float | None:
    return sum(1 for g in s.gpus if not g.lost)


def _gpu_power(s: Sample, h: HostReading | None) -> float | None:
    # a float even with no GPU (sum() of nothing is the integer 0: an InfluxDB field type conflict)
    return float(sum(g.power_watts or 0.0 for g in s.gpus if not g.lost))


def _sensors_visible(s: Sample, h: HostReading | None) -> float | None:
    return 1 if h is not None and (h.temperatures or h.fans) else 0


def _intrusions(s: Sample, h: HostReading | None) -> float | None:
    return sum(1 for i in h.intrusions if i.alarm) if h is not None and h.intrusions else None


def _nvml_up(s: Sample, h: HostReading | None) -> float | None:
    system = s.system
    if system is None or system.gpus_known is None:  # no GPU reader (disabled in the config)
        return None
    return 0 if system.nvml_error else 1


def _nvml_error(s: Sample) -> str | None:
    return s.system.nvml_error if s.system is not None else None


def _nvml_cause(s: Sample, h: HostReading | None) -> str | None:
    return nvml_state.cause(_nvml_error(s))


def _nvml_fix(s: Sample, h: HostReading | None) -> str | None:
    return nvml_state.fix(_nvml_error(s))


def _nvml_ok(s: Sample, h: HostReading | None) -> float | None:
    status = next((r for r in s.readers if r.name == "gpu"), None)
    return status.ok if status else None


def _shared_drift(s: Sample, h: HostReading | None) -> float | None:
    return s.cooling.shared if s.cooling is not None else None


def _host(s: Sample, h: HostReading | None, name: str) -> Any:
    return getattr(h, name) if h is not None else None


def R(  # noqa: N802
    name: str,
    entity: str,
    get: str | Callable[..., Any] | None,
    unit: str,
    doc: str,
    family: str | Family | None = None,
    labels: Iterable[str] = (),
    **kw: Any,
) -> Reading:
    return Reading(name, entity, get, unit, doc, family, tuple(labels), **kw)


_EVENT_DOCS = {
    "sw_power_cap": "SW power cap active (normal under full load)",
    "hw_slowdown": "HW slowdown active",
    "sw_thermal_slowdown": "SW thermal slowdown active",
    "hw_thermal_slowdown": "HW thermal slowdown active",
    "hw_power_brake_slowdown": "HW power brake active",
    "board_limit": "the board's own limit holds the clocks (NVML's board limit reason)",
    "reliability": "the reliability voltage limit holds the clocks (normal for a card boosting at its top voltage)",
}

# a table, one line per entry: the formatter leaves it as written
# fmt: off
READINGS: tuple[Reading, ...] = (
    # --- each GPU, every poll (the ``gpu`` measurement, ``gpu`` rules) ---
    R("lost", "gpu", "g.lost", "bool", "the GPU fell off the bus or stopped answering", always=True),
    R("up", "gpu", lambda g, i, s: 0 if g.lost else 1, "bool", "1 answering, 0 lost", "rigmon_gpu_up",
      influx=False, rule=False, always=True),
    R("asleep", "gpu", "g.asleep", "bool",
      "its PCI device is runtime-suspended (a laptop's or an RTD3 desktop's idle GPU): asked nothing until it wakes; "
      "unknown where its runtime power management is off (a server's GPU: never asleep)",
      Family("rigmon_gpu_asleep", "gauge", "1 while the GPU's PCI device is runtime-suspended: rigmon asks it "
                                           "nothing until it wakes, so as not to wake it (only where its runtime "
                                           "power management is on)."), influx=False,
      always=True),
    R("missing", "gpu", lambda g, i, s: False, "bool",
      "a GPU the box has had (kept across restarts) that NVML no longer lists: true only for such a GPU, whose "
      "other variables are unknown", influx=False, always=True),
    R("power_watts", "gpu", "g.power_watts", "watts", "power draw", "rigmon_gpu_power_watts", burnin=True, page=True),
    R("power_limit_watts", "gpu", "g.power_limit_watts", "watts", "enforced power limit",
      "rigmon_gpu_power_limit_watts", burnin=True, page=True),
    R("power_management_limit_watts", "gpu", "g.power_management_limit_watts", "watts",
      "the power limit set (nvidia-smi -pl); the enforced limit is the lowest of it and any other",
      Family("rigmon_gpu_power_management_limit_watts", "gauge", "Power limit set (nvidia-smi -pl).")),
    R("power_ratio", "gpu", _power_ratio, "ratio", "power_watts / power_limit_watts", influx=False),
    R("energy_joules", "gpu", "g.energy_joules", "joules", "energy since the driver loaded",
      "rigmon_gpu_energy_joules", burnin=True),
    R("energy_counter_stuck", "gpu", "g.energy_counter_stuck", "bool",
      "its energy counter stands still while it draws power (20 kJ and 4 of its reads): jobs and the burn-in "
      "integrate its power instead",
      Family("rigmon_gpu_energy_counter_stuck", "gauge", "1 while the GPU's energy counter stands still as it draws "
                                                         "power: its energy is integrated from its power instead.",
             sparse=True), burnin=True),
    R("temperature_celsius", "gpu", "g.temperature_celsius", "celsius", "GPU temperature",
      "rigmon_gpu_temperature_celsius", ("gpu",), burnin=True, page=True),
    R("memory_temperature_celsius", "gpu", "g.memory_temperature_celsius", "celsius", "memory temperature",
      "rigmon_gpu_temperature_celsius", ("memory",), burnin=True, page=True),
    R("utilization_gpu_ratio", "gpu", "g.utilization_gpu_ratio", "ratio", "GPU busy share (0-1)",
      "rigmon_gpu_utilization_ratio", ("gpu",), burnin=True, old="utilization_gpu", page=True),
    R("utilization_memory_ratio", "gpu", "g.utilization_memory_ratio", "ratio",
      "memory controller busy share (0-1)", "rigmon_gpu_utilization_ratio", ("memory",), old="utilization_memory"),
    R("graphics_clock_hertz", "gpu", "g.graphics_clock_hertz", "hertz", "graphics clock", "rigmon_gpu_clock_hertz",
      ("graphics",)),
    R("sm_clock_hertz", "gpu", "g.sm_clock_hertz", "hertz", "SM clock", "rigmon_gpu_clock_hertz", ("sm",),
      burnin=True, page=True),
    R("memory_clock_hertz", "gpu", "g.memory_clock_hertz", "hertz", "memory clock", "rigmon_gpu_clock_hertz",
      ("memory",)),
    R("memory_used_bytes", "gpu", "g.memory_used_bytes", "bytes", "device memory in use",
      "rigmon_gpu_memory_used_bytes", page=True),
    R("memory_total_bytes", "gpu", "g.memory_total_bytes", "bytes", "device memory size",
      "rigmon_gpu_memory_total_bytes", page=True),
    R("performance_state", "gpu", "g.performance_state", "count", "P-state (0 fastest)",
      "rigmon_gpu_performance_state"),
    R("pcie_generation", "gpu", "g.pcie_generation", "count", "current PCIe generation",
      "rigmon_gpu_pcie_link_generation", ("current",), burnin=True, page=True),
    R("pcie_width", "gpu", "g.pcie_width", "count", "current PCIe width", "rigmon_gpu_pcie_link_width",
      ("current",), burnin=True, page=True),
    R("pcie_full_in_other_pstate", "gpu", "g.pcie_full_in_other_pstate", "bool",
      "the link was seen at target_pcie_generation in another P-state than the one it is in now (it steps "
      "down with the P-state)", influx=False),
    R("pcie_replays", "gpu", "g.pcie_replays", "count", "PCIe replay counter (since the driver loaded)",
      "rigmon_gpu_pcie_replays", page=True),
    R("pcie_rx_bytes_per_second", "gpu", "g.pcie_rx_bytes_per_second", "bytes", "PCIe receive throughput",
      "rigmon_gpu_pcie_throughput_bytes_per_second", ("rx",), rule=False),
    R("pcie_tx_bytes_per_second", "gpu", "g.pcie_tx_bytes_per_second", "bytes", "PCIe transmit throughput",
      "rigmon_gpu_pcie_throughput_bytes_per_second", ("tx",), rule=False),
    *(R(f"event_{name}", "gpu", f"g.clock_events.{name}", "bool", _EVENT_DOCS.get(name, f"{name} active"),
        "rigmon_gpu_clock_event_active", (name,), rule=name in _EVENT_DOCS,
        old=name if name in _EVENT_DOCS else None) for name, _ in CLOCK_EVENT_BITS),
    R("clock_event_mask", "gpu", _clock_event_mask, "count", "the active clock-event reasons as NVML's bit mask",
      rule=False),
    *(R(f"throttle_{name}_seconds", "gpu", f"g.throttle_seconds.{name}", "seconds",
        f"time in {name} since the driver loaded", "rigmon_gpu_clock_event_seconds", (name,), rule=False)
      for name in TIMED_REASONS),
    R("ecc_corrected_volatile", "gpu", "g.ecc_errors.corrected_volatile", "count", "corrected ECC errors (volatile)",
      "rigmon_gpu_ecc_errors", ("corrected", "volatile")),
    R("ecc_uncorrected_volatile", "gpu", "g.ecc_errors.uncorrected_volatile", "count",
      "uncorrected ECC errors (volatile)", "rigmon_gpu_ecc_errors", ("uncorrected", "volatile"), burnin=True,
      old="ecc_uncorrected"),
    R("ecc_corrected_aggregate", "gpu", "g.ecc_errors.corrected_aggregate", "count",
      "corrected ECC errors (lifetime)", "rigmon_gpu_ecc_errors", ("corrected", "aggregate")),
    R("ecc_uncorrected_aggregate", "gpu", "g.ecc_errors.uncorrected_aggregate", "count",
      "uncorrected ECC errors (lifetime)", "rigmon_gpu_ecc_errors", ("uncorrected", "aggregate")),
    R("remapped_rows_correctable", "gpu", "g.remapped_rows.correctable", "count",
      "rows remapped for correctable errors", "rigmon_gpu_remapped_rows", ("correctable",)),
    R("remapped_rows_uncorrectable", "gpu", "g.remapped_rows.uncorrectable", "count",
      "rows remapped for uncorrectable errors", "rigmon_gpu_remapped_rows", ("uncorrectable",)),
    R("remap_pending", "gpu", "g.remapped_rows.pending", "bool", "a row remap waits for a reset",
      "rigmon_gpu_remapped_rows_pending", burnin=True),
    R("remap_failure", "gpu", "g.remapped_rows.failure", "bool", "a row remap failed",
      "rigmon_gpu_remapped_rows_failure", burnin=True),
    R("retired_pages_single_bit", "gpu", "g.retired_pages.single_bit", "count",
      "pages retired for repeated correctable errors", "rigmon_gpu_retired_pages", ("single_bit_ecc",)),
    R("retired_pages_double_bit", "gpu", "g.retired_pages.double_bit", "count",
      "pages retired for an uncorrectable error", "rigmon_gpu_retired_pages", ("double_bit_ecc",)),
    R("retired_pages_pending", "gpu", "g.retired_pages.pending", "bool", "a page retirement waits for a reset",
      "rigmon_gpu_retired_pages_pending"),
    R("retired_pages", "gpu", _retired_pages, "count", "memory pages retired, any cause (boards before Ampere)",
      influx=False),
    R("processes", "gpu", _process_count, "count", "compute processes on the GPU", "rigmon_gpu_processes"),
    R("processes_memory_bytes", "gpu", _process_memory, "bytes", "device memory held by compute processes",
      "rigmon_gpu_processes_memory_bytes", old="process_memory_bytes"),
    R("job_memory_bytes", "gpu", _job_memory, "bytes",
      "device memory held by compute processes other than display servers and compositors (each under 1 GiB): "
      "a job's, not a desktop's",
      Family("rigmon_gpu_job_memory_bytes", "gauge", "Device memory held by compute processes other than display "
                                                     "servers and compositors (each under 1 GiB).")),
    R("fan_speed_rpm_max", "gpu", _fastest_fan, "rpm", "the fastest GPU fan's measured speed", influx=False,
      rule=False, burnin=True),
    R("xid_total", "gpu", None, "count", "XID errors seen since start", influx=False, always=True),
    R("last_xid", "gpu", None, "count", "the latest XID code (0: none)", influx=False, always=True),
    R("cooling_state", "gpu", "g.cooling_state", "text",
      "its cooling baseline: learning, measuring (the first window after it), comparing, or no comparison (the "
      "last window ran at powers the baseline never saw)", influx=False, rule=False),
    R("cooling_learning_seconds", "gpu", "g.cooling_learning_seconds", "seconds",
      "time until its cooling baseline is learned (0 once it is)",
      Family("rigmon_gpu_cooling_learning_seconds", "gauge", "Time until the GPU's cooling baseline is learned; "
                                                             "0 once it is.")),
    R("cooling_drift_celsius", "gpu", "g.cooling_drift_celsius", "celsius",
      "how much hotter than its baseline at the same power, over the last window of steady load (above the room)",
      Family("rigmon_gpu_cooling_drift_celsius", "gauge", "How much hotter the GPU runs than its baseline at the "
                                                          "same power, over its last hours of steady load."),
      page=True),
    R("cooling_drift_own_celsius", "gpu", "g.cooling_drift_own_celsius", "celsius",
      "cooling_drift_celsius beyond what every GPU of the box shares (the room, the chassis)"),
    R("cooling_fan_drift_ratio", "gpu", "g.cooling_fan_drift_ratio", "ratio",
      "its fans' duty over its baseline's at the same power, beyond what every GPU of the box shares (0.1: ten "
      "points more): a fan curve that holds the temperature by turning faster",
      Family("rigmon_gpu_cooling_fan_drift_ratio", "gauge", "The GPU's fan duty over its baseline's at the same "
                                                            "power, beyond what the box's GPUs share.")),
    R("cooling_blind_seconds", "gpu", "g.cooling_blind_seconds", "seconds",
      "how long its learned baseline has compared nothing (too little steady load, or only powers it never saw); "
      "0 while it compares",
      Family("rigmon_gpu_cooling_blind_seconds", "gauge", "How long the GPU's learned cooling baseline has compared "
                                                          "nothing; 0 while it compares.")),
    R("cooling_baseline_excess_celsius", "gpu", "g.cooling_baseline_excess_celsius", "celsius",
      "how much hotter its baseline runs than its siblings' (the same model in the box) or its last passing "
      "burn-in at the same power, whichever is more: a fault it had while it learned, or a hot slot",
      Family("rigmon_gpu_cooling_baseline_excess_celsius", "gauge", "How much hotter the GPU's cooling baseline "
                                                                    "runs than its siblings' (the same model in "
                                                                    "the box) or its last passing burn-in at the "
                                                                    "same power, whichever is more.")),
    R("cooling_at_watts", "gpu", "g.cooling_at_watts", "watts", "the power its drift was compared at",
      influx=False),
    R("cooling_drift_words", "gpu", _cooling_words, "text",
      "its drift in words, for a summary: \"+7 °C over the room\", with its fans' where they moved (\", its fans +30 "
      "points\")", influx=False),
    # --- each GPU, read once at start (thresholds, limits, link maxima) ---
    R("power_limit_min_watts", "gpu", "i.power_limit_min_watts", "watts", "lowest settable power limit",
      "rigmon_gpu_settings_info", ("power_limit_min_watts",), influx=False, rule=False, static=True),
    R("power_limit_max_watts", "gpu", "i.power_limit_max_watts", "watts", "highest settable power limit",
      "rigmon_gpu_settings_info", ("power_limit_max_watts",), influx=False, rule=False, static=True),
    R("power_limit_default_watts", "gpu", "i.power_limit_default_watts", "watts", "default power limit",
      "rigmon_gpu_settings_info", ("power_limit_default_watts",), measurement="gpu_info", rule=False, static=True),
    R("shutdown_celsius", "gpu", "i.temperature_thresholds.shutdown", "celsius", "shutdown threshold",
      "rigmon_gpu_settings_info", ("shutdown_celsius",), static=True),
    R("slowdown_celsius", "gpu", "i.temperature_thresholds.slowdown", "celsius", "slowdown threshold",
      "rigmon_gpu_temperature_threshold_celsius", ("slowdown",), burnin=True, static=True),
    R("gpu_max_celsius", "gpu", "i.temperature_thresholds.gpu_max", "celsius",
      "the highest GPU temperature the board allows", "rigmon_gpu_settings_info", ("gpu_max_celsius",),
      influx=False, static=True),
    R("memory_max_celsius", "gpu", "i.temperature_thresholds.memory_max", "celsius",
      "the highest memory temperature the board allows", "rigmon_gpu_settings_info",
      ("memory_max_celsius",), influx=False, static=True),
    R("max_sm_clock_hertz", "gpu", "i.max_sm_clock_hertz", "hertz", "maximum SM clock",
      "rigmon_gpu_settings_info", ("max_sm_clock_hertz",), measurement="gpu_info", static=True),
    R("max_memory_clock_hertz", "gpu", "i.max_memory_clock_hertz", "hertz", "maximum memory clock",
      "rigmon_gpu_settings_info", ("max_memory_clock_hertz",), influx=False, rule=False, static=True),
    R("max_pcie_generation", "gpu", "i.max_pcie_generation", "count",
      "the highest PCIe generation the GPU and its slot allow", "rigmon_gpu_pcie_link_generation", ("max",),
      measurement="gpu_info", static=True),
    R("gpu_max_pcie_generation", "gpu", "i.gpu_max_pcie_generation", "count",
      "the GPU's own maximum PCIe generation", "rigmon_gpu_settings_info", ("gpu_max_pcie_generation",),
      measurement="gpu_info", old="pcie_gpu_max_generation", static=True),
    R("expected_pcie_generation", "gpu", "i.expected_pcie_generation", "count",
      "the generation gpu.pcie_expected_generation sets for a riser forced lower",
      "rigmon_gpu_pcie_link_generation", ("expected",), measurement="gpu_info", static=True),
    R("target_pcie_generation", "gpu", _target_pcie, "count",
      "the PCIe generation the link should reach: expected_pcie_generation, else max_pcie_generation",
      influx=False, burnin=True, old="pcie_max_generation", static=True),
    R("max_pcie_width", "gpu", "i.max_pcie_width", "count", "maximum PCIe width", "rigmon_gpu_pcie_link_width",
      ("max",), measurement="gpu_info", burnin=True, old="pcie_max_width", static=True),
    R("expected_pcie_width", "gpu", "i.expected_pcie_width", "count",
      "the width gpu.pcie_expected_width sets for a slot or riser with fewer lanes", "rigmon_gpu_pcie_link_width",
      ("expected",), measurement="gpu_info", static=True),
    R("target_pcie_width", "gpu", _target_width, "count",
      "the PCIe width the link should reach: expected_pcie_width, else max_pcie_width", influx=False, static=True),
    R("applications_sm_clock_hertz", "gpu", "i.applications_sm_clock_hertz", "hertz",
      "the SM clock applications run at (the base clock; boost runs above it)",
      "rigmon_gpu_settings_info", ("applications_sm_clock_hertz",),
      influx=False, static=True),
    R("pci_bus_id", "gpu", "i.pci_bus_id", "text", "PCI bus id", measurement="gpu_info", rule=False, static=True),
    R("serial", "gpu", "i.serial", "text", "board serial number", measurement="gpu_info", rule=False, static=True),
    R("vbios", "gpu", "i.vbios_version", "text", "VBIOS version", measurement="gpu_info", rule=False, static=True),
    R("compute_capability", "gpu", "i.compute_capability", "text", "CUDA compute capability",
      measurement="gpu_info", rule=False, static=True),
    R("mig_enabled", "gpu", "i.mig_enabled", "bool",
      "MIG mode is on: the GPU is split into instances, and NVML gives no GPU utilisation",
      "rigmon_gpu_settings_info", ("mig_enabled",),
      measurement="gpu_info", static=True),
    R("mig_pending", "gpu", "i.mig_pending", "bool", "MIG mode as it will be after the next GPU reset",
      "rigmon_gpu_settings_info", ("mig_pending",), measurement="gpu_info", rule=False, static=True),
    R("driver", "gpu", "s.system.driver_version", "text", "driver version", measurement="gpu_info", rule=False,
      static=True),
    # --- each GPU fan ---
    R("speed_ratio", "gpu_fan", "f.speed_ratio", "ratio",
      "the speed NVML reports (the intended speed: a blocked fan still reports it)", "rigmon_gpu_fan_speed_ratio"),
    R("target_speed_ratio", "gpu_fan", "f.target_speed_ratio", "ratio", "the speed the driver asks for (0-1)",
      "rigmon_gpu_fan_target_speed_ratio"),
    R("speed_rpm", "gpu_fan", "f.speed_rpm", "rpm", "measured speed, where the board reports it",
      "rigmon_gpu_fan_speed_rpm", old="rpm"),
    R("asked_speed_ratio", "gpu_fan", _asked, "ratio",
      "target_speed_ratio, else speed_ratio where the board gives no target", influx=False, old="target_ratio"),
    R("speed_rpm_per_asked", "gpu_fan", _rpm_per_asked, "rpm",
      "speed_rpm / asked_speed_ratio: how fast the fan turns for what it is asked", influx=False,
      old="rpm_per_target"),
    # --- each MIG instance of a GPU in MIG mode ---
    R("memory_used_bytes", "gpu_mig", "r.memory_used_bytes", "bytes", "device memory in use in the MIG instance",
      Family("rigmon_gpu_mig_memory_used_bytes", "gauge", "Device memory in use in each MIG instance."),
      rule=False),
    R("memory_total_bytes", "gpu_mig", "r.memory_total_bytes", "bytes", "the MIG instance's device memory",
      Family("rigmon_gpu_mig_memory_total_bytes", "gauge", "Each MIG instance's device memory."), rule=False),
    R("processes", "gpu_mig", "r.processes", "count", "compute processes in the MIG instance",
      Family("rigmon_gpu_mig_processes", "gauge", "Compute processes in each MIG instance."), rule=False),
    # --- the host ---
    R("celsius", "cpu", "r.celsius", "celsius", "the socket's chosen temperature", "rigmon_cpu_temperature_celsius"),
    R("high_celsius", "cpu", "r.high_celsius", "celsius", "the sensor's high limit",
      "rigmon_cpu_temperature_threshold_celsius", ("high",)),
    R("critical_celsius", "cpu", "r.critical_celsius", "celsius", "the sensor's critical limit",
      "rigmon_cpu_temperature_threshold_celsius", ("critical",)),
    R("limit_celsius", "cpu", "r.limit_celsius", "celsius",
      "the temperature the CPU runs at by design at most, and throttles to hold: the sensor's critical value "
      "(Intel's TjMax), else its family's figure (AMD Zen 4 and 5 desktops: 95 °C), else host.cpu_limit_celsius",
      "rigmon_cpu_temperature_threshold_celsius", ("limit",)),
    R("limit_from", "cpu", "r.limit_from", "text", "where limit_celsius comes from", influx=False),
    R("cpu_utilization_ratio", "cpu", "h.cpu_utilization_ratio", "ratio", "CPU busy share across all cores (0-1)",
      influx=False, old="cpu_utilization"),
    R("drift_celsius", "cpu", "r.drift_celsius", "celsius",
      "how much hotter than its baseline at the same utilisation, over the last window of steady load",
      Family("rigmon_cpu_cooling_drift_celsius", "gauge", "How much hotter the CPU runs than its baseline at the "
                                                          "same utilisation.", group="host")),
    R("fan_drift_ratio", "cpu", "r.fan_drift_ratio", "ratio",
      "how much more duty the fan headers on the board's curve need than in its baseline at the same utilisation "
      "(0.25: 25 points more, a fan curve that holds the CPU by turning faster)",
      Family("rigmon_cpu_cooling_fan_drift_ratio", "gauge", "The duty of the fan headers on the board's curve over "
                                                            "the CPU's baseline's at the same utilisation.",
             group="host")),
    R("celsius", "temperature", "r.celsius", "celsius", "an hwmon temperature", "rigmon_sensor_temperature_celsius",
      rule=False),
    R("rpm", "fan", "r.rpm", "rpm", "fan speed", "rigmon_fan_speed_rpm"),
    R("turned", "fan", "r.turned", "bool", "has read above 0 rpm (kept across restarts)", "rigmon_fan_turned"),
    R("duty_ratio", "fan", "r.duty", "ratio",
      "the PWM duty its header drives it at (0-1), where hwmon gives one: 0 is a fan stopped by its curve",
      influx=False),
    R("rpm_drift_ratio", "fan", "r.rpm_drift", "ratio",
      "its rpm over its baseline's at the same PWM duty, less 1 (-0.1: a tenth slower, a wearing bearing)",
      Family("rigmon_fan_rpm_drift_ratio", "gauge", "The fan's rpm over its baseline's at the same PWM duty, "
                                                    "less 1.", group="host")),
    R("pwm_ratio", "fan_control", "r.pwm_ratio", "ratio", "PWM duty (0-1)", "rigmon_fan_pwm_ratio", rule=False),
    R("pwm_mode", "fan_control", "r.pwm_mode", "count", "pwmN_enable: 0 full/off, 1 manual, 2+ automatic",
      "rigmon_fan_control_mode", rule=False),
    R("min_rpm", "fan_control", "r.min_rpm", "rpm", "the chip's minimum speed for the fan", "rigmon_fan_min_rpm",
      rule=False),
    R("alarm", "fan_control", "r.alarm", "bool", "the chip's alarm for the fan", "rigmon_fan_alarm", rule=False),
    R("volts", "voltage", "r.value", "volts", "an hwmon voltage input", "rigmon_hwmon_voltage_volts", rule=False),
    R("alarm", "voltage", "r.alarm", "bool", "the chip's alarm for the input (out of the limits it holds)",
      Family("rigmon_hwmon_voltage_alarm", "gauge", "1 while the chip's alarm for a voltage input is raised (out of "
                                                    "its limits).", group="host"), rule=False),
    R("watts", "power_input", "r.value", "watts", "an hwmon power input", "rigmon_hwmon_power_watts", rule=False),
    R("amperes", "current_input", "r.value", "amperes", "an hwmon current input", "rigmon_hwmon_current_amperes",
      rule=False),
    R("memory_bytes", "gpu_process", "r.memory_bytes", "bytes", "device memory the process holds",
      "rigmon_gpu_process_memory_bytes", influx=False, rule=False),
    R("sm_ratio", "gpu_process", "r.sm_ratio", "ratio", "the process's SM share",
      "rigmon_gpu_process_sm_utilization_ratio", influx=False, rule=False),
    R("joules", "cpu_energy", "r.joules", "joules", "RAPL energy, made monotonic across wraps",
      "rigmon_cpu_energy_joules", rule=False),
    R("cpu_utilization_ratio", "host", "h.cpu_utilization_ratio", "ratio", "CPU busy share (0-1)",
      "rigmon_cpu_utilization_ratio", old="cpu_utilization"),
    R("cpu_cores", "host", "h.cpu_count", "count", "logical CPUs", "rigmon_cpu_cores", rule=False),
    R("load1", "host", "h.load1", "count", "load average over 1 minute", "rigmon_load_average", ("1m",), rule=False),
    R("load5", "host", "h.load5", "count", "load average over 5 minutes", "rigmon_load_average", ("5m",),
      rule=False),
    R("load15", "host", "h.load15", "count", "load average over 15 minutes", "rigmon_load_average", ("15m",),
      rule=False),
    R("memory_total_bytes", "host", "h.memory_total_bytes", "bytes", "host memory", "rigmon_memory_total_bytes",
      rule=False),
    R("memory_available_bytes", "host", "h.memory_available_bytes", "bytes", "host memory available",
      "rigmon_memory_available_bytes", rule=False),
    R("sensors_visible", "host", _sensors_visible, "bool", "any hwmon temperature or fan sensor is visible",
      "rigmon_host_sensors_visible", influx=False, rule=False),
    R("intrusion_alarms", "host", _intrusions, "count",
      "chassis intrusion alarms raised (the case was opened), where a chip watches the case",
      Family("rigmon_chassis_intrusion_alarms", "gauge", "Chassis intrusion alarms raised (the case was opened), "
                                                         "where a chip watches the case.", group="host")),
    R("gpus_answering", "host", _answering, "count", "GPUs answering now", "rigmon_gpus", ("answering",)),
    R("gpus_at_start", "host", lambda s, h: len(s.gpu_info), "count", "GPUs found at start", "rigmon_gpus",
      ("at_start",)),
    R("gpus_known", "host", "s.system.gpus_known", "count",
      "GPUs the box has had, here now or before (kept across restarts in state_dir)", "rigmon_gpus", ("known",)),
    R("nvml_up", "host", _nvml_up, "bool", "NVML answers (false: it cannot start; nvml_error says why)",
      "rigmon_nvml_up"),
    R("nvml_error", "host", "s.system.nvml_error", "text",
      "why NVML cannot start (NVML's error: DriverNotLoaded, LibRmVersionMismatch, NoPermission, LibraryNotFound "
      "for no driver…), '' while it answers", influx=False),
    R("nvml_cause", "host", _nvml_cause, "text", "what nvml_error means, in words", influx=False),
    R("nvml_fix", "host", _nvml_fix, "text", "what mends it", influx=False),
    R("gpu_power_watts", "host", _gpu_power, "watts", "total GPU power"),
    R("gpu_cooling_drift_shared_celsius", "host", _shared_drift, "celsius",
      "the cooling drift every GPU of the box shares (the least of theirs, two GPUs or more): the room or the "
      "chassis", Family("rigmon_gpu_cooling_drift_shared_celsius", "gauge", "The cooling drift every GPU of the "
                                                                            "box shares.", group="host")),
    R("nvml_ok", "host", _nvml_ok, "bool", "the GPU reader worked this poll", influx=False),
    # --- given by the alert engine ---
    R("draw_watts", "psu", None, "watts", "power of the group's GPUs (plus the CPU package where counted)",
      influx=False, old="power_watts"),
    R("budget_watts", "psu", None, "watts", "the group's budget", influx=False),
    R("measured", "psu", None, "bool", "the draw is the PSU's own reading (its hwmon power input), not a sum",
      influx=False),
    R("present", "sensor", None, "bool", "the sensor answers now", influx=False),
)
# fmt: on


def _own_families(
    table: tuple[Reading, ...], families: dict[str, Family]
) -> tuple[tuple[Reading, ...], dict[str, Family]]:
    """A reading may bring its own family: it joins the families after the family of the reading
    before it (exposition order follows the table), and the reading then names it. Returns the
    table and the families as they are with those joined."""
    order, out, previous = list(families.values()), [], None
    for r in table:
        if isinstance(r.family, Family):
            at = next((n + 1 for n, f in enumerate(order) if f.name == previous), len(order))
            order.insert(at, r.family)
            r = r._replace(family=r.family.name)
        previous = r.family or previous
        out.append(r)
    return tuple(out), {f.name: f for f in order}


READINGS, FAMILIES = _own_families(READINGS, FAMILIES)


def _page(table: tuple[Reading, ...]) -> tuple[tuple[Reading, str], ...]:
    """The readings the page keeps and shows, each with the ``GpuReading`` field it reads: a
    GPU's own field (``g.<field>``), so a week of it is one number a poll."""
    out = []
    for r in table:
        if not r.page:
            continue
        if r.entity != "gpu" or not isinstance(r.get, str) or not r.get.startswith("g.") or r.unit in ("bool", "text"):
            raise ValueError(f"{r.name}: page=True takes a GPU's own numeric field (get 'g.<field>')")
        out.append((r, r.get[2:]))
    return tuple(out)


PAGE = _page(READINGS)  # in table order: the page's history series gpuN/<name>, its card's readings

# Alert rule variables by kind, with what they mean (rules, doctor and docs/alerts.md use these).
KINDS: dict[str, dict[str, str]] = {}
for _r in READINGS:
    _kind = ENTITIES[_r.entity].rule_kind
    if _r.rule and _kind is not None:
        KINDS.setdefault(_kind, {})[_r.name] = _r.doc
# Old rule-variable names by kind: {old: new}.
DEPRECATED: dict[str, dict[str, str]] = {}
for _r in READINGS:
    _kind = ENTITIES[_r.entity].rule_kind
    if _r.old is not None and _r.rule and _kind is not None:
        DEPRECATED.setdefault(_kind, {})[_r.old] = _r.name
del _r, _kind


GPU_INFO_LABELS = ("gpu", "uuid", "name", "pci_bus_id", "serial", "vbios", "driver", "cuda", "compute_capability")
# the labels of the families the exporter fills itself, where they are not a GPU's (gpu, uuid, own)
EXPORTER_LABELS = {
    "rigmon_gpu_info": GPU_INFO_LABELS,
    "rigmon_gpu_missing": ("gpu", "uuid", "name"),
    "rigmon_nvml_error_info": ("error",),
}


@functools.cache
def family_labels(name: str) -> tuple[str, ...]:
    """Every label of a family: its entity's, then its own."""
    if name in EXPORTER_LABELS:
        return EXPORTER_LABELS[name]
    family = FAMILIES[name]
    entity = next((ENTITIES[r.entity] for r in READINGS if r.family == name), ENTITIES["gpu"])
    return entity.prometheus_labels + family.labels


# --- the tables of docs/ ---------------------------------------------------------------------------
# Measurements that are no reading's: events, alert transitions, budgets (written by their sinks).
OTHER_MEASUREMENTS = (
    ("xid", ("gpu", "uuid", "xid"), "code (one point per XID event, at its time)"),
    ("alert", ("alertname", "severity", "subject"), "status, firing, summary (one point per transition)"),
    ("power_budget", ("psu",), "budget_watts, draw_watts (each poll, where a budget is configured)"),
    (
        "job",
        ("job", "user", "unit"),
        "id, command, started, seconds, gpus, gpu_seconds, energy_joules, cost, "
        "mean_power_watts, mean_power_ratio, mean_utilization_ratio, "
        "peak_temperature_celsius, throttle_seconds, starved, alerts (one point per "
        "finished job, at its end)",
    ),
    ("burnin", ("run", "unit", "gpu"), "tokens_per_s, loss, floor, step (each worker's progress during a burn-in)"),
    ("burnin_verdict", ("run",), "verdict, passed, minutes (one point per burn-in, at its end)"),
)


# what every alert carries besides its subject's labels, and Prometheus's own target labels
ALERT_LABELS = ("alertname", "severity", "host", "instance", "subject", "status", "job")
# InfluxDB's own names (1.x refuses a tag named time; Flux's columns are _field, _value, …)
INFLUX_NAMES = ("time", "_measurement", "_field", "_value", "_time", "_start", "_stop")


@functools.cache
def own_labels() -> frozenset[str]:
    """Every label and tag name rigmon sets itself: each entity's labels and tags, each family's,
    the exporter's, the other measurements' tags, an alert's, and the names InfluxDB keeps. A
    box's own labels ([daemon] labels) take none of them: they would collide on an alert's or
    a point's subject (a tag twice: InfluxDB refuses the whole line)."""
    names = set(ALERT_LABELS) | set(INFLUX_NAMES)
    for entity in ENTITIES.values():
        names |= set(entity.prometheus_labels) | set(entity.influx_tags)
    for family in FAMILIES.values():
        names |= set(family.labels)
    for labels in EXPORTER_LABELS.values():
        names |= set(labels)
    for _, tags, _ in OTHER_MEASUREMENTS:
        names |= set(tags)
    return frozenset(names)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def metrics_rows() -> list[str]:
    """docs/metrics.md's table of the readings' families."""
    rows = ["| metric | type | labels (besides gpu, uuid) | meaning |", "| --- | --- | --- | --- |"]
    for family in FAMILIES.values():
        members = [r for r in READINGS if r.family == family.name]
        labels = []
        for label in family_labels(family.name):
            if label in ("gpu", "uuid"):
                continue
            if label in family.labels and members and family.type != "info":
                n = family.labels.index(label)
                labels.append(f"{label}={'|'.join(dict.fromkeys(r.labels[n] for r in members))}")
            else:
                labels.append(label)
        gpu = "gpu" in family_labels(family.name)
        text = ", ".join(labels) + ("" if gpu or not labels else " (no gpu, uuid)")
        name = family.name + ("_total" if family.type == "counter" else "")
        kind = "gauge" if family.type == "info" else family.type
        rows.append(f"| `{name}` | {kind} | {_cell(text)} | {_cell(family.help)} |")
    return rows


def influx_rows() -> list[str]:
    """docs/influxdb.md's schema table."""
    measurements: dict[str, tuple[tuple[str, ...], list[str]]] = {}
    for r in READINGS:
        entity = ENTITIES[r.entity]
        measurement = r.measurement or entity.measurement
        if r.influx and measurement is not None:
            name = f"fan<N>_{r.name}" if r.entity == "gpu_fan" else r.name
            measurements.setdefault(measurement, (entity.influx_tags, []))[1].append(name)
    rows = ["| measurement | tags | fields |", "| --- | --- | --- |"]
    rows += [f"| `{m}` | {', '.join(tags)} | {', '.join(fields)} |" for m, (tags, fields) in measurements.items()]
    rows += [f"| `{m}` | {', '.join(tags)} | {fields} |" for m, tags, fields in OTHER_MEASUREMENTS]
    return rows


def rule_rows() -> list[str]:
    """docs/alerts.md's table of rule variables, with the old names that still work."""
    rows = ["| kind | variable | meaning |", "| --- | --- | --- |"]
    for kind, names in KINDS.items():
        old = {new: o for o, new in DEPRECATED.get(kind, {}).items()}
        for name, doc in names.items():
            was = f" (was `{old[name]}`)" if name in old else ""
            rows.append(f"| {kind} | `{name}` | {_cell(doc)}{was} |")
    return rows


DOC_TABLES = {"metrics": metrics_rows, "influxdb": influx_rows, "rule-variables": rule_rows}


def docs(text: str) -> str:
    """A document's text with every generated table it holds (between ``<!-- readings:NAME -->``
    and ``<!-- /readings:NAME -->``) written afresh from the table."""
    import re

    for name, rows in DOC_TABLES.items():
        begin, end = f"<!-- readings:{name} -->", f"<!-- /readings:{name} -->"
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
        table = begin + "\n" + "\n".join(rows()) + "\n" + end
        text = pattern.sub(lambda _: table, text)  # noqa: B023 (used at once, in this iteration)
    return text


def main(argv: list[str] | None = None) -> int:
    """python -m rigmon.model.readings [FILE.md ...]: print the tables, or rewrite them where the
    files hold them (docs/*.md); each table must be in one of them."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        for rows in DOC_TABLES.values():
            print("\n".join(rows()), end="\n\n")
        return 0
    found = set()
    for path in argv:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        found |= {name for name in DOC_TABLES if f"<!-- readings:{name} -->" in text}
        with open(path, "w", encoding="utf-8") as f:
            f.write(docs(text))
    for name in DOC_TABLES.keys() - found:
        print(f"no file holds <!-- readings:{name} -->", file=sys.stderr)
    return 1 if DOC_TABLES.keys() - found else 0


if __name__ == "__main__":
    raise SystemExit(main())
