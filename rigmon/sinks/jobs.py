"""The ledger of jobs: who used the GPUs, for how long, and what each run cost.

A job is what a GPU process belongs to (``ProcessInfo.job``): its container, systemd
service or Slurm job, else the launcher above it (``torchrun:<pid>``…), else its process
group (a training script and the workers it started), keyed with its owner
(``alice/pgid:4242``: see ``rigmon.readers.procs``). The ledger follows every job that
holds a GPU, poll by poll. Each interval between two polls of a GPU belongs to the jobs on
it at the interval's start, split by their SM share then where NVML gives it, else evenly:

- GPU time: ``gpu_seconds`` is that split share (on a GPU two jobs share, their GPU-hours
  add up to the GPU's hours), ``held_seconds`` the whole interval for each job on the GPU
  (the time it held the GPU, shared or not);
- energy: each GPU's energy counter rise, spread over the intervals since the counter last
  moved in proportion to the power read at each, each interval's part split as its time.
  The counter is read every ``gpu.slow_interval``, and at every poll where the GPU's set of
  processes changes and the one after, so no energy crosses a job's boundary. A GPU without
  a counter has its power integrated instead, and the job says so (``energy_estimated``);
- how it ran: mean power against the limit, mean utilisation, peak temperature, time
  throttled (thermal, power brake, HW slowdown), the alerts that fired on its GPUs;
- starved: busy (utilisation ≥ ``jobs.starved_utilization``) but below
  ``jobs.starved_power_ratio`` of the power limit for most of its busy time: the GPU waited
  on something else (data loading, a slow PCIe link, the CPU). A job busy for less than
  ``STARVED_MIN_BUSY_SECONDS`` is too short to judge (None).

A job ends when it has held no GPU for ``jobs.end_after``. The ledger lives in
``<state_dir>/jobs.sqlite`` (WAL, committed every few seconds and at every start and end),
with each GPU's last energy reading: a daemon restarted mid-job finds its jobs and goes on
(the energy used while it was down goes to the jobs on the GPU when it stopped that still
run). Each finished job is one InfluxDB point (``job``), and the energy of all jobs is a
Prometheus counter by user.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..model.durations import format_duration
from ..model.sample import SLOWDOWNS, GpuReading, Sample
from ..model.text import printable
from ..readers.procs import executable
from ..system import statefile

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from ..alerts.engine import Transition
    from ..config.box import Box
    from ..config.schema import JobsConfig
    from ..model.sample import ProcessInfo

log = logging.getLogger(__name__)

COMMIT_SECONDS = 10.0  # sample time between commits of the running jobs
_UNAVAILABLE = re.compile(r"locked|unable to open|readonly|read-only|disk I/O|permission|authoriz", re.I)
PRUNE_SECONDS = 3600.0  # sample time between prunings of jobs older than jobs.keep
MAX_GAP_SECONDS = 7 * 24 * 3600.0  # a longer gap between two readings of a GPU is not booked
STARVED_MIN_BUSY_SECONDS = 60.0  # busy for less than this, a job is too short to call starved
MAX_PENDING = 4096  # intervals a GPU keeps waiting for its energy counter to move

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    user TEXT,
    command TEXT,
    unit TEXT,
    started REAL NOT NULL,
    last_seen REAL NOT NULL,
    ended REAL,
    process_start REAL,
    gpus TEXT NOT NULL DEFAULT '[]',
    gpu_seconds REAL NOT NULL DEFAULT 0,
    held_seconds REAL NOT NULL DEFAULT 0,
    energy_joules REAL NOT NULL DEFAULT 0,
    energy_estimated INTEGER NOT NULL DEFAULT 0,
    power_seconds REAL NOT NULL DEFAULT 0,
    limit_seconds REAL NOT NULL DEFAULT 0,
    utilization_seconds REAL NOT NULL DEFAULT 0,
    busy_seconds REAL NOT NULL DEFAULT 0,
    starved_seconds REAL NOT NULL DEFAULT 0,
    throttle_seconds REAL NOT NULL DEFAULT 0,
    peak_temperature REAL,
    alerts TEXT NOT NULL DEFAULT '[]',
    busy_by_gpu TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS jobs_open ON jobs (ended);
CREATE INDEX IF NOT EXISTS jobs_newest ON jobs (started DESC, id DESC);
-- each user's energy at start, from this index alone (a start reads 100,000 jobs in 7 ms, not 35)
CREATE INDEX IF NOT EXISTS jobs_user_energy ON jobs (user, energy_joules) WHERE ended IS NOT NULL;
CREATE TABLE IF NOT EXISTS pruned_energy (
    user TEXT PRIMARY KEY,
    joules REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS gpu_energy (
    uuid TEXT PRIMARY KEY,
    time REAL NOT NULL,
    joules REAL NOT NULL,
    jobs TEXT NOT NULL DEFAULT '[]'
);
"""


