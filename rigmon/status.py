"""``rigmon status``: one sample as a table for people or as JSON for scripts."""

from __future__ import annotations

import time

from .sample import GpuInfo, GpuReading, Sample, to_jsonable
from .text import printable

NS = "n/s"  # not supported by this hardware (or not readable here)


def as_json(sample: Sample, extra: dict | None = None) -> dict:
    out = to_jsonable(sample)
    for gpu in out["gpus"]:
        events = gpu.get("clock_events")
        gpu["clock_events_active"] = [k for k, v in events.items() if v] if events else None
    if extra:
        out.update(to_jsonable(extra))
    return out


def _fmt(value, spec: str = "{:.0f}", unit: str = "") -> str:
    if value is None:
        return NS
    return spec.format(value) + unit


def _gb(value) -> str:
    return NS if value is None else f"{value / 1e9:.1f}"


WIDTH = 120  # the table fits a 120-column terminal with 8 GPUs

# Clock-event reasons, short enough for the table (the JSON keeps NVML's names).
SHORT_EVENTS = {"gpu_idle": "idle", "applications_clocks_setting": "app-clocks", "sw_power_cap": "pwr-cap",
                "hw_slowdown": "HW-SLOW", "sync_boost": "sync-boost", "sw_thermal_slowdown": "sw-thermal",
                "hw_thermal_slowdown": "HW-THERMAL", "hw_power_brake_slowdown": "PWR-BRAKE",
                "display_clock_setting": "display"}


def render(sample: Sample, source: str = "", alerts: list[dict] | None = None, alerts_note: str = "",
           daemon: dict | None = None, show_info: bool = False, now: float | None = None) -> str:
    lines = []
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(sample.time))
    system = sample.system
    versions = ""
    if system is not None and system.driver_version:
        versions = f"driver {system.driver_version}, CUDA {system.cuda_driver_version or NS}"
    lines.append("  ".join(part for part in (f"rigmon status  {stamp}", versions, source) if part))
    lines.append("")
    info = {i.index: i for i in sample.gpu_info}
    if sample.gpus:
        lines += _gpu_table(sample.gpus, info)
    for status in sample.readers:
        if status.error:
            lines.append(f"{status.name}: {status.error}")
    for event in sample.events:
        when = time.strftime("%H:%M:%S", time.localtime(event.time))
        lines.append(f"XID {event.xid} on GPU {event.gpu_index} at {when}")
    lines.append("")
    processes = _processes(sample)
    if processes:
        lines += processes
        lines.append("")
    lines += _host(sample)
    lines.append("")
    lines += _alerts(alerts, alerts_note, show_info, sample.time if now is None else now)
    lines.append("")
    if daemon and daemon.get("influxdb"):
        lines += _influx(daemon["influxdb"])
        lines.append("")
    lines.append(f"{NS} = not supported by this hardware or not readable here")
    return "\n".join(lines)


