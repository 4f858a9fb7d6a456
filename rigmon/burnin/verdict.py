"""The burn-in's judgement: a pure function of what the run recorded.

Inputs are each GPU's tallied readings, the workers' events (bounded) and the alert
transitions; the output is a verdict per GPU and overall, with reasons. A GPU that was only
watched (no training could use it) is "not tested": it can fail on what its hardware
reported, never pass. Throughput is compared only between GPUs of the same model running
the same model size.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..alerts.xid import xid_meaning
from ..model.sample import SLOWDOWNS
from .timeline import GpuTally

HOST_FAILURES = {"FanStalled", "CpuTemperatureCritical"}
SLOWDOWN_REASONS = SLOWDOWNS  # the clock-event reasons that are a real slowdown (not the power cap)


@dataclass
class Limits:
    slowdown_allowance: float = 0.02  # share of ticks a thermal/HW slowdown or power brake may be active
    loss_margin: float = 0.1  # nats above the floor, or 10 % of it, whichever is larger
    throughput_spread: float = 0.10  # a GPU more than 10 % below the best one fails
    throughput_decay: float = 0.10  # throughput falling more than 10 % over the run fails
    # ...on the CPU, which shares its cores with all the box does (the daemon, the shell, a
    # build), and whose throughput moves with them: falling more than 60 % fails (a CPU that
    # throttles as it heats, 30k tokens/s falling to 5k)
    cpu_throughput_decay: float = 0.60
    power_reached: float = 0.90  # warn when power never reached 90 % of the limit

    def allowed_gap(self, floor: float) -> float:
        """How far above the data's floor the final loss may end: ``loss_margin`` or 10 % of it."""
        return max(self.loss_margin, 0.1 * floor)


@dataclass
class Judgement:
    name: str
    status: str = "pass"  # pass | warn | fail
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def fail(self, reason: str) -> None:
        self.status = "fail"  # also for a GPU only watched: broken hardware shows without training
        self.reasons.append(reason)

    def warn(self, reason: str) -> None:
        if self.status == "pass":  # "not tested" stays: a warning is no test
            self.status = "warn"
        self.warnings.append(reason)


NOT_TESTED = "not tested"  # a GPU that was watched but not trained on: it can fail, never pass


def group_of(unit: dict) -> tuple | None:
    """GPUs whose throughput may be compared: the same GPU model running the same model size."""
    start = unit.get("start") or {}
    if not str(unit.get("device", "")).startswith("cuda"):
        return None
    return (start.get("gpu_name"), start.get("model"))


def judge(
    units: list[dict], tallies: dict[int, GpuTally], transitions: list[dict], limits: Limits | None = None
) -> tuple[str, list[Judgement], Judgement]:
    """``units``: one per worker or watched GPU (see ``run.Worker.as_unit``); ``tallies``: each
    GPU's readings, by index. Returns (overall, per unit, host)."""
    limits = limits or Limits()
    judgements = []
    rates: dict[tuple, dict[str, float]] = {}
    for unit in units:
        j = Judgement(unit["name"])
        if unit.get("watch_only"):
            j.status = NOT_TESTED
        else:
            judge_training(unit, j, limits)
        if unit.get("gpu") is not None and unit["gpu"] in tallies:
            judge_hardware(tallies[unit["gpu"]], j, limits, trained=not unit.get("watch_only"))
        rate = steady_rate(unit)
        group = group_of(unit)
        if rate and group is not None:
            rates.setdefault(group, {})[unit["name"]] = rate
        judgements.append(j)
    for group, members in rates.items():  # only like against like: a 3060 is not a slow 4090
        if len(members) < 2:
            continue
        best = max(members.values())
        for j in judgements:
            rate = members.get(j.name)
            if rate is not None and rate < (1 - limits.throughput_spread) * best:
                j.fail(
                    f"throughput {rate:,.0f} tokens/s is {100 * (1 - rate / best):.0f} % below the best "
                    f"{group[0]}'s {best:,.0f} on the same model"
                )
    host = Judgement("host")
    for t in transitions:
        if t["status"] == "firing" and t["alertname"] in HOST_FAILURES:
            host.fail(f"{t['alertname']}: {t['summary']}")
    failed = any(j.status == "fail" for j in judgements) or host.status == "fail"
    trained = any(u.get("start") for u in units if not u.get("watch_only"))
    overall = "fail" if failed else ("pass" if trained else "could not run")
    return overall, judgements, host


