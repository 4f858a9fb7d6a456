"""``rigmon run``: a real Prometheus scrapes it; promtool lints it; systemd and signals."""

import os
import signal
import socket
import ssl
import subprocess
import time

import pytest
import scenarios as sc
from servers import Prometheus, Rigmon, free_port, http_get, wait_for

from rigmon.config.schema import Config
from rigmon.daemon import Daemon
from rigmon.pipeline import Inputs, Pipeline
from rigmon.system.logs import RepeatFilter


@pytest.fixture
def load_recording(tmp_path):
    return sc.write(sc.one_tick(sc.h200()), tmp_path / "load.rec.jsonl")


@pytest.mark.system
def test_prometheus_scrapes_the_recordings_values(tmp_path, load_recording):
    rigmon = Rigmon(tmp_path, load_recording, "[daemon]\ninterval = 0.5\n")
    try:
        rigmon.wait_ready()
        prom = Prometheus(tmp_path, [f"127.0.0.1:{rigmon.port}"])
        try:
            (power,) = prom.wait_query("rigmon_gpu_power_watts")
            assert power["metric"]["gpu"] == "0"
            assert power["metric"]["uuid"] == "GPU-051bc521-f352-6ece-a775-fbe39f974666"
            assert float(power["value"][1]) == pytest.approx(692.159)
            expected = {
                'up{job="rigmon"}': 1,
                "rigmon_gpu_power_limit_watts": 700,
                'rigmon_gpu_clock_hertz{clock="sm"}': 1470e6,
                'rigmon_gpu_clock_hertz{clock="memory"}': 3201e6,
                'rigmon_gpu_temperature_celsius{sensor="gpu"}': 63,
                'rigmon_gpu_temperature_threshold_celsius{threshold="slowdown"}': 89,
                'rigmon_gpu_clock_event_active{reason="sw_power_cap"}': 1,
                'absent(rigmon_gpu_clock_event_active{reason="hw_slowdown"})': 1,
                'rigmon_gpu_settings_info{power_limit_min_watts="200",shutdown_celsius="95",mig_enabled="0"}': 1,
                'rigmon_gpu_utilization_ratio{kind="gpu"}': 1.0,
                "rigmon_gpu_memory_used_bytes": 1839071232,
                "rigmon_gpu_energy_joules_total": 73208.040,
                'rigmon_gpu_pcie_link_generation{link="max"}': 5,
                "rigmon_gpu_pcie_replays_total": 1,
                'rigmon_gpu_info{name="NVIDIA H200",driver="580.159.04"}': 1,
                'rigmon_gpus{state="answering"}': 1,
                'rigmon_reader_success{reader="gpu"}': 1,
                'rigmon_reader_success{reader="gpu_power"}': 1,
                'rigmon_reader_success{reader="gpu_ecc"}': 1,
                'rigmon_reader_duration_seconds{reader="gpu_power"} > bool 0': 1,
                'rigmon_build_info{version!=""}': 1,
            }
            for query, value in expected.items():
                (series,) = prom.wait_query(query)
                assert float(series["value"][1]) == pytest.approx(value), query
            (polls,) = prom.wait_query("rigmon_polls_total")
            assert float(polls["value"][1]) >= 1
            assert not prom.query("rigmon_gpu_fan_speed_ratio")  # passively cooled: no fan series at all
        finally:
            prom.stop()
    finally:
        assert rigmon.stop() == 0


def _exposition(url: str) -> bytes:
    status, body = http_get(url, headers={"Accept": "text/plain"})
    assert status == 200
    return body


