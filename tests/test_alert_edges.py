"""Rules where real boxes differ from the fixtures: three-valued logic over values the hardware
does not give, alerts that resolve when their condition can no longer be evaluated, and every
built-in rule with its optional inputs missing (Tctl-only k10temp, no slowdown threshold, no
power limit, no fans, reasons the board does not report)."""

import os
import subprocess
import sys

import pytest
import scenarios as sc
from scenarios import set_gpu, timeline

from rigmon.alerts.engine import AlertEngine
from rigmon.alerts.rules import Expression, Rule
from rigmon.alerts.specs import RuleSpec
from rigmon.config.schema import Config, parse
from rigmon.model.recording import Recording
from rigmon.offline import replay_rules

MASK = "nvmlDeviceGetCurrentClocksEventReasons"


def ev(text, kind="cpu", params=None, **names):
    return Expression(text, kind, params or {}).evaluate(names)


@pytest.mark.parametrize(
    "text, names, want",
    [
        ("celsius > 90 or critical_celsius > 90", {"celsius": 95, "critical_celsius": None}, True),
        ("celsius > 90 or critical_celsius > 90", {"celsius": 60, "critical_celsius": None}, None),
        ("celsius > 90 and critical_celsius > 90", {"celsius": 60, "critical_celsius": None}, False),
        ("celsius > 90 and critical_celsius > 90", {"celsius": 95, "critical_celsius": None}, None),
        ("not critical_celsius > 90", {"critical_celsius": None}, None),
        ("celsius - critical_celsius > 1 or celsius > 50", {"celsius": 60, "critical_celsius": None}, True),
        (
            "known(critical_celsius) and celsius >= critical_celsius - 5",
            {"celsius": 99, "critical_celsius": None},
            False,
        ),
        ("known(critical_celsius) and celsius >= critical_celsius - 5", {"celsius": 99, "critical_celsius": 100}, True),
        ("50 < celsius <= 60", {"celsius": 55}, True),
        ("50 < celsius <= critical_celsius", {"celsius": 55, "critical_celsius": None}, None),
        (
            "abs(celsius - 60) < 1 and max(celsius, critical_celsius) > 0",
            {"celsius": 60, "critical_celsius": None},
            None,
        ),
        ("celsius / 0 > 1 or celsius > 50", {"celsius": 60}, True),
        ("(celsius if critical_celsius else 0) > 1", {"celsius": 60, "critical_celsius": None}, None),
    ],
)
def test_three_valued_logic(text, names, want):
    assert ev(text, **names) is want


def rule(when, for_="0s", clear=None):
    return Rule(
        RuleSpec.model_validate(
            {
                "name": "T",
                "kind": "cpu",
                "when": when,
                "clear": clear,
                "for": for_,
                "severity": "warning",
                "summary": "CPU {socket} at {celsius}",
            }
        )
    )


def at(t: float):
    """Just enough of a Sample for AlertEngine.evaluate when entities() is set by hand."""
    return type("S", (), {"events": (), "time": float(t), "host": None, "gpus": (), "gpu_info": ()})()


def test_an_alert_whose_condition_stays_unknown_resolves_with_the_reason():
    engine = AlertEngine([rule("celsius >= 90 or critical_celsius - celsius < 5", for_="10s")], unknown_timeout=60)
    values = {"socket": "0", "sensor": "Tctl", "celsius": 95.0, "critical_celsius": None}
    engine.entities = lambda sample, complete=True: {("cpu", "0"): dict(values)}  # the values a sample would give
    steps = []
    for t in range(0, 200, 5):
        values["celsius"] = 95.0 if t < 30 else None  # the sensor stops answering at 30 s
        steps += [(t, x.status, x.reason) for x in engine.evaluate(at(t), float(t))]
    assert steps == [(10, "firing", ""), (90, "resolved", "condition no longer evaluable for 60 s")]


