"""The burn-in's results: the run's data made the report (``build_report``: per unit, its
throughput, power, clocks and their reasons, the verdict and why), compared with an earlier
report of the same box (``compare``), and the few lines a terminal shows at the end
(``summary``)."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Protocol

from .. import __version__
from ..model.sample import Sample
from .timeline import Downsampled, Run
from .verdict import Limits, group_of, steady_rate


class Reported(Protocol):
    """What a training worker reported, as the report takes it."""

    name: str
    last: dict | None  # its latest progress event
    rates: Downsampled
    losses: Downsampled


# Dense bf16/fp16 tensor throughput (FLOP/s), for MFU. The first name that matches wins.
PEAK_FLOPS = [
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("GH200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("RTX 6000 Ada", 364e12),
    ("RTX 4090", 165e12),
    ("RTX 4080", 97e12),
    ("RTX 3090", 71e12),
    ("RTX 3080", 59e12),
    ("RTX A6000", 155e12),
    ("A10", 125e12),
    ("L4", 121e12),
    ("V100", 125e12),
    ("T4", 65e12),
]


def peak_flops(name: str | None) -> float | None:
    if not name:
        return None
    return next((flops for key, flops in PEAK_FLOPS if key.lower() in name.lower()), None)


def unit_label(unit: dict, info: dict) -> str | None:
    """What trained: the GPU's name, or the CPU's."""
    start = unit.get("start") or {}
    if start.get("gpu_name"):
        return start["gpu_name"]
    if unit.get("gpu") is not None and unit["gpu"] in info:
        return info[unit["gpu"]].name
    return start.get("cpu_name") or ("CPU" if unit.get("device") == "cpu" else None)


def build_report(
    host,
    started_wall,
    started_unix,
    duration,
    model,
    units,
    judgements,
    host_judgement,
    overall,
    run: Run,
    transitions,
    first: Sample,
    config,
    notes,
    workers: list[Reported],
) -> dict:
    info = {i.index: i for i in first.gpu_info}
    by_name = {w.name: w for w in workers}
    out_units = []
    gpu_joules, measured = 0.0, False
    for unit, j in zip(units, judgements, strict=True):
        start, end = unit.get("start") or {}, unit.get("end") or {}
        gpu = unit["gpu"]
        tally = run.tallies.get(gpu) if gpu is not None else None
        joules = tally.energy_joules if tally is not None else None
        if joules is not None:
            gpu_joules, measured = gpu_joules + joules, True
        rate = steady_rate(unit)
        name = unit_label(unit, info)
        peak = peak_flops(start.get("gpu_name")) if str(unit["device"]).startswith("cuda") else None
        worker = by_name.get(unit["name"])
        group = group_of(unit)
        out_units.append(
            {
                "name": unit["name"],
                "gpu": gpu,
                "device": unit["device"],
                "gpu_name": name,
                "uuid": info[gpu].uuid if gpu in info else None,
                "status": j.status,
                "reasons": j.reasons,
                "warnings": j.warnings,
                "model": start.get("model"),
                "params": start.get("params"),
                "group": " · ".join(str(x) for x in group) if group else None,
                "precision": start.get("precision"),
                "compiled": start.get("compiled"),
                "tokens": end.get("tokens"),
                "tokens_per_s": rate,
                "floor": start.get("floor"),
                "final_loss": end.get("final_loss"),
                # where the run ended early (interrupted, a rank died): the last loss it reported
                "last_loss": (worker.last or {}).get("loss") if worker else None,
                "last_loss_at": (worker.last or {}).get("t") if worker else None,
                "allowed_loss_gap": Limits().allowed_gap(start["floor"]) if start.get("floor") is not None else None,
                "mfu": rate * start["flops_per_token"] / peak
                if rate and peak and start.get("flops_per_token")
                else None,
                "max_temperature_celsius": tally.hottest if tally else None,
                "max_power_watts": tally.max_power if tally else None,
                "power_limit_watts": tally.limit if tally else None,
                "energy_kwh": joules / 3.6e6 if joules is not None else None,
                "energy_from_power": bool(tally and tally.counter_stuck),
                "progress": {"tokens_per_s": worker.rates.to_json(), "loss": worker.losses.to_json()}
                if worker
                else None,
                "probes": unit.get("probes", 0),
                "failed_probes": unit.get("failed_probes", []),
                "exit_code": unit.get("exit_code"),
                "watch_only": bool(unit.get("watch_only")),
            }
        )
    first_cpu, last_cpu = run.cpu_energy
    cpu_kwh = (
        (last_cpu - first_cpu) / 3.6e6
        if first_cpu is not None and last_cpu is not None and last_cpu > first_cpu
        else None
    )
    gpu_kwh = gpu_joules / 3.6e6 if measured else None
    stuck = sorted(i for i, tally in run.tallies.items() if tally.counter_stuck)
    if stuck:
        notes = [
            *notes,
            f"energy of GPU(s) {', '.join(map(str, stuck))} integrated from their power: their energy counter "
            "stood still while they drew power",
        ]
    total = None if gpu_kwh is None and cpu_kwh is None else (gpu_kwh or 0.0) + (cpu_kwh or 0.0)
    price = config.burnin.price_per_kwh
    system = first.system
    return {
        "format": "rigmon-burnin",
        "version": 2,
        "rigmon": __version__,
        "host": host,
        "started": started_wall,
        "started_unix": round(started_unix, 3),
        "duration_seconds": round(duration, 1),
        "model": model,
        "verdict": overall,
        "python": platform.python_version(),
        "units": out_units,
        "host_verdict": {"status": host_judgement.status, "reasons": host_judgement.reasons},
        "energy": {
            "gpu_kwh": gpu_kwh,
            "cpu_kwh": cpu_kwh,
            "total_kwh": total,
            "price_per_kwh": price,
            "currency": config.burnin.currency,
            "cost": total * price if price is not None and total is not None else None,
        },
        "alerts": transitions,
        "notes": notes,
        "hardware": {
            "driver": system.driver_version if system else None,
            "cuda": system.cuda_driver_version if system else None,
            "gpus": {str(i): {"name": info[i].name, "slowdown_celsius": run.slowdown_celsius.get(i)} for i in info},
            "ticks": run.ticks,
            "timeline": run.timeline.to_json(),
        },
    }


def compare(new: dict, old: dict) -> dict:
    rows = []
    old_units = {u.get("uuid") or u.get("name"): u for u in old.get("units", []) if isinstance(u, dict)}
    for u in new["units"]:
        o = old_units.get(u.get("uuid") or u["name"])
        if o is None:
            rows.append([u["name"], "not in the baseline", "", ""])
            continue

        def delta(a, b, fmt):
            if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
                return "n/a"
            change = f" ({100 * (a - b) / b:+.1f} %)" if b else ""
            return f"{fmt.format(b)} → {fmt.format(a)}{change}"

        def per_million(unit):
            kwh, tokens = unit.get("energy_kwh"), unit.get("tokens")
            return (
                kwh / tokens * 1e6
                if isinstance(kwh, (int, float)) and isinstance(tokens, (int, float)) and tokens
                else None
            )

        rows.append(
            [
                u["name"],
                delta(u.get("tokens_per_s"), o.get("tokens_per_s"), "{:,.0f}"),
                delta(u.get("max_temperature_celsius"), o.get("max_temperature_celsius"), "{:.0f} °C"),
                delta(per_million(u), per_million(o), "{:.4f} kWh"),
            ]
        )
    return {"started": old.get("started"), "rows": rows}


def summary(data: dict, json_path: Path, html_path: Path) -> str:
    verdict = data["verdict"].upper()
    lines = [f"rigmon burn-in: {verdict} after {data['duration_seconds'] / 60:.1f} min"]
    for u in data["units"]:
        lines.append(
            f"  {u['name']}"
            + (f" {u['gpu_name']}" if u.get("gpu_name") else "")
            + f": {u['status']}"
            + (f", {u['tokens_per_s']:,.0f} tokens/s" if u.get("tokens_per_s") else "")
            + (f", MFU {100 * u['mfu']:.1f} %" if u.get("mfu") else "")
        )
        for reason in u["reasons"]:
            lines.append(f"    ✗ {reason}")
        for warning in u["warnings"]:
            lines.append(f"    ⚠ {warning}")
    host = data["host_verdict"]
    for reason in host["reasons"]:
        lines.append(f"  host {'✗' if host['status'] == 'fail' else '–'} {reason}")
    energy = data["energy"]
    if energy["total_kwh"] is None:
        lines.append("  energy not measured (no GPU energy counter or RAPL reading)")
    else:
        lines.append(
            f"  energy {energy['total_kwh']:.4f} kWh"
            + (f", {energy['cost']:.2f} {energy['currency']}" if energy["cost"] is not None else "")
        )
    for note in data["notes"]:
        lines.append(f"  note: {note}")
    lines.append(f"  report: {html_path} (and {json_path.name})")
    return "\n".join(lines)
