"""What consumer boxes do in normal use raises nothing; the fault beside it does.

Replays through the real readers and the engine, of the cards our users own (their answers on
the H200 recording's load tick): a 3090 on an x1 riser, a 4090 held in P2 at Gen3 of Gen4, a
GeForce card regulating at its target temperature with the software thermal flag set."""

from __future__ import annotations

import pytest
import scenarios as sc
from scenarios import set_gpu, timeline

from rigmon.config.schema import parse
from rigmon.model.recording import Recording
from rigmon.offline import replay_rules

MASK = "nvmlDeviceGetCurrentClocksEventReasons"


def card(name: str, max_gen: int, max_width: int, app_mhz: int | None, max_mhz: int):
    """A GeForce board: its name, its link's maximum, its applications and maximum SM clocks."""

    def board(rec):
        return sc.on_every_gpu(
            rec,
            nvmlDeviceGetName=name,
            nvmlDeviceGetMaxPcieLinkGeneration=max_gen,
            nvmlDeviceGetGpuMaxPcieLinkGeneration=max_gen,
            nvmlDeviceGetMaxPcieLinkWidth=max_width,
            nvmlDeviceGetMaxClockInfo__1=max_mhz,
            nvmlDeviceGetApplicationsClock__1=app_mhz if app_mhz else sc.error("NotSupported"),
        )

    return board


RTX_3090 = card("NVIDIA GeForce RTX 3090", 4, 16, 1395, 2100)
RTX_4090 = card("NVIDIA GeForce RTX 4090", 4, 16, None, 3120)  # no applications clock on this board


def busy(gen, width, pstate=0, sm_mhz=1900, reasons=0x4):
    return lambda t, tick: set_gpu(
        tick,
        nvmlDeviceGetCurrPcieLinkGeneration=gen(t) if callable(gen) else gen,
        nvmlDeviceGetCurrPcieLinkWidth=width,
        nvmlDeviceGetPerformanceState=pstate(t) if callable(pstate) else pstate,
        nvmlDeviceGetUtilizationRates={"gpu": 100, "memory": 40},
        nvmlDeviceGetClockInfo__1=sm_mhz,
        **{MASK: reasons},
    )


def alerts(recording: Recording, tmp_path, config: dict | None = None) -> set[str]:
    path = sc.write(recording, tmp_path / "card.rec.jsonl")
    return {t.alertname for t in replay_rules(Recording.load(path), parse(config or {})) if t.status == "firing"}


X1_RISER = {"gpu": {"pcie_expected_width": {"0": 1}}}

CASES = {
    # (scenario, config, the alerts it must raise of these two)
    "3090 on an x1 riser, declared": (lambda: timeline(180, 5, board=RTX_3090, modify=busy(4, 1)), X1_RISER, set()),
    "3090 on an x1 riser, not declared": (
        lambda: timeline(180, 5, board=RTX_3090, modify=busy(4, 1)),
        {},
        {"PcieLinkDegraded"},
    ),
    "3090 on an x1 riser that never trains above Gen1": (
        lambda: timeline(180, 5, board=RTX_3090, modify=busy(1, 1)),
        X1_RISER,
        {"PcieLinkDegraded"},
    ),
    # at Gen4 in P0 first, then busy in P2 at Gen3: the link steps with the P-state
    "4090 busy in P2 at Gen3 of 4": (
        lambda: timeline(
            240, 5, board=RTX_4090, modify=busy(lambda t: 4 if t < 30 else 3, 16, pstate=lambda t: 0 if t < 30 else 2)
        ),
        {},
        set(),
    ),
    "4090 that dropped to Gen3 in P0, where it ran at Gen4": (
        lambda: timeline(240, 5, board=RTX_4090, modify=busy(lambda t: 4 if t < 30 else 3, 16, pstate=0)),
        {},
        {"PcieLinkDegraded"},
    ),
    "4090 that never trains above Gen1": (
        lambda: timeline(240, 5, board=RTX_4090, modify=busy(1, 16, pstate=2)),
        {},
        {"PcieLinkDegraded"},
    ),
    # the software thermal flag at the target temperature: the clock still above the base clock
    "3090 at its target temperature, SW thermal flag, boosting": (
        lambda: timeline(120, 5, board=RTX_3090, modify=busy(4, 16, sm_mhz=1800, reasons=0x20)),
        {},
        set(),
    ),
    "3090 held below its base clock by the SW thermal flag": (
        lambda: timeline(120, 5, board=RTX_3090, modify=busy(4, 16, sm_mhz=1100, reasons=0x20)),
        {},
        {"GpuThermalSlowdown"},
    ),
    "4090 (no applications clock), SW thermal flag, near its maximum clock": (
        lambda: timeline(120, 5, board=RTX_4090, modify=busy(4, 16, sm_mhz=2700, reasons=0x20)),
        {},
        set(),
    ),
    "4090 (no applications clock) held below 3/4 of its maximum clock": (
        lambda: timeline(120, 5, board=RTX_4090, modify=busy(4, 16, sm_mhz=1500, reasons=0x20)),
        {},
        {"GpuThermalSlowdown"},
    ),
    "3090 in a real hardware thermal slowdown": (
        lambda: timeline(120, 5, board=RTX_3090, modify=busy(4, 16, sm_mhz=1800, reasons=0x40)),
        {},
        {"GpuThermalSlowdown"},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_consumer_cards(case, tmp_path):
    scenario, config, expected = CASES[case]
    got = alerts(scenario(), tmp_path, config) & {"PcieLinkDegraded", "GpuThermalSlowdown"}
    assert got == expected, case


def test_the_warning_says_how_to_declare_a_narrow_slot(tmp_path):
    path = sc.write(timeline(180, 5, board=RTX_3090, modify=busy(4, 1)), tmp_path / "x1.rec.jsonl")
    fired = [
        t
        for t in replay_rules(Recording.load(path), parse({}))
        if t.alertname == "PcieLinkDegraded" and t.status == "firing"
    ]
    assert fired and "gpu.pcie_expected_width = { 0 = 1 }" in fired[0].hint, fired[0].hint
    assert "gen 4 x1 of gen 4 x16" in fired[0].summary


def test_status_shows_several_fans_compactly():
    from rigmon.model.sample import GpuReading
    from rigmon.status import _fans

    def fans(speeds, rpms):
        return _fans(GpuReading(0, "u", fan_target_ratios=speeds, fan_speed_rpm=rpms))

    assert fans((0.0, 0.0), (0.0, 0.0)) == "0% 0 ×2"  # a zero-rpm idle board, once
    assert fans((0.55,), (1650.0,)) == "55% 1650"
    assert fans((0.55, 0.6), (1650.0, 1720.0)) == "55/60% 1650/1720"
    assert fans((0.55, 0.55, 0.55), ()) == "55% ×3"