def test_an_unknown_clear_does_not_resolve_an_alert_whose_condition_holds():
    engine = AlertEngine([rule("celsius >= 90", clear="critical_celsius - celsius > 10")], unknown_timeout=10)
    values = {"socket": "0", "sensor": "Tctl", "celsius": 95.0, "critical_celsius": None}
    engine.entities = lambda sample, complete=True: {("cpu", "0"): dict(values)}
    out = []
    for t in range(0, 100, 5):
        out += [x.status for x in engine.evaluate(at(t), float(t))]
    assert out == ["firing"]  # still 95 °C: the unknown clear waits for the condition itself


def test_a_firing_alerts_texts_follow_every_change_of_the_values_they_read():
    """A text is written again only when a value it reads changed; "changed" includes its type
    (70 and 70.0 are equal and written apart) and the sign of zero."""
    from rigmon.alerts.engine import render

    summary = "CPU {socket} at {celsius} ({celsius:.0f}) of {critical_celsius}"
    spec = {
        "name": "T",
        "kind": "cpu",
        "when": "celsius > -1000",
        "severity": "warning",
        "summary": summary,
        "description": "{sensor}: {celsius:+}",
    }
    engine = AlertEngine([Rule(RuleSpec.model_validate(spec))])
    values = {"socket": "0", "chip": "k10temp", "sensor": "Tctl", "critical_celsius": None}
    engine.entities = lambda sample, complete=True: {("cpu", "0"): dict(values)}
    seen = []
    for t, celsius in enumerate([70, 70, 70.0, 70.0, True, 1, 1.0, 0.0, -0.0, -0.0, 0.0, 0, 70, 70.0]):
        values["celsius"] = celsius
        values["critical_celsius"] = (100, 100.0)[t % 2] if t > 10 else None
        engine.evaluate(at(t), float(t))
        [alert] = engine.firing()
        context = dict(values, for_seconds=0.0)
        assert alert.summary == render(summary, context), (t, celsius)
        assert alert.description == render(spec["description"], context), (t, celsius)
        seen.append(alert.summary)
    assert "CPU 0 at -0.0 (-0) of n/a" in seen and "CPU 0 at True (1) of n/a" in seen and len(set(seen)) == 10


def run(recording: Recording, tmp_path, config: dict | None = None) -> list:
    path = sc.write(recording, tmp_path / "edge.rec.jsonl")
    return replay_rules(Recording.load(path), parse(config) if config else Config())


def tctl(celsius):
    return {"sensors_temperatures": {"k10temp": [["Tctl", celsius, None, None]]}, "cpu_percent": 100.0}


def hot_then_cool():
    return sc.then(timeline(60, 5, host=tctl(100)), timeline(60, 5, host=tctl(60)))


def statuses(transitions, name):
    return [(t.status, t.reason) for t in transitions if t.alertname == name]


def test_tctl_only_cpu_fires_at_100_and_resolves_at_60(tmp_path):
    assert statuses(run(hot_then_cool(), tmp_path), "CpuTemperatureCritical") == [("firing", ""), ("resolved", "")]


def test_rules_test_prints_the_tctl_alert_firing_then_resolving(tmp_path):
    path = sc.write(hot_then_cool(), tmp_path / "tctl-100-then-60.rec.jsonl")
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "rules", "test", "--replay", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "CpuTemperatureCritical" in line]
    assert len(lines) == 2 and "FIRING" in lines[0] and "RESOLVED" in lines[1], done.stdout
    print("\n" + done.stdout)


def test_cooling_degraded_on_tctl_only_fires_and_resolves(tmp_path):
    idle = {**tctl(75), "cpu_percent": 5.0}
    cool = {**tctl(55), "cpu_percent": 5.0}
    rec = sc.then(timeline(900, 15, host=idle), timeline(120, 15, host=cool))
    assert statuses(run(rec, tmp_path), "CoolingDegraded") == [("firing", ""), ("resolved", "")]