@dataclass(eq=False)  # a job is itself: keyed by identity while its energy waits for a counter
class Job:
    id: int
    key: str
    user: str | None
    command: str | None
    unit: str | None
    started: float
    last_seen: float
    ended: float | None = None
    process_start: float | None = None
    gpus: set[int] = field(default_factory=set)
    gpu_seconds: float = 0.0  # its share of each GPU's time
    held_seconds: float = 0.0  # the time it held GPUs, each counted whole
    energy_joules: float = 0.0
    energy_estimated: bool = False  # some of its energy is power × time (a GPU without an energy counter)
    power_seconds: float = 0.0  # ∫ power dt over its GPUs (W·s), for the mean power
    limit_seconds: float = 0.0  # ∫ limit dt, for the mean power against the limit
    utilization_seconds: float = 0.0
    busy_seconds: float = 0.0
    starved_seconds: float = 0.0
    throttle_seconds: float = 0.0
    peak_temperature: float | None = None
    alerts: set[str] = field(default_factory=set)
    busy_by_gpu: dict[int, float] = field(default_factory=dict)  # busy_seconds on each of its GPUs

    @property
    def starved(self) -> bool | None:
        """Whether it was starved; None when it was busy too briefly to judge."""
        if self.busy_seconds < STARVED_MIN_BUSY_SECONDS:
            return None
        return self.starved_seconds > 0.5 * self.busy_seconds

    def as_dict(self, price_per_kwh: float = 0.0, currency: str = "") -> dict[str, Any]:
        kwh = self.energy_joules / 3.6e6
        return {
            "id": self.id,
            "job": self.key,
            "user": self.user,
            "command": self.command,
            "unit": self.unit,
            "started": self.started,
            "ended": self.ended,
            "running": self.ended is None,
            "seconds": (self.ended if self.ended is not None else self.last_seen) - self.started,
            "gpus": sorted(self.gpus),
            "gpu_hours": self.gpu_seconds / 3600,
            "held_gpu_hours": self.held_seconds / 3600,
            "energy_joules": self.energy_joules,
            "energy_estimated": self.energy_estimated,
            "energy_kwh": kwh,
            "cost": kwh * price_per_kwh if price_per_kwh else None,
            "currency": currency or None,
            "mean_power_watts": self.power_seconds / self.gpu_seconds if self.gpu_seconds else None,
            "mean_power_ratio": self.power_seconds / self.limit_seconds if self.limit_seconds else None,
            "mean_utilization_ratio": self.utilization_seconds / self.gpu_seconds if self.gpu_seconds else None,
            "busy_seconds": self.busy_seconds,
            "busy_seconds_by_gpu": {str(g): seconds for g, seconds in sorted(self.busy_by_gpu.items())},
            "starved_seconds": self.starved_seconds,
            "starved": self.starved,
            "throttle_seconds": self.throttle_seconds,
            "peak_temperature_celsius": self.peak_temperature,
            "alerts": sorted(self.alerts),
        }


