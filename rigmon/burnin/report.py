"""The burn-in report: ``burnin.json`` for machines and comparisons, ``summary.json`` (the
verdict and per-unit figures, small, for the daemon's exporter), and one self-contained
HTML page (inline SVG charts, no scripts, no network).

Charts are drawn to be read correctly: round ("nice") axis ticks, power from 0 to above the
limit, fan speeds from 0, the loss on a log scale against its floor, time in s, min or h,
and a band from min to max where a series was downsampled, so no spike is hidden. GPUs are
grouped by model, each group a section with its charts side by side in a grid that uses the
page's width.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
EVENT_COLORS = {"sw_power_cap": "#9ecae1", "sw_thermal_slowdown": "#fd8d3c", "hw_thermal_slowdown": "#d94801",
                "hw_slowdown": "#a50f15", "hw_power_brake_slowdown": "#67000d"}
NOT_MEASURED = "not measured"


def write(report: dict, directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path, html_path = directory / "burnin.json", directory / "burnin.html"
    json_path.write_text(json.dumps(report, separators=(",", ":")))
    (directory / "summary.json").write_text(json.dumps(summary_of(report), indent=1))
    html_path.write_text(render(report))
    return json_path, html_path


def summary_of(r: dict) -> dict:
    """What the daemon exports of a report: no timelines."""
    keep = ("name", "gpu", "gpu_name", "status", "tokens_per_s", "mfu", "reasons", "warnings", "energy_kwh")
    return {"format": "rigmon-burnin-summary", "version": 1, "host": r["host"], "started_unix": r["started_unix"],
            "duration_seconds": r["duration_seconds"], "verdict": r["verdict"],
            "units": [{k: u.get(k) for k in keep} for u in r["units"]], "energy": r["energy"]}


# --- axes ------------------------------------------------------------------------------------
def nice_step(span: float, ticks: int = 5) -> float:
    """A round step (1, 2, 2.5 or 5 × 10^n) that cuts ``span`` into about ``ticks`` parts."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def nice_ticks(lo: float, hi: float, ticks: int = 5) -> list[float]:
    step = nice_step(hi - lo, ticks)
    first = math.floor(lo / step) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    if out[-1] < hi:
        out.append(round(out[-1] + step, 10))
    return out


