"""The Prometheus exporter: a collector over the latest sample, and its HTTP endpoint.

Metric families are built afresh from the latest sample on every render, on a private
registry. Every metric and its unit is listed in README's metrics table. Values are those
of the last poll, so no sample carries a timestamp; the exposition is rendered once per
poll and per format and shared by every scrape until the next poll.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import functools
import gzip
import hashlib
import hmac
import logging
import platform
import ssl
import threading
from collections import Counter
from typing import TYPE_CHECKING, NamedTuple

from prometheus_client import CollectorRegistry
from prometheus_client.core import InfoMetricFamily
from prometheus_client.exposition import choose_encoder

from .. import __version__
from ..project import SETTINGS, fill_prometheus
from ..readings import FAMILIES, LAST, family_labels
from ..sample import Sample
from .exposition import Exposition, Family

if TYPE_CHECKING:
    from ..config import PrometheusConfig

log = logging.getLogger(__name__)



class RigmonCollector:
    """Turns the latest sample into metric families. It also counts XID events, which arrive
    in one sample each, so it must see every sample: the daemon hands each one to ``consume``."""

    def __init__(self, providers: list | None = None):
        self._providers = providers or []  # objects with families(): the daemon's stats, the alert sink
        self._sample: Sample | None = None
        self._xids: Counter[tuple[str, str, str]] = Counter()
        self._lock = threading.Lock()

    def consume(self, sample: Sample) -> None:
        with self._lock:
            for event in sample.events:
                self._xids[(str(event.gpu_index), event.uuid, str(event.xid))] += 1
            self._sample = sample

    def describe(self):
        return []  # families depend on the hardware; registration need not call collect()

    def collect(self):
        with self._lock:
            sample, xids = self._sample, dict(self._xids)
        yield InfoMetricFamily("rigmon_build", "rigmon build information.",
                               value={"version": __version__, "python": platform.python_version()})
        for provider in self._providers:
            yield from provider.families()
        if sample is None:
            return
        yield from _families(sample, xids)


# Every reading's family, empty: each render fills copies of these.
_FAMILIES = {name: Family(name, family.help + LAST, family.type, family_labels(name))
             for name, family in FAMILIES.items()}


def _families(sample: Sample, xids: dict):
    """Every reading's family (README's metrics table), filled by the code the table generates."""
    families = {name: family.empty() for name, family in _FAMILIES.items()}
    system = sample.system
    info = families["rigmon_gpu_info"]
    for i in sample.gpu_info:
        info.add_metric((str(i.index), i.uuid, i.name, i.pci_bus_id or "", i.serial or "", i.vbios_version or "",
                         (system.driver_version if system else None) or "",
                         (system.cuda_driver_version if system else None) or "", i.compute_capability or ""), 1)
    fill_prometheus(sample, families)
    xid = families["rigmon_gpu_xid_errors"]
    for labels, count in sorted(xids.items()):
        xid.add_metric(labels, count)
    groups = {"gpu", *(["host"] if sample.host is not None else []),
              *(["processes"] if SETTINGS["process_series"] else [])}
    return [f for name, f in families.items() if FAMILIES[name].group in groups]


# --- HTTP -------------------------------------------------------------------------------
CONNECTION_TIMEOUT = 10.0  # seconds a client has for the TLS handshake, its request, each write
IDLE_TIMEOUT = 60.0  # seconds a kept-alive connection may wait for its next request
MAX_CONNECTIONS = 64  # connections served at once; more are closed at once, not queued behind
HEADS_KEPT, HEAD_KEPT_BYTES = 64, 2048  # distinct request heads kept parsed, and the longest kept
MAX_REQUEST_BYTES = 16384  # request line and headers

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error"}


class Response(NamedTuple):
    head: bytes  # status line and headers, without Connection and the blank line
    body: bytes
    kept: bytes  # the whole answer on a kept-alive connection: one write, one send
    closing: bytes  # the whole answer, then the connection closes: one write too


def response(status: int, content_type: str, body: bytes, extra: tuple[tuple[str, str], ...] = ()) -> Response:
    headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), *extra]
    head = f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    head = head.encode("latin-1")
    return Response(head, body, head + b"\r\n" + body, head + b"Connection: close\r\n\r\n" + body)


_ROOT = response(200, "text/html; charset=utf-8", b"<html><head><title>rigmon</title></head><body><h1>rigmon</h1>"
                                                  b"<p><a href='/metrics'>Metrics</a></p></body></html>\n")
_NOT_FOUND = response(404, "text/plain", b"not found: try /metrics\n")
_UNAUTHORISED = response(401, "text/plain", b"authentication required\n",
                         (("WWW-Authenticate", 'Basic realm="rigmon"'),))
_RENDER_FAILED = response(500, "text/plain", b"rendering failed; see rigmon's log\n")  # and the connection closed


@functools.lru_cache(maxsize=64)
def _encoder(accept: str):
    """prometheus_client's choice of format for an Accept header (scrapers send the same one)."""
    return choose_encoder(accept)