@pytest.mark.system  # promtool
@pytest.mark.parametrize("recording", ["h200", "rich"])
def test_promtool_check_metrics_finds_no_problem(tmp_path, recording):
    rec = sc.h200() if recording == "h200" else sc.rich(sc.h200())
    path = sc.write(rec, tmp_path / "r.rec.jsonl")
    rigmon = Rigmon(tmp_path, path, "[daemon]\ninterval = 0.5\n")
    try:
        rigmon.wait_ready()
        if recording == "rich":
            wait_for(lambda: b"rigmon_gpu_xid_errors_total{" in _exposition(rigmon.url), 10, what="the XID")
        body = _exposition(rigmon.url)
        done = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30)
        assert done.returncode == 0 and done.stdout == b"" and done.stderr == b"", done.stdout + done.stderr
        text = body.decode()
        if recording == "rich":
            for line in (
                'rigmon_fan_speed_rpm{chip="nct6798",device="nct6775.656",fan="fan2"} 0.0',
                'rigmon_sensor_temperature_celsius{chip="coretemp",device="coretemp.1",sensor="Core 0"} 61.0',
                'rigmon_hwmon_power_watts{chip="corsair-psu",device="0003:1B1C:1C05.0001",sensor="power total"} 412.0',
                'rigmon_fan_alarm{chip="nct6798",device="nct6775.656",fan="fan2"} 1.0',
                'rigmon_cpu_temperature_celsius{chip="coretemp",sensor="Package id 1",socket="1"} 64.0',
                'rigmon_gpu_xid_errors_total{gpu="3",',
                'rigmon_gpu_temperature_celsius{gpu="7",sensor="memory"',
                'rigmon_gpu_clock_event_seconds_total{gpu="0",reason="sw_power_cap"',
                'rigmon_cpu_energy_joules_total{zone="package-0"} 123.456789',
            ):
                assert line in text, line
            assert text.count("rigmon_gpu_up{") == 8
    finally:
        assert rigmon.stop() == 0


