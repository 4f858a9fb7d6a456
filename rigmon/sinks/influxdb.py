"""The InfluxDB sink: every sample, once, in order, even across outages and crashes.

Polling hands samples to a bounded in-memory queue and returns. A spooler thread encodes
them as line protocol and appends them to the disk spool (fsynced); it never waits on the
network. A sender thread sends the spool's segments oldest first, synchronously, through the
v2 API (influxdb-client, for InfluxDB 2.x, 3.x and 1.8+) or the v1 ``/write`` API
(InfluxDB 1.x). Failures are retried with exponential backoff and jitter, honouring
Retry-After up to ``retry_max``; a refused credential, org, bucket or database is reported
once and retried slowly, with the data kept in the spool.

A batch the server calls malformed (HTTP 400) is tried again after a delay (a proxy may
answer 400 for a while); refused again, it is split until the bad lines are found: the
others are written, the bad ones kept beside the spool in ``*.rejected`` and counted as
failed. Bytes that are not UTF-8 are bad lines too, never a reason to retry.

Durability: a sample is on disk within milliseconds of its poll; only samples still in the
in-memory queue at a crash are lost. When the disk is full, samples wait in memory (bounded)
and go to the spool as soon as it has room; a torn write is cut back. The spool, rejected
files included, is bounded (``spool_max_bytes``): past it the oldest points go first,
counted and logged.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import itertools
import logging
import queue
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..model.project import influx_tag
from .base import PollResult
from .lineprotocol import encode, encode_budgets, encode_job, encode_transition
from .retry import Retry, backoff, retry_after
from .spool import Spool

if TYPE_CHECKING:
    from ..config.box import Box
    from ..config.schema import InfluxConfig

log = logging.getLogger(__name__)

INFO_EVERY_SECONDS = 3600.0
BATCH_BYTES = 4 << 20  # the most one write carries when the spool holds several segments


class Refused(Exception):
    """The server refused us (credentials, org, bucket, database): retry slowly, keep the data."""


class Malformed(Exception):
    """The server rejected the batch itself (HTTP 400)."""


def _classify(status: int, reason: str, after: str | None) -> Exception:
    if status == 429 or status >= 500:
        return Retry(f"HTTP {status} {reason}".strip(), retry_after(after))
    if status in (400, 413):  # 413: too large for the server's limit: sent in smaller parts, as a 400 is
        return Malformed(f"HTTP {status} {reason}".strip())
    return Refused(f"HTTP {status} {reason}".strip())


class Sender(Protocol):
    """What writes a batch of lines: raises Retry, Malformed or another classified error."""

    def send(self, data: bytes) -> None: ...
    def close(self) -> None: ...


class V1Sender:
    """InfluxDB 1.x: POST /write?db=&rp=&precision=ns, basic auth, on one kept-alive connection."""

    def __init__(self, config: InfluxConfig):
        query = {"db": config.database, "precision": "ns"}
        if config.retention_policy:
            query["rp"] = config.retention_policy
        url = urllib.parse.urlsplit(config.url)
        self._https = url.scheme == "https"
        self._host, self._port = url.hostname or "", url.port
        self._path = url.path.rstrip("/") + "/write?" + urllib.parse.urlencode(query)
        self._headers = {"Content-Type": "text/plain; charset=utf-8", "Content-Encoding": "gzip"}
        if config.username:
            password = config.password.get_secret_value() if config.password else ""
            token = base64.b64encode(f"{config.username}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        self._timeout = config.timeout
        self._connection: http.client.HTTPConnection | None = None

    def send(self, data: bytes) -> None:
        body = gzip.compress(data, 5)
        for fresh in (self._connection is None, True):
            if self._connection is None:
                cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
                self._connection = cls(self._host, self._port, timeout=self._timeout)
            try:
                self._connection.request("POST", self._path, body=body, headers=self._headers)
                response = self._connection.getresponse()
                payload = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self.close()
                if fresh:
                    raise Retry(f"{type(e).__name__}: {e}") from None
                continue  # the server closed the kept-alive connection meanwhile: once more on a new one
            except (OSError, http.client.HTTPException) as e:  # refused, timed out, a broken answer
                self.close()
                raise Retry(f"{type(e).__name__}: {e}") from None
            if response.will_close:
                self.close()
            if response.status >= 300:
                text = payload[:300].decode("utf-8", "replace")
                raise _classify(
                    response.status, f"{response.reason}: {text}".strip(": "), response.getheader("Retry-After")
                )
            return

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class V2Sender:
    """InfluxDB 2.x/3.x/1.8+: influxdb-client's SYNCHRONOUS write API; rigmon owns the retries."""

    def __init__(self, config: InfluxConfig):
        from influxdb_client.client.influxdb_client import InfluxDBClient
        from influxdb_client.client.write_api import SYNCHRONOUS
        from influxdb_client.domain.write_precision import WritePrecision

        token = config.token.get_secret_value() if config.token else ""
        self._client = InfluxDBClient(
            url=config.url,
            token=token,
            org=config.org,
            timeout=int(config.timeout * 1000),
            enable_gzip=True,
            retries=False,
        )
        self._api = self._client.write_api(write_options=SYNCHRONOUS)
        self._bucket, self._org, self._precision = config.bucket, config.org, WritePrecision.NS

    def send(self, data: bytes) -> None:
        from influxdb_client.rest import ApiException

        try:
            record = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise Malformed(f"not UTF-8 at byte {e.start}") from None
        try:
            self._api.write(
                bucket=self._bucket,
                org=self._org,
                record=record,
                write_precision=self._precision,  # type: ignore[arg-type]  # the stubs type WritePrecision.NS as str
            )
        except ApiException as e:
            body = (e.body or b"")[:300]
            body = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
            headers: Mapping[str, str] = e.headers or {}
            raise _classify(
                e.status or 0, f"{e.reason or ''}: {body}".strip(": "), headers.get("Retry-After")
            ) from None
        except Exception as e:  # urllib3's connection errors, timeouts
            raise Retry(f"{type(e).__name__}: {e}") from None

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]  # influxdb-client leaves it untyped


