"""``rigmon run``: poll on a schedule, keep the latest sample, and
hand every sample to the sinks (the Prometheus exporter now; InfluxDB and alerts consume
the same way). Data flows one way: poller → sample → sinks.

Service behaviour: READY=1 after the first poll and the bind; WATCHDOG=1 only after polls
that really complete; SIGTERM or SIGINT is a warm stop (the running poll finishes, its sample
is spooled, sinks flush side by side until one shared deadline, exit 0 within
STOP_GRACE_SECONDS whatever the servers do); a second signal is a cold stop (exit at once).
SIGHUP reloads the config: the file is checked first (an invalid one is logged and the
running config kept), then rigmon stops warm and starts again in the same process
(RELOADING=1, then READY=1).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .http.auth import basic_auth
from .http.server import MetricsApp, serve
from .model.sample import ReaderStatus, Sample
from .pipeline import Outputs, Pipeline
from .system import heap
from .system.systemd import Notifier

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

    from .config.schema import Config
    from .config.settings import Settings
    from .pipeline import Inputs

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 3.5  # the warm stop's one deadline; systemd's TimeoutStopSec is 10 s
MIN_REPLAY_POLL = 0.1  # s of the wall's clock: a replay at --speed 1000 polls 10 times a second, not 1,000
SKIPS_SAID_EVERY = 60.0  # s: skipped polls are counted in the log at most this often
# apscheduler says each skip too (its "missed by" and "maximum number of running instances"):
# rigmon says them, counted
logging.getLogger("apscheduler.executors.default").setLevel(logging.ERROR)
logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)


class PollStats:
    """The daemon's own health, exported as rigmon_poll_* and rigmon_reader_*."""

    def __init__(self, interval: float, families: Callable[[], tuple[ReaderStatus, ...]] = tuple):
        self.interval = interval
        self.families = families  # the GPU reader's families (gpu_power, gpu_ecc, …) at its last poll
        self.polls = 0
        self.failed = 0
        self.skipped = 0
        self.last_duration: float | None = None
        self.last_time: float | None = None
        self.readers: tuple = ()
        self.generation = 0
        self._lock = threading.Lock()

    def completed(self, sample: Sample, duration: float) -> None:
        with self._lock:
            self.polls += 1
            self.last_duration = duration
            self.last_time = sample.time
            self.readers = sample.readers
            self.generation += 1

    def collect(self):
        with self._lock:
            duration = GaugeMetricFamily("rigmon_poll_duration_seconds", "Duration of the last poll.", labels=[])
            if self.last_duration is not None:
                duration.add_metric([], self.last_duration)
            yield duration
            last = GaugeMetricFamily(
                "rigmon_last_poll_timestamp_seconds", "Unix time of the last completed poll.", labels=[]
            )
            if self.last_time is not None:
                last.add_metric([], self.last_time)
            yield last
            yield GaugeMetricFamily(
                "rigmon_poll_interval_seconds", "Configured seconds between polls.", value=self.interval
            )
            yield CounterMetricFamily("rigmon_polls", "Polls completed since start.", value=self.polls)
            yield CounterMetricFamily("rigmon_polls_failed", "Polls that raised since start.", value=self.failed)
            yield CounterMetricFamily(
                "rigmon_polls_skipped", "Polls skipped because the previous one overran.", value=self.skipped
            )
            reader_duration = GaugeMetricFamily(
                "rigmon_reader_duration_seconds", "How long each reader took in the last poll.", labels=["reader"]
            )
            reader_success = GaugeMetricFamily(
                "rigmon_reader_success",
                "1 if the reader worked in the last poll (0: no GPUs, no NVML, or a failure; see the log).",
                labels=["reader"],
            )
            for status in (*self.readers, *self.families()):
                reader_duration.add_metric([status.name], status.duration_seconds)
                reader_success.add_metric([status.name], int(status.ok))
            yield reader_duration
            yield reader_success


