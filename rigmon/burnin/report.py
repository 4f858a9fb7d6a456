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
from pathlib import Path

from ..http.charts import CHART_CSS, COLORS, EVENT_COLORS, NOT_MEASURED, chart, event_strip


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
    return {
        "format": "rigmon-burnin-summary",
        "version": 1,
        "host": r["host"],
        "started_unix": r["started_unix"],
        "duration_seconds": r["duration_seconds"],
        "verdict": r["verdict"],
        "units": [{k: u.get(k) for k in keep} for u in r["units"]],
        "energy": r["energy"],
    }


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
    parts = [
        f"""<!doctype html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1"><title>rigmon burn-in: {e(r["host"])}</title>
<style>
body{{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:20px;color:#222}}
h1{{margin:0 0 4px}} h2{{margin:22px 0 6px}} .sub{{color:#666}}
.verdict{{font-size:28px;font-weight:700;padding:6px 14px;border-radius:6px;display:inline-block;margin:12px 0}}
.pass{{background:#d9f2d9;color:#1a5e1a}} .fail{{background:#f8d7da;color:#842029}}
.warn,.not-tested{{background:#fff3cd;color:#664d03}} table{{border-collapse:collapse;margin:8px 0 16px}}
td,th{{border:1px solid #ddd;padding:4px 8px;text-align:left;font-size:14px;vertical-align:top}}
th{{background:#f6f6f6}} ul{{margin:0;padding-left:16px}}
.grid{{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(470px,100%),1fr));gap:10px}}
@media (max-width:700px){{body{{margin:10px}} table,tbody,tr,td{{display:block}} table tr:first-child{{display:none}}
tr{{border-bottom:1px solid #ddd;padding:4px 0}} td{{border:0;padding:1px 0}}
td[data-label]::before{{content:attr(data-label) ": ";color:#666}}}}
{CHART_CSS}
</style></head><body>
<h1>rigmon burn-in — {e(r["host"])}</h1>
<div class="sub">{e(r["started"])} · {r["duration_seconds"] / 60:.1f} min · model {e(_models(r))} · rigmon
 {e(r["rigmon"])} · driver {e(hw.get("driver") or NOT_MEASURED)}, CUDA {e(hw.get("cuda") or NOT_MEASURED)}</div>
<div class="verdict {verdict_class}" id="verdict">{e(r["verdict"].upper())}</div>"""
    ]
    if r.get("notes"):
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in r["notes"]) + "</ul>")
    parts.append("<table id='units'><tr>" + "".join(f"<th>{label}</th>" for label in _UNIT_COLUMNS) + "</tr>")
    for u in r["units"]:
        reasons = "".join(f"<li>✗ {e(x)}</li>" for x in u["reasons"]) + "".join(
            f"<li>⚠ {e(x)}</li>" for x in u["warnings"]
        )
        status = u["status"]
        loss = (
            f"{u['final_loss']:.3f} / {u['floor']:.3f}"
            if u.get("final_loss") is not None and u.get("floor") is not None
            else f"{u['last_loss']:.3f} / {u['floor']:.3f} (the last reported, at {u['last_loss_at']:.0f} s)"
            if _number(u.get("last_loss")) and _number(u.get("floor")) and _number(u.get("last_loss_at"))
            else "—"
            if u.get("watch_only")
            else NOT_MEASURED
        )
        power = (
            f"{u['max_power_watts']:.0f} / {u['power_limit_watts']:.0f} W"
            if u.get("max_power_watts") is not None and u.get("power_limit_watts")
            else _fmt(u.get("max_power_watts"), ".0f", " W")
        )
        rate = "—" if u.get("watch_only") else _fmt(u.get("tokens_per_s"), ",.0f")
        cells = [
            e(u["name"]),
            e(u.get("gpu_name") or ""),
            e(status),
            rate,
            _fmt(u["mfu"] * 100 if u.get("mfu") is not None else None, ".1f", " %"),
            loss,
            _fmt(u.get("max_temperature_celsius"), ".0f", " °C"),
            power,
            _fmt(u.get("energy_kwh"), ".3f", " kWh"),
            f"<ul>{reasons or '<li>none</li>'}</ul>",
        ]
        parts.append(_row(cells, _UNIT_COLUMNS, {2: status.replace(" ", "-")}))
    parts.append("</table>")
    host = r["host_verdict"]
    energy = r["energy"]
    parts.append(f"<p><b>Host:</b> {e(host['status'])}" + "".join(f" — {e(x)}" for x in host["reasons"]) + "</p>")
    if energy.get("total_kwh") is None:
        parts.append(f"<p><b>Energy:</b> {NOT_MEASURED} (no GPU energy counter or RAPL reading)</p>")
    else:
        cost = (
            f", {energy['cost']:.2f} {e(energy['currency'])} at {energy['price_per_kwh']} per kWh"
            if energy.get("cost") is not None
            else ""
        )
        parts.append(
            f"<p><b>Energy:</b> {energy['total_kwh']:.4f} kWh (GPUs {_fmt(energy['gpu_kwh'], '.4f')}, "
            f"CPU {_fmt(energy['cpu_kwh'], '.4f')}){cost}</p>"
        )
    parts.append(
        "<h2>Alerts during the run</h2><table id='alerts'><tr>"
        + "".join(f"<th>{label}</th>" for label in _ALERT_COLUMNS)
        + "</tr>"
    )
    for a in r.get("alerts", []):
        cells = [
            _clock(a["t"]),
            e(a["status"]),
            e(a["severity"]),
            e(a["alertname"]),
            e(a.get("subject", "")),
            e(a["summary"]),
        ]
        parts.append(_row(cells, _ALERT_COLUMNS))
    if not r.get("alerts"):
        parts.append("<tr><td colspan='6'>none fired</td></tr>")
    parts.append("</table>")
    if r.get("baseline"):
        parts.append(
            "<h2>Against the baseline</h2><table><tr>" + "".join(f"<th>{x}</th>" for x in _BASELINE_COLUMNS) + "</tr>"
        )
        for row in r["baseline"]["rows"]:
            parts.append(_row([e(str(c)) for c in row], _BASELINE_COLUMNS))
        parts.append("</table>")
    for name, units in _groups(r["units"]):
        parts.append(f"<h2 class='group'>{e(name)} × {len(units)}</h2><div class='grid'>")
        parts += _group_charts(units, timeline, hw, span)
        parts.append("</div>")
    cpu = [
        (n.removeprefix("cpu/"), timeline[n], COLORS[i % 8])
        for i, n in enumerate(sorted(n for n in timeline if n.startswith("cpu/")))
    ]
    fans = [
        (n.removeprefix("fan/"), timeline[n], COLORS[i % 8])
        for i, n in enumerate(sorted(n for n in timeline if n.startswith("fan/")))
    ]
    parts.append("<h2>Host sensors</h2><div class='grid'>")
    parts.append(chart("CPU temperature", cpu, "°C", span=span))
    parts.append(chart("fans", fans, "rpm", zero=True, span=span))
    parts.append("</div></body></html>")
    return "\n".join(parts)