def test_gpu_without_a_slowdown_threshold_is_quiet_and_doctor_says_why(tmp_path):
    def no_threshold(recording):
        for g in recording.header["gpus"]:
            g["nvmlDeviceGetTemperatureThreshold:1"] = {"nvml_error": "NotSupported"}
        return recording

    rec = no_threshold(timeline(120, 5, modify=lambda t, tick: set_gpu(tick, nvmlDeviceGetTemperature__0=95)))
    transitions = run(rec, tmp_path)
    assert not [t for t in transitions if t.alertname in ("GpuNearSlowdown", "GpuAtSlowdownTemperature")]
    path = sc.write(rec, tmp_path / "no-threshold.rec.jsonl")
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "doctor", "--replay", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "1000"},  # each rule's verdict on one line
    )
    line = next(x for x in done.stdout.splitlines() if "GpuAtSlowdownTemperature" in x)
    assert "cannot evaluate" in line and "slowdown_celsius not available" in line


def test_no_power_limit_leaves_starved_quiet_and_resolves_one_that_fired(tmp_path):
    def power(mw, limit):
        return lambda t, tick: set_gpu(
            tick,
            nvmlDeviceGetPowerUsage=mw,
            nvmlDeviceGetEnforcedPowerLimit=limit,
            nvmlDeviceGetUtilizationRates={"gpu": 100, "memory": 10},
        )

    starved = timeline(900, 15, modify=power(300000, 700000))
    gone = timeline(900, 15, modify=power(300000, {"nvml_error": "NotSupported"}))
    assert not [t for t in run(gone, tmp_path) if t.alertname == "GpuStarved"]
    got = statuses(run(sc.then(starved, gone), tmp_path), "GpuStarved")
    assert got[0] == ("firing", "") and got[1][0] == "resolved" and "no longer evaluable" in got[1][1]


def test_no_fans_leaves_fan_rules_quiet(tmp_path):
    rec = timeline(120, 5, host={"sensors_fans": {}, **tctl(50)})
    assert not [t for t in run(rec, tmp_path) if t.alertname == "FanStalled"]


@pytest.mark.parametrize(
    "rule_name, bit, supported",
    [
        ("GpuThermalSlowdown", 0x40, 0x1FF & ~0x20),  # HW thermal active, SW thermal not reported
        ("GpuPowerBrake", 0x80, 0x1FF & ~0x8),  # power brake active, HW slowdown not reported
    ],
)
def test_a_throttle_rule_resolves_when_the_other_reason_is_not_reported(rule_name, bit, supported, tmp_path):
    def board(recording):
        for g in recording.header["gpus"]:
            g["nvmlDeviceGetSupportedClocksEventReasons"] = supported
        return recording

    rec = board(
        sc.then(
            timeline(60, 1, modify=lambda t, tick: set_gpu(tick, **{MASK: bit | 0x4})),
            timeline(60, 1, modify=lambda t, tick: set_gpu(tick, **{MASK: 0x4})),
        )
    )
    assert statuses(run(rec, tmp_path), rule_name) == [("firing", ""), ("resolved", "")]


def test_ecc_rule_with_volatile_counters_only_fires_and_resolves(tmp_path):
    def ecc(count):
        return lambda t, tick: set_gpu(
            tick,
            **{
                "nvmlDeviceGetTotalEccErrors:1,0": count,
                "nvmlDeviceGetTotalEccErrors:1,1": {"nvml_error": "NotSupported"},
            },
        )

    rec = sc.then(timeline(60, 5, modify=ecc(0)), timeline(60, 5, modify=ecc(2)))
    rec = sc.then(rec, timeline(3700, 100, modify=ecc(2)))
    assert statuses(run(rec, tmp_path), "GpuEccUncorrectable") == [("firing", ""), ("resolved", "")]


def test_pcie_link_rule_without_a_width_reading_still_judges_the_generation(tmp_path):
    def link(gen):
        return lambda t, tick: set_gpu(
            tick,
            nvmlDeviceGetCurrPcieLinkGeneration=gen,
            nvmlDeviceGetCurrPcieLinkWidth={"nvml_error": "NotSupported"},
            nvmlDeviceGetUtilizationRates={"gpu": 100, "memory": 10},
        )

    rec = sc.then(timeline(120, 5, modify=link(3)), timeline(120, 5, modify=link(5)))
    assert statuses(run(rec, tmp_path), "PcieLinkDegraded") == [("firing", ""), ("resolved", "")]


