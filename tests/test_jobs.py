"""The jobs ledger on a replayed day: two jobs' GPU time and energy against the integral of the
recorded power, a starved one flagged, a daemon restart mid-job, and ``rigmon jobs``."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import scenarios as sc

from rigmon.config import schema as configmod

STEP = 10.0  # seconds between the recording's ticks
DAY = 8 * 3600.0
A = {"gpu": 0, "pid": 1111, "start": 600.0, "seconds": 2 * 3600.0, "watts": 350.0, "limit": 350.0}
B = {"gpu": 1, "pid": 2222, "start": 1800.0, "seconds": 6 * 3600.0, "watts": 67.0, "limit": 125.0}
IDLE_WATTS = 20.0
PROCESSES = {
    "1111": {
        "user": "alice",
        "uid": 1000,
        "cmdline": "python train.py --model gpt2",
        "pgid": 1111,
        "ppid": 1000,
        "cgroup": "0::/user.slice/user-1000.slice/session-4.scope\n",
        "start": 0.0,
    },
    "2222": {
        "user": "bob",
        "uid": 1001,
        "cmdline": "python finetune.py",
        "pgid": 2222,
        "ppid": 1,
        "cgroup": "0::/system.slice/docker-4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b.scope\n",
        "start": 0.0,
    },
}


def two_job_day():
    """Two GPUs for 8 hours, a tick every 10 s: job A on GPU 0 for 2 h at 350 W (its limit), job
    B on GPU 1 for 6 h at 67 of 125 W while 100 % busy (a starved GTX 1660); idle otherwise.
    Each GPU's energy counter is the running sum of its recorded power."""
    energy = [0.0, 0.0]

    def modify(t, tick):
        running = [j for j in (A, B) if j["start"] <= t < j["start"] + j["seconds"]]
        for n, g in enumerate(tick["gpus"]):
            job = next((j for j in running if j["gpu"] == n), None)
            limit = (A, B)[n]["limit"]
            watts = job["watts"] if job else IDLE_WATTS
            g["nvmlDeviceGetPowerUsage"] = int(watts * 1000)
            g["nvmlDeviceGetEnforcedPowerLimit"] = int(limit * 1000)
            g["nvmlDeviceGetUtilizationRates"] = {"gpu": 100 if job else 0, "memory": 30 if job else 0}
            g["nvmlDeviceGetTotalEnergyConsumption"] = int(energy[n] * 1000)
            g["nvmlDeviceGetComputeRunningProcesses"] = [{"pid": job["pid"], "usedGpuMemory": 6 << 30}] if job else []
            g["nvmlDeviceGetProcessUtilization:0"] = {"nvml_error": "NotSupported"}
            energy[n] += watts * STEP
        tick["host"] = (
            {"processes": {str(j["pid"]): dict(PROCESSES[str(j["pid"])], start=tick["t"] - 5) for j in running}}
            if running
            else {"processes": {}}
        )

    rec = sc.timeline(DAY, step=STEP, gpus=2, modify=modify)
    for j in (A, B):  # a process started just before rigmon first saw it
        info = PROCESSES[str(j["pid"])]
        first = next(t for t in rec.ticks if str(j["pid"]) in t["host"]["processes"])
        for t in rec.ticks:
            if str(j["pid"]) in t["host"]["processes"]:
                t["host"]["processes"][str(j["pid"])] = dict(info, start=first["t"] - 5)
    return rec


def recorded_joules(rec, job) -> float:
    """The integral of the recorded power over the intervals that start with the job on its GPU."""
    total = 0.0
    for a, b in zip(rec.ticks, rec.ticks[1:], strict=False):
        if a["gpus"][job["gpu"]]["nvmlDeviceGetComputeRunningProcesses"]:
            total += a["gpus"][job["gpu"]]["nvmlDeviceGetPowerUsage"] / 1000 * (b["t"] - a["t"])
    return total


def replay(rec, config, ticks: range) -> dict:
    """The daemon's sinks over the recording's ticks ``ticks``, at the recording's times."""
    replayed = sc.Replayed(rec, config, recording_time=True)
    offsets = rec.offsets()
    try:
        for i in ticks:
            replayed.poll(offsets[i])
        return {j.key: j.id for j in replayed.daemon.pipeline.jobs.running.values()}
    finally:
        replayed.close(20)  # everything spooled is sent


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("day")
    rec = two_job_day()
    (tmp / "rigmon.toml").write_text(
        f'[daemon]\nstate_dir = "{tmp / "state"}"\n'
        '[prometheus]\nenabled = false\n[jobs]\nprice_per_kwh = 0.30\ncurrency = "EUR"\n'
    )
    config = configmod.load(str(tmp / "rigmon.toml"))
    n = len(rec.ticks)
    # the daemon runs 4 hours, is stopped for 10 minutes mid-job (B), and runs on to the end
    restart_at = int(4 * 3600 / STEP)
    before = replay(rec, config, range(0, restart_at))
    after_restart = replay(rec, config, range(restart_at + 60, n))
    return tmp, rec, before, after_restart


