"""Faults found by an adversarial pass, each reproduced and shown fixed: the HTTPS port with
idle and slow clients, InfluxDB behind a fault-injecting proxy (a full disk, bad bytes,
transient 400s, an hour-long Retry-After, a server that hangs), warm stops and SIGHUP,
secrets in URLs, hostile rules, non-finite values, unbounded inputs, non-ASCII credentials."""

import base64
import hashlib
import json
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
import scenarios as sc
from receiver import Receiver
from servers import FaultProxy, Rigmon, free_port, http_get, metric_at, wait_for, wait_polls_at
from test_daemon import _self_signed
from test_influxdb import gpu_points, metric, polls_from_log

from rigmon.alerts.engine import AlertEngine
from rigmon.alerts.rules import Expression, Rule
from rigmon.alerts.specs import RuleSpec
from rigmon.config.schema import ConfigError, parse
from rigmon.model.recording import Recording, RecordingError
from rigmon.sinks.retry import backoff


def rigmon_cli(*args, timeout=60, **kw):
    return subprocess.run(
        [sys.executable, "-m", "rigmon", *args], capture_output=True, text=True, timeout=timeout, **kw
    )


def influx_config(url, state_dir, api="v1", extra="", interval=0.2):
    auth = 'org = "lab"\nbucket = "rigmon"\ntoken = "t0ken"' if api == "v2" else 'database = "rigmon"'
    return f"""
[daemon]
interval = {interval}
state_dir = "{state_dir}"
[influxdb]
enabled = true
api = "{api}"
url = "{url}"
{auth}
flush_interval = 0.2
retry_initial = "0.2s"
retry_max = "1s"
{extra}
"""


def spool_dir(state: Path) -> Path:
    """The spool of the daemon with this state_dir: a replay's own (state_dir/replay/<name>), else the box's."""
    found = sorted(state.glob("replay/*/influxdb-spool"))
    return found[0] if found else state / "influxdb-spool"


# 1. The HTTPS port: an idle connection or a slow client holds only its own thread ----------------
def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def test_idle_and_slow_tls_clients_never_block_a_scrape(tmp_path):
    cert, key = _self_signed(tmp_path)
    config = f'[daemon]\ninterval = 0.5\n[prometheus]\ntls_cert = "{cert}"\ntls_key = "{key}"\n'
    rigmon = Rigmon(tmp_path, sc.demo_path(), config)
    context = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{rigmon.port}/metrics"
    idle = []
    try:
        wait_for(lambda: http_get(url, context=context, timeout=2)[0] == 200, 30, what="the TLS endpoint")
        idle.append(socket.create_connection(("127.0.0.1", rigmon.port)))  # connects, never says a word
        times = []
        for _ in range(5):
            started = time.monotonic()
            assert http_get(url, context=context, timeout=5)[0] == 200
            times.append(time.monotonic() - started)
        assert max(times) < 2, times
        # 200 slow clients: bounded threads, then every one times out and scrapes are served again
        idle += [socket.create_connection(("127.0.0.1", rigmon.port)) for _ in range(200)]
        threads = 0
        for _ in range(10):  # the most threads over the next second, however many connect
            time.sleep(0.1)
            threads = max(threads, threads_of(rigmon.proc.pid))
        assert threads <= 64 + 16, threads
        wait_for(lambda: http_get(url, context=context, timeout=2)[0] == 200, 30, what="scrapes after the timeout")
        print(
            f"\n5 scrapes beside an idle connection: {max(times) * 1000:.0f} ms at most; "
            f"200 idle connections: {threads} threads"
        )
    finally:
        for s in idle:
            s.close()
        assert rigmon.stop() == 0
    assert "Traceback" not in rigmon.output()


