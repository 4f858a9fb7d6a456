"""The burn-in report: JSON for machines and comparisons, and one self-contained HTML page
(inline SVG charts, no scripts, no network)."""

from __future__ import annotations

import html
import json
from pathlib import Path

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
EVENT_COLORS = {"sw_power_cap": "#9ecae1", "sw_thermal_slowdown": "#fd8d3c", "hw_thermal_slowdown": "#d94801",
                "hw_slowdown": "#a50f15", "hw_power_brake_slowdown": "#67000d", "gpu_idle": "#d9d9d9"}


def write(report: dict, directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path, html_path = directory / "burnin.json", directory / "burnin.html"
    json_path.write_text(json.dumps(report, indent=2))
    html_path.write_text(render(report))
    return json_path, html_path


def _tick(v: float) -> str:
    if abs(v) >= 1e6:
        return f"{v / 1e6:.3g}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:.3g}k"
    return f"{v:.4g}"


def chart(title: str, series: list[tuple[str, list[float], list[float | None], str]], unit: str,
          lines: list[tuple[str, float, str]] = (), width: int = 720, height: int = 220) -> str:
    """A line chart as SVG: series (label, xs, ys, colour), horizontal reference lines."""
    left, right, top, bottom = 56, 12, 26, 30
    xs = [x for _, sx, _, _ in series for x in sx]
    ys = [y for _, _, sy, _ in series for y in sy if y is not None] + [v for _, v, _ in lines]
    if not xs or not ys:
        return f'<svg width="{width}" height="40"><text x="8" y="24">{html.escape(title)}: no data</text></svg>'
    x0, x1 = min(xs), max(xs) or 1.0
    y0, y1 = min(ys), max(ys)
    pad = (y1 - y0) * 0.08 or abs(y1) * 0.1 or 1.0
    y0, y1 = y0 - pad, y1 + pad
    x1 = x1 if x1 > x0 else x0 + 1

    def px(x):
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def py(y):
        return top + (1 - (y - y0) / (y1 - y0)) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" class="chart">',
           f'<text x="{left}" y="16" class="title">{html.escape(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
           f'fill="none" stroke="#ccc"/>']
    for i in range(5):
        v = y0 + (y1 - y0) * i / 4
        out.append(f'<text x="{left - 4}" y="{py(v) + 4:.1f}" text-anchor="end" class="tick">{_tick(v)}</text>')
    for i in range(5):
        v = x0 + (x1 - x0) * i / 4
        out.append(f'<text x="{px(v):.1f}" y="{height - 12}" text-anchor="middle" class="tick">{v:.0f} s</text>')
    out.append(f'<text x="12" y="{top + (height - top - bottom) / 2:.0f}" class="tick" '
               f'transform="rotate(-90 12 {top + (height - top - bottom) / 2:.0f})">{html.escape(unit)}</text>')
    for label, value, color in lines:
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{py(value):.1f}" y2="{py(value):.1f}" '
                   f'stroke="{color}" stroke-dasharray="6 4"/>')
        out.append(f'<text x="{width - right - 4}" y="{py(value) - 4:.1f}" text-anchor="end" class="tick" '
                   f'fill="{color}">{html.escape(label)}</text>')
    legend_x = left + 8
    for label, sx, sy, color in series:
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(sx, sy, strict=False) if y is not None)
        if not points:
            continue  # a reading this hardware does not give: no line, no legend
        out.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="1.6"/>')
        out.append(f'<text x="{legend_x}" y="{top + 14}" class="tick" fill="{color}">{html.escape(label)}</text>')
        legend_x += 9 * len(label) + 20
    out.append("</svg>")
    return "".join(out)


