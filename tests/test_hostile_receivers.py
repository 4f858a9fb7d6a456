"""Receivers that misbehave on purpose, on real sockets: redirects to another host, answers of
1.5 GB, answers trickled a byte a second or never ended, a 404 for ten seconds, answers cut
short. No secret leaves for another host, the notifier holds a bounded amount, every alert
reaches the receiver once it behaves, and the counters say what happened."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from servers import wait_for

from rigmon.alerts.engine import Transition
from rigmon.config.schema import NotifierConfig
from rigmon.sinks import notify
from rigmon.sinks.notify import Notifier

SECRET = "s3cr3t-token"


class Hostile:
    """An HTTP receiver on a raw socket: each request read whole and recorded, then answered as
    ``mode`` says: "ok", "404", "redirect" (to ``location``, with ``code``), "huge" (a 200 of
    1.5 GB sent as fast as it goes), "trickle" (a byte a second), "endless" (chunks forever),
    "truncated" (a Content-Length of 100 and 10 bytes)."""

    def __init__(self, host: str = "127.0.0.1"):
        self.mode = "ok"
        self.code = 302
        self.location = ""
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.delivered: list[bytes] = []
        self._sock = socket.create_server((host, 0))
        self.host, self.port = host, self._sock.getsockname()[1]
        self._open = True
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/hook"

    def _serve(self) -> None:
        while self._open:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            f = conn.makefile("rb")
            line = f.readline().decode()
            headers = {}
            while (h := f.readline().decode().strip()) != "":
                k, _, v = h.partition(":")
                headers[k.strip().lower()] = v.strip()
            body = f.read(int(headers.get("content-length", 0)))
            self.requests.append((line.split()[1], headers, body))
            mode = self.mode
            if mode == "ok":
                self.delivered.append(body)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            elif mode == "404":
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 15\r\n\r\nno route\x1b[31m\r\n!!")
            elif mode == "redirect":
                conn.sendall(
                    f"HTTP/1.1 {self.code} Moved\r\nLocation: {self.location}\r\nContent-Length: 0\r\n\r\n".encode()
                )
            elif mode == "huge":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1500000000\r\n\r\n")
                block = b"x" * (1 << 20)
                for _ in range(1500):
                    conn.sendall(block)
            elif mode == "trickle":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                for _ in range(100000):
                    conn.sendall(b"x")
                    time.sleep(1)
            elif mode == "endless":
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                while True:
                    conn.sendall(b"1\r\nx\r\n")
                    time.sleep(0.2)
            elif mode == "truncated":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self) -> None:
        self._open = False
        self._sock.close()


def transition(n: int) -> Transition:
    return Transition(
        "firing", f"Test{n}", "critical", {"gpu": str(n)}, f"summary {n}", "", "", 1000.0, None, 1000.0, {}
    )


def notifier(url: str, **kw) -> Notifier:
    config = NotifierConfig.model_validate(
        {
            "type": "webhook",
            "url": url,
            "retry_initial": 0.2,
            "retry_max": 1.0,
            "timeout": 2,
            "headers": {"X-Secret": SECRET},
            "token": SECRET,
            **kw,
        }
    )
    return Notifier(config, "rig-01")


@pytest.fixture
def receivers():
    made: list[Hostile] = []

    def make(host: str = "127.0.0.1") -> Hostile:
        made.append(Hostile(host))
        return made[-1]

    yield make
    for r in made:
        r.stop()


def delivered(r: Hostile) -> list[str]:
    return [json.loads(b)["alerts"][0]["labels"]["alertname"] for b in r.delivered]


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_host_takes_no_secret_there_and_the_alert_arrives_once_it_behaves(
    receivers, code, monkeypatch, caplog
):
    monkeypatch.setattr(notify, "REFUSAL_PATIENCE", 3.0)
    home, elsewhere = receivers(), receivers("127.0.0.2")
    home.mode, home.code, home.location = "redirect", code, elsewhere.url + "?steal=1"
    n = notifier(home.url, follow_redirects=True)
    try:
        for i in range(4):
            n.submit(transition(i))
        wait_for(lambda: n.failed >= 1, 15, what="the redirected post given up")
        assert elsewhere.requests == [], "a redirect was followed to another host"
        assert n.errors["redirect"] >= 2 and n.sent == 0
        assert any(
            "a redirect to http://127.0.0.2:" in r.message and "not followed" in r.message for r in caplog.records
        )
        assert not any(SECRET in r.message or "steal" in r.message for r in caplog.records)
        home.mode = "ok"
        wait_for(lambda: n.sent + n.failed == 4, 15)
        assert delivered(home) == [f"Test{i}" for i in range(4)][-n.sent :]
        assert all(SECRET in h.get("authorization", "") for _, h, _ in home.requests)
    finally:
        n.close()


def test_a_307_to_the_same_host_is_followed_where_allowed_and_keeps_the_post(receivers):
    target = receivers()
    home = receivers()
    home.mode, home.code, home.location = "redirect", 307, f"http://127.0.0.1:{target.port}/moved"
    n = notifier(home.url, follow_redirects=True)
    try:
        n.submit(transition(1))
        wait_for(lambda: n.sent == 1, 10)
        path, headers, body = target.requests[0]
        assert path == "/moved" and json.loads(body)["alerts"][0]["labels"]["alertname"] == "Test1"
        assert headers["x-secret"] == SECRET
    finally:
        n.close()
    refused = notifier(home.url)  # follow_redirects off: the same 307 is not followed
    try:
        refused.submit(transition(2))
        wait_for(lambda: refused.errors["redirect"] >= 1, 10)
        assert len(target.requests) == 1
    finally:
        refused.close()


@pytest.mark.parametrize("mode", ["trickle", "endless", "truncated"])
def test_an_answer_that_never_ends_or_is_cut_short_is_tried_again_and_nothing_is_lost(receivers, mode):
    r = receivers()
    r.mode = mode
    n = notifier(r.url, timeout=1)
    try:
        for i in range(12):
            n.submit(transition(i))
        kind = "truncated" if mode == "truncated" else "timeout"
        wait_for(lambda: n.errors[kind] >= 2, 15, what=f"two {kind} failures")
        assert n.sent == 0 and n.pending == 12 and n.failed == 0
        r.mode = "ok"
        wait_for(lambda: n.sent == 12, 20, what="all 12 delivered once the receiver behaves")
        assert delivered(r) == [f"Test{i}" for i in range(12)]
    finally:
        n.close()


def test_404s_for_seconds_keep_no_alert_out(receivers, caplog):
    r = receivers()
    r.mode = "404"
    n = notifier(r.url, retry_initial=1, retry_max=4)
    try:
        n.submit(transition(1))
        wait_for(lambda: n.errors["refused"] >= 3, 20, what="three refusals")  # tried at 0, 1 and 3 s
        assert n.failed == 0 and n.pending == 1
        warned = [m.message for m in caplog.records if "retrying" in m.message]
        assert warned and "HTTP 404 Not Found: no route\\x1b[31m" in warned[0]  # the receiver's words, escaped
        r.mode = "ok"
        wait_for(lambda: n.sent == 1, 20)
        assert delivered(r) == ["Test1"]
    finally:
        n.close()


HOLDER = """
import json, sys, time
sys.path[:0] = [{tests!r}]
from rigmon.config.schema import NotifierConfig
from rigmon.sinks.notify import Notifier
from test_hostile_receivers import transition
n = Notifier(NotifierConfig.model_validate({{"type": "webhook", "url": sys.argv[1], "timeout": 60}}), "rig-01")
for i in range(3):
    n.submit(transition(i))
end = time.monotonic() + 60
while n.sent < 3 and time.monotonic() < end:
    time.sleep(0.1)
# VmHWM: this process's own peak (ru_maxrss would count the parent's, shared until the exec)
peak = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({{"sent": n.sent, "peak": peak}}))
"""


def test_a_15_gb_answer_is_read_no_further_than_a_bound(receivers, tmp_path):
    """The notifier in a process of its own, as in the daemon: three posts answered 200 with
    1.5 GB each; delivered, and the process's peak resident size stays under 100 MiB."""
    r = receivers()
    r.mode = "huge"
    tests = str(__import__("pathlib").Path(__file__).parent)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(HOLDER.format(tests=tests)), r.url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["sent"] == 3
    assert result["peak"] < 100 << 20, f"peak RSS {result['peak'] >> 20} MiB"
