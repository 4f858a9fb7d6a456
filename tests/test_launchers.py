"""A job is what its owner launched: a real ``torchrun`` DDP run (each worker in a session of its
own) is one job on both its GPUs, as is an ``mp.spawn`` run; two unrelated processes are two.
The processes are real (CPU torch, gloo), NVML's answers about them replayed; ``rigmon record``
keeps their ancestors so that ``rigmon run --replay --speed`` books the same jobs."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import scenarios as sc
from servers import free_port, wait_for

from rigmon.config import schema as configmod
from rigmon.readers.host import SystemHost
from rigmon.readers.procs import launcher_of

pytest.importorskip("torch")

WORKER = """
import os, sys, time
def work(out, stop):
    open(os.path.join(out, f"pid-{os.getpid()}"), "w").write("")
    while not os.path.exists(stop):
        time.sleep(0.1)
"""
TORCHRUN = (
    WORKER
    + """
import torch.distributed as dist
dist.init_process_group("gloo")
work(sys.argv[1], sys.argv[2])
dist.destroy_process_group()
"""
)
SPAWN = (
    WORKER
    + """
import torch.multiprocessing as mp
def rank(i, out, stop):
    work(out, stop)
if __name__ == "__main__":
    mp.spawn(rank, args=(sys.argv[1], sys.argv[2]), nprocs=2)
"""
)


def _launch(tmp_path, command, workers):
    """``command`` started as a shell's job would be (a session of its own); the PIDs of its
    ``workers`` workers once each has written its file."""
    out, stop = tmp_path / "out", tmp_path / "stop"
    out.mkdir()
    proc = subprocess.Popen(
        [*command, str(out), str(stop)],
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: len(list(out.iterdir())) >= workers or proc.poll() is not None, 120, what="the workers")
    assert proc.poll() is None, "the launcher died"
    return proc, sorted(int(p.name.removeprefix("pid-")) for p in out.iterdir()), stop


@pytest.fixture
def torchrun(tmp_path):
    (tmp_path / "ddp.py").write_text(TORCHRUN)
    launcher = Path(sys.executable).with_name("torchrun")  # the console script, as people type it
    command = [str(launcher)] if launcher.exists() else [sys.executable, "-m", "torch.distributed.run"]
    proc, workers, stop = _launch(tmp_path, [*command, "--standalone", "--nproc_per_node", "2", "ddp.py"], 2)
    yield proc.pid, workers
    stop.touch()
    try:
        proc.wait(30)
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None


def on_gpus(pids, seconds=20.0, step=1.0):
    """A 2-GPU recording where PID ``pids[i]`` computes on GPU i (i.e., as NVML would say)."""

    def modify(t, tick):
        for n, g in enumerate(tick["gpus"]):
            g["nvmlDeviceGetComputeRunningProcesses"] = [{"pid": p, "usedGpuMemory": 1 << 30} for p in pids[n::2]]

    return sc.timeline(seconds, step, gpus=2, modify=modify)


def live_jobs(tmp_path, recording) -> dict[str, set[int]]:
    """The daemon's ledger over the recording's ticks, the processes read from this box's /proc."""
    config = configmod.parse({"daemon": {"state_dir": str(tmp_path / "state")}, "prometheus": {"enabled": False}})
    replayed = sc.Replayed(recording, config, recording_time=True, host_backend=SystemHost())
    try:
        for offset in recording.offsets():
            replayed.poll(offset)
        return {key: set(job.gpus) for key, job in replayed.daemon.pipeline.jobs.running.items()}
    finally:
        replayed.close()


def test_a_torchrun_ddp_run_is_one_job_on_both_gpus(torchrun, tmp_path):
    agent, workers = torchrun
    assert len(workers) == 2 and all(Path(f"/proc/{w}").exists() for w in workers)
    # torch's elastic agent gives each worker a session of its own: no shared process group
    assert len({os.getpgid(w) for w in workers}) == 2
    jobs = live_jobs(tmp_path, on_gpus(workers))
    assert jobs == {f"root/torchrun:{agent}": {0, 1}}, jobs


def test_an_mp_spawn_run_is_one_job_and_two_unrelated_processes_are_two(tmp_path):
    (tmp_path / "spawn.py").write_text(SPAWN)
    main, workers, stop = _launch(tmp_path, [sys.executable, "spawn.py"], 2)
    try:
        assert live_jobs(tmp_path, on_gpus(workers)) == {f"root/pgid:{main.pid}": {0, 1}}
    finally:
        stop.touch()
        main.wait(30)
    alone = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        for _ in range(2)
    ]
    try:
        jobs = live_jobs(tmp_path / "two", on_gpus([p.pid for p in alone]))
        assert jobs == {f"root/pgid:{alone[0].pid}": {0}, f"root/pgid:{alone[1].pid}": {1}}, jobs
    finally:
        for p in alone:
            p.kill()
            p.wait()


