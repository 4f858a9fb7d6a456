"""``rigmon status``: one sample as a table for people or as JSON for scripts."""

from __future__ import annotations

import textwrap
import time

from .model import nvml_state
from .model.sample import CLOCK_EVENT_REASONS, SLOWDOWNS, GpuInfo, GpuReading, Sample, fan_key, to_jsonable
from .model.text import printable

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


WIDTH = 120  # the width when output goes to no terminal and COLUMNS does not say (a pipe, a file)
GIB = 1 << 30  # memory in GiB, as nvitop shows it (nvidia-smi's MiB, in a unit that fits a column)

# The GPU table fits the terminal: these columns go first, in this order, until it does.
DROPPED_FIRST = ("REPLAY", "ECC", "MEM°C", "SM MHz", "FAN % RPM", "PCIe", "UTIL", "NAME")
# Clock-event reasons, worst first: the first is never dropped, the rest become "+N" where they do not fit.
EVENT_ORDER = tuple(r.name for r in sorted(CLOCK_EVENT_REASONS, key=lambda r: r.worst))
SERIOUS_EVENTS = frozenset(SLOWDOWNS)
_RED, _YELLOW, _RESET = "\x1b[31m", "\x1b[33m", "\x1b[0m"
# Clock-event reasons, short enough for the table (the JSON keeps NVML's names).
SHORT_EVENTS = {r.name: r.short for r in CLOCK_EVENT_REASONS}


def render(
    sample: Sample,
    source: str = "",
    alerts: list[dict] | None = None,
    alerts_note: str = "",
    daemon: dict | None = None,
    show_info: bool = False,
    now: float | None = None,
    width: int = WIDTH,
    color: bool = False,
    host: str = "",
    not_recorded: tuple[str, ...] = (),
    height: int | None = None,
) -> str:
    """The status for people, ``width`` columns wide, in colour where asked (a terminal): every
    string from outside made printable here, before any colour of ours is added. ``height``
    (a watch's terminal rows): the sections that fit, the alerts right after the GPUs, and a
    last line that says what was left out."""
    lines = []
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(sample.time))
    system = sample.system
    versions = ""
    if system is not None and system.driver_version:
        versions = f"driver {system.driver_version}, CUDA {system.cuda_driver_version or NS}"
    lines.append(
        _cut(
            printable("  ".join(part for part in (f"rigmon status  {host}".rstrip(), stamp, versions, source) if part)),
            width,
        )
    )
    lines.append("")
    info = {i.index: i for i in sample.gpu_info}
    if sample.gpus:
        lines += _gpu_table(sample.gpus, info, width, color)
    nvml = _nvml(sample)
    lines += [_paint(_cut(printable(line), width), _RED, color and n == 0) for n, line in enumerate(nvml)]
    for status in sample.readers:
        if status.error and not (status.name == "gpu" and nvml):
            lines.append(_cut(printable(f"{status.name}: {status.error}"), width))
    lines += [_cut(printable(line), width) for line in _mig(sample)]
    for event in sample.events:
        when = time.strftime("%H:%M:%S", time.localtime(event.time))
        lines.append(f"XID {event.xid} on GPU {event.gpu_index} at {when}")
    lines.append("")
    processes = _processes(sample, width)
    if processes:
        lines += processes
        lines.append("")
    lines += [_cut(printable(line), width) for line in _host(sample)]
    lines.append("")
    cooling = _cooling(sample)
    if cooling:
        lines += [_cut(printable(line), width) for line in cooling]
        lines.append("")
    lines += _alerts(alerts, alerts_note, show_info, sample.time if now is None else now, width, color)
    lines.append("")
    if daemon and daemon.get("influxdb"):
        lines += [_cut(line, width) for line in _influx(daemon["influxdb"])]
        lines.append("")
    lines.append(
        f"{NS} = not supported by this hardware or not readable here"
        + ("; MIG = not given in MIG mode" if any(i.mig_enabled for i in sample.gpu_info) else "")
    )
    if not_recorded:  # a replay: what the recording never asked is unknown, not unsupported
        lines += textwrap.wrap(
            f"not recorded (the recording holds no answer, so {NS} here says nothing of the "
            f"hardware): {', '.join(not_recorded)}",
            width,
            subsequent_indent="  ",
        )
    return "\n".join(_fit(lines, height) if height else lines)