def test_doctor_names_the_terms_that_cannot_evaluate(tmp_path):
    """A box whose CPU utilisation is not read: CpuTemperatureCritical's "past its limit" still
    evaluates, its "at its limit while idle" cannot, and doctor says which."""
    host = {"sensors_temperatures": {"k10temp": [["Tctl", 50.0, None, None]]}}
    path = sc.write(timeline(30, 5, host=host), tmp_path / "tctl.rec.jsonl")
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "doctor", "--replay", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "1000"},  # each rule's verdict on one line
    )
    line = next(x for x in done.stdout.splitlines() if "CpuTemperatureCritical" in x)
    assert line.split()[1] == "ok," and "avg_over(cpu_utilization_ratio, '1m') < idle_utilization" in line
    assert "cpu_utilization_ratio not available (CPU utilisation not read)" in line
    assert "other terms still evaluate" in line and "limit_celsius not available" not in line


# --- PCIe: the link the slot allows, a riser declared in the config, replays as a rate ----------
def busy_on_gen(gen):
    return lambda t, tick: set_gpu(
        tick, nvmlDeviceGetCurrPcieLinkGeneration=gen, nvmlDeviceGetUtilizationRates={"gpu": 100, "memory": 10}
    )


def slot_allows(gen):
    """A gen5 GPU in a slot (or behind a riser) that allows ``gen``: NVML's link maximum is the lower."""
    return lambda rec: sc.on_every_gpu(rec, nvmlDeviceGetMaxPcieLinkGeneration=gen)


def test_gen5_gpu_in_a_gen4_slot_running_gen4_is_healthy(tmp_path):
    rec = timeline(180, 5, board=slot_allows(4), modify=busy_on_gen(4))
    assert statuses(run(rec, tmp_path), "PcieLinkDegraded") == []
    # the same slot at gen 3 is degraded: the comparison is with the slot, not only quieter
    rec = timeline(180, 5, board=slot_allows(4), modify=busy_on_gen(3))
    assert statuses(run(rec, tmp_path), "PcieLinkDegraded") == [("firing", "")]


def test_a_riser_forced_to_gen3_is_declared_once_and_stays_quiet(tmp_path):
    rec = timeline(180, 5, modify=busy_on_gen(3))
    assert statuses(run(rec, tmp_path), "PcieLinkDegraded") == [("firing", "")]
    riser = {"gpu": {"pcie_expected_generation": {"0": 3}}}
    assert statuses(run(rec, tmp_path, riser), "PcieLinkDegraded") == []
    # and if that riser link drops to gen 2 under load, it warns
    worse = timeline(180, 5, modify=busy_on_gen(2))
    assert statuses(run(worse, tmp_path, riser), "PcieLinkDegraded") == [("firing", "")]


def test_pcie_link_maxima_are_exported(tmp_path):
    rec = timeline(10, 5, board=slot_allows(4))
    got = exported(rec, tmp_path, {"gpu": {"pcie_expected_generation": {"0": 3}}})
    assert got['rigmon_gpu_pcie_link_generation{gpu="0",link="max"}'] == 4
    (settings,) = [k for k in got if k.startswith("rigmon_gpu_settings_info{") and ',gpu="0",' in k]
    assert 'gpu_max_pcie_generation="5"' in settings
    assert got['rigmon_gpu_pcie_link_generation{gpu="0",link="expected"}'] == 3


@pytest.mark.parametrize("per_minute, fires", [(1, False), (6, False), (12, True), (600, True)])
def test_pcie_replays_fire_on_a_rate_and_say_it(per_minute, fires, tmp_path):
    def replays(t, tick):
        set_gpu(tick, nvmlDeviceGetPcieReplayCounter=1 + int(t * per_minute / 60))

    transitions = [t for t in run(timeline(600, 5, modify=replays), tmp_path) if t.alertname == "PcieReplaysRising"]
    assert bool(transitions) is fires
    if fires:
        assert "PCIe replays a minute over the last 5 min" in transitions[0].summary
        assert float(transitions[0].summary.split(": ")[1].split()[0]) >= 8


