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
from ..sample import CLOCK_EVENT_BITS, Sample

if TYPE_CHECKING:
    from ..config import PrometheusConfig

log = logging.getLogger(__name__)

LAST = " (from the last poll)"
_THRESHOLDS = ("shutdown", "slowdown", "gpu_max", "memory_max")
_THROTTLE = ("sw_power_cap", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


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
        yield from _gpu_families(sample, xids)
        yield from _host_families(sample)


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc + LAST, labels=labels)


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc + LAST, labels=labels)


def _gpu_families(sample: Sample, xids: dict):
    ids = ["gpu", "uuid"]
    f = {
        "up": _gauge("rigmon_gpu_up", "1 if the GPU answers, 0 if it is lost (fell off the bus).", ids),
        "power": _gauge("rigmon_gpu_power_watts", "Power draw (NVML's 1 s average on Ampere and newer).", ids),
        "limit": _gauge("rigmon_gpu_power_limit_watts", "Enforced power limit.", ids),
        "limit_range": _gauge("rigmon_gpu_power_limit_range_watts", "Power limit bounds and default.",
                              ids + ["bound"]),
        "energy": _counter("rigmon_gpu_energy_joules", "Energy used since the driver loaded.", ids),
        "temp": _gauge("rigmon_gpu_temperature_celsius", "GPU core and memory temperature.", ids + ["sensor"]),
        "threshold": _gauge("rigmon_gpu_temperature_threshold_celsius", "Temperature thresholds.",
                            ids + ["threshold"]),
        "util": _gauge("rigmon_gpu_utilization_ratio", "Share of the last sample period the GPU (kind=gpu) or its "
                                                       "memory controller (kind=memory) was busy.", ids + ["kind"]),
        "clock": _gauge("rigmon_gpu_clock_hertz", "Current clocks.", ids + ["clock"]),
        "clock_max": _gauge("rigmon_gpu_clock_max_hertz", "Maximum clocks.", ids + ["clock"]),
        "event": _gauge("rigmon_gpu_clock_event_active", "1 while a clock-event (throttle) reason is active. "
                                                         "sw_power_cap is normal under full load.", ids + ["reason"]),
        "event_s": _counter("rigmon_gpu_clock_event_seconds", "Time spent throttled, by reason, since the driver "
                                                              "loaded.", ids + ["reason"]),
        "mem_used": _gauge("rigmon_gpu_memory_used_bytes", "Device memory in use.", ids),
        "mem_total": _gauge("rigmon_gpu_memory_total_bytes", "Device memory size.", ids),
        "pstate": _gauge("rigmon_gpu_performance_state", "P-state: 0 is maximum performance, 15 minimum.", ids),
        "fan": _gauge("rigmon_gpu_fan_speed_ratio", "Fan speed NVML reports: the intended speed (may exceed 1; a "
                                                    "blocked fan still reports it).", ids + ["fan"]),
        "fan_target": _gauge("rigmon_gpu_fan_target_speed_ratio", "Fan speed the driver asks for.", ids + ["fan"]),
        "fan_rpm": _gauge("rigmon_gpu_fan_speed_rpm", "Measured fan speed (where the board reports it).",
                          ids + ["fan"]),
        "pcie_gen": _gauge("rigmon_gpu_pcie_link_generation",
                           "PCIe link generation (drops at idle by design): link=current, "
                           "max (what GPU and slot allow), gpu_max, expected (config).",
                           ids + ["link"]),
        "pcie_width": _gauge("rigmon_gpu_pcie_link_width", "PCIe link width in lanes (drops at idle by design).",
                             ids + ["link"]),
        "replays": _counter("rigmon_gpu_pcie_replays", "PCIe replays: link errors (risers, seating).", ids),
        "pcie_tput": _gauge("rigmon_gpu_pcie_throughput_bytes_per_second", "PCIe throughput over 20 ms.",
                            ids + ["direction"]),
        "ecc": _counter("rigmon_gpu_ecc_errors", "ECC errors (counter=volatile since boot, aggregate lifetime).",
                        ids + ["type", "counter"]),
        "remapped": _counter("rigmon_gpu_remapped_rows", "Memory rows remapped, by cause.", ids + ["cause"]),
        "remap_pending": _gauge("rigmon_gpu_remapped_rows_pending", "1 if a row remap waits for a GPU reset.", ids),
        "remap_failure": _gauge("rigmon_gpu_remapped_rows_failure", "1 if a row remap failed.", ids),
        "retired": _counter("rigmon_gpu_retired_pages", "Memory pages retired (boards before Ampere), by cause.",
                            ids + ["cause"]),
        "retired_pending": _gauge("rigmon_gpu_retired_pages_pending", "1 if a page retirement waits for a GPU "
                                                                      "reset.", ids),
        "procs": _gauge("rigmon_gpu_processes", "Compute processes on the GPU.", ids),
        "procs_mem": _gauge("rigmon_gpu_processes_memory_bytes", "Device memory held by compute processes.", ids),
    }
    info = _gauge("rigmon_gpu_info", "GPU identity; always 1.",
                  ["gpu", "uuid", "name", "pci_bus_id", "serial", "vbios", "driver", "cuda", "compute_capability"])
    system = sample.system
    static = {i.index: i for i in sample.gpu_info}
    for i in sample.gpu_info:
        info.add_metric([str(i.index), i.uuid, i.name, i.pci_bus_id or "", i.serial or "", i.vbios_version or "",
                         (system.driver_version if system else None) or "",
                         (system.cuda_driver_version if system else None) or "", i.compute_capability or ""], 1)
    for g in sample.gpus:
        lv = [str(g.index), g.uuid]
        f["up"].add_metric(lv, 0 if g.lost else 1)
        if g.lost:
            continue
        i = static.get(g.index)
        _add(f["power"], lv, g.power_watts)
        _add(f["limit"], lv, g.power_limit_watts)
        _add(f["energy"], lv, g.energy_joules)
        _add(f["temp"], lv + ["gpu"], g.temperature_celsius)
        _add(f["temp"], lv + ["memory"], g.memory_temperature_celsius)
        _add(f["util"], lv + ["gpu"], g.utilization_gpu_ratio)
        _add(f["util"], lv + ["memory"], g.utilization_memory_ratio)
        _add(f["clock"], lv + ["graphics"], g.graphics_clock_hertz)
        _add(f["clock"], lv + ["sm"], g.sm_clock_hertz)
        _add(f["clock"], lv + ["memory"], g.memory_clock_hertz)
        _add(f["mem_used"], lv, g.memory_used_bytes)
        _add(f["mem_total"], lv, g.memory_total_bytes)
        _add(f["pstate"], lv, g.performance_state)
        _add(f["pcie_gen"], lv + ["current"], g.pcie_generation)
        _add(f["pcie_width"], lv + ["current"], g.pcie_width)
        _add(f["replays"], lv, g.pcie_replay_total)
        _add(f["pcie_tput"], lv + ["rx"], g.pcie_rx_bytes_per_second)
        _add(f["pcie_tput"], lv + ["tx"], g.pcie_tx_bytes_per_second)
        for family, values in (("fan", g.fan_speed_ratios), ("fan_target", g.fan_target_ratios),
                               ("fan_rpm", g.fan_speed_rpm)):
            for n, value in enumerate(values or ()):
                _add(f[family], lv + [str(n)], value)
        if g.clock_events is not None:
            for name, _ in CLOCK_EVENT_BITS:
                _add(f["event"], lv + [name], _bit(getattr(g.clock_events, name)))
        if g.throttle_seconds is not None:
            for name in _THROTTLE:
                _add(f["event_s"], lv + [name], getattr(g.throttle_seconds, name))
        if g.ecc_errors is not None:
            e = g.ecc_errors
            _add(f["ecc"], lv + ["corrected", "volatile"], e.corrected_volatile)
            _add(f["ecc"], lv + ["uncorrected", "volatile"], e.uncorrected_volatile)
            _add(f["ecc"], lv + ["corrected", "aggregate"], e.corrected_aggregate)
            _add(f["ecc"], lv + ["uncorrected", "aggregate"], e.uncorrected_aggregate)
        if g.remapped_rows is not None:
            r = g.remapped_rows
            f["remapped"].add_metric(lv + ["correctable"], r.correctable)
            f["remapped"].add_metric(lv + ["uncorrectable"], r.uncorrectable)
            f["remap_pending"].add_metric(lv, int(r.pending))
            f["remap_failure"].add_metric(lv, int(r.failure))
        if g.retired_pages is not None:
            p = g.retired_pages
            _add(f["retired"], lv + ["single_bit_ecc"], p.single_bit)
            _add(f["retired"], lv + ["double_bit_ecc"], p.double_bit)
            _add(f["retired_pending"], lv, _bit(p.pending))
        if g.processes is not None:
            f["procs"].add_metric(lv, len(g.processes))
            f["procs_mem"].add_metric(lv, sum(p.used_memory_bytes or 0 for p in g.processes))
        if i is not None:
            _add(f["limit_range"], lv + ["min"], i.power_limit_min_watts)
            _add(f["limit_range"], lv + ["max"], i.power_limit_max_watts)
            _add(f["limit_range"], lv + ["default"], i.power_limit_default_watts)
            for name in _THRESHOLDS:
                _add(f["threshold"], lv + [name], getattr(i.temperature_thresholds, name))
            _add(f["clock_max"], lv + ["sm"], i.max_sm_clock_hertz)
            _add(f["clock_max"], lv + ["memory"], i.max_memory_clock_hertz)
            _add(f["pcie_gen"], lv + ["max"], i.max_pcie_generation)
            _add(f["pcie_gen"], lv + ["gpu_max"], i.gpu_max_pcie_generation)
            _add(f["pcie_gen"], lv + ["expected"], i.expected_pcie_generation)
            _add(f["pcie_width"], lv + ["max"], i.max_pcie_width)
    xid = _counter("rigmon_gpu_xid_errors", "XID critical errors seen since rigmon started, by code.",
                   ids + ["xid"])
    for labels, count in sorted(xids.items()):
        xid.add_metric(list(labels), count)
    count = _gauge("rigmon_gpus", "GPUs answering now (state=answering) and found at start (state=at_start).",
                   ["state"])
    count.add_metric(["answering"], sum(1 for g in sample.gpus if not g.lost))
    count.add_metric(["at_start"], len(sample.gpu_info))
    yield info
    yield from f.values()
    yield xid
    yield count