_COLUMNS = (
    "key",
    "user",
    "command",
    "unit",
    "started",
    "last_seen",
    "ended",
    "process_start",
    "gpus",
    "gpu_seconds",
    "held_seconds",
    "energy_joules",
    "energy_estimated",
    "power_seconds",
    "limit_seconds",
    "utilization_seconds",
    "busy_seconds",
    "starved_seconds",
    "throttle_seconds",
    "peak_temperature",
    "alerts",
    "busy_by_gpu",
)


def _row(job: Job) -> tuple[object, ...]:
    return tuple(_column(job, c) for c in _COLUMNS)


def _column(job: Job, name: str) -> object:
    if name in ("gpus", "alerts"):
        return json.dumps(sorted(getattr(job, name)))
    if name == "busy_by_gpu":
        return json.dumps({str(g): seconds for g, seconds in sorted(job.busy_by_gpu.items())})
    return getattr(job, name)


def _job(row: sqlite3.Row) -> Job:
    """A row as a Job; a damaged row (not JSON, wrong types) reads as what can be read of it."""
    present = set(row.keys())
    values: dict[str, Any] = {c: row[c] if c in present else None for c in _COLUMNS}
    for name in ("key", "user", "command", "unit"):
        v = values[name]
        values[name] = printable(v) if v is not None else (None if name != "key" else "?")
    for name in ("started", "last_seen", "ended", "process_start", "peak_temperature", *_TOTALS):
        v = values[name]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v:
            values[name] = 0.0 if name in _TOTALS or name in ("started", "last_seen") else None
    values["energy_estimated"] = (
        bool(values["energy_estimated"]) if isinstance(values["energy_estimated"], int) else False
    )
    values["gpus"] = {g for g in _json_list(values["gpus"]) if isinstance(g, int) and not isinstance(g, bool)}
    values["alerts"] = {printable(a) for a in _json_list(values["alerts"]) if isinstance(a, str)}
    values["busy_by_gpu"] = _busy_by_gpu(values["busy_by_gpu"], values["gpus"])
    job_id = row["id"] if "id" in present else 0
    return Job(id=job_id if isinstance(job_id, int) else 0, **values)


_TOTALS = (
    "gpu_seconds",
    "held_seconds",
    "energy_joules",
    "power_seconds",
    "limit_seconds",
    "utilization_seconds",
    "busy_seconds",
    "starved_seconds",
    "throttle_seconds",
)


def _busy_by_gpu(text: object, gpus: set[int]) -> dict[int, float]:
    """A row's busy seconds by GPU: only the job's GPUs, each a finite number of seconds ≥ 0."""
    try:
        value = json.loads(text) if isinstance(text, (str, bytes)) else None
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    out = {}
    for key, seconds in value.items():
        try:
            gpu = int(key)
        except (TypeError, ValueError):
            continue
        ok = isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and 0 <= seconds < math.inf
        if gpu in gpus and ok:
            out[gpu] = float(seconds)
    return out


def _json_list(text: object) -> list[Any]:
    try:
        value = json.loads(text) if isinstance(text, (str, bytes)) else None
    except ValueError:
        return []
    return value if isinstance(value, list) else []


_ADDED_COLUMNS = (
    ("held_seconds", "REAL NOT NULL DEFAULT 0"),
    ("energy_estimated", "INTEGER NOT NULL DEFAULT 0"),
    ("busy_by_gpu", "TEXT NOT NULL DEFAULT '{}'"),
)


def connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        # the ledger says who ran what: its owner's alone (SQLite gives its WAL the same mode)
        fd = statefile.open_regular(path, os.O_RDWR | os.O_CREAT)  # a planted link or FIFO: refused
        os.fchmod(fd, 0o600)
        os.close(fd)
        for side in ("-wal", "-shm", "-journal"):  # SQLite opens these by name: none may be a link
            if os.path.islink(f"{path}{side}"):
                raise OSError(errno.ELOOP, f"{path}{side} is a symbolic link")
        db = sqlite3.connect(path, timeout=5.0, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(SCHEMA)
        have = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
        for column, kind in _ADDED_COLUMNS:  # a ledger from an older rigmon gains them
            if column not in have:
                db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
    db.row_factory = sqlite3.Row
    return db


class LedgerError(Exception):
    """The ledger file cannot be read (damaged, not a database)."""


def load(path: Path, job_id: int | None = None, limit: int = 0) -> Iterator[Job]:
    """The ledger's jobs, newest first (``rigmon jobs``), read-only, one row at a time: only
    the ``limit`` newest (0: all) are read. Raises LedgerError when the file is damaged."""
    if not path.exists():
        return
    try:
        db = connect(path, readonly=True)
    except sqlite3.Error as e:
        raise LedgerError(f"{path}: {e}") from None
    try:
        if job_id is not None:
            rows = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,))
        else:
            rows = db.execute(
                "SELECT * FROM jobs ORDER BY started DESC, id DESC" + (" LIMIT ?" if limit > 0 else ""),
                (limit,) if limit > 0 else (),
            )
        for row in rows:
            yield _job(row)
    except sqlite3.Error as e:
        raise LedgerError(f"{path}: {e}") from None
    finally:
        db.close()


def ledger_path(state_dir: Path) -> Path:
    return Path(state_dir) / "jobs.sqlite"


class _LastPoll(NamedTuple):
    """A GPU at its last poll: the interval from it to the next is booked to the jobs then on it."""

    time: float
    joules: float | None  # its energy counter
    shares: dict[str, float]  # {job key: share of the GPU}
    reading: GpuReading | None = None  # None where restored from the ledger


