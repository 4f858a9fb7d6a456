"""The box's last week, kept by the daemon for its page (``/``) and ``/api/history``: a sink.

Every reading the page charts is kept three ways, each a ring of fixed size, so memory is
bounded by the number of series (at most MAX_SERIES) whatever runs how long:

- every poll for the last hour (RAW_SECONDS), one float32 per series and poll;
- one-minute buckets for the last day and five-minute buckets for the last week, each the
  min, mean and max of what fell in it, so a spike shows in every view.

For 8 GPUs (about 115 series) that is about 8 MB once the week is full; a ring's memory is
taken as its slots are written, so a fresh daemon holds little of it. The rings are saved to ``state_dir`` atomically
every SAVE_SECONDS and at stop, and loaded at start, so a restart or a reboot keeps the week;
a file that cannot be read is set aside (``.damaged``) with one warning, and the history starts
empty. Series names carry hwmon's chip and fan labels: they are made printable and cut short,
and a sample cannot add series past the bound.
"""

from __future__ import annotations

import json
import logging
import math
import mmap
import os
import threading
import time
import zlib
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ..model.readings import PAGE
from ..model.sample import mean_of
from ..model.text import printable
from ..model.validity import UNIT_RANGES, reading_range
from ..system import heap, statefile

if TYPE_CHECKING:
    from ..model.validity import Invalid
    from .base import PollResult

Point = tuple[float, float, float, float]  # (t, min, mean, max)
Mark = tuple[float, str, str, dict[str, str]]  # an alert's transition: (time, status, alertname, labels)

log = logging.getLogger(__name__)

RAW_SECONDS = 3600.0
MAX_RAW_POINTS = 7200  # an interval under 0.5 s keeps less than the hour
# (seconds, how many, the finer tier it is folded from): a day of minutes and a week of five
# minutes for scripts; and 240 buckets for each of the page's ranges (1 h, 6 h, 24 h, 7 d), so a
# chart reads its points as kept, never regrouping a week at every poll. Each bucket is folded
# from closed buckets of the finer tier, whose boundaries fall inside it.
BUCKETS = (
    (15.0, 250, None),
    (60.0, 1500, 15.0),
    (90.0, 250, 15.0),
    (300.0, 2100, 60.0),
    (360.0, 250, 90.0),
    (2520.0, 250, 360.0),
)
_FROM = {step: [k for k, (_, _, parent) in enumerate(BUCKETS) if parent == step] for step, _, _ in BUCKETS}
MAX_SERIES = 256
MAX_NAME = 80
MAX_FANS = 16  # host fans kept (a board reports a dozen headers at most)
MAX_ENCODED = 50_000  # closed groups' texts kept for the next query (~5 MB): a week of 64 series is 20,000
ENCODED_KEYS = 8  # ...for this many kinds of query (tier and step) at once
MAX_MARKS = 512  # alert transitions kept for the charts (the last day's)
SAVE_SECONDS = 300.0
LOAD_WAIT = 10.0  # s a query waits for a history loaded behind the start (then answers from what is in)
MAX_EARLY = 3600  # polls kept aside while a history loads behind the start (an hour at 1 s)
READY_AFTER = 10.0  # the asks kept ready are first made this long after start, then after each save
MAX_READY = 4
FORMAT = b"rigmon-history 1\n"
# decompressed: what MAX_SERIES columns of every ring fill, and room for the header (a week's
# buckets of 256 series is 22 MB); far below the unit's MemoryMax, whatever a file claims
MAX_FILE_BYTES = (
    MAX_RAW_POINTS * (8 + MAX_SERIES * 4) + sum(n for _, n, _ in BUCKETS) * (8 + MAX_SERIES * 12) + (8 << 20)
)
NAN = float("nan")
FLOAT32_MAX = 3.4e38


def series_range(name: str) -> tuple[str, float, float]:
    """The reading a series keeps and what it can mean (``rigmon.model.validity``'s ranges), from its name."""
    kind, _, rest = name.partition("/")
    last = name.rpartition("/")[2]
    if kind.startswith("gpu"):
        if rest in ("fan_target_ratio", "fan_speed_ratio"):
            return (rest, *(reading_range("gpu_fan", "speed_ratio") or (0.0, 1.0)))
        return (rest, *(reading_range("gpu", rest) or (-FLOAT32_MAX, FLOAT32_MAX)))
    if kind == "host":
        if rest.startswith("fan/"):
            return ("rpm", *UNIT_RANGES["rpm"])
        if rest.endswith("_celsius"):
            return ("celsius", *UNIT_RANGES["celsius"])
        if rest in ("load1", "cpu_utilization_ratio"):
            return (rest, *(reading_range("host", rest) or (-FLOAT32_MAX, FLOAT32_MAX)))
    if name.endswith("_watts"):
        return (last, *UNIT_RANGES["watts"])
    return last, -FLOAT32_MAX, FLOAT32_MAX


