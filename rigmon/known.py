"""What the box has had, kept across restarts: the fans that turned and the sensors that answered.

FanStalled fires for a fan that turned and stopped, SensorMissing for a sensor that answered and
is gone. A daemon that forgot them at a restart would resolve both while their cause holds: a
fan that stopped an hour before the restart reads as an empty header, a sensor gone before it
as one that never was. So the daemon keeps them in ``<state_dir>/known.json`` (its owner's
alone), written when something new is seen and read at start, bounded and checked like any
other input. After taking a fan or a sensor out on purpose, delete the file and restart.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from .sinks.base import PollResult
from .text import printable

log = logging.getLogger(__name__)

MAX_ENTRIES = 1024  # each of fans and sensors: far beyond any box, and what a damaged file can make us hold
MAX_TEXT = 256


class Known:
    """A sink: the fans that turned and the sensors that answered, so far and before."""

    name = "known"

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fans: set[tuple[str, str, str]] = set()  # (chip, device, label)
        self.sensors: set[tuple[str, str]] = set()  # (kind, name), as SensorMissing names them
        self._written: tuple[int, int] = (0, 0)

    def load(self) -> None:
        """What an earlier daemon knew; a file that cannot be read is said once and left for
        the next write to replace."""
        try:
            with open(self.path, "rb") as f:
                data = json.loads(f.read(1 << 20))
            fans = {_entry(e, 3) for e in data.get("fans_turned", ())[:MAX_ENTRIES]}
            sensors = {_entry(e, 2) for e in data.get("sensors", ())[:MAX_ENTRIES]}
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, AttributeError) as e:
            log.warning("%s cannot be read (%s): the fans that turned and the sensors seen start afresh",
                        self.path, printable(str(e)))
            return
        self.fans = {e for e in fans if e is not None}
        self.sensors = {e for e in sensors if e is not None}
        self._written = (len(self.fans), len(self.sensors))

    def consume(self, result: PollResult) -> None:
        sample = result.sample
        if sample is None:
            return
        if sample.host is not None and len(self.fans) < MAX_ENTRIES:
            self.fans |= {(f.chip, f.device or "", f.label) for f in sample.host.fans if f.turned}
        if result.alerts is not None and len(self.sensors) < MAX_ENTRIES:  # the engine's list, not read again
            self.sensors |= {(kind, name) for kind, name, answers in result.alerts.sensors if answers}
        if (len(self.fans), len(self.sensors)) != self._written:  # sets only grow: a size is a change
            self._write()

    def _write(self) -> None:
        data = {"fans_turned": sorted(self.fans)[:MAX_ENTRIES], "sensors": sorted(self.sensors)[:MAX_ENTRIES]}
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, self.path)
        except OSError as e:
            log.warning("cannot keep what the box has had in %s: %s", self.path, e.strerror or e)
        self._written = (len(self.fans), len(self.sensors))

    def close(self, deadline: float | None = None) -> None:
        pass  # written as it changes


def _entry(entry, size: int) -> tuple | None:
    """One remembered key: ``size`` short strings, else None (a damaged entry is left out)."""
    if not isinstance(entry, list) or len(entry) != size:
        return None
    if not all(isinstance(s, str) and len(s) <= MAX_TEXT for s in entry):
        return None
    return tuple(entry)
