"""The host reader: CPU temperatures, fans, load and memory through psutil, CPU package
energy from RAPL in sysfs. The only module that talks to psutil and /sys.

A machine without hwmon (VMs, containers) is a normal state: the reading says so in its
notes and has no temperatures or fans. Each section fails on its own; the rest survives.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from ..model.sample import CpuEnergy, CpuTemperature, FanReading, HostReading, ProcessInfo, SensorTemperature
from . import hwmon, procs

log = logging.getLogger(__name__)

# Chips that carry CPU temperatures, and how to pick one value per socket.
_AMD_CHIPS = ("k10temp", "zenpower")
_INTEL_CHIPS = ("coretemp",)
_OTHER_CPU_CHIPS = ("cpu_thermal", "cpu-thermal", "soc_thermal")


class SystemHost:
    """The real backend: psutil's calls as they are, plus RAPL zones and what psutil leaves out
    of hwmon read from sysfs, and the GPU processes' /proc entries."""

    def __init__(self, sysfs: str | Path = "/sys", proc: str | Path = "/proc", launchers: tuple[str, ...] = ()):
        self._sysfs = Path(sysfs)
        self._powercap = self._sysfs / "class" / "powercap"
        self._proc = Path(proc)
        self._launchers = tuple(launchers)
        self._always_on: set[str] = set()  # GPUs whose runtime power management is off: never suspended

    def hwmon(self) -> dict:
        return hwmon.raw(self._sysfs)

    def processes(self, pids: list[int]) -> dict:
        return procs.raw(pids, self._proc, self._launchers)

    def start_times(self, pids: list[int]) -> dict:
        return procs.start_times(pids, self._proc)

    def sensors_temperatures(self) -> dict:
        return psutil.sensors_temperatures() if hasattr(psutil, "sensors_temperatures") else {}

    def sensors_fans(self) -> dict:
        return psutil.sensors_fans() if hasattr(psutil, "sensors_fans") else {}

    def cpu_percent(self) -> float:
        return psutil.cpu_percent(interval=None)

    def cpu_count(self) -> int | None:
        return psutil.cpu_count()

    def cpuinfo(self) -> dict[str, Any]:
        """The first CPU's vendor, family and model, from /proc/cpuinfo (what its designed limit
        depends on where its sensor gives none)."""
        out: dict[str, Any] = {}
        with open(self._proc / "cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "vendor_id":
                    out["vendor"] = value[:32]
                elif key in ("cpu family", "model") and value.isdigit():
                    out["family" if key == "cpu family" else "model"] = int(value)
        return out

    def getloadavg(self) -> tuple[float, float, float]:
        return psutil.getloadavg()

    def virtual_memory(self) -> Any:
        return psutil.virtual_memory()

    def gpu_runtime_status(self, buses: list[str]) -> dict[str, str]:
        """Each GPU's PCI runtime power state by its bus (``0000:01:00.0``): ``active``,
        ``suspended``… where runtime power management is on for it (``power/control`` is
        ``auto``); a device where it is off (``on``, every server) is never suspended and is read
        no more (its state is asked once)."""
        out = {}
        for bus in buses:
            if bus in self._always_on:
                continue
            power = self._sysfs / "bus" / "pci" / "devices" / bus / "power"
            control = _sysfs_word(power / "control")
            if control != "auto":
                self._always_on.add(bus)
                continue
            state = _sysfs_word(power / "runtime_status")
            if state is not None:
                out[bus] = state
        return out

    def powercap(self) -> dict[str, list[int]]:
        """``{zone name: [energy_uj, max_energy_range_uj]}`` for the top-level RAPL zones."""
        zones = {}
        for zone in sorted(self._powercap.glob("intel-rapl:*")):
            if zone.name.count(":") != 1:  # sub-zones (core, dram) are parts of a package
                continue
            name = (zone / "name").read_text().strip()  # "package-0", "psys"
            zones[name if name not in zones else zone.name] = [
                int((zone / "energy_uj").read_text()),
                int((zone / "max_energy_range_uj").read_text()),
            ]
        return zones


def _sysfs_word(path: Path) -> str | None:
    """A sysfs attribute that holds one short word (``auto``, ``suspended``), else None."""
    try:
        with open(path, "rb") as f:
            text = f.read(64).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if text.isascii() and text.replace("-", "").isalpha() else None


def _moved(known: float | None, now: Any) -> bool:
    return known is not None and isinstance(now, (int, float)) and abs(now - known) > 0.05


class HostReader:
    name = "host"

    def __init__(
        self,
        backend: Any = None,
        *,
        rapl: bool = True,
        sysfs_sensors: bool = True,
        launchers: tuple[str, ...] = (),
        cpu_limit: float | None = None,
    ):
        self._backend = backend if backend is not None else SystemHost()
        self._cpu_limit = cpu_limit  # host.cpu_limit_celsius: the CPUs' designed limit, where nothing else says it
        self._family_limit: tuple[float, str] | None = None  # the CPU family's documented limit, read at open
        self._rapl = rapl
        self._sysfs_sensors = sysfs_sensors
        self._processes: dict[int, ProcessInfo] = {}  # the GPU processes, read once each
        self._launchers = tuple(launchers)  # jobs.launchers: more programs that launch a job's processes
        self._rapl_state: dict[str, tuple[int, float]] = {}  # zone -> (last raw µJ, joules counted so far)
        self._said: set[str] = set()
        self._cpu_count: int | None = None
        self._turned: set[tuple[str, str, str]] = set()  # fans seen above 0 rpm: headers with a fan on them

    def remember_turned(self, fans) -> None:
        """Fans an earlier daemon saw turn ((chip, device, label)): a restart keeps them turned."""
        self._turned |= set(fans)

    def open(self) -> None:
        self._cpu_count = self._section("cpu_count", self._backend.cpu_count)  # a static fact: read once
        cpu = self._section("cpuinfo", getattr(self._backend, "cpuinfo", dict))
        self._family_limit = family_limit(cpu if isinstance(cpu, dict) else None)
        self._section("cpu", self._backend.cpu_percent)  # psutil's first call only sets a baseline

    def read(self) -> HostReading:
        notes: list[str] = []
        temps = self._section("temperatures", self._backend.sensors_temperatures, notes) or {}
        fans = self._section("fans", self._backend.sensors_fans, notes) or {}
        if not temps and not fans:
            notes.append("no temperature or fan sensors visible (no /sys/class/hwmon: VM or container?)")
        cpu = self._section("cpu", self._backend.cpu_percent, notes)
        load = self._section("load", self._backend.getloadavg, notes)
        memory = self._section("memory", self._backend.virtual_memory, notes)
        extra, found = hwmon.Hwmon(), None
        if self._sysfs_sensors:
            answer = self._section("hwmon", self._backend.hwmon, notes) or {}
            parsed = self._section("hwmon", lambda: (hwmon.parse(answer), _joined(answer, temps, fans)), notes)
            if parsed is not None:
                extra, found = parsed
        temperatures, fan_readings = found if found is not None else _psutil_only(temps, fans)
        self._turned |= {(f.chip, f.device or "", f.label) for f in fan_readings if f.rpm > 0}
        if extra.fans:  # each fan's header's duty: what it is asked to turn at
            duty = {(c.chip, c.device, c.fan): c.pwm_ratio for c in extra.fans}
            fan_readings = tuple(f._replace(duty=duty.get((f.chip, f.device, f.label))) for f in fan_readings)
        cpu_temps = tuple(self._with_limit(c) for c in cpu_temperatures(temperatures))
        if temperatures and not cpu_temps:
            notes.append(f"no CPU temperature sensor among {', '.join(sorted({t.chip for t in temperatures}))}")
        return HostReading(
            temperatures=temperatures,
            cpu_temperatures=cpu_temps,
            fans=tuple(f._replace(turned=(f.chip, f.device or "", f.label) in self._turned) for f in fan_readings),
            fan_controls=extra.fans,
            intrusions=extra.intrusions,
            voltages=extra.voltages,
            powers=extra.powers,
            currents=extra.currents,
            cpu_utilization_ratio=cpu / 100 if cpu is not None else None,
            cpu_count=self._cpu_count,
            load1=load[0] if load else None,
            load5=load[1] if load else None,
            load15=load[2] if load else None,
            memory_total_bytes=memory.total if memory is not None else None,
            memory_available_bytes=memory.available if memory is not None else None,
            cpu_energy=self._energy(notes) if self._rapl else (),
            notes=tuple(notes),
        )

    def _with_limit(self, c: CpuTemperature) -> CpuTemperature:
        """The CPU's designed limit: its sensor's critical value where it gives one (coretemp's is
        TjMax), else its family's (AMD's k10temp gives none), else the config's."""
        if c.critical_celsius is not None and c.chip in _INTEL_CHIPS:
            return c._replace(limit_celsius=c.critical_celsius, limit_from="the sensor's critical value (TjMax)")
        if self._family_limit is not None and c.chip in _AMD_CHIPS:
            return c._replace(limit_celsius=self._family_limit[0], limit_from=self._family_limit[1])
        if self._cpu_limit is not None:
            return c._replace(limit_celsius=self._cpu_limit, limit_from="host.cpu_limit_celsius")
        return c

    def process_info(self, pids: list[int]) -> tuple[ProcessInfo, ...]:
        """Who these GPU processes are. /proc is read when the set of PIDs changes (for all of
        them: a recording then holds every current process at each change); a PID that is
        gone or hidden (another PID namespace) is a bare PID."""
        wanted = set(pids)
        if wanted and wanted == set(self._processes):  # the same PIDs: the same processes, unless one was reused
            starts = self._section("process start times", lambda: self._backend.start_times(sorted(wanted))) or {}
            reused = any(_moved(self._processes[pid].start_time, starts.get(str(pid))) for pid in wanted)
        else:
            reused = False
        if wanted != set(self._processes) or reused:
            answer = self._section("processes", lambda: self._backend.processes(sorted(wanted))) or {}
            found = procs.parse(answer, self._launchers, wanted)
            self._processes = {pid: found.get(pid) or ProcessInfo(pid, job=f"pid:{pid}") for pid in wanted}
        return tuple(self._processes[pid] for pid in sorted(wanted))

    def _section(self, what: str, fn, notes: list[str] | None = None) -> Any:
        try:
            return fn()
        except Exception as e:  # one broken sensor section must not take the reading down
            message = f"{what} unreadable: {type(e).__name__}: {e}"
            if notes is not None:
                notes.append(message)
            if message not in self._said:
                self._said.add(message)
                log.warning("%s", message)
            return None

    def _energy(self, notes: list[str]) -> tuple[CpuEnergy, ...]:
        zones = self._section("RAPL energy", self._backend.powercap, notes)
        if not zones:
            return ()
        out = []
        for zone, answer in zones.items():
            raw, max_range = answer
            last = self._rapl_state.get(zone)
            if last is None:
                counted = raw / 1e6
            else:
                last_raw, counted = last
                delta = raw - last_raw
                if delta < 0:  # the hardware counter wrapped at max_energy_range_uj
                    delta += max_range
                counted += delta / 1e6
            self._rapl_state[zone] = (raw, counted)
            out.append(CpuEnergy(zone=zone, joules=counted))
        return tuple(out)

    def close(self) -> None:
        pass


def family_limit(cpu: dict[str, Any] | None) -> tuple[float, str] | None:
    """The temperature AMD says a CPU family runs at, at most, by design (its Tjmax on the
    product pages; docs/alerts.md gives the sources): where the sensor (k10temp) gives none."""
    if not cpu or cpu.get("vendor") != "AuthenticAMD":
        return None
    family, model = cpu.get("family"), cpu.get("model")
    if not isinstance(family, int) or not isinstance(model, int):
        return None
    if family == 0x1A:
        return 95.0, "AMD's 95 °C for Zen 5 (Ryzen 9000)"
    if family == 0x19 and model >= 0x60:
        return 95.0, "AMD's 95 °C for Zen 4 (Ryzen 7000)"
    if family == 0x19:
        return 90.0, "AMD's 90 °C for Zen 3 (Ryzen 5000)"
    if family == 0x17 and model == 0x08:
        return 85.0, "AMD's 85 °C for Zen+ (Ryzen 2000)"
    if family == 0x17:
        return 95.0, "AMD's 95 °C for Zen and Zen 2 (Ryzen 1000, 3000)"
    return None


def cpu_temperatures(temperatures: Iterable[SensorTemperature]) -> tuple[CpuTemperature, ...]:
    """One temperature per CPU socket, saying which sensor it is.

    Intel coretemp: "Package id N" (older kernels: "Physical id N"), else the hottest "Core".
    AMD k10temp/zenpower: "Tdie", else the hottest "Tccd", else "Tctl" (a control value that
    may carry an offset). Each socket is a chip of its own (its device: ``coretemp.1``, a PCI
    address); where the device is not known (psutil alone), one chip's sensors split into a
    socket at each package label (or Tctl). The socket's number is its package's, else its
    device's (``coretemp.1``), else its place."""
    groups: dict[tuple[str, str | None], list[SensorTemperature]] = {}
    for t in temperatures:
        if t.chip in _INTEL_CHIPS or t.chip in _AMD_CHIPS or t.chip in _OTHER_CPU_CHIPS:
            groups.setdefault((t.chip, t.device), []).append(t)
    out: list[CpuTemperature] = []
    for (chip, device), entries in groups.items():
        if chip in _INTEL_CHIPS:
            sockets = _split(entries, lambda label: label.startswith(_PACKAGES))
            prefer: tuple[tuple[str, ...], ...] = (_PACKAGES, ("Core",))
        elif chip in _AMD_CHIPS:
            sockets = _split(entries, lambda label: label in ("Tctl", ""))
            prefer = (("Tdie",), ("Tccd",), ("Tctl", ""))
        else:
            sockets, prefer = [entries], (("",),)
        for socket in sockets:
            chosen = _choose(socket, prefer)
            if chosen is not None:
                number = _socket_number(chosen.label, device, len(out))
                high, critical = chosen.high_celsius, chosen.critical_celsius
                out.append(CpuTemperature(number, chip, chosen.label, chosen.celsius, high, critical))
    return tuple(out)


_PACKAGES = ("Package id", "Physical id")  # coretemp's package sensor, as kernels before 3.x label it too


def _joined(
    answer: dict[str, dict[str, Any]], temps: dict, fans: dict
) -> tuple[tuple[SensorTemperature, ...], tuple[FanReading, ...]] | None:
    """The walk's temperatures and fans, each named by its attribute (``fan2``: never by its place
    in psutil's list), with psutil's values where psutil lists the same paths as many as the walk
    saw (hwmon.psutil_bases), else the walk's own; psutil's chips the walk did not see as psutil
    gives them. None where the walk saw none."""
    planned, counts = hwmon.plan(answer)
    if not planned:
        return None
    given = {"temp": temps, "fan": fans}
    out_temps, out_fans = [], []
    for p in planned:
        files = answer[p.dir].get("files") or {}
        entries = given[p.kind].get(p.psutil[0]) if p.psutil is not None else None
        entry = entries[p.psutil[1]] if entries and len(entries) == counts.get((p.kind, p.psutil[0])) else None
        label = files.get(p.files[1]) if p.files[1] else None
        label = label or p.attribute
        if p.kind == "fan":
            rpm = entry[1] if entry is not None else hwmon._number(files.get(p.files[0]) if p.files[0] else None)
            if rpm is not None:
                out_fans.append(FanReading(p.chip, label, float(rpm), device=p.device))
            continue
        if entry is not None:
            celsius, high, critical = entry[1], _opt(entry[2]), _opt(entry[3])
        else:
            celsius, high, critical = (_milli(files.get(key) if key else None) for key in p.files[0:1] + p.files[2:])
        if celsius is not None:
            out_temps.append(SensorTemperature(p.chip, label, float(celsius), high, critical, p.device))
    walked = {p.chip for p in planned}
    others_temps, others_fans = _psutil_only(
        {c: e for c, e in temps.items() if c not in walked}, {c: e for c, e in fans.items() if c not in walked}
    )
    return tuple(out_temps) + others_temps, tuple(out_fans) + others_fans


def _milli(text: str | None) -> float | None:
    value = hwmon._number(text)
    return value / 1000 if value is not None else None


def _psutil_only(temps: dict, fans: dict) -> tuple[tuple[SensorTemperature, ...], tuple[FanReading, ...]]:
    """psutil's sensors as it gives them, where no walk of sysfs names them (host.sysfs_sensors
    off, a recording without it): a sensor without a label named by its place."""
    return (
        tuple(
            SensorTemperature(chip, _label(entry[0], "temp", i), float(entry[1]), _opt(entry[2]), _opt(entry[3]))
            for chip, entries in temps.items()
            for i, entry in enumerate(entries)
            if entry[1] is not None
        ),
        tuple(
            FanReading(chip, _label(entry[0], "fan", i), float(entry[1]))
            for chip, entries in fans.items()
            for i, entry in enumerate(entries)
        ),
    )


def _split(entries: list[SensorTemperature], starts_group) -> list[list[SensorTemperature]]:
    groups: list[list[SensorTemperature]] = []
    for entry in entries:
        if starts_group(entry.label) or not groups:
            groups.append([])
        groups[-1].append(entry)
    return groups


def _choose(group: list[SensorTemperature], prefer: tuple[tuple[str, ...], ...]) -> SensorTemperature | None:
    for prefixes in prefer:
        candidates = [e for e in group if _matches(e.label, prefixes)]
        if candidates:
            return max(candidates, key=lambda e: e.celsius)
    return None


def _matches(label: str, prefixes: tuple[str, ...]) -> bool:
    return any(label.startswith(p) if p else label == "" for p in prefixes)


def _socket_number(label: str, device: str | None, fallback: int) -> int:
    match = re.match(r"(?:Package|Physical) id (\d+)", label) or re.fullmatch(r"coretemp\.(\d+)", device or "")
    return int(match.group(1)) if match else fallback


def _label(label: str, kind: str, position: int) -> str:
    return label or f"{kind}{position + 1}"


def _opt(value: Any) -> float | None:
    return float(value) if value is not None else None
