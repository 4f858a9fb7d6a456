"""Real servers for tests, started on loopback: Prometheus, InfluxDB and rigmon itself."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path


@contextlib.contextmanager
def holding_the_default_port():
    """The machine's port 9963 for this test alone, among all test processes (an flock)."""
    import fcntl

    with open(Path(tempfile.gettempdir()) / "rigmon-tests-port-9963.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def shipped_rules(directory: Path, fleet_interval: str = "2s") -> str:
    """deploy's rigmon-rules.yml as Prometheus loads it, with the recording group's minute
    shortened so a test's minutes of data have its series (its energy, recorded as a minute's,
    is then not the minute's)."""
    text = (Path(__file__).resolve().parents[1] / "deploy" / "prometheus" / "rigmon-rules.yml").read_text()
    if "    interval: 1m\n" not in text:
        raise AssertionError("rigmon-rules.yml: no recording group at 1m")
    path = Path(directory) / "rigmon-rules.yml"
    path.write_text(text.replace("    interval: 1m\n", f"    interval: {fleet_interval}\n"))
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # not up yet
            last_error = e
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))


def metric_at(url: str, name: str, labels: str = "") -> float:
    """A sample's value on a rigmon's /metrics (0 where it is absent)."""
    body = http_get(url, {"Accept": "text/plain"})[1].decode()
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", body, re.M)
    return float(match.group(1)) if match else 0.0


def wait_polls_at(url: str, count: int, timeout: float = 60.0) -> float:
    """Until the rigmon at ``url`` has made ``count`` more polls; its poll count then."""
    want = metric_at(url, "rigmon_polls_total") + count
    return wait_for(
        lambda: (n := metric_at(url, "rigmon_polls_total")) >= want and n, timeout, what=f"{count} more polls"
    )


