"""Delivery that survives: what is firing stays announced and what is queued is sent across a
reload and a restart (a real Alertmanager, a real receiver), a SIGTERM at any moment of a
reload is a warm stop, a box's labels and name cannot collide with rigmon's or break a peer,
and a state directory someone else could steer is refused before anything in it is touched."""

from __future__ import annotations

import argparse
import calendar
import json
import os
import signal
import stat
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
import scenarios as sc
from receiver import Receiver
from servers import Alertmanager, Rigmon, wait_for

from rigmon.alerts.entities import LABELS
from rigmon.commands.run import replay_state_dir
from rigmon.config import schema as configmod
from rigmon.model import readings
from rigmon.readers import cooling

HOT = """
[daemon]
interval = 0.5
[alerts.builtin.GpuAtSlowdownTemperature]
for = "0s"
[[notifiers]]
type = "{type}"
url = "{url}"
retry_initial = "0.2s"
retry_max = "1s"
resend_interval = "1s"
"""


def _firing(receiver: Receiver) -> list[str]:
    return [
        f"{a['labels']['alertname']} gpu {a['labels'].get('gpu')}"
        for body in receiver.json()
        for a in body["alerts"]
        if a["status"] == "firing"
    ]


def _refused_while_hot(tmp_path: Path) -> tuple[Receiver, str, Path, Rigmon]:
    """A receiver answering 503 and a 2-GPU box at its slowdown temperature that posts to it:
    (the receiver, the config, where a stop or a reload keeps the alerts, the daemon)."""
    receiver = Receiver()
    receiver.status = 503
    config = HOT.format(type="webhook", url=receiver.url)
    recording = sc.hot_box(tmp_path, gpus=2)
    kept = replay_state_dir(tmp_path / "state", argparse.Namespace(replay=str(recording), demo=False)) / "alerts.json"
    return receiver, config, kept, Rigmon(tmp_path, recording, config)


def _delivered_once_when_it_answers(receiver: Receiver, rigmon: Rigmon) -> None:
    """The receiver answers again: each GPU's FIRING that was kept reaches it, and only once
    (the daemon's queue empty, and polls past it that fire nothing new)."""
    receiver.status = 200
    wait_for(lambda: len(_firing(receiver)) >= 2, 30, what="the kept FIRINGs delivered")
    queued = '{notifier="webhook"}'
    wait_for(lambda: rigmon.metric("rigmon_notifications_queued", queued) == 0, 30, what="the queue empty")
    rigmon.wait_polls(3)
    assert rigmon.metric("rigmon_notifications_queued", queued) == 0
    assert sorted(_firing(receiver)) == ["GpuAtSlowdownTemperature gpu 0", "GpuAtSlowdownTemperature gpu 1"]


def _touch(rigmon: Rigmon) -> None:
    """A change the alerts do not care about, so that a SIGHUP reloads."""
    text = rigmon.config.read_text()
    rigmon.config.write_text(
        text.replace("interval = 0.5", "interval = 0.4") if "0.5" in text else text.replace("0.4", "0.5")
    )


@pytest.mark.parametrize("delay", [0, 0.1, 0.3, 0.5, 0.8])
def test_a_sigterm_at_any_moment_of_a_reload_is_a_warm_stop(tmp_path, delay):
    receiver = Receiver()
    rigmon = Rigmon(tmp_path, sc.hot_box(tmp_path, gpus=2), HOT.format(type="webhook", url=receiver.url))
    try:
        rigmon.wait_ready()
        wait_for(lambda: len(receiver.bodies) >= 2, 30, what="2 alerts told")
        _touch(rigmon)
        rigmon.proc.send_signal(signal.SIGHUP)
        time.sleep(delay)
        rigmon.proc.send_signal(signal.SIGTERM)
        rc = rigmon.proc.wait(60)  # a warm stop is what is asked; on a loaded host it can take a while
    finally:
        if rigmon.proc.poll() is None:
            rigmon.proc.kill()
        receiver.stop()
    log = rigmon.output()
    assert rc == 0, f"exit {rc} (a signal kills with a negative one): {log[-2000:]}"
    assert "stopping (warm)" in log, log[-2000:]