def tick_label(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e6:
        return f"{v / 1e6:g}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def time_axis(seconds: float) -> tuple[float, str]:
    """(divisor, unit) for a run this long."""
    if seconds >= 3 * 3600:
        return 3600.0, "h"
    if seconds >= 3 * 60:
        return 60.0, "min"
    return 1.0, "s"


def chart(title: str, series: list[tuple[str, list, str]], unit: str, lines=(), *, zero: bool = False,
          above: float | None = None, log: bool = False, span: float | None = None, width: int = 560,
          height: int = 240, mark_over: tuple[str, float] | None = None) -> str:
    """A line chart as SVG, scaled to its card's width. ``series``: (label, [(t, min, mean, max)],
    colour); a band is drawn where min and max differ. ``zero``: the axis starts at 0; ``above``:
    it reaches past this value; ``log``: a log axis (positive values). ``mark_over``: (what, limit):
    a series whose peak reaches the limit gets its max drawn as a line and the peak marked and
    labelled with its value and the limit, so what failed is what the eye sees first."""
    left, right, top, bottom = 52, 10, 40, 30
    values = [v for _, pts, _ in series for p in pts for v in (p[1], p[3])] + [v for _, v, _ in lines]
    times = [p[0] for _, pts, _ in series for p in pts]
    if not times or not values:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="44" viewBox="0 0 {width} 44" '
                f'class="chart"><text x="8" y="18" class="title">{html.escape(title)}</text>'
                f'<text x="8" y="36" class="tick">{NOT_MEASURED}</text></svg>')
    divisor, tunit = time_axis(span or max(times))
    t0, t1 = 0.0, (span or max(times)) or 1.0
    if log:
        positive = [v for v in values if v > 0] or [1.0]
        lo, hi = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
        hi = hi if hi > lo else lo + 1
        yticks = [10.0 ** e for e in range(lo, hi + 1)]
        if len(yticks) < 3:  # a narrow range: 1, 2, 5 steps
            yticks = sorted({m * 10.0 ** e for e in range(lo, hi + 1) for m in (1, 2, 5)
                             if 10.0 ** lo <= m * 10.0 ** e <= 10.0 ** hi})
        y0, y1 = math.log10(yticks[0]), math.log10(yticks[-1])
    else:
        lo, hi = min(values), max(values)
        if zero:
            lo = min(lo, 0.0)
        if above is not None:
            hi = max(hi, above * 1.08)
        if hi == lo:
            hi, lo = hi + 1, lo - (0 if zero else 1)
        yticks = nice_ticks(lo, hi)
        y0, y1 = yticks[0], yticks[-1]

    def ty(v: float) -> float:
        return math.log10(v) if log else v

    def px(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * (width - left - right)

    def py(v: float) -> float:
        return top + (1 - (ty(v) - y0) / (y1 - y0)) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" class="chart">',
           f'<text x="{left}" y="16" class="title">{html.escape(title)}</text>',
           f'<text x="{width - right}" y="16" text-anchor="end" class="tick">{html.escape(unit)}</text>']
    for v in yticks:
        y = py(v)
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" class="tick ytick">{tick_label(v)}</text>')
    for v in nice_ticks(0, t1 / divisor, 5):
        if v * divisor > t1 * 1.001:
            continue
        out.append(f'<text x="{px(v * divisor):.1f}" y="{height - 10}" text-anchor="middle" class="tick xtick">'
                   f'{tick_label(v)} {tunit}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
               f'fill="none" stroke="#ccc"/>')
    for label, value, color in lines:
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{py(value):.1f}" y2="{py(value):.1f}" '
                   f'stroke="{color}" stroke-dasharray="6 4"/>')
        out.append(f'<text x="{width - right - 4}" y="{py(value) - 4:.1f}" text-anchor="end" class="tick" '
                   f'style="fill:{color}">{html.escape(label)}</text>')
    legend_x, legend_y = left, 31
    marks = []
    for label, pts, color in series:
        pts = [p for p in pts if not log or p[1] > 0]
        if not pts:
            continue
        if any(p[1] != p[3] for p in pts):  # downsampled: the band from min to max
            upper = " ".join(f"{px(p[0]):.1f},{py(p[3]):.1f}" for p in pts)
            lower = " ".join(f"{px(p[0]):.1f},{py(p[1]):.1f}" for p in reversed(pts))
            out.append(f'<polygon points="{upper} {lower}" fill="{color}" fill-opacity="0.18" stroke="none"/>')
        line = " ".join(f"{px(p[0]):.1f},{py(p[2]):.1f}" for p in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        peak = max(pts, key=lambda p: p[3])
        if mark_over is not None and peak[3] >= mark_over[1]:
            marks.append((label, peak, color))
        if legend_x + 7 * len(label) > width - right:  # the legend wraps rather than runs off the card
            legend_x, legend_y = left, legend_y + 12
        out.append(f'<text x="{legend_x}" y="{legend_y}" class="legend" style="fill:{color}">'
                   f'{html.escape(label)}</text>')
        legend_x += 7 * len(label) + 14
    for n, (label, (t, _, _, peak), color) in enumerate(marks):  # over the lines, so nothing hides them
        x, y = px(t), py(peak)
        anchor = "end" if x > left + (width - left - right) / 2 else "start"
        dx = -8 if anchor == "end" else 8
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4.5" fill="{color}" stroke="#222" stroke-width="1"/>')
        value = f"{peak:.3g}" if log else f"{peak:.0f}"
        out.append(f'<text x="{x + dx:.1f}" y="{y + 4 + 13 * n:.1f}" text-anchor="{anchor}" class="peak" '
                   f'style="fill:{color}">{html.escape(label)} peak {value} {html.escape(unit)} ≥ '
                   f'{html.escape(mark_over[0])} {mark_over[1]:.3g}</text>')
    out.append("</svg>")
    return "".join(out)


def event_strip(title: str, events: dict[str, list], span: float, width: int = 560) -> str:
    """Clock-event reasons over time: one row per reason that was ever active, shaded by the
    share of each interval it was active."""
    reasons = [r for r in EVENT_COLORS if any(p[3] > 0 for p in events.get(r, ()))]
    left, row = 150, 16
    height = 30 + row * max(len(reasons), 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" class="chart">',
           f'<text x="8" y="16" class="title">{html.escape(title)}</text>']
    if not reasons:
        out.append('<text x="8" y="38" class="tick">no clock-event reason active</text></svg>')
        return "".join(out)
    plot = width - left - 10
    for n, reason in enumerate(reasons):
        y = 24 + n * row
        out.append(f'<text x="{left - 6}" y="{y + 11}" text-anchor="end" class="tick">{reason}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{plot}" height="{row - 3}" fill="#f4f4f4"/>')
        pts = events[reason]
        for i, p in enumerate(pts):
            if p[3] <= 0:
                continue
            a = left + p[0] / span * plot
            b = left + (pts[i + 1][0] if i + 1 < len(pts) else p[0] + 1) / span * plot
            out.append(f'<rect x="{a:.1f}" y="{y}" width="{max(b - a, 1.5):.1f}" height="{row - 3}" '
                       f'fill="{EVENT_COLORS[reason]}" fill-opacity="{max(p[2], 0.35):.2f}"/>')
    out.append("</svg>")
    return "".join(out)


# --- the page ----------------------------------------------------------------------------------
def _fmt(value, spec: str, suffix: str = "") -> str:
    return NOT_MEASURED if value is None else format(value, spec) + suffix


def _groups(units: list[dict]) -> list[tuple[str, list[dict]]]:
    out: dict[str, list[dict]] = {}
    for u in units:
        key = u.get("gpu_name") or "CPU"
        out.setdefault(key, []).append(u)
    return list(out.items())


def render(r: dict) -> str:
    e = html.escape
    hw = r["hardware"]
    timeline = hw.get("timeline", {})
    span = max(r["duration_seconds"], 1.0)
    verdict_class = {"pass": "pass", "fail": "fail"}.get(r["verdict"], "warn")
    parts = [f"""<!doctype html><html><head><meta charset="utf-8"><title>rigmon burn-in: {e(r['host'])}</title>
<style>
body{{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:20px;color:#222}}
h1{{margin:0 0 4px}} h2{{margin:22px 0 6px}} .sub{{color:#666}}
.verdict{{font-size:28px;font-weight:700;padding:6px 14px;border-radius:6px;display:inline-block;margin:12px 0}}
.pass{{background:#d9f2d9;color:#1a5e1a}} .fail{{background:#f8d7da;color:#842029}}
.warn,.not-tested{{background:#fff3cd;color:#664d03}} table{{border-collapse:collapse;margin:8px 0 16px}}
td,th{{border:1px solid #ddd;padding:4px 8px;text-align:left;font-size:14px;vertical-align:top}}
th{{background:#f6f6f6}} ul{{margin:0;padding-left:16px}}
.grid{{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(470px,100%),1fr));gap:10px}}
.chart{{background:#fff;border:1px solid #eee;width:100%;height:auto;display:block}}
.title{{font-size:13px;font-weight:600}} .tick{{font-size:11px;fill:#555}}
.legend{{font-size:11px;font-weight:600}} .peak{{font-size:12px;font-weight:700;paint-order:stroke;stroke:#fff;
stroke-width:3px}}
</style></head><body>
<h1>rigmon burn-in — {e(r['host'])}</h1>
<div class="sub">{e(r['started'])} · {r['duration_seconds'] / 60:.1f} min · model {e(_models(r))} · rigmon
 {e(r['rigmon'])} · driver {e(hw.get('driver') or NOT_MEASURED)}, CUDA {e(hw.get('cuda') or NOT_MEASURED)}</div>
<div class="verdict {verdict_class}" id="verdict">{e(r['verdict'].upper())}</div>"""]
    if r.get("notes"):
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in r["notes"]) + "</ul>")
    parts.append("<table id='units'><tr><th>unit</th><th>hardware</th><th>verdict</th><th>tokens/s</th><th>MFU</th>"
                 "<th>final loss / floor</th><th>max temp</th><th>max power / limit</th><th>energy</th>"
                 "<th>reasons</th></tr>")
    for u in r["units"]:
        reasons = "".join(f"<li>✗ {e(x)}</li>" for x in u["reasons"]) + "".join(
            f"<li>⚠ {e(x)}</li>" for x in u["warnings"])
        status = u["status"]
        loss = (f"{u['final_loss']:.3f} / {u['floor']:.3f}" if u.get("final_loss") is not None
                and u.get("floor") is not None else "—" if u.get("watch_only") else NOT_MEASURED)
        power = (f"{u['max_power_watts']:.0f} / {u['power_limit_watts']:.0f} W"
                 if u.get("max_power_watts") is not None and u.get("power_limit_watts") else
                 _fmt(u.get("max_power_watts"), ".0f", " W"))
        rate = "—" if u.get("watch_only") else _fmt(u.get("tokens_per_s"), ",.0f")
        parts.append(f"<tr><td>{e(u['name'])}</td><td>{e(u.get('gpu_name') or '')}</td>"
                     f"<td class='{status.replace(' ', '-')}'>{e(status)}</td><td>{rate}</td>"
                     f"<td>{_fmt(u['mfu'] * 100 if u.get('mfu') is not None else None, '.1f', ' %')}</td>"
                     f"<td>{loss}</td><td>{_fmt(u.get('max_temperature_celsius'), '.0f', ' °C')}</td>"
                     f"<td>{power}</td><td>{_fmt(u.get('energy_kwh'), '.3f', ' kWh')}</td>"
                     f"<td><ul>{reasons or '<li>none</li>'}</ul></td></tr>")
    parts.append("</table>")
    host = r["host_verdict"]
    energy = r["energy"]
    parts.append(f"<p><b>Host:</b> {e(host['status'])}" + "".join(f" — {e(x)}" for x in host["reasons"]) + "</p>")
    if energy.get("total_kwh") is None:
        parts.append(f"<p><b>Energy:</b> {NOT_MEASURED} (no GPU energy counter or RAPL reading)</p>")
    else:
        cost = (f", {energy['cost']:.2f} {e(energy['currency'])} at {energy['price_per_kwh']} per kWh"
                if energy.get("cost") is not None else "")
        parts.append(f"<p><b>Energy:</b> {energy['total_kwh']:.4f} kWh (GPUs {_fmt(energy['gpu_kwh'], '.4f')}, "
                     f"CPU {_fmt(energy['cpu_kwh'], '.4f')}){cost}</p>")
    parts.append("<h2>Alerts during the run</h2><table id='alerts'><tr><th>at</th><th>state</th><th>severity</th>"
                 "<th>alert</th><th>subject</th><th>summary</th></tr>")
    for a in r.get("alerts", []):
        parts.append(f"<tr><td>{_clock(a['t'])}</td><td>{e(a['status'])}</td><td>{e(a['severity'])}</td>"
                     f"<td>{e(a['alertname'])}</td><td>{e(a.get('subject', ''))}</td><td>{e(a['summary'])}</td></tr>")
    if not r.get("alerts"):
        parts.append("<tr><td colspan='6'>none fired</td></tr>")
    parts.append("</table>")
    if r.get("baseline"):
        parts.append("<h2>Against the baseline</h2><table><tr><th>unit</th><th>tokens/s</th><th>max temp</th>"
                     "<th>energy per M tokens</th></tr>")
        for row in r["baseline"]["rows"]:
            parts.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>")
        parts.append("</table>")
    for name, units in _groups(r["units"]):
        parts.append(f"<h2 class='group'>{e(name)} × {len(units)}</h2><div class='grid'>")
        parts += _group_charts(units, timeline, hw, span)
        parts.append("</div>")
    cpu = [(n.removeprefix("cpu/"), timeline[n], COLORS[i % 8]) for i, n in
           enumerate(sorted(n for n in timeline if n.startswith("cpu/")))]
    fans = [(n.removeprefix("fan/"), timeline[n], COLORS[i % 8]) for i, n in
            enumerate(sorted(n for n in timeline if n.startswith("fan/")))]
    parts.append("<h2>Host sensors</h2><div class='grid'>")
    parts.append(chart("CPU temperature", cpu, "°C", span=span))
    parts.append(chart("fans", fans, "rpm", zero=True, span=span))
    parts.append("</div></body></html>")
    return "\n".join(parts)