def test_one_replay_is_not_an_alert_and_thresholds_are_params(tmp_path):
    rec = timeline(300, 5, modify=lambda t, tick: set_gpu(tick, nvmlDeviceGetPcieReplayCounter=1 if t < 100 else 2))
    assert statuses(run(rec, tmp_path), "PcieReplaysRising") == []
    strict = {"alerts": {"builtin": {"PcieReplaysRising": {"params": {"max_per_minute": 0.1}}}}}
    assert statuses(run(rec, tmp_path, strict), "PcieReplaysRising")[:1] == [("firing", "")]


# --- GPU fans: measured against asked ---------------------------------------------------------
def exported(recording: Recording, tmp_path, config: dict | None = None) -> dict[str, float]:
    """The samples /metrics would show for the recording's first tick, keyed by name and the
    labels other than uuid."""
    from prometheus_client.parser import text_string_to_metric_families

    cfg = parse(config) if config else Config()
    with sc.Replayed(recording, cfg) as replayed:
        replayed.poll()
        text = replayed.metrics()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()) if k != "uuid")
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def test_gpu_fans_export_target_and_measured_speed(tmp_path):
    got = exported(timeline(10, 5, board=lambda r: sc.gpu_fans(r, fans=2, percent=55, rpm=1650)), tmp_path)
    for fan in ("0", "1"):
        assert got[f'rigmon_gpu_fan_speed_ratio{{fan="{fan}",gpu="0"}}'] == 0.55
        assert got[f'rigmon_gpu_fan_target_speed_ratio{{fan="{fan}",gpu="0"}}'] == 0.55
        assert got[f'rigmon_gpu_fan_speed_rpm{{fan="{fan}",gpu="0"}}'] == 1650


def test_a_fan_turning_far_below_what_it_is_asked_fires(tmp_path):
    def slow(t, tick):
        set_gpu(tick, nvmlDeviceGetFanSpeedRPM__0=1800 if t < 60 else 400)

    rec = sc.then(timeline(180, 5, board=sc.gpu_fans, modify=slow), timeline(120, 5, board=sc.gpu_fans))
    got = [t for t in run(rec, tmp_path) if t.alertname == "GpuFanStalled"]
    assert [(t.status, t.labels["fan"]) for t in got] == [("firing", "0"), ("resolved", "0")]
    assert got[0].summary == "GPU 0 (NVIDIA H200) fan 0: 400 rpm while asked for 60%"


@pytest.mark.parametrize("missing", ["nvmlDeviceGetFanSpeedRPM", "nvmlDeviceGetTargetFanSpeed"])
def test_gpu_fan_rule_with_rpm_or_target_not_reported(missing, tmp_path):
    """No rpm: the rule cannot tell (quiet; doctor says so). No target: the reported intended speed stands in."""

    def board(rec):
        rec = sc.gpu_fans(rec)
        return sc.on_every_gpu(rec, **{f"{missing}__{i}": sc.error("NotSupported") for i in range(2)})

    def stops(t, tick):
        if missing != "nvmlDeviceGetFanSpeedRPM":
            set_gpu(tick, nvmlDeviceGetFanSpeedRPM__1=1800 if t < 60 else 0)

    rec = timeline(180, 5, board=board, modify=stops)
    got = statuses(run(rec, tmp_path), "GpuFanStalled")
    if missing == "nvmlDeviceGetFanSpeedRPM":
        assert got == []
        path = sc.write(rec, tmp_path / "no-rpm.rec.jsonl")
        done = subprocess.run(
            [sys.executable, "-m", "rigmon", "doctor", "--replay", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        line = next(x for x in done.stdout.splitlines() if "GpuFanStalled" in x)
        assert "cannot evaluate" in line and "rpm not available" in line
    else:
        assert got == [("firing", "")]


def test_passive_board_has_no_gpu_fan_entities_and_doctor_says_why(tmp_path):
    path = sc.write(timeline(10, 5), tmp_path / "h200.rec.jsonl")
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "doctor", "--replay", str(path)], capture_output=True, text=True, timeout=60
    )
    line = next(x for x in done.stdout.splitlines() if "GpuFanStalled" in x)
    assert "cannot evaluate: no GPU fans reported (passively cooled" in line