def test_queued_notifications_outlive_a_reload_and_a_restart(tmp_path):
    """A receiver answering 503 while the box reloads, and again while it restarts: every
    FIRING it was due reaches it once it answers, none twice."""
    receiver, config, kept, rigmon = _refused_while_hot(tmp_path)
    try:
        rigmon.wait_ready()
        wait_for(lambda: rigmon.metric("rigmon_notifications_queued", '{notifier="webhook"}') >= 2, 30)
        _touch(rigmon)
        rigmon.proc.send_signal(signal.SIGHUP)
        rigmon.wait_output("SIGHUP: the config is valid")
        rigmon.wait_output("alert(s) go on as they were, 2 queued notification(s) to send", 30)
        assert rigmon.stop() == 0
        log = rigmon.output()
        assert "2 notification(s) kept for the next start" in log
        assert json.loads(kept.read_text())["notifications"][0]["queue"]
        again = Rigmon(tmp_path, sc.hot_box(tmp_path, gpus=2), config, port=rigmon.port)
        again.wait_ready()
        again.wait_output("alert(s) go on as they were, 2 queued notification(s) to send")
        assert again.output().count("start: ") == 1
        assert not kept.exists()
        _delivered_once_when_it_answers(receiver, again)
        assert again.stop() == 0
    finally:
        rigmon.stop()
        receiver.stop()


def test_a_reload_whose_next_process_is_killed_before_it_takes_over_loses_nothing(tmp_path):
    """A stop deadline that kills the process a reload execs before it has taken over (a box
    loaded by training starts it slowly): the alerts and queued notifications were kept on
    disk too, so the start after it goes on from them and delivers each FIRING once."""
    receiver, config, kept, rigmon = _refused_while_hot(tmp_path)
    again = None
    try:
        rigmon.wait_ready()
        wait_for(lambda: rigmon.metric("rigmon_notifications_queued", '{notifier="webhook"}') >= 2, 30)
        _touch(rigmon)
        rigmon.proc.send_signal(signal.SIGHUP)
        wait_for(kept.exists, 30, interval=0.002, what="the reload to keep the alerts on disk")
        rigmon.proc.kill()  # before the exec'd process can have taken them up (its imports alone take longer)
        rigmon.proc.wait(10)
        assert kept.exists(), rigmon.output()[-2000:]
        saved = json.loads(kept.read_text())
        hot = [a for a in saved["alerts"] if a["rule"] == "GpuAtSlowdownTemperature"]
        firing = [a["key"] for a in hot if a["state"] == "firing"]
        assert sorted(firing) == [["gpu", 0], ["gpu", 1]], saved["alerts"]
        assert sum(len(q["queue"]) for q in saved["notifications"]) == 2
        again = Rigmon(tmp_path, sc.hot_box(tmp_path, gpus=2), config, port=rigmon.port)
        again.wait_ready()
        again.wait_output("alert(s) go on as they were, 2 queued notification(s) to send")
        assert "start: " in again.output() and "reload: " not in again.output()
        assert not kept.exists()
        _delivered_once_when_it_answers(receiver, again)
        assert again.stop() == 0
    finally:
        rigmon.stop()
        if again is not None:
            again.stop()
        receiver.stop()


def _seconds(rfc3339: str) -> float:
    """Alertmanager's time (``2026-12-07T20:50:01.123456789Z``) as seconds since the epoch."""
    whole, _, fraction = rfc3339.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float("0." + (fraction or "0"))


