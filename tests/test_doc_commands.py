"""Every command README and docs/ show, run: each line of a ```sh block and each ``$`` line of
an output block (tests/readme.py finds them). A command added to the docs that no runner
here knows fails the first test, so none is shown that the tests never ran.

They run as written, by bash, from a scratch copy of the checkout with the installed rigmon
first on PATH and as ``.venv``, in a private mount namespace whose /var/lib is the test's own
(the built-in state directory is never this box's). What this machine cannot do as written
is changed in the open, by SHORTER: durations cut to seconds, ports to free ones, and the pip
lines run with ``--dry-run`` (they would fetch several GB of PyTorch). README's first command,
its service commands and tests/run are run by their own tests, named in ELSEWHERE."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import readme
import scenarios as sc
from servers import free_port, http_get, wait_for

from rigmon.config.box import Box

ROOT = Path(__file__).resolve().parents[1]

# run by a test of their own, from the same block of the same file
ELSEWHERE = {
    "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/rigmon run": (
        "test_install.py::test_readme_first_command_installs_and_runs_the_daemon"
    ),
    "tests/run": "test_tests_run.py (the quick tier from a clean clone) and CI, which runs it whole",
    **{
        c: "test_install.py::test_the_cpu_burn_in_line_cannot_take_a_newer_cuda_build (PyTorch's index, on disk)"
        for _, c in readme.commands()
        if "download.pytorch.org" in c
    },
    **{
        line: "test_systemd.py (the block, as written, under a real systemd)"
        for line in readme.sh_blocks("Running as a service")[0].splitlines()
    },
}

# what is changed to run here: (pattern, replacement), applied in order
SHORTER = [
    (r"--minutes \d+", "--minutes 0.1"),
    (r"--hours 1\b", "--minutes 0.1"),
    (r"--seconds 120", "--seconds 3"),
    (r"--at 60", "--at 2"),
    (r"^\.venv/bin/pip install (.*)$", r".venv/bin/pip install --dry-run \1"),
]

# exit codes here (no GPU; torch's CPU build): the burn-ins are seconds long, so the loss
# misses its floor (1), and GPUs the box lacks cannot run (2)
EXITS = {"--gpus 0,2": {2}, "burnin": {0, 1}, "config check bad.toml": {2}}


def normal(command: str) -> str:
    """README's ``.venv/bin/rigmon`` is the docs' ``rigmon``."""
    return command.removeprefix(".venv/bin/") if command.startswith(".venv/bin/rigmon ") else command


def test_every_command_in_the_docs_has_a_runner():
    commands = readme.commands()
    unknown = [c for _, c in commands if c not in ELSEWHERE and not _runner(normal(c))]
    assert unknown == [], f"commands in the docs that no test runs: {unknown}"
    print(
        f"{len(commands)} commands shown ({len({normal(c) for _, c in commands})} distinct), "
        f"{sum(c in ELSEWHERE for _, c in commands)} of them run by their own tests"
    )


def _runner(command: str):
    if command.startswith(("rigmon run ", "curl ")):
        return "daemon"
    if command.startswith(("rigmon ", ".venv/bin/pip install ")):
        return "once"
    return None


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A copy of the checkout, .venv the installed rigmon's, /var/lib a directory of its own
    with a ledger of one job, and the files the docs' commands take."""
    base = tmp_path_factory.mktemp("docs")
    work = base / "rigmon"
    for name in subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines():
        if (ROOT / name).is_file():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, work / name)
    (work / ".venv").symlink_to(sys.prefix)
    varlib = base / "varlib"
    (varlib / "rigmon").mkdir(parents=True, mode=0o700)
    _a_job(varlib / "rigmon")
    _a_baseline(varlib / "rigmon")
    sc.write(sc.timeline(3600, step=60), work / "day.rec.jsonl")  # an hour, a tick a minute
    (work / "bad.toml").write_text("[daemon]\nintervall = 1\n[prometheus]\nport = 70000\n")
    return work, varlib


def _a_job(state: Path):
    from test_ledger_damage import _sample_with_a_process

    from rigmon.config import schema as configmod
    from rigmon.sinks.jobs import JobLedger

    box_config = configmod.parse({"daemon": {"state_dir": str(state)}})
    ledger = JobLedger(box_config.jobs, Box.of(box_config, "box"))
    ledger.book(_sample_with_a_process())
    ledger.close()