# --- Pre-Ampere boards: retired pages ------------------------------------------------------
def test_retired_pages_are_read_exported_and_rising_pages_fire(tmp_path):
    board = lambda r: sc.pre_ampere(r, single_bit=3, double_bit=1, pending=1)  # noqa: E731
    got = exported(timeline(10, 5, board=board), tmp_path)
    assert got['rigmon_gpu_retired_pages_total{cause="single_bit_ecc",gpu="0"}'] == 3
    assert got['rigmon_gpu_retired_pages_total{cause="double_bit_ecc",gpu="0"}'] == 1
    assert got['rigmon_gpu_retired_pages_pending{gpu="0"}'] == 1
    assert not any(k.startswith("rigmon_gpu_remapped_rows") for k in got)

    def rising(t, tick):
        set_gpu(tick, nvmlDeviceGetRetiredPages__1=[0x9000] * (1 if t < 60 else 2))

    rec = timeline(120, 5, board=lambda r: sc.pre_ampere(r, single_bit=3, double_bit=1), modify=rising)
    assert statuses(run(rec, tmp_path), "GpuPageRetirement") == [("firing", "")]


def test_ampere_boards_do_not_ask_for_retired_pages(tmp_path):
    got = exported(timeline(10, 5), tmp_path)
    assert not any(k.startswith("rigmon_gpu_retired_pages") for k in got)
    assert got['rigmon_gpu_remapped_rows_pending{gpu="0"}'] == 0


def test_without_ecc_the_retirement_rule_is_quiet(tmp_path):
    board = lambda r: sc.on_every_gpu(sc.pre_ampere(r, pending=1), nvmlDeviceGetEccMode=[0, 0])  # noqa: E731
    assert statuses(run(timeline(60, 5, board=board), tmp_path), "GpuPageRetirement") == []


def test_max_and_min_over_carried_between_polls_equal_a_full_scan():
    """max_over() and min_over() carry the window's extreme from poll to poll; over 2,000 polls
    of values that jump, hold still (constant runs keep only their ends) and go missing, every
    answer equals a scan of the readings in the window."""
    import random

    spec = {
        "name": "T",
        "kind": "cpu",
        "when": "celsius > -1000",
        "severity": "info",
        "summary": "{hi} {lo}",
        "values": {
            "hi": "max_over(celsius, '30s')",
            "lo": "min_over(celsius, '30s')",
            "hi2": "max_over(celsius, '2m')",
        },
    }
    engine = AlertEngine([Rule(RuleSpec.model_validate(spec))])
    rng = random.Random(7)
    values = {"socket": "0", "sensor": "Tctl", "celsius": 50.0}
    engine.entities = lambda sample, complete=True: {("cpu", "0"): dict(values)}
    seen: list[tuple[float, float]] = []
    checked = 0
    for step in range(2000):
        t = step * 1.0
        roll = rng.random()
        if roll < 0.05:
            values["celsius"] = None  # not read this poll: no point
        elif roll < 0.6:
            values["celsius"] = seen[-1][1] if seen else 50.0  # holds still
        else:
            values["celsius"] = float(rng.choice([rng.uniform(20, 100), 100.0, 20.0]))
        if values["celsius"] is not None:
            seen.append((t, values["celsius"]))
        engine.evaluate(at(t), t)
        alert = engine.alerts.get(("T", ("cpu", "0")))
        if alert is None or values["celsius"] is None:
            continue
        for name, seconds, pick in (("hi", 30, max), ("lo", 30, min), ("hi2", 120, max)):
            window = [v for when, v in seen if when >= t - seconds]
            assert alert.values[name] == pick(window), (step, name)
            checked += 1
    assert checked > 5000


