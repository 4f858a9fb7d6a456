"""What the daemon holds is its owner's: no value from hardware, a recording or the history file
can make it spin or grow, and no replay reads or writes the box's own state."""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path

import pytest
import scenarios as sc
from servers import Rigmon, http_get

from rigmon.config import schema as configmod
from rigmon.pipeline import Inputs, Outputs, Pipeline
from rigmon.sinks.history import History

HOSTILE = (2.0**53, math.inf, 1e308, -0.0)


def hostile(value: float) -> sc.Recording:
    """The rich 8-GPU box with ``value`` as every GPU's temperature, memory in use and PCIe
    generation, and as the CPU package's temperature; no slowdown threshold (no floor under
    the temperature's chart)."""
    rec = copy.deepcopy(sc.rich(sc.h200()))
    for entry in rec.header["gpus"]:
        entry["nvmlDeviceGetTemperatureThreshold:1"] = sc.error("NotSupported")
        entry["nvmlDeviceGetTemperatureThreshold:0"] = sc.error("NotSupported")
    for tick in rec.ticks:
        for g in tick["gpus"]:
            g["nvmlDeviceGetTemperature:0"] = value
            g["nvmlDeviceGetTemperatureV:0"] = value
            g["nvmlDeviceGetCurrPcieLinkGeneration"] = value
            g["nvmlDeviceGetMemoryInfo"] = {"total": 150754820096, "free": 0, "used": value}
            g["nvmlDeviceGetMemoryInfo:33554472"] = {
                "total": 150754820096,
                "free": 0,
                "used": value,
                "reserved": 0,
                "version": 33554472,
            }
        host = tick.setdefault("host", {})
        host["sensors_temperatures"] = {
            "coretemp": [["Package id 0", value, 80.0, 100.0], ["Core 0", value, 80.0, 100.0]]
        }
        # the same in sysfs, where rigmon's walk reads each sensor by its attribute
        host["hwmon"] = {
            "hwmon1": {
                "name": "coretemp",
                "device": "coretemp.0",
                "files": {
                    "name": "coretemp",
                    "temp1_input": str(value),
                    "temp1_label": "Package id 0",
                    "temp2_input": str(value),
                    "temp2_label": "Core 0",
                },
            }
        }
    return rec


def _write(rec: sc.Recording, path: Path) -> Path:
    # json writes inf as Infinity, which Python's reader (and rigmon's) takes back
    return sc.write(rec, path)


@pytest.mark.parametrize("value", HOSTILE, ids=["2**53", "inf", "1e308", "-0"])
def test_a_value_no_hardware_can_mean_is_not_exported_charted_or_kept(value, tmp_path):
    config = configmod.parse({"daemon": {"state_dir": str(tmp_path / "state")}}, "test")
    now = [1_800_000_000.0]
    history = History(None, interval=1.0)
    source = sc.source(hostile(value), at=sc.LOAD_AT)
    # the daemon's outputs, told no one, and its own history whose answers are timed
    pipeline = Pipeline.from_config(
        config,
        Outputs(prometheus=True, influxdb=True, jobs=True, known=True, baselines=True),  # DAEMON less history, announce
        sinks=[history],
        inputs=Inputs(source=source, wall=lambda: now[0], event_thread=False),
    )
    pipeline.open()
    try:
        for _ in range(5):
            now[0] += 1
            result = pipeline.step()
        sample = result.sample
        from prometheus_client import generate_latest

        text = generate_latest(pipeline.registry()).decode()
    finally:
        pipeline.close(time.monotonic() + 2)
    valid = value == 0  # -0.0 is a temperature and a generation (0): in range; memory 0 too
    g = sample.gpus[0]
    for field in ("temperature_celsius", "memory_used_bytes", "pcie_generation"):
        assert (getattr(g, field) is not None) == valid, (field, getattr(g, field))
    assert bool(sample.host.cpu_temperatures) == valid
    names = history.series_names()
    assert ("gpu0/temperature_celsius" in names) == valid and ("host/cpu0_celsius" in names) == valid
    if valid:
        assert (
            "rigmon_readings_invalid_total" not in text
            or 'reading="' not in text.split("rigmon_readings_invalid_total")[1].split("\n# ")[0]
        )
        return
    for reading in ("temperature_celsius", "memory_used_bytes", "pcie_generation", "celsius"):
        line = f'rigmon_readings_invalid_total{{reading="{reading}"}} '
        assert line in text, text[:3000]
        assert float(text.split(line)[1].split()[0]) >= 5
    assert 'rigmon_gpu_temperature_celsius{gpu="0",sensor="gpu"' not in text
    assert "rigmon_cpu_temperature_celsius{" not in text
    # the rest of the GPU is there: one bad reading degrades one reading
    assert 'rigmon_gpu_power_watts{gpu="0"' in text