def _host_families(sample: Sample):
    host = sample.host
    if host is None:
        return
    cpu = _gauge("rigmon_cpu_temperature_celsius", "One temperature per CPU socket; sensor says which was used "
                                                   "(Tdie/Tccd over Tctl, Package over Core).",
                 ["socket", "chip", "sensor"])
    cpu_limit = _gauge("rigmon_cpu_temperature_threshold_celsius", "CPU temperature limits from the sensor.",
                       ["socket", "chip", "sensor", "threshold"])
    for t in host.cpu_temperatures:
        labels = [str(t.socket), t.chip, t.sensor]
        cpu.add_metric(labels, t.celsius)
        _add(cpu_limit, labels + ["high"], t.high_celsius)
        _add(cpu_limit, labels + ["critical"], t.critical_celsius)
    sensors = _gauge("rigmon_sensor_temperature_celsius", "Every hwmon temperature sensor.", ["chip", "sensor"])
    seen = set()
    for t in host.temperatures:
        key = (t.chip, t.label)
        if key not in seen:  # two sockets may repeat a label ("Core 0"): the first one stands
            seen.add(key)
            sensors.add_metric([t.chip, t.label], t.celsius)
    fans = _gauge("rigmon_fan_speed_rpm", "Fan speed from hwmon (0 may mean stopped or not connected).",
                  ["chip", "fan"])
    turned = _gauge("rigmon_fan_turned", "1 if the fan read above 0 rpm since rigmon started (0: stopped, or an "
                                         "empty header).", ["chip", "fan"])
    for fan in host.fans:
        fans.add_metric([fan.chip, fan.label], fan.rpm)
        turned.add_metric([fan.chip, fan.label], int(fan.turned))
    util = _gauge("rigmon_cpu_utilization_ratio", "CPU busy share across all cores since the previous poll.", [])
    _add(util, [], host.cpu_utilization_ratio)
    cores = _gauge("rigmon_cpu_cores", "Logical CPUs.", [])
    _add(cores, [], host.cpu_count)
    load = _gauge("rigmon_load_average", "System load average.", ["window"])
    for window, value in (("1m", host.load1), ("5m", host.load5), ("15m", host.load15)):
        _add(load, [window], value)
    mem_total = _gauge("rigmon_memory_total_bytes", "Host memory size.", [])
    _add(mem_total, [], host.memory_total_bytes)
    mem_avail = _gauge("rigmon_memory_available_bytes", "Host memory available.", [])
    _add(mem_avail, [], host.memory_available_bytes)
    energy = _counter("rigmon_cpu_energy_joules", "CPU energy by RAPL zone, made monotonic across wraps.",
                      ["zone"])
    for e in host.cpu_energy:
        energy.add_metric([e.zone], e.joules)
    sensors_visible = _gauge("rigmon_host_sensors_visible", "1 if any hwmon temperature or fan sensor is visible.",
                             [])
    sensors_visible.add_metric([], 1 if (host.temperatures or host.fans) else 0)
    yield from (cpu, cpu_limit, sensors, fans, turned, util, cores, load, mem_total, mem_avail, energy, sensors_visible)


def _add(family, labels: list[str], value) -> None:
    if value is not None:
        family.add_metric(labels, value)


def _bit(value: bool | None) -> int | None:
    return None if value is None else int(value)


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