def thermal_event(seconds_near: float):
    """GPU 0 near its slowdown for ``seconds_near``, then for two minutes past it and throttling for heat
    (SW and HW thermal slowdown), then cool again."""

    def modify(t, tick):
        hot = seconds_near <= t < seconds_near + 120
        celsius = 92 if hot else 86 if t < seconds_near else 60
        set_gpu(tick, nvmlDeviceGetTemperature__0=celsius, nvmlDeviceGetCurrentClocksEventReasons=0x60 if hot else 0)

    return timeline(seconds_near + 240, 5, modify=modify)


THERMAL = ("GpuNearSlowdown", "GpuThermalSlowdown", "GpuAtSlowdownTemperature")


def test_one_thermal_event_pages_once(tmp_path):
    told = [(t.alertname, t.status, t.reason) for t in run(thermal_event(10), tmp_path) if t.alertname in THERMAL]
    print(told)
    assert told == [("GpuAtSlowdownTemperature", "firing", ""), ("GpuAtSlowdownTemperature", "resolved", "")]


def test_a_slow_approach_is_superseded_then_told_again_while_it_holds(tmp_path):
    def modify(t, tick):  # near, past the slowdown for 2 min, near again, cool
        celsius = 86 if t < 60 else 92 if t < 180 else 86 if t < 300 else 60
        set_gpu(tick, nvmlDeviceGetTemperature__0=celsius)

    told = [
        (t.alertname, t.status, t.reason)
        for t in run(timeline(400, 5, modify=modify), tmp_path)
        if t.alertname in THERMAL
    ]
    assert told == [
        ("GpuNearSlowdown", "firing", ""),
        ("GpuAtSlowdownTemperature", "firing", ""),
        ("GpuNearSlowdown", "resolved", "superseded by GpuAtSlowdownTemperature"),
        ("GpuAtSlowdownTemperature", "resolved", ""),
        ("GpuNearSlowdown", "firing", ""),  # still near when the worse one ends: told again
        ("GpuNearSlowdown", "resolved", ""),
    ]


def test_without_the_inhibiting_rule_every_alert_is_told(tmp_path):
    config = {"alerts": {"builtin": {"GpuAtSlowdownTemperature": {"enabled": False}}}}
    told = [(t.alertname, t.status) for t in run(thermal_event(10), tmp_path, config) if t.alertname in THERMAL]
    assert told == [("GpuThermalSlowdown", "firing"), ("GpuThermalSlowdown", "resolved")]
    config = {"alerts": {"builtin": {name: {"inhibits": []} for name in THERMAL[1:]}}}
    told = {t.alertname for t in run(thermal_event(40), tmp_path, config) if t.status == "firing"} & set(THERMAL)
    assert told == set(THERMAL)


def _dead_cpu_fan(t, tick):  # a hot idle CPU, its fan stopped a minute in
    tick["host"] = {
        "sensors_temperatures": {"k10temp": [["Tdie", 75, 95.0, 100.0]]},
        "cpu_percent": 5,
        "sensors_fans": {"nct6798": [["", 1150], ["", 1150 if t < 60 else 0]]},
    }


def _dead_gpu_fan(t, tick):  # GPU 0's fan 0 stops a minute in, and the GPU heats up to near its slowdown
    set_gpu(
        tick,
        nvmlDeviceGetFanSpeedRPM__0=1800 if t < 60 else 0,
        nvmlDeviceGetTemperature__0=60 if t < 60 else 80 if t < 150 else 86,
    )


# one cause, the alerts it raises, the one that is told (rigmon rules list: inhibits)
ONE_CAUSE = {
    "a stopped CPU fan": (lambda: timeline(900, 15, modify=_dead_cpu_fan), "FanStalled", ["CoolingDegraded"]),
    "a GPU off the bus with its XID 79": (
        lambda: sc.with_xid(sc.gpu_lost(sc.h200()), at_second=20, xid=79, gpu=1),
        "GpuLost",
        ["GpuCountDropped", "GpuXid"],
    ),
    "a stopped GPU fan": (
        lambda: timeline(240, 5, board=sc.gpu_fans, modify=_dead_gpu_fan),
        "GpuFanStalled",
        ["GpuNearSlowdown"],
    ),
}


