"""Composition, in one place: the readers, the rules and the sinks a config asks for, built once
and stepped by every loop (the daemon's schedule, ``status --watch``, ``record``, the burn-in's
watch, ``rules test``). Data flows one way:

    poller → Sample → alert rules → transitions → job ledger → finished jobs
           → PollResult → each sink (the Prometheus collector, InfluxDB, the loop's own)

A loop keeps only what is its own (a schedule, signals, a screen, a report); ``step`` is one
poll through all of it, ``close(deadline)`` delivers what the sinks hold until one deadline.
"""

from __future__ import annotations

import logging
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

from .poller import Poller, build_poller, wants_rare_counters_every_poll
from .sinks.alerts import AlertSink, compile_rules
from .sinks.base import PollResult, Sink, close_side_by_side

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from .config import Config
    from .exporters.prometheus import SampleCollector
    from .history import History
    from .jobs import JobLedger
    from .replay import ReplaySource
    from .sample import Sample
    from .sinks.influxdb import InfluxSink

log = logging.getLogger(__name__)


class Pipeline:
    def __init__(self, poller: Poller, alerts: AlertSink | None = None, jobs: JobLedger | None = None,
                 sinks: Iterable[Sink] = (), source: ReplaySource | None = None, collectors: Iterable = ()):
        self.poller = poller
        self.alerts = alerts
        self.jobs = jobs
        self.sinks: list[Sink] = list(sinks)
        self.source = source
        self.collectors = list(collectors)  # what /metrics shows besides the sinks (the reports, NVML's errors)
        self.latest: Sample | None = None

    @classmethod
    def from_config(cls, config: Config, source: ReplaySource | None = None, sinks: Iterable[Sink] = (), *,
                    outputs: bool = True, rules: bool = True, announce: bool = True, engine=None,
                    host: str | None = None,
                    wall: Callable[[], float] = time.time, event_thread: bool = True, nvml=None,
                    host_backend=None) -> Pipeline:
        """The config's pipeline on real hardware, a replay (``source``) or given backends (the
        recorder's proxies). ``outputs``: the config's own sinks (the Prometheus collector,
        InfluxDB, the job ledger), as the daemon runs them; a loop that shows or records
        (status, record, rules test) passes False and its own ``sinks``. ``rules``: the
        config's alert rules evaluated each step (where enabled). ``announce``: each
        transition logged and sent to the config's notifiers. ``engine``: rules whose alerts
        go on from an earlier replay (``status --at``)."""
        host = host or config.daemon.hostname or socket.gethostname()
        # compiled once, for the poller (a rule may want the rare counters every poll) and the engine;
        # an engine handed in has them compiled already
        compiled = (list(engine.rules) if engine is not None else compile_rules(config)) if config.alerts.enabled \
            else []
        evaluate = rules and config.alerts.enabled
        poller = build_poller(config, source, nvml=nvml, host_backend=host_backend, wall=wall,
                              event_thread=event_thread, rare_every_poll=wants_rare_counters_every_poll(compiled))
        alerts = None
        if evaluate:
            alerts = AlertSink(config, notifiers=None if announce else [], host=host, rules=compiled, engine=engine,
                               announce=announce)
        jobs, own, collectors = None, [], []
        try:
            if outputs:  # imported here: a loop that only shows or records never loads the outputs
                from .exporters.burnin import BurninReports
                from .exporters.prometheus import SampleCollector
                from .jobs import JobLedger
                from .sinks.influxdb import InfluxSink

                own.append(SampleCollector(config.gpu.process_series))
                if config.influxdb.enabled:
                    own.append(InfluxSink(config, host))
                if config.jobs.enabled and config.gpu.processes:
                    jobs = JobLedger(config, host)
                collectors.append(BurninReports(config.burnin.reports_dir))
                from pathlib import Path

                from .known import Known

                known = Known(Path(config.daemon.state_dir) / "known.json")  # what a restart must not forget
                known.load()
                if poller.host is not None:
                    poller.host.remember_turned(known.fans)
                if alerts is not None:
                    alerts.engine.remember_sensors(known.sensors)
                    alerts.engine.remember_fan_best(known.fan_best)
                own.append(known)
                if config.daemon.page:
                    from .history import History

                    own.append(History(Path(config.daemon.state_dir) / "history.bin", config.daemon.interval,
                                       invalid=poller.invalid, replay=source is not None))
        except BaseException:
            for sink in own:
                sink.close(time.monotonic())
            raise
        return cls(poller, alerts, jobs, own + list(sinks), source, collectors)

    # --- what the loops use -------------------------------------------------------------------
    def open(self) -> None:
        self.poller.open()

    def step(self, at: float | None = None, lines: Iterable[str] = ()) -> PollResult:
        """One poll through the rules, the ledger and every sink. ``at``: seconds into a replay
        to poll at (a replay stepped by hand); ``lines``: the loop's own points for the sinks."""
        started = time.perf_counter()
        if at is not None and self.source is not None:
            self.source.clock.set(at)
        with self._one_tick():
            sample = self.poller.poll()
        transitions = tuple(self.alerts.evaluate(sample)) if self.alerts is not None else ()
        ended = self.jobs.book(sample, transitions) if self.jobs is not None else ()
        result = PollResult(sample, transitions, self.alerts.state if self.alerts is not None else None, ended,
                            tuple(lines), time.perf_counter() - started)
        self._hand(result)
        self.latest = sample
        return result

    def between_polls(self, transitions: Iterable = (), lines: Iterable[str] = ()) -> None:
        """What happens outside a poll (alerts a reload resolves, a burn-in's verdict), to the
        ledger and the sinks."""
        transitions = tuple(transitions)
        if self.jobs is not None and transitions:
            self.jobs.book(None, transitions)
        self._hand(PollResult(None, transitions, None, (), tuple(lines)))

    def _hand(self, result: PollResult) -> None:
        for sink in self.sinks:
            try:
                sink.consume(result)
            except Exception:  # a sink's bug must not stop polling or the other sinks
                log.exception("sink %s failed", type(sink).__name__)

    def _one_tick(self):
        """A replay answers one whole poll from one tick, however long the poll takes."""
        return self.source.held() if self.source is not None else nullcontext()

    @property
    def influx(self) -> InfluxSink | None:
        return self._sink("rigmon.sinks.influxdb", "InfluxSink")

    @property
    def history(self) -> History | None:
        return self._sink("rigmon.history", "History")

    @property
    def collector(self) -> SampleCollector | None:
        return self._sink("rigmon.exporters.prometheus", "SampleCollector")

    def _sink(self, module: str, name: str):
        """The sink of that class, if any: where its module was never imported, there is none."""
        loaded = sys.modules.get(module)
        return next((s for s in self.sinks if isinstance(s, getattr(loaded, name))), None) if loaded else None

    def metric_collectors(self, *first) -> Iterator:
        """What /metrics shows, in order: the build, ``first`` (the daemon's own health), the
        alerts, the sinks' and ledger's state, NVML's errors, the burn-in reports, the sample."""
        from .exporters.prometheus import BuildInfo, SampleCollector

        yield BuildInfo()
        yield from first
        yield self.poller.invalid
        if self.alerts is not None:
            yield self.alerts
        yield from (s for s in self.sinks if hasattr(s, "collect") and not isinstance(s, SampleCollector))
        if self.jobs is not None:
            yield self.jobs
        if self.poller.gpu is not None:
            yield self.poller.gpu
        yield from self.collectors
        if self.collector is not None:
            yield self.collector

    def registry(self, *first) -> CollectorRegistry:
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        for collector in self.metric_collectors(*first):
            registry.register(collector)
        return registry

    def close(self, deadline: float | None = None) -> list[str]:
        """Every sink, the notifiers and the ledger deliver what they hold side by side until the
        one ``deadline`` (time.monotonic()); the readers close. Returns what was abandoned."""
        deadline = deadline if deadline is not None else time.monotonic() + 2.0
        influx = self.influx
        if influx is not None:
            influx.spool_now()  # the last poll is on disk before anything waits
        closing = ([self.alerts] if self.alerts is not None else []) + self.sinks + (
            [self.jobs] if self.jobs is not None else [])
        try:
            return close_side_by_side(closing, deadline)
        finally:
            self.poller.close()


@contextmanager
def opened(pipeline: Pipeline, deadline_seconds: float = 2.0):
    """A pipeline open for a loop's life, closed (its sinks given ``deadline_seconds``) after."""
    pipeline.open()
    try:
        yield pipeline
    finally:
        pipeline.close(time.monotonic() + deadline_seconds)
