"""Who holds the GPUs: real processes on this machine (their /proc entries and cgroups), NVML's
answers about them from recordings, the status section, and the bounded process series."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import scenarios as sc

from rigmon.config import schema as configmod
from rigmon.poller import build_poller
from rigmon.readers import procs
from rigmon.readers.host import SystemHost


@pytest.fixture
def training_run(tmp_path):
    """A real process group: a launcher that started a worker (a training run and its rank),
    in a session of its own as a shell's job would be."""
    (tmp_path / "worker.py").write_text("import time\ntime.sleep(120)\n")
    (tmp_path / "train.py").write_text(
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, 'worker.py', '--rank', '0'])\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "train.py", "--epochs", "3"], cwd=tmp_path, start_new_session=True)
    deadline = time.monotonic() + 10
    children = []
    while not children and time.monotonic() < deadline:
        children = [int(p) for p in Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()]
        time.sleep(0.05)
    yield parent.pid, children[0]
    os.killpg(parent.pid, 9)
    parent.wait()


def test_real_processes_have_user_command_and_one_job(training_run):
    parent, child = training_run
    info = procs.parse(procs.raw([parent, child, 999999999]))
    assert {parent, child} <= set(info) and 999999999 not in info  # a PID that is gone is left out
    # beside them, the ancestors that tell their job (up to this session's leader): none is a launcher
    assert all(
        i.job.split("/", 1)[1].startswith(("pgid:", "docker:", "systemd:", "k8s:", "podman:", "slurm:"))
        and i.job.startswith(f"{i.user}/")
        for i in info.values()
    )
    p, c = info[parent], info[child]
    assert p.user == "root" and c.user == "root"
    assert p.command.endswith("train.py --epochs 3") and c.command.endswith("worker.py --rank 0")
    assert p.pgid == parent and c.pgid == parent and c.ppid == parent
    assert p.job == c.job  # the worker's GPU time goes to the run it belongs to
    assert p.job == f"root/{p.unit or f'pgid:{parent}'}"
    assert abs(p.start_time - time.time()) < 60 and c.start_time >= p.start_time


@pytest.mark.skipif(not os.access("/sys/fs/cgroup/pids", os.W_OK), reason="needs a writable pids cgroup (v1)")
def test_a_real_cgroup_names_the_job(training_run):
    parent, child = training_run
    group = Path("/sys/fs/cgroup/pids/rigmon-test-train.service")
    group.mkdir(exist_ok=True)
    try:
        for pid in (parent, child):
            (group / "cgroup.procs").write_text(str(pid))
        info = procs.parse(procs.raw([parent, child]))
        assert info[parent].unit == "systemd:rigmon-test-train.service"
        assert info[child].job == "root/" + info[parent].unit
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            Path("/sys/fs/cgroup/pids/cgroup.procs").write_text(pid)
        group.rmdir()


@pytest.mark.parametrize(
    "cgroup, unit",
    [
        (
            "0::/system.slice/docker-4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b.scope\n",
            "docker:4f3c2a1b0e9d",
        ),
        (
            "12:pids:/docker/4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b\n0::/\n",
            "docker:4f3c2a1b0e9d",
        ),
        (
            "0::/machine.slice/libpod-9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b.scope\n",
            "podman:9a8b7c6d5e4f",
        ),
        (
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_5678.slice/"
            "cri-containerd-aabbccddeeff00112233445566778899aabbccddeeff00112233445566778899.scope\n",
            "k8s:aabbccddeeff",
        ),
        ("0::/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0\n", "slurm:4711"),
        ("0::/system.slice/ollama.service\n", "systemd:ollama.service"),
        # in a user's delegated subtree the names are the user's own: no service, no Slurm job; a
        # rootless container is hers (her own key, owner/podman:<id>), one job for its process groups
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/train.service\n", None),
        (
            "0::/user.slice/user-1002.slice/user@1002.service/app.slice/docker-" + "ab" * 32 + ".scope\n",
            "docker:abababababab",
        ),
        (
            "0::/user.slice/user-1003.slice/user@1003.service/user.slice/libpod-" + "c0" * 32 + ".scope/container\n",
            "podman:c0c0c0c0c0c0",
        ),
        ("0::/user.slice/user-1002.slice/user@1002.service/job_4711/step_0\n", None),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-tmux.scope\n", None),
        ("0::/\n", None),
        ("", None),
    ],
)
def test_the_unit_a_process_runs_in(cgroup, unit):
    assert procs.unit_of(cgroup) == unit


def test_nvml_process_answers_joined_with_real_proc(training_run, tmp_path):
    """The GPU reader's process list from a recording, the host's /proc for who they are."""
    parent, child = training_run
    rec = sc.on_every_gpu(
        sc.h200(),
        nvmlDeviceGetComputeRunningProcesses=[
            {"pid": parent, "usedGpuMemory": 3 << 30},
            {"pid": child, "usedGpuMemory": 5 << 30},
        ],
        nvmlDeviceGetProcessUtilization__0=[
            {"pid": child, "timeStamp": 20, "smUtil": 71, "memUtil": 30, "encUtil": 0, "decUtil": 0},
            {"pid": child, "timeStamp": 10, "smUtil": 5, "memUtil": 1, "encUtil": 0, "decUtil": 0},
        ],
    )
    config = configmod.parse({"gpu": {"xid_events": False}, "host": {"rapl": False}})
    poller = build_poller(config, sc.source(rec, sc.LOAD_AT), host_backend=SystemHost())
    poller.open()
    try:
        sample = poller.poll()
    finally:
        poller.close()
    (gpu,) = sample.gpus
    memory = {p.pid: p.used_memory_bytes for p in gpu.processes}
    assert memory == {parent: 3 << 30, child: 5 << 30}
    assert {p.pid: p.sm_ratio for p in gpu.processes} == {parent: None, child: 0.71}  # the newest sample
    who = {p.pid: p for p in sample.processes}
    assert who[child].user == "root" and who[child].command.endswith("worker.py --rank 0")
    assert who[child].job == who[parent].job


