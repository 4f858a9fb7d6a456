"""SIGHUP reloads under load: the port never closes, alerts of unchanged rules go on without
a new FIRING, a changed rule's alerts are RESOLVED, and a config that cannot start leaves the
running one serving."""

from __future__ import annotations

import random
import re
import signal
import socket
import subprocess
import threading
import time

import pytest
import scenarios as sc
from receiver import Receiver
from servers import Rigmon, http_get, wait_for

HOT = """
[daemon]
interval = 0.5
[alerts.builtin.GpuAtSlowdownTemperature]
for = "0s"
severity = "{severity}"
[[notifiers]]
type = "webhook"
url = "{url}"
retry_initial = "0.2s"
retry_max = "1s"
"""


class Scraper:
    """Scrapes with a new connection every 50 ms and counts what failed."""

    def __init__(self, url: str):
        self.url, self.ok, self.failed = url, 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                status = http_get(self.url, timeout=15)[0]
                if status == 200:
                    self.ok += 1
                else:
                    self.failed.append(status)
            except OSError as e:
                self.failed.append(repr(e))
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(20)


@pytest.mark.slow
def test_twenty_sighups_under_load(tmp_path):
    receiver = Receiver()
    recording = sc.hot_box(tmp_path)
    configs = [HOT.format(severity=severity, url=receiver.url) for severity in ("critical", "warning")]
    rigmon = Rigmon(tmp_path, recording, configs[0])
    scraper = None
    changed = 0
    try:
        rigmon.wait_ready()
        wait_for(lambda: len(receiver.bodies) >= 8, 30, what="8 alerts firing")
        scraper = Scraper(rigmon.url)
        rng = random.Random(29)
        current = 0
        for n in range(20):
            if n % 4 == 3:  # now and then the rule itself changes: its 8 alerts are due a RESOLVED
                # once the reloads begun are done: two changes of the rule inside one slow reload
                # (a loaded machine) would be one change back to where it was, and no RESOLVED due
                wait_for(
                    lambda: (
                        rigmon.output().count("rigmon started:")
                        > rigmon.output().count("SIGHUP: the config is valid; restarting with it")
                    ),
                    30,
                    what="the reloads begun to be done",
                )
                current = 1 - current
                rigmon.config.write_text(
                    rigmon.config.read_text().replace(
                        f'severity = "{("critical", "warning")[1 - current]}"',
                        f'severity = "{("critical", "warning")[current]}"',
                    )
                )
                changed += 1
            elif n % 4 == 1:  # a change the alerts do not care about: they go on, no new FIRING
                text = rigmon.config.read_text()
                rigmon.config.write_text(
                    text.replace("interval = 0.5", "interval = 0.4")
                    if "0.5" in text
                    else text.replace("interval = 0.4", "interval = 0.5")
                )
            rigmon.proc.send_signal(signal.SIGHUP)
            time.sleep(rng.uniform(0.05, 1.5))
            assert rigmon.proc.poll() is None, rigmon.output()[-3000:]
        wait_for(
            lambda: rigmon.proc.poll() is None and http_get(rigmon.url, timeout=5)[0] == 200,
            30,
            what="the daemon after the reloads",
        )
        rigmon.wait_polls(4)  # the last reload done: the daemon polls on, the scraper scrapes on
        # and the last change's RESOLVEDs delivered before the stop (a stop keeps what is queued)
        wait_for(
            lambda: sum(b["status"] == "resolved" for b in receiver.json()) >= 8 * changed,
            30,
            what="every due RESOLVED delivered",
        )
    finally:
        if scraper is not None:
            scraper.stop()
        assert rigmon.stop() == 0
        receiver.stop()
    log = rigmon.output()
    reloads = log.count("SIGHUP: the config is valid; restarting with it")
    # each change of the rule is taken by a reload of its own (the RESOLVEDs below say so); a change
    # of the interval that comes while a reload runs is taken by the next one, not lost
    assert changed <= reloads <= 10
    print(
        f"{reloads} reloads for 20 SIGHUPs ({changed} changing the rule); {scraper.ok} scrapes answered, "
        f"{len(scraper.failed)} failed; {len(receiver.bodies)} notifications"
    )
    assert scraper.failed == [] and scraper.ok > 50
    assert "Traceback" not in log
    # per alert (GPU): FIRING, RESOLVED, FIRING…: never a FIRING twice in a row
    by_gpu: dict[str, list[str]] = {}
    for body in receiver.json():
        alert = body["alerts"][0]
        by_gpu.setdefault(alert["labels"]["gpu"], []).append(body["status"])
    assert sorted(by_gpu) == [str(i) for i in range(8)]
    for gpu, statuses in by_gpu.items():
        assert statuses[0] == "firing" and all(a != b for a, b in zip(statuses, statuses[1:], strict=False)), (
            gpu,
            statuses,
        )
        assert statuses.count("resolved") == changed, (gpu, statuses)  # every due RESOLVED, and only those


