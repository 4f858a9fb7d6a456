"""A week of the page's history for a replayed box, saved where a daemon will load it: what
``state_dir/history.bin`` holds after the daemon has polled that box for a week. The project's
pipeline polls the recording once; its PollResult, with the clock moved on an interval each
time, goes through ``History.consume`` for every poll of the week, ending now. Used by the
benches that measure a daemon with its week of history loaded (bench_memory, soak_rss).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

import scenarios as sc  # noqa: E402

from rigmon.config import schema as configmod  # noqa: E402
from rigmon.model.recording import Recording  # noqa: E402
from rigmon.pipeline import Inputs, Outputs, Pipeline  # noqa: E402
from rigmon.sinks.history import History  # noqa: E402


def write_week(
    path: Path, recording: Recording, config: dict, interval: float = 1.0, days: float = 7.0, replay: bool = False
) -> int:
    """Save the week to ``path``; returns the number of series kept. ``replay``: marked as a
    replay's history (what ``rigmon run --replay`` or ``--demo`` keeps, and loads only such)."""
    pipeline = Pipeline.from_config(
        configmod.parse(config, "week"),
        Outputs(),
        inputs=Inputs(source=sc.source(recording, at=sc.LOAD_AT), event_thread=False),
    )
    pipeline.open()
    try:
        result = pipeline.step()
    finally:
        pipeline.close()
    polls = int(days * 86400 / interval)
    t0 = time.time() - polls * interval
    history = History(None, interval=interval, replay=replay)
    sample = result.sample
    for k in range(polls):
        history.consume(result._replace(sample=sample._replace(time=t0 + k * interval)))
    history.path = Path(path)
    history.save()
    return len(history.series_names())
