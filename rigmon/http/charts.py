"""Charts as SVG, for the burn-in report and the daemon's page alike, so the two read the same.

Drawn to be read correctly: round ("nice") axis ticks, power from 0 to above the limit, fan
speeds from 0, a log axis where asked, time in s, min or h, and a band from min to max where a
series was downsampled, so no spike is hidden. Every text is escaped here: labels come from
NVML, hwmon and the config. Pure functions of their arguments: no state, no I/O.
"""

from __future__ import annotations

import html
import math

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
EVENT_COLORS = {
    "sw_power_cap": "#9ecae1",
    "sw_thermal_slowdown": "#fd8d3c",
    "hw_thermal_slowdown": "#d94801",
    "hw_slowdown": "#a50f15",
    "hw_power_brake_slowdown": "#67000d",
}
NOT_MEASURED = "not measured"
MARK_LABEL_GAP = 60  # px between two marks' names: nearer, the later one is left to its title


# What every page showing these charts styles them with (the report and the daemon's page).
CHART_CSS = """.chart{background:#fff;border:1px solid #eee;width:100%;height:auto;display:block}
.title{font-size:13px;font-weight:600} .tick{font-size:11px;fill:#555}
.legend{font-size:11px;font-weight:600} .peak{font-size:12px;font-weight:700;paint-order:stroke;stroke:#fff;
stroke-width:3px}"""


# --- axes ------------------------------------------------------------------------------------
def nice_step(span: float, ticks: int = 5) -> float:
    """A round step (1, 2, 2.5 or 5 × 10^n) that cuts ``span`` into about ``ticks`` parts."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / ticks
    power = 10.0 ** min(math.floor(math.log10(raw)), 307)  # a float: past 1e308, inf, never a vast int
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def nice_ticks(lo: float, hi: float, ticks: int = 5) -> list[float]:
    """Round ticks from at or below ``lo`` to at or above ``hi``: at most a few more than
    ``ticks``, whatever the values (past 2**53 a step can no longer move a float: then the
    ends alone)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
        return [0.0, 1.0]
    step = nice_step(hi - lo, ticks)
    first = math.floor(lo / step) * step
    out, v = [], first
    while v <= hi + step * 1e-9 and len(out) <= 4 * ticks:
        out.append(round(v, 10))
        if v + step == v:
            break
        v += step
    if out[-1] < hi:
        out.append(round(out[-1] + step, 10))
    if out[-1] <= out[0]:  # no step moves it: the ends, apart
        d = max(abs(out[0]) * 1e-6, 1.0)
        out = [out[0] - d, out[0]] if out[0] > 0 else [out[0], out[0] + d]
    return out


