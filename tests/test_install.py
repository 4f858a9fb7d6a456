"""rigmon as users get it: the wheel and the sdist carry every file the package needs, the wheel
works from a fresh virtual environment, and README's first command, run as written on a copy
of the checkout, installs rigmon and starts a daemon that answers a scrape."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import readme
from servers import free_port, http_get, wait_for

ROOT = Path(__file__).resolve().parents[1]


def tracked(under: str) -> list[str]:
    done = subprocess.run(["git", "ls-files", under], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip("not a git checkout: cannot list the tracked files")
    return done.stdout.split()


def clean_env(**extra) -> dict:
    """The environment a user's shell has: none of the test run's Python settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    return {**env, **extra}


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=out,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_wheel_and_sdist_carry_every_package_file(dist):
    files = [f for f in tracked("rigmon") if not f.endswith(".py")]
    assert "rigmon/alerts/builtin.toml" in files and "rigmon/data/h200-matmul-load.rec.jsonl" in files
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    with tarfile.open(sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert [f for f in files if f not in in_wheel] == []
    assert [f for f in tracked("rigmon") if f not in in_sdist] == []
    # what README's service set-up installs from an unpacked sdist
    assert [f for f in tracked("systemd") + tracked("deploy") if f not in in_sdist] == []


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_works_outside_the_checkout(dist, tmp_path):
    (wheel,) = dist.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=clean_env())
    done = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rigmon = str(venv / "bin" / "rigmon")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*args):
        done = subprocess.run(
            [rigmon, *args], capture_output=True, text=True, timeout=120, cwd=elsewhere, env=clean_env()
        )
        assert done.returncode == 0, f"rigmon {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    from rigmon import __version__

    assert run("--version").strip() == f"rigmon {__version__}"
    assert "H200" in run("status", "--demo") and "692/700" in run("status", "--demo", "--at", "10")
    assert "FanStalled" in run("rules", "list")
    assert "PowerBudgetExceeded" in run("doctor", "--demo")
    port = free_port()
    (elsewhere / "own.toml").write_text(f'[daemon]\nstate_dir = "{elsewhere / "state"}"\n')  # never the box's
    proc = subprocess.Popen(
        [
            rigmon,
            "run",
            "--demo",
            "--listen",
            "127.0.0.1",
            "--port",
            str(port),
            "--config",
            str(elsewhere / "own.toml"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=elsewhere,
        env=clean_env(),
    )
    try:
        body = wait_for(
            lambda: http_get(f"http://127.0.0.1:{port}/metrics")[1].decode(),
            60,
            what="the installed rigmon to answer a scrape",
        )
        assert "rigmon_gpu_power_watts{" in body and "NVIDIA H200" in body
        assert Path(proc.args[0]).resolve().is_relative_to(venv.resolve())
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=20)[0]
    assert proc.returncode == 0, out


@pytest.mark.slow
def test_readme_first_command_installs_and_runs_the_daemon(tmp_path, default_port):
    """The command exactly as README has it, in a scratch copy of the checkout, by a shell
    with the user's environment: it must leave a daemon answering on the default port."""
    command = readme.sh_blocks("Set up")[0]
    scratch = tmp_path / "rigmon"
    for name in tracked("."):
        target = scratch / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, target)
    if Path("/etc/rigmon/rigmon.toml").exists():
        pytest.skip("this machine has /etc/rigmon/rigmon.toml: the built-in defaults would not apply")
    url = "http://127.0.0.1:9963/metrics"
    try:
        http_get(url, timeout=1)
        pytest.fail("something already answers on rigmon's default port 9963")
    except OSError:
        pass
    log = open(tmp_path / "readme.log", "w+")
    shell = ["bash", "-c", command]
    if os.geteuid() == 0:  # the built-in defaults' state directory, /var/lib/rigmon: a private one, never this box's
        shell = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "bash",
            "-c",
            'mount -t tmpfs tmpfs /var/lib && exec bash -c "$0"',
            command,
        ]
    proc = subprocess.Popen(
        shell, cwd=scratch, stdout=log, stderr=subprocess.STDOUT, env=clean_env(), start_new_session=True
    )
    try:

        def up():
            if proc.poll() is not None:
                log.seek(0)
                raise AssertionError(f"README's command exited {proc.returncode}:\n{log.read()[-4000:]}")
            return http_get(url, timeout=2)

        status, body = wait_for(up, 600, interval=0.5, what="README's first command to serve metrics")
        assert status == 200
        text = body.decode()
        assert "rigmon_polls_total" in text and 'rigmon_reader_success{reader="host"} 1.0' in text
        assert (scratch / ".venv" / "bin" / "rigmon").exists()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log.seek(0)
    output = log.read()
    assert proc.returncode == 0, output[-3000:]
    assert "NVML" in output  # no GPU here: the daemon ran on without one and said why


def _fake_torch(index: Path, version: str) -> None:
    """A wheel named torch ``version`` in a simple index (PEP 503, as files) at ``index``."""
    name = f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    (index / "torch").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(index / "torch" / name, "w") as whl:
        whl.writestr("torch/__init__.py", f"__version__ = {version!r}\n")
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")
    (index / "torch" / "index.html").write_text(f'<html><body><a href="{name}">{name}</a></body></html>\n')


def test_the_cpu_burn_in_line_cannot_take_a_newer_cuda_build(tmp_path):
    """README's CPU line, as written, against two indexes on disk: PyTorch's CPU index (2.13.0+cpu)
    and a PyPI whose CUDA build is newer (2.14.0). It takes the CPU build; the one-line form with
    ``--extra-index-url`` it replaced takes the newer CUDA build without a word."""
    cpu_url = "https://download.pytorch.org/whl/cpu"
    (line,) = {c for _, c in readme.commands() if cpu_url in c}
    first, _, then = line.partition(" && ")
    assert then == ".venv/bin/pip install '.[burnin]'" and first.startswith(".venv/bin/pip install torch ")
    cpu, pypi = tmp_path / "cpu", tmp_path / "pypi"
    _fake_torch(cpu, "2.13.0+cpu")
    _fake_torch(pypi, "2.14.0")
    env = clean_env(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=pypi.as_uri(), PIP_NO_INPUT="1")
    env.pop("PIP_FIND_LINKS", None)

    def takes(command: str) -> str:
        report = tmp_path / "report.json"
        pip = f"{sys.executable} -m pip install --dry-run --quiet --report {report} --no-deps --ignore-installed"
        argv = command.replace(cpu_url, cpu.as_uri()).replace(".venv/bin/pip install", pip).split()
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        (got,) = [i["metadata"]["version"] for i in json.loads(report.read_text())["install"]]
        return got

    assert takes(first) == "2.13.0+cpu"
    assert takes(f".venv/bin/pip install torch --extra-index-url {cpu_url}") == "2.14.0"  # the trap