@pytest.mark.system  # a real Alertmanager
def test_a_firing_alert_stays_active_in_alertmanager_across_a_reload_and_a_restart(tmp_path):
    """resend_interval 1 s: each post says the alert ends 5 s ahead. Without renewals after a
    reload or a restart Alertmanager would end it within 5 s: after each, Alertmanager holds
    both alerts active with an end that only a post 5 s after it can have set, and their
    receiver was told FIRING once."""
    receiver = Receiver()
    am = Alertmanager(tmp_path, receiver.url)
    config = HOT.format(type="alertmanager", url=am.url)

    def active(after: float = 0.0) -> set[str]:
        """The GPUs whose alert is active and ends later than ``after`` (the wall's time)."""
        return {
            a["labels"]["gpu"]
            for a in am.alerts()
            if a["labels"]["alertname"] == "GpuAtSlowdownTemperature"
            and a["status"]["state"] == "active"
            and _seconds(a["endsAt"]) > after
        }

    def renewed_since(moment: float) -> None:
        # a post 5 s after ``moment`` says an end 10 s after it: renewals went on past the 5 s
        # that a post from before would have held the alert for
        wait_for(lambda: active(after=moment + 10) == {"0", "1"}, 30, what="both alerts renewed since")

    rigmon = Rigmon(tmp_path, sc.hot_box(tmp_path, gpus=2), config)
    again = None
    try:
        rigmon.wait_ready()
        wait_for(lambda: active() == {"0", "1"}, 30, what="both alerts in Alertmanager")
        _touch(rigmon)
        reloaded = time.time()
        rigmon.proc.send_signal(signal.SIGHUP)
        rigmon.wait_output("reload: ")
        renewed_since(reloaded)
        assert rigmon.stop() == 0
        restarted = time.time()
        again = Rigmon(tmp_path, sc.hot_box(tmp_path, gpus=2), config, port=rigmon.port)
        again.wait_ready()
        again.wait_output("start: ")
        renewed_since(restarted)
        assert sorted(_firing(receiver)) == ["GpuAtSlowdownTemperature gpu 0", "GpuAtSlowdownTemperature gpu 1"]
    finally:
        if again is not None:
            again.stop()
        rigmon.stop()
        am.stop()
        receiver.stop()


# --- labels and names ------------------------------------------------------------------------
def _own_names() -> set[str]:
    """Every label and tag rigmon sets, read from the table of readings and the alert subjects."""
    names = {"alertname", "severity", "host", "instance", "subject"}
    for entity in readings.ENTITIES.values():
        names |= {*entity.prometheus_labels, *entity.influx_tags}
    for family in readings.FAMILIES.values():
        names |= set(family.labels)
    for labels in readings.EXPORTER_LABELS.values():
        names |= set(labels)
    for _, tags, _ in readings.OTHER_MEASUREMENTS:
        names |= set(tags)
    for labels in LABELS.values():
        names |= set(labels)
    return names


def test_a_box_label_named_like_any_of_rigmons_own_is_refused():
    names = _own_names()
    assert {"chip", "socket", "user", "unit", "psu", "sensor", "device", "fan", "zone", "xid", "run"} <= names
    for name in sorted(names):
        with pytest.raises(configmod.ValidationError, match=f"{name} is a label or tag rigmon sets itself"):
            configmod.Config.model_validate({"daemon": {"labels": {name: "x"}}})
    configmod.Config.model_validate({"daemon": {"labels": {"site": "lab", "rack": "r4"}}})


def said(done: subprocess.CompletedProcess) -> str:
    """What a command printed, as one line (its output wraps to COLUMNS)."""
    return " ".join((done.stdout + done.stderr).split())