def _fit(lines: list[str], height: int) -> list[str]:
    """At most ``height`` lines: the header, the GPUs and the alerts first, then each section
    that still fits, in order; the last line names the sections left out."""
    sections: list[list[str]] = [[]]
    for line in lines:
        if line == "":
            sections.append([])
        else:
            sections[-1].append(line)
    sections = [s for s in sections if s]
    if sum(len(s) + 1 for s in sections) - 1 <= height:
        return lines
    first = [n for n, s in enumerate(sections) if s[0].startswith("ALERTS")]
    order = [0, 1, *first] + [n for n in range(2, len(sections)) if n not in first]
    kept: dict[int, list[str]] = {}
    used = 1  # the last line
    for n in order:
        room = height - used - (1 if kept else 0)
        section = sections[n] if n >= 2 else sections[n][: max(room, 0)]  # the header and the GPUs, cut to fit
        if section and len(section) <= room:
            kept[n] = section
            used += len(section) + (1 if len(kept) > 1 else 0)
    out = [line for k, n in enumerate(sorted(kept, key=order.index)) for line in ([""] if k else []) + kept[n]]
    left = [n for n in range(len(sections)) if n not in kept]
    heads = (sections[n][0].split(" ")[0] for n in left)
    names = ", ".join(dict.fromkeys(h if h.isalpha() and h.isupper() else "notes" for h in heads))
    out.append(f"… {sum(len(sections[n]) for n in left)} more lines ({names}): a taller terminal shows them")
    return out


def _nvml(sample: Sample) -> list[str]:
    """NVML that cannot start, what it means and what mends it; the GPUs the box had that NVML
    no longer lists."""
    system = sample.system
    if system is None:
        return []
    lines = []
    error = system.nvml_error
    if error and (error != nvml_state.NO_DRIVER or system.missing_gpus):
        lines += [
            f"NVML CANNOT START ({error}): {nvml_state.cause(error)}; no GPU is watched",
            f"  to mend it: {nvml_state.fix(error)}",
        ]
    elif error:
        lines.append(f"GPUs: none ({nvml_state.cause(error)})")
    for g in system.missing_gpus:
        lines.append(
            f"GPU {g.index}  MISSING: this box had it ({short_name(g.name)}, {g.uuid}); NVML no longer lists it"
        )
    return lines


def _mig(sample: Sample) -> list[str]:
    """Each GPU in MIG mode and its instances: what NVML gives of them (no utilisation)."""
    info = {i.index: i for i in sample.gpu_info}
    lines = []
    for g in sample.gpus:
        i = info.get(g.index)
        if i is None or not (i.mig_enabled or i.mig_pending):
            continue
        if not i.mig_enabled:
            lines.append(f"GPU {g.index}  MIG mode pending: on at the next GPU reset")
            continue
        instances = g.mig_instances or ()
        lines.append(f"GPU {g.index}  MIG mode on, {len(instances)} instance(s); NVML gives no utilisation in MIG mode")
        for m in instances:
            ci = f" CI {m.compute_instance}" if m.compute_instance is not None else ""
            held = "n/s" if m.processes is None else f"{m.processes} process(es)"
            lines.append(
                f"  GI {m.gpu_instance}{ci}  {m.profile or '?'}  {_gib(m.memory_used_bytes)}/"
                f"{_gib(m.memory_total_bytes)} GiB  {held}"
            )
    return lines


def exit_code(sample: Sample, alerts: list[dict] | None) -> int:
    """For scripts (status --exit-code): 1 when a GPU is lost or a critical alert fires, else 0."""
    lost = any(g.lost for g in sample.gpus)
    critical = any(isinstance(a, dict) and a.get("severity") == "critical" for a in alerts or ())
    return 1 if lost or critical else 0


def _program_named(command: str) -> str:
    """A command line with its program by name, not path (``python train.py``, as top shows it):
    where the line is cut to the terminal, what it runs is what stays."""
    program, space, rest = command.partition(" ")
    return program.rsplit("/", 1)[-1] + space + rest


