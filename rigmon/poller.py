"""Readers → one Sample. The poller times each reader, and a reader that fails leaves its
part of the sample empty with the error in ``sample.readers``; the others go on."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .model.polled import POLLED
from .model.sample import ReaderStatus, Sample
from .model.validity import Invalid
from .readers.gpu import GpuReader
from .readers.host import HostReader, SystemHost
from .readers.replay import replay_backend

if TYPE_CHECKING:
    from .config.schema import Config
    from .readers.replay import ReplaySource

log = logging.getLogger(__name__)


class Poller:
    def __init__(self, gpu: GpuReader | None, host: HostReader | None, wall: Callable[[], float] = time.time):
        self.gpu = gpu
        self.host = host
        self._wall = wall
        self._failing: dict[str, str] = {}
        self.invalid = Invalid()  # what the check of each sample threw out (rigmon_readings_invalid_total)

    def open(self) -> None:
        for reader in (self.gpu, self.host):
            if reader is not None:
                reader.open()

    def poll(self) -> Sample:
        statuses = []
        gpus, events, host = (), (), None
        if self.gpu is not None:
            started = time.perf_counter()
            try:
                gpus, events = self.gpu.read()  # its families' statuses: self.gpu.statuses, when asked
                error = self.gpu.unavailable
            except Exception as e:  # a reader bug must not stop the daemon
                error = self._failure("gpu", e)
            statuses.append(ReaderStatus("gpu", error is None, time.perf_counter() - started, error))
        processes = ()
        if self.host is not None:
            started = time.perf_counter()
            error = None
            try:
                host = self.host.read()
                # who the GPU processes are (read from /proc when the set changes)
                processes = self.host.process_info(sorted({p.pid for g in gpus for p in g.processes or ()}))
            except Exception as e:
                error = self._failure("host", e)
            statuses.append(ReaderStatus("host", error is None, time.perf_counter() - started, error))
        # every value checked at its source, hardware's or a recording's, before anything sees it
        return self.invalid.check(
            Sample(
                time=self._wall(),
                host=host,
                gpus=gpus,
                gpu_info=self.gpu.info if self.gpu is not None else (),
                system=self.gpu.system if self.gpu is not None else None,
                events=events,
                readers=tuple(statuses),
                processes=processes,
            )
        )

    def _failure(self, name: str, exc: Exception) -> str:
        message = f"{type(exc).__name__}: {exc}"
        if self._failing.get(name) != message:
            log.exception("%s reader failed", name)
            self._failing[name] = message
        return message

    def close(self) -> None:
        for reader in (self.gpu, self.host):
            if reader is not None:
                reader.close()


def build_poller(
    config: Config,
    replay: ReplaySource | None = None,
    *,
    nvml=None,
    host_backend=None,
    wall: Callable[[], float] = time.time,
    event_thread: bool = True,
    rare_every_poll: bool | None = None,
) -> Poller:
    """The readers the config asks for, on real hardware, a replay, or given backends
    (the recorder hands in its recording proxies). ``rare_every_poll``: the rules' wish for the
    rare counters (``wants_rare_counters_every_poll``), worked out from the config if not given."""
    gpu = host = None
    if host_backend is None and (config.host.enabled or config.gpu.enabled):
        if replay is not None:
            from .readers.replay import ReplayHost

            host_backend = ReplayHost(replay)
        else:
            host_backend = SystemHost(Path(config.host.sysfs), launchers=tuple(config.jobs.launchers))
    if config.gpu.enabled:
        if nvml is None and replay is not None:
            nvml = replay_backend(replay)
        gpu = GpuReader(
            nvml,
            slow_interval=config.gpu.slow_interval,
            pcie_throughput=config.gpu.pcie_throughput,
            processes=config.gpu.processes,
            xid_events=config.gpu.xid_events,
            event_thread=event_thread,
            indices=config.gpu.indices,
            expected_pcie_generation=config.gpu.pcie_expected_generation,
            expected_pcie_width=config.gpu.pcie_expected_width,
            rare_counters_every_poll=(
                rare_every_poll if rare_every_poll is not None else rules_want_rare_counters_every_poll(config)
            ),
            wall=wall,
            # a replay's own clock paces the slow counters and lost-GPU probes, in a replay run
            # faster than real time too
            monotonic=replay.clock if replay is not None else time.monotonic,
            retry_interval=config.gpu.nvml_retry,
            # a GPU's runtime power state is sysfs's (the host backend's), never NVML's: asking
            # NVML would wake it
            runtime_status=getattr(host_backend, "gpu_runtime_status", None),
        )
        if replay is not None:  # the GPUs the recorded box had: those it did not list are missing
            gpu.remember(replay.recording.known_gpus)
    if config.host.enabled:
        host = HostReader(
            host_backend,
            rapl=config.host.rapl,
            sysfs_sensors=config.host.sysfs_sensors,
            launchers=tuple(config.jobs.launchers),
            cpu_limit=config.host.cpu_limit_celsius,
        )
    return Poller(gpu, host, wall)


# Rule variables of the counters read every slow_interval (see readers.gpu._RARE).
RARE_COUNTER_VARIABLES = frozenset(
    {
        *(p.field for p in POLLED if p.rare),
        "ecc_corrected_volatile",
        "ecc_uncorrected_volatile",
        "ecc_corrected_aggregate",
        "ecc_uncorrected_aggregate",
        "remap_pending",
        "remap_failure",
        "remapped_rows_correctable",
        "remapped_rows_uncorrectable",
    }
)
SHORT_WINDOW = 60.0  # a rule looking at a rare counter over less than this wants it every poll


def rules_want_rare_counters_every_poll(config: Config) -> bool:
    """``wants_rare_counters_every_poll`` of the config's rules."""
    if not config.alerts.enabled:
        return False
    from .alerts.rules import compile_rules  # the rules as the alert sink compiles them

    return wants_rare_counters_every_poll(compile_rules(config.alerts))


def wants_rare_counters_every_poll(rules) -> bool:
    """True when an enabled rule takes the rate or increase of a rare counter over a window
    shorter than SHORT_WINDOW: the reader then reads them every poll, not every slow_interval."""
    for rule in rules:
        if not rule.spec.enabled:
            continue
        shortest = rule.shortest_window
        if rule.history_variables & RARE_COUNTER_VARIABLES and shortest is not None and shortest < SHORT_WINDOW:
            return True
    return False