def _name(*parts: str) -> str:
    return "/".join(printable(str(p)).replace("/", "_")[:MAX_NAME] for p in parts)[: 3 * MAX_NAME]


def readings(result: PollResult, energy: dict[str, tuple[float, float]]) -> dict[str, float]:
    """The charted readings of one poll, by series name (base units). ``energy`` keeps each RAPL
    zone's last (time, joules) between calls, for its power."""
    sample = result.sample
    out: dict[str, float] = {}
    if sample is None:
        return out

    def put(name: str, value: float | None) -> None:
        if value is not None and not isinstance(value, bool) and -FLOAT32_MAX <= value <= FLOAT32_MAX:
            out[name] = float(value)  # checked at the source; what is left (a derived value) kept finite

    for g in sample.gpus:
        if g.lost:
            continue
        p = f"gpu{g.index}/"
        for reading, field in PAGE:  # the table of readings' page=True
            put(p + reading.name, getattr(g, field))
        put(p + "fan_target_ratio", mean_of(g.fan_target_ratios or ()))
        put(p + "fan_speed_ratio", mean_of(g.fan_speed_ratios or ()))
    host = sample.host
    if host is not None:
        for t in host.cpu_temperatures:
            put(f"host/cpu{t.socket}_celsius", t.celsius)
        for fan in host.fans[:MAX_FANS]:
            put("host/fan/" + _name(fan.chip + (f".{fan.device}" if fan.device else ""), fan.label), fan.rpm)
        put("host/load1", host.load1)
        put("host/cpu_utilization_ratio", host.cpu_utilization_ratio)
        if host.cpu_energy:
            joules = sum(z.joules for z in host.cpu_energy)
            last = energy.get("rapl")
            energy["rapl"] = (sample.time, joules)
            if last is not None and sample.time > last[0] and joules >= last[1]:
                put("host/rapl_watts", (joules - last[1]) / (sample.time - last[0]))
    if result.alerts is not None:
        for b in result.alerts.budgets:
            put("psu/" + _name(b.psu) + "/draw_watts", b.draw_watts)
            put("psu/" + _name(b.psu) + "/budget_watts", b.budget_watts)
    return out


def _zeroed(nbytes: int) -> mmap.mmap:
    """Anonymous memory that costs nothing until written: a fresh daemon holds only the slots
    it has filled, and a week's rings come to their full size as the week passes. Private: a
    read of a slot never written (a save, a chart) maps the kernel's one page of zeros, where
    shared anonymous memory would take a page of its own for it."""
    return mmap.mmap(-1, max(nbytes, mmap.PAGESIZE), flags=mmap.MAP_PRIVATE)


def _written(times: memoryview[float], pos: int) -> int:
    """How many slots from the first a ring's ``times`` (0.0 or NaN: never written) and next
    slot ``pos`` say hold writes: up to the last written, and the next write's among them (a
    file that says otherwise)."""
    last = next((i + 1 for i in range(len(times) - 1, -1, -1) if times[i] == times[i] and times[i]), 0)
    return max(last, pos)