def test_sigterm_warm_stop_and_systemd_notifications(tmp_path):
    address = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(0.2)
    rigmon = Rigmon(
        tmp_path,
        sc.demo_path(),
        "[daemon]\ninterval = 0.2\n",
        env={"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "2000000"},
    )
    messages = []

    def receive(until: float, enough=lambda: False):
        while time.monotonic() < until and not enough():
            try:
                messages.append(sock.recv(4096).decode())
            except TimeoutError:
                pass

    try:
        receive(time.monotonic() + 20, lambda: sum(m == "WATCHDOG=1" for m in messages) >= 3)
        assert messages and messages[0].startswith("READY=1"), messages
        assert "STATUS=polling 1 GPU(s)" in messages[0]
        assert sum(m == "WATCHDOG=1" for m in messages) >= 3  # 0.5 s apart with a 2 s watchdog
        http_get(rigmon.url)
        started = time.monotonic()
        rigmon.proc.send_signal(signal.SIGTERM)
        code = rigmon.proc.wait(10)
        elapsed = time.monotonic() - started
        receive(time.monotonic() + 0.3)
        assert code == 0, rigmon.output()
        assert elapsed < 5, elapsed
        assert "STOPPING=1" in messages
        assert "stopped after" in rigmon.output()
    finally:
        rigmon.stop()
        sock.close()


def test_systemd_status_follows_the_alerts(tmp_path):
    """STATUS= (what systemctl status shows) changes when an alert fires, not every poll."""
    from scenarios import set_gpu, timeline

    address = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(0.2)
    hot_later = sc.write(
        timeline(60, 0.5, modify=lambda t, tick: set_gpu(tick, nvmlDeviceGetTemperature__0=95 if t >= 2 else 60)),
        tmp_path / "hot.rec.jsonl",
    )
    rigmon = Rigmon(
        tmp_path,
        hot_later,
        '[daemon]\ninterval = 0.2\n[alerts.builtin.GpuAtSlowdownTemperature]\nfor = "0s"\n',
        env={"NOTIFY_SOCKET": address},
    )
    statuses = []
    try:
        firing = "polling 1 GPU(s) every 0.2 s; 1 alert(s) firing: GpuAtSlowdownTemperature"
        until = time.monotonic() + 30
        while time.monotonic() < until:  # until the alert fires, then a second (five polls) more
            try:
                message = sock.recv(4096).decode()
            except TimeoutError:
                continue
            statuses += [line[7:] for line in message.splitlines() if line.startswith("STATUS=")]
            if firing in statuses:
                until = min(until, time.monotonic() + 1.0)
    finally:
        rigmon.stop()
        sock.close()
    assert statuses[0] == "polling 1 GPU(s) every 0.2 s; 0 alert(s) firing", statuses
    assert firing in statuses
    assert len(statuses) < 6  # said when it changes, not every poll


class SlowPoller:
    """A poller whose polls take longer than the interval."""

    def __init__(self, inner, seconds):
        self._inner, self._seconds = inner, seconds
        self.gpu, self.host = inner.gpu, inner.host

    def open(self):
        self._inner.open()

    def poll(self):
        time.sleep(self._seconds)
        return self._inner.poll()

    def close(self):
        self._inner.close()


def test_overrunning_polls_are_skipped_and_counted_not_stacked(tmp_path):
    config = Config.model_validate(
        {"daemon": {"interval": 0.1, "state_dir": str(tmp_path)}, "prometheus": {"enabled": False}}
    )
    pipeline = Pipeline.from_config(config, inputs=Inputs(source=sc.source(sc.h200(), loop=True)))
    pipeline.poller = SlowPoller(pipeline.poller, 0.35)
    daemon = Daemon(config, pipeline)
    started = time.monotonic()
    daemon.start(serve_http=False)
    wait_for(lambda: daemon.stats.skipped >= 5 and daemon.stats.polls >= 2, 30, what="five polls skipped")
    seconds, polls = time.monotonic() - started, daemon.stats.polls
    daemon.stop()
    assert polls <= seconds / 0.35 + 1, (polls, seconds)  # 0.35 s polls, one at a time
    assert daemon.pipeline.latest.gpus[0].power_limit_watts == 700


def test_no_gpu_no_sensors_still_serves(tmp_path):
    path = sc.write(sc.no_nvml(sc.h200()), tmp_path / "none.rec.jsonl")
    rigmon = Rigmon(tmp_path, path, "[daemon]\ninterval = 0.3\n")
    try:
        rigmon.wait_ready()
        text = _exposition(rigmon.url).decode()
        assert 'rigmon_reader_success{reader="gpu"} 0.0' in text
        assert 'rigmon_reader_success{reader="host"} 1.0' in text
        assert "rigmon_host_sensors_visible 0.0" in text
        assert "rigmon_gpu_power_watts{" not in text
        assert "NVML cannot start: LibraryNotFound, no NVIDIA driver is installed" in rigmon.output()
        assert "rigmon_nvml_up 0.0" in text and 'rigmon_nvml_error_info{error="LibraryNotFound"} 1.0' in text
    finally:
        assert rigmon.stop() == 0


def _self_signed(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_tls_and_basic_auth(tmp_path):
    import base64
    import hashlib

    cert, key = _self_signed(tmp_path)
    digest = hashlib.sha256(b"s3cret pass").hexdigest()
    config = (
        f'[daemon]\ninterval = 0.5\n[prometheus]\ntls_cert = "{cert}"\ntls_key = "{key}"\n'
        f'[prometheus.basic_auth]\nusername = "prom"\npassword_sha256 = "${{RIGMON_TEST_DIGEST}}"\n'
    )
    rigmon = Rigmon(tmp_path, sc.demo_path(), config, env={"RIGMON_TEST_DIGEST": digest})
    context = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{rigmon.port}/metrics"
    try:
        wait_for(lambda: http_get(url, context=context, timeout=2)[0] == 401, 30, what="TLS endpoint")
        good = base64.b64encode(b"prom:s3cret pass").decode()
        bad = base64.b64encode(b"prom:wrong").decode()
        for _ in range(2):  # each request head is parsed once and kept: the second time comes from there
            status, body = http_get(url, {"Authorization": f"Basic {good}"}, context=context)
            assert status == 200 and b"rigmon_gpu_power_watts" in body
            assert http_get(url, {"Authorization": f"Basic {bad}"}, context=context)[0] == 401
        with pytest.raises((ConnectionError, OSError)):  # plain HTTP gets no answer
            http_get(f"http://127.0.0.1:{rigmon.port}/metrics", timeout=3)
    finally:
        assert rigmon.stop() == 0


def test_port_in_use_is_a_clear_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rigmon = Rigmon(tmp_path, sc.demo_path(), "", port=port)
        code = rigmon.proc.wait(30)
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in rigmon.output() and "Traceback" not in rigmon.output()
    assert "--port" in rigmon.output() and rigmon.output().count("already in use") == 1  # said once, with the fix


def test_gzip_and_one_render_per_poll(tmp_path):
    import gzip

    rigmon = Rigmon(tmp_path, sc.demo_path(), "[daemon]\ninterval = 5\n")
    try:
        rigmon.wait_ready()
        status, body = http_get(rigmon.url, {"Accept-Encoding": "gzip"})
        assert status == 200 and b"rigmon_gpu_power_watts" in gzip.decompress(body)
        first = _exposition(rigmon.url)
        assert _exposition(rigmon.url) == first  # same poll, same bytes
    finally:
        rigmon.stop()


def test_a_render_that_fails_answers_500_and_the_server_goes_on(caplog):
    """A collector that raises: its scrape gets 500 and its connection closes, the failure
    is logged, and the next connection is served (the render runs on the server's loop)."""
    from prometheus_client import CollectorRegistry

    from rigmon.http.server import MetricsApp, MetricsServer

    class Broken:
        def collect(self):
            raise RuntimeError("a broken collector")

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Broken())
    server = MetricsServer(MetricsApp(registry, lambda: 1), "127.0.0.1", 0)
    try:
        port = server.server_address[1]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):  # to the end: the server closes after the 500
                data += chunk
        assert data.startswith(b"HTTP/1.1 500") and data.endswith(b"rendering failed; see rigmon's log\n")
        assert data.count(b"HTTP/1.1") == 1  # the request after it is not answered on that connection
        assert "rendering /metrics failed" in caplog.text and "a broken collector" in caplog.text
        assert http_get(f"http://127.0.0.1:{port}/")[0] == 200
        assert http_get(f"http://127.0.0.1:{port}/metrics")[0] == 500
    finally:
        server.shutdown()


