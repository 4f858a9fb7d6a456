"""A recording made by rigmon replays to the same readings (round trip)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import scenarios as sc

from rigmon.config.schema import Config
from rigmon.model.recording import Recording, RecordingError
from rigmon.poller import build_poller
from rigmon.readers.record import Recorder
from rigmon.readers.replay import ReplayHost, replay_backend


def _readings(sample):
    """The readings without wall-clock times, which differ between runs by design."""
    return sample.gpus, sample.host, sample.gpu_info


def test_record_then_replay_gives_the_same_samples(tmp_path):
    # The "hardware" is the H200 recording with host sensors and an XID added, wrapped by the recorder.
    original = sc.with_xid(
        sc.with_host(
            sc.h200().widened(2),
            sensors_temperatures=sc.CORETEMP_TWO_PACKAGES,
            sensors_fans=sc.FAN_STOPPED,
            cpu_percent=12.5,
        ),
        at_second=11,
        xid=48,
    )
    hardware = sc.source(original, at=8.0)
    recorder = Recorder("test")
    config = Config()
    poller = build_poller(
        config, nvml=recorder.nvml(replay_backend(hardware)), host_backend=recorder.host(ReplayHost(hardware))
    )
    poller.open()
    out = tmp_path / "rec.jsonl"
    positions = [8.0 + 0.5 * i for i in range(12)]
    originals = []
    with open(out, "w") as f:
        recorder.write_header(f)
        for i, at in enumerate(positions):
            hardware.clock.set(at)
            if i == 7:  # give the event thread time to see the XID tick
                import time

                time.sleep(0.3)
            recorder.begin_tick(1000.0 + at)
            originals.append(poller.poll())
            f.write(json.dumps(recorder.end_tick()) + "\n")
    poller.close()
    assert sum(len(s.events) for s in originals) == 1

    recording = Recording.load(out)
    assert recording.gpu_count == 2 and len(recording.ticks) == len(positions)
    replay = sc.source(recording, at=0.0)
    poller = build_poller(config, replay)
    poller.open()
    replayed = []
    for i, at in enumerate(positions):
        replay.clock.set(at - 8.0)
        if i == 7:
            import time

            time.sleep(0.3)
        replayed.append(poller.poll())
    poller.close()
    for a, b in zip(originals, replayed, strict=True):
        assert _readings(a) == _readings(b)
        assert [(e.gpu_index, e.xid) for e in a.events] == [(e.gpu_index, e.xid) for e in b.events]
    assert replayed[0].gpus[0].power_watts == pytest.approx(84.3, abs=1)
    assert replayed[-1].gpus[1].power_watts > 600


def test_record_command_round_trip(tmp_path):
    out = tmp_path / "cli.rec.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rigmon",
            "record",
            "--demo",
            "--out",
            str(out),
            "--seconds",
            "1.2",
            "--interval",
            "0.3",
            "--label",
            "cli",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"recording 1 GPU(s) every 0.3 s for 1.2 s to {out}")  # said at once, not at the end
    assert "recorded" in done.stderr
    recording = Recording.load(out)
    assert recording.header["format"] == "rigmon-recording" and recording.header["version"] == 1
    assert len(recording.ticks) >= 3 and all(t["label"] == "cli" for t in recording.ticks)
    assert recording.header["gpus"][0]["nvmlDeviceGetUUID"] == "GPU-051bc521-f352-6ece-a775-fbe39f974666"
    shown = subprocess.run(
        [sys.executable, "-m", "rigmon", "status", "--replay", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    gpu = json.loads(shown.stdout)["gpus"][0]
    assert gpu["power_watts"] == pytest.approx(84.3, abs=2) and gpu["clock_events_active"] == ["gpu_idle"]


def test_a_recording_names_its_box_and_a_page_replaying_it_shows_that_name(tmp_path):
    """`rigmon record` writes the box's name in the header; re-recording a replay keeps the replayed
    box's; a page replaying a file shows the recorded name, or the file's, never this machine's."""
    from rigmon.config.schema import parse
    from rigmon.http.page import Page

    named = sc.h200()
    named.header["hostname"] = "rig\x1b07"
    source = sc.write(named, tmp_path / "named.rec.jsonl")
    out = tmp_path / "again.rec.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "record", "--replay", str(source), "--out", str(out), "--seconds", "0.5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert Recording.load(source).hostname == "rig\\x1b07"  # printable where shown
    assert Recording.load(out).header["hostname"] == "rig\\x1b07"
    for path, shown in ((out, "rig\\x1b07"), (sc.write(sc.h200(), tmp_path / "lab-3.rec.jsonl"), "replay of lab-3")):
        config = parse({"daemon": {"state_dir": str(tmp_path / "state")}}, "test")
        with sc.Replayed(Recording.load(path), config) as r:
            r.poll(1)
            assert Page(r.pipeline, r.pipeline.history, config.jobs).state_dict()["host"] == shown


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "empty file"),
        ("not json\n", "line 1: not JSON"),
        ('{"format": "other", "version": 1}\n', "format is 'other'"),
        ('{"format": "rigmon-recording", "version": 9}\n', "version 9"),
        ('{"format": "rigmon-recording", "version": 1, "gpus": [{}]}\n{"t": 1, "gpus": []}\n', "line 2: 0 GPU entries"),
    ],
)
def test_bad_recordings_are_named(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(RecordingError, match=message):
        Recording.load(path)
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "status", "--replay", str(path)], capture_output=True, text=True, timeout=60
    )
    if content:
        assert done.returncode == 2 and message.split("'")[0] in done.stderr and "Traceback" not in done.stderr


