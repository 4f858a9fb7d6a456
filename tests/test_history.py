"""The daemon's week of history (rigmon.sinks.history), fed by the project's own pipeline on a replayed
8-GPU box with a replayed clock: a restart keeps the week; a damaged file starts empty with one
warning and is set aside; memory stays bounded whatever runs how long."""

from __future__ import annotations

import logging
import math
import threading
import time
from pathlib import Path

import pytest
import scenarios as sc

from rigmon.config import schema as configmod
from rigmon.pipeline import Inputs, Outputs, Pipeline
from rigmon.sinks.history import BUCKETS, MAX_SERIES, History

WEEK = 7 * 86400.0


def pipeline_with(history: History, now: list[float]) -> Pipeline:
    config = configmod.parse({"alerts": {"power_budget": {"watts": 6000}}}, "test")
    source = sc.source(sc.rich(sc.h200()), at=sc.LOAD_AT)
    pipeline = Pipeline.from_config(
        config, Outputs(), sinks=[history], inputs=Inputs(source=source, wall=lambda: now[0], event_thread=False)
    )
    pipeline.open()
    return pipeline


def run_for(pipeline: Pipeline, now: list[float], seconds: float, step: float) -> None:
    end = now[0] + seconds
    while now[0] < end:
        now[0] += step
        pipeline.step()


def an_hour_saved(tmp_path) -> tuple[Path, list[float], History]:
    """An hour of a poll a minute, kept in ``history.bin``: its path, the clock, the history."""
    path = tmp_path / "history.bin"
    now = [1_800_000_000.0]
    history = History(path, interval=60.0)
    pipeline = pipeline_with(history, now)
    run_for(pipeline, now, 3600, 60.0)
    pipeline.close(time.monotonic() + 5)
    return path, now, history


def test_a_restart_keeps_the_week(tmp_path):
    path = tmp_path / "history.bin"
    now = [1_800_000_000.0]
    first = History(path, interval=300.0)
    pipeline = pipeline_with(first, now)
    run_for(pipeline, now, WEEK + 3600, 300.0)  # a week and an hour, a poll every five minutes
    week = first.query(["gpu0/power_watts", "host/cpu0_celsius"], now[0] - WEEK, now[0])
    hour = first.query(["gpu7/temperature_celsius"], now[0] - 3600, now[0])
    assert week["step"] == 300 and 2000 <= len(week["series"]["gpu0/power_watts"]) <= 2017
    assert 12 <= len(hour["series"]["gpu7/temperature_celsius"]) <= 13
    assert all(p[1] <= p[2] <= p[3] for p in week["series"]["gpu0/power_watts"])
    for span, step in ((3600, 15), (6 * 3600, 90), (86400, 360), (WEEK, 2520)):  # the page's charts: 240 points
        chart = first.query(["gpu0/power_watts"], now[0] - span, now[0], step=span / 240)
        expected = span / max(step, 300)  # a poll every 5 min: a 15 s bucket every 5 min
        assert chart["step"] == step and expected - 5 <= len(chart["series"]["gpu0/power_watts"]) <= expected + 2
    assert len(first.series_names()) > 8 * 10  # every GPU's readings, the host's, the PSU budget
    pipeline.close(time.monotonic() + 5)  # the daemon's stop: the history saves
    assert path.exists()

    again = History(path, interval=300.0)  # the daemon started again, the same week
    assert again.series_names() == first.series_names()
    again.latest = now[0]
    assert again.query(["gpu0/power_watts", "host/cpu0_celsius"], now[0] - WEEK, now[0]) == week
    assert again.query(["gpu7/temperature_celsius"], now[0] - 3600, now[0]) == hour
    # and goes on from there
    pipeline = pipeline_with(again, now)
    run_for(pipeline, now, 900, 300.0)
    after = again.query(["gpu0/power_watts"], now[0] - 86400, now[0])["series"]["gpu0/power_watts"]
    assert after[-1][0] >= now[0] - 360
    pipeline.close(time.monotonic() + 5)


def test_a_history_loaded_behind_the_start_keeps_the_polls_that_came_meanwhile(tmp_path, monkeypatch):
    """The daemon's history loads on its own thread while the first scrape is answered: polls
    that come before the file is in are taken after it, in order; a query waits for it; and a
    stop before it is in saves nothing over the file."""
    path, now, first = an_hour_saved(tmp_path)
    before = first.query(["gpu0/power_watts"], now[0] - 3600, now[0])
    saved = path.read_bytes()

    gate = threading.Event()
    restore = History._restore

    def slow(self, data):  # the file takes as long as the test says
        assert gate.wait(30)
        restore(self, data)

    monkeypatch.setattr(History, "_restore", slow)
    stopped = History(path, interval=60.0, behind=True)  # a stop while it loads: the file as it was
    stopped.close(time.monotonic() + 0.2)
    assert path.read_bytes() == saved
    gate.set()

    gate.clear()
    again = History(path, interval=60.0, behind=True)
    pipeline = pipeline_with(again, now)
    run_for(pipeline, now, 600, 60.0)  # ten polls while the file is not in yet
    assert not again._loaded.is_set()
    gate.set()
    assert "gpu0/power_watts" in again.series_names()  # waits for the load
    hour = again.query(["gpu0/power_watts"], now[0] - 3600, now[0])["series"]["gpu0/power_watts"]
    times, loaded = [p[0] for p in hour], before["series"]["gpu0/power_watts"][-1][0]
    assert times == sorted(set(times))  # in order, none twice
    # the file's hour, then the ten polls that came while it loaded
    assert sum(t <= loaded for t in times) >= 49 and sum(t > loaded for t in times) == 10, times
    pipeline.close(time.monotonic() + 5)