def event_strip(title: str, xs: list[float], events: list[dict], width: int = 720) -> str:
    """Clock-event reasons over time: one row per reason, coloured where active."""
    reasons = [r for r in EVENT_COLORS if any(e.get(r) for e in events)]
    left, row = 160, 16
    height = 26 + row * max(len(reasons), 1) + 8
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" class="chart">',
           f'<text x="8" y="16" class="title">{html.escape(title)}</text>']
    if not reasons or not xs:
        out.append('<text x="8" y="36" class="tick">no clock-event reason active</text></svg>')
        return "".join(out)
    x0, x1 = xs[0], xs[-1] if xs[-1] > xs[0] else xs[0] + 1
    span = width - left - 12
    for r_i, reason in enumerate(reasons):
        y = 26 + r_i * row
        out.append(f'<text x="{left - 6}" y="{y + 11}" text-anchor="end" class="tick">{reason}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{span}" height="{row - 3}" fill="#f4f4f4"/>')
        for i, e in enumerate(events):
            if e.get(reason):
                a = left + (xs[i] - x0) / (x1 - x0) * span
                b = left + ((xs[i + 1] if i + 1 < len(xs) else xs[i]) - x0) / (x1 - x0) * span
                out.append(f'<rect x="{a:.1f}" y="{y}" width="{max(b - a, 1.5):.1f}" height="{row - 3}" '
                           f'fill="{EVENT_COLORS[reason]}"/>')
    out.append("</svg>")
    return "".join(out)


def _series(ticks: list[dict], key: str) -> dict[str, tuple[list, list]]:
    """{sensor: (times, values)} from the ticks' ``key`` mapping (CPU temperatures, fans)."""
    out: dict[str, tuple[list, list]] = {}
    for t in ticks:
        for name, value in t.get(key, {}).items():
            xs, ys = out.setdefault(name, ([], []))
            xs.append(t["t"])
            ys.append(value)
    return out


