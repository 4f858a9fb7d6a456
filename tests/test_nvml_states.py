"""Never blind in silence: the states a real box's NVML gets into, met through the stand-in
libnvidia-ml.so.1 (tests/stub_nvml), whose control file moves it from one to another while
rigmon runs: nvmlInit failing as a driver upgraded under its loaded module, a module that did
not load and a unit without device access fail it, and mended; MIG with two instances and a
process in each; the clock-event reasons R570 added; a GPU whose PCI device is runtime-suspended
(a sysfs tree laid out as the kernel's); and the bindings rigmon may meet: the oldest
nvidia-ml-py it accepts, one without the deprecated wrappers, and the old pynvml package over it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import nvml_stub
import pytest
from servers import Rigmon, http_get, metric_at, wait_for

ROOT = Path(__file__).resolve().parents[1]
UUIDS = ("GPU-3090aaaa-0000-4000-8000-000000000000", "GPU-1660bbbb-0000-4000-8000-000000000001")
# what the stand-in's two GPUs are, as known.json keeps them
KNOWN = {
    "gpus": [
        [UUIDS[0], 0, "NVIDIA GeForce RTX 3090", "00000000:01:00.0"],
        [UUIDS[1], 1, "NVIDIA GeForce GTX 1660 SUPER", "00000000:02:00.0"],
    ]
}
# each nvmlInit failure, and the words of the fix doctor and the alert give for it
FAILURES = {
    "DriverNotLoaded": "sudo modprobe nvidia",
    "LibRmVersionMismatch": "reboot, or stop what holds the GPUs and reload the modules",
    "NoPermission": "DeviceAllow=char-nvidiactl",
}


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """The current driver's stand-in library: the directory for LD_LIBRARY_PATH."""
    return nvml_stub.build("580", tmp_path_factory.mktemp("nvml"))


def environment(library: Path, control: Path, **more) -> dict:
    return {**os.environ, "LD_LIBRARY_PATH": str(library), "RIGMON_NVML_STUB": str(control), **more}


def control(path: Path, **state) -> Path:
    """The stand-in's control file: one key=value a line."""
    path.write_text("".join(f"{k}={v}\n" for k, v in state.items()))
    return path