def _processes(sample: Sample) -> list[str]:
    """Who holds each GPU, like nvitop's process list: PID, user, GPU memory, SM share, job."""
    who = {p.pid: p for p in sample.processes}
    rows = []
    for g in sample.gpus:
        for p in g.processes or ():
            info = who.get(p.pid)
            rows.append([str(g.index), str(p.pid), (info.user if info else None) or "?", _gb(p.used_memory_bytes),
                         f"{p.sm_ratio:.0%}" if p.sm_ratio is not None else NS,
                         ((info.unit or info.job) if info else None) or "?", (info.command if info else None) or "?"])
    if not rows:
        return []
    head = ["GPU", "PID", "USER", "MEM GB", "SM", "JOB", "COMMAND"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]
    return ["PROCESSES"] + [_cut("  ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)), r[-1]]))
                            for r in [head, *rows]]


def short_name(name: str) -> str:
    """"NVIDIA GeForce RTX 4090" → "RTX 4090", "NVIDIA H200" → "H200"."""
    for prefix in ("NVIDIA ", "GeForce "):
        name = name.removeprefix(prefix)
    return printable(name)[:14]


def _cut(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


def _pair(a, b, spec: str = "{:.0f}") -> str:
    return f"{_fmt(a, spec)}/{_fmt(b, spec)}"


def _fans(g: GpuReading) -> str:
    speeds = g.fan_target_ratios or g.fan_speed_ratios or ()
    rpms = g.fan_speed_rpm or ()
    if not speeds and not rpms:
        return NS
    cells = []
    for n in range(max(len(speeds), len(rpms))):
        speed = speeds[n] if n < len(speeds) else None
        rpm = rpms[n] if n < len(rpms) else None
        cells.append(_fmt(speed * 100 if speed is not None else None, unit="%") +
                     (f" {rpm:.0f}" if rpm is not None else ""))
    return ",".join(cells)


def _gpu_table(gpus: tuple[GpuReading, ...], info: dict[int, GpuInfo]) -> list[str]:
    header = ("GPU", "NAME", "°C/SLOW", "MEM°C", "W/LIMIT", "UTIL", "SM MHz", "MEM GB", "PCIe NOW/MAX", "REPLAY",
              "ECC", "FAN % RPM", "CLOCK EVENTS")
    rows: list[tuple[str, ...]] = [header]
    lost: dict[int, str] = {}
    for g in gpus:
        i = info.get(g.index)
        name = short_name(i.name) if i else "?"
        if g.lost:
            lost[len(rows)] = f"{g.index:<3}  {name}  LOST: fell off the bus or stopped answering"
            rows.append(())
            continue
        events = g.clock_events.active() if g.clock_events else None
        max_link = f"{_fmt(i.max_pcie_generation)}x{_fmt(i.max_pcie_width)}" if i else NS
        rows.append((
            str(g.index),
            name,
            _pair(g.temperature_celsius, i.temperature_thresholds.slowdown if i else None),
            _fmt(g.memory_temperature_celsius),
            _pair(g.power_watts, g.power_limit_watts),
            _fmt(g.utilization_gpu_ratio * 100 if g.utilization_gpu_ratio is not None else None, unit="%"),
            _fmt(g.sm_clock_hertz / 1e6 if g.sm_clock_hertz is not None else None),
            f"{_gb(g.memory_used_bytes)}/{_gb(g.memory_total_bytes)}",
            f"{_fmt(g.pcie_generation)}x{_fmt(g.pcie_width)}/{max_link}",
            _fmt(g.pcie_replay_total),
            _fmt(g.ecc_errors.uncorrected_volatile if g.ecc_errors else None),
            _fans(g),
            NS if events is None else (",".join(SHORT_EVENTS.get(e, e) for e in events) or "none"),
        ))
    widths = [max(len(r[c]) for r in rows if r) for c in range(len(header))]
    out = []
    for n, row in enumerate(rows):
        if n in lost:
            out.append(_cut(lost[n]))
        else:
            out.append(_cut("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()))
    return out


def _host(sample: Sample) -> list[str]:
    host = sample.host
    if host is None:
        return ["host: not read"]
    lines = ["HOST"]
    if host.cpu_temperatures:
        for t in host.cpu_temperatures:
            limit = f" (high {t.high_celsius:.0f}, critical {t.critical_celsius:.0f} °C)" if t.critical_celsius else ""
            lines.append(f"  CPU {t.socket} temperature  {t.celsius:.1f} °C from {t.chip} {t.sensor}{limit}")
    else:
        lines.append(f"  CPU temperature  {NS}")
    chosen = {(c.chip, c.sensor) for c in host.cpu_temperatures}
    other = [t for t in host.temperatures if (t.chip, t.label) not in chosen]
    twins = _twins([(t.chip, t.device) for t in host.temperatures] + [(f.chip, f.device) for f in host.fans])
    for t in other:
        lines.append(f"  {_chip(t.chip, t.device, twins)} {t.label}  {t.celsius:.1f} °C")
    if host.fans:
        control = {(c.chip, c.device, c.fan): c for c in host.fan_controls}
        lines.append("  fans  " + ", ".join(f"{_chip(f.chip, f.device, twins)}/{f.label} {f.rpm:.0f} rpm"
                                            + _fan_control(control.get((f.chip, f.device, f.label)))
                                            for f in host.fans))
    else:
        lines.append(f"  fans  {NS}")
    for title, values, unit in (("power", host.powers, "W"), ("current", host.currents, "A"),
                                ("voltage", host.voltages, "V")):
        if values:
            digits = 1 if unit == "W" else 2
            lines.append(_cut(f"  {title}  " + ", ".join(f"{v.chip} {v.sensor} {v.value:.{digits}f} {unit}"
                                                         for v in values)))
    cpu = _fmt(host.cpu_utilization_ratio * 100 if host.cpu_utilization_ratio is not None else None, unit=" %")
    load = " ".join(_fmt(v, "{:.2f}") for v in (host.load1, host.load5, host.load15))
    lines.append(f"  CPU  {cpu} of {_fmt(host.cpu_count)} cores, load {load}")
    if host.memory_total_bytes:
        lines.append(f"  memory  {_gb(host.memory_available_bytes)} GB available of {_gb(host.memory_total_bytes)} GB")
    for e in host.cpu_energy:
        lines.append(f"  CPU energy {e.zone}  {e.joules / 3.6e6:.4f} kWh (RAPL)")
    for note in host.notes:
        lines.append(f"  note: {note}")
    return lines


def _twins(chips: list[tuple[str, str | None]]) -> set[str]:
    """Chip names that more than one device carries (two sockets' coretemp, two NVMe drives)."""
    devices: dict[str, set] = {}
    for chip, device in chips:
        devices.setdefault(chip, set()).add(device)
    return {chip for chip, found in devices.items() if len(found) > 1}


def _chip(chip: str, device: str | None, twins: set[str]) -> str:
    return f"{chip}@{device}" if device and chip in twins else chip


def _fan_control(c) -> str:
    if c is None:
        return ""
    parts = ([f"PWM {c.pwm_ratio:.0%}"] if c.pwm_ratio is not None else []) + (["ALARM"] if c.alarm else [])
    return f" ({', '.join(parts)})" if parts else ""


def age(seconds: float) -> str:
    """90 → "1m30s", 4000 → "1h06m"."""
    seconds = max(int(seconds), 0)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _alerts(alerts: list[dict] | None, note: str, show_info: bool, now: float) -> list[str]:
    if alerts is None:
        return [f"ALERTS  unknown: {note}" if note else "ALERTS  unknown"]
    shown = [a for a in alerts if show_info or a.get("severity") != "info"]
    hidden = len(alerts) - len(shown)
    head = f"ALERTS  {len(shown) or 'none'} firing" + (f" ({note})" if note else "")
    lines = [head]
    for a in shown:
        since = a.get("since")
        since = f"  (for {age(now - since)})" if isinstance(since, (int, float)) and abs(since) < 1e12 else ""
        lines.append(printable(f"  {str(a.get('severity')).upper():<8} {a.get('alertname')} [{a.get('subject')}]  "
                               f"{a.get('summary')}{since}"))
    if hidden:
        lines.append(f"  ({hidden} info alert(s) not shown: --all shows them)")
    return lines


def _influx(s: dict) -> list[str]:
    try:
        last = time.strftime("%H:%M:%S", time.localtime(s["last_success"])) if s.get("last_success") else "never"
        lines = [printable(f"INFLUXDB ({s['api']}, {s['url']})  written {s['points_written']}, spooled "
                           f"{s['points_spooled']} ({s['spool_bytes'] / 1e6:.1f} MB), dropped {s['points_dropped']}, "
                           f"failed {s['points_failed']}, last success {last}")]
    except (KeyError, TypeError, ValueError, OverflowError, OSError):  # not what a rigmon daemon answers
        return ["INFLUXDB  the daemon's answer is not readable"]
    if s.get("last_error"):
        lines.append(printable(f"  last error: {s['last_error']}"))
    return lines
