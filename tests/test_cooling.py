"""Cooling held against its own past, on multi-day recordings (a tick every 10 minutes, days of
training and nights idle): a GPU whose heatsink clogs fires GpuCoolingDrift on that GPU alone,
once its drift has passed the threshold and not before; a GPU moved to a higher power, a room
that warms and the H200 recording stay quiet; a restart keeps the baselines and a reset starts
them again; ``rigmon baseline`` and ``rigmon rules test --replay`` as a user runs them."""

import json
import os
import subprocess
import sys
import time

import pytest
import scenarios as sc

from rigmon.alerts.engine import AlertEngine
from rigmon.config import schema as configmod
from rigmon.model.sample import FanControl, FanReading, HostReading, Sample
from rigmon.pipeline import Inputs, Outputs, Pipeline, opened
from rigmon.readers.cooling import Detector
from rigmon.readers.replay import ReplayClock, ReplaySource
from rigmon.sinks.alerts import build_engine

DAY = sc.DAY
WEEKS = 14
THRESHOLD = 6.0  # GpuCoolingDrift's min_celsius
BASE_R = 0.1  # °C a watt over the room: 30 °C at 300 W


def clogging(gpu, t):
    """GPU 0's heatsink clogs: its thermal resistance rises 30 % over the week from day 4."""
    if gpu != 0:
        return BASE_R
    return BASE_R * (1 + 0.3 * min(1.0, max(0.0, (t / DAY - 4) / 7)))


def true_drift(t, watts=300.0):
    return (clogging(0, t) - BASE_R) * watts