def steady_rate(unit: dict) -> float | None:
    """Median tokens/s after the first 10 % of the run (compilation, warm-up)."""
    points = unit.get("rates") or []
    if not points:
        return None
    end = points[-1][0]
    steady = [v for t, v in points if t >= 0.1 * end] or [v for _, v in points]
    return statistics.median(steady)


def judge_training(unit: dict, j: Judgement, limits: Limits) -> None:
    error, end = unit.get("error"), unit.get("end")
    if error is not None:
        why = f" ({unit['stopped_because']})" if unit.get("stopped_because") else ""
        j.fail(f"the training process failed{why}: {error['message']}")
        return
    if end is None:
        j.fail(
            f"the training process died (exit code {unit.get('exit_code')})"
            + (f" ({unit['stopped_because']})" if unit.get("stopped_because") else "")
        )
        return
    if end.get("nan"):
        j.fail("the loss became NaN or infinite")
    else:
        final, floor = end.get("final_loss"), end.get("floor")
        if final is not None and floor is not None:
            margin = limits.allowed_gap(floor)
            if final - floor > margin:
                j.fail(
                    f"the loss ({final:.3f}) did not approach the data's floor ({floor:.3f}): a gap of "
                    f"{final - floor:.3f} nats (allowed {margin:.3f}) points at wrong arithmetic"
                )
    bad = unit.get("failed_probes") or []
    if bad:
        probe = bad[0]
        j.fail(
            f"determinism probe mismatch at {probe['t']:.0f} s ({len(bad)} of {unit.get('probes', 0)} probes): "
            f"the same weights and batch gave logits {probe['max_abs_diff']:.3g} apart (silent data corruption?)"
        )
    points = [v for _, v in unit.get("rates") or []]
    if len(points) >= 9:  # the median of the first third after its warm-up against the last third's
        on_gpu = str(unit.get("device", "cuda")).startswith("cuda")
        decay = limits.throughput_decay if on_gpu else limits.cpu_throughput_decay
        third = len(points) // 3
        early = statistics.median(points[third // 3 : third])
        late = statistics.median(points[-third:])
        if early > 0 and late < (1 - decay) * early:
            j.fail(
                f"throughput decayed {100 * (1 - late / early):.0f} % over the run ({early:,.0f} → "
                f"{late:,.0f} tokens/s; allowed {100 * decay:.0f} %{'' if on_gpu else ' on the CPU'})"
            )


def judge_hardware(tally: GpuTally, j: Judgement, limits: Limits, trained: bool = True) -> None:
    for t, xid in tally.xids:
        j.fail(f"XID {xid} at {t:.0f} s: {xid_meaning(xid)}")
    if tally.lost:
        j.fail("the GPU fell off the bus or stopped answering")
        return
    if not tally.ticks:
        return
    busy = tally.busy_ticks or tally.ticks
    for reason in SLOWDOWN_REASONS:
        share = tally.slowdown_ticks.get(reason, 0) / busy
        if share > limits.slowdown_allowance:
            j.fail(
                f"{reason.replace('_', ' ')} active {100 * share:.0f} % of the time under load "
                f"(allowed {100 * limits.slowdown_allowance:.0f} %)"
            )
    if tally.slowdown_celsius is not None and tally.hottest is not None and tally.hottest >= tally.slowdown_celsius:
        j.fail(f"temperature reached {tally.hottest:.0f} °C, the slowdown threshold ({tally.slowdown_celsius:.0f} °C)")
    if (tally.ecc_last or 0) > (tally.ecc_first or 0):
        j.fail(f"uncorrectable ECC errors rose from {tally.ecc_first} to {tally.ecc_last}")
    if tally.remap_failure:
        j.fail("a memory row remap failed")
    if tally.remap_pending:
        j.warn("a memory row remap is pending: reset the GPU")
    if not trained:
        return  # nothing loaded it: how far its power or link went says nothing
    if tally.max_power_ratio is not None and tally.max_power_ratio < limits.power_reached:
        j.warn(
            f"power never reached {100 * limits.power_reached:.0f} % of the limit (at most "
            f"{100 * tally.max_power_ratio:.0f} %): the GPU was starved (data loading, CPU, PCIe) or the model is "
            f"too small"
        )
    if tally.busy_ticks and tally.pcie_below_ticks / tally.busy_ticks > 0.5 and tally.pcie_below_last:
        gen, width, max_gen, max_width = tally.pcie_below_last
        j.warn(f"the PCIe link ran at gen {gen} x{width} under load, below its max (gen {max_gen} x{max_width})")
