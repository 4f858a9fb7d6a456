"""The shipped units under a real systemd (tests/systemd_box.py), installed the way README
says: README's service commands run as written (sudo is root here), then a drop-in replays
the bundled H200 recording (no GPU here) on a test port, with a short watchdog.

Each test prints what it observed (time to READY, restarts, stop time) for the record."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import time
from pathlib import Path

import pytest
import readme
import systemd_box
from receiver import Receiver
from servers import free_port, holding_the_default_port, http_get, wait_for

ROOT = Path(__file__).resolve().parents[1]
why_not = systemd_box.available()
pytestmark = pytest.mark.skipif(why_not is not None, reason=f"no systemd box: {why_not}")

VENV_RIGMON = "/opt/rigmon/bin/rigmon"  # where README installs it
DROPIN = "/etc/systemd/system/rigmon.service.d/test.conf"
SECRET_ENV = "env-secret-5f3a9c17e2"


def readme_service_commands() -> str:
    return readme.sh_blocks("Running as a service")[0].replace("sudo ", "")  # the box runs as root, with sudo's PATH


@pytest.fixture(scope="module")
def receiver():
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def default_port():
    """The box's daemon listens on the machine's port 9963 (it shares the network): the
    module holds it (tests/conftest.py)."""
    with holding_the_default_port():
        yield 9963


@pytest.fixture(scope="module")
def box(tmp_path_factory, default_port):
    box = systemd_box.SystemdBox(tmp_path_factory.mktemp("systemd-box"), ROOT)
    try:
        box.boot()
        # README's commands, as written, from the checkout: a venv in /opt/rigmon, the unit,
        # the example config, enable --now, then status and a scrape of the default port.
        done = box.run(
            "bash",
            "-ex",
            "-c",
            readme_service_commands(),
            cwd=box.CHECKOUT,
            timeout=900,
            check=False,
            env={"HOME": "/root"},
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "Active: active (running)" in done.stdout and "# HELP rigmon_" in done.stdout, done.stdout
        yield box
    finally:
        box.shutdown()


def configure(
    box: systemd_box.SystemdBox, receiver: Receiver, port: int, dropin_extra: str = "", env_file: bool = True
) -> None:
    """The test's config and drop-in, then a restart: replayed GPU, a test port, InfluxDB at the
    receiver with its token from ${INFLUX_TOKEN}."""
    box.write(
        "/etc/rigmon/rigmon.toml",
        f"""\
[prometheus]
listen = "127.0.0.1"
port = {port}

[influxdb]
enabled = true
url = "http://127.0.0.1:{receiver.port}"
org = "lab"
bucket = "rigmon"
token = "${{INFLUX_TOKEN}}"
retry_initial = "1s"
retry_max = "2s"
""",
    )
    if env_file:
        box.write("/etc/rigmon/rigmon.env", f"INFLUX_TOKEN={SECRET_ENV}\n", mode=0o600)
    else:
        box.run("rm", "-f", "/etc/rigmon/rigmon.env")
    box.write(
        DROPIN,
        f"""\