def test_an_invalid_series_is_logged_once(tmp_path, caplog):
    config = configmod.parse({"daemon": {"state_dir": str(tmp_path / "state")}}, "test")
    source = sc.source(hostile(math.inf), at=sc.LOAD_AT)
    pipeline = Pipeline.from_config(config, Outputs(), inputs=Inputs(source=source, event_thread=False))
    pipeline.open()
    try:
        with caplog.at_level("WARNING", logger="rigmon.model.validity"):
            for _ in range(10):
                pipeline.step()
    finally:
        pipeline.close(time.monotonic() + 2)
    told = [r.getMessage() for r in caplog.records if "invalid reading" in r.getMessage()]
    assert len(told) == len(set(told)) and 8 <= len([m for m in told if "temperature_celsius of gpu" in m]) <= 8
    assert pipeline.poller.invalid.counts["temperature_celsius"] == 80


def _hostile_history(path: Path, interval: float, replay: bool) -> None:
    """A history.bin as a damaged or hostile writer would leave it: 2**53, inf, 1e308 and -0 in
    a CPU temperature, a GPU temperature, memory and PCIe (float32 cells: 1e308 is inf)."""
    history = History(None, interval=interval, replay=replay)
    history.path = path
    t = time.time() - 600
    names = ["gpu0/temperature_celsius", "gpu0/memory_used_bytes", "gpu0/pcie_generation", "host/cpu0_celsius"]
    for k in range(600):
        value = HOSTILE[k % 4]
        row = {name: value for name in names}
        history.raw.write(t + k, row)
        history._bucket(0, t + k, row)
    history._series = set(names)
    history.latest = t + 600
    history.save()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _serve_and_measure(tmp_path: Path, name: str, recording: Path, history_from=None) -> tuple[float, int, Rigmon]:
    tmp = tmp_path / name
    tmp.mkdir()
    rigmon = Rigmon(tmp, recording, "[daemon]\ninterval = 1\n")
    if history_from is not None:
        history_from(rigmon)
    rigmon.wait_ready()
    rigmon.wait_polls(3)
    base = rigmon.url.rsplit("/", 1)[0]
    slowest = 0.0
    for _ in range(3):
        for path in (
            "/api/charts?range=1h",
            "/api/charts?range=7d",
            "/api/history?series=*&since=-3600",
            "/api/state",
            "/",
        ):
            started = time.monotonic()
            status, _ = http_get(base + path, timeout=10)
            slowest = max(slowest, time.monotonic() - started)
            assert status == 200, path
    return slowest, _rss_kib(rigmon.proc.pid), rigmon


@pytest.mark.slow  # a flood of its own
def test_hostile_recordings_and_history_answer_within_a_second_in_bounded_memory(tmp_path):
    clean_rec = _write(sc.rich(sc.h200()), tmp_path / "clean.rec.jsonl")
    clean_time, clean_rss, rigmon = _serve_and_measure(tmp_path, "clean", clean_rec)
    rigmon.stop()
    for n, value in enumerate(HOSTILE):
        rec = _write(hostile(value), tmp_path / f"hostile{n}.rec.jsonl")
        took, rss, rigmon = _serve_and_measure(tmp_path, f"hostile{n}", rec)
        print(
            f"\n{value!r} in a recording: slowest answer {took * 1000:.0f} ms, RSS {rss / clean_rss:.2f}x a clean "
            f"run's ({clean_rss} KiB; its slowest {clean_time * 1000:.0f} ms)"
        )
        try:
            assert took < 1.0, f"{value}: {took:.2f} s"
            assert rss <= 1.2 * clean_rss, f"{value}: {rss} KiB against {clean_rss} KiB clean"
        finally:
            assert rigmon.stop() == 0
        assert "Traceback" not in rigmon.output()

    # the history file holding them, as the replay's own state directory keeps it
    from servers import replay_state

    tmp = tmp_path / "from-history"
    tmp.mkdir()
    where = replay_state(tmp / "state", clean_rec) / "history.bin"
    where.parent.mkdir(parents=True)
    _hostile_history(where, 1.0, replay=True)
    rigmon = Rigmon(tmp, clean_rec, "[daemon]\ninterval = 1\n")
    try:
        rigmon.wait_ready()
        base = rigmon.url.rsplit("/", 1)[0]
        for path in ("/api/charts?range=1h", "/api/charts?range=6h", "/api/history?series=*&since=-3600"):
            started = time.monotonic()
            status, body = http_get(base + path, timeout=10)
            assert status == 200 and time.monotonic() - started < 1.0, path
        assert _rss_kib(rigmon.proc.pid) <= 1.2 * clean_rss
        assert rigmon.metric("rigmon_readings_invalid_total", '{reading="temperature_celsius"}') >= 400
        assert rigmon.metric("rigmon_readings_invalid_total", '{reading="celsius"}') >= 400
    finally:
        assert rigmon.stop() == 0
    assert "history: 4 series of the last week loaded" in rigmon.output()


