"""Rules on a recording, offline: ``rigmon rules test`` and the scenario tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .alerts.engine import AlertEngine, Transition
from .model.recording import Recording
from .pipeline import Inputs, Outputs, Pipeline, opened
from .readers.replay import ReplayClock, ReplaySource
from .sinks.alerts import build_engine

if TYPE_CHECKING:
    from .config.schema import Config


def replay_rules(
    recording: Recording,
    config: Config,
    until: float | None = None,
    engine: AlertEngine | None = None,
    source: ReplaySource | None = None,
    kept: dict | None = None,
) -> list[Transition]:
    """Every transition the rules make on ``recording``, tick by tick, at the recording's times
    (up to ``until`` seconds into it). Pass an ``engine`` to look at its alerts afterwards, and
    the ``source`` (with a clock it may set) of a replay that goes on from ``until``: each tick
    is decoded once for both. ``kept``, a dict, is given the last sample the rules saw
    (``sample``: with its cooling), the cooling baselines learned (``cooling``, as the box's
    file holds them) and the calls the recording had no answer for (``not_recorded``), so what
    shows a replay at ``until`` agrees with its alerts."""
    if source is None:
        source = ReplaySource(recording, ReplayClock(realtime=False), loop=False)
    clock = source.clock
    t0 = recording.ticks[0]["t"]
    inputs = Inputs(
        source=source,
        wall=lambda: t0 + clock(),
        event_thread=False,
        engine=engine if engine is not None else build_engine(config.alerts),
    )
    pipeline = Pipeline.from_config(config, Outputs(), inputs=inputs)
    transitions: list[Transition] = []
    with opened(pipeline):
        for offset in recording.offsets():
            if until is not None and offset > until:
                break
            transitions += pipeline.step(at=offset).transitions
        if kept is not None:
            kept["sample"] = pipeline.latest
            kept["cooling"] = pipeline.cooling.plain() if pipeline.cooling is not None else None
            gpu = pipeline.poller.gpu
            kept["not_recorded"] = gpu.not_recorded() if gpu is not None else ()
    return transitions