def _processes(sample: Sample, width: int = WIDTH) -> list[str]:
    """Who holds each GPU, like nvitop's process list: PID, user, GPU memory, SM share, job."""
    who = {p.pid: p for p in sample.processes}
    rows = []
    for g in sample.gpus:
        for p in g.processes or ():
            info = who.get(p.pid)
            rows.append(
                [
                    str(g.index) + (f"/{p.gpu_instance}" if p.gpu_instance is not None else ""),
                    str(p.pid),
                    printable((info.user if info else None) or "?"),
                    _gib(p.used_memory_bytes),
                    f"{p.sm_ratio:.0%}" if p.sm_ratio is not None else NS,
                    printable(((info.unit or info.job) if info else None) or "?"),
                    printable(_program_named((info.command if info else None) or "?")),
                ]
            )
    if not rows:
        return []
    head = ["GPU", "PID", "USER", "MEM GiB", "SM", "JOB", "COMMAND"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]
    return ["PROCESSES"] + [
        _cut("  ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)), r[-1]]), width)
        for r in [head, *rows]
    ]


def short_name(name: str) -> str:
    """ "NVIDIA GeForce RTX 4090" → "RTX 4090", "NVIDIA H200" → "H200"."""
    for prefix in ("NVIDIA ", "GeForce "):
        name = name.removeprefix(prefix)
    return printable(name)[:14]


def _cut(line: str, width: int = WIDTH) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def _gib(value) -> str:
    return NS if value is None else f"{value / GIB:.1f}"


def _link(generation, lanes) -> str:
    """ "Gen5 x16": a generation and a width, not a product."""
    return f"Gen{_fmt(generation)} x{_fmt(lanes)}"


def _pair(a, b, spec: str = "{:.0f}") -> str:
    return f"{_fmt(a, spec)}/{_fmt(b, spec)}"


def _fans(g: GpuReading) -> str:
    """The board's fans in few characters: ``55% 1650`` for one, ``55% 1650 ×2`` where they all
    read the same, else each fan's in turn, ``55/60% 1650/1720``."""
    speeds = g.fan_target_ratios or g.fan_speed_ratios or ()
    rpms = g.fan_speed_rpm or ()
    if not speeds and not rpms:
        return NS
    count = max(len(speeds), len(rpms))
    percents = [_fmt(speeds[n] * 100 if n < len(speeds) and speeds[n] is not None else None) for n in range(count)]
    turning = [f"{rpms[n]:.0f}" for n in range(count) if n < len(rpms) and rpms[n] is not None]
    unit = "%" if any(p != NS for p in percents) else ""
    if len(set(percents)) == 1 and len(set(turning)) <= 1:
        return f"{percents[0]}{unit}" + (f" {turning[0]}" if turning else "") + (f" ×{count}" if count > 1 else "")
    return "/".join(percents) + unit + (f" {'/'.join(turning)}" if turning else "")


def _events(events: tuple[str, ...], room: int) -> str:
    """The clock-event reasons worst first, in ``room`` characters: the worst always, then as many
    as fit, then "+N" for the rest."""
    ordered = sorted(events, key=lambda e: EVENT_ORDER.index(e) if e in EVENT_ORDER else len(EVENT_ORDER))
    names = [SHORT_EVENTS.get(e, e) for e in ordered]
    text = names[0]
    for n, name in enumerate(names[1:], start=1):
        more = len(names) - n - 1
        candidate = f"{text},{name}"
        if len(candidate) + (len(f",+{more}") if more else 0) > room:
            return f"{text},+{len(names) - n}"
        text = candidate
    return text


def _gpu_table(
    gpus: tuple[GpuReading, ...], info: dict[int, GpuInfo], width: int = WIDTH, color: bool = False
) -> list[str]:
    header = (
        "GPU",
        "NAME",
        "°C/SLOW",
        "MEM°C",
        "W/LIMIT",
        "UTIL",
        "SM MHz",
        "MEM GiB",
        "PCIe",
        "REPLAY",
        "ECC",
        "FAN % RPM",
        "CLOCK EVENTS",
    )
    rows: list[dict] = []
    for g in gpus:
        i = info.get(g.index)
        name = short_name(i.name) if i else "?"
        if g.lost:
            rows.append({"lost": f"{g.index:<3}  {name}  LOST: fell off the bus or stopped answering"})
            continue
        if g.asleep:
            rows.append({"asleep": f"{g.index:<3}  {name}  asleep (runtime-suspended): read again once it wakes"})
            continue
        events = g.clock_events.active() if g.clock_events else None
        slowdown = i.temperature_thresholds.slowdown if i else None
        link = _link(g.pcie_generation, g.pcie_width)
        if i and (i.max_pcie_generation, i.max_pcie_width) != (g.pcie_generation, g.pcie_width):
            link += f" of {_link(i.max_pcie_generation, i.max_pcie_width)}"
        temp = g.temperature_celsius
        rows.append(
            {
                "GPU": str(g.index),
                "NAME": name,
                "°C/SLOW": _pair(temp, slowdown),
                "MEM°C": _fmt(g.memory_temperature_celsius),
                "W/LIMIT": _pair(g.power_watts, g.power_limit_watts),
                "UTIL": "MIG"
                if i and i.mig_enabled and g.utilization_gpu_ratio is None
                else _fmt(g.utilization_gpu_ratio * 100 if g.utilization_gpu_ratio is not None else None, unit="%"),
                "SM MHz": _fmt(g.sm_clock_hertz / 1e6 if g.sm_clock_hertz is not None else None),
                "MEM GiB": f"{_gib(g.memory_used_bytes)}/{_fmt(g.memory_total_bytes and g.memory_total_bytes / GIB)}",
                "PCIe": link,
                "REPLAY": _fmt(g.pcie_replays),
                "ECC": _fmt(g.ecc_errors.uncorrected_volatile if g.ecc_errors else None),
                "FAN % RPM": _fans(g),
                "events": events,
                "hot": _RED
                if temp is not None and slowdown and temp >= slowdown
                else _YELLOW
                if temp is not None and slowdown and temp >= slowdown - 5
                else "",
            }
        )
    columns = list(header[:-1])
    widths = {c: max([len(c)] + [len(r[c]) for r in rows if c in r]) for c in columns}
    least = max((len(SHORT_EVENTS.get(e, e)) for r in rows if r.get("events") for e in r["events"]), default=4)
    for drop in DROPPED_FIRST:  # until the fixed columns leave room for the worst event of each GPU
        if sum(widths[c] + 2 for c in columns) + max(least, len(header[-1])) <= width:
            break
        columns.remove(drop)
    room = max(width - sum(widths[c] + 2 for c in columns), least)
    out = [_cut("  ".join([*(c.ljust(widths[c]) for c in columns), header[-1]]), width)]
    for r in rows:
        if "lost" in r:
            out.append(_paint(_cut(r["lost"], width), _RED, color))
            continue
        if "asleep" in r:
            out.append(_cut(r["asleep"], width))
            continue
        events = r["events"]
        text = NS if events is None else (_events(events, room) if events else "none")
        cells = [r[c].ljust(widths[c]) for c in columns]
        if color and r["hot"] and "°C/SLOW" in columns:
            at = columns.index("°C/SLOW")
            cells[at] = _paint(cells[at], r["hot"], True)
        serious = events and SERIOUS_EVENTS.intersection(events)
        out.append("  ".join([*cells, _paint(text, _RED, color and bool(serious))]).rstrip())
    return out


def _paint(text: str, code: str, color: bool) -> str:
    return f"{code}{text}{_RESET}" if color and code else text


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
        lines.append(
            "  fans  "
            + ", ".join(
                f"{_chip(f.chip, f.device, twins)}/{f.label} {f.rpm:.0f} rpm"
                + ("" if f.rpm > 0 or f.duty != 0 else ", stopped by its curve")
                + _fan_control(control.get((f.chip, f.device, f.label)))
                for f in host.fans
            )
        )
    else:
        lines.append(f"  fans  {NS}")
    for title, values, unit in (
        ("power", host.powers, "W"),
        ("current", host.currents, "A"),
        ("voltage", host.voltages, "V"),
    ):
        if values:
            digits = 1 if unit == "W" else 2
            lines.append(
                _cut(f"  {title}  " + ", ".join(f"{v.chip} {v.sensor} {v.value:.{digits}f} {unit}" for v in values))
            )
    cpu = _fmt(host.cpu_utilization_ratio * 100 if host.cpu_utilization_ratio is not None else None, unit=" %")
    load = " ".join(_fmt(v, "{:.2f}") for v in (host.load1, host.load5, host.load15))
    lines.append(f"  CPU  {cpu} of {_fmt(host.cpu_count)} cores, load {load}")
    if host.memory_total_bytes:
        lines.append(
            f"  memory  {_gib(host.memory_available_bytes)} GiB available of {_gib(host.memory_total_bytes)} GiB"
        )
    for e in host.cpu_energy:
        lines.append(f"  CPU energy {e.zone}  {e.joules / 3.6e6:.4f} kWh (RAPL)")
    for note in host.notes:
        lines.append(f"  note: {note}")
    return lines


ROOM = {
    "inlet": "the room from an inlet sensor",
    "idle": "the room from the GPUs idle",
    "none": "no room reference (absolute)",
    "pending": "the room not read yet",
}


def _indices(indices: list[int]) -> str:
    """0-3,6: runs of indices as ranges."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs)


def _cooling(sample: Sample) -> list[str]:
    """Each GPU, CPU and fan against its own baseline (rigmon baseline show has the baselines)."""
    from .model.durations import format_duration

    cooling = sample.cooling
    if cooling is None:
        return []
    lines = [f"COOLING  against each one's own baseline; {ROOM.get(cooling.reference, cooling.reference)}"]
    said: dict[str, list[int]] = {}  # each GPU's line, GPUs that say the same on one line
    for g in sample.gpus:
        state = g.cooling_state
        if state is None:
            continue
        if state == "learning":
            text = f"learning its baseline, {format_duration(g.cooling_learning_seconds or 0)} to go"
        elif state == "comparing" and g.cooling_drift_celsius is not None:
            text = f"{g.cooling_drift_celsius:+.1f} °C at {g.cooling_at_watts or 0:.0f} W"
            if g.cooling_fan_drift_ratio is not None:
                text += f", fans {g.cooling_fan_drift_ratio * 100:+.0f} points"
            if cooling.shared is not None and g.cooling_drift_own_celsius is not None:
                text += f" ({g.cooling_drift_own_celsius:+.1f} °C its own)"
        else:
            text = state
        if (g.cooling_blind_seconds or 0) >= 3600:
            text += f"; nothing steady to compare for {format_duration(g.cooling_blind_seconds or 0)} under load"
        if (g.cooling_baseline_excess_celsius or 0) >= 3:
            text += f"; its baseline {g.cooling_baseline_excess_celsius:+.0f} °C over its siblings' or burn-in's"
        said.setdefault(text, []).append(g.index)
    lines += [f"  GPU{'s' if len(gpus) > 1 else ''} {_indices(gpus)}  {text}" for text, gpus in said.items()]
    if cooling.shared is not None:
        lines.append(f"  every GPU  {cooling.shared:+.1f} °C: the room or the chassis")
    host = sample.host
    if host is not None:
        others: dict[str, list[str]] = {}  # the CPUs and fans that say the same (learning) on one line
        for c in host.cpu_temperatures:
            d = cooling.cpus.get(c.socket)
            if d is not None:
                shown = f"{d.drift:+.1f} °C at {(d.load or 0) * 100:.0f} % busy" if d.drift is not None else d.state
                if d.drift is not None and d.fan_drift is not None:
                    shown += f", fan curve {d.fan_drift * 100:+.0f} points"
                others.setdefault(shown, []).append(f"CPU {c.socket}")
        for f in host.fans:
            d = cooling.fans.get(fan_key(f))
            if d is not None:
                shown = f"{d.drift:+.0%} rpm at {(d.load or 0) * 100:.0f} % duty" if d.drift is not None else d.state
                others.setdefault(shown, []).append(f"fan {f.chip}/{f.label}")
        lines += [f"  {', '.join(who)}  {shown}" for shown, who in others.items()]
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


def _alerts(
    alerts: list[dict] | None, note: str, show_info: bool, now: float, width: int = WIDTH, color: bool = False
) -> list[str]:
    if alerts is None:  # why, wrapped to the width: it is the one thing this section says
        return textwrap.wrap(
            printable(f"ALERTS  unknown: {note}" if note else "ALERTS  unknown"), width, subsequent_indent="  "
        )
    shown = [a for a in alerts if show_info or a.get("severity") != "info"]
    hidden = len(alerts) - len(shown)
    head = f"ALERTS  {len(shown) or 'none'} firing" + (f" ({note})" if note else "")
    lines = [head]
    for a in shown:
        since = a.get("since")
        # how long it has fired comes before the summary: a narrow terminal cuts the summary, not that
        since = f"for {age(now - since)}  " if isinstance(since, (int, float)) and abs(since) < 1e12 else ""
        line = _cut(
            printable(
                f"  {str(a.get('severity')).upper():<8} {a.get('alertname')} [{a.get('subject')}]  "
                f"{since}{a.get('summary')}"
            ),
            width,
        )
        lines.append(_paint(line, {"critical": _RED, "warning": _YELLOW}.get(str(a.get("severity")), ""), color))
    if hidden:
        lines.append(f"  ({hidden} info alert(s) not shown: --all shows them)")
    return lines


def _influx(s: dict) -> list[str]:
    try:
        last = time.strftime("%H:%M:%S", time.localtime(s["last_success"])) if s.get("last_success") else "never"
        lines = [
            printable(
                f"INFLUXDB ({s['api']}, {s['url']})  written {s['points_written']}, spooled "
                f"{s['points_spooled']} ({s['spool_bytes'] / 1e6:.1f} MB), dropped {s['points_dropped']}, "
                f"failed {s['points_failed']}, last success {last}"
            )
        ]
    except (KeyError, TypeError, ValueError, OverflowError, OSError):  # not what a rigmon daemon answers
        return ["INFLUXDB  the daemon's answer is not readable"]
    if s.get("last_error"):
        lines.append(printable(f"  last error: {s['last_error']}"))
    return lines
