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
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar

from .alerts.rules import compile_rules
from .config.box import Box
from .poller import Poller, build_poller, wants_rare_counters_every_poll
from .readers.cooling import Detector, baselines_path
from .sinks.alerts import AlertSink
from .sinks.base import PollResult, Sink, close_side_by_side

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from .alerts.engine import AlertEngine
    from .config.schema import Config
    from .exporters.burnin import BurninReports
    from .exporters.prometheus import SampleCollector
    from .model.sample import Sample
    from .readers.replay import ReplaySource
    from .sinks.history import History
    from .sinks.influxdb import InfluxSink
    from .sinks.jobs import JobLedger
    from .sinks.known import Known

log = logging.getLogger(__name__)


class Outputs:
    """What a loop wants built from the config, besides its own sinks: each output by name.
    ``Outputs.DAEMON`` is everything the daemon runs; a loop that shows or records (status,
    record, rules test) wants little or nothing of it. (A plain class, as ``Inputs``: a
    dataclass would cost every command the import of ``dataclasses`` and ``inspect``.)"""

    __slots__ = ("announce", "baselines", "history", "influxdb", "jobs", "known", "prometheus", "rules")

    DAEMON: ClassVar[Outputs]
    NOTHING: ClassVar[Outputs]

    def __init__(
        self,
        *,
        prometheus: bool = False,  # the sample as metric families, and the newest burn-in report
        influxdb: bool = False,  # the config's InfluxDB, where [influxdb] enables it
        jobs: bool = False,  # the job ledger, where [jobs] and gpu.processes enable it
        known: bool = False,  # what the box has had (fans that turned, sensors), kept across restarts
        history: bool = False,  # the page's week, where daemon.page enables it
        rules: bool = True,  # the config's alert rules evaluated each step, where [alerts] enables them
        announce: bool = False,  # each transition logged and sent to the config's notifiers
        baselines: bool = False,  # the cooling baselines learned and kept in state_dir (else read, never written)
    ):
        self.prometheus, self.influxdb, self.jobs, self.known = prometheus, influxdb, jobs, known
        self.history, self.rules, self.announce, self.baselines = history, rules, announce, baselines


Outputs.DAEMON = Outputs(
    prometheus=True, influxdb=True, jobs=True, known=True, history=True, announce=True, baselines=True
)
Outputs.NOTHING = Outputs(rules=False)


class Inputs:
    """What a loop brings besides the config, where it is not the box's own hardware read at its
    own pace: a replay, stand-in backends, a clock, an engine that goes on."""

    __slots__ = ("engine", "event_thread", "host_backend", "nvml", "source", "wall")

    def __init__(
        self,
        *,
        source: ReplaySource | None = None,  # a recording replayed in place of the hardware
        nvml: Any = None,  # a pynvml stand-in (the recorder's proxy)
        host_backend: Any = None,  # a psutil and sysfs stand-in (the recorder's proxy)
        wall: Callable[[], float] = time.time,  # the clock samples are stamped with
        event_thread: bool = True,  # XID events waited for on a thread (a one-shot read has none)
        engine: AlertEngine | None = None,  # rules whose alerts go on from an earlier replay (status --at)
    ):
        self.source, self.nvml, self.host_backend, self.wall = source, nvml, host_backend, wall
        self.event_thread, self.engine = event_thread, engine