def tick_label(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e6:
        return f"{v / 1e6:g}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def _finite(p) -> bool:
    return math.isfinite(p[0]) and math.isfinite(p[1]) and math.isfinite(p[2]) and math.isfinite(p[3])


def time_axis(seconds: float) -> tuple[float, str]:
    """(divisor, unit) for a run this long: days past 48 hours, as ``ago`` says them."""
    if seconds > 48 * 3600:
        return 86400.0, "d"
    if seconds >= 3 * 3600:
        return 3600.0, "h"
    if seconds >= 3 * 60:
        return 60.0, "min"
    return 1.0, "s"


def chart(
    title: str,
    series: list[tuple[str, list, str]],
    unit: str,
    lines=(),
    *,
    zero: bool = False,
    above: float | None = None,
    log: bool = False,
    span: float | None = None,
    width: int = 560,
    height: int = 240,
    mark_over: tuple[str, float] | None = None,
    ago: bool = False,
    marks=(),
) -> str:
    """A line chart as SVG, scaled to its card's width. ``series``: (label, [(t, min, mean, max)],
    colour); a band is drawn where min and max differ. ``zero``: the axis starts at 0; ``above``:
    it reaches past this value; ``log``: a log axis (positive values). ``mark_over``: (what, limit):
    a series whose peak reaches the limit gets its max drawn as a line and the peak marked and
    labelled with its value and the limit, so what failed is what the eye sees first. ``ago``: the
    time axis counts back from its end ("now"), for a live chart. ``marks``: (t, colour, text)
    events drawn as thin vertical lines (an alert that fired or resolved), the text as its tooltip."""
    left, right, top, bottom = 52, 10, 40, 30
    # any float draws, in bounded time: what is not finite (a damaged file, a bad sensor) is no point
    series = [(label, [p for p in pts if _finite(p)], color) for label, pts, color in series]
    lines = [line for line in lines if math.isfinite(line[1])]
    values = [v for _, pts, _ in series for p in pts for v in (p[1], p[3])] + [v for _, v, _ in lines]
    times = [p[0] for _, pts, _ in series for p in pts]
    if not times or not values:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="44" viewBox="0 0 {width} 44" '
            f'class="chart"><text x="8" y="18" class="title">{html.escape(title)}</text>'
            f'<text x="8" y="36" class="tick">{NOT_MEASURED}</text></svg>'
        )
    divisor, tunit = time_axis(span or max(times))
    t0, t1 = 0.0, (span or max(times)) or 1.0
    if log:
        positive = [v for v in values if v > 0] or [1.0]
        lo = max(math.floor(math.log10(min(positive))), -300)  # 10.0 ** 309 is no float
        hi = min(math.ceil(math.log10(max(positive))), 308)
        hi = hi if hi > lo else lo + 1
        every = -(-(hi - lo) // 12)  # at most a dozen decades' ticks, whatever the values span
        hi = lo + -(-(hi - lo) // every) * every
        yticks = [10.0**e for e in range(lo, min(hi, 308) + 1, every)]
        if len(yticks) < 3:  # a narrow range: 1, 2, 5 steps
            yticks = sorted(
                {m * 10.0**e for e in range(lo, hi + 1) for m in (1, 2, 5) if 10.0**lo <= m * 10.0**e <= 10.0**hi}
            )
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

    xk, yk = (width - left - right) / (t1 - t0), (height - top - bottom) / (y1 - y0)  # px per second, per unit

    def px(t: float) -> float:
        return left + (t - t0) * xk

    def py(v: float) -> float:
        return top + (y1 - ty(v)) * yk

    def ys(pts: list, k: int) -> list[float]:  # the series' y in pixels, inline: a chart has thousands
        if log:
            return [py(p[k]) for p in pts]
        base = top + y1 * yk
        return [base - p[k] * yk for p in pts]

    # the plot's box, time and value ranges: what a page reads a point's value and time back from
    # (the value and time under the pointer)
    scale = (
        f'data-plot="{left},{top},{width - left - right},{height - top - bottom}" data-t="{t0:g},{t1:g}" '
        f'data-y="{y0:g},{y1:g}" data-unit="{html.escape(unit)}"'
        + (' data-log="1"' if log else "")
        + (' data-ago="1"' if ago else "")
    )
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" class="chart" {scale}>',
        f'<text x="{left}" y="16" class="title">{html.escape(title)}</text>',
        f'<text x="{width - right}" y="16" text-anchor="end" class="tick">{html.escape(unit)}</text>',
    ]
    for v in yticks:
        y = py(v)
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" class="tick ytick">{tick_label(v)}</text>')
    for v in nice_ticks(0, t1 / divisor, 5):
        if v * divisor > t1 * 1.001:
            continue
        x = px(t1 - v * divisor) if ago else px(v * divisor)
        text = ("now" if v == 0 else f"−{tick_label(v)} {tunit}") if ago else f"{tick_label(v)} {tunit}"
        out.append(f'<text x="{x:.1f}" y="{height - 10}" text-anchor="middle" class="tick xtick">{text}</text>')
    out.append(
        f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
        f'fill="none" stroke="#ccc"/>'
    )
    for label, value, color in lines:
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{py(value):.1f}" y2="{py(value):.1f}" '
            f'stroke="{color}" stroke-dasharray="6 4"/>'
        )
        out.append(
            f'<text x="{width - right - 4}" y="{py(value) - 4:.1f}" text-anchor="end" class="tick" '
            f'style="fill:{color}">{html.escape(label)}</text>'
        )
    labelled_at = -1e9  # each firing mark named where it stands, unless the last name is too near
    for t, color, text, *named in marks:
        if t0 <= t <= t1:
            x = px(t)
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{height - bottom}" stroke="{color}" '
                f'stroke-width="1.5" class="mark"><title>{html.escape(text)}</title></line>'
            )
            if named and named[0] and x - labelled_at >= MARK_LABEL_GAP:
                labelled_at = x
                out.append(
                    f'<text x="{x + 2:.1f}" y="{top + 10}" class="tick mark-name" style="fill:{color}">'
                    f"{html.escape(named[0][:24])}</text>"
                )
    legend_x, legend_y = left, 31
    peaks = []
    for label, pts, color in series:
        pts = [p for p in pts if not log or p[1] > 0]
        if not pts:
            continue
        xs = [left + (p[0] - t0) * xk for p in pts]  # each point's x once, for the band and the line
        if any(p[1] != p[3] for p in pts):  # downsampled: the band from min to max
            upper = " ".join([f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys(pts, 3), strict=True)])
            lower = " ".join([f"{x:.1f},{y:.1f}" for x, y in zip(reversed(xs), reversed(ys(pts, 1)), strict=True)])
            out.append(f'<polygon points="{upper} {lower}" fill="{color}" fill-opacity="0.18" stroke="none"/>')
        line = " ".join([f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys(pts, 2), strict=True)])
        out.append(
            f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="1.5" '
            f'data-label="{html.escape(label)}"/>'
        )
        peak = max(pts, key=lambda p: p[3])
        if mark_over is not None and peak[3] >= mark_over[1]:
            peaks.append((label, peak, color))
        if legend_x + 7 * len(label) > width - right:  # the legend wraps rather than runs off the card
            legend_x, legend_y = left, legend_y + 12
        out.append(
            f'<text x="{legend_x}" y="{legend_y}" class="legend" style="fill:{color}">{html.escape(label)}</text>'
        )
        legend_x += 7 * len(label) + 14
    for n, (label, (t, _, _, peak), color) in enumerate(peaks):  # over the lines, so nothing hides them
        x, y = px(t), py(peak)
        anchor = "end" if x > left + (width - left - right) / 2 else "start"
        dx = -8 if anchor == "end" else 8
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4.5" fill="{color}" stroke="#222" stroke-width="1"/>')
        value = f"{peak:.3g}" if log else f"{peak:.0f}"
        out.append(
            f'<text x="{x + dx:.1f}" y="{y + 4 + 13 * n:.1f}" text-anchor="{anchor}" class="peak" '
            f'style="fill:{color}">{html.escape(label)} peak {value} {html.escape(unit)} ≥ '
            f"{html.escape(mark_over[0])} {mark_over[1]:.3g}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def event_strip(title: str, events: dict[str, list], span: float, width: int = 560) -> str:
    """Clock-event reasons over time: one row per reason that was ever active, shaded by the
    share of each interval it was active."""
    reasons = [r for r in EVENT_COLORS if any(p[3] > 0 for p in events.get(r, ()))]
    left, row = 150, 16
    height = 30 + row * max(len(reasons), 1)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" class="chart">',
        f'<text x="8" y="16" class="title">{html.escape(title)}</text>',
    ]
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
            out.append(
                f'<rect x="{a:.1f}" y="{y}" width="{max(b - a, 1.5):.1f}" height="{row - 3}" '
                f'fill="{EVENT_COLORS[reason]}" fill-opacity="{max(p[2], 0.35):.2f}"/>'
            )
    out.append("</svg>")
    return "".join(out)