def test_repeated_log_messages_are_said_once_with_a_count():
    import logging

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    now = [0.0]
    logger = logging.getLogger("rigmon.test.repeat")
    logger.propagate = False
    handler = Keep()
    handler.addFilter(RepeatFilter(every=60, clock=lambda: now[0]))
    logger.addHandler(handler)
    for _ in range(10):
        logger.warning("GPU 0: nvmlDeviceGetPowerUsage failed: Unknown Error")
        now[0] += 1
    logger.warning("something else")
    for _ in range(70):
        logger.warning("again")
        now[0] += 1
    assert records[0] == "GPU 0: nvmlDeviceGetPowerUsage failed: Unknown Error"
    assert records[1] == "previous message repeated 9 more times: GPU 0: nvmlDeviceGetPowerUsage failed: Unknown Error"
    assert records[2] == "something else"
    assert records[3] == "again" and "repeated" in records[4] and len(records) == 5


def test_unknown_replay_file_exit_2(tmp_path):
    rigmon = Rigmon(tmp_path, tmp_path / "absent.rec.jsonl", "", port=free_port())
    assert rigmon.proc.wait(30) == 2
    assert "cannot read" in rigmon.output()


def test_config_error_names_the_field_for_run(tmp_path):
    rigmon = Rigmon(tmp_path, sc.demo_path(), '[prometheus]\nport = "x"\n')
    assert rigmon.proc.wait(30) == 2
    assert "prometheus.port" in rigmon.output()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a private sysfs")
def test_defaults_need_no_config_file():
    from rigmon.config import schema as config

    assert config.load(None).prometheus.port == 9963 or config.DEFAULT_PATH.exists()