@pytest.mark.parametrize("first", [False, True], ids=["a cell inside", "the first cell"])
def test_a_loaded_cell_no_reading_can_be_is_emptied_and_counted(tmp_path, first):
    """A history file is untrusted: a cell out of its reading's range (1e9 °C, ±inf) is loaded
    empty and counted, whether it comes first in its column or after empty cells; the cells in
    range around it, and the empty ones (NaN), load as they were."""
    import json
    import struct
    import zlib

    from rigmon.model.validity import Invalid
    from rigmon.sinks.history import FORMAT

    path, now, _ = an_hour_saved(tmp_path)
    body = zlib.decompress(path.read_bytes()[len(FORMAT) :])
    cut = body.index(b"\n") + 1
    header = json.loads(body[:cut])
    names, raw = header["series"], header["rings"][0]
    # the last-hour ring's column of GPU 0's temperature: after every ring's times, its own place
    times = sum(r["capacity"] * 8 for r in header["rings"])
    column = times + names.index("gpu0/temperature_celsius") * raw["capacity"] * 4
    cells = list(struct.unpack_from(f"{raw['capacity']}f", body, cut + column))
    assert len(cells) == 60 and all(40 <= v <= 100 for v in cells)  # an hour of a minute's polls
    empty = range(5, 10) if first else range(5)
    for j in empty:
        cells[j] = math.nan
    for j, v in zip((0 if first else 10, 20, 30), (1e9, math.inf, -math.inf), strict=True):
        cells[j] = v
    body = bytearray(body)
    struct.pack_into(f"{raw['capacity']}f", body, cut + column, *cells)
    path.write_bytes(FORMAT + zlib.compress(bytes(body)))

    invalid = Invalid()
    again = History(path, interval=60.0, invalid=invalid)
    assert invalid.counts["temperature_celsius"] == 3, invalid.counts
    again.latest = now[0]
    hour = again.query(["gpu0/temperature_celsius"], now[0] - 3600, now[0], step=15)
    kept = hour["series"]["gpu0/temperature_celsius"]
    assert len(kept) >= 50 and all(40 <= p[1] <= 100 and 40 <= p[3] <= 100 for p in kept), kept


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_damaged_history_starts_empty_with_one_warning(tmp_path, caplog, damage):
    path, now, _ = an_hour_saved(tmp_path)
    data = path.read_bytes()
    path.write_bytes({"garbage": b"\x00not a history" * 100, "truncated": data[: len(data) // 2], "empty": b""}[damage])
    with caplog.at_level(logging.WARNING, logger="rigmon.sinks.history"):
        fresh = History(path, interval=60.0)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "starting empty" in warnings[0].getMessage()
    assert fresh.series_names() == []
    assert (tmp_path / "history.bin.damaged").exists() and not path.exists()
    pipeline = pipeline_with(fresh, now)  # and it keeps working
    run_for(pipeline, now, 300, 60.0)
    pipeline.close(time.monotonic() + 5)
    assert path.exists() and History(path, 60.0).series_names() == fresh.series_names()


def test_memory_is_bounded_by_the_series_whatever_the_samples_say(tmp_path):
    """A box (or a recording) that reports ever new fans and PSU groups cannot grow the history
    past MAX_SERIES, and every ring stays its size."""
    from rigmon.model.sample import FanReading, HostReading, Sample, SystemInfo
    from rigmon.sinks.base import PollResult

    history = History(None, interval=1.0)
    for n in range(400):
        fans = tuple(FanReading(f"chip{n}\x1b[31m", f"fan{k}", 1000.0) for k in range(16))
        history.consume(PollResult(Sample(1e9 + n, HostReading(fans=fans, load1=1.0), (), (), SystemInfo())))
    names = history.series_names()
    assert len(names) == MAX_SERIES
    assert all(name.isprintable() and "\x1b" not in name for name in names)
    assert len(history.raw.index) == MAX_SERIES
    for ring in (history.raw, *history.rings):
        assert len(ring.index) <= ring.stride <= MAX_SERIES
        assert len(ring.values) == ring.capacity * ring.stride * ring.width and len(ring.times) == ring.capacity
    assert not any(math.isnan(p[2]) for p in history.query(["host/load1"], 1e9, 1e9 + 400)["series"]["host/load1"])


def resident_kib(view: memoryview) -> int:
    """The KiB of ``view``'s memory that the process holds (its mapping's ``Rss`` in smaps)."""
    import ctypes

    cells = ctypes.c_char.from_buffer(view.cast("B"))
    at = ctypes.addressof(cells)
    del cells
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                first, end = (int(x, 16) for x in head.split("-"))
                inside = first <= at < end
            elif inside and head == "Rss:":
                return int(line.split()[1])
    raise AssertionError("no mapping holds the ring")


def test_a_restart_holds_the_slots_the_file_had_not_the_weeks_room(tmp_path):
    """The rings' room for a week costs nothing until written: a restart on an hour of history,
    then a query of the whole week and a save (both read every slot), holds the week's ring of
    five-minute buckets in a few pages, not the 3 MB it has room for."""
    path, now, _ = an_hour_saved(tmp_path)
    again = History(path, interval=60.0)
    week = again.rings[[step for step, _, _ in BUCKETS].index(300.0)]
    room = len(week.values) * 4 // 1024
    assert 10 <= week.filled <= 13 and room > 2000
    again.query(again.series_names(), now[0] - WEEK, now[0])
    again.save()
    assert resident_kib(week.values) <= 64, f"{resident_kib(week.values)} KiB of {room} held"
    again.close(time.monotonic() + 5)


def test_a_grouped_query_answers_the_same_from_its_kept_groups_as_made_afresh():
    """The closed groups of a grouped query are kept as text for the next one (a page asking for
    the week again and again): at every later poll, through gaps, a bucket that closes, groups that
    slide out of the range and a key that changes, the answer is the one made from the rings."""
    from rigmon.http.page import _point_json

    history = History(None, interval=20.0)  # three polls a minute: the open bucket moves between them
    now = [1_800_000_000.0]
    pipeline = pipeline_with(History(None, interval=20.0), now)
    first = pipeline.step()
    pipeline.close(time.monotonic() + 5)
    gpus = first.sample.gpus

    def poll(k: int) -> None:
        watts = 300 + (k * 7919) % 400 / 3  # moving, never the same two polls running
        g0 = gpus[0]._replace(power_watts=watts, lost=k % 97 < 3)  # a GPU that drops out: gaps
        sample = first.sample._replace(time=now[0], gpus=(g0, *gpus[1:]))
        history.consume(first._replace(sample=sample))

    for k in range(2 * 4320):  # two days
        now[0] += 20
        poll(k)
    names = ["gpu0/power_watts", "gpu1/power_watts", "host/cpu0_celsius", "no/such_series"]
    asked = [
        (-2 * 86400, None, 200),
        (-86400, 900.0, 10000),
        (-6 * 3600, 1800.0, 10000),
        (-90000, 3600.0, 10000),
        (-1800, 120.0, 10000),
    ]
    for k in range(2 * 4320, 2 * 4320 + 12):  # twelve more polls, asked after each
        now[0] += 20
        poll(k)
        for since, step, points in asked:
            plain = history.query(names, now[0] + since, now[0], step, max_points=points)
            fresh = {name: [_point_json(p) for p in pts] for name, pts in plain["series"].items()}
            kept = history.query(names, now[0] + since, now[0], step, max_points=points, encode=_point_json)
            assert kept["step"] == plain["step"] and kept["series"] == fresh, (since, step)
            assert len(fresh["gpu0/power_watts"]) >= 10 and "no/such_series" not in fresh
    assert history._encoded_count > 0  # the kept groups answered


def test_the_page_keeps_the_weeks_ask_ready_in_the_background_and_a_failing_ask_is_told(tmp_path, caplog):
    """A daemon's history makes the page's kept-ready ask (the week of every series, as a script
    asks /api/history) soon after start and after each save: a script's first ask then finds the
    closed groups made, and answers what a history that never made it ready answers. An ask that
    fails is logged; the saves and the other asks go on."""
    from rigmon.http.page import Page

    now = [1_800_000_000.0]
    history = History(tmp_path / "history.bin", interval=60.0, save_every=0.05)
    cold = History(None, interval=60.0)
    pipeline = pipeline_with(history, now)
    config = configmod.parse({}, "test")
    made = threading.Event()
    history.keep_ready(lambda: 1 / 0)
    page = Page(pipeline, history, config.jobs)
    history.keep_ready(made.set)
    with caplog.at_level(logging.WARNING, logger="rigmon.sinks.history"):
        first = pipeline.step()
        for _ in range(3 * 1440):  # three days of minute polls, given to both
            now[0] += 60
            sample = first.sample._replace(time=now[0])
            history.consume(first._replace(sample=sample))
            cold.consume(first._replace(sample=sample))
        made.clear()
        assert made.wait(10)  # a round of the asks, in their order, after the last poll
        history.close(time.monotonic() + 5)
    pipeline.close(time.monotonic() + 5)
    assert "an ask kept ready failed: division by zero" in caplog.text
    assert (tmp_path / "history.bin").stat().st_size > 0  # the saves went on
    assert history._encoded_count > 0  # the week's closed groups are made
    ready = page.history_json(f"since=-{WEEK:.0f}")
    assert ready == Page(pipeline, cold, config.jobs).history_json(f"since=-{WEEK:.0f}")
    assert b'"gpu0/power_watts":[[' in ready[1]