def test_any_float_charts_in_bounded_time():
    from rigmon.http.charts import chart, nice_ticks

    for value in (2.0**53, math.inf, -math.inf, math.nan, 1e308, -1e308, 1.7976931348623157e308, -0.0, 5e-324):
        for zero in (False, True):
            for log in (False, True):
                started = time.monotonic()
                svg = chart(
                    "t",
                    [("a", [(0.0, value, value, value), (1.0, 1.0, 1.0, 1.0)], "#000")],
                    "°C",
                    zero=zero,
                    log=log,
                    span=10.0,
                )
                assert time.monotonic() - started < 0.1 and len(svg) < 20_000 and svg.endswith("</svg>")
        assert len(nice_ticks(value, value)) <= 30 if math.isfinite(value) else nice_ticks(value, value) == [0.0, 1.0]
    assert nice_ticks(0, 100) == [0, 20, 40, 60, 80, 100]


# --- a replay is never the box ------------------------------------------------------------------------
def test_a_demo_then_the_real_daemon_on_the_same_config_shows_nothing_replayed(tmp_path):
    rich = _write(sc.rich(sc.h200()), tmp_path / "rich.rec.jsonl")
    state = tmp_path / "state"
    config = f'[daemon]\ninterval = 0.5\nstate_dir = "{state}"\n'
    for extra in (["--demo"], ["--replay", str(rich)]):
        (tmp_path / "r").mkdir(exist_ok=True)
        replay = Rigmon(tmp_path / "r", None, config, extra_args=extra)
        try:
            replay.wait_ready()
            replay.wait_polls(4)
            assert "its state in " + str(state / "replay") in replay.output()
        finally:
            assert replay.stop() == 0
    assert not (state / "history.bin").exists() and not (state / "jobs.sqlite").exists()
    assert not (state / "rigmon.lock").exists() and not (state / "influxdb-spool").exists()
    assert (state / "replay" / "demo" / "history.bin").exists()

    (tmp_path / "real").mkdir()
    real = Rigmon(tmp_path / "real", None, config)  # this box: no GPU, no sensors
    try:
        real.wait_ready()
        real.wait_polls(2)
        base = real.url.rsplit("/", 1)[0]
        series = json.loads(http_get(base + "/api/history?series=*&since=-86400")[1])["series"]
        assert not [n for n in series if n.startswith(("gpu", "host/fan", "host/cpu0_celsius", "psu"))], series
        jobs = json.loads(http_get(base + "/api/jobs")[1])
        assert jobs["running"] == [] and jobs["recent"] == [], jobs
        state_now = json.loads(http_get(base + "/api/state")[1])
        assert not [a for a in state_now.get("alerts", []) if "gpu" in json.dumps(a)], state_now
        assert not state_now["gpus"] and not (state_now["sensors"] or {}).get("fans"), state_now
    finally:
        assert real.stop() == 0


def test_the_state_directory_and_its_files_are_the_owners_alone(tmp_path):
    """Started with umask 022 on a state directory an older rigmon left 0755: the directory
    becomes 0700 and every file in it (history, ledger, spool, lock) is 0600."""
    import os
    import stat

    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    (state / "old").mkdir()
    config = (
        f'[daemon]\ninterval = 0.25\nstate_dir = "{state}"\n'
        '[influxdb]\nenabled = true\nurl = "http://127.0.0.1:9"\n'
    )  # nothing there: points spool
    rich = _write(sc.rich(sc.h200()), tmp_path / "rich.rec.jsonl")
    old = os.umask(0o022)
    try:
        for replay in (None, rich):  # this box (no GPU here), then a replay's own state under it
            (tmp_path / "run").mkdir(exist_ok=True)
            rigmon = Rigmon(tmp_path / "run", replay, config)
            try:
                rigmon.wait_ready()
                rigmon.wait_polls(8)
            finally:
                assert rigmon.stop() == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    files = [p for p in state.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"history.bin", "jobs.sqlite", "rigmon.lock"} <= names and any(n.endswith(".lp") for n in names), names
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files if stat.S_IMODE(p.stat().st_mode) != 0o600} == {}
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in state.rglob("*") if p.is_dir() and p.name != "old")


def test_a_host_reading_is_checked_and_counted_once(tmp_path):
    """The CPU utilisation is the host's and the cpu kind's variable: NaN from psutil is one invalid reading."""
    rec = sc.with_host(sc.rich(sc.h200(), gpus=4), cpu_percent=math.nan, getloadavg=[-1.0, 2.0, 3.0])
    config = configmod.parse({"daemon": {"state_dir": str(tmp_path / "state")}}, "test")
    pipeline = Pipeline.from_config(
        config, Outputs(), inputs=Inputs(source=sc.source(rec, at=sc.LOAD_AT), event_thread=False)
    )
    pipeline.open()
    try:
        host = pipeline.step().sample.host
    finally:
        pipeline.close(time.monotonic() + 2)
    assert host.cpu_utilization_ratio is None and host.load1 is None and host.load5 == 2.0
    assert pipeline.poller.invalid.counts == {"cpu_utilization_ratio": 1, "load1": 1}