def _responses(sock: socket.socket, count: int) -> list[tuple[bytes, dict, bytes]]:
    """``count`` whole responses read off one connection: (status line, headers, body)."""
    data, out = b"", []
    while len(out) < count:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            status, *lines = data[:end].split(b"\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.decode().partition(":") for line in lines)}
            length = int(headers.get("content-length", 0))
            if len(data) >= end + 4 + length:
                out.append((status, headers, data[end + 4 : end + 4 + length]))
                data = data[end + 4 + length :]
                continue
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return out


def test_keep_alive_pipelining_head_and_close(tmp_path):
    """HTTP/1.1 as Prometheus and curl use it: several scrapes on one connection, two requests
    sent at once answered in order, HEAD with the length and no body, ``Connection: close`` and
    HTTP/1.0 answered and then closed."""
    rigmon = Rigmon(tmp_path, sc.demo_path(), "[daemon]\ninterval = 5\n")
    get = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    try:
        rigmon.wait_ready()
        with socket.create_connection(("127.0.0.1", rigmon.port), timeout=10) as s:
            bodies = []
            for _ in range(3):
                s.sendall(get)
                [(status, headers, body)] = _responses(s, 1)
                assert status == b"HTTP/1.1 200 OK" and "connection" not in headers
                bodies.append(body)
            assert bodies[0] == bodies[1] == bodies[2] and b"rigmon_gpu_power_watts" in bodies[0]
            s.sendall(get + b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")  # pipelined
            [(first, _, body), (second, _, _)] = _responses(s, 2)
            assert first == b"HTTP/1.1 200 OK" and body == bodies[0] and second == b"HTTP/1.1 404 Not Found"
            for i in range(150):  # more distinct heads than the server keeps parsed: each answered as it asks
                s.sendall(f"GET /{'metrics?n=' if i % 3 else 'nowhere/'}{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                [(status, _, body)] = _responses(s, 1)
                if i % 3:
                    assert status == b"HTTP/1.1 200 OK" and b"rigmon_gpu_power_watts" in body
                else:
                    assert (status, body) == (b"HTTP/1.1 404 Not Found", b"not found: try /metrics\n")
        with socket.create_connection(("127.0.0.1", rigmon.port), timeout=10) as s:
            s.sendall(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n" + get)
            data = b""
            while len(data) < len(bodies[0]):
                chunk = s.recv(65536)
                assert chunk
                data += chunk
            end = data.find(b"\r\n\r\n")
            assert data.startswith(b"HTTP/1.1 200 OK") and f"Content-Length: {len(bodies[0])}".encode() in data[:end]
            assert data[end + 4 :].startswith(b"HTTP/1.1 200 OK")  # no body after HEAD: the next answer
        for request in (
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            b"GET /metrics HTTP/1.0\r\n\r\n",
        ):
            with socket.create_connection(("127.0.0.1", rigmon.port), timeout=10) as s:
                s.sendall(request)
                data = b""
                while chunk := s.recv(65536):  # the server closes after its answer
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                assert b"Connection: close" in head and body == bodies[0]
    finally:
        rigmon.stop()


def test_nvml_errors_are_counted_by_gpu_call_and_error(tmp_path):
    """A call that fails (not one the GPU does not support) is counted where a scrape sees it."""

    def flaky(t, tick):
        if int(t) % 2:
            tick["gpus"][0]["nvmlDeviceGetPowerUsage"] = {"nvml_error": "Unknown"}

    path = sc.write(sc.timeline(30, 0.5, modify=flaky), tmp_path / "flaky.rec.jsonl")
    rigmon = Rigmon(tmp_path, path, "[daemon]\ninterval = 0.25\n")
    try:
        rigmon.wait_ready()

        def counted():
            text = http_get(rigmon.url)[1].decode()
            return [
                line
                for line in text.splitlines()
                if line.startswith("rigmon_nvml_errors_total{")
                and all(label in line for label in ('gpu="0"', 'call="nvmlDeviceGetPowerUsage"', 'error="Unknown"'))
                and float(line.split()[-1]) >= 2
            ]

        wait_for(counted, 30, what="the NVML errors counted")
    finally:
        rigmon.stop()


def test_a_request_accepted_before_a_stop_is_answered_not_reset(tmp_path):
    """A scraper that connected just before SIGTERM (or a reload) gets its answer: the server
    stops accepting, answers what it accepted, then closes; a close with the request unread
    would reach the scraper as a reset."""
    rigmon = Rigmon(tmp_path, sc.write(sc.h200(), tmp_path / "demo.rec.jsonl"))
    try:
        rigmon.wait_ready()
        client = socket.create_connection(("127.0.0.1", rigmon.port), timeout=10)
        time.sleep(0.2)  # accepted by the daemon, its request not yet sent
        rigmon.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
        client.close()
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert rigmon.proc.wait(10) == 0  # the warm stop went on meanwhile
    finally:
        rigmon.stop()