[Service]
ExecStart=
ExecStart={VENV_RIGMON} run --config /etc/rigmon/rigmon.toml --demo
WatchdogSec=5
RestartSec=1
{dropin_extra}""",
    )
    box.run("systemctl", "daemon-reload")
    box.run("systemctl", "restart", "rigmon", timeout=60)


def state(port: int) -> dict:
    return json.loads(http_get(f"http://127.0.0.1:{port}/state")[1])


def test_start_waits_for_ready_and_the_dynamic_user_reads_the_config(box, receiver):
    port = free_port()
    configure(box, receiver, port)
    box.run("systemctl", "stop", "rigmon")
    started = time.monotonic()
    box.run("systemctl", "start", "rigmon", timeout=60)  # Type=notify: returns once READY=1 arrived
    took = time.monotonic() - started
    status, body = http_get(f"http://127.0.0.1:{port}/metrics")  # at once: no waiting after start
    assert status == 200 and b"NVIDIA H200" in body
    props = box.show(
        "rigmon",
        "ActiveState",
        "SubState",
        "StatusText",
        "MainPID",
        "ExecMainStartTimestampMonotonic",
        "ActiveEnterTimestampMonotonic",
    )
    assert (props["ActiveState"], props["SubState"]) == ("active", "running")
    # sent with READY=1, then kept current: the GPUs, the alerts firing
    assert props["StatusText"].startswith("polling 1 GPU(s) every 1 s; ") and "alert(s) firing" in props["StatusText"]
    to_ready = (int(props["ActiveEnterTimestampMonotonic"]) - int(props["ExecMainStartTimestampMonotonic"])) / 1e6
    # Active only once the daemon bound its port: the scrape above, sent the moment `systemctl start`
    # returned, found it listening. (The journal cannot order the two: journald stamps a stdout line
    # when it reads the stream, which may be after PID 1 has taken the READY=1 sent behind it.)
    assert to_ready > 0.1
    uid = box.run("ps", "-o", "uid=,user=", "-p", props["MainPID"]).stdout.split()
    assert uid[0] != "0" and uid[1] == "rigmon", uid  # DynamicUser, not root
    mode = box.run("stat", "-c", "%a %U", "/etc/rigmon/rigmon.toml").stdout.split()
    assert mode == ["644", "root"]  # as README installs it; the port above came from it
    print(f"\nsystemctl start returned after {took:.2f} s; READY {to_ready:.2f} s after exec; uid {uid[0]} ({uid[1]})")


def spooled_lines(receiver: Receiver) -> list[str]:
    lines = []
    for body in receiver.bodies:
        text = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
        lines += text.decode().splitlines()
    return lines


def test_spool_in_the_state_directory_survives_a_restart(box, receiver):
    port = free_port()
    receiver.status = 503  # InfluxDB is away: points go to the spool
    try:
        configure(box, receiver, port)
        wait_for(lambda: state(port)["influxdb"]["points_spooled"] >= 20, 60, what="points in the spool")
        before = state(port)["influxdb"]["points_spooled"]
        # StateDirectory=rigmon with DynamicUser; a replay (--demo) keeps its own state under it
        spool = "/var/lib/private/rigmon/replay/demo/influxdb-spool"
        files_before = set(box.run("ls", spool).stdout.split())
        restarted_at = time.time()
        box.run("systemctl", "restart", "rigmon", timeout=60)
        after = state(port)["influxdb"]["points_spooled"]
        files_after = set(box.run("ls", spool).stdout.split())
        assert after >= before and files_before <= files_after, (before, after, files_before, files_after)
        assert box.run("readlink", "/var/lib/rigmon").stdout.strip() == "private/rigmon"
        receiver.bodies.clear()
        receiver.status = 200  # InfluxDB is back: the spool drains, oldest first
        wait_for(lambda: state(port)["influxdb"]["points_spooled"] == 0, 120, what="the spool to drain")
        stamps = [int(line.rsplit(" ", 1)[1]) / 1e9 for line in spooled_lines(receiver)]
        older = sum(1 for t in stamps if t < restarted_at)
        assert older >= before * 0.9, (older, before)
        print(
            f"\n{before} points spooled before the restart, {after} after it; {older} points from before the "
            f"restart reached InfluxDB once it answered"
        )
    finally:
        receiver.status = 200


def test_watchdog_restarts_a_daemon_whose_polls_stop(box, receiver):
    port = free_port()
    configure(box, receiver, port)
    props = box.show("rigmon", "NRestarts", "MainPID")
    stopped = time.monotonic()
    box.run("systemctl", "kill", "--kill-whom=main", "--signal=SIGSTOP", "rigmon")

    results = set()

    def restarted():
        now = box.show("rigmon", "NRestarts", "MainPID", "ActiveState", "SubState", "Result")
        results.add(now["Result"])
        return (
            now
            if (
                int(now["NRestarts"]) > int(props["NRestarts"])
                and now["ActiveState"] == "active"
                and now["SubState"] == "running"
            )
            else None
        )

    now = wait_for(restarted, 60, interval=0.2, what="the watchdog to restart rigmon")
    took = time.monotonic() - stopped
    assert now["MainPID"] != props["MainPID"]
    assert http_get(f"http://127.0.0.1:{port}/metrics")[0] == 200
    assert "watchdog" in results, results  # the unit failed by its watchdog, then restarted
    restarts = int(now["NRestarts"]) - int(props["NRestarts"])
    assert restarts == 1
    print(f"\nSIGSTOP → restarted and serving after {took:.1f} s (WatchdogSec=5, RestartSec=1); {restarts} restart")


def test_stop_is_warm_and_exits_0_within_5_s(box, receiver):
    port = free_port()
    configure(box, receiver, port)
    time.sleep(2)
    started = time.monotonic()
    box.run("systemctl", "stop", "rigmon", timeout=30)
    took = time.monotonic() - started
    props = box.show("rigmon", "ActiveState", "Result", "ExecMainCode", "ExecMainStatus")
    assert props["ActiveState"] == "inactive" and props["Result"] == "success"
    assert props["ExecMainCode"] == "1" and props["ExecMainStatus"] == "0"  # CLD_EXITED with 0
    assert took < 5
    assert "stopped after" in box.journal("rigmon")
    print(f"\nsystemctl stop took {took:.2f} s; exit status {props['ExecMainStatus']}")


def secret_reached(receiver: Receiver, secret: str) -> bool:
    return any(h.get("Authorization") == f"Token {secret}" for h in receiver.headers)


def assert_secret_hidden(box: systemd_box.SystemdBox, secret: str) -> None:
    shown = box.run("systemctl", "show", "rigmon").stdout + box.run("systemctl", "cat", "rigmon").stdout
    journal = box.run("journalctl", "--no-pager", "-o", "verbose", "-u", "rigmon").stdout
    check = box.run(
        "bash",
        "-c",
        "set -a; [ -f /etc/rigmon/rigmon.env ] && . /etc/rigmon/rigmon.env; "
        f"INFLUX_TOKEN=${{INFLUX_TOKEN:-{secret}}} {VENV_RIGMON} config check /etc/rigmon/rigmon.toml",
    )
    assert secret not in shown and secret not in journal and secret not in check.stdout + check.stderr
    assert 'token = "${INFLUX_TOKEN}"' in check.stdout and check.stdout.rstrip().endswith("is a valid rigmon config")


def test_secret_from_the_environment_file_reaches_the_config_and_nothing_shows_it(box, receiver):
    receiver.headers.clear()
    configure(box, receiver, free_port())
    assert box.run("stat", "-c", "%a", "/etc/rigmon/rigmon.env").stdout.strip() == "600"
    wait_for(lambda: secret_reached(receiver, SECRET_ENV), 30, what="InfluxDB writes with the token")
    assert_secret_hidden(box, SECRET_ENV)


# --- the scheduled burn-in ----------------------------------------------------------------
def host_rigmon(box) -> str:
    """The rigmon tests/run installed, with PyTorch, as the box sees it: the burn-in unit runs
    as root, so it may live anywhere (the daemon's unit, with ProtectHome=, may not), but the
    box has /tmp of its own and sees the checkout (where tests/run keeps .venv) at box.CHECKOUT.
    Its python is named, not its script, whose #! line holds the machine's path."""
    prefix = Path(sys.prefix).resolve()
    if prefix.is_relative_to(ROOT):
        return f"{box.CHECKOUT}/{prefix.relative_to(ROOT)}/bin/python -m rigmon"
    beside = Path(sys.executable).parent / "rigmon"
    found = shutil.which("rigmon") or (str(beside) if beside.exists() else None)
    assert found, "rigmon is not installed (tests/run installs it)"
    return found


def run_burnin_unit(box, extra: str, name: str) -> tuple[dict, dict | None]:
    box.run(
        "install",
        "-m",
        "644",
        "systemd/rigmon-burnin.service",
        "systemd/rigmon-burnin.timer",
        "/etc/systemd/system/",
        cwd=box.CHECKOUT,
    )
    box.write(
        "/etc/systemd/system/rigmon-burnin.service.d/test.conf",
        f"""\
[Service]
ExecStart=
ExecStart=/bin/sh -c 'exec {host_rigmon(box)} burnin --minutes 1 --config /etc/rigmon/rigmon.toml \\
    --report "$STATE_DIRECTORY/{name}"'
{extra}""",
    )
    box.run("systemctl", "daemon-reload")
    box.run("systemctl", "start", "rigmon-burnin", timeout=400, check=False)  # oneshot: returns when it ends
    props = box.show("rigmon-burnin", "ActiveState", "Result", "ExecMainStatus")
    report = box.run("cat", f"/var/lib/rigmon-burnin/{name}/burnin.json", check=False)
    return props, json.loads(report.stdout) if report.returncode == 0 else None


def test_burnin_unit_passes_a_healthy_cpu_burnin(box, receiver):
    configure(box, receiver, free_port())  # the config the burn-in reads names ${INFLUX_TOKEN} too
    props, report = run_burnin_unit(box, "", "healthy")
    assert (props["ActiveState"], props["Result"]) == ("inactive", "success"), box.journal("rigmon-burnin")[-3000:]
    assert report["verdict"] == "pass" and report["units"][0]["device"] == "cpu"


def test_burnin_unit_with_an_injected_fault_ends_failed(box, receiver):
    configure(box, receiver, free_port())
    props, report = run_burnin_unit(box, "Environment=RIGMON_BURNIN_INJECT=nan\n", "faulty")
    assert (props["ActiveState"], props["Result"], props["ExecMainStatus"]) == ("failed", "exit-code", "1")
    assert report["verdict"] == "fail"
