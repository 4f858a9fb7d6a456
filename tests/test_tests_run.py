"""README's test command on a fresh machine's own Python: tests/run --fast from a clean clone
with Debian's /usr/bin/python3 first on PATH (it is externally managed, PEP 668) passes, makes
its own virtual environment, and installs nothing into that Python."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = Path("/usr/bin/python3")


def _site_dirs() -> list[Path]:
    """Where an install into the system Python would land: its site and dist packages, user
    site, scripts."""
    code = (
        "import site, sysconfig, json; print(json.dumps(site.getsitepackages() + [site.getusersitepackages(), "
        "sysconfig.get_path('scripts'), sysconfig.get_path('purelib')]))"
    )
    done = subprocess.run([str(SYSTEM_PYTHON), "-c", code], capture_output=True, text=True, check=True)
    return sorted({Path(p) for p in json.loads(done.stdout)} | {Path("/usr/local/bin")})


def _snapshot(dirs) -> dict:
    seen = {}
    for d in dirs:
        if d.is_dir():
            for entry in d.iterdir():  # a package installed adds or touches an entry here
                seen[str(entry)] = entry.lstat().st_mtime_ns
    return seen


@pytest.mark.slow
def test_the_quick_tier_passes_on_debians_python_from_a_clean_clone(tmp_path):
    if not SYSTEM_PYTHON.exists():
        pytest.skip("no /usr/bin/python3")
    stdlib = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not (Path(stdlib) / "EXTERNALLY-MANAGED").exists():
        pytest.skip("/usr/bin/python3 is not externally managed here")
    clone = tmp_path / "rigmon"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    dirs = _site_dirs()
    before = _snapshot(dirs)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "VIRTUAL_ENV", "PYENV", "PYTHON", "RIGMON"))
    }
    # the fresh machine's PATH: Debian's python3 first, nothing of the suite's venv or pyenv
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    done = subprocess.run(
        ["tests/run", "--fast", "-q", "-p", "no:cacheprovider"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout and " failed" not in done.stdout, tail
    config = (clone / ".venv" / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in config, config  # made from that python3
    assert (clone / ".venv" / "bin" / "rigmon").exists()
    assert _snapshot(dirs) == before, "tests/run installed into /usr/bin/python3's site"
    print(done.stdout.strip().splitlines()[-1])