# 2. A full disk: samples wait in memory, a torn write is cut back, nothing is lost ---------------
def test_a_full_disk_loses_nothing(tmp_path, influx, eight_gpus):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare for a private tmpfs")
    proxy = FaultProxy(influx.url)
    proxy.mode = "down"
    state = tmp_path / "state"
    state.mkdir()
    config = tmp_path / "rigmon.toml"
    config.write_text(influx_config(proxy.url, state, extra="spool_max_bytes = 67108864", interval=0.1))
    port = free_port()
    log = open(tmp_path / "rigmon.log", "w+")
    # rigmon's state directory on a 512 KiB tmpfs in a mount namespace of its own
    proc = subprocess.Popen(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            f"mount -t tmpfs -o size=512k tmpfs {state} && exec "
            f"{sys.executable} -m rigmon run --config {config} --listen 127.0.0.1 --port {port} "
            f"--replay {eight_gpus}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    metrics = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_for(lambda: http_get(metrics, timeout=2)[0] == 200, 30, what="rigmon")
        wait_for(lambda: "cannot write the spool" in (tmp_path / "rigmon.log").read_text(), 60, what="the disk to fill")
        wait_for(
            lambda: metric_at(metrics, "rigmon_influxdb_memory_points") > 0,
            60,
            what="samples held in memory for want of disk",
        )
        wait_polls_at(metrics, 20)  # two more seconds of samples with the disk full
        proxy.mode = "pass"
        body = lambda: http_get(metrics, timeout=2)[1].decode()  # noqa: E731
        wait_for(
            lambda: "rigmon_influxdb_spool_points 0.0" in body() and "rigmon_influxdb_memory_points 0.0" in body(),
            90,
            what="the spool and memory to drain",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        proxy.stop()
    log.seek(0)
    output = log.read()
    assert code == 0, output[-3000:]
    polls = polls_from_log(output)
    stored = gpu_points(influx)
    print(f"\nfull disk: {polls} polls, {stored} stored for GPU 0")
    assert stored == polls, output[-3000:]
    assert "dropped" not in output and "rejected" not in output
    assert "the disk has room again" in output


# 3. and 4. Bad bytes and 400s -------------------------------------------------------------------
def seed_spool(state: Path, lines: list[bytes], recording: Path) -> None:
    """Lines left in the spool of the daemon replaying ``recording`` with this state_dir (its own)."""
    from servers import replay_state

    spool = replay_state(state, recording) / "influxdb-spool"
    spool.mkdir(parents=True)
    (spool / "0000000000000001.lp").write_bytes(b"".join(x + b"\n" for x in lines))


def seeded_lines(n: int, t0: int = 1_700_000_000_000_000_000) -> list[bytes]:
    return [f"seeded,host=h value={i}i {t0 + i}".encode() for i in range(n)]


@pytest.mark.parametrize("api", ["v2", "v1"])
def test_bytes_that_are_not_utf8_are_set_aside_and_the_rest_written(api, tmp_path, influx, eight_gpus):
    from servers import V2Gateway

    gateway = V2Gateway(influx, token="t0ken", org="lab", bucket="rigmon") if api == "v2" else None
    state = tmp_path / "state"
    lines = seeded_lines(40)
    lines.insert(17, b"seeded,host=h value=1i 1700000000000000999 \xff\xfe")
    seed_spool(state, lines, eight_gpus)
    rigmon = Rigmon(tmp_path, eight_gpus, influx_config(gateway.url if gateway else influx.url, state, api=api))
    try:
        rigmon.wait_ready()
        wait_for(lambda: influx.count("SELECT count(value) FROM seeded") == 40, 30, what="the seeded points")
        wait_for(lambda: metric(rigmon, "rigmon_influxdb_points_failed_total") > 0, 30, what="the bad line counted")
        failed = metric(rigmon, "rigmon_influxdb_points_failed_total")
    finally:
        assert rigmon.stop() == 0
        if gateway:
            gateway.stop()
    rejected = list(spool_dir(state).glob("*.rejected"))
    assert failed == 1 and len(rejected) == 1 and b"\xff\xfe" in rejected[0].read_bytes()
    assert gpu_points(influx) == polls_from_log(rigmon.output())  # nothing behind it was held up


def test_a_transient_400_sets_nothing_aside(tmp_path, influx, eight_gpus):
    proxy = FaultProxy(influx.url)
    state = tmp_path / "state"
    rigmon = Rigmon(tmp_path, eight_gpus, influx_config(proxy.url, state))
    try:
        rigmon.wait_ready()
        rigmon.wait_polls(3)
        proxy.mode = 400  # a proxy in front of InfluxDB answers 400 for a while
        wait_for(lambda: proxy.answered.count(400) >= 3, 30, what="three answers of 400")
        proxy.mode = "pass"
        wait_for(lambda: metric(rigmon, "rigmon_influxdb_spool_points") == 0, 60, what="the spool to drain")
        failed = metric(rigmon, "rigmon_influxdb_points_failed_total")
    finally:
        assert rigmon.stop() == 0
        proxy.stop()
    polls = polls_from_log(rigmon.output())
    print(f"\ntransient 400: {proxy.answered.count(400)} answers of 400, {polls} polls, {gpu_points(influx)} stored")
    assert proxy.answered.count(400) >= 1
    assert failed == 0 and not list(spool_dir(state).glob("*.rejected"))
    assert gpu_points(influx) == polls


def test_a_malformed_line_is_found_and_only_it_set_aside(tmp_path, influx, eight_gpus):
    state = tmp_path / "state"
    lines = seeded_lines(100)
    lines[60] = b"seeded,host=h value= 1700000000000000060"  # no value: InfluxDB answers 400
    seed_spool(state, lines, eight_gpus)
    config = influx_config(influx.url, state)
    rigmon = Rigmon(tmp_path, eight_gpus, config)
    try:
        rigmon.wait_ready()
        # (InfluxDB 1.x stores the good lines of a batch it answers 400: a partial write)
        wait_for(lambda: influx.count("SELECT count(value) FROM seeded") == 99, 60, what="the 99 good lines")
        wait_for(lambda: metric(rigmon, "rigmon_influxdb_points_failed_total") == 1, 60, what="the bad line")
        failed = metric(rigmon, "rigmon_influxdb_points_failed_total")
    finally:
        assert rigmon.stop() == 0
    (rejected,) = spool_dir(state).glob("*.rejected")
    assert failed == 1 and rejected.read_bytes() == lines[60] + b"\n"


def test_rejected_files_count_against_the_spool_bound(tmp_path):
    from rigmon.sinks.spool import Spool

    spool = Spool(tmp_path / "spool", max_bytes=65536)
    for i in range(8):
        spool.append([f"m v={i}i"])
        path, _, _ = spool.oldest()
        spool.reject(path, [b"x" * 20000])
    assert sum(p.stat().st_size for p in (tmp_path / "spool").glob("*.rejected")) <= 65536


def test_a_new_segment_never_takes_a_sent_ones_name(tmp_path, monkeypatch):
    """Sent segments' files are deleted beside the next send: a segment opened within the same
    millisecond must not be given the name of one whose deletion is still to come."""
    from rigmon.sinks import spool as spoolmod

    monkeypatch.setattr(spoolmod.time, "time", lambda: 1_800_000_000.0)  # every segment in one millisecond
    spool = spoolmod.Spool(tmp_path / "spool", max_bytes=1 << 20)
    names = set()
    for i in range(50):
        spool.append([f"m v={i}i"])
        path, data, _ = spool.oldest()
        assert path.name not in names and data == f"m v={i}i\n".encode()
        names.add(path.name)
        spool.remove(path)
    spool.append(["m v=50i"])
    spool.flush()
    assert spool.oldest()[1] == b"m v=50i\n" and spool.points == 1


def test_a_segment_dropped_while_it_is_sent_is_counted_once(tmp_path):
    """The bound may drop the oldest segments while the sender has them in flight: they count
    as dropped, and removing them after the send counts only what was still spooled."""
    from rigmon.sinks.spool import Spool

    spool = Spool(tmp_path / "spool", max_bytes=65536)  # segments of 16 KB
    for i in range(3):
        spool.append([f'm v={i}i,pad="{"x" * 17000}"'])  # one line a segment
    in_flight = spool.ready(max_bytes=1 << 20)
    assert [points for _, _, points in in_flight] == [1, 1, 1]
    for i in range(3):  # the outage goes on: the bound drops the oldest, those in flight included
        spool.append([f'm v={10 + i}i,pad="{"x" * 17000}"'])
    dropped = spool.dropped_points
    assert dropped >= 1
    written = spool.remove(*(path for path, _, _ in in_flight))
    assert written + dropped == 3  # each in-flight point counted once: written or dropped
    assert spool.points == 6 - written - dropped


# 5. Retry-After is capped by retry_max -----------------------------------------------------------
def test_retry_after_is_capped():
    assert backoff(1, 1.0, 60.0, after=3600.0) == 60.0
    assert backoff(1, 1.0, 60.0, after=5.0) == 5.0


def test_an_hour_long_retry_after_does_not_freeze_influxdb_writes(tmp_path, influx, eight_gpus):
    proxy = FaultProxy(influx.url)
    rigmon = Rigmon(tmp_path, eight_gpus, influx_config(proxy.url, tmp_path / "state"))
    try:
        rigmon.wait_ready()
        proxy.mode, proxy.retry_after = 503, "3600"
        wait_for(lambda: 503 in proxy.answered, 30, what="a 503 with an hour's Retry-After")
        rigmon.wait_polls(3)
        proxy.mode = "pass"
        started = time.monotonic()
        wait_for(lambda: metric(rigmon, "rigmon_influxdb_spool_points") == 0, 30, what="writes to resume")
        resumed = time.monotonic() - started
    finally:
        assert rigmon.stop() == 0
        proxy.stop()
    assert resumed < 5, resumed
    assert gpu_points(influx) == polls_from_log(rigmon.output())


def test_a_chat_webhooks_429_does_not_silence_later_alerts():
    from test_notify import transition

    from rigmon.config.schema import NotifierConfig
    from rigmon.sinks.notify import Notifier

    receiver = Receiver()
    receiver.status, receiver.retry_after = 429, "3600"
    notifier = Notifier(NotifierConfig(type="slack", url=receiver.url, retry_initial=0.1, retry_max=1), "box")
    try:
        notifier.submit(transition(1))
        wait_for(lambda: receiver.requests >= 1, 10, what="the 429")
        receiver.status, receiver.retry_after = 200, None
        notifier.submit(transition(1, "resolved"))
        wait_for(lambda: notifier.sent == 2, 10, what="both messages")
    finally:
        notifier.close(0.5)
        receiver.stop()


# 6. Warm stop within 5 s whatever the servers do; SIGHUP reloads ---------------------------------
def test_warm_stop_with_hanging_servers_exits_0_in_time_and_spools_the_last_poll(tmp_path, influx, eight_gpus):
    proxy = FaultProxy(influx.url)
    hooks = [Receiver() for _ in range(4)]
    for h in hooks:
        h.status = 503
    hang = FaultProxy(influx.url)
    hang.mode = "hang"
    notifiers = "".join(f'[[notifiers]]\ntype = "webhook"\nurl = "{h.url}"\nretry_initial = "5s"\n' for h in hooks)
    notifiers += f'[[notifiers]]\ntype = "webhook"\nurl = "{hang.url}/hook"\ntimeout = "30s"\n'
    rule = (
        '[[alerts.rules]]\nname = "Watched"\nkind = "gpu"\nwhen = "utilization_gpu >= 0"\n'
        'severity = "warning"\nsummary = "GPU {gpu}"\n'
    )
    state = tmp_path / "state"
    config = influx_config(proxy.url, state, extra='timeout = "60s"') + rule + notifiers
    rigmon = Rigmon(tmp_path, eight_gpus, config)
    try:
        rigmon.wait_ready()
        wait_for(lambda: all(h.requests for h in hooks) and hang.requests, 30, what="the alert at every notifier")
        rigmon.wait_polls(3)
        asked = proxy.requests
        proxy.mode = "hang"  # InfluxDB stops answering mid-run
        wait_for(lambda: proxy.requests > asked, 30, what="a write that hangs")
        started = time.monotonic()
        rigmon.proc.send_signal(signal.SIGTERM)
        code = rigmon.proc.wait(30)
        took = time.monotonic() - started
    finally:
        rigmon.stop()
        for server in (proxy, hang, *hooks):
            server.stop()
    output = rigmon.output()
    polls = polls_from_log(output)
    spooled = sum(p.read_bytes().count(b"\n") for p in spool_dir(state).glob("*.lp"))
    stored_and_spooled = gpu_points(influx) + sum(
        1
        for p in spool_dir(state).glob("*.lp")
        for x in p.read_bytes().splitlines()
        if x.startswith(b"gpu,") and b"gpu=0," in x
    )
    print(
        f"\nwarm stop with hanging InfluxDB and 5 stuck webhooks: exit {code} in {took:.2f} s; {polls} polls, "
        f"{stored_and_spooled} of GPU 0's points stored or spooled ({spooled} lines spooled)"
    )
    assert code == 0 and took < 5.0, output[-3000:]
    assert stored_and_spooled == polls, output[-3000:]


def test_sighup_reloads_a_valid_config_and_keeps_running_on_an_invalid_one(tmp_path):
    rigmon = Rigmon(tmp_path, sc.demo_path(), "[daemon]\ninterval = 0.5\n")
    try:
        rigmon.wait_ready()
        pid = rigmon.proc.pid
        state = f'state_dir = "{tmp_path / "state"}"\n'  # never the box's own
        rigmon.config.write_text("[daemon]\ninterval = -1\n" + state)
        rigmon.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "is not valid, the running config stays" in rigmon.output(), 10, what="the refusal")
        assert http_get(rigmon.url, timeout=5)[0] == 200
        rigmon.config.write_text("[daemon]\ninterval = 0.25\n" + state)
        rigmon.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "restarting with it" in rigmon.output(), 10, what="the reload")
        wait_for(
            lambda: b"rigmon_poll_interval_seconds 0.25" in http_get(rigmon.url, timeout=2)[1],
            30,
            what="the new interval",
        )
        assert rigmon.proc.pid == pid and rigmon.proc.poll() is None
    finally:
        assert rigmon.stop() == 0
    assert "interval: " in rigmon.output() and "Traceback" not in rigmon.output()