class Daemon:
    """A pipeline on a schedule: the daemon keeps only its lifecycle, signals, the HTTP server
    and what systemd is told."""

    def __init__(
        self, config: Config | Settings, pipeline: Pipeline, notifier: Notifier | None = None, speed: float = 1.0
    ):
        self.jobs = config.jobs  # the page's price of a kWh
        self.interval = config.daemon.interval  # seconds between polls (at speed 1)
        source = pipeline.source
        if source is not None and speed != 1:  # a replay run faster polls as often as it was recorded
            self.interval = max(self.interval, source.cadence)
        self.prometheus = config.prometheus  # where and how /metrics and the page are served
        self.state_dir = config.daemon.state_dir  # which scrapers' credentials passed before
        self.speed = speed  # a replay run faster: polls come this many times as often (the samples' clock too)
        self.replay: str | None = None  # what a replay replays (its file's name), for /state
        # a poll every interval of the replay's clock (its recording's cadence where that is longer),
        # but never more often than MIN_REPLAY_POLL of the wall's
        self.wall_interval = self.interval / speed if speed == 1 else max(self.interval / speed, MIN_REPLAY_POLL)
        self._skips_said, self._skips_said_at = 0, None
        self.pipeline = pipeline
        self.notifier = notifier or Notifier()
        gpu = pipeline.poller.gpu
        self.stats = PollStats(self.interval, (lambda: gpu.statuses) if gpu is not None else tuple)
        self.stopped = threading.Event()
        self._stop_requested = threading.Event()
        self.reload_requested = threading.Event()
        self._scheduler: BackgroundScheduler | None = None
        self._server = None
        self._last_ping = 0.0
        self._tidied = time.monotonic()
        self._signals = 0
        self._ready = False
        self._status = ""  # the STATUS= systemd was last told

    @classmethod
    def from_config(cls, config: Config | Settings, inputs: Inputs | None = None, speed: float = 1.0) -> Daemon:
        return cls(config, Pipeline.from_config(config, Outputs.DAEMON, inputs=inputs), speed=speed)

    def registry(self) -> CollectorRegistry:
        """What /metrics shows: the daemon's own health first, then the pipeline's."""
        return self.pipeline.registry(self.stats)

    # --- one poll ------------------------------------------------------------------------
    def poll_once(self, at: float | None = None) -> Sample:
        result = self.pipeline.step(at)
        self.stats.completed(result.sample, result.duration_seconds)
        self._ping()
        return result.sample

    def status_line(self) -> str:
        """One line for ``systemctl status``: GPUs answering, the alerts firing, InfluxDB's backlog."""
        sample = self.pipeline.latest
        gpus = len(sample.gpus) if sample else 0
        lost = sum(1 for g in sample.gpus if g.lost) if sample else 0
        parts = [f"polling {gpus} GPU(s) every {self.interval:g} s" + (f", {lost} LOST" if lost else "")]
        alerts, influx = self.pipeline.alerts, self.pipeline.influx
        if alerts is not None:
            firing = [a for a in alerts.state.firing if a.severity != "info"]
            parts.append(
                f"{len(firing)} alert(s) firing"
                + (f": {', '.join(sorted({a.alertname for a in firing}))}" if firing else "")
            )
        if influx is not None and influx.last_error:
            parts.append(f"InfluxDB failing, {influx.spool.points} point(s) spooled")
        return "; ".join(parts)

    def _ping(self) -> None:
        if not self._ready:  # systemd hears WATCHDOG only after READY
            return
        if self.notifier.enabled:
            line = self.status_line()
            if line != self._status:
                self._status = line
                self.notifier.status(line)
        now = time.monotonic()
        spacing = min(1.0, self.notifier.watchdog_seconds / 4) if self.notifier.watchdog_seconds else 1.0
        if now - self._last_ping >= spacing:
            self.notifier.watchdog()
            self._last_ping = now

    def _job(self) -> None:
        try:
            self.poll_once()
        except Exception:
            self.stats.failed += 1
            log.exception("poll failed")
        if time.monotonic() - self._tidied >= heap.TIDY_SECONDS:  # after a poll: the next one is a whole interval away
            heap.tidy()
            self._tidied = time.monotonic()

    def _on_event(self, event) -> None:
        """A poll skipped: the first said at once, then the count at most once a minute."""
        from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED

        if event.code not in (EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED):
            return
        self.stats.skipped += 1
        now = time.monotonic()
        if self._skips_said_at is None or now - self._skips_said_at >= SKIPS_SAID_EVERY:
            unsaid = self.stats.skipped - self._skips_said
            log.warning(
                "%d poll(s) skipped%s: the previous poll was still running (a poll every %.3g s%s)",
                unsaid,
                "" if self._skips_said_at is None else f" in the last {now - self._skips_said_at:.0f} s",
                self.wall_interval,
                f", {self.interval:g} s of the replay at {self.speed:g}× as fast" if self.speed != 1 else "",
            )
            self._skips_said, self._skips_said_at = self.stats.skipped, now

    # --- life cycle ----------------------------------------------------------------------
    def start(self, serve_http: bool = True, sock=None) -> None:
        """Open the readers, poll once, serve (on ``sock`` where a reload handed one over)."""
        self.pipeline.open()
        self.poll_once()  # the first sample exists before anyone can scrape
        if serve_http and self.prometheus.enabled:
            routes, slow = {"/state": lambda query: self._state_json()}, {}
            history = self.pipeline.history
            if history is not None:  # the page at / and its API read the history
                from .http.page import Page

                page = Page(self.pipeline, history, self.jobs)
                routes.update(page.routes)
                slow.update(page.slow_routes)
            app = MetricsApp(
                self.registry(),
                lambda: self.stats.generation,
                basic_auth(self.prometheus, self.state_dir),
                routes=routes,
                slow_routes=slow,
            )
            self._server, _ = serve(app, self.prometheus, sock)
            scheme = "https" if self.prometheus.tls_cert else "http"
            listen = self.prometheus.listen
            shown = "localhost" if listen in ("0.0.0.0", "::", "") else f"[{listen}]" if ":" in listen else listen
            where = f"{scheme}://{shown}:{self._server.server_address[1]}"
            log.info("serving metrics on %s/metrics", where)
            if history is not None:
                log.info("the page: %s/", where)
        # the scheduler (60 ms of imports: asyncio, importlib.metadata) loads once the first
        # scrape can be answered: the first poll is in, the server up
        from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED
        from apscheduler.schedulers.background import BackgroundScheduler

        interval = self.wall_interval
        self._scheduler = BackgroundScheduler(
            job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": max(interval, 1.0)}
        )
        self._scheduler.add_listener(self._on_event, EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED)
        self._scheduler.add_job(self._job, "interval", seconds=interval, id="poll", name="poll")
        self._scheduler.start()
        watchdog = self.notifier.watchdog_seconds
        if watchdog is not None and watchdog < 2 * interval:
            log.warning(
                "WatchdogSec=%.3g s is less than twice the poll interval (%.3g s): systemd may kill a healthy daemon",
                watchdog,
                interval,
            )
        gpus = len(self.pipeline.latest.gpus) if self.pipeline.latest else 0
        self._status = self.status_line()
        self.notifier.ready(self._status)
        self._ready = True
        # start-up's garbage (the config's parse, the rules' compile, a recording's JSON) is freed
        # but stays in glibc's heap: handed back, the resident size a user sees is what the daemon
        # holds (about 1 MiB less)
        heap.give_back()
        log.info(
            "rigmon started: %d GPU(s), polling every %g s%s",
            gpus,
            self.interval,
            f" of the replay ({interval:.3g} s of the wall)" if self.speed != 1 else "",
        )

    def _state_json(self) -> tuple[str, bytes]:
        """What ``rigmon status`` shows of the daemon: firing alerts, the InfluxDB sink."""
        alerts, influx = self.pipeline.alerts, self.pipeline.influx
        firing = alerts.state.firing if alerts else ()
        state = {
            "alerts": [a.as_dict() for a in firing],
            "influxdb": influx.state() if influx else None,
            "polls": self.stats.polls,
            "skipped": self.stats.skipped,
            # a replay's alerts are its recording's: rigmon status on this box leaves them out
            "replay": self.replay,
        }
        return "application/json", json.dumps(state).encode()

    @property
    def port(self) -> int | None:
        return self._server.server_address[1] if self._server else None

    def stop_polling(self) -> None:
        """No poll after this returns (the running one finishes first)."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=True)

    def stop(self, deadline: float | None = None, reloading: bool = False) -> None:
        """Warm stop: the running poll finishes, its sample reaches the spool, every sink
        flushes side by side until the one ``deadline`` (monotonic), the server closes."""
        deadline = deadline if deadline is not None else time.monotonic() + STOP_GRACE_SECONDS
        if not reloading:
            self.notifier.stopping()
        self.stop_polling()
        self.pipeline.close(deadline)
        if self._server is not None:
            self._server.shutdown()
        self.stopped.set()

    def wait(self) -> None:
        """Until a stop or a reload is asked. With a tick: the kernel hands a signal to any of
        the process's threads, and one taken by another thread interrupts no wait here, so its
        handler (which runs in this thread only) would wait for the next signal."""
        while not self._stop_requested.wait(0.5):
            pass

    def install_signal_handlers(self) -> None:
        def handler(signum, frame):
            self._signals += 1
            if self._signals == 1:
                log.info("%s: stopping (warm); send it again to stop at once", signal.Signals(signum).name)
                self._stop_requested.set()
            else:
                log.warning("%s again: cold stop", signal.Signals(signum).name)
                os._exit(1)

        def reload(signum, frame):
            self.reload_requested.set()
            self._stop_requested.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGHUP, reload)