def _models(r: dict) -> str:
    """The model each unit trained, with its size: "auto: tiny (0.4 M parameters)"."""
    chosen = {(u.get("model"), u.get("params")) for u in r["units"] if u.get("model")}
    sizes = ", ".join(
        f"{name} ({params / 1e6:.3g} M parameters)" if params else str(name)
        for name, params in sorted(chosen, key=lambda c: (str(c[0]), c[1] or 0))
    )
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
        out.append(
            chart(
                "GPU temperature against the slowdown threshold",
                per_gpu("temperature_celsius"),
                "°C",
                [("slowdown", min(slow), "#d62728")] if slow else [],
                above=min(slow) if slow else None,
                span=span,
                mark_over=("slowdown", min(slow)) if slow else None,
            )
        )
        limits = [u["power_limit_watts"] for u in gpus if u.get("power_limit_watts")]
        out.append(
            chart(
                "power against the limit",
                per_gpu("power_watts"),
                "W",
                [("limit", max(limits), "#555")] if limits else [],
                zero=True,
                above=max(limits) if limits else None,
                span=span,
            )
        )
        out.append(chart("SM clock", per_gpu("sm_clock_hertz", 1e-6), "MHz", zero=True, span=span))
        out.append(chart("memory temperature", per_gpu("memory_temperature_celsius"), "°C", span=span))
        if any(timeline.get(f"gpu/{u['gpu']}/fan_speed_rpm_max") for u in gpus):
            out.append(chart("GPU fans (fastest per GPU)", per_gpu("fan_speed_rpm_max"), "rpm", zero=True, span=span))
        for u in gpus:
            events = {r: timeline.get(f"event/{u['gpu']}/{r}", []) for r in EVENT_COLORS}
            out.append(event_strip(f"{u['name']}: clock-event reasons", events, span))
    trained = [u for u in units if u.get("progress")]
    if trained:
        out.append(
            chart(
                "throughput",
                [(u["name"], u["progress"]["tokens_per_s"], COLORS[n % 8]) for n, u in enumerate(trained)],
                "tokens/s",
                zero=True,
                span=span,
            )
        )
        # the verdict reads the gap between the loss and the data's floor: drawn on a log axis, the
        # approach to the floor stays visible to the end instead of flattening against it
        gaps = [
            (
                u["name"],
                [(p[0], *(max(v - u["floor"], 1e-3) for v in p[1:])) for p in u["progress"]["loss"]],
                COLORS[n % 8],
            )
            for n, u in enumerate(trained)
            if u.get("floor") is not None
        ]
        allowed = [u["allowed_loss_gap"] for u in trained if u.get("allowed_loss_gap")]
        if gaps:
            out.append(
                chart(
                    "loss above the data's floor (log scale)",
                    gaps,
                    "nats",
                    [("allowed at the end", min(allowed), "#2ca02c")] if allowed else [],
                    log=True,
                    span=span,
                )
            )
        else:
            out.append(
                chart(
                    "loss (log scale)",
                    [(u["name"], u["progress"]["loss"], COLORS[n % 8]) for n, u in enumerate(trained)],
                    "nats",
                    log=True,
                    span=span,
                )
            )
    return out


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


_UNIT_COLUMNS = (
    "unit",
    "hardware",
    "verdict",
    "tokens/s",
    "MFU",
    "final loss / floor",
    "max temp",
    "max power / limit",
    "energy",
    "reasons",
)
_ALERT_COLUMNS = ("at", "state", "severity", "alert", "subject", "summary")
_BASELINE_COLUMNS = ("unit", "tokens/s", "max temp", "energy per M tokens")


def _row(cells: list[str], labels: tuple[str, ...], classes: dict[int, str] | None = None) -> str:
    """A table row of HTML cells, each with its column's name (the row read as a list on a phone)."""
    out = []
    for k, (cell, label) in enumerate(zip(cells, labels, strict=True)):
        cls = f" class='{classes[k]}'" if classes and k in classes else ""
        out.append(f"<td data-label='{label}'{cls}>{cell}</td>")
    return "<tr>" + "".join(out) + "</tr>"