def test_status_shows_who_holds_the_gpus(training_run, tmp_path):
    parent, child = training_run
    rec = sc.on_every_gpu(
        sc.h200().widened(2), nvmlDeviceGetComputeRunningProcesses=[{"pid": parent, "usedGpuMemory": 3 << 30}]
    )
    rec = sc.with_host(rec, processes=SystemHost().processes([parent]))  # as rigmon record stores /proc's answer
    path = sc.write(rec, tmp_path / "r.rec.jsonl")
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "status", "--replay", str(path), "--at", "10"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    head = lines.index("PROCESSES")
    assert lines[head + 1].split() == ["GPU", "PID", "USER", "MEM", "GiB", "SM", "JOB", "COMMAND"]
    rows = lines[head + 2 : head + 4]
    assert all(
        f"{parent}  root" in r and f"root/pgid:{parent}" in r and r.endswith("train.py --epochs 3") for r in rows
    )
    assert max(len(line) for line in lines) <= 120
    as_json = json.loads(
        subprocess.run(
            [sys.executable, "-m", "rigmon", "status", "--replay", str(path), "--at", "10", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    )
    assert [p["pid"] for p in as_json["processes"]] == [parent]
    assert as_json["processes"][0]["user"] == "root" and as_json["gpus"][1]["processes"][0]["pid"] == parent


def test_process_series_are_opt_in_and_bounded(tmp_path):
    """8 GPUs with 3 processes each: the series count with process series off, and on (top 4)."""
    rec = sc.on_every_gpu(
        sc.h200().widened(8),
        nvmlDeviceGetComputeRunningProcesses=[{"pid": 100 + n, "usedGpuMemory": (n + 1) << 30} for n in range(3)],
    )
    counts = {}
    for top in (0, 4):
        config = configmod.parse(
            {
                "daemon": {"state_dir": str(tmp_path / str(top))},
                "prometheus": {"enabled": False},
                "gpu": {"xid_events": False, "process_series": top},
            }
        )
        with sc.Replayed(rec, config, at=sc.LOAD_AT) as replayed:
            replayed.poll()
            text = replayed.metrics()
        counts[top] = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        process_lines = [line for line in text.splitlines() if line.startswith("rigmon_gpu_process_memory_bytes{")]
        assert len(process_lines) == top
        if top:
            assert all('pid="102"' in line for line in process_lines)  # the largest holders
    assert counts[4] - counts[0] == 4


@pytest.mark.parametrize(
    "cmdline, launcher",
    [
        ("/usr/bin/python3 /venv/bin/torchrun --nproc_per_node 8 train.py", "torchrun"),
        ("torchrun --standalone train.py", "torchrun"),
        ("python -m torch.distributed.run --nproc_per_node=2 train.py", "torchrun"),
        ("python3 -m torch.distributed.launch train.py", "torchrun"),
        ("/venv/bin/python /venv/bin/accelerate launch --multi_gpu train.py", "accelerate"),
        ("/venv/bin/python /venv/bin/accelerate config", None),
        ("python -u -m deepspeed.launcher.launch --world_info=e30= train.py", "deepspeed"),
        ("/usr/bin/mpirun -np 4 python train.py", "mpirun"),
        ("mpiexec -n 2 ./a.out", "mpirun"),
        ("horovodrun -np 4 python train.py", "horovodrun"),
        ("srun --gres=gpu:2 python train.py", "srun"),
        ("/usr/lib/ray/raylet --node_ip_address=10.0.0.1", "ray"),
        ("python train.py --launcher torchrun", None),
        ("bash -c torchrun", None),
        ("my-launcher --gpus 2", "my-launcher"),
        ("python -m my.launch train.py", "my.launch"),
    ],
)
def test_launchers_by_their_command_line(cmdline, launcher):
    assert procs.launcher_of(cmdline, ("my-launcher", "my.launch")) == launcher


def test_the_nearest_launcher_names_the_job_and_a_unit_comes_first():
    """Recorded answers: two workers, each its own session, under torchrun under a shell; a third
    under the same torchrun but in a container; one whose parent is unknown."""

    def entry(pid, ppid, cmdline, cgroup="0::/user.slice/user-1000.slice/session-4.scope\n"):
        return {
            "user": "ada",
            "uid": 1000,
            "cmdline": cmdline,
            "cgroup": cgroup,
            "ppid": ppid,
            "pgid": pid,
            "sid": pid,
            "start": 100.0 + pid,
        }

    answer = {
        "10": entry(10, 1, "-bash"),
        "20": entry(20, 10, "/venv/bin/python /venv/bin/torchrun x.py"),
        "31": entry(31, 20, "/venv/bin/python -u x.py"),
        "32": entry(32, 20, "/venv/bin/python -u x.py"),
        "33": entry(33, 20, "python x.py", "0::/system.slice/docker-" + "ab" * 32 + ".scope\n"),
        "40": entry(40, 39, "python y.py"),
    }
    info = procs.parse(answer)
    assert info[31].job == info[32].job == "ada/torchrun:20"
    assert info[31].job_start == 120.0 and "torchrun" in info[31].job_command
    assert info[33].job == "ada/docker:" + "ab" * 6  # the container, whatever launched it
    assert info[40].job == "ada/pgid:40"  # no launcher known above: its process group
    assert info[10].job == "ada/pgid:10"
