"""The burn-in's judgement: a pure function of what the run recorded.

Inputs are the hardware timeline (compact ticks from the readers), the workers' events
and the alert transitions; the output is a verdict per GPU and overall, with reasons.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..alerts.xid import xid_meaning

HOST_FAILURES = {"FanStalled", "CpuTemperatureCritical"}
SLOWDOWN_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown", "hw_power_brake_slowdown")


@dataclass
class Limits:
    slowdown_allowance: float = 0.02  # share of ticks a thermal/HW slowdown or power brake may be active
    loss_margin: float = 0.1  # nats above the floor, or 10 % of it, whichever is larger
    throughput_spread: float = 0.10  # a GPU more than 10 % below the best one fails
    throughput_decay: float = 0.10  # throughput falling more than 10 % over the run fails
    power_reached: float = 0.90  # warn when power never reached 90 % of the limit


@dataclass
class Judgement:
    name: str
    status: str = "pass"  # pass | warn | fail
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def fail(self, reason: str) -> None:
        self.status = "fail"
        self.reasons.append(reason)

    def warn(self, reason: str) -> None:
        if self.status == "pass":
            self.status = "warn"
        self.warnings.append(reason)


def judge(units: list[dict], ticks: list[dict], transitions: list[dict], limits: Limits | None = None
          ) -> tuple[str, list[Judgement], Judgement]:
    """``units``: one per worker, with ``gpu`` (index or None), ``events`` and ``exit_code``.
    ``ticks``: {"t", "gpus": {index: {...}}, "events": [...]}. Returns (overall, per unit, host)."""
    limits = limits or Limits()
    judgements = []
    rates = {}
    for unit in units:
        j = Judgement(unit["name"])
        judge_training(unit, j, limits)
        if unit.get("gpu") is not None:
            judge_hardware(unit["gpu"], ticks, j, limits)
        rate = steady_rate(unit)
        if rate:
            rates[unit["name"]] = rate
        judgements.append(j)
    if len(rates) > 1:
        best = max(rates.values())
        for j in judgements:
            rate = rates.get(j.name)
            if rate is not None and rate < (1 - limits.throughput_spread) * best:
                j.fail(f"throughput {rate:,.0f} tokens/s is {100 * (1 - rate / best):.0f} % below the best GPU's "
                       f"{best:,.0f}")
    host = Judgement("host")
    for t in transitions:
        if t["status"] == "firing" and t["alertname"] in HOST_FAILURES:
            host.fail(f"{t['alertname']}: {t['summary']}")
    failed = any(j.status == "fail" for j in judgements) or host.status == "fail"
    started = any(_event(u, "start") for u in units)
    overall = "could not run" if not started else ("fail" if failed else "pass")
    return overall, judgements, host


def _event(unit: dict, name: str) -> dict | None:
    return next((e for e in unit["events"] if e.get("event") == name), None)


def progress(unit: dict) -> list[dict]:
    return [e for e in unit["events"] if e.get("event") == "progress"]


def steady_rate(unit: dict) -> float | None:
    """Median tokens/s after the first 10 % of the run (compilation, warm-up)."""
    points = progress(unit)
    if not points:
        return None
    end = points[-1]["t"]
    steady = [p["tokens_per_s"] for p in points if p["t"] >= 0.1 * end] or [p["tokens_per_s"] for p in points]
    return statistics.median(steady)


def judge_training(unit: dict, j: Judgement, limits: Limits) -> None:
    error = _event(unit, "error")
    end = _event(unit, "end")
    if error is not None:
        j.fail(f"the training process failed: {error['message']}")
        return
    if end is None:
        j.fail(f"the training process died (exit code {unit.get('exit_code')})")
        return
    if end.get("nan"):
        j.fail("the loss became NaN or infinite")
    else:
        final, floor = end.get("final_loss"), end.get("floor")
        if final is not None and floor is not None:
            margin = max(limits.loss_margin, 0.1 * floor)
            if final - floor > margin:
                j.fail(f"the loss ({final:.3f}) did not approach the data's floor ({floor:.3f}): a gap of "
                       f"{final - floor:.3f} nats (allowed {margin:.3f}) points at wrong arithmetic")
    for probe in (e for e in unit["events"] if e.get("event") == "probe"):
        if not probe.get("ok"):
            j.fail(f"determinism probe mismatch at {probe['t']:.0f} s: the same weights and batch gave logits "
                   f"{probe['max_abs_diff']:.3g} apart (silent data corruption?)")
            break
    points = progress(unit)
    if len(points) >= 9 and unit.get("device", "cuda").startswith("cuda"):  # CPU throughput is shared, noisy
        third = len(points) // 3
        early = statistics.median(p["tokens_per_s"] for p in points[third // 3: third])
        late = statistics.median(p["tokens_per_s"] for p in points[-third:])
        if early > 0 and late < (1 - limits.throughput_decay) * early:
            j.fail(f"throughput decayed {100 * (1 - late / early):.0f} % over the run ({early:,.0f} → "
                   f"{late:,.0f} tokens/s)")


def judge_hardware(gpu: int, ticks: list[dict], j: Judgement, limits: Limits) -> None:
    key = str(gpu)
    mine = [t["gpus"][key] for t in ticks if key in t.get("gpus", {})]
    for t in ticks:
        for e in t.get("events", ()):
            if e["gpu"] == gpu:
                j.fail(f"XID {e['xid']} at {t['t']:.0f} s: {xid_meaning(e['xid'])}")
    if any(g.get("lost") for g in mine):
        j.fail("the GPU fell off the bus or stopped answering")
        return
    if not mine:
        return
    busy = [g for g in mine if (g.get("util") or 0) >= 0.5] or mine
    for reason in SLOWDOWN_REASONS:
        share = sum(1 for g in busy if g.get("events", {}).get(reason)) / len(busy)
        if share > limits.slowdown_allowance:
            j.fail(f"{reason.replace('_', ' ')} active {100 * share:.0f} % of the time under load "
                   f"(allowed {100 * limits.slowdown_allowance:.0f} %)")
    slowdown = mine[0].get("slowdown_celsius")
    hottest = max((g["temp"] for g in mine if g.get("temp") is not None), default=None)
    if slowdown is not None and hottest is not None and hottest >= slowdown:
        j.fail(f"temperature reached {hottest:.0f} °C, the slowdown threshold ({slowdown:.0f} °C)")
    first, last = mine[0], mine[-1]
    if (last.get("ecc_uncorrected") or 0) > (first.get("ecc_uncorrected") or 0):
        j.fail(f"uncorrectable ECC errors rose from {first.get('ecc_uncorrected')} to {last.get('ecc_uncorrected')}")
    if any(g.get("remap_failure") for g in mine):
        j.fail("a memory row remap failed")
    if any(g.get("remap_pending") for g in mine):
        j.warn("a memory row remap is pending: reset the GPU")
    ratios = [g["power"] / g["limit"] for g in mine if g.get("power") is not None and g.get("limit")]
    if ratios and max(ratios) < limits.power_reached:
        j.warn(f"power never reached {100 * limits.power_reached:.0f} % of the limit (at most "
               f"{100 * max(ratios):.0f} %): the GPU was starved (data loading, CPU, PCIe) or the model is too small")
    below = [g for g in busy if g.get("pcie_gen") is not None and g.get("pcie_max_gen") is not None and (
        g["pcie_gen"] < g["pcie_max_gen"] or (g.get("pcie_width") or 0) < (g.get("pcie_max_width") or 0))]
    if below and len(below) / len(busy) > 0.5:
        g = below[-1]
        j.warn(f"the PCIe link ran at gen {g['pcie_gen']} x{g['pcie_width']} under load, below its max "
               f"(gen {g['pcie_max_gen']} x{g['pcie_max_width']})")