class InfluxSink:
    def __init__(self, config: InfluxConfig, box: Box, price_per_kwh: float = 0.0, sender: Sender | None = None):
        self.config = config
        self.host = box.host
        # the box's own labels ([daemon] labels) as tags of every point, beside host
        self._host_tag = ",host=" + influx_tag(self.host)
        self._box_tags = self._host_tag + "".join(f",{influx_tag(k)}={influx_tag(v)}" for k, v in box.labels)
        self.price_per_kwh = price_per_kwh  # [jobs] price_per_kwh, on each job's point
        spool_dir = self.config.spool_dir or (box.state_dir / "influxdb-spool")
        self.spool = Spool(spool_dir, self.config.spool_max_bytes)
        self.sender = sender or (V2Sender(self.config) if self.config.api == "v2" else V1Sender(self.config))
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=self.config.queue_size)
        self.produced = 0
        self.written = 0
        self.failed = 0
        self.queue_dropped = 0
        self.faults = 0  # unexpected errors the spooler and sender survived
        self.last_success: float | None = None
        self.last_error: str | None = None
        self._last_info = float("-inf")
        self._stop = threading.Event()
        self._said: dict[str, int] = {}
        self._lock = threading.Lock()  # keeps the counters and the spool consistent for state()
        self._spool_lock = threading.Lock()  # one spooler at a time (its thread, or close()): order kept
        self._held: deque[list[str]] = deque()  # encoded, waiting for room on the disk
        self._held_bytes = 0
        self._held_limit = min(self.config.spool_max_bytes, 64 << 20)
        self._disk_full = False
        self._spooled = threading.Event()  # the spool got data: wakes the sender
        self._sorting_400 = False  # a segment answered 400 is being retried or split: the server answers
        self._spooler = threading.Thread(target=self._spool_loop, name="rigmon-influxdb-spool", daemon=True)
        self._spooler.start()
        self._thread = threading.Thread(target=self._run, name="rigmon-influxdb", daemon=True)
        self._thread.start()

    # --- the poll side: never blocks -------------------------------------------------------
    def consume(self, result: PollResult) -> None:
        """The poll's sample, its alert transitions, its power against each budget, the jobs it
        ended and its loop's own points."""
        if result.sample is not None:
            self._put(("sample", result.sample))
        for t in result.transitions:
            self._put(("transition", t))
        lines: list[str] = []
        state = result.alerts
        if state is not None and state.budgets and state.time is not None:
            lines += encode_budgets(state, self.host)
        lines += [x for x in (encode_job(job, self.host, self.price_per_kwh) for job in result.finished_jobs) if x]
        lines += result.lines
        if lines:
            self._put(("lines", lines))

    def _put(self, item: tuple[str, Any]) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            try:
                self._queue.get_nowait()
                self.queue_dropped += 1
                log.error("InfluxDB queue full: dropped the oldest sample (the writer is stuck?)")
            except queue.Empty:
                pass
            self._queue.put_nowait(item)

    # --- the writer ----------------------------------------------------------------------
    # --- the spooler: queue to disk, never waits on the network -----------------------------
    def _spool_loop(self) -> None:
        while not (self._stop.is_set() and self._queue.empty()):
            try:
                self._spool_queued(block=0.25)
            except Exception as e:  # a bug on one item must not end the thread: counted, said once, go on
                self._fault("spooler", e)
            if self._held and self._stop.is_set():
                break  # the disk is still full: what is held stays counted as lost at exit

    def _fault(self, where: str, error: Exception) -> None:
        self.faults += 1
        if self.faults == 1 or self.faults % 100 == 0:
            log.exception(
                "InfluxDB %s: unexpected %s (%d so far); it goes on",
                where,
                type(error).__name__,
                self.faults,
                exc_info=error,
            )

    def spool_now(self) -> None:
        """Put what is queued on disk now (a warm stop does this before anything waits)."""
        self._spool_queued(block=0)

    def _spool_queued(self, block: float) -> None:
        """Move what is queued to the spool, in order (one spooler at a time)."""
        with self._spool_lock:
            lines: list[str] = []
            try:
                item = self._queue.get(timeout=block) if block > 0 else self._queue.get_nowait()
            except queue.Empty:
                item = None
            while item is not None:
                try:
                    lines += self._encode(item)
                except Exception as e:  # that item only
                    self._fault("encoding", e)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    item = None
            if lines:
                with self._lock:
                    self.produced += len(lines)
                    self._held.append(lines)
                    self._held_bytes += sum(len(x) + 1 for x in lines)
            if self._held:
                self._write_held()

    def _encode(self, item: tuple[str, Any]) -> list[str]:
        lines = self._encode_points(item)
        if self._box_tags != self._host_tag:
            lines = [line.replace(self._host_tag, self._box_tags, 1) for line in lines]
        return lines

    def _encode_points(self, item: tuple[str, Any]) -> list[str]:
        kind, value = item
        if kind == "sample":
            with_info = value.time - self._last_info >= INFO_EVERY_SECONDS
            if with_info:
                self._last_info = value.time
            return encode(value, self.host, with_info)
        if kind == "lines":
            return list(value)
        encoded = encode_transition(value, self.host)
        return [encoded] if encoded else []

    def _write_held(self) -> None:
        """Append what waits in memory to the spool, oldest first; on a full disk keep the rest
        (bounded) for the next try."""
        written = 0
        try:
            while self._held:
                lines = self._held[0]
                with self._lock:
                    self.spool.append(lines)
                    self._held.popleft()
                    self._held_bytes -= sum(len(x) + 1 for x in lines)
                written += len(lines)
        except OSError as e:  # disk full, read-only state dir: keep the samples in memory
            if not self._disk_full:
                self._say(
                    f"cannot write the spool in {self.spool.dir}: {e}; samples wait in memory "
                    f"(up to {self._held_limit >> 20} MiB)"
                )
            self._disk_full = True
            while self._held_bytes > self._held_limit and len(self._held) > 1:
                with self._lock:
                    lost = self._held.popleft()
                    self._held_bytes -= sum(len(x) + 1 for x in lost)
                    self.queue_dropped += len(lost)
                log.error("spool: the disk stays full and memory is at its bound: dropped %d point(s)", len(lost))
        if written:
            self._spooled.set()
        if not self._held and self._disk_full:
            log.warning("spool: the disk has room again; the points held in memory are spooled")
            self._disk_full = False

    # --- the sender --------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._send_loop()
            except Exception as e:  # never the end of sending: counted, said, a pause, then on
                self._fault("sender", e)
                self._stop.wait(1.0)

    def _send_loop(self) -> None:
        attempt = 0
        wait_until = 0.0
        refused: dict[str, tuple[float, int]] = {}  # segments answered 400: path -> (first time, times)
        one_at_a_time = False
        while not self._stop.is_set():
            now = time.monotonic()
            if now < wait_until:
                self._stop.wait(min(wait_until - now, 0.5))
                continue
            # back to back while the spool holds data: several segments per request, up to
            # BATCH_BYTES (one at a time while a 400 is being sorted out)
            batch = self.spool.ready(self.config.flush_interval, 0 if refused or one_at_a_time else BATCH_BYTES)
            if not batch:
                self._spooled.wait(min(self.config.flush_interval, 0.25))
                self._spooled.clear()
                continue
            path, data, points = batch[0]
            try:
                if str(path) in refused or not _utf8(data):
                    first, times = refused.get(str(path), (now, 0))
                    # after three refusals over a minute, even a batch refused line by line is bad
                    if not self._send_splitting(path, data, sure=times >= 3 and now - first >= 60):
                        raise Malformed(f"every line of {points} refused")
                    refused.pop(str(path), None)
                else:
                    clean = list(itertools.takewhile(lambda segment: _utf8(segment[1]), batch))
                    try:
                        self.sender.send(clean[0][1] if len(clean) == 1 else b"".join(d for _, d, _ in clean))
                    except Malformed:
                        if len(clean) == 1:
                            raise
                        one_at_a_time = True  # which segment holds the bad line: each on its own, at once
                        continue
                    with self._lock:
                        self.written += self.spool.remove(*(segment_path for segment_path, _, _ in clean))
                    one_at_a_time = False
            except Retry as e:
                attempt += 1
                delay = backoff(attempt, self.config.retry_initial, self.config.retry_max, e.after)
                self._say(f"InfluxDB write failed ({e}); retrying with backoff, {self.spool.points} point(s) spooled")
                wait_until = time.monotonic() + delay
                continue
            except Refused as e:
                attempt += 1
                self._say(
                    f"InfluxDB refused the write: {e}. Check influxdb.url, token/org/bucket or "
                    f"username/password/database; the data stays in the spool ({self.spool.points} points)"
                )
                wait_until = time.monotonic() + self.config.retry_max
                continue
            except Malformed as e:
                # a proxy may answer 400 for a while: the same segment is tried again, then split,
                # and lines are set aside only when the server takes the others
                self._sorting_400 = True
                first, times = refused.get(str(path), (time.monotonic(), 0))
                refused[str(path)] = (first, times + 1)
                self._say(f"InfluxDB answered 400 ({e}); the points stay in the spool and are tried again")
                wait_until = time.monotonic() + backoff(times + 1, self.config.retry_initial, self.config.retry_max)
                continue
            self.last_success = time.time()
            self._sorting_400 = bool(refused)
            if attempt:
                log.info(
                    "InfluxDB writes resume after %d failed attempt(s); %d point(s) still spooled",
                    attempt,
                    self.spool.points,
                )
            attempt = 0
            self._said.clear()
            self.last_error = None

    def _send_splitting(self, path: Path, data: bytes, sure: bool) -> bool:
        """Send a segment refused before (or holding bytes that are not UTF-8) in halves until
        the bad lines are found: the rest is written, the bad lines set aside and counted.
        False, with nothing set aside, when the server refuses everything (a blanket 400 is
        not a malformed batch) unless ``sure``."""
        lines = data.splitlines(keepends=True)
        good = [x for x in lines if _utf8(x)]
        bad = [x for x in lines if not _utf8(x)]
        written = 0
        pending = [good] if good else []
        while pending:
            chunk = pending.pop()
            try:
                self.sender.send(b"".join(chunk))
                written += len(chunk)
            except Malformed:
                if len(chunk) > 1:
                    half = len(chunk) // 2
                    pending += [chunk[half:], chunk[:half]]  # the first half next: in order
                    continue
                bad += chunk
                if not written and not sure and len(bad) >= 2:
                    return False  # two single lines refused and none taken: the server refuses all
        if good and not written and not sure:
            return False
        with self._lock:
            kept = self.spool.reject(path, bad)
            self.written += written
            self.failed += len(bad)
        if bad:
            log.error(
                "InfluxDB rejected %d line(s) as malformed; the other %d were written; the bad lines are kept in %s",
                len(bad),
                written,
                kept,
            )
        return True

    def _say(self, message: str) -> None:
        """Log a problem once, then every 100th time it repeats."""
        key = message.split(";")[0].split(" (")[0]
        count = self._said.get(key, 0) + 1
        self._said[key] = count
        self.last_error = message
        if count == 1 or count % 100 == 0:
            log.error("%s%s", message, f" (seen {count} times)" if count > 1 else "")

    # --- state ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """A consistent snapshot: produced = written + spooled + dropped (spool) + failed."""
        with self._lock:
            return self._state()

    def _state(self) -> dict[str, Any]:
        return {
            "api": self.config.api,
            "url": self.config.url,
            "points_produced": self.produced,
            "points_written": self.written,
            "points_failed": self.failed,
            "points_dropped": self.spool.dropped_points + self.spool.vanished_points + self.queue_dropped,
            "points_spooled": self.spool.points,
            "points_held": sum(len(x) for x in list(self._held)),
            "spool_bytes": self.spool.bytes,
            "last_success": self.last_success,
            "last_error": self.last_error,
        }

    def collect(self) -> Iterator[Metric]:
        s = self.state()
        yield CounterMetricFamily(
            "rigmon_influxdb_points_written", "Points InfluxDB accepted.", value=s["points_written"]
        )
        yield CounterMetricFamily(
            "rigmon_influxdb_points_failed",
            "Points InfluxDB rejected as malformed (kept beside the spool as *.rejected).",
            value=s["points_failed"],
        )
        yield CounterMetricFamily(
            "rigmon_influxdb_points_dropped",
            "Points dropped because the spool or queue was full.",
            value=s["points_dropped"],
        )
        yield CounterMetricFamily(
            "rigmon_influxdb_points_produced", "Points made from samples.", value=s["points_produced"]
        )
        yield GaugeMetricFamily(
            "rigmon_influxdb_spool_points", "Points waiting in the disk spool.", value=s["points_spooled"]
        )
        yield GaugeMetricFamily("rigmon_influxdb_spool_bytes", "Size of the disk spool.", value=s["spool_bytes"])
        yield GaugeMetricFamily(
            "rigmon_influxdb_memory_points",
            "Points waiting in memory for room on the disk (a full disk).",
            value=s["points_held"],
        )
        last = GaugeMetricFamily(
            "rigmon_influxdb_last_success_timestamp_seconds", "Unix time of the last accepted write.", labels=[]
        )
        if s["last_success"] is not None:
            last.add_metric([], s["last_success"])
        yield last

    def close(self, deadline: float | None = None, timeout: float = 2.0) -> None:
        """Spool what is queued first (so nothing is lost), send until ``deadline`` (monotonic;
        else ``timeout`` from now) unless the server is failing, then stop; a sender stuck in a
        send is abandoned (the spool keeps its segment for the next start)."""
        deadline = deadline if deadline is not None else time.monotonic() + timeout
        self._spool_queued(block=0)
        while self.spool.points and time.monotonic() < deadline and (self.last_error is None or self._sorting_400):
            time.sleep(0.05)
        self._stop.set()
        self._spooled.set()
        for thread in (self._spooler, self._thread):
            thread.join(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
        self._spool_queued(block=0)  # anything that came in meanwhile
        self.spool.flush(timeout=max(0.0, deadline - time.monotonic()))  # sent segments' files gone
        if not self._thread.is_alive():
            self.sender.close()
        if self.spool.points:
            log.info("InfluxDB: %d point(s) stay in the spool for the next start", self.spool.points)
        held = sum(len(x) for x in self._held)
        if held:
            log.error("InfluxDB: %d point(s) could not reach the full disk and are lost at exit", held)


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