def rigmon(env: dict, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rigmon", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def firing(url: str) -> list[tuple[str, str]]:
    """(alertname, gpu label) of each alert firing on a daemon's /metrics."""
    body = http_get(url, {"Accept": "text/plain"})[1].decode()
    out = []
    for line in body.splitlines():
        if line.startswith("rigmon_alert_active{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            out.append((labels["alertname"], labels.get("gpu", "")))
    return sorted(out)


@pytest.mark.parametrize("knew", [False, True], ids=["fresh", "knew-two-gpus"])
@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_nvml_that_cannot_start_pages_and_its_mend_is_read_without_a_restart(failure, knew, library, tmp_path):
    """Each nvmlInit failure raises the critical NvmlUnavailable within 30 s of start, on a fresh
    state directory and on one that knew the two GPUs (then GpuMissing for each as well); doctor
    gives the fix that fits; once the library answers again the GPUs are read, the alerts
    resolve, and the daemon never restarted."""
    state = tmp_path / "state"
    state.mkdir()
    if knew:
        (state / "known.json").write_text(json.dumps(KNOWN))
    ctl = control(tmp_path / "nvml.ctl", init=failure)
    env = environment(library, ctl)
    daemon = Rigmon(tmp_path, None, '[daemon]\ninterval = 0.5\n[gpu]\nnvml_retry = "2s"\n', env=env)
    try:
        daemon.wait_ready()
        expected = [("NvmlUnavailable", "")] + ([("GpuMissing", "0"), ("GpuMissing", "1")] if knew else [])
        wait_for(lambda: sorted(firing(daemon.url)) == sorted(expected), 30, what=f"{expected} to fire")
        assert daemon.metric("rigmon_nvml_up") == 0 and daemon.metric("rigmon_gpus", '{state="answering"}') == 0
        assert metric_at(daemon.url, "rigmon_nvml_error_info", f'{{error="{failure}"}}') == 1
        page = json.loads(http_get(daemon.url.replace("/metrics", "/api/state"))[1])
        assert page["nvml"]["error"] == failure and FAILURES[failure] in page["nvml"]["fix"]
        assert [g["uuid"] for g in page["missing_gpus"]] == (list(UUIDS) if knew else [])
        doctor = rigmon(env, "doctor", "--config", str(daemon.config))
        assert FAILURES[failure] in " ".join(doctor.stdout.split()), doctor.stdout
        assert "install the NVIDIA driver" not in doctor.stdout  # the advice for no driver is not this one's
        pid = daemon.proc.pid
        control(ctl)  # mended: nvmlInit answers
        wait_for(lambda: daemon.metric("rigmon_gpus", '{state="answering"}') == 2, 30, what="the GPUs read again")
        wait_for(lambda: firing(daemon.url) == [], 30, what="the alerts to resolve")
        assert daemon.metric("rigmon_nvml_up") == 1
        assert daemon.metric("rigmon_gpu_power_watts", f'{{gpu="0",uuid="{UUIDS[0]}"}}') == 312.0
        assert daemon.proc.pid == pid and daemon.proc.poll() is None
        assert "NVML answers again" in daemon.output()
    finally:
        assert daemon.stop() == 0
    told = daemon.output()
    assert told.count("NVML cannot start: ") == 1, told  # said once, not at every try
    assert "Traceback" not in told


def test_a_box_without_the_driver_that_never_had_gpus_is_quiet(tmp_path):
    """This machine: no libnvidia-ml at all. No alert; status says there are no GPUs and why."""
    daemon = Rigmon(tmp_path, None, '[daemon]\ninterval = 0.3\n[gpu]\nnvml_retry = "1s"\n')
    try:
        daemon.wait_ready()
        daemon.wait_polls(12)  # a few tries of NVML too
        assert firing(daemon.url) == []
        assert metric_at(daemon.url, "rigmon_nvml_error_info", '{error="LibraryNotFound"}') == 1
    finally:
        assert daemon.stop() == 0


def test_mig_is_said_and_its_instances_read(library, tmp_path):
    """GPU 0 in MIG mode with two 3g.40gb instances and a process in each: status, status --json,
    /metrics, the page's state and doctor say MIG is on; each instance's memory and processes
    are read, each process with its instance; nothing pages for what MIG hides."""
    env = environment(library, control(tmp_path / "nvml.ctl", mig=1))
    text = rigmon(env, "status")
    assert text.returncode == 0, text.stderr
    assert "GPU 0  MIG mode on, 2 instance(s); NVML gives no utilisation in MIG mode" in text.stdout
    assert re.search(r"GI 1 CI 0\s+3g\.40gb\s+2\.0/40\.0 GiB\s+1 process", text.stdout), text.stdout
    row = next(line for line in text.stdout.splitlines() if line.startswith("0 "))
    assert " MIG " in row  # the utilisation column says why it is empty
    state = json.loads(rigmon(env, "status", "--json").stdout)
    gpu0 = state["gpus"][0]
    assert state["gpu_info"][0]["mig_enabled"] is True and state["gpu_info"][0]["mig_pending"] is True
    assert [
        (m["gpu_instance"], m["profile"], m["memory_used_bytes"], m["processes"]) for m in gpu0["mig_instances"]
    ] == [
        (1, "3g.40gb", 2 << 30, 1),
        (2, "3g.40gb", 1 << 30, 1),
    ]
    assert [(p["pid"], p["gpu_instance"], p["compute_instance"]) for p in gpu0["processes"]] == [
        (4242, 1, 0),
        (4343, 2, 0),
    ]
    assert gpu0["utilization_gpu_ratio"] is None and state["gpus"][1]["mig_instances"] is None
    doctor = rigmon(env, "doctor")
    flat = " ".join(doctor.stdout.split())
    assert "GPU 0: MIG mode is on (2 instance(s)): NVML gives no GPU utilisation" in flat
    assert "MIG mode is on (GPU 0): NVML gives no GPU utilisation" not in flat  # GPU 1 still gives it
    daemon = Rigmon(tmp_path, None, "[daemon]\ninterval = 0.5\n", env=env)
    try:
        daemon.wait_ready()
        daemon.wait_polls(3)
        metrics = http_get(daemon.url, {"Accept": "text/plain"})[1].decode()
        found = re.findall(r"^rigmon_gpu_settings_info\{(.*)\} 1\.0$", metrics, re.M)
        (settings,) = [labels.split(",") for labels in found if 'gpu="0"' in labels.split(",")]
        assert 'mig_enabled="1"' in settings, settings
        instance = f'{{compute_instance="0",gpu="0",gpu_instance="2",profile="3g.40gb",uuid="{UUIDS[0]}"}}'
        assert daemon.metric("rigmon_gpu_mig_memory_used_bytes", instance) == 1 << 30
        assert daemon.metric("rigmon_gpu_mig_memory_total_bytes", instance) == 40 << 30
        assert daemon.metric("rigmon_gpu_mig_processes", instance) == 1
        page = json.loads(http_get(daemon.url.replace("/metrics", "/api/state"))[1])
        assert page["gpus"][0]["mig"]["enabled"] is True and len(page["gpus"][0]["mig"]["instances"]) == 2
        assert firing(daemon.url) == []
    finally:
        assert daemon.stop() == 0


def test_every_clock_event_reason_is_read_exported_and_shown(library, tmp_path):
    """0x200 (board limit) and 0x400 (reliability), R570's, with the SW power cap."""
    env = environment(library, control(tmp_path / "nvml.ctl", reasons=0x604))
    state = json.loads(rigmon(env, "status", "--json").stdout)
    assert state["gpus"][0]["clock_events_active"] == ["sw_power_cap", "board_limit", "reliability"]
    assert "pwr-cap,board-limit,reliability" in rigmon({**env, "COLUMNS": "200"}, "status").stdout
    assert "pwr-cap,+2" in rigmon({**env, "COLUMNS": "120"}, "status").stdout  # the worst one, then a count
    daemon = Rigmon(tmp_path, None, "[daemon]\ninterval = 0.5\n", env=env)
    try:
        daemon.wait_ready()
        daemon.wait_polls(2)
        for reason, active in (("board_limit", 1), ("reliability", 1), ("hw_slowdown", 0)):
            labels = f'{{gpu="1",reason="{reason}",uuid="{UUIDS[1]}"}}'
            assert daemon.metric("rigmon_gpu_clock_event_active", labels) == active, reason
        page = json.loads(http_get(daemon.url.replace("/metrics", "/api/state"))[1])
        assert {"board_limit", "reliability"} <= set(page["gpus"][1]["clock_events"])
    finally:
        assert daemon.stop() == 0


def sysfs_with(tmp_path: Path, states: dict[str, str]) -> Path:
    """A sysfs tree as the kernel lays the GPUs' PCI devices out: each device's directory under
    devices/pci0000:00/ behind its bridge, /sys/bus/pci/devices/<bus> a link to it, with runtime
    power management on (power/control ``auto``) and each one's runtime_status."""
    sys_root = tmp_path / "sys"
    links = sys_root / "bus" / "pci" / "devices"
    links.mkdir(parents=True)
    for n, (bus, status) in enumerate(states.items()):
        device = sys_root / "devices" / "pci0000:00" / f"0000:00:0{n + 1}.0" / bus
        (device / "power").mkdir(parents=True)
        (device / "vendor").write_text("0x10de\n")
        (device / "power" / "control").write_text("auto\n")
        (device / "power" / "runtime_status").write_text(status + "\n")
        (links / bus).symlink_to(os.path.relpath(device, links))
    return sys_root


def test_a_sleeping_gpu_is_asked_nothing_and_read_once_it_wakes(library, tmp_path):
    """GPU 1's PCI device is runtime-suspended (a laptop's idle dGPU): the stand-in's call log
    holds no call on it while it sleeps (NVML answers its handle and bus id from the table
    nvmlInit made); it is shown asleep, nothing pages; once its runtime_status reads active it
    is read like the other."""
    log = tmp_path / "calls.log"
    env = environment(library, control(tmp_path / "nvml.ctl", log=log))
    sys_root = sysfs_with(tmp_path, {"0000:01:00.0": "active", "0000:02:00.0": "suspended"})
    config = f'[daemon]\ninterval = 0.5\n[host]\nsysfs = "{sys_root}"\n'
    daemon = Rigmon(tmp_path, None, config, env=env)
    try:
        daemon.wait_ready()
        daemon.wait_polls(4)
        calls = log.read_text().splitlines()
        assert any(c.startswith("0 ") for c in calls) and not [c for c in calls if c.startswith("1 ")], calls
        assert daemon.metric("rigmon_gpu_asleep", '{gpu="1",uuid=""}') == 1  # who it is: read when it wakes
        assert daemon.metric("rigmon_gpu_asleep", f'{{gpu="0",uuid="{UUIDS[0]}"}}') == 0
        state = json.loads(http_get(daemon.url.replace("/metrics", "/api/state"))[1])
        assert state["gpus"][1]["asleep"] is True and state["gpus"][1]["power_watts"] is None
        assert firing(daemon.url) == []
        (sys_root / "bus" / "pci" / "devices" / "0000:02:00.0" / "power" / "runtime_status").write_text("active\n")
        labels = f'{{gpu="1",uuid="{UUIDS[1]}"}}'
        wait_for(lambda: daemon.metric("rigmon_gpu_power_watts", labels) == 67.0, 20, what="GPU 1 read once awake")
        assert any(c.startswith("1 ") for c in log.read_text().splitlines())
        assert daemon.metric("rigmon_gpu_asleep", labels) == 0
        assert firing(daemon.url) == []
    finally:
        assert daemon.stop() == 0
    assert "GPU 1 (0000:02:00.0) woke" in daemon.output()


# --- the bindings ---------------------------------------------------------------------------------
def bindings_floor() -> str:
    """The oldest nvidia-ml-py rigmon says it works with (pyproject.toml's dependency)."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (floor,) = [d.split(">=")[1] for d in dependencies if d.startswith("nvidia-ml-py>=")]
    return floor


def installed(tmp_path: Path, requirement: str) -> Path:
    """``requirement`` alone (no dependencies) in a directory of its own, to put first on PYTHONPATH."""
    where = tmp_path / re.sub(r"\W", "_", requirement)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            str(where),
            requirement,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return where


def read_both(env: dict) -> dict:
    done = rigmon(env, "status", "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    state = json.loads(done.stdout)
    gpus = {g["index"]: g for g in state["gpus"]}
    assert [gpus[0]["temperature_celsius"], gpus[1]["temperature_celsius"]] == [71.0, 58.0]
    assert [gpus[0]["power_watts"], gpus[1]["power_watts"]] == [312.0, 67.0]
    assert not gpus[0]["lost"] and not gpus[1]["lost"]
    assert [p["pid"] for p in gpus[0]["processes"]] == [4242, 4343]
    return state


@pytest.mark.slow
def test_the_oldest_bindings_rigmon_accepts_read_both_gpus(library, tmp_path):
    """pyproject.toml's floor, installed from PyPI ahead of the venv's own: both GPUs, their
    temperatures through the call the floor has (it has no nvmlDeviceGetTemperatureV), their
    clock events and processes; nothing lost."""
    floor = bindings_floor()
    where = installed(tmp_path, f"nvidia-ml-py=={floor}")
    env = environment(library, control(tmp_path / "nvml.ctl", reasons=4), PYTHONPATH=str(where))
    probe = rigmon(env, "--version")
    assert probe.returncode == 0
    shown = subprocess.run(
        [sys.executable, "-c", "import pynvml; print(pynvml.__file__)"], capture_output=True, text=True, env=env
    )
    assert shown.stdout.strip() == str(where / "pynvml.py")
    state = read_both(env)
    assert state["gpus"][0]["clock_events_active"] == ["sw_power_cap"]


DEPRECATED = (
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetSupportedClocksThrottleReasons",
)


@pytest.mark.parametrize("gone", [(name,) for name in DEPRECATED] + [DEPRECATED], ids=[*DEPRECATED, "all"])
def test_bindings_without_the_deprecated_wrappers_read_every_gpu(gone, library, tmp_path):
    """nvidia-ml-py marks nvmlDeviceGetTemperature and the …ClocksThrottleReasons wrappers for
    removal in CUDA 14.0: with each gone, and all, the newer calls read both GPUs, and no GPU
    is lost."""
    env = environment(library, control(tmp_path / "nvml.ctl", reasons=4))
    script = (
        "import sys, pynvml\n"
        f"for name in {gone!r}: delattr(pynvml, name)\n"
        "from rigmon.commands import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "status", "--json"], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    gpus = json.loads(done.stdout)["gpus"]
    assert [g["temperature_celsius"] for g in gpus] == [71.0, 58.0] and not any(g["lost"] for g in gpus)
    assert [g["clock_events_active"] for g in gpus] == [["sw_power_cap"], ["sw_power_cap"]]


def test_a_missing_wrapper_costs_its_reading_only(library, tmp_path):
    """A binding without a call rigmon reads (nvmlDeviceGetPowerUsage, with no older one to
    stand in): that reading is empty and doctor names the bindings; the GPU is read on."""
    env = environment(library, control(tmp_path / "nvml.ctl"))
    script = (
        "import sys, pynvml\n"
        "del pynvml.nvmlDeviceGetPowerUsage\n"
        "from rigmon.commands import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )

    def run(*args):
        return subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=60
        )

    gpus = json.loads(run("status", "--json").stdout)["gpus"]
    assert [g["power_watts"] for g in gpus] == [None, None]
    assert [g["temperature_celsius"] for g in gpus] == [71.0, 58.0] and not any(g["lost"] for g in gpus)
    doctor = " ".join(run("doctor").stdout.split())
    assert "pip install -U nvidia-ml-py reads them): nvmlDeviceGetPowerUsage" in doctor, doctor


@pytest.mark.slow
def test_the_old_pynvml_package_over_the_bindings_is_a_one_line_error(library, tmp_path):
    """pynvml 11.x (a package of its own copy of the bindings) ahead of nvidia-ml-py: rigmon
    says so in one line with the fix, exit 2, no traceback."""
    where = installed(tmp_path, "pynvml==11.5.3")
    env = environment(library, control(tmp_path / "nvml.ctl"), PYTHONPATH=str(where))
    config = tmp_path / "rigmon.toml"
    config.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    for args in (("status",), ("run", "--config", str(config), "--port", "0")):
        done = rigmon(env, *args)
        assert done.returncode == 2, (args, done.stderr)
        # one message (wrapped to the terminal: what follows its first line is indented), after
        # what the daemon logged before it (its config)
        lines = [line for line in done.stderr.strip().splitlines() if not re.match(r"\d{4}-\d\d-\d\d ", line)]
        assert [line for line in lines if not line.startswith(" ")] == lines[:1], done.stderr
        said = " ".join(" ".join(lines).split())
        assert "Traceback" not in said and said.startswith("rigmon: the module pynvml comes from the old 'pynvml'")
        assert "package 11.5.3" in said and "pip uninstall -y pynvml" in said


def test_the_page_says_what_nvml_and_the_gpus_are_in(library, tmp_path, chromium):
    """In a real Chromium: a MIG GPU's card says MIG is on and lists its instances, a sleeping
    GPU's card says it sleeps; on a box whose NVML cannot start the page says why and how to
    mend it, in red, and lists the GPUs it had as missing, where it would show "no GPU"."""
    log = tmp_path / "calls.log"
    env = environment(library, control(tmp_path / "nvml.ctl", mig=1, log=log))
    sys_root = sysfs_with(tmp_path, {"0000:01:00.0": "active", "0000:02:00.0": "suspended"})
    daemon = Rigmon(tmp_path, None, f'[daemon]\ninterval = 0.5\n[host]\nsysfs = "{sys_root}"\n', env=env)
    try:
        daemon.wait_ready()
        chromium.open(daemon.url.replace("/metrics", "/"), 1400)
        card = "document.querySelector('#gpu-{}') ? document.querySelector('#gpu-{}').innerText : ''"
        wait_for(lambda: "MIG mode on: 2 instance(s)" in chromium.js(card.format(0, 0)), 30, what="GPU 0's MIG")
        text = chromium.js(card.format(0, 0))
        assert "GI 1/CI 0 3g.40gb: 2.0 / 40 GiB, 1 process(es)" in text and "util n/a in MIG mode" in text, text
        assert "asleep" in chromium.js(card.format(1, 1))
        assert "MIG on: 2 instance(s)" in chromium.js("document.getElementById('ov-0').innerText")
    finally:
        assert daemon.stop() == 0
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "state").mkdir()
    (broken / "state" / "known.json").write_text(json.dumps(KNOWN))
    env = environment(library, control(tmp_path / "nvml.ctl", init="LibRmVersionMismatch"))
    daemon = Rigmon(broken, None, "[daemon]\ninterval = 0.5\n", env=env)
    try:
        daemon.wait_ready()
        chromium.open(daemon.url.replace("/metrics", "/"), 1400)
        note = "document.getElementById('gpus-none') ? document.getElementById('gpus-none').innerText : ''"
        wait_for(lambda: "NVML cannot start (LibRmVersionMismatch)" in chromium.js(note), 30, what="the NVML note")
        text = chromium.js(note)
        assert "To mend it: reboot, or stop what holds the GPUs" in text and "MISSING" in text, text
        assert chromium.js("getComputedStyle(document.getElementById('gpus-none')).color") == "rgb(165, 15, 21)"
        tiles = chromium.js(
            "[...document.querySelectorAll('#overview .ov')].map(t => t.dataset.state + ':' + t.innerText)"
        )
        assert tiles[0].startswith("critical:NVML") and sum(t.startswith("lost:GPU") for t in tiles) == 2, tiles
    finally:
        assert daemon.stop() == 0