# 7. URLs with spaces or control characters; a notifier thread never dies ------------------------
@pytest.mark.parametrize("url", ["https://hooks.slack.com/services/T0/B0/sec ret", "https://hooks.example/x\nmore"])
def test_a_url_with_a_space_or_control_character_fails_config_check(url, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(f'[[notifiers]]\ntype = "slack"\nurl = {json.dumps(url)}\n')
    done = rigmon_cli("config", "check", str(path))
    assert done.returncode == 2 and "notifiers[0].url" in done.stderr, done.stderr
    assert "sec ret" not in done.stderr and "T0/B0" not in done.stderr  # the secret is not repeated


def test_a_notifier_thread_survives_any_exception():
    from test_notify import transition

    from rigmon.config.schema import NotifierConfig
    from rigmon.sinks.notify import Notifier

    receiver = Receiver()
    notifier = Notifier(NotifierConfig(type="webhook", url=receiver.url), "box")
    real_send, calls = notifier.send, []

    def send(message):
        calls.append(message)
        if len(calls) == 1:
            raise ValueError("URL can't contain control characters. '/services/T0/B0/secret'")
        real_send(message)

    notifier.send = send
    try:
        notifier.submit(transition(1))
        notifier.submit(transition(1, "resolved"))
        wait_for(lambda: notifier.sent == 1 and notifier.failed == 1, 10, what="one failure, one delivery")
    finally:
        notifier.close(0.5)
        receiver.stop()


# 8. Hostile rules ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, value, message",
    [
        ("when", "temperature_celsius > 1 or " * 3000 + "True", "too long"),
        ("when", "not " * 100 + "lost", "nested too deeply"),
        ("when", "name == '" + "x" * 500 + "'", "string constant is longer"),
        ("when", "temperature_celsius > 1e300", "out of range"),
        ("summary", "{uuid:>999999999}", "widths and precisions go up to 64"),
        ("summary", "{uuid.__class__}", "only a plain name"),
        ("summary", "{uuid[0]}", "only a plain name"),
    ],
)
def test_hostile_rules_fail_config_check_with_a_clear_message(field, value, message, tmp_path):
    rule = {
        "name": "Hostile",
        "kind": "gpu",
        "when": "temperature_celsius > 1",
        "severity": "warning",
        "summary": "x",
        field: value,
    }
    path = tmp_path / "c.toml"
    path.write_text("[[alerts.rules]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in rule.items()))
    done = rigmon_cli("config", "check", str(path))
    told = " ".join(done.stderr.split())  # a long message goes on under itself past COLUMNS
    assert done.returncode == 2 and " ".join(message.split()) in told and "Traceback" not in done.stderr, told[-500:]


def test_a_rule_that_fails_at_evaluation_is_unknown_for_itself_only():
    def rule(name, when):
        return Rule(
            RuleSpec.model_validate({"name": name, "kind": "cpu", "when": when, "severity": "warning", "summary": "x"})
        )

    assert Expression("'a' * 100000000000 == 'b'", "cpu", {}).evaluate({}) is None  # no 100 GB string
    broken = rule("Boom", "celsius > 1")
    broken.when.body = "no_such_name"  # its compiled code raises NameError when evaluated
    engine = AlertEngine([broken, rule("Hot", "celsius >= 90")])
    cpu = {"socket": "0", "chip": "k", "sensor": "Tctl", "celsius": 95.0}
    engine.entities = lambda sample, complete=True: {("cpu", "0"): cpu}
    sample = type("S", (), {"events": (), "time": 0.0, "host": None})()
    fired = [t.alertname for t in engine.evaluate(sample, 0.0)]
    assert fired == ["Hot"] and engine.rules[0].when.errors == 1


# 9. Non-finite values ----------------------------------------------------------------------
def test_nan_power_is_left_out_of_line_protocol_and_json(tmp_path):
    from rigmon.sinks.lineprotocol import line

    assert line("gpu", {"host": "h"}, {"power_watts": float("nan"), "ok": 1.5}, 1) == "gpu,host=h ok=1.5 1"
    assert line("gpu", {"host": "h"}, {"power_watts": float("inf")}, 1) is None
    rec = sc.h200()
    for tick in rec.ticks:
        tick["gpus"][0]["nvmlDeviceGetTemperatureThreshold:1"] = 89
    path = tmp_path / "nan.rec.jsonl"
    sc.write(rec, path)
    key = '"nvmlDeviceGetTemperatureThreshold:1"'
    text = path.read_text().replace(f"{key}: 89", f"{key}: NaN")
    path.write_text(text)
    done = rigmon_cli("status", "--replay", str(path), "--at", "10", "--json")
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))