def jobs_cli(tmp, *args, columns: int = 200):
    return subprocess.run(
        [sys.executable, "-m", "rigmon", "jobs", "--config", str(tmp / "rigmon.toml"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": str(columns)},
    )


def test_two_jobs_energy_within_one_percent_of_the_recorded_power(day):
    tmp, rec, before, _ = day
    done = jobs_cli(tmp, "--json")
    assert done.returncode == 0, done.stderr
    jobs = {j["user"]: j for j in json.loads(done.stdout)["jobs"]}
    assert set(jobs) == {"alice", "bob"}
    a, b = jobs["alice"], jobs["bob"]
    assert a["job"] == "alice/pgid:1111" and a["gpus"] == [0] and not a["running"]
    assert b["job"] == "bob/docker:4f3c2a1b0e9d" and b["unit"] == "docker:4f3c2a1b0e9d" and b["gpus"] == [1]
    for job, spec in ((a, A), (b, B)):
        expected = recorded_joules(rec, spec)
        assert job["energy_joules"] == pytest.approx(expected, rel=0.01), (job, expected)
        assert job["gpu_hours"] == pytest.approx(spec["seconds"] / 3600, rel=0.01)
        assert job["seconds"] == pytest.approx(spec["seconds"], abs=2 * STEP)
        assert job["cost"] == pytest.approx(job["energy_kwh"] * 0.30) and job["currency"] == "EUR"
    assert a["energy_kwh"] == pytest.approx(0.70, rel=0.01) and b["energy_kwh"] == pytest.approx(0.402, rel=0.01)
    assert b["starved"] is True and a["starved"] is False
    assert b["mean_power_ratio"] == pytest.approx(67 / 125, rel=0.01)
    assert a["mean_power_ratio"] == pytest.approx(1.0, rel=0.01) and a["mean_utilization_ratio"] == pytest.approx(1.0)


def test_the_ledger_survives_a_restart_mid_job(day):
    tmp, rec, before, after = day
    # B ran across the restart: the same job, not a second one, its downtime booked
    assert "bob/docker:4f3c2a1b0e9d" in before
    jobs = json.loads(jobs_cli(tmp, "--json").stdout)["jobs"]
    assert len(jobs) == 2
    b = next(j for j in jobs if j["user"] == "bob")
    assert b["id"] == before["bob/docker:4f3c2a1b0e9d"]
    assert b["gpu_hours"] == pytest.approx(6.0, rel=0.01)  # the 10 minutes rigmon was down included


def test_rigmon_jobs_table_and_show(day):
    tmp, _, _, _ = day
    done = jobs_cli(tmp)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:8] == ["ID", "USER", "JOB", "GPUS", "STARTED", "TOOK", "GPU-H", "kWh"]
    bob = next(line for line in lines if " bob " in line)
    assert "STARVED" in bob and "docker:4f3c2a1b0e9d" in bob and "0.402" in bob and "67 W/54%" in bob
    assert "alerts: GpuStarved" in bob and ("5h59m" in bob or "6h00m" in bob)  # first to last seen
    alice = next(line for line in lines if " alice " in line)
    assert "STARVED" not in alice and ("1h59m" in alice or "2h00m" in alice) and "python train.py" in alice
    job_id = json.loads(jobs_cli(tmp, "--json").stdout)["jobs"][0]["id"]
    shown = jobs_cli(tmp, "show", str(job_id))
    assert shown.returncode == 0, shown.stderr
    assert f"job #{job_id}" in shown.stdout and "energy" in shown.stdout and "kWh" in shown.stdout
    missing = jobs_cli(tmp, "show", "999")
    assert missing.returncode == 2 and "no job #999" in missing.stderr


def test_the_jobs_table_and_a_job_fit_80_columns(day):
    """At COLUMNS=80 the table drops its least useful columns first (the command, the peak
    temperature…) and keeps which job, whose, its GPUs, how long, its energy and its flags;
    ``jobs show`` goes on under a long value. Nothing is wider than 80."""
    tmp, _, _, _ = day
    done = jobs_cli(tmp, columns=80)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, lines
    assert lines[0].split() == ["ID", "USER", "JOB", "GPUS", "TOOK", "kWh", "FLAGS"]
    bob = next(line for line in lines if " bob " in line)
    assert "STARVED" in bob and "0.402" in bob
    job_id = json.loads(jobs_cli(tmp, "--json").stdout)["jobs"][0]["id"]
    shown = jobs_cli(tmp, "show", str(job_id), columns=80)
    assert shown.returncode == 0, shown.stderr
    shown_lines = shown.stdout.splitlines()
    assert max(len(line) for line in shown_lines) <= 80 and any("GPU-hours" in x for x in shown_lines), shown.stdout
    wide = jobs_cli(tmp, columns=200).stdout.splitlines()
    assert "COMMAND" in wide[0] and max(len(line) for line in wide) > 80  # what was dropped fits a wider one


def test_no_ledger_yet_says_so(tmp_path):
    (tmp_path / "rigmon.toml").write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    done = jobs_cli(tmp_path)
    assert done.returncode == 0 and "no jobs" in done.stdout


def test_each_finished_job_is_one_influxdb_point(influx, tmp_path):
    rec = two_job_day()
    config = configmod.parse(
        {
            "daemon": {"state_dir": str(tmp_path / "state")},
            "prometheus": {"enabled": False},
            "influxdb": {"enabled": True, "api": "v1", "url": influx.url, "flush_interval": 0.2},
            "jobs": {"price_per_kwh": 0.30},
        }
    )
    replay(rec, config, range(len(rec.ticks)))
    points = influx.query('SELECT * FROM "job" GROUP BY "user"', epoch="s")
    by_user = {p["tags"]["user"]: dict(zip(p["columns"], p["values"][0], strict=True)) for p in points}
    assert set(by_user) == {"alice", "bob"} and all(len(p["values"]) == 1 for p in points)
    bob = by_user["bob"]
    assert bob["starved"] is True and bob["energy_joules"] == pytest.approx(recorded_joules(rec, B), rel=0.01)
    assert bob["cost"] == pytest.approx(bob["energy_joules"] / 3.6e6 * 0.30) and bob["gpus"] == "1"
    assert by_user["alice"]["starved"] is False and by_user["alice"]["mean_power_ratio"] == pytest.approx(1.0, rel=0.01)


def test_a_real_daemon_restarted_mid_job_keeps_the_job(tmp_path):
    """``rigmon run`` books the rich box's training run, is stopped and started again: the same
    job goes on (one job in the ledger, its GPU time growing across the restart)."""
    from servers import Rigmon, http_get, wait_for

    path = sc.write(sc.rich(sc.h200(), gpus=4), tmp_path / "rich.rec.jsonl")
    config = "[daemon]\ninterval = 0.25\n"

    def ledger():  # the replay's own, never the box's: read as a user asks for it
        done = jobs_cli(tmp_path, "--json", "--replay", str(path))
        assert done.returncode == 0, done.stderr
        jobs = json.loads(done.stdout)["jobs"]
        shown = jobs_cli(tmp_path, "show", str(jobs[0]["id"]), "--replay", str(path)) if jobs else None
        assert shown is None or (shown.returncode == 0 and "alice" in shown.stdout), shown
        return jobs

    def running(daemon):
        body = http_get(daemon.url)[1].decode()
        return "rigmon_jobs_running 1.0" in body

    for round_ in range(2):
        daemon = Rigmon(tmp_path, path, config)
        try:
            daemon.wait_ready()
            wait_for(lambda d=daemon: running(d), 20, what="the job")
            daemon.wait_polls(4)  # the job runs on a while
        finally:
            assert daemon.stop() == 0
        jobs = ledger()
        assert len(jobs) == 1 and jobs[0]["running"] and jobs[0]["user"] == "alice", jobs
        if round_ == 0:
            first = jobs[0]
    assert jobs[0]["id"] == first["id"] and jobs[0]["gpu_hours"] > first["gpu_hours"]


def test_a_shared_gpu_splits_its_energy_by_sm_share(tmp_path):
    """Two jobs on one GPU, one with 75 % of the SMs' time and one with 25 %: its energy (from
    the counter) goes 3:1; without SM shares it goes evenly."""

    def modify(t, tick):
        g = tick["gpus"][0]
        g["nvmlDeviceGetPowerUsage"] = 400_000
        g["nvmlDeviceGetTotalEnergyConsumption"] = int(400 * t * 1000)
        g["nvmlDeviceGetComputeRunningProcesses"] = [
            {"pid": 1111, "usedGpuMemory": 1 << 30},
            {"pid": 2222, "usedGpuMemory": 1 << 30},
        ]
        g["nvmlDeviceGetProcessUtilization:0"] = [
            {"pid": 1111, "timeStamp": int(t * 1e6), "smUtil": 75, "memUtil": 0, "encUtil": 0, "decUtil": 0},
            {"pid": 2222, "timeStamp": int(t * 1e6), "smUtil": 25, "memUtil": 0, "encUtil": 0, "decUtil": 0},
        ]
        tick["host"] = {"processes": {k: dict(v, start=0.0) for k, v in PROCESSES.items()}}

    for by_sm in (True, False):
        rec = sc.timeline(600, step=STEP, modify=modify)
        if not by_sm:
            for tick in rec.ticks:
                tick["gpus"][0]["nvmlDeviceGetProcessUtilization:0"] = {"nvml_error": "NotSupported"}
        config = configmod.parse(
            {"daemon": {"state_dir": str(tmp_path / str(by_sm))}, "prometheus": {"enabled": False}}
        )
        replay(rec, config, range(len(rec.ticks)))
        from rigmon.sinks import jobs as ledger

        energy = {j.user: j.energy_joules for j in ledger.load(tmp_path / str(by_sm) / "jobs.sqlite")}
        total = 400 * 600  # the counter's rise over the 10 minutes both jobs held the GPU
        want = (0.75, 0.25) if by_sm else (0.5, 0.5)
        assert energy["alice"] == pytest.approx(want[0] * total, rel=0.01), energy
        assert energy["bob"] == pytest.approx(want[1] * total, rel=0.01), energy


# --- a day of jobs from 30 s to 2 h, with the default config ---------------------------------------
# (pid, gpu, start, seconds, SM share on a shared GPU); GPU 1 is shared from 1000 to 1900 s
DAY_JOBS = [
    (101, 0, 60, 30, None),
    (102, 0, 90, 7200, None),
    (103, 0, 7290, 120, None),
    (104, 1, 100, 2400, 0.7),
    (105, 1, 1000, 900, 0.3),
    (106, 1, 2500, 90, None),
    (107, 1, 3000, 31, None),
    (108, 0, 7500, 60, None),
]
UNREADABLE = 108  # its /proc entry could not be read


def _on(t, job):
    return job[2] <= t < job[2] + job[3]


def watts_at(gpu, t, running):
    if gpu == 1 and any(j[0] == 107 for j in running):
        return 67.5  # 54 % of its 125 W limit, 100 % busy: a starved run too short to judge
    return 250.0 + (int(t) * 7919 + 131 * gpu) % 150 if running else 60.0


def busy_day():
    energy = [0.0, 0.0]

    def modify(t, tick):
        running = [j for j in DAY_JOBS if _on(t, j)]
        for n, g in enumerate(tick["gpus"]):
            mine = [j for j in running if j[1] == n]
            watts = watts_at(n, t, mine)
            g["nvmlDeviceGetPowerUsage"] = int(watts * 1000)
            g["nvmlDeviceGetEnforcedPowerLimit"] = 125_000 if n == 1 else 700_000
            g["nvmlDeviceGetUtilizationRates"] = {"gpu": 100 if mine else 0, "memory": 20 if mine else 0}
            g["nvmlDeviceGetTotalEnergyConsumption"] = int(energy[n] * 1000)
            g["nvmlDeviceGetComputeRunningProcesses"] = [{"pid": j[0], "usedGpuMemory": 1 << 30} for j in mine]
            g["nvmlDeviceGetProcessUtilization:0"] = (  # the driver's samples; none at all on an idle GPU
                [
                    {
                        "pid": j[0],
                        "timeStamp": int(t * 1e6),
                        "smUtil": int((j[4] if len(mine) > 1 else 1) * 100),
                        "memUtil": 0,
                        "encUtil": 0,
                        "decUtil": 0,
                    }
                    for j in mine
                ]
                if mine
                else {"nvml_error": "NotFound"}
            )
            energy[n] += watts  # a tick a second: the counter is the running sum of the recorded power
        tick["host"] = {
            "processes": {
                str(j[0]): {
                    "user": "ada",
                    "uid": 1000,
                    "cmdline": f"python job{j[0]}.py",
                    "ppid": 1,
                    "pgid": j[0],
                    "sid": j[0],
                    "cgroup": "0::/user.slice/user-1000.slice/session-2.scope\n",
                    "start": tick["t"] - t + j[2] - 1,
                }
                for j in running
                if j[0] != UNREADABLE
            }
        }

    return sc.timeline(7700, 1.0, gpus=2, modify=modify)


def expected_joules(rec) -> dict[int, float]:
    """Each job's part of the recorded power: each second belongs to the jobs on the GPU at its
    start, split by their SM share where NVML gives it, else evenly (README's rule)."""
    out = {j[0]: 0.0 for j in DAY_JOBS}
    for a, b in zip(rec.ticks, rec.ticks[1:], strict=False):
        for g in a["gpus"]:
            pids = [p["pid"] for p in g["nvmlDeviceGetComputeRunningProcesses"]]
            sm = g["nvmlDeviceGetProcessUtilization:0"]
            shares = (
                {s["pid"]: s["smUtil"] / 100 for s in sm} if isinstance(sm, list) else {p: 1 / len(pids) for p in pids}
            )
            for pid in pids:
                out[pid] += g["nvmlDeviceGetPowerUsage"] / 1000 * (b["t"] - a["t"]) * shares[pid]
    return out


@pytest.mark.slow
def test_every_job_energy_within_one_percent_on_a_day_with_the_default_config(tmp_path):
    """Jobs of 30 s to 2 h, back to back and sharing a GPU, the energy counter read on the default
    slow_interval (5 s) and at each change of a GPU's processes: each job's booked energy against
    its part of the recorded power."""
    rec = busy_day()
    config = configmod.parse({"daemon": {"state_dir": str(tmp_path / "state")}, "prometheus": {"enabled": False}})
    assert config.gpu.slow_interval == 5.0
    replay(rec, config, range(len(rec.ticks)))
    jobs = {
        j["job"].split("/", 1)[-1]: j
        for j in json.loads(
            subprocess.run(  # without the owner
                [sys.executable, "-m", "rigmon", "jobs", "--json", "--config", str(_toml(tmp_path, config))],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
        )["jobs"]
    }
    want = expected_joules(rec)
    for pid, gpu, _, seconds, _ in DAY_JOBS:
        key = f"pid:{pid}" if pid == UNREADABLE else f"pgid:{pid}"
        job = jobs[key]
        error = job["energy_joules"] / want[pid] - 1
        print(
            f"job {pid}: {seconds:>5} s on GPU {gpu}: {job['energy_joules']:>10.0f} J booked, "
            f"{want[pid]:>10.0f} J recorded, error {error:+.3%}"
        )
        assert abs(error) < 0.01, (key, job["energy_joules"], want[pid])
        assert job["gpus"] == [gpu] and not job["energy_estimated"]
    shared, alone = jobs["pgid:104"], jobs["pgid:102"]
    # GPU-hours on a shared GPU are the job's share of it; the time it held the GPU is beside
    assert shared["held_gpu_hours"] == pytest.approx(2400 / 3600, rel=0.01)
    assert shared["gpu_hours"] == pytest.approx((2400 - 900 * 0.3) / 3600, rel=0.01)
    assert alone["gpu_hours"] == pytest.approx(alone["held_gpu_hours"]) == pytest.approx(2.0, rel=0.01)
    assert jobs["pgid:107"]["starved"] is None  # 31 s at 54 % of the limit: too short to judge
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "rigmon",
            "jobs",
            "show",
            str(jobs["pgid:107"]["id"]),
            "--config",
            str(_toml(tmp_path, config)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "starved" in shown and "too short to judge" in shown, shown
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "rigmon",
            "jobs",
            "show",
            str(jobs[f"pid:{UNREADABLE}"]["id"]),
            "--config",
            str(_toml(tmp_path, config)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "unknown (/proc could not be read" in shown and "a login session" not in shown, shown
    shown = subprocess.run(
        [sys.executable, "-m", "rigmon", "jobs", "show", str(shared["id"]), "--config", str(_toml(tmp_path, config))],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "its share of each GPU's time; held 0.667" in shown and "from the GPUs' energy counters" in shown


def _toml(tmp_path, config) -> Path:
    path = tmp_path / "rigmon.toml"
    path.write_text(f'[daemon]\nstate_dir = "{config.daemon.state_dir}"\n')
    return path


def test_a_gpu_without_an_energy_counter_integrates_power_and_says_so(tmp_path):
    rec = busy_day()
    for tick in rec.ticks:
        for g in tick["gpus"]:
            g["nvmlDeviceGetTotalEnergyConsumption"] = {"nvml_error": "NotSupported"}
    for g in rec.header["gpus"]:
        g["nvmlDeviceGetTotalEnergyConsumption"] = {"nvml_error": "NotSupported"}
    rec.ticks[:] = rec.ticks[:200]
    config = configmod.parse({"daemon": {"state_dir": str(tmp_path / "state")}, "prometheus": {"enabled": False}})
    replay(rec, config, range(len(rec.ticks)))
    (job,) = [
        j
        for j in json.loads(
            subprocess.run(
                [sys.executable, "-m", "rigmon", "jobs", "--json", "--config", str(_toml(tmp_path, config))],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
        )["jobs"]
        if j["job"].endswith("/pgid:104")
    ]
    assert job["energy_estimated"] and job["energy_joules"] > 0
    shown = subprocess.run(
        [sys.executable, "-m", "rigmon", "jobs", "show", str(job["id"]), "--config", str(_toml(tmp_path, config))],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "partly estimated: power × time where the GPU's energy counter is missing or stood still" in " ".join(
        shown.split()
    )


@pytest.mark.slow  # a flood of its own
def test_jobs_reads_any_number_of_rows_in_flat_memory_and_refuses_a_limit_below_one(tmp_path):
    """100,000 jobs (a row held each would be ~270 MB): ``--all`` and ``--json`` print them all, a
    row at a time, in about the memory ``--limit 10`` takes; ``--limit`` 0 or -1 is a one-line usage error (exit 2)."""
    from rigmon.sinks import jobs as ledger

    (tmp_path / "rigmon.toml").write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n')
    db = ledger.connect(tmp_path / "jobs.sqlite")
    db.executemany(
        "INSERT INTO jobs (key, user, command, started, last_seen, ended, gpus, gpu_seconds) "
        "VALUES (?, ?, ?, ?, ?, ?, '[0,1]', 3600)",
        (
            (f"pgid:{n}", f"user{n % 50}", "python train.py " + "x" * 60, 1e9 + n, 1e9 + n + 60, 1e9 + n + 60)
            for n in range(100_000)
        ),
    )
    db.commit()
    db.close()

    def peak(*args) -> tuple[int, int]:
        script = (
            "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.stdout.count(b'\\n'), "
            "p.returncode)"
        )
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                script,
                sys.executable,
                "-m",
                "rigmon",
                "jobs",
                "--config",
                str(tmp_path / "rigmon.toml"),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        kib, lines, code = map(int, done.stdout.split())
        assert code == 0, done.stderr
        return kib, lines

    few, lines = peak("--limit", "10")
    assert lines == 11
    every, lines = peak("--all")
    assert lines == 100_001
    as_json, lines = peak("--all", "--json")
    assert lines > 100_000 * 10
    print(f"\nmax RSS: --limit 10 {few} KiB, --all {every} KiB, --all --json {as_json} KiB")
    assert every < few * 1.3 and as_json < few * 1.3
    for bad in ("0", "-1", "x"):
        done = jobs_cli(tmp_path, "--limit", bad)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "--limit" in done.stderr, done.stderr


def _spoofing_day():
    """Four GPUs for 10 minutes, a tick every 10 s, each at 300 W while busy. Alice (uid 1000)
    runs a systemd service, a container and a Slurm job on GPUs 0-2; bob (uid 1002) names his
    own delegated cgroups after each of them on GPU 3, one after the other. On GPU 0, alice's
    process group 4100 ends at 5 min and bob's new group leader reuses PID 4100 at once."""
    alice_hex = "4f3c2a1b0e9d" + "8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"
    delegated = "0::/user.slice/user-1002.slice/user@1002.service/app.slice/"
    alice = {
        4100: ("0::/user.slice/user-1000.slice/session-3.scope\n", 0),
        4200: ("0::/system.slice/train-alice.service\n", 1),
        4300: (f"0::/system.slice/docker-{alice_hex}.scope\n", 2),
        4400: ("0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n", 3),
    }
    bob = [
        (f"{delegated}train-alice.service\n", 5100),
        (f"{delegated}docker-{alice_hex}.scope\n", 5200),
        (f"{delegated}job_77.scope\n", 5300),
    ]
    energy = [0.0] * 4

    def entry(user, uid, pid, cgroup, start):
        return {
            "user": user,
            "uid": uid,
            "cmdline": f"python {user}.py",
            "cgroup": cgroup,
            "ppid": 1,
            "pgid": pid,
            "sid": pid,
            "start": start,
        }

    def modify(t, tick):
        t0 = tick["t"] - t
        on: dict[int, list] = {n: [] for n in range(4)}
        processes = {}
        for pid, (cgroup, gpu) in alice.items():
            if gpu == 0 and t >= 300:
                continue  # alice's group on GPU 0 is over
            if gpu == 3:
                continue  # her Slurm job's name is only borrowed here
            on[gpu].append(pid)
            processes[str(pid)] = entry("alice", 1000, pid, cgroup, t0 - 5)
        if t >= 300:  # bob's new group leader, PID 4100 reused
            on[0].append(4100)
            processes["4100"] = entry("bob", 1002, 4100, "0::/user.slice/user-1002.slice/session-9.scope\n", t0 + 295)
        cgroup, pid = bob[min(int(t // 200), 2)]
        on[3].append(pid)
        processes[str(pid)] = entry("bob", 1002, pid, cgroup, t0 - 5)
        for n, g in enumerate(tick["gpus"]):
            g["nvmlDeviceGetPowerUsage"] = 300_000
            g["nvmlDeviceGetTotalEnergyConsumption"] = int(energy[n] * 1000)
            g["nvmlDeviceGetComputeRunningProcesses"] = [{"pid": p, "usedGpuMemory": 1 << 30} for p in on[n]]
            g["nvmlDeviceGetProcessUtilization:0"] = {"nvml_error": "NotSupported"}
            energy[n] += 300 * 10
        tick["host"] = {"processes": processes}

    return sc.timeline(600, step=10, gpus=4, modify=modify)


def test_a_user_cannot_book_her_gpu_time_to_anothers_job_by_naming_her_cgroups_after_it(tmp_path):
    """Bob's delegated train-alice.service, docker-<alice's id>.scope and job_77.scope are his
    own process groups, never alice's service, container or Slurm job; bob's new group leader on
    a PID alice's group had is a new job, his. Each job has its own user, GPUs and energy."""
    rec = _spoofing_day()
    config = configmod.parse(
        {"daemon": {"state_dir": str(tmp_path / "state")}, "prometheus": {"enabled": False}, "jobs": {"end_after": 30}}
    )
    replay(rec, config, range(len(rec.ticks)))
    from rigmon.sinks.jobs import ledger_path, load

    jobs = {j.key: j for j in load(ledger_path(config.daemon.state_dir))}
    assert {k: (j.user, sorted(j.gpus)) for k, j in jobs.items()} == {
        "alice/pgid:4100": ("alice", [0]),
        "bob/pgid:4100": ("bob", [0]),
        "alice/systemd:train-alice.service": ("alice", [1]),
        "alice/docker:4f3c2a1b0e9d": ("alice", [2]),
        "bob/pgid:5100": ("bob", [3]),
        # a container in bob's own subtree is his (a rootless one), whatever id he gives it: under
        # his name, never alice's container
        "bob/docker:4f3c2a1b0e9d": ("bob", [3]),
        "bob/pgid:5300": ("bob", [3]),
    }, jobs
    # 300 W: each job's energy is its own GPU's for the time it ran, none of it booked to another
    assert jobs["alice/systemd:train-alice.service"].energy_joules == pytest.approx(300 * 590, rel=0.03)
    assert jobs["alice/pgid:4100"].energy_joules == pytest.approx(300 * 300, rel=0.05)
    assert jobs["bob/pgid:4100"].energy_joules == pytest.approx(300 * 290, rel=0.05)
    bob_on_3 = sum(jobs[k].energy_joules for k in ("bob/pgid:5100", "bob/docker:4f3c2a1b0e9d", "bob/pgid:5300"))
    assert bob_on_3 == pytest.approx(300 * 590, rel=0.03)
    assert jobs["alice/docker:4f3c2a1b0e9d"].energy_joules == pytest.approx(300 * 590, rel=0.03)  # none of bob's
    assert {k: j.unit for k, j in jobs.items() if k.startswith("bob/")} == {
        "bob/pgid:4100": None,
        "bob/pgid:5100": None,
        "bob/docker:4f3c2a1b0e9d": "docker:4f3c2a1b0e9d",
        "bob/pgid:5300": None,
    }
    (tmp_path / "rigmon.toml").write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    shown = jobs_cli(tmp_path, "show", str(jobs["bob/pgid:4100"].id)).stdout
    assert "a login session" in shown and "started by" not in shown, shown


def test_jobs_show_labels_busy_time_per_gpu_and_keeps_only_its_gpus_alerts(tmp_path):
    """One job on two GPUs, busy on GPU 0 the whole time and on GPU 1 half of it, starved on both
    (100 % busy at 67 of 125 W), on a box whose CPU fan stopped: ``jobs show`` gives each GPU's busy
    time and their sum as GPU time, and the job keeps GpuStarved (its GPUs') but not the host's
    FanStalled, which fired meanwhile."""
    seconds = 900.0

    def modify(t, tick):
        for n, g in enumerate(tick["gpus"]):
            busy = n == 0 or t < seconds / 2
            g["nvmlDeviceGetPowerUsage"] = 67000 if busy else 20000
            g["nvmlDeviceGetEnforcedPowerLimit"] = 125000
            g["nvmlDeviceGetUtilizationRates"] = {"gpu": 100 if busy else 0, "memory": 30}
            g["nvmlDeviceGetComputeRunningProcesses"] = [{"pid": 1111, "usedGpuMemory": 6 << 30}]
            g["nvmlDeviceGetProcessUtilization:0"] = {"nvml_error": "NotSupported"}
        tick["host"]["processes"] = {"1111": dict(PROCESSES["1111"], start=tick["t"] - t - 1000)}  # one process

    host = {"sensors_fans": {"nct6798": [["", 1150], ["", 1200]]}, "processes": {}}
    rec = sc.timeline(seconds, step=STEP, gpus=2, host=host, modify=modify)
    for n, tick in enumerate(rec.ticks):  # the second fan stops after a minute
        if n * STEP >= 60:
            tick["host"]["sensors_fans"] = {"nct6798": [["", 1150], ["", 0]]}
    (tmp_path / "rigmon.toml").write_text(
        f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n[prometheus]\nenabled = false\n'
    )
    config = configmod.load(str(tmp_path / "rigmon.toml"))
    replayed = sc.Replayed(rec, config, recording_time=True)
    fired = set()
    try:
        for offset in rec.offsets():
            replayed.poll(offset)
            fired |= {a.alertname for a in replayed.pipeline.alerts.state.firing}
    finally:
        replayed.close(20)
    assert {"FanStalled", "GpuStarved"} <= fired, fired
    (job,) = json.loads(jobs_cli(tmp_path, "--json").stdout)["jobs"]
    assert job["gpus"] == [0, 1] and job["alerts"] == ["GpuStarved"], job
    by_gpu = job["busy_seconds_by_gpu"]
    assert by_gpu["0"] == pytest.approx(seconds - STEP, abs=STEP) and by_gpu["1"] == pytest.approx(
        seconds / 2, abs=STEP
    )
    assert job["busy_seconds"] == pytest.approx(by_gpu["0"] + by_gpu["1"])
    shown = jobs_cli(tmp_path, "show", str(job["id"]), columns=80)
    busy = next(line for line in shown.stdout.splitlines() if line.split()[:1] == ["busy"])
    assert busy.split(None, 1)[1] == "GPU 0 15m00s, GPU 1 7m30s (22m30s of GPU time in all)", shown.stdout
    assert "FanStalled" not in shown.stdout and "GpuStarved" in shown.stdout


def test_a_rootless_container_with_two_process_groups_is_one_job_of_its_owner(tmp_path):
    """Erin's rootless podman container (under her user@1004.service) runs two process groups
    on GPUs 0 and 1: one job, ``erin/podman:<id>``, on both GPUs, not one per process group."""
    cgroup = "0::/user.slice/user-1004.slice/user@1004.service/user.slice/libpod-" + "e7" * 32 + ".scope/container\n"

    def modify(t, tick):
        processes = {}
        for n, pid in enumerate((6100, 6200)):
            processes[str(pid)] = {
                "user": "erin",
                "uid": 1004,
                "cmdline": "python train.py",
                "cgroup": cgroup,
                "ppid": 1,
                "pgid": pid,
                "sid": pid,
                "start": tick["t"] - t - 5,
            }
            tick["gpus"][n]["nvmlDeviceGetComputeRunningProcesses"] = [{"pid": pid, "usedGpuMemory": 4 << 30}]
            tick["gpus"][n]["nvmlDeviceGetProcessUtilization:0"] = {"nvml_error": "NotSupported"}
        tick["host"] = {"processes": processes}

    rec = sc.timeline(120, step=10, gpus=2, modify=modify)
    config = configmod.parse({"daemon": {"state_dir": str(tmp_path / "state")}, "prometheus": {"enabled": False}})
    running = replay(rec, config, range(len(rec.ticks)))
    assert list(running) == ["erin/podman:e7e7e7e7e7e7"], running
    from rigmon.sinks.jobs import ledger_path, load

    (job,) = [j for j in load(ledger_path(config.daemon.state_dir)) if j.key == "erin/podman:e7e7e7e7e7e7"]
    assert sorted(job.gpus) == [0, 1] and job.user == "erin" and job.unit == "podman:e7e7e7e7e7e7"


def test_an_energy_counter_that_stands_still_at_692_w_books_the_integrated_energy_and_says_so(tmp_path, caplog):
    """A job of 2 min 44 s on a GPU at 692 W whose energy counter never moves (a driver's fault):
    the GPU's ``energy_counter_stuck`` reading says so (on /metrics too), the log says it once, not
    at every poll, and the job books the power integrated over its time (113 kJ), marked
    estimated."""
    seconds = 164

    def modify(t, tick):
        g = tick["gpus"][0]
        g["nvmlDeviceGetPowerUsage"] = 692_000 + 150 * (t % 3)  # as a real reading, never twice the same
        g["nvmlDeviceGetUtilizationRates"] = {"gpu": 100, "memory": 30}
        g["nvmlDeviceGetTotalEnergyConsumption"] = 73_208_040  # mJ: standing still
        mine = t < seconds
        g["nvmlDeviceGetComputeRunningProcesses"] = [{"pid": 104, "usedGpuMemory": 1 << 30}] if mine else []

    rec = sc.timeline(seconds + 120, 1, gpus=2, modify=modify)
    config = configmod.parse(
        {
            "daemon": {"state_dir": str(tmp_path / "state")},
            "prometheus": {"enabled": False},
            "jobs": {"end_after": "30s"},
        }
    )
    replayed = sc.Replayed(rec, config, recording_time=True)
    offsets = rec.offsets()
    try:
        with caplog.at_level(logging.INFO, logger="rigmon"):
            for i in range(len(rec.ticks)):
                replayed.poll(offsets[i])
                g0, g1 = replayed.daemon.pipeline.latest.gpus
                assert g1.energy_counter_stuck is False  # its counter moves
                if i == 10:
                    assert g0.energy_counter_stuck is False  # 7 kJ since it last moved: not yet said
        assert g0.energy_counter_stuck is True
        metrics = replayed.metrics()
        assert 'rigmon_gpu_energy_counter_stuck{gpu="0"' in metrics and 'stuck{gpu="1"' not in metrics
    finally:
        replayed.close(20)
    said = [r.getMessage() for r in caplog.records if "stands still" in r.getMessage()]
    assert len(said) == 1 and "GPU 0" in said[0] and "692 W" in said[0], said
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "jobs", "--all", "--json", "--config", str(_toml(tmp_path, config))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    (job,) = [j for j in json.loads(done.stdout)["jobs"] if j["gpus"] == [0]]
    assert job["energy_estimated"], job
    assert abs(job["energy_joules"] - 692 * seconds) <= 0.03 * 692 * seconds, job["energy_joules"]