def test_a_reload_to_a_bad_certificate_keeps_the_running_config(tmp_path):
    rigmon = Rigmon(tmp_path, sc.demo_path(), "[daemon]\ninterval = 0.5\n")
    scraper = None
    try:
        rigmon.wait_ready()
        scraper = Scraper(rigmon.url)
        (tmp_path / "bad.pem").write_text("not a certificate\n")
        rigmon.config.write_text(
            rigmon.config.read_text() + f'[prometheus]\ntls_cert = "{tmp_path / "bad.pem"}"\n'
            f'tls_key = "{tmp_path / "bad.pem"}"\n'
        )
        rigmon.proc.send_signal(signal.SIGHUP)
        rigmon.wait_output("the running config stays")
        assert rigmon.proc.poll() is None and http_get(rigmon.url)[0] == 200
    finally:
        if scraper is not None:
            scraper.stop()
        assert rigmon.stop() == 0
    log = rigmon.output()
    assert re.search(r"SIGHUP: prometheus.tls_cert/tls_key: .*; the running config stays", log), log[-2000:]
    assert "restarting with it" not in log and scraper.failed == []


def test_a_reload_to_a_busy_port_keeps_serving_on_the_old_one(tmp_path):
    """Without --port on the command line, the file's port is the one a reload moves to."""
    import sys

    from servers import free_port

    port = free_port()
    config = tmp_path / "rigmon.toml"
    config.write_text(
        f'[daemon]\ninterval = 0.5\nstate_dir = "{tmp_path / "state"}"\n[prometheus]\n'
        f'listen = "127.0.0.1"\nport = {port}\n'
    )
    log = open(tmp_path / "log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rigmon", "run", "--config", str(config), "--replay", str(sc.demo_path())],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_for(lambda: http_get(url, timeout=2)[0] == 200, 30, what="rigmon")
        scraper = Scraper(url)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            busy = taken.getsockname()[1]
            config.write_text(config.read_text().replace(f"port = {port}", f"port = {busy}"))
            proc.send_signal(signal.SIGHUP)
            wait_for(
                lambda: "the running config stays" in (tmp_path / "log").read_text(), 30, what="the reload refused"
            )
            assert proc.poll() is None and http_get(url)[0] == 200
            wait_for(lambda: scraper.ok > 10, 30, what="scrapes answered after the refused reload")
        scraper.stop()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    log.seek(0)
    text = log.read()
    assert f"SIGHUP: prometheus.port: cannot listen on 127.0.0.1:{busy}" in text and "the running config stays" in text
    assert scraper.failed == [] and scraper.ok > 10