class _Ring:
    """One resolution: a time per slot and, per series, ``width`` float32 per slot (1: the
    reading; 3: min, mean, max). A slot's readings lie together (row by row), so the memory a
    ring holds grows with the slots written, not with the series it has room for."""

    def __init__(self, capacity: int, width: int):
        self.capacity, self.width = capacity, width
        self.times = memoryview(_zeroed(capacity * 8)).cast("d")[:capacity]  # 0.0: never written
        self.index: dict[str, int] = {}  # series -> its column
        self.stride = 0  # columns a row has room for
        self.values = memoryview(_zeroed(0)).cast("f")[:0]
        self.pos = 0  # the next slot written
        self.filled = 0  # slots from the first that hold a write: all once the ring has come round
        self._blank = array("f")

    def add(self, names: Iterable[str]) -> None:
        """Columns for new series; the slots already written had no reading of them."""
        first = len(self.index)
        for name in names:
            self.index.setdefault(name, len(self.index))
        if len(self.index) > self.stride:
            self._widen(-(-len(self.index) // 8) * 8)
        width, step, written = self.width, self.stride * self.width, self.filled
        blank = self._blank[:1] * written
        for at in range(first * width, len(self.index) * width):  # each new cell of every written slot
            self.values[at : written * step : step] = blank

    def _widen(self, stride: int) -> None:
        old, old_stride, width = self.values, self.stride, self.width
        self.values = memoryview(_zeroed(self.capacity * stride * width * 4)).cast("f")[
            : self.capacity * stride * width
        ]
        self.stride = stride
        self._blank = array("f", [NAN]) * (stride * width)
        written, new_row, old_row = self.filled, stride * width, old_stride * width
        for at in range(old_row):  # the written slots' cells; add() fills the new columns'
            self.values[at : written * new_row : new_row] = old[at : written * old_row : old_row]

    def write(self, t: float, row: Mapping[str, float | tuple[float, float, float]]) -> None:
        """One slot: ``row`` maps each series to its reading (width 1) or (min, mean, max)."""
        index = self.index
        new = row.keys() - index.keys()
        if new:
            self.add(sorted(new))
        line = self._blank[:]
        if self.width == 1:
            for name, v in row.items():
                line[index[name]] = v  # type: ignore[assignment]  # a reading: one number
        else:
            for name, cell in row.items():
                lo, mean, hi = cell  # type: ignore[misc]  # a bucket: three
                k = index[name] * 3
                line[k], line[k + 1], line[k + 2] = lo, mean, hi
        slot = self.pos
        self.values[slot * len(line) : (slot + 1) * len(line)] = line
        self.times[slot] = t
        self.pos = (slot + 1) % self.capacity
        self.filled = min(self.filled + 1, self.capacity)

    def cells(self, name: str, spans: list[list[int]]) -> tuple[list[float], list[float], list[float]] | None:
        """A series' (mins, means, maxes) at the slots of ``spans`` ([first, end) each, see
        ``_spans``), read as strided slices; a reading's three are the one list."""
        k = self.index.get(name)
        if k is None:
            return None
        step, values = self.stride * self.width, self.values

        def read(at: int) -> list[float]:
            got: list[float] = []
            for first, end in spans:
                got += values[at + first * step : at + end * step : step].tolist()
            return got

        if self.width == 1:
            got = read(k)
            return got, got, got
        return read(3 * k), read(3 * k + 1), read(3 * k + 2)

    def column(self, name: str) -> array[float] | None:
        """A series' cells slot by slot, as the history file keeps them (None: no column)."""
        k = self.index.get(name)
        if k is None:
            return None
        width, step = self.width, self.stride * self.width
        if width == 1:
            return array("f", self.values[k::step].tobytes())
        out = array("f", bytes(self.capacity * 12))
        for j in range(3):
            out[j::3] = array("f", self.values[3 * k + j :: step].tobytes())
        return out

    def load(self, times: memoryview[float], columns: dict[str, memoryview[float]], pos: int, filled: int) -> None:
        """Take a file's ring (checked): its times and each series' cells, slot by slot, of the
        ``filled`` slots from the first that hold writes (``_written``)."""
        self.index, self.stride, self.pos, self.filled = {}, 0, pos, 0
        self.add(columns)  # nothing written yet: nothing to copy or fill
        self.times[:] = times
        # the slots up to the last written (0.0 or NaN: never written) are copied, no more: the
        # rest stays untouched memory, so a restart holds what the file held, not a week's room
        self.filled = filled
        step, end = self.stride * self.width, self.filled * self.stride * self.width
        for name, cells in columns.items():
            k = self.index[name] * self.width
            for j in range(self.width):
                self.values[k + j : end : step] = cells[j : self.filled * self.width : self.width]

    def slots(self, since: float, until: float) -> list[int]:
        """The slots with a time in [since, until], oldest first."""
        order = list(range(self.pos, self.capacity)) + list(range(self.pos))
        times = self.times
        return [i for i in order if since <= times[i] <= until and times[i]]


class History:
    """A sink; queried from the HTTP server's threads (``query``, ``marks_since``)."""

    name = "history"

    def __init__(
        self,
        path: Path | None,
        interval: float,
        save_every: float = SAVE_SECONDS,
        invalid: Invalid | None = None,
        replay: bool = False,
        behind: bool = False,
    ):
        """``behind``: the file is loaded by the history's own thread (the daemon's start serves
        its first scrape meanwhile): the polls that come before it is in are kept aside and
        taken after it, in order; a query waits for it (LOAD_WAIT at most); nothing is saved
        before it, so a stop during the load leaves the file as it was."""
        self.path = path
        self.invalid = invalid  # rigmon.model.validity.Invalid: counts what a loaded file held that no reading can be
        self.replay = replay  # a replay's history: marked as one, never taken by a daemon of the box
        self.interval = interval
        self.raw = _Ring(min(MAX_RAW_POINTS, max(60, math.ceil(RAW_SECONDS / interval))), 1)
        self.rings = [_Ring(capacity, 3) for _, capacity, _ in BUCKETS]
        self._acc: list[tuple[float, dict[str, list[float]]] | None] = [None] * len(BUCKETS)
        self._series: set[str] = set()
        self._energy: dict[str, tuple[float, float]] = {}
        self.latest: float | None = None  # the last poll's time: "now" for the queries (a replay's clock too)
        self.marks: deque[Mark] = deque(maxlen=MAX_MARKS)
        self._lock = threading.Lock()
        # the closed groups of grouped queries, as ``encode`` wrote them: by (tier, step, encode)
        # (the last ENCODED_KEYS asked), then series, each group's text by what it was made of
        self._encoded: dict[tuple[Any, ...], dict[str, dict[tuple[float, ...], str | None]]] = {}
        self._encoded_count = 0
        self._dirty = False
        self._unsaved = False  # the last save failed (told once)
        self._save_every = save_every
        self._ready: list[Callable[[], object]] = []
        self._stop = threading.Event()
        self._saver: threading.Thread | None = None
        self._loaded = threading.Event()
        self._early: deque[PollResult] = deque(maxlen=MAX_EARLY)  # polls before a load behind was in
        if path is not None and not behind:
            self._load()
        if path is None or not behind:
            self._loaded.set()
        if path is not None:
            self._saver = threading.Thread(target=self._save_loop, name="rigmon-history", daemon=True)
            self._saver.start()

    # --- the sink ------------------------------------------------------------------------
    def consume(self, result: PollResult) -> None:
        if not self._loaded.is_set():
            with self._lock:
                if not self._loaded.is_set():  # taken in order once the file is in
                    self._early.append(result)
                    return
        self._take(result)

    def _take(self, result: PollResult) -> None:
        # the charts' marks: warnings and criticals (an info alert is a normal state: a power cap
        # that flaps would cover a healthy GPU's charts in lines)
        marked = [tr for tr in result.transitions if tr.severity != "info"]
        if marked:
            with self._lock:
                self.marks.extend((tr.time, tr.status, tr.alertname, dict(tr.labels)) for tr in marked)
        if result.sample is None:
            return
        row = readings(result, self._energy)
        t = result.sample.time
        with self._lock:
            new = row.keys() - self._series
            if new:  # a new GPU, fan or PSU group; past MAX_SERIES nothing new is kept
                keep = set(sorted(new)[: max(0, MAX_SERIES - len(self._series))])
                row = {k: v for k, v in row.items() if k in self._series or k in keep}
                self._series |= keep
            self.raw.write(t, row)
            self._bucket(0, t, row)
            self.latest = t
            self._dirty = True

    def _bucket(
        self,
        tier: int,
        t: float,
        row: dict[str, float],
        weights: dict[str, float] | None = None,
        lows: dict[str, float] | None = None,
        highs: dict[str, float] | None = None,
    ) -> None:
        """Add to the tier's open bucket; close it (into its ring, and the next tier's bucket)
        when ``t`` falls in a later one."""
        step = BUCKETS[tier][0]
        start = math.floor(t / step) * step
        acc = self._acc[tier]
        if acc is not None and acc[0] != start:
            self._close(tier)
            acc = None
        if acc is None:
            acc = self._acc[tier] = (start, {})
        open_ = acc[1]
        for name, v in row.items():
            n = weights[name] if weights else 1
            lo = lows[name] if lows else v
            hi = highs[name] if highs else v
            cell = open_.get(name)
            if cell is None:
                open_[name] = [lo, v * n, n, hi]
            else:
                if lo < cell[0]:
                    cell[0] = lo
                if hi > cell[3]:
                    cell[3] = hi
                cell[1] += v * n
                cell[2] += n
        # the open bucket shows in queries too: a chart's last minute is not a minute late

    def _close(self, tier: int) -> None:
        acc = self._acc[tier]
        if acc is None:
            return
        start, open_ = acc
        self._acc[tier] = None
        row = {name: (lo, total / n, hi) for name, (lo, total, n, hi) in open_.items()}
        self.rings[tier].write(start, row)
        if _FROM[BUCKETS[tier][0]]:
            means = {k: m for k, (_, m, _) in row.items()}
            weights = {k: c[2] for k, c in open_.items()}
            lows, highs = {k: r[0] for k, r in row.items()}, {k: r[2] for k, r in row.items()}
            for coarser in _FROM[BUCKETS[tier][0]]:
                self._bucket(coarser, start, means, weights, lows, highs)

    def close(self, deadline: float | None = None) -> None:
        self._stop.set()
        if self._saver is not None:
            self._saver.join(timeout=max(0.0, (deadline or time.monotonic() + 2) - time.monotonic()))
        if self.path is not None:
            self.save()

    # --- queries -------------------------------------------------------------------------
    def marks_since(self, since: float) -> list[Mark]:
        """The alerts' transitions from ``since`` on: (time, status, alertname, labels)."""
        self._loaded.wait(LOAD_WAIT)
        with self._lock:
            return [m for m in self.marks if m[0] >= since]

    def series_names(self) -> list[str]:
        self._loaded.wait(LOAD_WAIT)
        with self._lock:
            return sorted(self._series)

    def query(
        self,
        names: list[str],
        since: float,
        until: float,
        step: float | None = None,
        max_points: int = 10000,
        encode: Callable[[Point], str] | None = None,
    ) -> dict[str, Any]:
        """Each series' (t, min, mean, max) points in [since, until], at the finest resolution
        that covers the span (every poll for the last hour, then minutes, then five minutes),
        grouped into ``step`` seconds where given (or where more than ``max_points`` would come).

        ``encode``: each point as ``encode(point)`` (text for an answer) instead. Where points are
        grouped, a closed group's text is kept for the next query over the same tier and step (a
        page or a script asking for the week again and again): only the first group (``since``
        cuts it), the last (it grows) and any not seen before are read and encoded."""
        self._loaded.wait(LOAD_WAIT)
        span = max(until - since, 0.0)
        with self._lock:
            now = self.latest if self.latest is not None else time.time()
            back = now - since
            # the tiers that reach back to ``since``: the finest, or the coarsest no coarser than ``step``
            tiers: list[tuple[float, _Ring, int | None]] = (
                [(self.interval, self.raw, None)] if back <= RAW_SECONDS + self.interval else []
            )
            tiers += [(b[0], self.rings[k], k) for k, b in enumerate(BUCKETS) if back <= b[0] * (b[1] - 1)]
            tiers.sort(key=lambda x: x[0])
            if not tiers:
                tiers = [(BUCKETS[-1][0], self.rings[-1], len(BUCKETS) - 1)]
            fitting = [x for x in tiers if step and x[0] <= step]
            resolution, ring, tier = fitting[-1] if fitting else tiers[0]
            step = max(step or 0.0, resolution, span / max_points if max_points else 0.0)
            slots = ring.slots(since, until)
            times, spans = [ring.times[i] for i in slots], _spans(slots)
            acc = self._acc[tier] if tier is not None else None
            open_cells = acc[1] if acc is not None and since <= acc[0] <= until else None
            if acc is not None and open_cells is not None:  # the open bucket: the last one is not a bucket late
                times.append(acc[0])
            # the buckets of ``step`` found once for every series, each series' cells read as
            # columns: a point is made per bucket, not per slot
            runs = _runs(times, step) if step > resolution else None
            if encode is not None and runs is not None:
                series = self._encoded_runs(names, ring, (tier, step, encode), slots, spans, times, runs, open_cells)
                return {"since": since, "until": until, "step": step, "series": series}
            out: dict[str, list[Point] | list[str]] = {}
            for name in names:
                cells = ring.cells(name, spans)
                cell = open_cells.get(name) if open_cells is not None else None
                if cells is None and cell is None:
                    continue
                lows, means, highs = cells or ([NAN] * len(slots),) * 3
                if open_cells is not None:
                    lo, mean, hi = (cell[0], cell[1] / cell[2], cell[3]) if cell is not None else (NAN,) * 3
                    lows, means, highs = lows + [lo], means + [mean], highs + [hi]
                points = _points(times, lows, means, highs, runs)
                out[name] = [encode(p) for p in points] if encode is not None else points
        return {"since": since, "until": until, "step": step, "series": out}

    def _encoded_runs(
        self,
        names: list[str],
        ring: _Ring,
        key: tuple[int | None, float, Callable[[Point], str]],
        slots: list[int],
        spans: list[list[int]],
        times: list[float],
        runs: list[tuple[float, int, int]],
        open_cells: dict[str, list[float]] | None,
    ) -> dict[str, list[str]]:
        """``query``'s grouped points, encoded, each closed group's text kept (under the lock).

        A group is known by its start and what it was made of (its first and last cell's time
        and its number of cells), so a ring that came round or a clock that went back makes it a
        new one; the first and last groups of a query are always made afresh."""
        kept = self._encoded.pop(key, None)
        if kept is None:
            kept = {}
            while len(self._encoded) >= ENCODED_KEYS:  # the least lately asked goes
                gone = self._encoded.pop(next(iter(self._encoded)))
                self._encoded_count -= sum(len(groups) for groups in gone.values())
        self._encoded[key] = kept  # the latest asked last
        encode = key[2]
        last = len(runs) - 1
        ids = [(start, times[first], times[end - 1], end - first) for start, first, end in runs]
        out: dict[str, list[str]] = {}
        for name in names:
            if name not in ring.index and (open_cells is None or name not in open_cells):
                continue
            known = kept.get(name)
            if known is None:
                known = kept[name] = {}
            wanted = [k for k in range(len(runs)) if k == 0 or k == last or ids[k] not in known]
            made = dict(
                zip(wanted, self._group_points(name, ring, slots, spans, runs, wanted, open_cells), strict=True)
            )
            texts = []
            for k, i in enumerate(ids):
                if k in made:
                    point = made[k]
                    text = encode(point) if point is not None else None
                    if 0 < k < last:
                        known[i] = text
                        self._encoded_count += 1
                else:
                    text = known[i]
                if text is not None:
                    texts.append(text)
            out[name] = texts
        if self._encoded_count > MAX_ENCODED:  # bounded: what the next query needs is made again
            self._encoded, self._encoded_count = {}, 0
        return out

    def _group_points(
        self,
        name: str,
        ring: _Ring,
        slots: list[int],
        all_spans: list[list[int]],
        runs: list[tuple[float, int, int]],
        wanted: list[int],
        open_cells: dict[str, list[float]] | None,
    ) -> list[Point | None]:
        """The point of each of the ``wanted`` runs (None: no reading in it). Most of them (a first
        ask): every cell read as columns at once; a few (the first and the last): only theirs."""
        if not wanted:
            return []
        if len(wanted) * 4 > len(runs):
            count, spans = len(slots), all_spans
            at = {k: runs[k][1] for k in wanted}
            has_open = open_cells is not None
        else:
            picked: list[int] = []
            at = {}
            for k in wanted:
                at[k] = len(picked)
                picked += range(runs[k][1], runs[k][2])
            in_ring = [slots[i] for i in picked if i < len(slots)]  # past the slots: the open cell
            count, spans, has_open = len(in_ring), _spans(in_ring), len(in_ring) < len(picked)
        cells = ring.cells(name, spans) if count else ([], [], [])
        lows, means, highs = cells or ([NAN] * count,) * 3
        if has_open:
            cell = open_cells.get(name) if open_cells is not None else None
            lo, mean, hi = (cell[0], cell[1] / cell[2], cell[3]) if cell is not None else (NAN,) * 3
            lows, means, highs = lows + [lo], means + [mean], highs + [hi]
        return [_group(lows, means, highs, runs[k][0], at[k], at[k] + runs[k][2] - runs[k][1]) for k in wanted]

    # --- the file ------------------------------------------------------------------------
    def save(self) -> None:
        """Atomically: the rings and the open buckets, then a rename over the last save. The
        rings are compressed into the file a column at a time, so a save never holds a copy of
        them; what it allocated goes back to the system after (heap.give_back)."""
        if self.path is None or not self._loaded.is_set():  # a save before the load would lose the file
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with os.fdopen(
                os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), "wb"
            ) as f:
                with self._lock:
                    self._write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            self._unsaved = False
        except OSError as e:
            if not self._unsaved:  # once, not every five minutes: the page goes on from memory
                log.warning("cannot save the history to %s (%s): it is kept in memory only", self.path, e.strerror or e)
            self._unsaved = True
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
        heap.give_back()  # else glibc keeps the save's buffers, a little more after each save

    def _write(self, f: BinaryIO) -> None:
        deflate = zlib.compressobj(1)
        rings = [self.raw, *self.rings]
        header: dict[str, Any] = {
            "interval": self.interval,
            "saved": time.time(),
            "series": sorted(self._series),
            "replay": self.replay,
            "rings": [{"capacity": r.capacity, "width": r.width, "pos": r.pos} for r in rings],
            "open": [[a[0], a[1]] if a is not None else None for a in self._acc],
            "marks": list(self.marks),
        }
        f.write(FORMAT)
        f.write(deflate.compress(json.dumps(header).encode() + b"\n"))
        for r in rings:
            f.write(deflate.compress(r.times))
        for r in rings:
            empty = None
            for name in header["series"]:
                column = r.column(name)
                if column is None:  # a series this ring has not had yet
                    column = empty = empty or array("f", [NAN]) * (r.capacity * r.width)
                f.write(deflate.compress(column))
        f.write(deflate.flush())
        self._dirty = False

    def keep_ready(self, ask: Callable[[], object]) -> None:
        """``ask`` (a query with ``encode``, as an API answers it) made in the background soon
        after start and again after each save, so its closed groups' text is kept: the first ask
        a page or script makes over the week finds them made and makes only what is new. Runs
        where the history saves (a daemon's); at most MAX_READY asks."""
        if len(self._ready) < MAX_READY:
            self._ready.append(ask)

    def make_ready(self) -> None:
        """Each ``keep_ready`` ask, made now: one that fails is logged and the others still run."""
        for ask in list(self._ready):
            try:
                ask()
            except Exception as e:  # a query of ours: a bug is told, never kills the saves
                log.warning("history: an ask kept ready failed: %s", e)

    def _save_loop(self) -> None:
        if not self._loaded.is_set():
            self._load_behind()
        # the asks first made soon after the start; the saves every save_every from the start
        # (a fresh start's few polls are not worth writing the week's room at once)
        first = min(READY_AFTER, self._save_every)
        if self._stop.wait(first):
            return
        self.make_ready()
        wait = self._save_every - first
        while not self._stop.wait(wait):
            wait = self._save_every
            if self._dirty:
                self.save()
            self.make_ready()

    def _load_behind(self) -> None:
        """The file loaded, then the polls that came meanwhile taken in order, and the history
        open: a poll that comes while the early ones are taken joins them, in order."""
        try:
            self._load()
        finally:
            while True:
                with self._lock:  # consume adds to the early ones under it until they are all taken
                    if not self._early:
                        self._loaded.set()
                        break
                    result = self._early.popleft()
                self._take(result)

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            data = statefile.read_bytes(self.path, MAX_FILE_BYTES)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            log.warning("cannot read the history %s (%s): starting empty", self.path, e)
            return
        try:
            self._restore(data)
        except Exception as e:  # damaged, truncated, another format: never fatal
            aside = self.path.with_name(self.path.name + ".damaged")
            try:
                os.replace(self.path, aside)
                where = f"set aside as {aside.name}"
            except OSError:
                where = "left as it is"
            log.warning(
                "the history %s cannot be read (%s): %s; starting empty", self.path, printable(str(e))[:200], where
            )

    def _checked(self, name: str, cells: memoryview[float], reading: str, lo: float, hi: float) -> memoryview[float]:
        """A column as loaded, with every cell no reading can be (out of range, infinite) made
        empty (NaN) and counted; NaN is an empty cell already."""
        # the least and the most of the cells that are not empty, in C: a comparison with NaN is
        # false, so past the first value (a sentinel here) min and max pass every NaN by
        if lo <= min(chain((math.inf,), cells)) and max(chain((-math.inf,), cells)) <= hi:
            return cells
        bad = [j for j, v in enumerate(cells) if not lo <= v <= hi and v == v]
        if not bad:
            return cells
        if self.invalid is not None:
            self.invalid.note(reading, (name,), cells[bad[0]], f" in {self.path}", count=len(bad))
        fixed = array("f", cells)
        for j in bad:
            fixed[j] = NAN
        return memoryview(fixed)

    def _restore(self, data: bytes) -> None:
        """Everything checked first, then taken: a damaged file changes nothing."""
        if not data.startswith(FORMAT):
            raise ValueError("not a rigmon history file")
        inflate = zlib.decompressobj()
        body = inflate.decompress(data[len(FORMAT) :], MAX_FILE_BYTES)
        if inflate.unconsumed_tail or not inflate.eof:
            raise ValueError("truncated, or larger than a history can be")
        cut = body.find(b"\n")
        if cut < 0:
            raise ValueError("no header")
        header = json.loads(body[:cut])
        blob = memoryview(body)[cut + 1 :]  # the columns, never copied
        if bool(header.get("replay")) != self.replay:
            raise ValueError(
                "a replay's history, not this box's" if header.get("replay") else "this box's history, not a replay's"
            )
        names = header["series"]
        if (
            not isinstance(names, list)
            or len(names) > MAX_SERIES
            or not all(isinstance(n, str) and len(n) <= 3 * MAX_NAME for n in names)
        ):
            raise ValueError("bad series list")
        specs = header["rings"]
        rings = [self.raw, *self.rings]
        if not isinstance(specs, list) or len(specs) != len(rings):
            raise ValueError("bad rings")
        for spec, ring in zip(specs, rings, strict=True):
            if not (
                isinstance(spec["capacity"], int)
                and isinstance(spec["pos"], int)
                and spec["width"] in (1, 3)
                and 0 < spec["capacity"] <= MAX_RAW_POINTS
                and 0 <= spec["pos"] < spec["capacity"]
            ):
                raise ValueError("bad ring")
            if ring is not self.raw and (spec["capacity"], spec["width"]) != (ring.capacity, ring.width):
                raise ValueError("the buckets' sizes changed")
        sizes = [s["capacity"] * 8 for s in specs] + [s["capacity"] * s["width"] * 4 for s in specs for _ in names]
        if sum(sizes) != len(blob):
            raise ValueError(f"{len(blob)} bytes of data where {sum(sizes)} were expected")
        view, offset = memoryview(blob), 0
        loaded: list[tuple[dict[str, Any], memoryview[float], dict[str, memoryview[float]]]] = []
        for spec in specs:
            loaded.append((spec, view[offset : offset + spec["capacity"] * 8].cast("d"), {}))
            offset += spec["capacity"] * 8
        ranges = {name: series_range(name) for name in names}
        for spec, times, columns in loaded:
            n = spec["capacity"] * spec["width"] * 4
            spec["filled"] = _written(times, spec["pos"])
            kept = spec["filled"] * spec["width"]  # the cells a load takes: no more checked
            for name in names:
                columns[name] = self._checked(name, view[offset : offset + n].cast("f")[:kept], *ranges[name])
                offset += n
        opened = []
        for acc in header.get("open") or []:
            cells = {}
            if acc is not None:
                for k, v in acc[1].items():
                    if k in names:
                        cell = [float(v[0]), float(v[1]), int(v[2]), float(v[3])]
                        reading, lo, hi = ranges[k]
                        if (
                            cell[2] > 0
                            and lo <= cell[0] <= hi
                            and lo <= cell[3] <= hi
                            and lo <= cell[1] / cell[2] <= hi
                        ):
                            cells[str(k)] = cell
                        elif self.invalid is not None:
                            self.invalid.note(reading, (k,), cell[1], f" in {self.path}")
            opened.append(None if acc is None else (float(acc[0]), cells))
        marks = [
            (float(t), str(status), str(alertname), {str(k): str(v) for k, v in labels.items()})
            for t, status, alertname, labels in (header.get("marks") or [])[-MAX_MARKS:]
        ]
        # checked: taken (under the lock: a query that waited past LOAD_WAIT reads meanwhile)
        with self._lock:
            for ring, (spec, times, values) in zip(rings, loaded, strict=True):
                if ring is self.raw and spec["capacity"] != ring.capacity:
                    continue  # the interval changed: the last hour's polls do not fit; the buckets do
                ring.load(times, values, spec["pos"], spec["filled"])
            for tier, acc in enumerate(opened[: len(self._acc)]):
                self._acc[tier] = acc
            self.marks.extend(marks)
            self._series = set(names)
        log.info("history: %d series of the last week loaded from %s", len(names), self.path)


def _spans(slots: list[int]) -> list[list[int]]:
    """``slots`` as runs of consecutive slots, [first, end) each: one or two for a ring that has
    come round (more only where the clock went back)."""
    spans: list[list[int]] = []
    for i in slots:
        if spans and spans[-1][1] == i:
            spans[-1][1] = i + 1
        else:
            spans.append([i, i + 1])
    return spans


def _runs(times: list[float], step: float) -> list[tuple[float, int, int]]:
    """The ``step``-second buckets that ``times`` (oldest first) fall into: (start, first, end)."""
    runs: list[tuple[float, int, int]] = []
    start, first = None, 0
    for j, t in enumerate(times):
        b = math.floor(t / step) * step
        if b != start:
            if start is not None:
                runs.append((start, first, j))
            start, first = b, j
    if start is not None:
        runs.append((start, first, len(times)))
    return runs


def _points(
    times: list[float],
    lows: list[float],
    means: list[float],
    highs: list[float],
    runs: list[tuple[float, int, int]] | None,
) -> list[Point]:
    """(t, min, mean, max) for each cell with a reading (a NaN mean: none), or for each bucket of
    ``runs`` with one: the min of mins, mean of means and max of maxes."""
    if runs is None:
        return [(t, lo, m, hi) for t, lo, m, hi in zip(times, lows, means, highs, strict=True) if m == m]
    out = []
    for start, first, end in runs:
        point = _group(lows, means, highs, start, first, end)
        if point is not None:
            out.append(point)
    return out


def _group(
    lows: list[float], means: list[float], highs: list[float], start: float, first: int, end: int
) -> Point | None:
    """The point of cells [first, end): None where none has a reading (a NaN mean)."""
    total = sum(means[first:end])
    if total == total:  # no empty cell in the bucket: the usual case, three slices
        return (start, min(lows[first:end]), total / (end - first), max(highs[first:end]))
    keep = [j for j in range(first, end) if means[j] == means[j]]
    if not keep:
        return None
    return (start, min(lows[j] for j in keep), sum(means[j] for j in keep) / len(keep), max(highs[j] for j in keep))