def _check(tmp_path: Path, toml: str) -> subprocess.CompletedProcess:
    path = tmp_path / "rigmon.toml"
    path.write_text(toml)
    return subprocess.run(
        [sys.executable, "-m", "rigmon", "config", "check", str(path)], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("hostname", ["rig\\04", "rig{4}", "rig%04", "rig#4", "rig|4", "rig^4", "rig`4"])
def test_config_check_refuses_a_hostname_alertmanager_would_refuse_in_a_url(tmp_path, hostname):
    done = _check(tmp_path, f"[daemon]\nhostname = {json.dumps(hostname)}\n")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot be a URL's host" in said(done)
    # where external_url names the page, the name is only a label: fine
    done = _check(tmp_path, f'[daemon]\nhostname = {json.dumps(hostname)}\nexternal_url = "http://rig-04:9963/"\n')
    assert done.returncode == 0, done.stdout + done.stderr


def test_config_check_names_a_label_that_collides(tmp_path):
    done = _check(tmp_path, '[daemon]\nlabels = { socket = "a" }\n')
    assert done.returncode == 2 and "socket is a label or tag rigmon sets itself" in said(done)


# --- a state directory only rigmon owns ------------------------------------------------------
def _run(tmp_path: Path) -> subprocess.CompletedProcess:
    """The daemon on this machine (no replay: the state directory is the one configured)."""
    return subprocess.run(
        [sys.executable, "-m", "rigmon", "run", "--config", str(tmp_path / "rigmon.toml"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )


OTHER = 65534  # nobody: the other user


def _snapshot(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            out[str(p)] = (st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.system  # root
@pytest.mark.skipif(os.geteuid() != 0, reason="plants another user's directory: needs root")
def test_a_state_directory_another_user_made_with_planted_links_is_refused(tmp_path):
    outside = tmp_path / "root-only"
    outside.mkdir(mode=0o700)
    (outside / "precious").write_text("root's own\n")
    (outside / "chmod-me").write_text("root's own\n")
    os.chmod(outside / "chmod-me", 0o644)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    state = shared / "rigmon"
    state.mkdir(mode=0o755)
    links = {
        "cooling.json.tmp": outside / "precious",
        "known.json.tmp": outside / "chmod-me",
        "jobs.sqlite": outside / "new-file",
        "rigmon.lock": outside / "lock",
        "history.bin": outside / "precious",
    }
    for name, target in links.items():
        os.symlink(target, state / name)
        os.lchown(state / name, OTHER, OTHER)
    os.chown(state, OTHER, OTHER)
    config = f'[daemon]\nstate_dir = "{state}"\n[[notifiers]]\ntype = "webhook"\nurl = "http://127.0.0.1:9/"\n'
    (tmp_path / "rigmon.toml").write_text(config)
    before = _snapshot(tmp_path)
    done = _run(tmp_path)
    assert done.returncode != 0
    assert "belongs to uid 65534, not to the daemon's user" in said(done), done.stderr
    after = _snapshot(tmp_path)
    changed = {p for p in before if before[p] != after.get(p)} | (set(after) - set(before))
    assert not changed, changed
    assert (outside / "precious").read_text() == "root's own\n"
    assert stat.S_IMODE((outside / "chmod-me").stat().st_mode) == 0o644
    assert sorted(p.name for p in outside.iterdir()) == ["chmod-me", "precious"]


@pytest.mark.parametrize("where", ["/tmp", "shared"])
def test_a_shared_directory_is_no_state_directory(tmp_path, where):
    if where == "shared":
        state = tmp_path / "group"
        state.mkdir()
        os.chmod(state, 0o775)
    else:
        state = Path("/tmp")
    mode = stat.S_IMODE(state.stat().st_mode)
    (tmp_path / "rigmon.toml").write_text(f'[daemon]\nstate_dir = "{state}"\n')
    done = _run(tmp_path)
    assert done.returncode != 0 and "others may write to" in said(done), done.stderr
    assert stat.S_IMODE(state.stat().st_mode) == mode, "the shared directory's mode was changed"


def test_damaged_state_files_are_set_aside_not_fatal(tmp_path):
    """A FIFO as known.json, a history that inflates to 256 MB: each is said and started
    afresh, the daemon's peak resident size stays far under the unit's 512 MB, and it polls on."""
    recording = sc.hot_box(tmp_path, gpus=2)
    state = replay_state_dir(tmp_path / "state", argparse.Namespace(replay=str(recording), demo=False))
    state.mkdir(mode=0o700, parents=True)
    os.mkfifo(state / "known.json", 0o600)
    bomb = zlib.compressobj(9)
    body = b"rigmon-history 1\n" + bomb.compress(b"{}\n" + bytes(256 << 20)) + bomb.flush()
    (state / "history.bin").write_bytes(body)
    rigmon = Rigmon(tmp_path, recording, "[daemon]\ninterval = 0.5\n")
    try:
        rigmon.wait_ready()
        rigmon.wait_polls(3)
        peak = int(
            next(
                line.split()[1]
                for line in Path(f"/proc/{rigmon.proc.pid}/status").read_text().splitlines()
                if line.startswith("VmHWM:")
            )
        )
        assert peak < 200 << 10, f"peak {peak >> 10} MiB"
    finally:
        assert rigmon.stop() == 0
    log = rigmon.output()
    assert "Traceback" not in log, log[-3000:]
    for name in ("known.json", "history"):
        assert any(name in line and "cannot be read" in line for line in log.splitlines()), (name, log[-3000:])


@pytest.mark.parametrize("damage", ["nested", "fifo", "link"])
def test_a_cooling_file_nested_deep_a_fifo_or_a_link_is_damage(tmp_path, damage, caplog):
    path = tmp_path / "cooling.json"
    if damage == "nested":
        path.write_text("[" * 200_000 + "]" * 200_000)
    elif damage == "fifo":
        os.mkfifo(path, 0o600)
    else:
        (tmp_path / "elsewhere.json").write_text('{"format": 1}')
        os.symlink(tmp_path / "elsewhere.json", path)
    assert cooling.read_file(path) is None
    assert "cannot be read" in caplog.text


# --- auth a botnet cannot starve ---------------------------------------------------------------
class _Conn:
    closing = False

    def __init__(self, address: str):
        self.address = address


def test_after_a_restart_known_credentials_go_before_a_crowd_of_fresh_addresses(tmp_path):
    """The scraper's credentials passed once; a new BasicAuth (a restart) reads which did. 500
    guesses, each from a new address, then the scraper's: it is checked first, and the guesses
    are paced together (AUTH_CHECKS_PER_SECOND), not one address at a time."""
    import asyncio
    import base64
    import hashlib

    from rigmon.http import auth as authmod

    digest = hashlib.sha256(b"right").hexdigest()
    good = "Basic " + base64.b64encode(b"prom:right").decode()
    before = authmod.BasicAuth("prom", digest, known=authmod.Known(tmp_path / "auth.json"))
    assert before.verify(good)
    assert stat.S_IMODE((tmp_path / "auth.json").stat().st_mode) == 0o600
    restarted = authmod.BasicAuth("prom", digest, known=authmod.Known(tmp_path / "auth.json"))
    assert restarted.cached(good) is None  # no verdict kept in memory: it must be checked
    assert good in restarted.known and "Basic " + base64.b64encode(b"prom:wrong").decode() not in restarted.known

    async def crowd() -> tuple[float, int, float]:
        loop = asyncio.get_running_loop()
        gate = authmod.AuthGate(loop, lambda: restarted)
        answered: list[tuple[str, bool, float]] = []
        start = loop.time()
        for n in range(500):
            wrong = "Basic " + base64.b64encode(f"prom:guess-{n}".encode()).decode()
            gate.check(
                wrong, _Conn(f"127.1.{n // 250}.{n % 250}"), lambda ok, n=n: answered.append((n, ok, loop.time()))
            )
        gate.check(good, _Conn("127.9.9.9"), lambda ok: answered.append(("scraper", ok, loop.time())))
        await asyncio.sleep(1.0)
        scraper = next(t for who, ok, t in answered if who == "scraper" and ok)
        guesses = sum(1 for who, _, _ in answered if who != "scraper")
        gate.shutdown()
        return scraper - start, guesses, loop.time() - start

    waited, guesses, seconds = asyncio.run(crowd())
    assert waited < 0.2, f"the scraper waited {waited:.2f} s"
    assert guesses <= authmod.AUTH_CHECKS_PER_SECOND * seconds + 2, f"{guesses} guesses checked in {seconds:.1f} s"