def test_a_reload_to_a_state_directory_another_rigmon_holds_keeps_serving(tmp_path):
    """The new state directory is another daemon's (its lock held): the reload is refused, the
    running config serves on."""
    import fcntl

    held = tmp_path / "held"
    (held / "replay" / "demo").mkdir(parents=True)
    lock = open(held / "replay" / "demo" / "rigmon.lock", "w")  # as another rigmon replaying the demo holds it
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    rigmon = Rigmon(tmp_path, None, "[daemon]\ninterval = 0.5\n", extra_args=["--demo"])
    try:
        rigmon.wait_ready()
        scraper = Scraper(rigmon.url)
        rigmon.config.write_text(f'[daemon]\ninterval = 0.25\nstate_dir = "{held}"\n')
        rigmon.proc.send_signal(signal.SIGHUP)
        rigmon.wait_output("the running config stays")
        time.sleep(1.0)
        assert rigmon.proc.poll() is None and http_get(rigmon.url)[0] == 200
        assert b"rigmon_poll_interval_seconds 0.5" in http_get(rigmon.url)[1]
        scraper.stop()
    finally:
        assert rigmon.stop() == 0
        lock.close()
    log = rigmon.output()
    assert "SIGHUP: daemon.state_dir: another rigmon daemon uses" in log, log[-2000:]
    assert "restarting with it" not in log and scraper.failed == [] and scraper.ok > 10


def _started_as_reloaded(config, port: int, handed: bytes) -> subprocess.Popen:
    """``rigmon run --demo`` started as a reload execs it: with ``handed`` in a memfd that
    RIGMON_RELOAD_FD names."""
    import os
    import sys

    fd = os.memfd_create("test-hand-over", 0)
    os.write(fd, handed)
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rigmon",
                "run",
                "--config",
                str(config),
                "--demo",
                "--listen",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            pass_fds=(fd,),
            env={**os.environ, "RIGMON_RELOAD_FD": str(fd)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    finally:
        os.close(fd)


def test_a_reload_whose_config_fails_after_the_exec_goes_back_to_the_one_before(tmp_path):
    """What the checks before the exec cannot see (another rigmon taking the new state directory
    in between) takes the new process back to the config before it: the daemon never exits.
    The process is started as an exec'd reload is, with what the process before hands over."""
    import fcntl
    import json

    from servers import free_port

    held = tmp_path / "held"
    (held / "replay" / "demo").mkdir(parents=True)
    lock = open(held / "replay" / "demo" / "rigmon.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    config = tmp_path / "rigmon.toml"
    before = f'[daemon]\ninterval = 0.5\nstate_dir = "{tmp_path / "state"}"\n'
    config.write_text(f'[daemon]\ninterval = 0.25\nstate_dir = "{held}"\n')
    port = free_port()
    proc = _started_as_reloaded(
        config, port, json.dumps({"config": config.read_text(), "previous": before, "alerts": []}).encode()
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_for(lambda: http_get(url, timeout=2)[0] == 200, 30, what="rigmon")
        assert b"rigmon_poll_interval_seconds 0.5" in http_get(url)[1]
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=15)[0].decode()
        lock.close()
    assert proc.returncode == 0 and "Traceback" not in out, out
    assert re.search(
        r"SIGHUP: the new config cannot start \(another rigmon daemon uses the state directory .*held"
        r"/replay/demo.*\); going back to the config before it",
        out,
    ), out


def test_what_a_reload_hands_over_is_checked_json(tmp_path):
    """The hand-over is plain JSON, read with a warning when damaged: the daemon starts afresh."""
    import json

    config = tmp_path / "rigmon.toml"
    config.write_text(f'[daemon]\ninterval = 0.5\nstate_dir = "{tmp_path / "state"}"\n')
    from servers import free_port

    port = free_port()
    for payload in (
        b"\x80\x04\x95 not json",
        json.dumps(["a", "list"]).encode(),
        json.dumps({"config": 5, "fd": "x", "alerts": {"no": 1}}).encode(),
    ):
        proc = _started_as_reloaded(config, port, payload)
        try:
            wait_for(lambda: http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)[0] == 200, 30, what="rigmon")
        finally:
            proc.send_signal(signal.SIGTERM)
            out = proc.communicate(timeout=15)[0].decode()
        assert proc.returncode == 0 and "Traceback" not in out, out
        if payload.startswith(b"\x80"):
            assert "handed over cannot be read" in out, out