def _daemon_jobs(tmp_path, recording_path, speed, until, timeout):
    """``rigmon run --replay … --speed N`` until ``until(jobs)`` holds; (jobs, seconds it took)."""
    state = tmp_path / "replayed-state"
    config = tmp_path / "replayed.toml"
    config.write_text(f'[daemon]\ninterval = 5\nstate_dir = "{state}"\n')
    started = time.monotonic()
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rigmon",
            "run",
            "--config",
            str(config),
            "--replay",
            str(recording_path),
            "--speed",
            str(speed),
            "--port",
            str(free_port()),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    jobs = []

    from servers import replay_state

    reading = tmp_path / "replayed-read.toml"  # the replay's own ledger
    reading.write_text(f'[daemon]\nstate_dir = "{replay_state(state, recording_path)}"\n')

    def done():
        nonlocal jobs
        listed = subprocess.run(
            [sys.executable, "-m", "rigmon", "jobs", "--json", "--config", str(reading)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        jobs = json.loads(listed.stdout)["jobs"] if listed.returncode == 0 and listed.stdout else []
        return until(jobs)

    try:
        wait_for(done, timeout, interval=0.5, what="the replayed jobs")
        took = time.monotonic() - started
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=30)
    assert daemon.returncode == 0, err
    return jobs, took


def test_record_keeps_the_launcher_and_a_fast_replay_books_the_same_job(torchrun, tmp_path):
    agent, workers = torchrun
    nvml = sc.write(on_gpus(workers), tmp_path / "nvml.rec.jsonl")
    recorded = tmp_path / "box.rec.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rigmon",
            "record",
            "--replay",
            str(nvml),
            "--live-host",
            "--seconds",
            "3",
            "--interval",
            "0.5",
            "--out",
            str(recorded),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    processes = {}
    for line in recorded.read_text().splitlines():
        processes.update(json.loads(line).get("host", {}).get("processes", {}))
    assert launcher_of(processes[str(agent)]["cmdline"]) == "torchrun"  # the launcher, recorded
    live = live_jobs(tmp_path, on_gpus(workers))
    jobs, _ = _daemon_jobs(tmp_path, recorded, 20, lambda jobs: jobs and set(jobs[0]["gpus"]) == {0, 1}, 120)
    assert {j["job"]: set(j["gpus"]) for j in jobs} == live == {f"root/torchrun:{agent}": {0, 1}}
    assert "torch" in jobs[0]["command"]  # torchrun's, or python -m torch.distributed.run's


def test_speed_60_replays_sixty_times_as_fast(tmp_path):
    """20 minutes recorded (a tick every 10 s) with one job from 2 to 17 min: at --speed 60 the
    daemon books it in about 16 s, with the recording's durations."""

    def modify(t, tick):
        running = 120 <= t < 1020
        tick["gpus"][0]["nvmlDeviceGetComputeRunningProcesses"] = (
            [{"pid": 4242, "usedGpuMemory": 1 << 30}] if running else []
        )
        tick["host"] = {
            "processes": {
                "4242": {
                    "user": "alice",
                    "uid": 1000,
                    "cmdline": "python train.py",
                    "cgroup": "0::/user.slice\n",
                    "ppid": 1,
                    "pgid": 4242,
                    "sid": 4242,
                    "start": 1.0,
                }
            }
            if running
            else {}
        }

    recording = sc.write(sc.timeline(1200, 10, modify=modify), tmp_path / "twenty.rec.jsonl")
    jobs, took = _daemon_jobs(tmp_path, recording, 60, lambda jobs: jobs and not jobs[0]["running"], 120)
    (job,) = jobs
    ratio = (1020 + 30) / took  # recording seconds to the job's end (and jobs.end_after) per real second
    print(f"--speed 60: {1020 + 30} s of recording in {took:.1f} s, {ratio:.1f}x")
    assert job["job"] == "alice/pgid:4242" and job["seconds"] == pytest.approx(900, abs=20)
    assert 40 <= ratio <= 66, (took, ratio)


@pytest.mark.parametrize("speed", ["1e-300", "1e308", "0", "-1", "nan"])
def test_a_speed_past_its_range_is_one_line_exit_2(speed):
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "run", "--demo", "--speed", speed, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "--speed" in done.stderr, done.stderr


def test_speed_without_a_replay_is_refused(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "run", "--speed", "20", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--speed goes only with --replay" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
