"""A disk spool of line protocol: what has not reached InfluxDB yet, in order.

Every batch is appended to the newest segment file and fsynced before the writer tries to
send it, so a crash or restart loses nothing that reached the spool. Segments are sent
oldest first and deleted once the server accepted them; a segment resent after a crash
between send and delete writes the same points again, which InfluxDB stores once (same
series and timestamp). When the spool outgrows its bound, whole oldest segments go first,
and their points are counted as dropped. Lines the server rejected are kept beside the
segments in ``*.rejected`` files, which count against the same bound and go first.

A write that fails (a full disk) is cut back to the last whole line and raised: the caller
keeps the lines and tries again; a torn last line left by a crash is cut back on start.
"""

from __future__ import annotations

import builtins
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)

SUFFIX = ".lp"
REJECTED = ".rejected"


class Spool:
    def __init__(self, directory: Path, max_bytes: int, segment_bytes: int = 1 << 20):
        self.dir = Path(directory)
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.segment_bytes = min(segment_bytes, max(max_bytes // 4, 4096))
        self.dropped_points = 0
        self.vanished_points = 0  # in segments deleted by someone else before they were sent
        self._lock = threading.Lock()
        self._segments: list[tuple[int, Path, int, int]] = []  # (seq, path, bytes, points)
        self._rejected: list[tuple[Path, int]] = []  # (path, bytes), oldest first
        self._current: tuple[int, Path] | None = None
        self._current_opened = 0.0
        self._last_seq = 0
        self._deleter = ThreadPoolExecutor(1, thread_name_prefix="rigmon-spool-delete")
        self._recover()

    # --- state ---------------------------------------------------------------------------
    def _recover(self) -> None:
        for path in sorted(self.dir.glob(f"*{SUFFIX}")):
            try:
                seq = int(path.stem)
            except ValueError:
                continue
            data = path.read_bytes()
            if data and not data.endswith(b"\n"):  # torn by a crash mid-write: keep the whole lines
                data = data[: data.rfind(b"\n") + 1]
                path.write_bytes(data)
            if not data:
                path.unlink()
                continue
            self._segments.append((seq, path, len(data), data.count(b"\n")))
            self._last_seq = max(self._last_seq, seq)
        for path in sorted(self.dir.glob(f"*{REJECTED}")):
            self._rejected.append((path, path.stat().st_size))
        if self._segments:
            log.info(
                "spool: %d point(s) in %d segment(s) waiting from an earlier run", self.points, len(self._segments)
            )

    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(s[2] for s in self._segments)

    @property
    def points(self) -> int:
        with self._lock:
            return sum(s[3] for s in self._segments)

    # --- writing -------------------------------------------------------------------------
    def append(self, lines: list[str]) -> None:
        if not lines:
            return
        # a lone surrogate (a damaged recording's string) is written as its escape, never an error
        data = ("\n".join(lines) + "\n").encode("utf-8", "backslashreplace")
        with self._lock:
            if self._current is None or self._segments[-1][2] >= self.segment_bytes:
                self._current = self._rotate()
            seq, path = self._current
            try:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            except FileNotFoundError:  # the segment being written was deleted: a new one
                self.vanished_points += sum(s[3] for s in self._segments if s[0] == seq)
                self._segments = [s for s in self._segments if s[0] != seq]
                self._current = self._rotate()
                seq, path = self._current
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                before = os.fstat(fd).st_size
                try:
                    view = memoryview(data)
                    while view:  # unbuffered: what failed to reach the disk is known exactly
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                except OSError:
                    try:  # no half line left behind for the sender: cut back to what was whole
                        os.ftruncate(fd, before)
                    except OSError:
                        pass
                    raise
            finally:
                os.close(fd)
            last = self._segments[-1]
            self._segments[-1] = (last[0], last[1], last[2] + len(data), last[3] + len(lines))
            self._enforce_bound()

    def _rotate(self) -> tuple[int, Path]:
        # never a number used before in this run: a sent segment's file may still wait for its
        # deletion, and must not be the new one's
        seq = max(self._segments[-1][0] + 1 if self._segments else 0, self._last_seq + 1, int(time.time() * 1000))
        self._last_seq = seq
        path = self.dir / f"{seq:016d}{SUFFIX}"
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))  # what the box measured: its owner's alone
        _fsync_dir(self.dir)
        self._segments.append((seq, path, 0, 0))
        self._current = (seq, path)
        self._current_opened = time.monotonic()
        return self._current

    def _enforce_bound(self) -> None:
        while self._rejected and self._total() > self.max_bytes:
            path, size = self._rejected.pop(0)
            path.unlink(missing_ok=True)
            log.error(
                "spool over its %d-byte bound: removed %s (%d bytes of rejected lines)", self.max_bytes, path.name, size
            )
        while self._total() > self.max_bytes and len(self._segments) > 1:
            seq, path, size, points = self._segments.pop(0)
            path.unlink(missing_ok=True)
            self.dropped_points += points
            log.error("spool over its %d-byte bound: dropped the oldest %d point(s)", self.max_bytes, points)

    def _total(self) -> int:
        return sum(s[2] for s in self._segments) + sum(size for _, size in self._rejected)

    # --- reading -------------------------------------------------------------------------
    def oldest(self, min_age: float = 0.0) -> tuple[Path, builtins.bytes, int] | None:
        """The oldest segment to send: (path, data, points). The segment being written is
        closed and handed out once it is ``min_age`` seconds old or full."""
        batch = self.ready(min_age, 0)
        return batch[0] if batch else None

    def ready(self, min_age: float = 0.0, max_bytes: int = 0) -> list[tuple[Path, builtins.bytes, int]]:
        """The oldest segments to send, in order, as many as fit in ``max_bytes`` (at least
        one): [(path, data, points)]. The segment being written is closed and handed out once
        it is ``min_age`` seconds old or full."""
        out: list[tuple[int, Path, int]] = []
        total = 0
        with self._lock:
            for seq, path, size, points in self._segments:
                if out and total + size > max_bytes:
                    break
                if self._current is not None and self._current[0] == seq:
                    if size == 0 or (time.monotonic() - self._current_opened < min_age and size < self.segment_bytes):
                        break
                    self._current = None  # the next append opens a new segment
                out.append((seq, path, points))
                total += size
        batch: list[tuple[Path, builtins.bytes, int]] = []
        for seq, path, points in out:
            try:
                batch.append((path, path.read_bytes(), points))
            except FileNotFoundError:  # deleted under us (an admin, another process): skip it, count it
                self._vanished(seq, path, points)
                break  # what follows it waits for the next call: the order holds
        return batch

    def _vanished(self, seq: int, path: Path, points: int) -> None:
        with self._lock:
            if not any(s[0] == seq for s in self._segments):
                return
            self._segments = [s for s in self._segments if s[0] != seq]
            if self._current is not None and self._current[0] == seq:
                self._current = None
            self.vanished_points += points
        log.error(
            "spool: segment %s vanished before it was sent (deleted by hand, or another rigmon on the same "
            "state_dir?); %d point(s) lost, the rest goes on",
            path.name,
            points,
        )

    def remove(self, *paths: Path) -> int:
        """Done with these segments (sent): forget them now; their files are deleted beside
        the next send (a crash before that sends them again, which InfluxDB stores once).
        The points of those still here: one the bound dropped while it was being sent is
        counted as dropped already, and only so."""
        gone = set(paths)
        with self._lock:
            points = sum(s[3] for s in self._segments if s[1] in gone)
            self._segments = [s for s in self._segments if s[1] not in gone]
            if self._current is not None and self._current[1] in gone:
                self._current = None
        self._deleter.submit(_unlink, paths)
        return points

    def flush(self, timeout: float | None = None) -> None:
        """Wait (up to ``timeout``) until the files of removed segments are deleted."""
        try:
            self._deleter.submit(lambda: None).result(timeout)
        except TimeoutError:
            pass

    def reject(self, path: Path, bad: list[builtins.bytes]) -> Path | None:
        """Done with a segment whose ``bad`` lines the server refused: keep those beside the
        spool (counted against the bound), drop the segment."""
        target = path.with_suffix(REJECTED) if bad else None
        if target is not None:
            data = b"".join(x if x.endswith(b"\n") else x + b"\n" for x in bad)
            try:
                target.write_bytes(data)
                with self._lock:
                    self._rejected.append((target, len(data)))
                    self._enforce_bound()
            except OSError as e:
                log.error("cannot keep the rejected lines in %s: %s", target, e)
                target = None
        self.remove(path)
        return target


def _unlink(paths: tuple[Path, ...]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