def rigmon_cli(*args, timeout=120, columns=None):
    env = {**os.environ, "COLUMNS": str(columns)} if columns else None
    return subprocess.run(
        [sys.executable, "-m", "rigmon", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def samples(recording, config=None):
    """Every tick of ``recording`` as the daemon's poller reads it, at the recording's times,
    without the cooling stage (the tests run their own detectors on them)."""
    config = config or configmod.parse({"cooling": {"enabled": False}, "alerts": {"enabled": False}}, "test")
    source = ReplaySource(recording, ReplayClock(realtime=False), loop=False)
    t0 = recording.ticks[0]["t"]
    inputs = Inputs(source=source, wall=lambda: t0 + source.clock(), event_thread=False)
    out = []
    with opened(Pipeline.from_config(config, Outputs(rules=False), inputs=inputs)) as p:
        for offset in recording.offsets():
            out.append(p.step(at=offset).sample)
    return out


def cooling_alerts(polled, detector, engine=None):
    """The cooling alerts' transitions, with the detector and the rules as the daemon runs them."""
    engine = engine or build_engine(configmod.parse({}, "test").alerts)
    found = []
    for s in polled:
        s = detector.annotate(s)
        found += [(tr.time, tr.status, tr.alertname, tr.labels.get("gpu")) for tr in engine.evaluate(s, s.time)]
    return [f for f in found if f[2].startswith("GpuCoolingDrift")], s


@pytest.fixture(scope="module")
def clogged():
    recording = sc.cooling_days(WEEKS, gpus=4, resistance=clogging)
    return recording, samples(recording)


def test_a_clogging_heatsink_fires_on_its_gpu_alone_once_its_drift_passes_the_threshold(clogged, tmp_path):
    recording, polled = clogged
    t0 = recording.ticks[0]["t"]
    found, last = cooling_alerts(polled, Detector(None))
    assert [(status, name, gpu) for _, status, name, gpu in found] == [("firing", "GpuCoolingDrift", "0")], found
    fired = found[0][0] - t0
    # NVML reports whole degrees: the drift seen may lead the true one by half a degree
    assert true_drift(fired) >= THRESHOLD - 0.5, (fired / DAY, true_drift(fired))
    crossed = next(t for t in range(0, WEEKS * 86400, 600) if true_drift(t) >= THRESHOLD)
    assert fired - crossed <= DAY, (fired / DAY, crossed / DAY)  # within the day its window of steady load spans
    g0, g1 = last.gpus[0], last.gpus[1]
    assert g0.cooling_state == "comparing" and 8 <= g0.cooling_drift_celsius <= 10, g0.cooling_drift_celsius
    assert abs(g1.cooling_drift_celsius) <= 1 and last.cooling.shared is not None and last.cooling.shared <= 1
    assert 290 <= g0.cooling_at_watts <= 310

    # rigmon rules test --replay: the same, offline, at the speed of the file
    path = sc.write(recording, tmp_path / "clogged.rec.jsonl")
    started = time.monotonic()
    done = rigmon_cli("rules", "test", "--replay", str(path), timeout=300)
    took = time.monotonic() - started
    assert done.returncode in (0, 1), done.stderr
    drift = [line.split() for line in done.stdout.splitlines() if "GpuCoolingDrift" in line]
    assert len(drift) == 1 and "FIRING" in drift[0] and "GPU 0" in " ".join(drift[0]), done.stdout
    print(f"rules test --replay over {WEEKS} days of 4 GPUs ({len(recording.ticks)} ticks): {took:.1f} s")


def test_a_gpu_moved_to_a_higher_power_with_its_cooling_unchanged_raises_nothing():
    """The new power is learned on first sight: it compares again, with nothing to say."""
    moved = sc.cooling_days(WEEKS, power=lambda gpu, t: 250.0 if t < 5 * DAY else 340.0)
    found, last = cooling_alerts(samples(moved), Detector(None))
    assert found == []
    assert {g.cooling_state for g in last.gpus} == {"comparing"}
    assert all(abs(g.cooling_drift_celsius) <= 1 and g.cooling_blind_seconds == 0 for g in last.gpus)
    assert 330 <= last.gpus[0].cooling_at_watts <= 350


def test_a_room_that_warms_gets_no_alert_per_gpu():
    warming = lambda t: 22.0 + 8.0 * min(1.0, max(0.0, (t / DAY - 5) / 2))  # noqa: E731
    # the room read from the GPUs idle each night: the rise is the room's, nothing to say
    found, last = cooling_alerts(samples(sc.cooling_days(WEEKS, gpus=4, room=warming)), Detector(None))
    assert found == [] and last.cooling.reference == "idle"
    assert all(abs(g.cooling_drift_celsius) <= 1 for g in last.gpus)
    # GPUs that never idle, in a box with no inlet sensor: every GPU drifts alike, one alert for the box
    always = sc.cooling_days(WEEKS, gpus=4, room=warming, training=lambda t: True)
    found, last = cooling_alerts(samples(always), Detector(None))
    assert last.cooling.reference == "none"
    assert [(status, name, gpu) for _, status, name, gpu in found] == [("firing", "GpuCoolingDriftShared", None)]
    assert all(abs(g.cooling_drift_own_celsius) <= 1 for g in last.gpus) and last.cooling.shared >= 7


def test_the_h200_recording_stays_quiet():
    found, last = cooling_alerts(samples(sc.h200()), Detector(None))
    assert found == [] and last.gpus[0].cooling_state == "learning" and last.gpus[0].cooling_learning_seconds > 0


def test_a_restart_keeps_the_baselines_and_a_reset_starts_learning(clogged, tmp_path):
    recording, polled = clogged
    state = tmp_path / "state"
    conf = tmp_path / "rigmon.toml"
    conf.write_text(f'[daemon]\nstate_dir = "{state}"\n')
    path = state / "cooling.json"
    engine = build_engine(configmod.parse({}, "test").alerts)
    half = len(polled) // 2  # day 7: the baselines learned, the drift not yet past the threshold
    before, _ = cooling_alerts(polled[:half], Detector(path), engine)
    first = Detector(path)
    assert first.tracks["gpus"] and all(t.learned for t in first.tracks["gpus"].values())
    look = Detector(path, keep=False)  # under load from its first poll: the room is the idle temperature kept
    assert look.annotate(polled[half + 50]) and look._room == 22 + round(BASE_R * 40), look._room
    # a second daemon goes on from the file (the rules' state too, as Alertmanager would)
    after, last = cooling_alerts(polled[half:], Detector(path), engine)
    uninterrupted, _ = cooling_alerts(polled, Detector(None))
    assert before == [] and after == uninterrupted, (after, uninterrupted)

    # rigmon baseline show: each GPU's baseline and its drift
    shown = rigmon_cli("baseline", "show", "-c", str(conf))
    assert shown.returncode == 0, shown.stderr
    assert "GPU 0" in shown.stdout and "comparing" in shown.stdout and "°C over the room" in shown.stdout
    rows = json.loads(rigmon_cli("baseline", "show", "--json", "-c", str(conf)).stdout)["subjects"]
    by_gpu = {r["gpu"]: r for r in rows if r["kind"] == "GPU"}
    assert sorted(by_gpu) == [0, 1, 2, 3] and by_gpu[0]["drift"] > THRESHOLD and abs(by_gpu[1]["drift"]) < 1

    # a repaste: rigmon baseline reset --gpu 0, and the daemon takes the file's word at its next save
    running = Detector(path)
    done = rigmon_cli("baseline", "reset", "--gpu", "0", "-c", str(conf))
    assert done.returncode == 0 and "GPU 0's baseline forgotten" in done.stdout, done.stderr
    s = polled[-1]
    s = running.annotate(s._replace(time=s.time + 700))
    assert s.gpus[0].cooling_state == "learning" and s.gpus[1].cooling_state == "comparing"
    running.close()
    assert json.loads(path.read_text())["gpus"].get(s.gpus[1].uuid) is not None

    # bad input: one line (as wide as the terminal lets it be), exit 2
    for args, says in (
        (("reset", "--gpu", "7"), "no baseline for GPU 7"),
        (("reset", "--gpu", "x"), "not a whole number"),
        (("show", "-c", str(tmp_path / "none.toml")), "none.toml"),
    ):
        done = rigmon_cli("baseline", *args, *(() if "-c" in args else ("-c", str(conf))), columns=400)
        assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done
    empty = tmp_path / "empty.toml"
    empty.write_text(f'[daemon]\nstate_dir = "{tmp_path / "nothing"}"\n')
    done = rigmon_cli("baseline", "show", "-c", str(empty), columns=400)
    assert done.returncode == 2 and "no cooling baseline" in done.stderr and len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "damage",
    [
        "not json",
        '{"format": 2, "gpus": {}, "cpus": {}, "fans": {}}',
        '{"format": 1, "gpus": {"GPU-x": {"first": NaN, "learned": true, "bands": [], "recent": []}}, '
        '"cpus": {}, "fans": {}}',
        '{"format": 1, "gpus": {"GPU-x": {"first": 0, "learned": true, "bands": [[12, -5, 1, 0, 0]], '
        '"recent": []}}, "cpus": {}, "fans": {}}',
        '{"format": 1, "gpus": {"GPU-x": {"first": 0, "learned": "yes", "bands": [], "recent": []}}, '
        '"cpus": {}, "fans": {}}',
        '{"format": 1, "gpus": {"GPU-x": {"first": 0, "learned": true, "bands": [[12, 3600, 1e300, 0, 0]], '
        '"recent": []}}, "cpus": {}, "fans": {}}',
    ],
)
def test_a_damaged_file_holds_nothing_bad(tmp_path, damage):
    path = tmp_path / "cooling.json"
    path.write_text(damage)
    detector = Detector(path)
    assert detector.tracks["gpus"] == {}
    s = detector.annotate(samples(sc.h200())[0])
    assert s.gpus[0].cooling_state == "learning"


def test_a_fan_that_turns_slower_at_the_same_duty_drifts(tmp_path):
    """A chassis fan whose bearing wears: the same PWM duty, fewer rpm each week; rigmon baseline
    show says it as the daemon does, a share of its baseline's rpm."""
    detector = Detector(tmp_path / "state" / "cooling.json", learn=DAY, window=6 * 3600)
    s = None
    for k in range(int(4 * DAY / 600)):
        t = 1.8e9 + k * 600
        rpm = 1200.0 * (1 - 0.1 * max(0.0, (k * 600 / DAY - 1.5) / 2.5))  # 10 % slower by day 4
        host = HostReading(
            fans=(FanReading("nct6798", "fan2", rpm, True, "nct6775.656"),),
            fan_controls=(FanControl("nct6798", "nct6775.656", "fan2", 0.6, 2, None, None),),
            cpu_utilization_ratio=0.0,
        )
        s = detector.annotate(Sample(t, host, (), (), None))
    (fan,) = s.host.fans
    assert -0.11 <= fan.rpm_drift <= -0.06, fan.rpm_drift
    assert s.cooling.fans["nct6798/nct6775.656/fan2"].state == "comparing"
    detector.close()
    conf = tmp_path / "rigmon.toml"
    conf.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n[cooling]\nlearn = "1d"\n')
    shown = json.loads(rigmon_cli("baseline", "show", "--json", "-c", str(conf)).stdout)["subjects"]
    (row,) = [r for r in shown if r["kind"] == "fan"]
    assert row["drift"] == round(fan.rpm_drift, 3) and row["bands"][0]["value"] == 1200.0, row


def test_without_a_baseline_the_rule_neither_fires_nor_resolves_and_each_input_may_be_missing():
    """GpuCoolingDrift over its one input: unknown (learning, no comparison) says nothing; it fires
    at the threshold held for 10 minutes and resolves 2 °C under it."""
    engine = AlertEngine(
        [r for r in build_engine(configmod.parse({}, "test").alerts).rules if r.spec.name == "GpuCoolingDrift"], []
    )
    base = samples(sc.h200())[0]
    seen = []
    for minute, own in enumerate([None] * 3 + [7.0] * 12 + [None] * 3 + [5.0] * 3 + [3.0] * 3):
        g = base.gpus[0]._replace(cooling_drift_own_celsius=own, cooling_drift_celsius=own, cooling_at_watts=300.0)
        t = base.time + minute * 60
        seen += [(minute, tr.status) for tr in engine.evaluate(base._replace(time=t, gpus=(g,)), t)]
    assert seen == [(13, "firing"), (21, "resolved")], seen


def test_cpu_cooling_drift_reads_the_fan_curve_and_its_temperature_and_each_may_be_missing():
    """CpuCoolingDrift (info) over its two inputs: unknown while it learns says nothing; the
    board's curve 30 points over its baseline fires after 30 minutes, with the temperature where
    it was; a box with no header on a curve (no fan drift) fires on 9 °C alone; each resolves
    under its threshold less its margin."""
    from rigmon.model.sample import CpuTemperature

    engine = AlertEngine(
        [r for r in build_engine(configmod.parse({}, "test").alerts).rules if r.spec.name == "CpuCoolingDrift"], []
    )
    base = samples(sc.h200())[0]
    cpu = CpuTemperature(0, "coretemp", "Package id 0", 62.0)
    steps = [(None, None)] * 3 + [(0.0, 0.3)] * 35 + [(0.0, 0.1)] * 3 + [(9.0, None)] * 35 + [(5.0, None)] * 3
    seen = []
    for minute, (drift, fan) in enumerate(steps):
        host = base.host._replace(cpu_temperatures=(cpu._replace(drift_celsius=drift, fan_drift_ratio=fan),))
        t = base.time + minute * 60
        seen += [(minute, tr.status, tr.summary) for tr in engine.evaluate(base._replace(time=t, host=host), t)]
    assert [(m, status) for m, status, _ in seen] == [
        (33, "firing"),
        (38, "resolved"),
        (71, "firing"),
        (76, "resolved"),
    ]
    assert (
        "+0 °C, the fan curve +30 points" in seen[0][2] and "+9 °C, the fan curve not read (no header" in seen[2][2]
    ), seen


def test_a_cpu_whose_fan_curve_climbs_fires_and_status_says_by_how_much(tmp_path):
    """The board's curve drives the CPU's two headers 30 points harder from 1.5 h on, at the
    temperature of its baseline (learned in an hour): ``rules test --replay`` fires
    CpuCoolingDrift on it, and ``status --replay --at`` shows the curve's drift beside the
    temperature's."""
    path = sc.write(sc.cpu_cooler(climb=0.3), tmp_path / "cpu.rec.jsonl")
    conf = tmp_path / "rigmon.toml"
    conf.write_text(f'[cooling]\nlearn = "1h"\nwindow = "10m"\n[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    done = rigmon_cli("rules", "test", "-c", str(conf), "--replay", str(path), "--all", columns=400)
    fired = [line for line in done.stdout.splitlines() if "CpuCoolingDrift" in line]
    assert len(fired) == 1 and "FIRING" in fired[0] and "+0 °C, the fan curve +30 points" in fired[0], done.stdout
    shown = rigmon_cli("status", "-c", str(conf), "--replay", str(path), "--at", "10000", columns=100).stdout
    assert "CPU 0  +0.0 °C at 80 % busy, fan curve +30 points" in shown, shown


def test_the_daemon_keeps_its_baselines_a_one_shot_only_reads_them_and_a_replay_never_touches_them(clogged, tmp_path):
    """The box's own pipeline (the hardware's calls, here answered by stand-ins) learns into
    <state_dir>/cooling.json and saves it at close; ``rigmon status`` and ``doctor`` (Outputs
    without ``baselines``) read it and write nothing; a replay neither reads nor writes it."""
    from rigmon.readers.replay import ReplayHost, replay_backend

    recording, _ = clogged
    state = tmp_path / "state"
    config = configmod.parse({"daemon": {"state_dir": str(state)}, "alerts": {"enabled": False}}, "test")
    path = state / "cooling.json"

    def box(outputs, until):
        source = ReplaySource(recording, ReplayClock(realtime=False), loop=False)
        t0 = recording.ticks[0]["t"]
        inputs = Inputs(
            nvml=replay_backend(source),
            host_backend=ReplayHost(source),
            wall=lambda: t0 + source.clock(),
            event_thread=False,
        )
        with opened(Pipeline.from_config(config, outputs, inputs=inputs)) as p:
            for offset in recording.offsets():
                if offset > until:
                    break
                source.clock.set(offset)
                last = p.step()
        return last.sample

    box(Outputs(jobs=False, influxdb=False, prometheus=False, baselines=True), 4 * DAY)
    kept = path.read_bytes()
    assert {len(t["bands"]) for t in json.loads(kept)["gpus"].values()} == {1}  # its 300 W band, learned
    shown = box(Outputs(rules=False), 600)  # a one-shot look: the file's baselines, not learning afresh
    assert shown.gpus[0].cooling_state in ("measuring", "comparing") and path.read_bytes() == kept
    with sc.Replayed(sc.h200(), {"daemon": {"state_dir": str(state)}}) as replayed:
        assert replayed.poll().gpus[0].cooling_state == "learning"  # the box's file is not the replay's
    assert path.read_bytes() == kept


def burnin_hour(hotter_gpu1=0.0):
    """What a burn-in watches: 15 minutes idle (the room), then an hour at 300 W, a tick a minute."""

    def modify(t, tick):
        for k, g in enumerate(tick["gpus"]):
            watts = 300.0 if t >= 900 else 40.0
            g["nvmlDeviceGetPowerUsage"] = int(watts * 1000)
            g["nvmlDeviceGetUtilizationRates"] = {"gpu": 100 if t >= 900 else 0, "memory": 30}
            g["nvmlDeviceGetTemperature:0"] = int(round(22 + 0.1 * watts + (hotter_gpu1 if k == 1 else 0)))

    return sc.timeline(75 * 60, 60, gpus=2, modify=modify)


def test_a_passing_burn_in_gives_its_baseline_to_the_gpus_that_have_none(tmp_path):
    """rigmon burnin's read-only detector, after a pass (burnin/run.py's _seed_cooling): each
    GPU without a learned baseline takes the steady hour it saw; one with its own keeps it."""
    path = tmp_path / "cooling.json"
    watched = Detector(path, keep=False)
    for s in samples(burnin_hour()):
        watched.annotate(s)
    assert not path.exists()  # read-only while it watches
    assert watched.seed() == ([0, 1], [0, 1])
    kept = json.loads(path.read_text())
    assert kept["reference"] == "idle" and all(t["learned"] for t in kept["gpus"].values())
    assert {tuple(b[0] for b in t["bands"]) for t in kept["gpus"].values()} == {(12,)}  # 300 W
    daemon = Detector(path)
    s = daemon.annotate(samples(burnin_hour())[-1])
    assert [g.cooling_state for g in s.gpus] == ["measuring", "measuring"]  # compares from its next window
    daemon.close()
    before = json.loads(path.read_text())["gpus"]
    # a second burn-in, GPU 1 running hotter: both GPUs have a baseline now, neither is replaced
    again = Detector(path, keep=False)
    for s in samples(burnin_hour(hotter_gpu1=5)):
        again.annotate(s)
    assert again.seed() == ([], [0, 1]) and json.loads(path.read_text())["gpus"] == before
    assert Detector(None).seed() == ([], [])  # a replay's: never the box's


def test_a_baseline_learned_hotter_than_the_burn_in_is_flagged(tmp_path):
    """A card burnt in healthy, then its baseline reset (a move, a new box) while a fault has
    set in: it learns that fault as its baseline, so its drift stays 0; with no sibling to hold
    it against, the burn-in kept in the file is what shows it 10 °C hotter (GpuCoolingBaselineHot,
    info). A card that learns as it burnt in says nothing."""
    state = tmp_path / "state"
    conf = tmp_path / "rigmon.toml"
    conf.write_text(f'[daemon]\nstate_dir = "{state}"\n')
    path = state / "cooling.json"
    watched = Detector(path, keep=False)
    for s in samples(burnin_hour()):
        watched.annotate(s)
    assert watched.seed() == ([0, 1], [0, 1])
    done = rigmon_cli("baseline", "reset", "-c", str(conf))
    assert done.returncode == 0, done.stderr
    assert json.loads(path.read_text())["gpus"] == {} and len(json.loads(path.read_text())["burnin"]) == 2
    shown = rigmon_cli("baseline", "show", "-c", str(conf), columns=200).stdout
    assert shown.count(": burn-in; seen 300 W: 26.0 °C over the room") == 2, shown  # 52 °C at 300 W, 26 idle
    for extra, fires in ((10.0, True), (0.0, False)):
        daemon = Detector(path)
        assert daemon.tracks["gpus"] == {} and len(daemon.burnin) == 2
        rec = sc.cooling_days(5, gpus=1, resistance=lambda k, t, extra=extra: BASE_R + extra / 300)
        engine = build_engine(configmod.parse({}, "test").alerts)
        seen = []
        for s in samples(rec):
            s = daemon.annotate(s)
            seen += [(tr.status, tr.alertname) for tr in engine.evaluate(s, s.time) if "Cooling" in tr.alertname]
        g = s.gpus[0]
        assert g.cooling_state == "comparing" and abs(g.cooling_drift_celsius) <= 1, g
        assert abs(g.cooling_baseline_excess_celsius - extra) <= 1, g.cooling_baseline_excess_celsius
        assert seen == ([("firing", "GpuCoolingBaselineHot")] if fires else []), seen
        daemon.close()
        assert len(json.loads(path.read_text())["burnin"]) == 2  # the daemon's saves keep the burn-in
        path.write_text(json.dumps({**json.loads(path.read_text()), "gpus": {}}))


# --- training loads as they are: checkpoints, new power levels, faults that start early, fans ---
def fired(recording, tmp_path, name):
    """``rigmon rules test --replay`` over the recording, as a user runs it: each cooling alert it
    reports, as (day, status, alertname, summary)."""
    path = sc.write(recording, tmp_path / f"{name}.rec.jsonl")
    done = rigmon_cli("rules", "test", "--replay", str(path), "--all", timeout=300, columns=400)
    assert done.returncode in (0, 1), done.stderr
    out = []
    for line in done.stdout.splitlines():
        words = line.split()
        if len(words) > 5 and words[1] == "s" and words[5].startswith("GpuCooling"):
            out.append((float(words[0]) / DAY, words[3], words[5], " ".join(words[6:])))
    return out


def rising(start, days, gpu=0):
    """GPU ``gpu``'s thermal resistance rises 30 % over ``days`` from day ``start``, then holds."""
    return lambda k, t: BASE_R * (1 + (0.3 * min(1.0, max(0.0, (t / DAY - start) / days)) if k == gpu else 0))


def checkpoints(every_minutes):
    """300 W, but for one minute at 100 W every ``every_minutes``: a checkpoint's save."""
    return lambda k, t: 100.0 if every_minutes and (t // 60) % every_minutes == 0 else 300.0


def test_a_run_that_checkpoints_learns_and_fires_within_two_days_of_a_steady_one(tmp_path):
    """12 days, a tick a minute, the 30 % rise from day 4 to day 8: with a minute at 100 W every
    5, 8 or 15 minutes the baseline is learned and the rise fires on GPU 0 alone, within 2 days
    of the same run without checkpoints."""
    found = {}
    for every in (0, 5, 8, 15):
        rec = sc.cooling_days(12, gpus=2, step=60, resistance=rising(4, 4), power=checkpoints(every))
        found[every] = [f for f in fired(rec, tmp_path, f"every-{every}") if f[2] == "GpuCoolingDrift"]
        assert [(status, name) for _, status, name, _ in found[every]] == [("FIRING", "GpuCoolingDrift")], found
        assert "[gpu=0]" in found[every][0][3]
    control = found[0][0][0]
    crossed = 4 + 4 * THRESHOLD / (0.3 * BASE_R * 300)  # the day the true drift reaches 6 °C
    assert crossed - 0.1 <= control <= crossed + 1, (control, crossed)
    for every in (5, 8, 15):
        assert found[every][0][0] - control <= 2, (every, found[every][0][0], control)
    print({every: round(f[0][0], 2) for every, f in found.items()}, f"control crossed on day {crossed:.2f}")


def test_a_job_moved_to_a_power_never_seen_learns_it_and_fires_on_a_later_rise(tmp_path):
    """Learned at 300 W; on day 3.5 the job moves to 420 W, which the baseline never saw; the
    30 % rise from day 5 fires on GPU 0, and the move alone says nothing."""
    power = lambda k, t: 300.0 if t < 3.5 * DAY else 420.0  # noqa: E731
    rec = sc.cooling_days(12, gpus=2, resistance=rising(5, 3), power=power, limit_watts=450)
    got = fired(rec, tmp_path, "moved")
    assert [(status, name) for _, status, name, _ in got] == [("FIRING", "GpuCoolingDrift")], got
    assert "[gpu=0]" in got[0][3] and 5 < got[0][0] < 9, got
    quiet = sc.cooling_days(12, gpus=2, power=power, limit_watts=450)
    assert [f for f in fired(quiet, tmp_path, "moved-quiet") if f[1] == "FIRING"] == []


def test_a_fault_that_grows_while_the_baseline_learns_fires_by_day_4_with_its_drift(tmp_path):
    """12 days, the 30 % rise spread over the first 3 (the learning): the baseline is its coolest
    third, so the drift shown is most of the 9 °C the GPU has gained, and it fires by day 4, in
    ``rules test --replay`` as in the daemon's detector."""
    rec = sc.cooling_days(12, gpus=4, resistance=rising(0, 3))
    got = fired(rec, tmp_path, "learning")
    assert [(status, name) for _, status, name, _ in got] == [("FIRING", "GpuCoolingDrift")], got
    day, _, _, summary = got[0]
    assert "[gpu=0]" in summary and day <= 4, got
    said = float(summary.split("baseline: ", 1)[1].split(" °C", 1)[0])
    assert said >= 0.75 * 9, summary  # a baseline learned over all 3 days would say half
    found, last = cooling_alerts(samples(rec), Detector(None))
    firing = [(t, gpu) for t, status, name, gpu in found if status == "firing" and name == "GpuCoolingDrift"]
    t0 = rec.ticks[0]["t"]
    assert [gpu for _, gpu in firing] == ["0"] and (firing[0][0] - t0) / DAY <= 4, found
    drift = last.gpus[0].cooling_drift_own_celsius
    assert 0.75 * 9 <= drift <= 9.5, drift  # a baseline learned over all 3 days would show half
    assert all(abs(g.cooling_drift_celsius) <= 1 for g in last.gpus[1:])


def with_fans(recording, duty):
    """Each GPU's two fans asked for ``duty(gpu, t)`` (a ratio) and reporting it."""
    rec = sc.gpu_fans(recording, percent=50)
    t0 = rec.ticks[0]["t"]
    for tick in rec.ticks:
        for k, g in enumerate(tick["gpus"]):
            percent = round(100 * duty(k, tick["t"] - t0))
            for fan in (0, 1):
                g[f"nvmlDeviceGetFanSpeed_v2:{fan}"] = g[f"nvmlDeviceGetTargetFanSpeed:{fan}"] = percent
    return rec


def test_a_fan_curve_that_holds_the_temperature_by_turning_faster_fires(tmp_path):
    """GPU 0's fans climb from 50 to 95 % over days 4 to 10 at the same power and temperature:
    the fan's drift fires GpuCoolingDrift (its threshold 25 points); fans that all climb alike
    (the room) and fans that hold say nothing on their own GPU."""
    climbing = lambda k, t: 0.5 + (0.45 * min(1.0, max(0.0, (t / DAY - 4) / 6)) if k == 0 else 0)  # noqa: E731
    rec = with_fans(sc.cooling_days(12, gpus=3), climbing)
    got = fired(rec, tmp_path, "fans")
    assert [(status, name) for _, status, name, _ in got] == [("FIRING", "GpuCoolingDrift")], got
    crossed = 4 + 6 * 0.25 / 0.45
    assert "[gpu=0]" in got[0][3] and crossed - 0.1 <= got[0][0] <= crossed + 1, (got, crossed)
    assert "its fans +" in got[0][3], got
    alike = with_fans(sc.cooling_days(12, gpus=3), lambda k, t: 0.5 + 0.3 * min(1.0, max(0.0, (t / DAY - 4) / 6)))
    assert [f for f in fired(alike, tmp_path, "fans-alike") if f[1] == "FIRING"] == []


def test_a_baseline_that_compares_nothing_for_a_day_says_so_and_a_hot_one_is_flagged():
    """After its baseline, a load that never holds steady (300 and 200 W in turn every 10
    minutes) compares nothing: ``cooling_blind_seconds`` climbs and GpuCoolingBlind (info) fires
    after a day, and resolves once the load is steady again. A GPU that learned 10 °C hotter
    than its three siblings at the same power is flagged (GpuCoolingBaselineHot, info), and
    does not page."""
    bursty = lambda k, t: 200.0 if 4 * DAY <= t < 6 * DAY and (t // 600) % 2 else 300.0  # noqa: E731
    hot = lambda k, t: BASE_R + (10 / 300 if k == 1 else 0)  # noqa: E731
    rec = sc.cooling_days(8, gpus=4, power=bursty, resistance=hot)
    engine = build_engine(configmod.parse({}, "test").alerts)
    t0 = rec.ticks[0]["t"]
    seen, blind = [], 0.0
    detector = Detector(None)
    for s in samples(rec):
        s = detector.annotate(s)
        blind = max(blind, s.gpus[0].cooling_blind_seconds or 0.0)
        seen += [
            (round((tr.time - t0) / DAY, 1), tr.status, tr.alertname, tr.labels.get("gpu"))
            for tr in engine.evaluate(s, s.time)
            if tr.alertname.startswith("GpuCooling")
        ]
    names = [(status, name, gpu) for _, status, name, gpu in seen]
    assert ("firing", "GpuCoolingBaselineHot", "1") in names and not any(n[1] == "GpuCoolingDrift" for n in names)
    blind_alerts = [(day, status) for day, status, name, gpu in seen if name == "GpuCoolingBlind" and gpu == "0"]
    assert [status for _, status in blind_alerts] == ["firing", "resolved"], seen
    assert 5 <= blind_alerts[0][0] <= 6 and blind_alerts[1][0] <= 7, blind_alerts
    assert blind >= DAY and s.gpus[0].cooling_blind_seconds == 0 and s.gpus[0].cooling_state == "comparing"
    assert 9 <= s.gpus[1].cooling_baseline_excess_celsius <= 11 and abs(s.gpus[0].cooling_baseline_excess_celsius) <= 1


def test_status_and_baseline_show_of_a_replay_agree_with_its_rules(clogged, tmp_path):
    """The two-week clogging recording at day 12: ``rules test`` fired GpuCoolingDrift on GPU 0;
    ``status --replay --at`` shows it firing and GPU 0's cooling drifted beside it (not "learning"),
    and ``baseline show --replay --at`` the same drift, learned from the same recording."""
    recording, _ = clogged
    path = sc.write(recording, tmp_path / "clogged.rec.jsonl")
    at = str(12 * DAY)
    fired = rigmon_cli("rules", "test", "--replay", str(path), timeout=300, columns=200).stdout
    assert "FIRING   warning  GpuCoolingDrift [gpu=0]" in fired, fired
    status = rigmon_cli("status", "--replay", str(path), "--at", at, timeout=300, columns=200).stdout
    cooling = status[status.index("COOLING") : status.index("ALERTS")]
    assert "GpuCoolingDrift [gpu=0]" in status[status.index("ALERTS") :], status
    assert "learning" not in cooling and "GPU 0  +" in cooling, cooling
    drift = float(cooling.split("GPU 0  ", 1)[1].split(" °C", 1)[0])
    assert drift >= THRESHOLD, cooling
    shown = rigmon_cli("baseline", "show", "--replay", str(path), "--at", at, "--json", timeout=300).stdout
    (gpu0,) = [r for r in json.loads(shown)["subjects"] if r["kind"] == "GPU" and r["gpu"] == 0]
    assert gpu0["state"] == "comparing" and abs(gpu0["drift"] - drift) <= 0.05, (gpu0, drift)
