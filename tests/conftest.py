import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
# The suite tests the installed rigmon (tests/run installs the wheel), never the checkout's
# rigmon/ directory: the checkout leaves sys.path, here and in every python a test starts.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
os.environ["PYTHONSAFEPATH"] = "1"
# Readline, once something imports it, writes COLUMNS=80 into the process's C environment (not
# os.environ), and every command a test starts would inherit it: rigmon status lays out to
# COLUMNS. The suite says what a pipe gets without it (120); layout tests set their own.
os.environ["COLUMNS"] = "120"


# Modules whose every test needs a server (Prometheus, InfluxDB, Alertmanager), root, systemd,
# Chromium or torch; elsewhere a test is one through the fixtures it takes, or its own marker.
SYSTEM_MODULES = {
    "test_alertmanager",
    "test_alerts_daemon",
    "test_burnin",
    "test_dashboards",
    "test_deploy",
    "test_doc_commands",
    "test_fleet",
    "test_influxdb",
    "test_launchers",
    "test_prometheus_rules",
    "test_systemd",
}
SYSTEM_FIXTURES = {"influx", "named_cgroup", "hostile_processes", "chromium"}


def pytest_collection_modifyitems(config, items):
    """``system`` on what tests/run --fast leaves out."""
    for item in items:
        if item.module.__name__ in SYSTEM_MODULES or SYSTEM_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.system)


@pytest.fixture
def default_port():
    """rigmon's default port, 9963, is the machine's: the tests that use it (README's first
    command, the service under systemd, a status that finds no daemon there) take it one at a
    time, whichever worker runs them (tests/run runs files side by side)."""
    from servers import holding_the_default_port

    with holding_the_default_port():
        yield 9963


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "system: needs a server (Prometheus, InfluxDB, Alertmanager), root, "
        "systemd, Chromium or torch; tests/run --fast leaves it out",
    )
    config.addinivalue_line(
        "markers",
        "slow: a soak, flood, fuzz or install run of its own (seconds to minutes); tests/run --fast leaves it out",
    )
    import rigmon

    if Path(rigmon.__file__).resolve().is_relative_to(ROOT / "rigmon"):
        raise pytest.UsageError(
            f"rigmon is imported from the checkout ({rigmon.__file__}), not from an "
            "installed wheel: run the tests with tests/run"
        )


@pytest.fixture
def influx(tmp_path):
    """Debian's influxd on loopback, with its data under the test's tmp_path."""
    from servers import InfluxDB

    server = InfluxDB(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def chromium(tmp_path):
    """A real headless Chromium (tests/browser.py), closed after the test."""
    from browser import Chromium

    browser = Chromium(tmp_path / "chromium")
    yield browser
    browser.close()


@pytest.fixture
def eight_gpus(tmp_path):
    """A recording of 8 H200s under load (the real tick, widened)."""
    import scenarios as sc

    return sc.write(sc.one_tick(sc.h200()).widened(8), tmp_path / "eight.rec.jsonl")


BOX_STATE = Path("/var/lib/rigmon")  # daemon.state_dir's default: the machine's own, never a test's


def _box_state() -> dict:
    if not BOX_STATE.exists():
        return {}
    return {str(p): p.stat().st_mtime_ns for p in [BOX_STATE, *BOX_STATE.rglob("*")]}


@pytest.fixture(scope="session", autouse=True)
def the_box_state_is_left_alone():
    """No test reads or writes this machine's own state directory: a daemon running here (or
    the next test run) would find what a test left in it. README's first command, run as
    written, gets a private one (tests/test_install.py)."""
    before = _box_state()
    yield
    after = _box_state()
    assert after == before, f"a test wrote into {BOX_STATE}: {sorted(set(after.items()) ^ set(before.items()))[:5]}"
