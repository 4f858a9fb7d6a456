"""How each GPU, CPU and chassis fan cools, held against its own past.

A cooler fails slowly: dust in a heatsink, paste drying on a second-hand card, a fan bearing
that turns a little slower each week. No threshold sees it until the card throttles. So each
subject learns a **baseline** in its first days of steady load (``learn``, 3 days by default):
for each band of load (25 W of a GPU's power, a tenth of the CPU's utilisation, 5 % of a fan's
PWM duty), how far above the room it settles (a GPU or CPU; and the fan duty a GPU needs
there, or a CPU the fan headers the board drives on its curve), or how fast a fan turns.
After that, the **drift** is how far the last ``window`` of steady load (6 h by default) runs
from that baseline at the same loads:

- steady: the load within 10 % of its 5-minute mean, above a floor (a GPU at 20 % of its
  limit and busy, a CPU at 20 %), for 10 minutes, so the temperature has settled. A dip of up
  to 3 minutes (a checkpoint's save, an evaluation, a data loader that stalls) is left out
  of the mean and of what counts, and the minutes after it as long as the dip lasted, but it
  does not end the steady load: a run that checkpoints every few minutes learns and compares;
- the baseline of a band is the coolest third of the learning that saw it for half an hour
  or more, so a fault that grows while the baseline is learned shows its drift afterwards,
  not half of it; and each GPU's baseline is held against those of its siblings (the same
  model in the same box) at the same power, and against what its last passing burn-in saw
  (``excess``: the hotter it learned, the more; the larger of the two);
- the room: an inlet or ambient sensor where hwmon has one, else the GPUs' temperature after
  10 minutes idle (the lower median of the box's GPUs, the last seen), else none (absolute); chosen
  once, with the baseline, and kept;
- a band of load first seen after the baseline is learned is learned on first sight (3 hours
  of steady load in it), and between two learned bands at most as hot as the line between
  them predicts, so a fault present when it moved there is not learned as normal: a GPU moved
  from 250 W to 340 W compares again within hours. "no comparison" until then;
- ``blind``: the time under load since a learned baseline last had a steady stretch to
  compare (a job that never holds its load, or powers not learned yet); an idle GPU is not
  blind, it has nothing to show;
- a rise that every GPU shares (the room, the chassis) is the box's: ``shared`` is the least
  drift of the box's GPUs, and each GPU's ``own`` drift is what it has beyond it.

All of it is a few additions a poll; each 10-minute bin closed is a few more, and the drift is
worked out then. The baselines and the last bins are kept in ``<state_dir>/cooling.json``
(written every 10 minutes and at close, read at start), so a restart or a reload keeps them;
``rigmon baseline reset`` removes a subject's from the file, and the daemon takes the file's
word when it finds it changed by another hand. A replay keeps its own in memory: it never
reads or writes the box's.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..model.sample import COOLING_FIELDS, Cooling, Drift, GpuReading, Sample, cooling_values, fan_key, mean_of
from ..model.text import printable
from ..system import statefile

log = logging.getLogger(__name__)

SETTLE_SECONDS = 600.0  # steady this long before its temperature counts: a heatsink's time constant is minutes
MAX_DIP = 180.0  # a dip of the load no longer than this (a checkpoint) leaves the steady load steady
LATE_LEARN = 3 * 3600.0  # steady load in a band first seen after the baseline, learned as its baseline
EWMA_SECONDS = 300.0  # the load's mean that steadiness is judged against
STEADY_SHARE = 0.10  # within this share of that mean
MAX_GAP = 600.0  # a tick further from the last than this counts as this much (a replay's sparse ticks, a pause)
BIN_SECONDS = 600.0  # the recent steady load in bins of this long (or until the band changes)
MIN_BAND_SECONDS = 1800.0  # a band the baseline saw for less than this is not compared against
MAX_BINS = 1200  # each subject's recent bins: the longest window's worth (7 days of 10-minute bins)
MAX_AGE = 14 * 86400.0  # a recent bin older than this is dropped, however little load came since
MAX_BANDS = 64
MAX_SUBJECTS = 256  # what a damaged file, or a box with very many sensors, can make us hold
FORMAT = 1
GPU_MIN_POWER_SHARE = 0.2  # of the enforced limit: below it a GPU is not under load
GPU_MIN_BUSY = 0.3
GPU_IDLE_BUSY = 0.05  # idle: at most this busy, and under a quarter of its limit...
GPU_IDLE_POWER_SHARE = 0.25
CPU_MIN_BUSY = 0.2
ROOM_SENSOR = re.compile(r"inlet|ambient|intake|room|outside|inflow", re.I)
CELSIUS = (-40.0, 150.0)


# GpuReading's fields before COOLING_FIELDS, which end it
_KEPT = len(GpuReading._fields) - len(COOLING_FIELDS)
assert GpuReading._fields[_KEPT:] == COOLING_FIELDS


class _Bin:
    __slots__ = ("band", "end", "fan", "fan_seconds", "load", "seconds", "start", "value")

    def __init__(self, start: float, band: int):
        self.start = self.end = start
        self.band = band
        self.seconds = self.value = self.fan = self.fan_seconds = self.load = 0.0

    def row(self) -> list[float]:
        return [self.end, float(self.band), self.seconds, self.value, self.fan, self.fan_seconds, self.load]


_STAMPS = itertools.count()


class _Recent:
    """The last window's closed bins, oldest first, and their sums by band: a judgement reads
    the sums (a few bands), not the bins (up to MAX_BINS). Each bin is
    [end, band, seconds, value×s, fan×s, fan seconds, load×s]; a band's sums are [bins, seconds,
    value×s, fan×s, fan seconds, load×s], its fan×s counted only where fan seconds were."""

    __slots__ = ("_pops", "bins", "seconds", "sums")

    def __init__(self) -> None:
        self.bins: deque[tuple[float, ...]] = deque()
        self.seconds = 0.0
        self.sums: dict[int, list[float]] = {}
        self._pops = 0

    def __iter__(self) -> Iterator[tuple[float, ...]]:
        return iter(self.bins)

    def __len__(self) -> int:
        return len(self.bins)

    def append(self, row: tuple[float, ...]) -> None:
        if len(self.bins) >= MAX_BINS:
            self.popleft()
        self.bins.append(row)
        self._count(row, 1.0)

    def popleft(self) -> None:
        self._count(self.bins.popleft(), -1.0)
        self._pops += 1
        if self._pops >= MAX_BINS:  # sums kept by adding and taking away drift: counted afresh now and then
            self._pops = 0
            self.seconds, self.sums = 0.0, {}
            for row in self.bins:
                self._count(row, 1.0)

    def trim(self, window: float, end: float | None = None) -> None:
        """The oldest bins off while the rest still hold ``window`` of steady load (and, given
        the newest bin's ``end``, those older than MAX_AGE)."""
        bins = self.bins
        while len(bins) > 1 and (
            self.seconds - bins[0][2] >= window or (end is not None and end - bins[0][0] > MAX_AGE)
        ):
            self.popleft()

    def _count(self, row: tuple[float, ...], sign: float) -> None:
        _, band, seconds, value, fan, fan_seconds, load = row
        key = int(band)
        s = self.sums.get(key)
        if s is None:
            s = self.sums[key] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        s[0] += sign
        if s[0] <= 0:
            del self.sums[key]
        else:
            s[1] += sign * seconds
            s[2] += sign * value
            if fan_seconds > 0:
                s[3] += sign * fan
                s[4] += sign * fan_seconds
            s[5] += sign * load
        self.seconds += sign * seconds


class Track:
    """One subject: how steady its load is, its baseline by band of load, its recent bins.

    A bin (and a baseline's band) holds seconds of settled steady load and the integrals over
    them of the value (°C over the room, or rpm), the fan duty and the load: [end, band, seconds,
    value×s, fan×s, fan seconds, load×s] (a baseline's band: from seconds to load×s)."""

    __slots__ = (
        "_bin",
        "_dip",
        "_ewma",
        "_in_band",
        "_last",
        "_resume",
        "_steady_since",
        "bands",
        "blind",
        "first",
        "index",
        "learn",
        "late",
        "learned",
        "recent",
        "stamp",
        "thirds",
        "width",
        "window",
    )

    def __init__(self, width: float, learn: float, window: float):
        self.width = width  # a band of load
        self.learn = learn  # seconds from the first steady load counted to a learned baseline
        self.window = window  # the steady load the drift is judged over
        self.first: float | None = None  # when the first steady load counted: learning started
        self.index: int | None = None  # a GPU's index when last seen (the file's subjects are UUIDs)
        self.learned = False
        self.bands: dict[int, list[float]] = {}  # band -> [seconds, value×s, fan×s, fan seconds, load×s]
        self.recent = _Recent()  # the last window's closed bins
        self._ewma: float | None = None
        self._last: float | None = None
        self._steady_since: float | None = None
        self._dip: float | None = None  # the last poll in the band before a dip, while it lasts
        self._in_band: float | None = None  # the last poll in the band
        self._resume = 0.0  # after a dip: when its load counts again
        self._bin: _Bin | None = None
        # while learning: each third of ``learn``'s [seconds, value×s, fan×s, fan seconds] by band
        self.thirds: dict[int, list[list[float]]] = {}
        # after: bands first seen since, learned on first sight: [seconds, value×s, fan×s, fan seconds, load×s]
        self.late: dict[int, list[float]] = {}
        self.blind = 0.0  # learned: seconds under load since a steady stretch it could compare
        self.stamp = next(_STAMPS)  # taken again as its learned baseline changes: what a judgement of it may keep

    def add(self, t: float, load: float | None, floor: float, value: float | None, fan: float | None) -> bool:
        """One poll: ``load`` (None, or under ``floor``: not under load), the ``value`` it
        settles at and its fan duty. True when a bin closed (the drift may have moved)."""
        last, self._last = self._last, t
        dt = min(t - last, MAX_GAP) if last is not None and t > last else 0.0
        ewma = self._ewma
        loaded = load is not None and load >= floor
        if loaded and self.learned:
            self.blind += dt  # until a steady stretch it can compare closes
        if not loaded or (ewma is not None and abs(load - ewma) > STEADY_SHARE * ewma):
            # out of the band: a dip while it is short, else the steady load has ended
            if self._steady_since is not None and self._in_band is not None and t - self._in_band <= MAX_DIP:
                self._dip = self._in_band
                return False
            self._steady_since = self._dip = None
            self._ewma = load if loaded else None
            return self._close(t)
        if self._dip is not None:  # back from a dip: the minutes after it settle as long as it lasted
            self._resume = t + min(t - self._dip, SETTLE_SECONDS)
            self._dip = None
            dt = 0.0
        else:
            ewma = load if ewma is None else ewma + (load - ewma) * (1.0 - math.exp(-dt / EWMA_SECONDS))
        self._ewma = ewma
        self._in_band = t
        if self._steady_since is None:
            self._steady_since = t
        if t - self._steady_since < SETTLE_SECONDS or t < self._resume or value is None or dt <= 0:
            return False
        band = int(ewma // self.width)
        closed = False
        b = self._bin
        if b is not None and (b.band != band or t - b.start >= BIN_SECONDS):
            closed = self._close(t)
            b = None
        if b is None:
            b = self._bin = _Bin(t - dt, band)
        b.end = t
        b.seconds += dt
        b.value += value * dt
        b.load += load * dt
        if fan is not None:
            b.fan += fan * dt
            b.fan_seconds += dt
        return closed

    def _close(self, t: float) -> bool:
        b, self._bin = self._bin, None
        if b is None or b.seconds <= 0:
            return False
        self._take(b.row())
        return True

    def _take(self, row: list[float]) -> None:
        """A closed bin: into the baseline while learning, else into the recent window."""
        end, band, seconds = row[:3]
        if self.first is None:
            self.first = end - seconds
        self.freeze_if_due(end)
        key = int(band)
        if not self.learned:
            cell = self.bands.get(key)
            if cell is None:
                if len(self.bands) >= MAX_BANDS:
                    return
                cell = self.bands[key] = [0.0, 0.0, 0.0, 0.0, 0.0]
                self.thirds[key] = [[0.0, 0.0, 0.0, 0.0] for _ in range(3)]
            third = self.thirds.setdefault(key, [[0.0, 0.0, 0.0, 0.0] for _ in range(3)])
            part = min(2, max(0, int(3 * (end - self.first) / self.learn))) if self.learn > 0 else 0
            _add(cell, row)
            _add(third[part], row)
            return
        if key in self.bands:
            self.blind = 0.0
        elif key in self.late or len(self.bands) + len(self.late) < MAX_BANDS:
            cell = self.late.setdefault(key, [0.0, 0.0, 0.0, 0.0, 0.0])
            _add(cell, row)
            if cell[0] >= LATE_LEARN:
                self.bands[key] = self._as_neighbours_predict(key, self.late.pop(key))
                self.stamp = next(_STAMPS)
        # what the next judgement reads: the last window of steady load, and no older than MAX_AGE
        self.recent.append(tuple(row))
        self.recent.trim(self.window, end)

    def freeze_if_due(self, t: float) -> None:
        """Learning ends ``learn`` after it started: the bands seen long enough are the baseline,
        each at its coolest third (of those that saw it for MIN_BAND_SECONDS): a fault that grew
        while it learned is not taken for normal."""
        if not self.learned and self.first is not None and t - self.first >= self.learn:
            self.learned, self.stamp = True, next(_STAMPS)
            self.bands = {k: c for k, c in self.bands.items() if c[0] >= MIN_BAND_SECONDS}
            for k, cell in self.bands.items():
                thirds = [p for p in self.thirds.get(k, ()) if p[0] >= MIN_BAND_SECONDS]
                if thirds:
                    cell[1] = min(cell[1] / cell[0], *(p[1] / p[0] for p in thirds)) * cell[0]
                fans = [p for p in thirds if p[3] >= MIN_BAND_SECONDS]
                if fans and cell[3] > 0:
                    cell[2] = min(cell[2] / cell[3], *(p[2] / p[3] for p in fans)) * cell[3]
            self.thirds = {}

    def _as_neighbours_predict(self, band: int, cell: list[float]) -> list[float]:
        """A band learned on first sight, at most as hot as the learned bands on either side of it
        predict (the line between them, at its mean load). Outside them, its own: a line drawn
        past the bands learned is no prediction (the room taken from idle GPUs puts the line's
        foot above 0 W, and a fan turns faster under more load)."""
        if not self.bands:
            return cell
        rise = {k: c[1] / c[0] for k, c in self.bands.items()}
        at = {k: _load(k, c, self.width) for k, c in self.bands.items()}  # each band's mean load
        below = [k for k in rise if k < band]
        above = [k for k in rise if k > band]
        load = _load(band, cell, self.width)
        predicted = None
        if below and above:
            lo, hi = max(below), min(above)
            if at[hi] > at[lo]:
                predicted = rise[lo] + (rise[hi] - rise[lo]) * (load - at[lo]) / (at[hi] - at[lo])
        if predicted is not None and predicted * cell[0] < cell[1]:
            cell = [cell[0], predicted * cell[0], *cell[2:]]
        return cell

    def judge(self, t: float, subject: str) -> Drift:
        """The drift over the last ``window`` seconds of steady load, against the baseline."""
        window = self.window
        self.freeze_if_due(t)
        if not self.learned:
            left = self.learn - (t - self.first) if self.first is not None else self.learn
            return Drift(subject, "learning", max(0.0, left), None)
        steady = self.recent.seconds  # the recent bins hold the last window, no more
        compared = over = base = load = fan_over = fan_seconds = 0.0
        for band, (_, seconds, value, fan, fs, at) in self.recent.sums.items():
            cell = self.bands.get(band)
            if cell is None:
                continue
            compared += seconds
            rise = cell[1] / cell[0]
            over += value - rise * seconds
            base += rise * seconds
            load += at
            if fs > 0 and cell[3] > 0:
                fan_over += fan - cell[2] / cell[3] * fs
                fan_seconds += fs
        if steady < window:
            return Drift(subject, "measuring", 0.0, None, blind=self.blind)
        if compared < window / 2:
            return Drift(subject, "no comparison", 0.0, None, blind=self.blind)
        return Drift(
            subject,
            "comparing",
            0.0,
            over / compared,
            fan_over / fan_seconds if fan_seconds else None,
            None,
            load / compared,
            base / compared,
            self.blind,
        )

    # --- the file ----------------------------------------------------------------------------
    def plain(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "last": self._last,
            "first": self.first,
            "learned": self.learned,
            "bands": [[k, *c] for k, c in sorted(self.bands.items())],
            "recent": list(self.recent),
            "thirds": [[k, *(x for p in parts for x in p)] for k, parts in sorted(self.thirds.items())],
            "late": [[k, *c] for k, c in sorted(self.late.items())],
            "blind": self.blind,
        }

    @classmethod
    def from_plain(cls, width: float, learn: float, window: float, data: object) -> Track | None:
        """A kept track, checked as any input: None where anything in it is not what we write."""
        if not isinstance(data, dict):
            return None
        first, learned, bands, recent = (data.get(k) for k in ("first", "learned", "bands", "recent"))
        if (first is not None and not _finite(first)) or not isinstance(learned, bool):
            return None
        if not isinstance(bands, list) or not isinstance(recent, list) or len(bands) > MAX_BANDS:
            return None
        track = cls(width, learn, window)
        for row in bands:
            # its mean load×s last (a row kept before it was: the band's centre)
            if not (isinstance(row, list) and len(row) in (5, 6) and all(_finite(x) for x in row)):
                return None
            band, seconds, value, fan, fan_seconds = row[:5]
            if not (0 <= band < 1e6 and 0 < seconds < 1e9 and 0 <= fan_seconds <= seconds):
                return None
            load = row[5] if len(row) == 6 else (band + 0.5) * width * seconds
            track.bands[int(band)] = [float(seconds), float(value), float(fan), float(fan_seconds), float(load)]
        for row in recent[-MAX_BINS:]:
            if not (isinstance(row, list) and len(row) == 7 and all(_finite(x) for x in row)):
                return None
            if not (0 <= row[1] < 1e6 and 0 < row[2] <= 86400 and 0 <= row[5] <= row[2]):
                return None
            track.recent.append(tuple(float(x) for x in row))
        track.recent.trim(window)  # a file kept for a longer window: its last one
        # what learns beside the baseline (absent from older files: learned from now)
        track.thirds = {k: [c[0:4], c[4:8], c[8:12]] for k, c in _cells(data.get("thirds"), 12, MAX_BANDS).items()}
        track.late = _cells(data.get("late"), 5, MAX_BANDS - len(track.bands))
        blind = data.get("blind")
        track.blind = float(blind) if _finite(blind) and 0 <= blind < 1e9 else 0.0
        index = data.get("index")
        track.index = index if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < 1024 else None
        last = data.get("last")
        track._last = float(last) if _finite(last) else None
        track.first = float(first) if first is not None else None
        track.learned = learned
        return track

    @property
    def last(self) -> float | None:
        """When it was last polled (a kept file's "now")."""
        return self._last


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and abs(x) < 1e12


def _add(cell: list[float], row: list[float]) -> None:
    """A closed bin's row (end, band, seconds, value×s, fan×s, fan seconds, load×s) into a cell
    of the same sums from seconds on: a band's five, a third's four (no load)."""
    for n in range(len(cell)):
        cell[n] += row[2 + n]


def _load(band: int, cell: list[float], width: float) -> float:
    """A band's mean load, from its cell's load×s."""
    return cell[4] / cell[0] if cell[0] > 0 else (band + 0.5) * width


def _cells(rows: object, width: int, most: int) -> dict[int, list[float]]:
    """A kept table of [band, seconds, value×s, fan×s, fan seconds, …] rows (``width`` numbers
    after the band): {} where it is missing or anything in it is not what we write."""
    if not isinstance(rows, list) or len(rows) > max(most, 0):
        return {}
    out = {}
    for row in rows:
        if not (isinstance(row, list) and len(row) == width + 1 and all(_finite(x) for x in row)):
            return {}
        if not (0 <= row[0] < 1e6 and all(x >= 0 for x in row[1::4]) and all(-1e12 < x for x in row[1:])):
            return {}
        out[int(row[0])] = [float(x) for x in row[1:]]
    return out


def _celsius(v: float | None) -> float | None:
    return v if v is not None and CELSIUS[0] <= v <= CELSIUS[1] else None


PARTS = {"gpus": "GPU", "cpus": "CPU", "fans": "fan"}  # the file's parts, and what each holds
WIDTHS = {"cpus": 0.1, "fans": 0.05}  # a band of a CPU's utilisation, of a fan's duty (a GPU's: band_watts)


def _over(bands: dict[int, list[float]], rise: dict[int, float], reference) -> float | None:
    """How much hotter ``rise`` runs than ``reference(band)`` over the bands it gives, by the
    baseline's seconds in each; None where it gives none."""
    over = weight = 0.0
    for band, cell in bands.items():
        against = reference(band)
        if against is not None:
            over += (rise[band] - against) * cell[0]
            weight += cell[0]
    return over / weight if weight else None


def judged(part: str, track: Track, t: float, subject: str) -> Drift:
    """A track's drift as every output shows it: a fan's rpm over its baseline's as a ratio (-0.1:
    a tenth slower), a GPU's or CPU's in °C."""
    d = track.judge(t, subject)
    if part == "fans" and d.drift is not None and d.baseline:
        d = d._replace(drift=d.drift / d.baseline)
    return d


class Detector:
    """The stage a pipeline runs after each poll: ``annotate(sample)`` gives the sample with its
    cooling (``sample.cooling``), from every poll so far and what ``path`` kept."""

    def __init__(
        self,
        path: Path | None,
        learn: float = 3 * 86400.0,
        window: float = 6 * 3600.0,
        band_watts: float = 25.0,
        keep: bool = True,
    ):
        self.path = path  # None: a replay's, held in memory only
        self.keep = keep  # learned into the file (the daemon); else the file is read at start, never written
        self.learn, self.window = learn, window
        self.widths = {"gpus": band_watts, **WIDTHS}
        self.reference: str | None = None  # inlet | idle | none: chosen once, with the first baseline
        self.tracks: dict[str, dict[str, Track]] = {"gpus": {}, "cpus": {}, "fans": {}}  # GPUs by UUID
        self.burnin: dict[str, Track] = {}  # each GPU's last passing burn-in, by UUID: what its baseline is held to
        self._idle: dict[str, tuple[float | None, float | None]] = {}  # uuid -> (idle since, its last idle °C)
        self._room: float | None = None
        self._room_labels: dict[str, bool] = {}  # hwmon labels, and whether each is the room's
        self._first_poll: float | None = None
        self._cooling: Cooling | None = None
        self._judged_at = 0.0
        self._fields: dict[int, tuple[Any, ...]] = {}  # each GPU's cooling as its COOLING_FIELDS
        self._excess_of: tuple[tuple[Any, ...], dict[int, float]] | None = None  # the baselines it was of, it
        self._saved_at: float | None = None
        self._stamp: tuple[int, int, int] | None = None  # the file as we last wrote or read it
        self._dirty = False
        if path is not None:
            self.load()

    # --- a poll ------------------------------------------------------------------------------
    def annotate(self, sample: Sample) -> Sample:
        t = sample.time
        if self._first_poll is None:
            self._first_poll = t
        # every BIN_SECONDS (or when the clock went back): the file, if another hand changed it, then a save
        due = (
            self.keep
            and self.path is not None
            and (self._saved_at is None or not 0 <= t - self._saved_at < BIN_SECONDS)
        )
        if due:
            self._saved_at = t
            self._take_outside_edits()
        room = self._room_of(sample, t)
        closed = False
        for g in sample.gpus:
            if g.lost:
                continue
            track = self._track("gpus", g.uuid)
            if track is None:
                continue
            track.index = g.index
            busy, limit = g.utilization_gpu_ratio, g.power_limit_watts
            load = g.power_watts if busy is not None and busy >= GPU_MIN_BUSY else None
            temp = _celsius(g.temperature_celsius)
            rise = temp - room if temp is not None and room is not None else None
            fans = g.fan_speed_ratios
            fan = mean_of(fans) if fans else None
            closed |= track.add(t, load, GPU_MIN_POWER_SHARE * limit if limit else 1.0, rise, fan)
        host = sample.host
        if host is not None:
            busy = host.cpu_utilization_ratio
            # the duty of the headers the board drives on its curve: what it needs to hold the CPU there
            curve = [
                f.pwm_ratio
                for f in host.fan_controls
                if f.pwm_mode is not None and f.pwm_mode >= 2 and f.pwm_ratio is not None and 0 <= f.pwm_ratio <= 1
            ]
            on_curve = sum(curve) / len(curve) if curve else None
            for c in host.cpu_temperatures:
                track = self._track("cpus", f"cpu{c.socket}")
                if track is not None:
                    temp = _celsius(c.celsius)
                    rise = temp - room if temp is not None and room is not None else None
                    closed |= track.add(t, busy, CPU_MIN_BUSY, rise, on_curve)
            if host.fan_controls:
                duty = {(f.chip, f.device, f.fan): f.pwm_ratio for f in host.fan_controls}
                for f in host.fans:
                    pwm = duty.get((f.chip, f.device or "", f.label))
                    track = self._track("fans", fan_key(f)) if pwm is not None else None
                    if track is not None:
                        closed |= track.add(t, pwm, 0.05, f.rpm if f.rpm > 0 else None, None)
        if closed:
            self._dirty = True
        if due and self._dirty:
            self.save()
        # the drift moves only as a bin closes (or the file changed); how long it has been blind, with time
        if closed or self._cooling is None or not 0 <= t - self._judged_at < BIN_SECONDS:
            self._judged_at = t
            self._cooling = self._judge(sample, t)
        return self._shown(sample, self._cooling)

    def _shown(self, sample: Sample, cooling: Cooling) -> Sample:
        """The sample with its cooling: each GPU's as its last fields (COOLING_FIELDS, made as a
        bin closes: a tuple joined each poll, not a _replace), each CPU's and fan's drift on its
        record where it has one."""
        fields = self._fields
        gpus = tuple(
            tuple.__new__(type(g), g[:_KEPT] + fields[g.index]) if g.index in fields else g for g in sample.gpus
        )
        host = sample.host
        cpus = {k: d for k, d in cooling.cpus.items() if d.drift is not None}
        fans = {k: d.drift for k, d in cooling.fans.items() if d.drift is not None}
        if host is not None and (cpus or fans):
            host = host._replace(
                cpu_temperatures=tuple(
                    c._replace(drift_celsius=cpus[c.socket].drift, fan_drift_ratio=cpus[c.socket].fan_drift)
                    if c.socket in cpus
                    else c
                    for c in host.cpu_temperatures
                ),
                fans=tuple(
                    f._replace(rpm_drift=drift) if (drift := fans.get(fan_key(f))) is not None else f for f in host.fans
                ),
            )
        return sample._replace(gpus=gpus, host=host, cooling=cooling)

    def _track(self, part: str, key: str) -> Track | None:
        tracks = self.tracks[part]
        track = tracks.get(key)
        if track is None:
            if sum(len(t) for t in self.tracks.values()) >= MAX_SUBJECTS:
                return None
            track = tracks[key] = Track(self.widths[part], self.learn, self.window)
        return track

    def _is_room(self, label: str) -> bool:
        """An inlet or ambient sensor's label (each label matched once)."""
        known = self._room_labels.get(label)
        if known is None:
            if len(self._room_labels) >= MAX_SUBJECTS:
                self._room_labels.clear()
            known = self._room_labels[label] = ROOM_SENSOR.search(label) is not None
        return known

    def _room_of(self, sample: Sample, t: float) -> float | None:
        """The room's temperature now, as ``reference`` takes it: chosen at the first poll that
        offers an inlet sensor or a GPU settled idle, or after a day without either (none)."""
        host = sample.host
        inlet = None
        if host is not None and host.temperatures:
            inlet = mean_of(_celsius(s.celsius) for s in host.temperatures if self._is_room(s.label))
        for g in sample.gpus:  # each GPU's temperature once settled idle: the room, near enough
            if g.lost:
                continue
            since, temp = self._idle.get(g.uuid, (None, None))
            busy, power, limit = g.utilization_gpu_ratio, g.power_watts, g.power_limit_watts
            if (
                busy is None
                or busy > GPU_IDLE_BUSY
                or power is None
                or (limit and power > GPU_IDLE_POWER_SHARE * limit)
            ):
                self._idle[g.uuid] = (None, temp)  # under load: its last idle temperature stands
                continue
            since = t if since is None else since
            now = _celsius(g.temperature_celsius)
            self._idle[g.uuid] = (since, now if now is not None and t - since >= SETTLE_SECONDS else temp)
        idle = sorted(temp for _, temp in self._idle.values() if temp is not None)
        if self.reference is None:
            if inlet is not None:
                self.reference = "inlet"
            elif idle:
                self.reference = "idle"
            elif self._first_poll is not None and t - self._first_poll >= 86400:
                self.reference = "none"
        if self.reference == "inlet":
            self._room = inlet if inlet is not None else self._room
        elif self.reference == "idle":
            self._room = idle[(len(idle) - 1) // 2] if idle else self._room  # the lower median: nearest the room
        elif self.reference == "none":
            self._room = 0.0
        return self._room

    def _judge(self, sample: Sample, t: float) -> Cooling:
        index = {g.uuid: g.index for g in sample.gpus}
        gpus = {
            index[uuid]: track.judge(t, str(index[uuid]))
            for uuid, track in self.tracks["gpus"].items()
            if uuid in index
        }
        drifts = [d.drift for d in gpus.values() if d.drift is not None]
        shared = min(drifts) if len(drifts) >= 2 else None
        fans = [d.fan_drift for d in gpus.values() if d.fan_drift is not None]
        fan_shared = max(min(fans), 0.0) if len(fans) >= 2 else 0.0  # every GPU's fans faster: the room's
        excess = self._excess(sample)
        for k, d in gpus.items():
            over = excess.get(k)
            if over is not None and d.drift is not None:
                over += min(d.drift, 0.0)  # cleaned since: cooler than its baseline, it no longer runs hotter
            d = d._replace(excess=over)
            if d.drift is not None:
                d = d._replace(own=d.drift - max(shared or 0.0, 0.0))  # a shared fall is no GPU's own rise
            if d.fan_drift is not None:
                d = d._replace(fan_drift=d.fan_drift - fan_shared)
            gpus[k] = d
        cpus = {int(key[3:]): track.judge(t, key) for key, track in self.tracks["cpus"].items()}
        fans = {key: judged("fans", track, t, key) for key, track in self.tracks["fans"].items()}
        self._fields = {k: cooling_values(d) for k, d in gpus.items()}
        return Cooling(gpus, cpus, fans, shared, self.reference or "pending")

    def _excess(self, sample: Sample) -> dict[int, float]:
        """Each GPU with a learned baseline: how much hotter it learned than the median of its
        siblings' (the same model in this box) over the bands they share, by their seconds, or
        than its last passing burn-in saw at the same powers, whichever is more (``_judge``
        takes off what it has run cooler than its baseline since)."""
        names = {i.uuid: i.name for i in sample.gpu_info}
        # it moves only as a baseline is learned (or a GPU renamed, renumbered, burnt in)
        of = (
            tuple((u, t.stamp, t.index, names.get(u)) for u, t in self.tracks["gpus"].items() if t.learned),
            tuple((u, t.stamp) for u, t in self.burnin.items()),
        )
        if self._excess_of is not None and self._excess_of[0] == of:
            return self._excess_of[1]
        learned = {
            uuid: (track.index, names.get(uuid), {k: c[1] / c[0] for k, c in track.bands.items()})
            for uuid, track in self.tracks["gpus"].items()
            if track.learned and track.index is not None and track.bands
        }
        out: dict[int, float] = {}
        for uuid, (index, name, rise) in learned.items():
            bands = self.tracks["gpus"][uuid].bands

            def sibling(band: int, uuid: str = uuid, name: str | None = name) -> float | None:
                others = sorted(r[band] for u, (_, n, r) in learned.items() if u != uuid and n == name and band in r)
                return others[(len(others) - 1) // 2] if others else None

            burnin = self.burnin.get(uuid)
            seen = {k: c[1] / c[0] for k, c in burnin.bands.items() if c[0] >= MIN_BAND_SECONDS} if burnin else {}
            found = [x for x in (_over(bands, rise, sibling), _over(bands, rise, seen.get)) if x is not None]
            if found:
                out[index] = max(found)
        self._excess_of = (of, out)
        return out

    # --- the file ----------------------------------------------------------------------------
    def plain(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "reference": self.reference,
            # each GPU's last temperature settled idle: the room after a restart under load, too
            "idle": {uuid: temp for uuid, (_, temp) in self._idle.items() if temp is not None},
            **{part: {k: v.plain() for k, v in tracks.items()} for part, tracks in self.tracks.items()},
            "burnin": {uuid: track.plain() for uuid, track in self.burnin.items()},
        }

    def save(self) -> None:
        if self.path is None:
            return
        try:
            write_file(self.path, self.plain())
            self._stamp = _stamp(self.path)
            self._dirty = False
        except OSError as e:
            log.warning("cannot keep the cooling baselines in %s: %s", self.path, e.strerror or e)

    def load(self) -> None:
        """What an earlier daemon learned; a file that cannot be read is said once and left for
        the next save to replace (its subjects learn afresh)."""
        if self.path is None:
            return
        data = read_file(self.path)
        self._stamp = _stamp(self.path)
        if data is not None:
            self._take(data)

    def _take(self, data: dict[str, Any]) -> None:
        self.reference = data.get("reference") if data.get("reference") in ("inlet", "idle", "none") else None
        idle = data.get("idle")
        if isinstance(idle, dict):
            self._idle = {
                uuid: (None, float(temp))
                for uuid, temp in list(idle.items())[:MAX_SUBJECTS]
                if isinstance(uuid, str) and len(uuid) <= 256 and _finite(temp) and _celsius(temp) is not None
            }
        burnin = data.get("burnin")
        self.burnin = {}
        for uuid, plain in list(burnin.items())[:MAX_SUBJECTS] if isinstance(burnin, dict) else ():
            track = Track.from_plain(self.widths["gpus"], self.learn, self.window, plain)
            if isinstance(uuid, str) and len(uuid) <= 256 and track is not None:
                self.burnin[uuid] = track
        for part, kept in data.items():
            if part not in self.tracks:
                continue
            tracks: dict[str, Track] = {}
            for key, plain in list(kept.items())[:MAX_SUBJECTS]:
                track = Track.from_plain(self.widths[part], self.learn, self.window, plain)
                if track is None:
                    log.warning("%s: the baseline of %s is damaged: it learns afresh", self.path, printable(key)[:80])
                else:
                    tracks[key] = track
            self.tracks[part] = tracks
        self._cooling = None

    def seed(self) -> tuple[list[int], list[int]]:
        """After a passing burn-in: each GPU whose steady load this (read-only) detector saw for
        long enough keeps what it saw in the box's file as its burn-in, which its baseline is
        held to from then on (``excess``; ``rigmon baseline reset`` leaves it), and one that has
        no learned baseline takes it as its baseline, learned now (a running daemon takes the
        file's word within 10 minutes). Only where the room was read the same way as the file's
        baselines. Returns the GPUs' indices (seeded, kept as their burn-in)."""
        if self.path is None or self.reference is None:
            return [], []
        data = read_file(self.path) or {"format": FORMAT, "reference": None, "gpus": {}, "cpus": {}, "fans": {}}
        if data.get("reference") not in (None, self.reference):
            return [], []
        seeded, measured = [], []
        burnins = data["burnin"] = data["burnin"] if isinstance(data.get("burnin"), dict) else {}
        for uuid, track in self.tracks["gpus"].items():
            if track.last is not None:
                track._close(track.last)  # the bin still open
            bands = self._seen(track)
            if not bands or track.index is None:
                continue
            taken = Track(track.width, track.learn, track.window)
            taken.index, taken.first, taken.learned, taken.bands = track.index, track.first, True, bands
            taken._last = track.last
            if uuid in burnins or len(burnins) < MAX_SUBJECTS:
                burnins[uuid] = taken.plain()
                measured.append(track.index)
            kept = data["gpus"].get(uuid)
            if isinstance(kept, dict) and kept.get("learned") is True:
                continue  # its own first days stand: the burn-in is what they are held to
            data["gpus"][uuid] = taken.plain()
            seeded.append(track.index)
        if measured:
            data["reference"] = self.reference
            data["idle"] = {**(data.get("idle") or {}), **self.plain()["idle"]}
            write_file(self.path, data)
        return sorted(seeded), sorted(measured)

    def _seen(self, track: Track) -> dict[int, list[float]]:
        """The bands of steady load this detector saw long enough: what it learned, or where
        the file's baseline was learned already, its recent bins since the first poll."""
        if not track.learned:
            return {k: c for k, c in track.bands.items() if c[0] >= MIN_BAND_SECONDS}
        bands: dict[int, list[float]] = {}
        for row in track.recent:
            if self._first_poll is not None and row[0] > self._first_poll:
                _add(bands.setdefault(int(row[1]), [0.0, 0.0, 0.0, 0.0, 0.0]), list(row))
        return {k: c for k, c in bands.items() if c[0] >= MIN_BAND_SECONDS}

    def _take_outside_edits(self) -> None:
        """``rigmon baseline reset`` (or an operator) changed the file: its word stands."""
        if self.path is None:
            return
        stamp = _stamp(self.path)
        if stamp is not None and stamp != self._stamp:
            self._stamp = stamp
            data = read_file(self.path)
            if data is not None:
                log.info("%s changed: the cooling baselines are taken from it", self.path)
                self._take(data)
                self._dirty = True

    def close(self) -> None:
        if self.keep and self.path is not None:
            self._take_outside_edits()
            self.save()


def baselines_path(state_dir: Path) -> Path:
    """Where a box's daemon keeps its cooling baselines."""
    return Path(state_dir) / "cooling.json"


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


MAX_FILE_BYTES = 8 << 20


def write_file(path: Path, data: dict[str, Any]) -> None:
    """Atomically, the owner's alone."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    statefile.write_atomic(path, json.dumps(data, separators=(",", ":")).encode())


def read_file(path: Path) -> dict[str, Any] | None:
    """The kept baselines as plain data, checked for shape (each track is checked as it is
    taken); None, said once, where the file is missing or not ours."""
    try:
        data = statefile.read_json(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("%s cannot be read (%s): the cooling baselines learn afresh", path, printable(str(e))[:200])
        return None
    if not (
        isinstance(data, dict) and data.get("format") == FORMAT and all(isinstance(data.get(p), dict) for p in PARTS)
    ):
        log.warning("%s is not a rigmon cooling file: the cooling baselines learn afresh", path)
        return None
    for part in PARTS:
        data[part] = {k: v for k, v in data[part].items() if isinstance(k, str) and len(k) <= 256}
    return data
