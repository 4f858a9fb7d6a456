"""Hostile neighbours: what another user's process, a damaged file or a careless rule can do to
the daemon, and what the admin's terminal then shows. Real processes, a real influxd and
Prometheus, the replayed GPUs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import scenarios as sc
from receiver import Receiver
from servers import Prometheus, Rigmon, free_port, http_get, wait_for

from rigmon.config import schema as configmod
from rigmon.config.box import Box
from rigmon.readers import procs
from rigmon.readers.host import SystemHost

# What a user can put in argv: OSC 52 (writes the clipboard), OSC 0 (window title), clear the
# screen, hide the rest, colours that forge a verdict, a newline that forges a log line, a
# trailing backslash, and bytes that are not UTF-8.
HOSTILE_ARGS = [
    b"--hf-token=hf_SECRET",
    b"\x1b]52;c;cm0gLXJmIH4K\x07",
    b"\x1b]0;owned\x07",
    b"\x1b[2J",
    b"\x1b[8m",
    b"\x1b[32mALL GPUS OK\x1b[0m",
    b"line\n2026-12-03 INFO rigmon: forged",
    b"\xff\xfe\xc3",
    b"tail\\",
]
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")  # anything but our own newlines and tabs


def rigmon_cli(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rigmon", *args], capture_output=True, timeout=120, **kw)


@pytest.fixture
def hostile_processes(tmp_path):
    """Three real processes: a hostile one whose program name (comm) and argv hold escape
    sequences and invalid UTF-8, and two plain ones of the same box."""
    weird = tmp_path / os.fsdecode(b"py\xff\x1b[2J")
    os.symlink(sys.executable, weird)
    sleeper = [b"-c", b"import time; time.sleep(120)"]
    hostile = subprocess.Popen([os.fsencode(weird), *sleeper, *HOSTILE_ARGS], start_new_session=True)
    plain = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "train.py"], start_new_session=True)
        for _ in range(2)
    ]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and b"hf_SECRET" not in Path(f"/proc/{hostile.pid}/cmdline").read_bytes():
        time.sleep(0.05)
    yield hostile.pid, [p.pid for p in plain]
    for p in (hostile, *plain):
        p.kill()
        p.wait()


def test_one_process_cannot_erase_the_others_or_reach_a_terminal(hostile_processes, tmp_path):
    hostile, plain = hostile_processes
    info = procs.parse(procs.raw([hostile, *plain]))
    assert {hostile, *plain} <= set(info)  # the hostile one's bytes cost nobody their identity (and ancestors)
    assert all(info[p].user == "root" for p in (hostile, *plain))
    for p in info.values():
        for text in (p.user or "", p.command or "", p.job, p.unit or ""):  # an ancestor may have gone: None
            assert not CONTROL.search(text) and "\n" not in text, text
    assert "\\x1b]52;c;" in info[hostile].command  # shown as text, not obeyed
    assert "\ufffd" in info[hostile].command  # the invalid UTF-8, replaced


@pytest.fixture
def named_cgroup(tmp_path):
    """A cgroup v1 hierarchy of the test's own (name=…, no controller): a real cgroup a process
    can be put in, whatever this machine's own cgroups allow."""
    mountpoint = tmp_path / "cgroup"
    mountpoint.mkdir()
    done = subprocess.run(
        ["mount", "-t", "cgroup", "-o", "none,name=rigmontest", "cgroup", str(mountpoint)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a named cgroup hierarchy: {done.stderr.strip()}")
    yield mountpoint
    for group in mountpoint.iterdir():
        if group.is_dir():
            for pid in (group / "cgroup.procs").read_text().split():
                (mountpoint / "cgroup.procs").write_text(pid)
            group.rmdir()
    subprocess.run(["umount", str(mountpoint)], check=True)


def test_a_real_cgroup_with_escape_sequences_names_the_job_as_text(hostile_processes, named_cgroup, tmp_path):
    hostile, plain = hostile_processes
    group = named_cgroup / "evil\x1b]0;owned\x07\x1b[2J train \x9b31m.service"
    group.mkdir()
    (group / "cgroup.procs").write_text(str(hostile))
    info = procs.parse(procs.raw([hostile, *plain]))
    assert info[hostile].job == "root/" + info[hostile].unit
    assert info[hostile].unit.startswith("systemd:evil\\x1b]0;owned")
    assert not CONTROL.search(info[hostile].job) and all(info[p].user == "root" for p in (hostile, *plain))
    path = _recording_with([hostile, *plain], 1, tmp_path)
    status = rigmon_cli("status", "--replay", str(path), "--at", "10")
    assert status.returncode == 0 and not CONTROL.search(status.stdout.decode())
    assert "systemd:evil\\x1b]0;owned" in status.stdout.decode()


def test_a_hostile_cgroup_name_is_shown_as_text():
    """A unit name in a user's own subtree is the user's to choose (systemd-run --user --unit=…):
    it names no job there (the user's process group does); outside it, as text."""
    cgroup = "\x1b]0;owned\x07\x1b[2Jtrain \x9b31m forged.service\n"
    answer = {
        "7": {
            "user": "eve",
            "cmdline": "python x.py",
            "pgid": 7,
            "start": 1.0,
            "cgroup": "0::/user.slice/user-1000.slice/user@1000.service/app.slice/" + cgroup,
        },
        "8": {
            "user": "root",
            "cmdline": "python x.py",
            "pgid": 8,
            "start": 1.0,
            "cgroup": "0::/system.slice/" + cgroup,
        },
    }
    info = procs.parse(answer)
    assert info[7].unit is None and info[7].job == "eve/pgid:7"
    assert info[8].job == "root/" + info[8].unit and info[8].unit.startswith("systemd:\\x1b]0;owned\\x07")
    assert not CONTROL.search(info[8].job) and "\n" not in info[8].job


def _recording_with(pids: list[int], gpus: int, tmp_path: Path) -> Path:
    rec = sc.on_every_gpu(
        sc.h200().widened(gpus),
        nvmlDeviceGetComputeRunningProcesses=[
            {"pid": pid, "usedGpuMemory": (n + 1) << 30} for n, pid in enumerate(pids)
        ],
    )
    rec = sc.with_host(rec, processes=SystemHost().processes(pids))  # as rigmon record stores /proc's answer
    return sc.write(rec, tmp_path / "hostile.rec.jsonl")


def test_status_jobs_and_logs_show_no_escape_sequence(hostile_processes, tmp_path):
    hostile, plain = hostile_processes
    path = _recording_with([hostile, *plain], 2, tmp_path)
    status = rigmon_cli("status", "--replay", str(path), "--at", "10")
    assert status.returncode == 0, status.stderr
    out = status.stdout.decode()
    assert not CONTROL.search(out) and "\x1b" not in out and "\x07" not in out
    assert not any(line.startswith("2026-12-03 INFO rigmon: forged") for line in out.splitlines())
    rows = [line for line in out.splitlines() if re.match(r"\d+\s+\d+\s+root", line)]
    assert len(rows) == 6 and all("root" in r for r in rows)  # three processes on two GPUs, each with its user

    # the daemon books their jobs (and logs them) from the same replay
    from servers import replay_state

    config = tmp_path / "rigmon.toml"
    config.write_text(f'[daemon]\ninterval = 0.2\nstate_dir = "{tmp_path / "state"}"\n')
    daemon = Rigmon(tmp_path, path, config.read_text())
    state = replay_state(tmp_path / "state", path)  # the replay's own
    config = tmp_path / "read.toml"  # for rigmon jobs below
    config.write_text(f'[daemon]\ninterval = 0.2\nstate_dir = "{state}"\n')
    try:
        daemon.wait_ready()
        wait_for(lambda: (state / "jobs.sqlite").exists(), 20, what="the ledger")
        wait_for(lambda: daemon.output().count("job #") >= 3, 20, what="the three jobs logged")
    finally:
        assert daemon.stop() == 0
    log = daemon.output()
    assert "job #" in log and not CONTROL.search(log)
    assert not any(line.startswith("2026-12-03 INFO rigmon: forged") for line in log.splitlines())
    assert "hf_SECRET" not in log  # the ledger keeps the program, not its arguments
    assert oct((state / "jobs.sqlite").stat().st_mode & 0o777) == "0o600"
    listing = rigmon_cli("jobs", "--config", str(config))
    assert listing.returncode == 0, listing.stderr
    text = listing.stdout.decode()
    assert len([line for line in text.splitlines() if "root" in line]) == 3
    assert not CONTROL.search(text) and "hf_SECRET" not in text
    for job_id in (1, 2, 3):
        shown = rigmon_cli("jobs", "show", str(job_id), "--config", str(config))
        assert shown.returncode == 0 and not CONTROL.search(shown.stdout.decode()), shown.stderr
    rows = json.loads(rigmon_cli("jobs", "--json", "--config", str(config)).stdout)["jobs"]
    assert all("hf_SECRET" not in (r["command"] or "") for r in rows)
    assert all(r["command"] for r in rows) and sum(r["command"].endswith(" -c") for r in rows) == 2


def test_command_lines_are_kept_only_when_asked(hostile_processes, tmp_path):
    from rigmon.poller import build_poller
    from rigmon.sinks.jobs import JobLedger

    hostile, _ = hostile_processes
    path = _recording_with([hostile], 1, tmp_path)
    commands = {}
    for keep in (False, True):
        config = configmod.parse(
            {
                "daemon": {"state_dir": str(tmp_path / str(keep))},
                "prometheus": {"enabled": False},
                "gpu": {"xid_events": False},
                "jobs": {"store_command_lines": keep},
            }
        )
        poller = build_poller(
            config, sc.source(sc.Recording.load(path), 10), event_thread=False, host_backend=SystemHost()
        )
        poller.open()
        ledger = JobLedger(config.jobs, Box.of(config, "box"))
        ledger.book(poller.poll())
        ledger.close()
        poller.close()
        (job,) = ledger.running.values()
        commands[keep] = job.command
    assert "hf_SECRET" not in commands[False] and commands[False].startswith("py")
    assert "hf_SECRET" in commands[True] and "\x1b" not in commands[True]


def test_hostile_strings_round_trip_through_influxdb_and_prometheus(hostile_processes, tmp_path, influx):
    """The job key, user and command of a hostile process, as line protocol into a real influxd
    and as labels through a real Prometheus: what comes back is what rigmon holds."""
    from rigmon.model.project import influx_tag
    from rigmon.sinks.jobs import Job
    from rigmon.sinks.lineprotocol import encode_job

    hostile, plain = hostile_processes
    info = procs.parse(procs.raw([hostile]))[hostile]
    keys = [info.command, "systemd:a\\x2db.service", "ends in a backslash\\", "p\\,q", "line\nbreak"]
    lines = [
        encode_job(Job(n + 1, key, info.command, info.command, None, 1.0, 2.0, ended=2.0), "box")
        for n, key in enumerate(keys)
    ]
    assert all("\n" not in line for line in lines)
    request = urllib.request.Request(f"{influx.url}/write?db={influx.database}", data="\n".join(lines).encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 204
    (series,) = influx.query('SELECT "command", "job", "user" FROM "job"')
    values = series["values"]
    expected = {k: influx_tag(k).replace("\\,", ",").replace("\\ ", " ").replace("\\=", "=") for k in keys}
    assert sorted(v[2] for v in values) == sorted(expected.values())
    assert {v[2] for v in values} >= {"systemd:a\\x2db.service", "ends in a backslash\\x5c"}  # not doubled
    assert all(v[1] == info.command and v[3] == expected[info.command] for v in values)

    # Prometheus: the process series' labels
    path = _recording_with([hostile, *plain], 1, tmp_path)
    port = free_port()
    daemon = Rigmon(tmp_path, path, "[daemon]\ninterval = 0.5\n[gpu]\nprocess_series = 4\n", port=port)
    prometheus = None
    try:
        daemon.wait_ready()
        prometheus = Prometheus(tmp_path, [f"127.0.0.1:{port}"])
        series = wait_for(
            lambda: prometheus.query("rigmon_gpu_process_memory_bytes") or None,
            60,
            what="the process series in Prometheus",
        )
        exported = http_get(daemon.url)[1].decode()
    finally:
        if prometheus is not None:
            prometheus.stop()
        daemon.stop()
    users = {s["metric"]["pid"]: (s["metric"]["user"], s["metric"]["job"]) for s in series}
    assert set(users) == {str(hostile), *map(str, plain)}
    assert all(user == "root" for user, _ in users.values())
    assert not CONTROL.search(exported)


# --- faults stay where they happen --------------------------------------------------------------
def test_a_rule_that_cannot_render_leaves_the_others_firing_and_notifying(tmp_path):
    receiver = Receiver()
    rules = """
[[alerts.rules]]
name = "BadTemplate"
kind = "gpu"
when = "temperature_celsius > 0"
severity = "warning"
summary = "{memory_total_bytes:c}"
[[alerts.rules]]
name = "PlainWarm"
kind = "gpu"
when = "temperature_celsius > 0"
severity = "warning"
summary = "GPU {gpu} at {temperature_celsius:.0f} °C"
"""
    rigmon = Rigmon(
        tmp_path,
        sc.demo_path(),
        f'[daemon]\ninterval = 0.3\n{rules}\n[[notifiers]]\ntype = "webhook"\nurl = "{receiver.url}"\n',
    )
    try:
        rigmon.wait_ready()
        wait_for(
            lambda: {b["alerts"][0]["labels"]["alertname"] for b in receiver.json()} >= {"PlainWarm"},
            20,
            what="the plain rule's notification",
        )
        active = http_get(rigmon.url)[1].decode()
    finally:
        assert rigmon.stop() == 0
        receiver.stop()
    assert 'alertname="PlainWarm"' in active and 'alertname="BadTemplate"' in active
    assert "Traceback" not in rigmon.output()
    # and the offline test of the same rules, and config check of a template no value can fill
    config = tmp_path / "rules.toml"
    config.write_text(rules)
    tested = rigmon_cli("rules", "test", "--config", str(config), "--replay", str(sc.demo_path()))
    assert tested.returncode in (0, 1) and b"Traceback" not in tested.stderr and b"PlainWarm" in tested.stdout
    config.write_text(
        '[[alerts.rules]]\nname = "Bad"\nkind = "gpu"\nwhen = "temperature_celsius > p"\n'
        'severity = "info"\nsummary = "{p:c}"\nparams = { p = 1000000000 }\n'
    )
    checked = rigmon_cli("config", "check", str(config))
    assert checked.returncode == 2 and b"summary" in checked.stderr and b"{p:c}" in checked.stderr
    assert b"Traceback" not in checked.stderr


def _metric(url: str, name: str) -> float:
    text = http_get(url)[1].decode()
    found = re.findall(rf"^{name} (\S+)$", text, re.M)
    return float(found[0]) if found else float("nan")


def test_a_vanished_spool_segment_and_a_second_daemon(tmp_path, influx, eight_gpus):
    state = tmp_path / "state"
    config = (
        f'[daemon]\ninterval = 0.2\nstate_dir = "{state}"\n[influxdb]\nenabled = true\napi = "v1"\n'
        f'url = "{influx.url}"\ndatabase = "rigmon"\nflush_interval = "0.2s"\nretry_initial = "0.2s"\n'
        f'retry_max = "0.5s"\n'
    )
    rigmon = Rigmon(tmp_path, eight_gpus, config)
    try:
        rigmon.wait_ready()
        (tmp_path / "second").mkdir()
        second = Rigmon(tmp_path / "second", eight_gpus, config)
        assert second.proc.wait(30) == 2
        out = second.output().strip()
        err = [line for line in out.splitlines() if not line.startswith(" ")]  # one message, wrapped at COLUMNS
        assert len(err) == 1 and "another rigmon daemon uses the state directory" in " ".join(out.split()), out
        influx.stop()  # an outage: segments pile up, and one is deleted by hand
        from servers import replay_state

        spool = replay_state(state, eight_gpus) / "influxdb-spool"  # the replay's own
        wait_for(lambda: len(list(spool.glob("*.lp"))) >= 3, 60, what="spooled segments")
        victim = sorted(spool.glob("*.lp"))[0]
        lost = victim.read_bytes().count(b"\n")
        victim.unlink()
        time.sleep(0.5)
        written_before = _metric(rigmon.url, "rigmon_influxdb_points_written_total")
        influx.start()
        wait_for(
            lambda: (
                _metric(rigmon.url, "rigmon_influxdb_spool_points") == 0
                and _metric(rigmon.url, "rigmon_influxdb_points_written_total") > written_before
            ),
            60,
            what="the spool to drain after the outage",
        )
        produced, written, dropped, failed, spooled = (
            _metric(rigmon.url, f"rigmon_influxdb_points_{n}")
            for n in ("produced_total", "written_total", "dropped_total", "failed_total", "spooled")
        )
    finally:
        assert rigmon.stop() == 0
    out = rigmon.output()
    assert "vanished before it was sent" in out and "Traceback" not in out
    assert lost > 0 and dropped == lost and failed == 0
    assert written + dropped + failed <= produced  # the rest is spooled or still queued
    assert influx.count("SELECT count(power_watts) FROM gpu") * 1 > 0


# --- churn and reuse ----------------------------------------------------------------------------
def _owner(user: str, start: float) -> dict:
    return {
        "500": {
            "user": user,
            "uid": 1000,
            "cmdline": f"python {user}.py",
            "cgroup": "",
            "ppid": 1,
            "pgid": 500,
            "start": start,
        }
    }


def test_a_reused_pid_is_a_new_process_and_a_new_job(tmp_path):
    """PID 500 is alice's training run, then (between two polls, the same PID set) bob's."""
    from rigmon.poller import build_poller
    from rigmon.sinks.jobs import JobLedger

    def modify(t, tick):
        sc.set_gpu(tick, nvmlDeviceGetComputeRunningProcesses=[{"pid": 500, "usedGpuMemory": 1 << 30}])
        t0 = tick["t"] - t
        tick["host"]["processes"] = _owner("alice", t0 - 30) if t < 60 else _owner("bob", t0 + 58)

    rec = sc.timeline(120, 5, host={"processes": {}}, modify=modify)
    config = configmod.parse(
        {
            "daemon": {"state_dir": str(tmp_path)},
            "prometheus": {"enabled": False},
            "gpu": {"xid_events": False, "slow_interval": 0},
            "host": {"rapl": False},
            "jobs": {"end_after": 10},
        }
    )
    source = sc.source(rec, 0)
    t0 = rec.ticks[0]["t"]
    poller = build_poller(config, source, event_thread=False, wall=lambda: t0 + source.clock())  # the recording's time
    poller.open()
    ledger = JobLedger(config.jobs, Box.of(config, "box"))
    users = []
    for t in range(0, 125, 5):
        source.clock.set(t)
        sample = poller.poll()
        users.append(sample.processes[0].user)
        ledger.book(sample)
    ledger.close()
    poller.close()
    assert users[:12] == ["alice"] * 12 and users[12:] == ["bob"] * 13
    from rigmon.sinks.jobs import load

    booked = {j.user: j.gpu_seconds for j in load(tmp_path / "jobs.sqlite")}
    assert set(booked) == {"alice", "bob"}
    assert booked["alice"] <= 60 and booked["bob"] <= 60  # neither gets the other's time


@pytest.mark.slow
def test_process_series_churn_keeps_memory_flat(tmp_path):
    """10,000 polls, each with a new process on every GPU (a new PID and job; seven users): the
    exposition keeps only the series it renders, the ledger only the running jobs, and the
    process's memory stays flat over the second half."""
    from prometheus_client.exposition import choose_encoder

    from rigmon.exporters.exposition import Exposition

    def modify(t, tick):
        n = int(t)
        for g in tick["gpus"]:
            g["nvmlDeviceGetComputeRunningProcesses"] = [{"pid": 10_000 + n, "usedGpuMemory": 1 << 30}]
        tick["host"]["processes"] = {
            str(10_000 + n): {
                "user": f"user{n % 7}",
                "uid": n % 7,
                "cmdline": "python x.py",
                "cgroup": "",
                "ppid": 1,
                "pgid": 10_000 + n,
                "start": tick["t"] - 0.5,
            }
        }

    polls = 10_000
    rec = sc.timeline(polls, 1, gpus=8, host={"processes": {}}, modify=modify)
    config = configmod.parse(
        {
            "daemon": {"state_dir": str(tmp_path)},
            "prometheus": {"enabled": False},
            "gpu": {"xid_events": False, "process_series": 4},
            "jobs": {"end_after": 2},
        }
    )
    replayed = sc.Replayed(rec, config, recording_time=True)
    history = replayed.pipeline.history
    exposition = Exposition()
    render = exposition.encoder(choose_encoder("application/openmetrics-text; version=1.0.0")[0])
    kept, rss = [], {}
    for t in range(polls):
        replayed.poll(t)
        text = render(replayed.registry)
        kept.append(len(exposition._prefixes[True]))
        if t == polls // 2:
            # what the history's thread does 10 s after start and every 5 minutes (a save, the
            # week's ask kept ready), done here: on the wall's clock it lands anywhere in the run
            history.save()
            history.make_ready()
        if t in (polls // 2, polls - 1):
            rss[t] = int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))
    replayed.close()
    daemon = replayed.daemon
    assert f'pid="{10_000 + polls - 1}"'.encode() in text
    growth = (rss[polls - 1] - rss[polls // 2]) / 1024
    print(
        f"prefixes kept: {kept[100]} at poll 100, at most {max(kept[polls // 2 :])} over the second half; "
        f"RSS {rss[polls // 2] / 1024:.1f} -> {rss[polls - 1] / 1024:.1f} MiB ({growth:+.2f}) over the second half; "
        f"{len(daemon.pipeline.jobs.running)} job(s) running at the end"
    )
    assert max(kept[polls // 2 :]) <= max(kept[100:200]) + 300  # bounded by the live series, not the polls
    assert growth <= 2.0


def test_a_413_sends_the_batch_in_smaller_parts(tmp_path, influx, eight_gpus):
    """A server (or proxy) that takes at most 2,000 bytes a request (one or two points; the longest
    line here is under 1,000): what waited in the spool during an outage is sent in parts small
    enough, every point stored, none failed."""
    from servers import FaultProxy

    proxy = FaultProxy(influx.url)
    config = (
        f'[daemon]\ninterval = 0.2\n[influxdb]\nenabled = true\napi = "v1"\nurl = "{proxy.url}"\n'
        f'database = "rigmon"\nflush_interval = "0.2s"\nretry_initial = "0.2s"\nretry_max = "0.5s"\n'
    )
    rigmon = Rigmon(tmp_path, eight_gpus, config)
    try:
        rigmon.wait_ready()
        proxy.mode = 503
        wait_for(
            lambda: _metric(rigmon.url, "rigmon_influxdb_spool_points") >= 300,
            30,
            what="a backlog in the spool larger than 2,000 bytes gzipped",
        )
        proxy.max_body = 2000
        proxy.mode = "pass"
        wait_for(lambda: 413 in proxy.answered, 20, what="a 413")
        wait_for(lambda: _metric(rigmon.url, "rigmon_influxdb_spool_points") == 0, 90, what="the spool to drain")
        written = _metric(rigmon.url, "rigmon_influxdb_points_written_total")
        failed = _metric(rigmon.url, "rigmon_influxdb_points_failed_total")
    finally:
        assert rigmon.stop() == 0
        proxy.stop()
    print(f"{proxy.answered.count(413)} answers of 413, {written:.0f} points written, {failed:.0f} failed")
    assert failed == 0 and written > 0 and proxy.answered[-1] == 204
    assert "Traceback" not in rigmon.output()


def test_a_lone_surrogate_does_not_stop_the_spooler(tmp_path):
    """A string from a damaged recording with a lone surrogate: written as its escape; the
    spooler and the sender go on with everything after it."""
    from rigmon.sinks.base import PollResult
    from rigmon.sinks.influxdb import InfluxSink

    class Sender:
        def __init__(self):
            self.sent = []

        def send(self, data: bytes) -> None:
            self.sent.append(data.decode("utf-8"))

        def close(self) -> None:
            pass

    config = configmod.parse(
        {"daemon": {"state_dir": str(tmp_path)}, "influxdb": {"enabled": True, "flush_interval": "0.1s"}}
    )
    sender = Sender()
    sink = InfluxSink(config.influxdb, Box.of(config), sender=sender)
    try:
        sink.consume(PollResult(None, lines=('gpu,host=box name="H200\ud800" 1',)))
        sink.consume(PollResult(None, lines=("gpu,host=box power_watts=1.0 2",)))
        wait_for(lambda: sink.state()["points_written"] == 2, 10, what="both points sent")
    finally:
        sink.close(timeout=2)
    sent = "".join(sender.sent)
    assert 'name="H200\\ud800"' in sent and "power_watts=1.0 2" in sent and sink.faults == 0