class _Request(NamedTuple):
    """What a request asks for, from its line and headers: the same for every request with
    the same head."""
    keep: bool  # the connection stays open after the answer
    path: str  # without the query
    head_only: bool
    refused: Response | None  # the answer when the request is not one we serve (400, 405)
    authorization: str = ""
    accept: str = ""
    zipped: bool = False
    cache_key: tuple = ()  # (the exposition's content type for ``accept``, zipped): its cached answer's key


def _parse(head: bytes) -> _Request:
    """One request's line and headers (``head``, without the blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return _Request(False, "", False, response(400, "text/plain", b"bad request\n"))
    method, path, version = parts
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    if method not in ("GET", "HEAD") or "content-length" in headers or "transfer-encoding" in headers:
        return _Request(False, path, False, response(405, "text/plain", b"GET only\n", (("Allow", "GET, HEAD"),)))
    connection = headers.get("connection", "").lower()
    keep = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    accept, zipped = headers.get("accept", ""), "gzip" in headers.get("accept-encoding", "")
    return _Request(keep, path.split("?", 1)[0], method == "HEAD", None, headers.get("authorization", ""), accept,
                    zipped, (_encoder(accept)[1], zipped))


class MetricsApp:
    """What /metrics and the other paths answer: the exposition rendered once per poll, format
    and encoding, then the same bytes (and their prebuilt headers) for every scrape until the
    next poll; optional basic auth. Called from the server's loop thread only."""

    def __init__(self, registry: CollectorRegistry, generation, auth: tuple[str, str] | None = None,
                 routes: dict | None = None):
        self._registry = registry
        self._routes = routes or {}  # path -> () -> (content type, body): the daemon's /state
        self._generation = generation  # changes when a new sample arrives
        self._auth = auth  # (username, sha256 hex of the password)
        self._cache: dict[tuple, Response] = {}
        self._cache_generation = None
        self._exposition = Exposition()  # each series' escaped name and labels, kept between renders

    def respond(self, request: _Request) -> Response:
        """The answer to a GET: this poll's exposition rendered by the first scrape that asks
        for its format, the same bytes for the others."""
        if self._auth is not None and not self._authorised(request.authorization):
            return _UNAUTHORISED
        path = request.path
        if path == "/metrics":
            generation = self._generation()
            if generation != self._cache_generation:  # a new poll: every format is rendered afresh
                self._cache.clear()
                self._cache_generation = generation
            cached = self._cache.get(request.cache_key)
            if cached is None:
                try:
                    cached = self._cache[request.cache_key] = self._render(request.accept, request.zipped)
                except Exception:
                    log.exception("rendering /metrics failed")
                    return _RENDER_FAILED
            return cached
        if path in ("/", ""):
            return _ROOT
        if path in self._routes:
            content_type, body = self._routes[path]()
            return response(200, content_type, body)
        return _NOT_FOUND

    def _render(self, accept: str, zipped: bool) -> Response:
        encoder, content_type = _encoder(accept)
        body = self._exposition.encoder(encoder)(self._registry)
        if zipped:
            # level 1: 8-GPU exposition 53 KB -> 6.3 KB in ~0.1 ms; level 5 gains 0.7 KB for 2.5x the CPU
            body = gzip.compress(body, compresslevel=1)
        return response(200, content_type, body, (("Content-Encoding", "gzip"),) if zipped else ())

    def _authorised(self, header: str) -> bool:
        if not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).partition(b":")
        except ValueError:
            return False
        digest = hashlib.sha256(password).hexdigest().encode()
        # bytes on both sides: a name in any script compares, never raises
        return hmac.compare_digest(user, self._auth[0].encode()) & hmac.compare_digest(
            digest, self._auth[1].lower().encode())


