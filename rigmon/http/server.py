"""The HTTP server the daemon answers on: ``/metrics`` and every other path, on one asyncio
loop thread with HTTP/1.1 keep-alive, bounded connections and requests, optional TLS, and basic
auth checked as Prometheus's web config does (``auth``: bcrypt or SHA-256, with guesses paced).

``/metrics`` is rendered once per poll, format and encoding, then the same bytes go to every
scrape until the next poll (``MetricsApp``); the page's paths are routes handed in by the
daemon. Nothing here knows what a reading is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gzip
import logging
import os
import socket
import ssl
import threading
from typing import TYPE_CHECKING, NamedTuple

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from ..exporters.exposition import Exposition
from .auth import AUTH_FAILURE_DELAY, AuthGate, BasicAuth

if TYPE_CHECKING:
    from ..config.schema import PrometheusConfig

log = logging.getLogger(__name__)

CONNECTION_TIMEOUT = 10.0  # seconds a client has for the TLS handshake, its request, each write
IDLE_TIMEOUT = 60.0  # seconds a kept-alive connection may wait for its next request
SHUTDOWN_GRACE = 1.0  # seconds a stop or reload waits for the requests it accepted to be answered
MAX_CONNECTIONS = 512  # connections held at once; a new one closes the one waiting longest on its client
HEADS_KEPT, HEAD_KEPT_BYTES = 64, 2048  # distinct request heads kept parsed, and the longest kept
MAX_REQUEST_BYTES = 16384  # request line and headers
READ_BYTES = 65536  # the most one read takes from a connection
WRITE_BUFFER_BYTES = 64 << 10  # answers queued for a client that does not read: then its requests wait

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}


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


# on everything the page and its API answer: no type guessed from the bytes, never framed by
# another site, no address of ours sent on as a referrer; the API's answers never kept
SAFE_HEADERS = (("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer"))
_NO_STORE = (("Cache-Control", "no-store"),)


_ROOT = response(
    200,
    "text/html; charset=utf-8",
    b"<html><head><title>rigmon</title></head><body><h1>rigmon</h1>"
    b"<p><a href='/metrics'>Metrics</a></p></body></html>\n",
    (("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"), *SAFE_HEADERS),
)
_NOT_FOUND = response(404, "text/plain", b"not found: try /metrics\n")
_UNAUTHORISED = response(
    401, "text/plain", b"authentication required\n", (("WWW-Authenticate", 'Basic realm="rigmon"'),)
)
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
    query: str = ""  # after the ?, as sent (the page's API reads it)


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
    path, _, query = path.partition("?")
    return _Request(
        keep,
        path,
        method == "HEAD",
        None,
        headers.get("authorization", ""),
        accept,
        zipped,
        (_encoder(accept)[1], zipped),
        query,
    )


class Deferred(NamedTuple):
    """An answer made off the serving loop (the page's charts, a week of history): ``make()``
    runs on the server's page thread; the connection waits, the others are served meanwhile."""

    make: object  # () -> Response


class MetricsApp:
    """What /metrics and the other paths answer: the exposition rendered once per poll, format
    and encoding, then the same bytes (and their prebuilt headers) for every scrape until the
    next poll; optional basic auth, the same for every path. Called from the server's loop
    thread only.

    ``routes``: path -> fn(query) -> (content type, body), answered on the loop (small and
    quick: the page, /state); ``slow_routes`` the same, made on the page thread (Deferred)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        generation,
        auth: BasicAuth | None = None,
        routes: dict | None = None,
        slow_routes: dict | None = None,
    ):
        self._registry = registry
        self._routes = routes or {}
        self._slow_routes = slow_routes or {}
        self._generation = generation  # changes when a new sample arrives
        self.auth = auth
        self._cache: dict[tuple, Response] = {}
        self._cache_generation = None
        self._exposition = Exposition()  # each series' escaped name and labels, kept between renders

    def respond(self, request: _Request) -> Response:
        """The answer to a GET: this poll's exposition rendered by the first scrape that asks
        for its format, the same bytes for the others."""
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
        if path in self._routes:
            return _routed(self._routes[path], request)
        if path in self._slow_routes:
            return Deferred(functools.partial(_routed, self._slow_routes[path], request))
        if path in ("/", ""):
            return _ROOT
        return _NOT_FOUND

    def _render(self, accept: str, zipped: bool) -> Response:
        encoder, content_type = _encoder(accept)
        body = self._exposition.encoder(encoder)(self._registry)
        if zipped:
            # level 1: 8-GPU exposition 53 KB -> 6.3 KB in ~0.1 ms; level 5 gains 0.7 KB for 2.5x the CPU
            body = gzip.compress(body, compresslevel=1)
        return response(200, content_type, body, (("Content-Encoding", "gzip"),) if zipped else ())


class Static(bytes):
    """A route's answer that never changes (the page): gzipped once, at the best level, not at
    each request."""

    zipped: bytes

    def __new__(cls, data: bytes) -> Static:
        self = super().__new__(cls, data)
        self.zipped = gzip.compress(data, compresslevel=9, mtime=0)
        return self


def _routed(route, request: _Request) -> Response:
    """A route's answer: 404 for what it does not know (None), 400 for a bad query (ValueError,
    its message), gzip where asked and worth it."""
    try:
        answer = route(request.query)
    except ValueError as e:
        return response(400, "text/plain; charset=utf-8", f"{e}\n".encode("utf-8", "backslashreplace"))
    except Exception:
        log.exception("answering %s failed", request.path)
        return _RENDER_FAILED
    if answer is None:
        return _NOT_FOUND
    content_type, body, *extra = answer
    headers = (
        SAFE_HEADERS
        + (_NO_STORE if request.path.startswith("/api/") or request.path == "/state" else ())
        + (extra[0] if extra else ())
    )
    if request.zipped and len(body) > 1024:
        zipped = body.zipped if isinstance(body, Static) else gzip.compress(body, compresslevel=1)
        return response(200, content_type, zipped, (("Content-Encoding", "gzip"), *headers))
    return response(200, content_type, body, headers)


class MetricsServer:
    """HTTP/1.1 with keep-alive on one event loop thread: a scrape costs finding the end of its
    request, a look-up of its head (parsed the first time it is seen), and one write of cached
    bytes with prebuilt headers; no thread and no task per connection or request (asyncio
    protocols, deadlines swept once a second from a thread of their own).

    Bounded before any credential is checked: a connection holds at most one request's bytes
    beyond what it is answered, and none while its client does not read its answers
    (WRITE_BUFFER_BYTES queued, then its requests wait); a request head over MAX_REQUEST_BYTES
    is answered 431 however its bytes arrive; a TLS handshake, a request, or a write has
    CONNECTION_TIMEOUT, an idle kept-alive connection IDLE_TIMEOUT. Every accepted socket counts
    towards MAX_CONNECTIONS, TLS handshakes included (TLS starts on the accepted connection):
    at the bound, a new client closes the connection that has waited longest on its own client
    (silent, idle, or trickling its request), so idle or slow clients can never keep a scraper
    out. A client without credentials gets its 401 and its connection closed; a wrong password
    gets it after AUTH_FAILURE_DELAY.

    A render (once per poll and format, ~1 ms for 8 GPUs) runs on the loop too: a worker
    thread would not let the loop serve meanwhile (the render holds the GIL), and handing
    every scrape that waits for it over to that thread and back costs more than the render
    (at 10 kept-alive scrapers polled 4 times a second, p99 0.9 ms that way, 0.5 ms this)."""

    def __init__(
        self,
        app: MetricsApp,
        listen: str,
        port: int,
        tls: ssl.SSLContext | None = None,
        sock: socket.socket | None = None,
    ):
        self.app = app
        self._sock = sock  # a listening socket handed over by the process before a reload
        self.tls = tls
        self.connections: set[_Connection] = set()
        # what every connection reads into, on the loop's thread: asyncio's plain Protocol reads
        # each time into a new 256 KiB buffer, which glibc maps and unmaps, two page faults a
        # scrape (a third of a lone scraper's throughput)
        self.reading = memoryview(bytearray(READ_BYTES))
        self._heads: dict[bytes, _Request] = {}  # used on the loop's thread only
        self._page_pool: concurrent.futures.ThreadPoolExecutor | None = None  # Deferred answers, one at a time
        self._loop = asyncio.new_event_loop()
        # credentials checked one at a time, wrong guessers last
        self.gate = AuthGate(self._loop, lambda: self.app.auth)
        ready: concurrent.futures.Future = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(listen, port, ready), name="rigmon-http", daemon=True)
        self._thread.start()
        self._server = ready.result()  # raises the bind's OSError here
        self.server_address = self._server.sockets[0].getsockname()

    def _run(self, listen: str, port: int, ready) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.set_exception_handler(_quiet)
        try:
            if self._sock is not None:
                server = self._loop.run_until_complete(
                    self._loop.create_server(lambda: _Connection(self), sock=self._sock, backlog=128)
                )
            else:
                server = self._loop.run_until_complete(
                    self._loop.create_server(lambda: _Connection(self), listen, port, backlog=128, reuse_address=True)
                )
        except OSError as e:
            self._loop.close()  # now, in its thread: left to the garbage collector at exit, it can raise there
            ready.set_exception(OSError(e.errno, f"cannot listen on {listen}:{port}: {e.strerror}"))
            return
        ready.set_result(server)
        ticking = threading.Event()
        threading.Thread(target=self._tick, args=(ticking,), name="rigmon-http-sweep", daemon=True).start()
        try:
            self._loop.run_forever()
        finally:
            ticking.set()
            server.close()
            for connection in list(self.connections):
                connection.abort()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()
            self.gate.shutdown()
            if self._page_pool is not None:
                self._page_pool.shutdown(wait=False, cancel_futures=True)

    def _tick(self, stop: threading.Event) -> None:
        """The sweep once a second, called onto the loop from this thread. A timer kept on the
        loop instead (call_later) would make every wait for the next request a timed one,
        which costs the kernel a timer armed and cancelled at each scrape: a lone kept-alive
        scraper's CPU per scrape over the floor's was 1.06x with the timer on the loop, 0.96x
        without (bench_http, Prometheus's requests, 9 rounds each, on a 2-core VM)."""
        while not stop.wait(1.0):
            try:
                self._loop.call_soon_threadsafe(self._sweep)
            except RuntimeError:  # the loop closed meanwhile
                return

    def _sweep(self) -> None:
        """Close what is past its deadline: no request (or no whole one) in time, or a client
        that stopped reading its answer."""
        now = self._loop.time()
        for connection in [c for c in self.connections if c.deadline < now]:
            connection.abort()

    def admit(self, connection: _Connection) -> bool:
        """Room for a new connection: at the bound, the one waiting longest on its client goes."""
        if len(self.connections) >= MAX_CONNECTIONS:
            waiting = [c for c in self.connections if c.waiting_since is not None]
            if not waiting:
                return False  # every one is being answered: the newcomer is refused
            min(waiting, key=lambda c: c.waiting_since).abort()
        self.connections.add(connection)
        return True

    def defer(self, deferred: Deferred, done) -> None:
        """``deferred.make()`` off the loop; ``done(answer)`` on the loop afterwards."""
        if self._page_pool is None:
            self._page_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rigmon-page")
        future = self._loop.run_in_executor(self._page_pool, deferred.make)
        future.add_done_callback(
            lambda f: done(f.result() if not f.cancelled() and f.exception() is None else _RENDER_FAILED)
        )

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

    def hand_over(self) -> int:
        """A copy of the listening socket's descriptor, inheritable, for the process a reload
        starts: the port stays open while this server closes and the next one starts, and the
        connections made meanwhile wait in its backlog, answered by the next server."""
        fd = os.dup(self._server.sockets[0].fileno())
        os.set_inheritable(fd, True)
        return fd

    def shutdown(self, grace: float = SHUTDOWN_GRACE) -> None:
        """Stop: accept no more here (a reload's next server takes the backlog, on the socket it
        was handed), answer the requests already accepted (for up to ``grace`` seconds: a
        connection closed with its request unread would reach its client as a reset), then
        stop the loop. Kept-alive connections waiting for their next request just close."""
        if self._loop.is_running():
            stopped = threading.Event()

            def drain(deadline: float | None = None) -> None:
                if deadline is None:
                    self._server.close()
                    deadline = self._loop.time() + grace
                if self._loop.time() < deadline and any(c.pending for c in self.connections):
                    self._loop.call_later(0.01, drain, deadline)
                    return
                self._loop.stop()
                stopped.set()

            self._loop.call_soon_threadsafe(drain)
            stopped.wait(grace + 1.0)
        self._thread.join(timeout=2.0)


_HEAD_TOO_LARGE = response(431, "text/plain", b"request headers too large\n")


class _Connection(asyncio.BufferedProtocol):
    __slots__ = (
        "server",
        "loop",
        "transport",
        "raw",
        "buffer",
        "deadline",
        "closing",
        "paused",
        "checking",
        "waiting_since",
        "handshaking",
        "address",
        "answered",
        "last_data",
        "last_request",
    )

    def __init__(self, server: MetricsServer):
        self.server, self.loop = server, server._loop
        self.transport: asyncio.Transport | None = None
        self.raw: asyncio.Transport | None = None  # the TCP connection (the TLS one runs over it)
        self.buffer = b""
        self.deadline = self.loop.time() + CONNECTION_TIMEOUT
        self.closing = False
        self.paused = False  # its client does not read its answers
        self.checking = False  # its credentials are being checked: its next answer waits for the verdict
        self.waiting_since: float | None = self.loop.time()  # waiting on its client since then (None: on us)
        self.handshaking = False
        self.address = ""
        self.answered = 0  # answers written: a connection that has none yet has a request coming
        # the last whole request that came alone, and what it asks: a scraper's next is the same bytes
        self.last_data = b""
        self.last_request: _Request | None = None

    @property
    def pending(self) -> bool:
        """A request accepted and not yet answered (or its first still arriving)."""
        return not self.closing and (self.answered == 0 or bool(self.buffer) or self.checking)

    def connection_made(self, transport: asyncio.Transport) -> None:
        if self.raw is not None:
            return  # TLS's own call, once the handshake is done: handled where it was started
        self.raw = transport
        peer = transport.get_extra_info("peername")
        self.address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not self.server.admit(self):
            transport.abort()
            return
        if self.server.tls is not None:
            self.handshaking = True
            self.loop.create_task(self._start_tls())
        else:
            self.transport = transport
            transport.set_write_buffer_limits(high=WRITE_BUFFER_BYTES)

    async def _start_tls(self) -> None:
        try:
            transport = await self.loop.start_tls(
                self.raw, self, self.server.tls, server_side=True, ssl_handshake_timeout=CONNECTION_TIMEOUT
            )
        except (OSError, ssl.SSLError, ConnectionError, TimeoutError, asyncio.CancelledError):
            self.abort()
            return
        if transport is None or self.closing:
            self.abort()
            return
        self.transport = transport
        self.handshaking = False
        transport.set_write_buffer_limits(high=WRITE_BUFFER_BYTES)
        if self.buffer:  # what arrived while the handshake finished
            self._serve()

    def abort(self) -> None:
        self.closing = True
        self.server.connections.discard(self)
        transport = self.transport or self.raw
        if transport is not None:
            transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)

    def pause_writing(self) -> None:  # the client reads slower than we write: it gets CONNECTION_TIMEOUT
        self.deadline = self.loop.time() + CONNECTION_TIMEOUT
        self.paused = True
        self.waiting_since = self.loop.time()
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        self.deadline = self.loop.time() + (CONNECTION_TIMEOUT if self.buffer else IDLE_TIMEOUT)
        if self.checking:  # the verdict resumes it, in order
            return
        if self.transport is not None:
            self.transport.resume_reading()
        if self.buffer:
            try:
                self._serve()  # the requests that waited for the client to read
            except Exception:
                log.exception("answering a request failed")
                self.abort()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.server.reading  # handed on in buffer_updated, before the loop reads again

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self.server.reading[:nbytes].tobytes())

    def data_received(self, data: bytes) -> None:
        try:
            if self.transport is None or self.paused or self.checking:  # a TLS handshake just done, answers
                # not yet read, or a verdict awaited: kept, in order
                self.buffer += data
                if len(self.buffer) > 2 * MAX_REQUEST_BYTES and self.transport is not None:
                    self.transport.pause_reading()
                return
            if not (self.buffer or self.closing):
                if data == self.last_data:  # the scrape before, again: its head is known
                    self._answer(data, self.last_request)
                    return
                if data.find(b"\r\n\r\n") == len(data) - 4:
                    # one whole request, nothing before it (a scraper's every scrape)
                    self.last_request = self._answer(data[:-4])
                    self.last_data = data if self.last_request is not None else b""
                    return
            if not self.buffer:  # a new request begins: it has CONNECTION_TIMEOUT to arrive whole
                self.deadline = self.loop.time() + CONNECTION_TIMEOUT
            self.buffer += data
            self._serve()
        except Exception:  # a bug answering one request: that connection only
            log.exception("answering a request failed")
            self.abort()

    def _serve(self) -> None:
        """Answer the whole requests buffered, in order, while the client reads its answers."""
        while not (self.closing or self.paused or self.checking):
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_REQUEST_BYTES:
                    self._write(_HEAD_TOO_LARGE, False, False)
                return
            head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
            self._answer(head)

    def _answer(self, head: bytes, request: _Request | None = None) -> _Request | None:
        """Answer one request (its line and headers; ``request``: them parsed, where known); what
        it asked (None: a head too large to read)."""
        if request is None:
            if len(head) > MAX_REQUEST_BYTES:
                self._write(_HEAD_TOO_LARGE, False, False)
                return None
            request = self.server.request(head)
        if request.refused is not None:
            self._write(request.refused, request.keep, request.head_only)
            return request
        auth = self.server.app.auth
        if auth is not None:
            verdict = auth.cached(request.authorization)
            if verdict is None:  # checked in its turn (AuthGate): this connection waits for it
                self.checking = True
                gate = self.server.gate
                # one that guessed wrong lately waits on its own guesses: at the bound of
                # connections, a newcomer may close it as one waiting on its client
                self.waiting_since = self.loop.time() if gate.suspect(self.address) else None
                self.transport.pause_reading()
                gate.check(request.authorization, self, lambda ok: self._checked(request, ok))
                return request
            if not verdict:
                self._refuse(request)
                return request
        self._respond(request)
        return request

    def _respond(self, request: _Request) -> bool:
        """Answer ``request``; False where its answer is made off the loop (the connection waits
        for it, as for a verdict, and goes on in ``_made``)."""
        answer = self.server.app.respond(request)
        if isinstance(answer, Deferred):
            self.checking = True
            self.waiting_since = None
            self.transport.pause_reading()
            self.server.defer(answer, lambda made: self._made(request, made))
            return False
        self._write(answer, request.keep and answer is not _RENDER_FAILED, request.head_only)
        return True

    def _made(self, request: _Request, answer: Response) -> None:
        try:
            if self.closing:
                return
            self.checking = False
            self._write(answer, request.keep and answer is not _RENDER_FAILED, request.head_only)
            self._resume()
        except Exception:  # a bug answering one request: that connection only
            log.exception("answering a request failed")
            self.abort()

    def _resume(self) -> None:
        if not (self.closing or self.paused):  # else resume_writing goes on once the client reads
            self.transport.resume_reading()
            if self.buffer:
                self._serve()

    def _checked(self, request: _Request, ok: bool) -> None:
        try:
            self._go_on(request, ok)
        except Exception:  # a bug answering one request: that connection only
            log.exception("answering a request failed")
            self.abort()

    def _go_on(self, request: _Request, ok: bool) -> None:
        """The verdict on a request's credentials is in: answer it, then what waited behind it."""
        if self.closing:
            return
        self.checking = False
        if not ok:
            self._refuse(request)
            return
        if self._respond(request):
            self._resume()

    def _refuse(self, request: _Request) -> None:
        """401, and the connection closes: at once without credentials (a browser asks for them
        and comes back), after AUTH_FAILURE_DELAY with wrong ones (a guess a second, not thousands)."""
        self.closing = True
        self.buffer = b""
        if not request.authorization:
            self._write(_UNAUTHORISED, False, request.head_only)
            return
        self.transport.pause_reading()
        self.loop.call_later(AUTH_FAILURE_DELAY, self._write, _UNAUTHORISED, False, request.head_only)

    def _write(self, answer: Response, keep: bool, head_only: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self.answered += 1
        if head_only:
            transport.write(answer.head + (b"\r\n" if keep else b"Connection: close\r\n\r\n"))
        else:
            transport.write(answer.kept if keep else answer.closing)
        if keep:
            now = self.loop.time()
            self.deadline = now + (CONNECTION_TIMEOUT if self.buffer else IDLE_TIMEOUT)
            if not self.paused:
                self.waiting_since = now
        else:
            self.closing = True
            self.waiting_since = None
            transport.close()  # after what is written


def _quiet(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """Clients that vanish mid-handshake or mid-answer are no news; anything else is logged."""
    error = context.get("exception")
    if isinstance(error, (ConnectionError, ssl.SSLError, TimeoutError, OSError)):
        log.debug("HTTP client: %s", context.get("message"))
        return
    log.error("HTTP server: %s", context.get("message"), exc_info=error)


def tls_context(config: PrometheusConfig) -> ssl.SSLContext | None:
    """The TLS server context the config asks for; raises OSError or ssl.SSLError when the
    certificate or key cannot be used."""
    if config.tls_cert is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(config.tls_cert), str(config.tls_key))
    return context


def serve(
    app: MetricsApp, config: PrometheusConfig, sock: socket.socket | None = None
) -> tuple[MetricsServer, threading.Thread]:
    """Bind (or take ``sock``, already listening) and serve in a thread; raises OSError with the
    address when the bind fails."""
    server = MetricsServer(app, config.listen, config.port, tls_context(config), sock)
    return server, server._thread