@pytest.mark.parametrize(
    "toml",
    [
        "[alerts.builtin.GpuStarved]\nparams = { min_power_ratio = nan }\n",
        "[daemon]\ninterval = inf\n",
        "[alerts.power_budget]\nwatts = inf\n",
    ],
)
def test_non_finite_numbers_are_refused_by_the_config(toml, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(toml)
    done = rigmon_cli("config", "check", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.strip(), done.stderr


# 10. Unbounded inputs --------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--demo", "--replay-gpus", "100000"],
        ["status", "--demo", "--watch", "-1"],
        ["status", "--demo", "--watch", "nan"],
        ["status", "--demo", "--at", "inf"],
        ["record", "--demo", "--out", "/tmp/x.jsonl", "--interval", "inf"],
        ["burnin", "--hours", "nan"],
        ["burnin", "--minutes", "-1"],
        ["run", "--demo", "--replay-gpus", "0"],
    ],
)
def test_bad_numbers_on_the_command_line_exit_2(argv):
    done = rigmon_cli(*argv)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.strip(), done.stderr


def test_hostile_recordings_are_clear_errors(tmp_path):
    header = json.loads(sc.H200.read_text().splitlines()[0])
    cases = {
        "huge-count": json.dumps({**header, "nvml": {**header["nvml"], "nvmlDeviceGetCount": 100000}})
        + "\n"
        + sc.H200.read_text().splitlines()[1]
        + "\n",
        "deep": json.dumps(header) + "\n" + '{"t": 1, "gpus": [' + "[" * 100000 + "]" * 100000 + "]}\n",
        "header-only": json.dumps(header) + "\n",
    }
    for name, text in cases.items():
        path = tmp_path / f"{name}.rec.jsonl"
        path.write_text(text)
        for argv in (["status", "--replay", str(path)], ["rules", "test", "--replay", str(path)]):
            done = rigmon_cli(*argv)
            assert done.returncode == 2 and "Traceback" not in done.stderr, (name, argv, done.stderr[-500:])