class MetricsServer:
    """HTTP/1.1 with keep-alive on one event loop thread: a scrape costs finding the end of its
    request, a look-up of its head (parsed the first time it is seen), and one write of cached
    bytes with prebuilt headers; no thread and no task per connection or request (asyncio
    protocols, deadlines swept once a second). TLS handshakes run on the loop under
    CONNECTION_TIMEOUT; a client that connects and says nothing, trickles its request or stops
    reading holds only its own connection until its deadline, and at most MAX_CONNECTIONS are
    served at once (more are closed at once).

    A render (once per poll and format, ~1 ms for 8 GPUs) runs on the loop too: a worker
    thread would not let the loop serve meanwhile (the render holds the GIL), and handing
    every scrape that waits for it over to that thread and back costs more than the render
    (at 10 kept-alive scrapers polled 4 times a second, p99 0.9 ms that way, 0.5 ms this)."""

    def __init__(self, app: MetricsApp, listen: str, port: int, tls: ssl.SSLContext | None = None):
        self.app = app
        self.connections: set[_Connection] = set()
        self._heads: dict[bytes, _Request] = {}  # used on the loop's thread only
        self._loop = asyncio.new_event_loop()
        ready: concurrent.futures.Future = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(listen, port, tls, ready), name="rigmon-http",
                                        daemon=True)
        self._thread.start()
        self._server = ready.result()  # raises the bind's OSError here
        self.server_address = self._server.sockets[0].getsockname()

    def _run(self, listen: str, port: int, tls, ready) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.set_exception_handler(_quiet)
        try:
            server = self._loop.run_until_complete(self._loop.create_server(
                lambda: _Connection(self), listen, port, ssl=tls,
                ssl_handshake_timeout=CONNECTION_TIMEOUT if tls else None, backlog=128, reuse_address=True))
        except OSError as e:
            self._loop.close()  # now, in its thread: left to the garbage collector at exit, it can raise there
            ready.set_exception(OSError(e.errno, f"cannot listen on {listen}:{port}: {e.strerror}"))
            return
        ready.set_result(server)
        self._loop.call_later(1.0, self._sweep)
        try:
            self._loop.run_forever()
        finally:
            server.close()
            for connection in list(self.connections):
                connection.transport.abort()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    def _sweep(self) -> None:
        """Close what is past its deadline: no request (or no whole one) in time, or a client
        that stopped reading its answer."""
        now = self._loop.time()
        for connection in [c for c in self.connections if c.deadline < now]:
            connection.transport.abort()
        self._loop.call_later(1.0, self._sweep)

    def request(self, head: bytes) -> _Request:
        """``head`` parsed. A scraper sends the very same bytes every scrape, so each distinct
        head is parsed once; at most HEADS_KEPT are kept (all forgotten when more come)."""
        request = self._heads.get(head)
        if request is None:
            request = _parse(head)
            if len(head) <= HEAD_KEPT_BYTES:
                if len(self._heads) >= HEADS_KEPT:
                    self._heads.clear()
                self._heads[head] = request
        return request

    def shutdown(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=2.0)

    def server_close(self) -> None:
        pass


class _Connection(asyncio.Protocol):
    __slots__ = ("server", "loop", "transport", "buffer", "deadline", "closing")

    def __init__(self, server: MetricsServer):
        self.server, self.loop = server, server._loop
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.deadline = self.loop.time() + CONNECTION_TIMEOUT
        self.closing = False

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        if len(self.server.connections) >= MAX_CONNECTIONS:
            transport.abort()  # over the bound: refuse fast
            return
        self.server.connections.add(self)
        transport.set_write_buffer_limits(high=1 << 20)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)

    def pause_writing(self) -> None:  # the client reads slower than we write: it gets CONNECTION_TIMEOUT
        self.deadline = self.loop.time() + CONNECTION_TIMEOUT
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.deadline = self.loop.time() + IDLE_TIMEOUT
        self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        try:
            if not (self.buffer or self.closing) and data.find(b"\r\n\r\n") == len(data) - 4:
                self._answer(data[:-4])  # one whole request, nothing before it (a scraper's every scrape)
                return
            if not self.buffer:  # a new request begins: it has CONNECTION_TIMEOUT to arrive whole
                self.deadline = self.loop.time() + CONNECTION_TIMEOUT
            self.buffer += data
            self._serve()
        except Exception:  # a bug answering one request: that connection only
            log.exception("answering a request failed")
            self.transport.abort()

    def _serve(self) -> None:
        """Answer the whole requests buffered, in order."""
        while not self.closing:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_REQUEST_BYTES:
                    self._write(response(431, "text/plain", b"request headers too large\n"), False, False)
                return
            head, self.buffer = self.buffer[:end], self.buffer[end + 4:]
            self._answer(head)

    def _answer(self, head: bytes) -> None:
        """Answer one request (its line and headers)."""
        request = self.server.request(head)
        answer = request.refused or self.server.app.respond(request)
        self._write(answer, request.keep and answer is not _RENDER_FAILED, request.head_only)

    def _write(self, answer: Response, keep: bool, head_only: bool) -> None:
        transport = self.transport
        if head_only:
            transport.write(answer.head + (b"\r\n" if keep else b"Connection: close\r\n\r\n"))
        else:
            transport.write(answer.kept if keep else answer.closing)
        if keep:
            self.deadline = self.loop.time() + (CONNECTION_TIMEOUT if self.buffer else IDLE_TIMEOUT)
        else:
            self.closing = True
            transport.close()  # after what is written


def _quiet(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """Clients that vanish mid-handshake or mid-answer are no news; anything else is logged."""
    error = context.get("exception")
    if isinstance(error, (ConnectionError, ssl.SSLError, TimeoutError, OSError)):
        log.debug("HTTP client: %s", context.get("message"))
        return
    log.error("HTTP server: %s", context.get("message"), exc_info=error)


def serve(app: MetricsApp, config: PrometheusConfig) -> tuple[MetricsServer, threading.Thread]:
    """Bind and serve in a thread; raises OSError with the address when the bind fails."""
    context = None
    if config.tls_cert is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(str(config.tls_cert), str(config.tls_key))
    server = MetricsServer(app, config.listen, config.port, context)
    return server, server._thread
