"""One HTTP POST to a receiver the daemon does not control, bounded every way it can be held:
a deadline for the whole request (connect, send, headers and answer together: a receiver that
trickles its answer a byte a second or never ends it is cut off there), an answer read up to
``MAX_ANSWER`` bytes, redirects never followed but a 307/308 to the same host where the
config allows it (and then the same host gets the same headers; no other host ever sees
them), and an answer cut short reported as such (the message is tried again).

What comes back is the status, the reason and a printable excerpt of the answer: the
receiver's words, for the log, never trusted beyond that."""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
import threading
import time
import urllib.parse
from typing import NamedTuple

MAX_ANSWER = 64 << 10  # bytes of an answer read: enough for any receiver's error text
EXCERPT = 200  # characters of the answer a log line shows
MAX_HOPS = 3  # 307/308s followed to the same host, where allowed


class Answer(NamedTuple):
    status: int
    reason: str
    headers: http.client.HTTPMessage | None
    excerpt: str  # the answer's first EXCERPT characters, printable
    location: str  # a redirect's target as scheme://host[:port] (never its path: it may hold a token)


class Failed(Exception):
    """No whole answer: ``kind`` is "timeout" (past the deadline), "connection" or "truncated"."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


def printable(data: bytes | str, limit: int = EXCERPT) -> str:
    """A receiver's words for one log line: decoded, control characters escaped, cut to ``limit``."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit * 2])
    return out[:limit] + ("…" if len(out) > limit or len(text) > limit * 2 else "")


def split(url: str) -> tuple[urllib.parse.SplitResult, dict[str, str]]:
    """The URL without its user and password, and the Authorization header they stand for."""
    parts = urllib.parse.urlsplit(url)
    headers = {}
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        netloc = parts.hostname or ""
        if ":" in netloc:
            netloc = f"[{netloc}]"
        if parts.port is not None:
            netloc += f":{parts.port}"
        parts = parts._replace(netloc=netloc)
    return parts, headers


def origin(parts: urllib.parse.SplitResult) -> tuple[str, str]:
    """(scheme, host) a redirect is compared on: the same host, whatever its port and scheme."""
    return parts.scheme, (parts.hostname or "").lower()


def post(url: str, body: bytes, headers: dict[str, str], timeout: float, same_host_redirects: bool = False) -> Answer:
    """POST ``body`` to ``url`` within ``timeout`` seconds in all; a 307/308 to the same host is
    followed (up to MAX_HOPS) where ``same_host_redirects``; any other redirect is answered as
    it came. Raises Failed where no whole answer came."""
    deadline = time.monotonic() + timeout
    parts, auth = split(url)
    headers = {**auth, **headers}
    first = (parts.hostname or "").lower()
    for _ in range(MAX_HOPS + 1):
        answer = _once(parts, body, headers, deadline)
        if not (same_host_redirects and answer.status in (307, 308) and answer.location):
            return answer
        target = urllib.parse.urlsplit(answer.headers.get("Location", "") if answer.headers else "")
        target = urllib.parse.urlsplit(urllib.parse.urljoin(parts.geturl(), target.geturl()))
        if target.scheme not in ("http", "https") or (target.hostname or "").lower() != first:
            return answer  # elsewhere: not followed, never with these headers
        if target.username is not None:
            return answer
        parts = target
    return answer


def _once(parts: urllib.parse.SplitResult, body: bytes, headers: dict[str, str], deadline: float) -> Answer:
    left = deadline - time.monotonic()
    if left <= 0:
        raise Failed("timeout", "no time left for the request")
    host, port = parts.hostname or "", parts.port
    if parts.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=left, context=ssl.create_default_context()
        )
    else:
        conn = http.client.HTTPConnection(host, port, timeout=left)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    cut = threading.Event()

    def cut_off() -> None:  # the deadline: whatever the socket is waiting on returns now
        cut.set()
        sock = conn.sock
        if sock is not None:
            try:
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's, under TLS too
            except OSError:
                pass

    timer = threading.Timer(left, cut_off)
    timer.daemon = True
    timer.start()
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        data = _read(response)
        if cut.is_set():  # an answer that ended because the deadline cut it off
            raise Failed("timeout", "no whole answer within the timeout")
        location = ""
        if 300 <= response.status < 400:
            where = urllib.parse.urlsplit(urllib.parse.urljoin(parts.geturl(), response.headers.get("Location", "")))
            location = f"{where.scheme}://{where.hostname or ''}" + (f":{where.port}" if where.port else "")
        return Answer(response.status, printable(response.reason, 80), response.headers, printable(data), location)
    except Failed as e:
        if cut.is_set():
            raise Failed("timeout", "no whole answer within the timeout") from None
        raise e from None
    except (OSError, http.client.HTTPException, ValueError) as e:
        if cut.is_set() or isinstance(e, TimeoutError):
            raise Failed("timeout", "no whole answer within the timeout") from None
        if isinstance(e, http.client.IncompleteRead):
            raise Failed("truncated", "the answer was cut short") from None
        # the type and its words only: a URL error's text may carry the URL, whose path is a secret
        words = (e.strerror or "") if isinstance(e, OSError) else str(e)
        raise Failed("connection", f"{type(e).__name__}: {printable(words, 80)}".rstrip(": ")) from None
    finally:
        timer.cancel()
        conn.close()


def _read(response: http.client.HTTPResponse) -> bytes:
    """The answer, up to MAX_ANSWER bytes (the rest is never read: the connection closes);
    Failed("truncated") where it ends before the length it announced."""
    chunks, size = [], 0
    while size < MAX_ANSWER:
        chunk = response.read(min(16384, MAX_ANSWER - size))
        if not chunk:
            if response.length:  # Content-Length said more
                raise Failed("truncated", f"the answer ended {response.length} byte(s) short")
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