def _carried_naively(recording: Recording) -> list[list[dict]]:
    """Every tick's answers with the last answer of each call carried forward: the definition."""
    out, last = [], []
    for tick in recording.ticks:
        gpus = tick.get("gpus", [])
        last = [
            {**(last[i] if i < len(last) else {}), **{k: v for k, v in g.items() if k != "nvmlEventSetWait_v2"}}
            for i, g in enumerate(gpus)
        ]
        out.append([dict(g) for g in last])
    return out


@pytest.mark.parametrize("lazy", [False, True])
def test_carried_answers_are_the_same_from_any_tick_and_for_large_files(lazy, tmp_path, monkeypatch):
    """A long recording (past several checkpoints) with slow counters on some ticks only: the
    replay answers, reached in order, backwards and by jumps, equal the carried definition;
    a large file (kept as text, parsed when read) answers the same."""
    from rigmon.model import recording as recmod
    from rigmon.readers.replay import CHECKPOINT_TICKS, ReplayClock, ReplaySource

    base = sc.timeline(3 * CHECKPOINT_TICKS + 40, 1)
    for n, tick in enumerate(base.ticks):
        g = tick["gpus"][0]
        g["nvmlDeviceGetPowerUsage"] = 100000 + n
        if n % 7:
            g.pop("nvmlDeviceGetTotalEnergyConsumption", None)  # a slow counter, on some ticks only
        else:
            g["nvmlDeviceGetTotalEnergyConsumption"] = 5_000_000 + n
    path = sc.write(base, tmp_path / "long.rec.jsonl")
    if lazy:
        monkeypatch.setattr(recmod, "LAZY_BYTES", 0)
    rec = Recording.load(path)
    assert isinstance(rec.ticks, recmod.LazyTicks) is lazy
    want = _carried_naively(Recording.load(path) if not lazy else Recording(rec.header, list(rec.ticks)))
    source = ReplaySource(rec, ReplayClock(realtime=False), loop=False)
    order = list(range(len(want))) + [700, 3, 512, 511, 255, 256, 257, 0, len(want) - 1]
    for index in order:
        got = source.gpus_at(index)[0]
        for key in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption"):
            assert got.get(key) == want[index][0].get(key), (index, key)


