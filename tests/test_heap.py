"""The daemon's memory housekeeping: CPython's free lists are emptied on a schedule, so the
tuples the polls free do not pile up on them (2,000 of each length) over the first hour."""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time

import pytest
import scenarios as sc
from servers import wait_for

from rigmon.config.schema import Config
from rigmon.daemon import Daemon
from rigmon.pipeline import Inputs, Pipeline
from rigmon.system import heap


def free_tuples(length: int) -> int | None:
    """The freed tuples of ``length`` CPython keeps, from its allocator's statistics (None: it
    does not say)."""
    with tempfile.TemporaryFile() as out:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        found = re.search(rf"(\d+) free {length}-sized PyTupleObjects", out.read().decode())
    return int(found.group(1)) if found else None


def test_tidy_empties_the_tuple_free_lists():
    readings = [tuple(range(k, k + 7)) for k in range(3000)]
    del readings  # the freed 7-tuples go on their free list, up to 2,000
    before = free_tuples(7)
    if before is None:
        pytest.skip("this Python does not report its tuple free lists")
    assert before > 1000
    heap.tidy()
    assert free_tuples(7) == 0


def test_the_daemon_tidies_between_polls(tmp_path, monkeypatch):
    tidied = []
    real = heap.tidy
    monkeypatch.setattr(heap, "TIDY_SECONDS", 0.5)
    monkeypatch.setattr(heap, "tidy", lambda: (tidied.append(time.monotonic()), real()))
    config = Config.model_validate(
        {"daemon": {"interval": 0.1, "state_dir": str(tmp_path), "page": False}, "prometheus": {"enabled": False}}
    )
    daemon = Daemon(config, Pipeline.from_config(config, inputs=Inputs(source=sc.source(sc.h200(), loop=True))))
    started = time.monotonic()
    daemon.start(serve_http=False)
    wait_for(lambda: len(tidied) >= 2 and daemon.stats.polls >= 10, 30, what="ten polls and two tidies")
    seconds, polls, tidies = time.monotonic() - started, daemon.stats.polls, len(tidied)
    daemon.stop()
    assert tidies <= seconds / 0.5 + 1 and tidies < polls, (tidies, polls, seconds)  # every half second, not every poll
    assert daemon.stats.failed == 0