def _models(r: dict) -> str:
    """The model each unit trained, with its size: "auto: tiny (0.4 M parameters)"."""
    chosen = {(u.get("model"), u.get("params")) for u in r["units"] if u.get("model")}
    sizes = ", ".join(f"{name} ({params / 1e6:.3g} M parameters)" if params else str(name)
                      for name, params in sorted(chosen, key=lambda c: (str(c[0]), c[1] or 0)))
    asked = str(r.get("model") or "")
    return f"{asked}: {sizes}" if sizes and asked and asked not in {c[0] for c in chosen} else sizes or asked


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _group_charts(units: list[dict], timeline: dict, hw: dict, span: float) -> list[str]:
    """One chart per reading for the whole group, a line per GPU (8 GPUs make 8 charts, not 48)."""
    gpus = [u for u in units if u.get("gpu") is not None]
    out = []

    def per_gpu(key: str, scale: float = 1.0) -> list:
        out = []
        for n, u in enumerate(gpus):
            pts = timeline.get(f"gpu/{u['gpu']}/{key}", [])
            out.append((u["name"], [(p[0], p[1] * scale, p[2] * scale, p[3] * scale) for p in pts], COLORS[n % 8]))
        return out

    if gpus:
        slow = [s for u in gpus if (s := hw.get("gpus", {}).get(str(u["gpu"]), {}).get("slowdown_celsius"))]
        out.append(chart("GPU temperature against the slowdown threshold", per_gpu("temperature_celsius"), "°C",
                         [("slowdown", min(slow), "#d62728")] if slow else [], above=min(slow) if slow else None,
                         span=span, mark_over=("slowdown", min(slow)) if slow else None))
        limits = [u["power_limit_watts"] for u in gpus if u.get("power_limit_watts")]
        out.append(chart("power against the limit", per_gpu("power_watts"), "W",
                         [("limit", max(limits), "#555")] if limits else [], zero=True,
                         above=max(limits) if limits else None, span=span))
        out.append(chart("SM clock", per_gpu("sm_clock_hertz", 1e-6), "MHz", zero=True, span=span))
        out.append(chart("memory temperature", per_gpu("memory_temperature_celsius"), "°C", span=span))
        if any(timeline.get(f"gpu/{u['gpu']}/fan_speed_rpm_max") for u in gpus):
            out.append(chart("GPU fans (fastest per GPU)", per_gpu("fan_speed_rpm_max"), "rpm", zero=True, span=span))
        for u in gpus:
            events = {r: timeline.get(f"event/{u['gpu']}/{r}", []) for r in EVENT_COLORS}
            out.append(event_strip(f"{u['name']}: clock-event reasons", events, span))
    trained = [u for u in units if u.get("progress")]
    if trained:
        out.append(chart("throughput", [(u["name"], u["progress"]["tokens_per_s"], COLORS[n % 8])
                                        for n, u in enumerate(trained)], "tokens/s", zero=True, span=span))
        # the verdict reads the gap between the loss and the data's floor: drawn on a log axis, the
        # approach to the floor stays visible to the end instead of flattening against it
        gaps = [(u["name"], [(p[0], *(max(v - u["floor"], 1e-3) for v in p[1:])) for p in u["progress"]["loss"]],
                 COLORS[n % 8]) for n, u in enumerate(trained) if u.get("floor") is not None]
        allowed = [u["allowed_loss_gap"] for u in trained if u.get("allowed_loss_gap")]
        if gaps:
            out.append(chart("loss above the data's floor (log scale)", gaps, "nats",
                             [("allowed at the end", min(allowed), "#2ca02c")] if allowed else [], log=True,
                             span=span))
        else:
            out.append(chart("loss (log scale)", [(u["name"], u["progress"]["loss"], COLORS[n % 8])
                                                  for n, u in enumerate(trained)], "nats", log=True, span=span))
    return out