@pytest.mark.slow
def test_a_large_recording_replays_in_bounded_memory(tmp_path):
    """Recordings of 20 and 40 MB (hours of an 8-GPU box): each further MB of recording costs
    the replay about 2 MB of memory (parsed whole it cost ten), with --replay-gpus 8 (widened
    as read) as without."""
    lines = sc.H200.read_text().splitlines()
    header, ticks = lines[0], [json.loads(x) for x in lines[1:]]
    peak = (
        "import resource, runpy, sys\nsys.argv = ['rigmon'] + sys.argv[1:]\ntry:\n"
        "    runpy.run_module('rigmon', run_name='__main__')\nfinally:\n"
        "    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    )

    def recording(megabytes: float) -> tuple[Path, float]:
        path = tmp_path / f"big-{megabytes:g}.rec.jsonl"
        with open(path, "w") as out:
            out.write(header + "\n")
            size, n, t0 = 0, 0, ticks[0]["t"]
            while size < megabytes * 1e6:
                line = json.dumps(dict(ticks[n % len(ticks)], t=round(t0 + n * 0.2, 3))) + "\n"
                out.write(line)
                size, n = size + len(line), n + 1
        return path, size / 1e6

    def peak_mb(path: Path, *extra: str) -> float:
        done = subprocess.run(
            [sys.executable, "-c", peak, "status", "--replay", str(path), "--at", "10", *extra],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return int(done.stderr.strip().splitlines()[-1]) / 1024

    (small, small_mb), (large, large_mb) = recording(20), recording(40)
    for extra in ((), ("--replay-gpus", "8")):
        a, b = peak_mb(small, *extra), peak_mb(large, *extra)
        per_mb = (b - a) / (large_mb - small_mb)
        print(
            f"\nstatus {' '.join(extra)}: {small_mb:.0f} MB recording {a:.0f} MB RSS, {large_mb:.0f} MB "
            f"recording {b:.0f} MB RSS: {per_mb:.1f} MB of memory per MB of recording"
        )
        assert per_mb < 4, (a, b)


def test_a_call_the_recording_lacks_reads_not_recorded_not_unsupported(tmp_path):
    """An older recording without the fan calls: status and doctor say the recording has no answer,
    not that the hardware lacks fans; a call recorded as NotSupported is not listed; the bundled demo
    gives the memory temperature the real H200 answered."""
    rec = sc.h200()
    gpu = rec.header["gpus"][0]
    del gpu["nvmlDeviceGetNumFans"], gpu["nvmlDeviceGetFanSpeed"]  # an older rigmon asked neither
    gpu["nvmlDeviceGetProcessUtilization:0"] = sc.error("NotSupported")
    path = sc.write(rec, tmp_path / "old.rec.jsonl")
    env = {**__import__("os").environ, "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "status", "--replay", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    tail = done.stdout[done.stdout.index("not recorded (") :]
    assert "nvmlDeviceGetFanSpeed," in tail and "nvmlDeviceGetNumFans" in tail
    assert "nvmlDeviceGetProcessUtilization" not in tail  # recorded: NotSupported is the hardware's answer
    assert max(len(line) for line in done.stdout.splitlines()) <= 100
    data = json.loads(
        subprocess.run(
            [sys.executable, "-m", "rigmon", "status", "--replay", str(path), "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    )
    assert "nvmlDeviceGetFanSpeed" in data["replay"]["not_recorded"]
    doctor = subprocess.run(
        [sys.executable, "-m", "rigmon", "doctor", "--replay", str(path)], capture_output=True, text=True, timeout=60
    )
    assert "recording: no answer for" in doctor.stdout and "nvmlDeviceGetFanSpeed" in doctor.stdout
    demo = json.loads(
        subprocess.run(
            [sys.executable, "-m", "rigmon", "status", "--demo", "--json"], capture_output=True, text=True, timeout=60
        ).stdout
    )
    assert demo["gpus"][0]["memory_temperature_celsius"] == 43