# 11. A non-ASCII user name is a 401, not a 500 -------------------------------------------------
def test_non_ascii_basic_auth_is_refused_cleanly(tmp_path):
    digest = hashlib.sha256(b"pw").hexdigest()
    config = f'[daemon]\ninterval = 0.5\n[prometheus.basic_auth]\nusername = "prom"\npassword_sha256 = "{digest}"\n'
    rigmon = Rigmon(tmp_path, sc.demo_path(), config)
    try:
        rigmon.wait_ready()
        for user in ("prömeth€us".encode(), b"\xff\xfe", "ñ".encode("latin-1")):
            token = base64.b64encode(user + b":pw").decode()
            assert http_get(rigmon.url, {"Authorization": f"Basic {token}"})[0] == 401
        assert http_get(rigmon.url, {"Authorization": "Basic " + base64.b64encode(b"prom:pw").decode()})[0] == 200
    finally:
        assert rigmon.stop() == 0
    assert "Traceback" not in rigmon.output()


# 12. daemon.history is gone; the key is accepted with a warning ---------------------------------
def test_daemon_history_is_accepted_with_a_deprecation_warning(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[daemon]\nhistory = 900\n")
    done = rigmon_cli("config", "check", str(path))
    assert done.returncode == 0 and "daemon.history is no longer used" in done.stderr


# Fuzz: generated configs and mutated recordings never give a traceback ------------------------
@pytest.mark.slow
def test_fuzz_configs_and_recordings_are_accepted_or_refused_clearly(tmp_path):
    import random

    from rigmon.config.schema import Config

    rng = random.Random(16)
    values = [
        0,
        -1,
        1,
        1.5,
        float("nan"),
        float("inf"),
        -1e308,
        10**30,
        "",
        "x",
        "10m",
        "-5s",
        "1h30m",
        True,
        [],
        [1, "a"],
        {},
        {"a": 1},
        "http://x y",
        "https://ok.example/hook",
        "${NOPE}",
        "a\nb",
        "🔥" * 3,
    ]
    base = json.loads(Config().model_dump_json())
    paths = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        paths.append(path)

    walk(base, ())
    refused = accepted = 0
    for _ in range(1200):
        data = json.loads(json.dumps(base))
        for _ in range(rng.randint(1, 4)):
            path = rng.choice(paths)
            target = data
            for key in path[:-1]:
                target = target.setdefault(key, {}) if isinstance(target, dict) else {}
            if isinstance(target, dict) and path:
                target[path[-1] if rng.random() < 0.9 else "no_such_key"] = rng.choice(values)
        try:
            parse(data, "fuzz", env={})
            accepted += 1
        except ConfigError as e:
            assert e.problems and all(message for _, message in e.problems)
            refused += 1
    assert refused > 100 and accepted > 10
    loaded = rejected = 0

    lines = sc.H200.read_text().splitlines()[:6]
    mutations = 0
    for i in range(1200):
        mutated = list(lines)
        n = rng.randrange(len(mutated))
        text = mutated[n]
        kind = rng.randrange(5)
        if kind == 0:  # flip a byte
            pos = rng.randrange(len(text))
            text = text[:pos] + chr(rng.randrange(32, 127)) + text[pos + 1 :]
        elif kind == 1:  # cut the line
            text = text[: rng.randrange(len(text))]
        elif kind == 2:  # a value replaced by another JSON value
            obj = json.loads(text)
            key = rng.choice(list(obj))
            obj[key] = rng.choice([None, -1, 1e308, "x", [], {}, [[]], {"nvml_error": "GpuIsLost"}])
            text = json.dumps(obj)
        elif kind == 3 and n > 0:  # a GPU entry's call answered with garbage
            obj = json.loads(text)
            if obj.get("gpus"):
                key = rng.choice(list(obj["gpus"][0]))
                obj["gpus"][0][key] = rng.choice([None, -5, "x", [], {"a": 1}, {"nvml_error": "Bogus"}, 1e300])
            text = json.dumps(obj)
        else:  # drop the line
            mutated.pop(n)
            text = None
        if text is not None:
            mutated[n] = text
        path = tmp_path / f"m{i % 7}.rec.jsonl"
        path.write_text("\n".join(mutated) + "\n")
        mutations += 1
        try:
            rec = Recording.load(path)
        except RecordingError as e:
            assert str(e)
            rejected += 1
            continue
        loaded += 1
        _replay_a_tick(rec)
    assert mutations >= 1000
    print(
        f"\nfuzz: {accepted + refused} configs ({accepted} accepted, {refused} refused with the field named); "
        f"{mutations} damaged recordings ({rejected} refused with the line, {loaded} replayed); 0 tracebacks"
    )


def _replay_a_tick(rec: Recording) -> None:
    """The readers on a (possibly garbled) recording: a GPU or a value may be missing, but no
    exception reaches the poller's caller."""
    from rigmon.config.schema import Config
    from rigmon.poller import build_poller
    from rigmon.readers.replay import ReplayClock, ReplaySource
    from rigmon.sinks.lineprotocol import encode
    from rigmon.status import as_json, render

    if not rec.ticks:
        return
    try:
        source = ReplaySource(rec, ReplayClock(realtime=False), loop=False)
    except (ValueError, TypeError, KeyError, AttributeError):
        pytest.fail(f"ReplaySource failed on a recording Recording.load accepted: {rec.header}")
    poller = build_poller(Config(), source, event_thread=False)
    poller.open()
    try:
        sample = poller.poll()
        encode(sample, "h", True)
        json.dumps(as_json(sample), allow_nan=False)
        render(sample)
    finally:
        poller.close()