class Pipeline:
    def __init__(
        self,
        poller: Poller,
        alerts: AlertSink | None = None,
        *,
        source: ReplaySource | None = None,
        collector: SampleCollector | None = None,
        influx: InfluxSink | None = None,
        jobs: JobLedger | None = None,
        known: Known | None = None,
        history: History | None = None,
        reports: BurninReports | None = None,
        sinks: Iterable[Sink] = (),
        box: Box,
        cooling: Detector | None = None,
    ):
        self.poller = poller
        self.cooling = cooling  # each sample's cooling against its own past, before the rules see it
        self._cooling_failed = False  # said once
        self.box = box  # the box its outputs name
        self.source = source
        self.alerts = alerts
        self.collector = collector  # the sample as metric families
        self.influx = influx
        self.jobs = jobs
        self.known = known
        self.history = history
        self.reports = reports  # the newest burn-in report, for /metrics and the page
        # every sink a poll is handed to, in order: the outputs above, then the loop's own
        self.sinks: list[Sink] = [s for s in (collector, influx, known, history) if s is not None] + list(sinks)
        self.latest: Sample | None = None

    @classmethod
    def from_config(
        cls, config: Config, outputs: Outputs = Outputs.DAEMON, sinks: Iterable[Sink] = (), inputs: Inputs | None = None
    ) -> Pipeline:
        """The config's pipeline: the poller on the hardware (or ``inputs``' replay or
        backends), the rules and the ``outputs`` the loop wants, then its own ``sinks``."""
        inputs = inputs if inputs is not None else Inputs()
        box = Box.of(config)  # the box every output names, read once
        engine = inputs.engine
        # compiled once, for the poller (a rule may want the rare counters every poll) and the engine;
        # an engine handed in has them compiled already
        compiled = (
            []
            if not config.alerts.enabled
            else list(engine.rules)
            if engine is not None
            else compile_rules(config.alerts)
        )
        poller = build_poller(
            config,
            inputs.source,
            nvml=inputs.nvml,
            host_backend=inputs.host_backend,
            wall=inputs.wall,
            event_thread=inputs.event_thread,
            rare_every_poll=wants_rare_counters_every_poll(compiled),
        )
        cooling = None
        if config.cooling.enabled:  # a replay's baselines are its own, in memory: never the box's
            c = config.cooling
            kept = baselines_path(box.state_dir) if inputs.source is None else None
            cooling = Detector(kept, c.learn, c.window, c.band_watts, keep=outputs.baselines)
        alerts = None
        if outputs.rules and config.alerts.enabled:
            alerts = AlertSink(
                config.alerts,
                box,
                notify=config.notifiers if outputs.announce else (),
                rules=compiled,
                engine=engine,
                announce=outputs.announce,
            )
        built: dict[str, Any] = {}
        try:  # each imported where wanted: a loop that only shows or records never loads the outputs
            if outputs.prometheus:
                from .exporters.burnin import BurninReports
                from .exporters.prometheus import SampleCollector

                built["collector"] = SampleCollector(config.gpu.process_series)
                built["reports"] = BurninReports(config.burnin.reports_dir)
            if outputs.influxdb and config.influxdb.enabled:
                from .sinks.influxdb import InfluxSink

                built["influx"] = InfluxSink(config.influxdb, box, config.jobs.price_per_kwh)
            if outputs.jobs and config.jobs.enabled and config.gpu.processes:
                from .sinks.jobs import JobLedger

                built["jobs"] = JobLedger(config.jobs, box)
            state_dir = box.state_dir
            if outputs.known:
                from .sinks.known import Known

                known = built["known"] = Known(state_dir / "known.json")  # what a restart must not forget
                known.load()
                if poller.host is not None:
                    poller.host.remember_turned(known.fans)
                if poller.gpu is not None:
                    poller.gpu.remember(known.gpus.values())
                if alerts is not None:
                    alerts.engine.remember_sensors(known.sensors)
                    alerts.engine.remember_fan_best(known.fan_best)
            if outputs.history and config.daemon.page:
                from .sinks.history import History

                built["history"] = History(
                    state_dir / "history.bin",
                    config.daemon.interval,
                    invalid=poller.invalid,
                    replay=inputs.source is not None,
                    behind=True,  # the first scrape is answered while the week loads
                )
        except BaseException:
            for part in built.values():
                if hasattr(part, "close"):
                    part.close(time.monotonic())
            raise
        return cls(poller, alerts, source=inputs.source, sinks=sinks, box=box, cooling=cooling, **built)

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
        if self.cooling is not None:
            try:
                sample = self.cooling.annotate(sample)
            except Exception:  # its bug must not stop polling: the sample goes on without its cooling
                if not self._cooling_failed:
                    log.exception("the cooling baselines failed: the samples go on without them")
                self._cooling_failed = True
        transitions = tuple(self.alerts.evaluate(sample)) if self.alerts is not None else ()
        ended = self.jobs.book(sample, transitions) if self.jobs is not None else ()
        result = PollResult(
            sample,
            transitions,
            self.alerts.state if self.alerts is not None else None,
            ended,
            tuple(lines),
            time.perf_counter() - started,
        )
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

    def metric_collectors(self, *first) -> Iterator:
        """What /metrics shows, in order: the build, ``first`` (the daemon's own health), the
        alerts, the sinks' and ledger's state, NVML's errors, the burn-in reports, the sample."""
        from .alerts import runbook
        from .exporters.prometheus import BuildInfo

        yield BuildInfo(runbook.page(self.box.runbook_base))
        yield from first
        yield self.poller.invalid
        yield from (
            part
            for part in (self.alerts, self.influx, self.jobs, self.poller.gpu, self.reports, self.collector)
            if part is not None
        )

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
        closing = (
            ([self.alerts] if self.alerts is not None else [])
            + self.sinks
            + ([self.jobs] if self.jobs is not None else [])
        )
        try:
            return close_side_by_side(closing, deadline)
        finally:
            self.poller.close()
            if self.cooling is not None:
                self.cooling.close()  # its baselines kept for the next start


@contextmanager
def opened(pipeline: Pipeline, deadline_seconds: float = 2.0):
    """A pipeline open for a loop's life, closed (its sinks given ``deadline_seconds``) after."""
    pipeline.open()
    try:
        yield pipeline
    finally:
        pipeline.close(time.monotonic() + deadline_seconds)