def _a_baseline(state: Path):
    """Cooling baselines, as the daemon keeps them after four days of a GPU training by day."""
    from test_cooling import samples

    from rigmon.readers.cooling import Detector

    detector = Detector(state / "cooling.json")
    for sample in samples(sc.cooling_days(4, gpus=1)):
        detector.annotate(sample)
    detector.close()


def shell(scratch, command: str, **popen) -> subprocess.Popen:
    work, varlib = scratch
    for pattern, replacement in SHORTER:
        command = re.sub(pattern, replacement, command)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "RIGMON"))}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    if os.geteuid() != 0:
        pytest.skip("a private /var/lib needs root")
    wrapped = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "bash",
        "-c",
        'mount --bind "$1" /var/lib && exec bash -c "$0"',
        command,
        str(varlib),
    ]
    return subprocess.Popen(
        wrapped,
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **popen,
    )


def run(scratch, command: str, timeout=300) -> tuple[int, str]:
    proc = shell(scratch, command)
    try:
        out = proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc.returncode, out


ONCE = sorted(
    {normal(c) for _, c in readme.commands() if _runner(normal(c)) == "once" and c not in ELSEWHERE},
    key=lambda c: ("record" not in c, "baseline" in c, "reset" in c, c.endswith("reset"), c),
)  # the recording first, the burn-in's baseline and the cooling ones last (all of them reset at the end)


@pytest.mark.parametrize("command", ONCE)
def test_the_command_runs_as_shown(scratch, command):
    work, _ = scratch
    if "--baseline" in command:  # the earlier run it names: one made here
        earlier = sorted(work.glob("rigmon-burnin-*/burnin.json"))
        assert earlier, "no burn-in ran before"
        target = work / "rigmon-burnin-rig-20261101"
        if not target.exists():
            shutil.copytree(earlier[0].parent, target)
    code, out = run(scratch, command)
    assert "Traceback" not in out, out[-3000:]
    expected = next((codes for key, codes in EXITS.items() if key in command), {0})
    assert code in expected, f"{command}: exit {code}\n{out[-3000:]}"
    if "pip install" in command:
        assert re.search(r"Would install .*rigmon-", out), out[-2000:]
    shown = [b for _, b in readme.blocks("") if b.startswith(f"$ {command}\n")]
    for block in shown:  # what the docs print is what it prints, but for the time, host and widths
        _same_output(command, block.split("\n", 1)[1], out)


def _same_output(command: str, documented: str, out: str):
    def shape(text):
        lines = [re.sub(r"\s+", " ", line).strip() for line in text.splitlines() if line.strip()]
        lines = [re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?", "TIME", line) for line in lines]
        return [re.sub(r"^rigmon status \S+", "rigmon status HOST", line)[:100] for line in lines]

    if command.startswith("rigmon jobs"):  # other jobs here, and no price: the same columns but COST
        assert shape(out)[0] == shape(documented)[0].replace(" COST", ""), out
        return
    assert shape(out) == shape(documented), f"{command} prints:\n{out}"


DAEMONS = sorted({normal(c) for _, c in readme.commands() if normal(c).startswith("rigmon run ")})


@pytest.mark.parametrize("command", DAEMONS)
def test_the_daemon_command_serves(scratch, command):
    port = free_port()
    proc = shell(scratch, command.replace("--port 9964", f"--port {port} --listen 127.0.0.1"))
    try:
        wait_for(
            lambda: proc.poll() is None and http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)[0] == 200,
            120,
            interval=0.3,
            what=command,
        )
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]


CURLS = [normal(c) for _, c in readme.commands() if normal(c).startswith("curl ")]


def test_the_api_commands_answer_json(scratch):
    port = free_port()
    proc = shell(scratch, f"rigmon run --demo --replay-gpus 2 --listen 127.0.0.1 --port {port}")
    try:
        wait_for(
            lambda: http_get(f"http://127.0.0.1:{port}/api/state", timeout=2)[0] == 200,
            120,
            interval=0.3,
            what="the demo daemon",
        )
        for command in CURLS:

            def answer(command=command):
                code, out = run(scratch, command.replace("localhost:9963", f"127.0.0.1:{port}"), timeout=30)
                assert code == 0, (command, out)
                got = json.loads(out)
                # the history's first polls may still be on their way
                return got if "history" not in command or "gpu0/power_watts" in got["series"] else None

            got = wait_for(answer, 30, interval=0.5, what=command)
            assert got, command
            if "history" in command:
                assert any(k.startswith("gpu1/") for k in got["series"])
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=30)
    assert len(CURLS) == 3
