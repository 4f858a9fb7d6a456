"""The Prometheus exporter: a collector over the latest sample, and its HTTP endpoint.

Metric families are built afresh from the latest sample on every render, on a private
registry. Every metric and its unit is listed in README's metrics table. Values are those
of the last poll, so no sample carries a timestamp; the exposition is rendered once per
poll and per format and shared by every scrape until the next poll.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import hmac
import logging
import platform
import socket
import ssl
import threading
from collections import Counter
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.exposition import choose_encoder

from .. import __version__
from ..project import fill_prometheus
from ..readings import FAMILIES, LAST, family_labels
from ..sample import Sample

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


def _families(sample: Sample, xids: dict):
    """Every reading's family (README's metrics table), filled by the code the table generates."""
    families = {}
    for name, family in FAMILIES.items():
        cls = CounterMetricFamily if family.type == "counter" else GaugeMetricFamily
        families[name] = cls(name, family.help + LAST, labels=list(family_labels(name)))
    system = sample.system
    info = families["rigmon_gpu_info"]
    for i in sample.gpu_info:
        info.add_metric([str(i.index), i.uuid, i.name, i.pci_bus_id or "", i.serial or "", i.vbios_version or "",
                         (system.driver_version if system else None) or "",
                         (system.cuda_driver_version if system else None) or "", i.compute_capability or ""], 1)
    fill_prometheus(sample, families)
    xid = families["rigmon_gpu_xid_errors"]
    for labels, count in sorted(xids.items()):
        xid.add_metric(list(labels), count)
    host = sample.host is not None
    return [f for name, f in families.items() if host or FAMILIES[name].group != "host"]


# --- HTTP -------------------------------------------------------------------------------
class MetricsApp:
    """WSGI app serving /metrics: rendered once per poll and format, optional basic auth."""

    def __init__(self, registry: CollectorRegistry, generation, auth: tuple[str, str] | None = None,
                 routes: dict | None = None):
        self._registry = registry
        self._routes = routes or {}  # path -> () -> (content type, body): the daemon's /alerts
        self._generation = generation  # changes when a new sample arrives
        self._auth = auth  # (username, sha256 hex of the password)
        self._cache: dict[tuple, bytes] = {}
        self._cache_generation = None
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        if self._auth is not None and not self._authorised(environ.get("HTTP_AUTHORIZATION", "")):
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="rigmon"'),
                                                ("Content-Type", "text/plain")])
            return [b"authentication required\n"]
        path = environ.get("PATH_INFO", "/")
        if path in ("/", ""):
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [b"<html><head><title>rigmon</title></head><body><h1>rigmon</h1>"
                    b"<p><a href='/metrics'>Metrics</a></p></body></html>\n"]
        if path in self._routes:
            content_type, body = self._routes[path]()
            start_response("200 OK", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
            return [body]
        if path != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: try /metrics\n"]
        encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
        zipped = "gzip" in environ.get("HTTP_ACCEPT_ENCODING", "")
        body = self._render(encoder, content_type, zipped)
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
        if zipped:
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    def _render(self, encoder, content_type: str, zipped: bool) -> bytes:
        key = (content_type, zipped)
        with self._lock:
            generation = self._generation()
            if generation != self._cache_generation:
                self._cache.clear()
                self._cache_generation = generation
            body = self._cache.get(key)
            if body is None:
                body = encoder(self._registry)
                if zipped:
                    body = gzip.compress(body, compresslevel=5)
                self._cache[key] = body
            return body

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


CONNECTION_TIMEOUT = 10.0  # seconds a client has for the TLS handshake, its request, each read
MAX_CONNECTIONS = 64  # connections served at once; more are closed at once, not queued behind


class _Server(ThreadingMixIn, WSGIServer):
    """One thread per connection, at most MAX_CONNECTIONS of them. TLS is set up in that
    thread, under the connection's timeout: a client that connects and says nothing (or
    trickles its request) holds only its own thread, never the accept loop."""

    daemon_threads = True
    request_queue_size = 128  # 50 concurrent scrapers must not find the backlog full
    tls: ssl.SSLContext | None = None

    def server_activate(self):
        super().server_activate()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # over the bound: refuse fast
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            request.settimeout(CONNECTION_TIMEOUT)
            if self.tls is not None:
                try:
                    request = self.tls.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError):  # a failed or abandoned handshake: that client only
                    self.shutdown_request(request)
                    return
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address):  # a client gone mid-request is not an error
        pass


class _QuietHandler(WSGIRequestHandler):
    timeout = CONNECTION_TIMEOUT

    def log_message(self, format, *args):  # scrapes are not news
        pass


def serve(app: MetricsApp, config: PrometheusConfig) -> tuple[WSGIServer, threading.Thread]:
    """Bind and serve in a thread; raises OSError with the address when the bind fails."""
    server_class = _Server
    if ":" in config.listen:
        server_class = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
    try:
        server = make_server(config.listen, config.port, app, server_class, _QuietHandler)
    except OSError as e:
        raise OSError(e.errno, f"cannot listen on {config.listen}:{config.port}: {e.strerror}") from None
    if config.tls_cert is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(str(config.tls_cert), str(config.tls_key))
        server.tls = context  # each connection's handshake runs in its own thread
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="rigmon-http",
                              daemon=True)
    thread.start()
    return server, thread