class JobLedger:
    """A sink: each sample books GPU time and energy to the jobs on the GPUs."""

    def __init__(self, config: JobsConfig, box: Box):
        self.config = config
        self.host = box.host
        self.path = ledger_path(box.state_dir)
        self._ended: list[Job] = []  # finished in this poll: the pipeline hands them to the sinks
        self._db: sqlite3.Connection | None = None  # opened with the first job (a box without any writes nothing)
        self._unwritable = False
        self._lock = threading.Lock()  # the poll thread writes; scrapes read the totals
        self.running: dict[str, Job] = {}
        self._gpus: dict[str, _LastPoll] = {}  # each GPU (by UUID) at its last poll
        # each GPU's energy counter where it last moved, and the intervals since, waiting for
        # its next move: [(power × time, {job: part of the interval})]
        self._counter: dict[str, float] = {}
        self._pending: dict[str, list[tuple[float, dict[Job, float]]]] = {}
        self._energy_by_user: dict[str, float] = {}
        self._next_id = 1  # while the ledger cannot be written: ids in memory
        self._last_prune = float("-inf")
        if self.path.exists():
            try:
                self._db = connect(self.path)
                self._load()
            except (sqlite3.DatabaseError, ValueError, TypeError, IndexError, KeyError) as e:
                if isinstance(e, sqlite3.OperationalError) and _UNAVAILABLE.search(str(e)):
                    self._unwritable = True  # locked, read-only, unreachable: kept as it is, jobs in memory
                    self._db = None
                    log.error("jobs: cannot open the ledger %s (%s); jobs are kept in memory only", self.path, e)
                else:  # damaged, or not a ledger: set aside
                    self._set_aside(e)
            except OSError as e:
                self._unwritable = True
                log.error("jobs: cannot open the ledger %s (%s); jobs are kept in memory only", self.path, e)
        self._last_commit = 0.0
        self._previous: Sample | None = None
        if self.running:
            log.info(
                "jobs: %d job(s) running when rigmon stopped: %s",
                len(self.running),
                ", ".join(f"#{j.id} {j.key}" for j in self.running.values()),
            )

    def _load(self) -> None:
        db = self._db
        if db is None:
            return
        check = db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise sqlite3.DatabaseError(f"quick_check: {check}")
        for row in db.execute("SELECT * FROM jobs WHERE ended IS NULL"):
            job = _job(row)
            self.running[job.key] = job
        self._gpus = {}
        for r in db.execute("SELECT * FROM gpu_energy"):
            keys = {k for k in _json_list(r["jobs"]) if isinstance(k, str)}
            if isinstance(r["time"], (int, float)) and isinstance(r["joules"], (int, float)):
                shares = {k: 1 / len(keys) for k in keys}
                self._gpus[r["uuid"]] = _LastPoll(float(r["time"]), float(r["joules"]), shares)
                self._counter[r["uuid"]] = float(r["joules"])
        for query in (
            "SELECT user, SUM(energy_joules) AS e FROM jobs WHERE ended IS NOT NULL GROUP BY user",
            "SELECT user, joules AS e FROM pruned_energy",
        ):
            for r in db.execute(query):
                if isinstance(r["e"], (int, float)):
                    user = printable(r["user"] or "")
                    self._energy_by_user[user] = self._energy_by_user.get(user, 0.0) + float(r["e"])

    def _set_aside(self, error: Exception) -> None:
        """A ledger that cannot be read is renamed out of the way (kept for whoever wants to look)
        and a new one started: a damaged file never stops the daemon."""
        if self._db is not None:
            self._db.close()
            self._db = None
        self.running, self._gpus, self._energy_by_user = {}, {}, {}
        self._counter, self._pending = {}, {}
        aside = self.path.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}")
        try:
            self.path.rename(aside)
            for suffix in ("-wal", "-shm"):
                extra = self.path.with_name(self.path.name + suffix)
                if extra.exists():
                    extra.rename(aside.with_name(aside.name + suffix))
        except OSError as e:
            self._unwritable = True
            log.error(
                "jobs: the ledger %s cannot be read (%s) nor set aside (%s); jobs are kept in memory only",
                self.path,
                error,
                e,
            )
            return
        log.error(
            "jobs: the ledger %s cannot be read (%s); it is kept as %s and a new one is started",
            self.path,
            error,
            aside.name,
        )
        self._connect()

    def _connect(self) -> bool:
        if self._db is None and not self._unwritable:
            try:
                self._db = connect(self.path)
            except (OSError, ValueError, sqlite3.Error) as e:  # the jobs are kept in memory; nothing else suffers
                self._unwritable = True
                log.error("jobs: cannot open the ledger %s (%s); jobs are kept in memory only", self.path, e)
        return self._db is not None

    # --- the sink ---------------------------------------------------------------------------
    def book(self, sample: Sample | None, transitions: Iterable[Transition] = ()) -> tuple[Job, ...]:
        """One poll: its alerts kept with the jobs they hit, its GPU time and energy booked;
        returns the jobs it ended. ``sample`` None: transitions between polls (a reload)."""
        if transitions:
            self._note(transitions)
        if sample is None:
            return ()
        self._consume(sample)
        ended, self._ended = tuple(self._ended), []
        return ended

    def _consume(self, sample: Sample) -> None:
        now = sample.time
        who = {p.pid: p for p in sample.processes}
        on_gpu: dict[int, dict[str, float]] = {}  # gpu index -> {job key: share}
        seen: dict[str, tuple[ProcessInfo | None, set[int]]] = {}  # job key -> (info, gpus)
        for g in sample.gpus:
            if g.lost or not g.processes:
                continue
            weights: dict[str, float] = {}
            sm = [p.sm_ratio for p in g.processes]
            by_sm = all(s is not None for s in sm) and sum(sm) > 0
            for p in g.processes:
                info = who.get(p.pid)
                key = info.job if info is not None and info.job else f"pid:{p.pid}"
                weights[key] = weights.get(key, 0.0) + (p.sm_ratio if by_sm else 0.0)
                first, gpus = seen.get(key, (None, set()))
                if first is None or (
                    info is not None
                    and info.start_time is not None
                    and (first.start_time is None or info.start_time < first.start_time)
                ):
                    first = info  # the earliest process names the job
                gpus.add(g.index)
                seen[key] = (first, gpus)
            total = sum(weights.values())
            on_gpu[g.index] = (
                {k: w / total for k, w in weights.items()}
                if by_sm and total > 0
                else {k: 1 / len(weights) for k in weights}
            )
        with self._lock:
            started, ended = self._open_and_close(seen, now)
            self._book(sample, on_gpu, now)
            self._previous = sample
        if started or ended or now - self._last_commit >= COMMIT_SECONDS:
            self._commit(sample)
        for job in ended:
            self._finished(job)

    def _open_and_close(
        self, seen: dict[str, tuple[ProcessInfo | None, set[int]]], now: float
    ) -> tuple[list[Job], list[Job]]:
        started: list[Job] = []
        ended: list[Job] = []
        for key, (info, gpus) in seen.items():
            job = self.running.get(key)
            # when what the job is keyed by started: the launcher, else the process that names it
            start = (info.job_start if info.job_start is not None else info.start_time) if info is not None else None
            # the same key, but a new process group (or launcher) since: a new job. Told by its
            # start after the job was last seen, or by a leader (launcher) that started at
            # another time than the one the job began with (a PID reused while the job lingered)
            if (
                job is not None
                and start is not None
                and job.process_start is not None
                and (
                    job.last_seen < start <= now
                    or (
                        info is not None
                        and info.job_start is not None
                        and abs(info.job_start - job.process_start) > 1.0
                    )
                )
            ):
                self._end(job)
                ended.append(job)
                job = None
            if job is None:
                command = (info.job_command or info.command) if info else None
                if not self.config.store_command_lines:
                    command = executable(command)  # its arguments may hold a token or a password
                job = Job(
                    0,
                    key,
                    info.user if info else None,
                    command,
                    info.unit if info else None,
                    now,
                    now,
                    process_start=start,
                )
                job.id = self._insert(job)
                self.running[key] = job
                started.append(job)
                log.info(
                    "job #%d started: %s (%s) on GPU %s: %s",
                    job.id,
                    key,
                    job.user or "?",
                    ",".join(map(str, sorted(gpus))),
                    job.command or "?",
                )
            job.gpus |= gpus
            job.last_seen = now
        for key, job in list(self.running.items()):
            if key not in seen and now - job.last_seen >= self.config.end_after:
                self._end(job)
                ended.append(job)
        return started, ended

    def _insert(self, job: Job) -> int:
        if self._connect() and self._db is not None:
            db = self._db
            try:
                with db:
                    row_id = db.execute(
                        f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})", _row(job)
                    ).lastrowid
                if row_id is not None:
                    return row_id
            except sqlite3.Error as e:
                log.error("jobs: cannot write %s: %s", self.path, e)
        self._next_id += 1
        return -self._next_id  # in memory only

    def _end(self, job: Job) -> None:
        job.ended = job.last_seen
        del self.running[job.key]
        self._energy_by_user[job.user or ""] = self._energy_by_user.get(job.user or "", 0.0) + job.energy_joules
        log.info(
            "job #%d ended: %s, %.2f GPU-hours, %.3f kWh%s",
            job.id,
            job.key,
            job.gpu_seconds / 3600,
            job.energy_joules / 3.6e6,
            " (starved)" if job.starved else "",
        )

    def _book(self, sample: Sample, on_gpu: dict[int, dict[str, float]], now: float) -> None:
        """The interval since each GPU's last reading to the jobs on it at its start: its time and
        readings now, its energy when the GPU's counter next moves."""
        busy_at, starved_below = self.config.starved_utilization, self.config.starved_power_ratio
        for g in sample.gpus:
            if g.lost:
                continue
            uuid = g.uuid
            last = self._gpus.get(uuid)
            energy = g.energy_joules
            self._gpus[uuid] = _LastPoll(now, energy, on_gpu.get(g.index, {}), g)
            if last is None:
                if energy is not None:
                    self._counter[uuid] = energy
                continue
            then, _, shares, at_start = last
            at_start = at_start or g  # how the GPU ran: as read at the interval's start (restored: as now)
            dt = now - then
            if dt <= 0 or dt > MAX_GAP_SECONDS:
                self._pending.pop(uuid, None)
                if energy is not None:
                    self._counter[uuid] = energy
                continue
            parts: dict[Job, float] = {}
            norm = sum(shares.values())
            for key, share in shares.items():
                job = self.running.get(key)
                if job is not None and job.started < now and norm > 0:  # new at this reading: not its time
                    parts[job] = share / norm
            power, limit, util = at_start.power_watts, at_start.power_limit_watts, at_start.utilization_gpu_ratio
            temperature = at_start.temperature_celsius
            if parts:
                ce = at_start.clock_events
                throttled = ce is not None and any(getattr(ce, r) for r in SLOWDOWNS)
                busy = util is not None and util >= busy_at
                starved = busy and power is not None and bool(limit) and power / limit < starved_below
                for job, part in parts.items():
                    job.gpu_seconds += dt * part
                    job.held_seconds += dt
                    if power is not None:
                        job.power_seconds += power * dt * part
                    if limit:
                        job.limit_seconds += limit * dt * part
                    if util is not None:
                        job.utilization_seconds += util * dt * part
                    if busy:
                        job.busy_seconds += dt * part
                        job.busy_by_gpu[g.index] = job.busy_by_gpu.get(g.index, 0.0) + dt * part
                    if starved:
                        job.starved_seconds += dt * part
                    if throttled:
                        job.throttle_seconds += dt * part
                    if temperature is not None:
                        job.peak_temperature = max(job.peak_temperature or temperature, temperature)
            estimate = (power or 0.0) * dt
            if energy is None:  # no counter: the power now for the whole interval, said so
                for job, part in parts.items():
                    job.energy_joules += estimate * part
                    job.energy_estimated = True
                continue
            pending = self._pending.setdefault(uuid, [])
            pending.append((estimate, parts))
            counter = self._counter.get(uuid)
            if counter is None or energy < counter:  # first counter seen, or it was reset: estimates stand
                _book_estimates(pending)
                pending.clear()
                self._counter[uuid] = energy
            elif energy > counter:
                _spread(energy - counter, pending)
                pending.clear()
                self._counter[uuid] = energy
            elif g.energy_counter_stuck:  # it stands still while the GPU draws power (the reader says so)
                _book_estimates(pending, estimated=True)
                pending.clear()
            elif len(pending) > MAX_PENDING:  # a counter that stopped moving: the oldest by its power
                _book_estimates([pending.pop(0)])

    def _note(self, transitions: Iterable[Transition]) -> None:
        """Alerts that fire on one of a job's GPUs are kept with the job (the host's, a fan's or
        a PSU's are the box's, not the job's)."""
        with self._lock:
            for t in transitions:
                gpu = t.labels.get("gpu")
                if t.status != "firing" or t.severity == "info" or gpu is None or not str(gpu).isdigit():
                    continue
                for job in self.running.values():
                    if int(gpu) in job.gpus:
                        job.alerts.add(t.alertname)

    def _commit(self, sample: Sample) -> None:
        if self._db is None:
            return
        with self._lock:
            jobs = list(self.running.values())
            gpus = [
                (uuid, last.time, last.joules, json.dumps(sorted(last.shares)))
                for uuid, last in self._gpus.items()
                if last.joules is not None
            ]
        try:
            with self._db:
                for job in jobs:
                    self._db.execute(
                        f"UPDATE jobs SET {', '.join(f'{c} = ?' for c in _COLUMNS)} WHERE id = ?", (*_row(job), job.id)
                    )
                self._db.executemany(
                    "INSERT OR REPLACE INTO gpu_energy (uuid, time, joules, jobs) VALUES (?, ?, ?, ?)", gpus
                )
        except sqlite3.Error as e:  # a full disk: the jobs stay in memory, the next commit tries again
            log.error("jobs: cannot write %s: %s", self.path, e)
            return
        self._last_commit = sample.time
        if sample.time - self._last_prune >= PRUNE_SECONDS:
            self._prune(sample.time)

    def _prune(self, now: float) -> None:
        """Finished jobs older than ``jobs.keep`` leave the ledger; their energy stays in the
        per-user totals (rigmon_job_energy_joules does not go back)."""
        self._last_prune = now
        before = now - self.config.keep
        db = self._db
        if db is None:
            return
        try:
            with db:
                db.execute(
                    "INSERT INTO pruned_energy (user, joules) SELECT COALESCE(user, ''), "
                    "SUM(energy_joules) FROM jobs WHERE ended IS NOT NULL AND ended < ? GROUP BY "
                    "COALESCE(user, '') ON CONFLICT(user) DO UPDATE SET joules = joules + "
                    "excluded.joules",
                    (before,),
                )
                gone = db.execute("DELETE FROM jobs WHERE ended IS NOT NULL AND ended < ?", (before,)).rowcount
        except sqlite3.Error as e:
            log.error("jobs: cannot prune %s: %s", self.path, e)
            return
        if gone:
            log.info(
                "jobs: %d finished job(s) older than %s left the ledger (jobs.keep)",
                gone,
                format_duration(self.config.keep),
            )

    def _finished(self, job: Job) -> None:
        try:
            if self._db is not None:
                with self._db:
                    self._db.execute(
                        f"UPDATE jobs SET {', '.join(f'{c} = ?' for c in _COLUMNS)} WHERE id = ?", (*_row(job), job.id)
                    )
        except sqlite3.Error as e:
            log.error("jobs: cannot write %s: %s", self.path, e)
        self._ended.append(job)

    # --- exported state -------------------------------------------------------------------------
    def snapshot(self, price_per_kwh: float = 0.0, currency: str = "") -> list[dict[str, Any]]:
        """The running jobs as plain data (the daemon's page), from any thread."""
        with self._lock:
            return [job.as_dict(price_per_kwh, currency) for job in self.running.values()]

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # `rigmon jobs` needs none

        with self._lock:
            by_user = dict(self._energy_by_user)
            for job in self.running.values():
                by_user[job.user or ""] = by_user.get(job.user or "", 0.0) + job.energy_joules
            running = len(self.running)
        energy = CounterMetricFamily(
            "rigmon_job_energy_joules",
            "GPU energy booked to jobs, by user (finished and running jobs; the ledger keeps it across restarts).",
            labels=["user"],
        )
        for user, joules in sorted(by_user.items()):
            energy.add_metric([user], joules)
        yield energy
        yield GaugeMetricFamily("rigmon_jobs_running", "Jobs holding a GPU now.", value=running)

    def close(self, deadline: float | None = None) -> None:
        if self._previous is not None:
            self._commit(self._previous)
        if self._db is not None:
            self._db.close()


def _book_estimates(pending: list[tuple[float, dict[Job, float]]], estimated: bool = False) -> None:
    """Each interval's power × time to its jobs by their parts; ``estimated``: the jobs say so."""
    for weight, spent in pending:
        for job, part in spent.items():
            job.energy_joules += weight * part
            if estimated:
                job.energy_estimated = True


def _spread(joules: float, pending: list[tuple[float, dict[Job, float]]]) -> None:
    """A counter's rise over the intervals it covers: in proportion to each one's power × time
    (evenly where no power was read), each interval's part to its jobs."""
    total = sum(weight for weight, _ in pending)
    for weight, parts in pending:
        share = weight / total if total > 0 else 1 / len(pending)
        for job, part in parts.items():
            job.energy_joules += joules * share * part