@pytest.mark.parametrize("cause", ONE_CAUSE)
def test_one_cause_pages_once(tmp_path, cause):
    """Each pair the rules mark (inhibits) across kinds: the cause is told, what follows from it
    is not; without the mark, every one of them is."""
    recording, told_rule, held = ONE_CAUSE[cause]
    rules = {told_rule, *held}
    told = [(t.alertname, t.status) for t in run(recording(), tmp_path) if t.alertname in rules]
    assert told == [(told_rule, "firing")] or told == [(told_rule, "firing"), (told_rule, "resolved")], told
    config = {"alerts": {"builtin": {told_rule: {"inhibits": []}}}}
    told = {t.alertname for t in run(recording(), tmp_path, config) if t.status == "firing"}
    assert told >= rules, told


@pytest.mark.parametrize(
    ("inhibits", "error"),
    [
        (
            ["GpuNearSlowdwn"],
            "builtin.GpuAtSlowdownTemperature.inhibits: no rule named GpuNearSlowdwn (did you mean GpuNearSlowdown?)",
        ),
        (
            ["FanStalled"],
            "builtin.GpuAtSlowdownTemperature.inhibits: FanStalled watches fan entities, "
            "GpuAtSlowdownTemperature gpu: a rule inhibits only rules of its own kind, the box's (host), "
            "a GPU fan's GPU (gpu_fan on gpu) or a fan's CPUs (fan on cpu)",
        ),
        (["GpuAtSlowdownTemperature"], "builtin.GpuAtSlowdownTemperature.inhibits: a rule cannot inhibit itself"),
    ],
)
def test_inhibits_names_rules_of_its_kind(tmp_path, inhibits, error):
    path = tmp_path / "rigmon.toml"
    path.write_text(f"[alerts.builtin.GpuAtSlowdownTemperature]\ninhibits = {inhibits!r}\n".replace("'", '"'))
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "config", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and " ".join(error.split()) in " ".join(done.stderr.split()), done.stderr
    assert "Traceback" not in done.stderr


def test_each_variable_is_kept_as_long_as_its_own_rules_look_back():
    """A 15-minute max_over keeps about 16 minutes of utilisation, though another rule looks an
    hour back at a counter: two hours at 1 Hz hold a bounded history, and both rules still see
    their whole windows."""
    specs = [
        {
            "name": "Idle",
            "kind": "cpu",
            "when": "max_over(cpu_utilization_ratio, '15m') < 0.05",
            "severity": "warning",
            "summary": "idle",
        },
        {
            "name": "Rising",
            "kind": "cpu",
            "when": "increase(celsius, '1h') > 30",
            "severity": "warning",
            "summary": "rising",
        },
    ]
    engine = AlertEngine([Rule(RuleSpec.model_validate(s)) for s in specs])
    values = {"socket": "0", "sensor": "Tctl"}
    engine.entities = lambda sample, complete=True: {("cpu", "0"): dict(values)}
    fired = {}
    for t in range(2 * 3600):
        values["cpu_utilization_ratio"] = 0.5 + (t % 7) / 100 if t < 5000 else 0.01  # busy, then idle
        values["celsius"] = 40.0 + t / 200  # a slow rise: 18 °C an hour
        for x in engine.evaluate(at(t), float(t)):
            if x.status == "firing":
                fired.setdefault(x.alertname, t)
    series = {var: len(times) for (key, var), (times, _, _) in engine._series.items()}
    assert series["cpu_utilization_ratio"] <= 16 * 60 + 2  # 15 min and a minute more, not the hour
    assert 3600 <= series["celsius"] <= 61 * 60 + 2
    assert fired["Idle"] == 5000 + 15 * 60  # its whole 15-minute window idle: the first point it could
    assert "Rising" not in fired  # 18 °C an hour: the hour-long window saw all of it, never 30