def http_get(url: str, headers: dict | None = None, timeout: float = 10.0, context=None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def replay_state(state_dir: Path, recording: Path | None = None) -> Path:
    """Where ``rigmon run --replay recording`` (``--demo`` with None) with this state_dir keeps
    its own state: never the box's."""
    from types import SimpleNamespace

    from rigmon.commands.run import replay_state_dir

    return replay_state_dir(state_dir, SimpleNamespace(demo=recording is None, replay=recording))


def _with_state_dir(config: str, state: Path) -> str:
    """The config, with its state (spool, jobs ledger) in the test's own folder unless it says where."""
    if re.search(r"^\s*state_dir\s*=", config, re.M):
        return config
    line = f'state_dir = "{state}"'
    if re.search(r"^\[daemon\]\s*$", config, re.M):
        return re.sub(r"^\[daemon\]\s*$", lambda m: f"[daemon]\n{line}", config, count=1, flags=re.M)
    return f"[daemon]\n{line}\n{config}"


class Rigmon:
    """``rigmon run`` as a subprocess with its own config file (its state in ``tmp/state`` unless
    the config says where)."""

    def __init__(
        self,
        tmp: Path,
        replay: Path | None = None,
        config: str = "",
        extra_args: list[str] | None = None,
        env: dict | None = None,
        port: int | None = None,
    ):
        self.port = port or free_port()
        self.config = tmp / "rigmon.toml"
        self.config.write_text(_with_state_dir(config, tmp / "state"))
        self.log = open(tmp / "rigmon.log", "w+")
        args = [
            sys.executable,
            "-m",
            "rigmon",
            "run",
            "--config",
            str(self.config),
            "--listen",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        if replay is not None:
            args += ["--replay", str(replay)]
        self.proc = subprocess.Popen(
            args + (extra_args or []), stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def wait_ready(self, timeout: float = 30.0) -> None:
        def up():
            if self.proc.poll() is not None:
                raise RuntimeError(f"rigmon exited {self.proc.returncode}: {self.output()}")
            return http_get(self.url, timeout=2)[0] in (200, 401)

        wait_for(up, timeout, what="rigmon to serve metrics")

    def metric(self, name: str, labels: str = "") -> float:
        return metric_at(self.url, name, labels)

    def wait_polls(self, count: int, timeout: float = 60.0) -> float:
        return wait_polls_at(self.url, count, timeout)

    def wait_output(self, text: str, timeout: float = 30.0) -> None:
        """Until the daemon's log says ``text``."""
        wait_for(lambda: text in self.output(), timeout, what=f"the log to say {text!r}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class Prometheus:
    """Debian's prometheus, scraping the given targets every second."""

    def __init__(
        self,
        tmp: Path,
        targets: list[str],
        scrape_interval: str = "1s",
        rule_files: list[str] | None = None,
        labels: dict[str, str] | None = None,
        scrape_configs: list[dict] | None = None,
        extra: dict | None = None,
        args: tuple[str, ...] = (),
    ):
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not installed: run tests/run, which installs it")
        self.port = free_port()
        self.dir = tmp / "prometheus"
        self.dir.mkdir()
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "scrape_configs": scrape_configs
            if scrape_configs is not None
            else [{"job_name": "rigmon", "static_configs": [{"targets": targets, "labels": labels or {}}]}],
            **(extra or {}),
        }
        if rule_files:
            config["rule_files"] = rule_files
        (self.dir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.log = open(self.dir / "log", "w+")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                *args,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_for(
            lambda: http_get(f"http://127.0.0.1:{self.port}/-/ready", timeout=2)[0] == 200,
            60,
            what="prometheus to be ready",
        )

    def query(self, promql: str) -> list[dict]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        status, body = http_get(url)
        data = json.loads(body)
        if data.get("status") != "success":
            raise RuntimeError(f"{promql}: {data}")
        return data["data"]["result"]

    def wait_query(self, promql: str, timeout: float = 30.0) -> list[dict]:
        return wait_for(lambda: self.query(promql), timeout, 0.25, what=f"prometheus to answer {promql}")

    def wait_evaluated(self, since: float, timeout: float = 60.0) -> None:
        """Until every rule group has been evaluated after ``since`` (the wall's time)."""

        def evaluated() -> bool:
            status, body = http_get(f"http://127.0.0.1:{self.port}/api/v1/rules")
            groups = json.loads(body)["data"]["groups"] if status == 200 else []
            return bool(groups) and all(
                datetime.fromisoformat(g["lastEvaluation"].replace("Z", "+00:00")).timestamp() > since for g in groups
            )

        wait_for(evaluated, timeout, 0.5, what="every rule group evaluated again")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class InfluxDB:
    """Debian's influxd (1.6) on loopback, with its data in ``tmp``; stop() and start() keep the data."""

    def __init__(self, tmp: Path, database: str = "rigmon"):
        if shutil.which("influxd") is None:
            raise RuntimeError("influxd is not installed: run tests/run, which installs Debian's influxdb")
        self.dir = tmp / "influxdb"
        self.dir.mkdir(exist_ok=True)
        self.port, self.rpc_port = free_port(), free_port()
        self.database = database
        (self.dir / "influxdb.conf").write_text(f"""
reporting-disabled = true
bind-address = "127.0.0.1:{self.rpc_port}"
[meta]
  dir = "{self.dir}/meta"
[data]
  dir = "{self.dir}/data"
  wal-dir = "{self.dir}/wal"
  query-log-enabled = false
[http]
  bind-address = "127.0.0.1:{self.port}"
  log-enabled = false
[monitor]
  store-enabled = false
[continuous_queries]
  enabled = false
""")
        self.proc = None
        self.start()
        self.query(f'CREATE DATABASE "{database}"')

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.log = open(self.dir / "log", "a")
        self.proc = subprocess.Popen(
            ["influxd", "-config", str(self.dir / "influxdb.conf")], stdout=self.log, stderr=subprocess.STDOUT
        )
        wait_for(lambda: http_get(f"{self.url}/ping", timeout=2)[0] == 204, 60, what="influxd to answer /ping")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self.proc = None

    def query(self, q: str, epoch: str | None = None) -> list[dict]:
        params = {"q": q, "db": self.database, **({"epoch": epoch} if epoch else {})}
        data = urllib.parse.urlencode(params).encode()
        with urllib.request.urlopen(urllib.request.Request(f"{self.url}/query", data=data), timeout=30) as response:
            body = json.loads(response.read())
        result = body["results"][0]
        if "error" in result:
            raise RuntimeError(f"{q}: {result['error']}")
        return result.get("series", [])

    def count(self, q: str) -> int:
        series = self.query(q)
        return int(series[0]["values"][0][1]) if series else 0


class Alertmanager:
    """Debian's Alertmanager on loopback, with the shipped deploy/alertmanager/alertmanager.yml
    (its receiver pointed at ``receiver_url``, its waits shortened to a second)."""

    def __init__(self, tmp: Path, receiver_url: str, group_wait: str = "1s", group_interval: str = "1s"):
        import yaml

        binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
        assert binary, "Alertmanager is not installed (tests/run installs Debian's prometheus-alertmanager)"
        root = Path(__file__).resolve().parents[1]
        config = yaml.safe_load((root / "deploy" / "alertmanager" / "alertmanager.yml").read_text())
        config["route"].update(group_wait=group_wait, group_interval=group_interval)
        for r in config["receivers"]:
            for hook in r.get("webhook_configs", []):
                hook["url"] = receiver_url
        (tmp / "am.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(tmp / "am.log", "w")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp / 'am.yml'}",
                f"--storage.path={tmp / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )  # no cluster peers
        wait_for(lambda: http_get(f"{self.url}/-/ready", timeout=2)[0] == 200, 60, what="alertmanager")

    def post(self, path: str, data) -> bytes:
        """``data`` as JSON to its API (``/api/v2/alerts``, ``/api/v2/silences``), as a client posts it."""
        request = urllib.request.Request(
            f"{self.url}{path}", data=json.dumps(data).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read()

    def alerts(self) -> list[dict]:
        """The alerts it holds now (active ones: a resolved alert leaves the list)."""
        return json.loads(http_get(f"{self.url}/api/v2/alerts", timeout=5)[1])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)
        self._log.close()


class LoopbackHTTP:
    """An HTTP server of the test's own on loopback, on a thread: each POST counted and handed to
    ``answer(path, headers, body)``, which returns (status, [(header, value)], body) or None to
    send nothing. Stopped and started again on the same port; the fake servers below are these."""

    protocol = "HTTP/1.0"  # each answer closes its connection

    def __init__(self, port: int = 0):
        self.requests = 0
        self.port = port
        self._server = None
        self.start()

    def answer(self, path: str, headers, body: bytes) -> tuple | None:
        raise NotImplementedError

    def start(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = server.protocol

            def do_POST(self):
                server.requests += 1
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                answer = server.answer(self.path, self.headers, body)
                if answer is None:
                    self.close_connection = True
                    return
                status, headers, payload = answer
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            allow_reuse_address = True
            daemon_threads = True

        self._server = Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class V2Gateway(LoopbackHTTP):
    """A test-side InfluxDB v2 write endpoint: checks the token, org, bucket and precision of
    /api/v2/write as InfluxDB 2.x does, then forwards the body to a real 1.x server's /write."""

    protocol = "HTTP/1.1"

    def __init__(self, influx: InfluxDB, token: str, org: str, bucket: str):
        self.influx, self.token, self.org, self.bucket = influx, token, org, bucket
        super().__init__()

    def answer(self, path, headers, body):
        import gzip

        url = urllib.parse.urlparse(path)
        q = urllib.parse.parse_qs(url.query)
        if headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if url.path != "/api/v2/write":
            return _json(404, {"code": "not found", "message": "path not found"})
        if headers.get("Authorization") != f"Token {self.token}":
            return _json(401, {"code": "unauthorized", "message": "unauthorized access"})
        if q.get("org") != [self.org]:
            return _json(404, {"code": "not found", "message": f'organization name "{q.get("org")}" not found'})
        if q.get("bucket") != [self.bucket]:
            return _json(404, {"code": "not found", "message": f'bucket "{q.get("bucket")}" not found'})
        precision = q.get("precision", ["ns"])[0]
        if precision not in ("ns", "us", "ms", "s"):
            return _json(400, {"code": "invalid", "message": "invalid precision"})
        forward = urllib.request.Request(
            f"{self.influx.url}/write?db={self.bucket}&precision={'u' if precision == 'us' else precision}", data=body
        )
        try:
            with urllib.request.urlopen(forward, timeout=30):
                pass
        except urllib.error.HTTPError as e:
            return _json(e.code, {"code": "error", "message": e.read().decode()})
        except OSError as e:
            return _json(503, {"code": "unavailable", "message": str(e)})
        return 204, [], b""


def _json(status: int, payload: dict) -> tuple:
    return status, [("Content-Type", "application/json")], json.dumps(payload).encode()


class FaultProxy(LoopbackHTTP):
    """An HTTP proxy in front of a real server whose answers a test sets: ``mode`` is "pass"
    (forward), "down" (refuse connections), "hang" (accept and never answer), or an HTTP
    status to answer with (``retry_after`` adds the header). Counts the requests it saw."""

    def __init__(self, target: str):
        self.target = target
        self.mode: str | int = "pass"
        self.retry_after: str | None = None
        self.max_body: int | None = None  # a larger body is answered 413, as a server's size limit does
        self.answered: list[int] = []
        super().__init__()

    def answer(self, path, headers, body):
        mode = self.mode
        if mode == "hang":
            time.sleep(3600)
            return None
        if mode == "down":  # closing without a word: a refused connection to the client
            return None
        if isinstance(mode, int):
            return self._answer(mode, b'{"error":"injected"}')
        if self.max_body is not None and len(body) > self.max_body:
            return self._answer(413, b'{"error":"Request Entity Too Large"}')
        forward = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length")}
        request = urllib.request.Request(self.target + path, data=body, headers=forward)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return self._answer(response.status, response.read())
        except urllib.error.HTTPError as e:
            return self._answer(e.code, e.read())

    def _answer(self, status: int, payload: bytes) -> tuple:
        self.answered.append(status)
        extra = [("Retry-After", self.retry_after)] if self.retry_after is not None and status != 204 else []
        return status, extra, payload