def render(r: dict) -> str:
    ticks = r["hardware"]["ticks"]
    xs = [t["t"] for t in ticks]
    e = html.escape
    verdict_class = {"pass": "pass", "fail": "fail"}.get(r["verdict"], "warn")
    parts = [f"""<!doctype html><html><head><meta charset="utf-8"><title>rigmon burn-in: {e(r['host'])}</title>
<style>
body{{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1500px}}
h1{{margin:0 0 4px}} .sub{{color:#666}} .verdict{{font-size:28px;font-weight:700;padding:6px 14px;border-radius:6px;
display:inline-block;margin:12px 0}} .pass{{background:#d9f2d9;color:#1a5e1a}} .fail{{background:#f8d7da;color:#842029}}
.warn{{background:#fff3cd;color:#664d03}} table{{border-collapse:collapse;margin:8px 0 16px}}
td,th{{border:1px solid #ddd;padding:4px 8px;text-align:left;font-size:14px}} th{{background:#f6f6f6}}
.grid{{display:flex;flex-wrap:wrap;gap:10px}} .chart{{background:#fff;border:1px solid #eee}}
.title{{font-size:13px;font-weight:600}} .tick{{font-size:11px;fill:#555}} li{{margin:2px 0}}
</style></head><body>
<h1>rigmon burn-in — {e(r['host'])}</h1>
<div class="sub">{e(r['started'])} · {r['duration_seconds'] / 60:.1f} min · model {e(r['model'])}
 · rigmon {e(r['rigmon'])} · driver {e(str(r['hardware'].get('driver')))}</div>
<div class="verdict {verdict_class}">{e(r['verdict'].upper())}</div>"""]
    parts.append("<table><tr><th>unit</th><th>GPU</th><th>verdict</th><th>tokens/s</th><th>MFU</th>"
                 "<th>final loss / floor</th><th>max temp</th><th>max power</th><th>energy</th><th>reasons</th></tr>")
    for u in r["units"]:
        reasons = "".join(f"<li>✗ {e(x)}</li>" for x in u["reasons"]) + "".join(
            f"<li>⚠ {e(x)}</li>" for x in u["warnings"])
        mfu = f"{100 * u['mfu']:.1f} %" if u.get("mfu") is not None else "n/a"
        loss = (f"{u['final_loss']:.3f} / {u['floor']:.3f}" if u.get("final_loss") is not None else "n/a")
        temp = f"{u['max_temperature_celsius']:.0f} °C" if u.get("max_temperature_celsius") is not None else "n/a"
        power = (f"{u['max_power_watts']:.0f} of {u['power_limit_watts']:.0f} W"
                 if u.get("max_power_watts") is not None else "n/a")
        energy = f"{u['energy_kwh']:.3f} kWh" if u.get("energy_kwh") is not None else "n/a"
        parts.append(f"<tr><td>{e(u['name'])}</td><td>{e(u.get('gpu_name') or '')}</td>"
                     f"<td class='{u['status'] if u['status'] != 'pass' else 'pass'}'>{e(u['status'])}</td>"
                     f"<td>{(u.get('tokens_per_s') or 0):,.0f}</td><td>{mfu}</td><td>{loss}</td><td>{temp}</td>"
                     f"<td>{power}</td><td>{energy}</td><td><ul>{reasons or '<li>none</li>'}</ul></td></tr>")
    parts.append("</table>")
    host = r["host_verdict"]
    energy = r["energy"]
    parts.append(f"<p><b>Host:</b> {e(host['status'])}" + "".join(f" — {e(x)}" for x in host["reasons"]) + "</p>")
    cost = (f", {energy['cost']:.2f} {e(energy['currency'])} at {energy['price_per_kwh']} per kWh"
            if energy.get("cost") is not None else "")
    parts.append(f"<p><b>Energy:</b> {energy['total_kwh']:.4f} kWh (GPUs {energy['gpu_kwh']:.4f}, CPU "
                 f"{energy['cpu_kwh']:.4f}){cost}</p>")
    if r.get("baseline"):
        parts.append("<h2>Against the baseline</h2><table><tr><th>unit</th><th>tokens/s</th><th>max temp</th>"
                     "<th>energy per M tokens</th></tr>")
        for row in r["baseline"]["rows"]:
            parts.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>")
        parts.append("</table>")
    for u in r["units"]:
        gpu = u.get("gpu")
        parts.append(f"<h2>{e(u['name'])} {e(u.get('gpu_name') or '')}</h2><div class='grid'>")
        if gpu is not None:
            key = str(gpu)
            rows = [t["gpus"].get(key, {}) for t in ticks]
            slow = next((g.get("slowdown_celsius") for g in rows if g.get("slowdown_celsius")), None)
            limit = next((g.get("limit") for g in rows if g.get("limit")), None)
            parts.append(chart("temperature against the slowdown threshold",
                               [("GPU", xs, [g.get("temp") for g in rows], COLORS[1]),
                                ("memory", xs, [g.get("mem_temp") for g in rows], COLORS[4])], "°C",
                               [("slowdown", slow, "#d62728")] if slow else []))
            parts.append(chart("power against the limit",
                               [("power", xs, [g.get("power") for g in rows], COLORS[0])], "W",
                               [("limit", limit, "#555")] if limit else []))
            clocks = [g["sm_clock"] / 1e6 if g.get("sm_clock") else None for g in rows]
            parts.append(chart("SM clock", [("SM", xs, clocks, COLORS[2])], "MHz"))
            parts.append(event_strip("clock-event reasons", xs, [g.get("events", {}) for g in rows]))
        points = [p for p in u["progress"]]
        px_ = [p["t"] for p in points]
        parts.append(chart("throughput", [("tokens/s", px_, [p["tokens_per_s"] for p in points], COLORS[3])],
                           "tokens/s"))
        parts.append(chart("loss against the data's floor", [("loss", px_, [p.get("loss") for p in points],
                                                                COLORS[0])], "nats",
                           [("floor", u["floor"], "#2ca02c")] if u.get("floor") is not None else []))
        parts.append("</div>")
    cpu_series, fan_series = _series(ticks, "cpu"), _series(ticks, "fans")
    parts.append("<h2>CPU sensors</h2><div class='grid'>")
    parts.append(chart("CPU temperature", [(n, sx, sy, COLORS[i % 8]) for i, (n, (sx, sy)) in
                                           enumerate(sorted(cpu_series.items()))], "°C"))
    parts.append(chart("fans", [(n, sx, sy, COLORS[i % 8]) for i, (n, (sx, sy)) in
                                enumerate(sorted(fan_series.items()))], "rpm"))
    parts.append("</div>")
    if r.get("notes"):
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in r["notes"]) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
