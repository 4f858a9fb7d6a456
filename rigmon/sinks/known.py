"""What the box has had, kept across restarts: the fans that turned, the sensors that answered,
the GPUs it had, and the best each GPU fan has done.

FanStalled fires for a fan that turned and stopped, SensorMissing for a sensor that answered and
is gone, GpuFanStalled for a GPU fan far below its best rpm for the speed asked. A daemon that
forgot them at a restart would resolve all three while their cause holds: a fan that stopped an
hour before the restart reads as an empty header, a sensor gone before it as one that never
was, a GPU fan that slowed before it as one that always was slow. So the daemon keeps them in
``<state_dir>/known.json`` (its owner's alone), written when something new is seen and read at
start, bounded and checked like any other input. The GPUs are kept the same way: a GPU that
NVML no longer lists after a restart (or NVML that cannot start at all, after a driver update)
raises GpuMissing for it, where a daemon that forgot would see a box without GPUs. After taking
a fan, a sensor or a GPU out on purpose, delete the file and restart.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..model.sample import GpuIdentity
from ..model.text import printable
from ..system import statefile
from .base import PollResult

log = logging.getLogger(__name__)

MAX_ENTRIES = 1024  # each of fans and sensors: far beyond any box, and what a damaged file can make us hold
MAX_TEXT = 256
MAX_GPUS = 64  # NVML's own limit per box
MAX_RPM = 1e7  # rpm per asked speed: a fan's 100k rpm at 1 % asked; beyond it a value is damage
BEST_STEP = 1.01  # a GPU fan's best is written again once it has grown 1 %: not every poll


class Known:
    """A sink: the fans that turned and the sensors that answered, so far and before."""

    name = "known"

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fans: set[tuple[str, str, str]] = set()  # (chip, device, label)
        self.sensors: set[tuple[str, str]] = set()  # (kind, name), as SensorMissing names them
        self.fan_best: dict[tuple[str, str], float] = {}  # (GPU uuid, fan) -> best rpm per asked speed
        self.gpus: dict[str, GpuIdentity] = {}  # the GPUs the box has had, by UUID
        self._written: tuple[int, int] = (0, 0)
        self._written_gpus: dict[str, GpuIdentity] = {}
        self._written_best: dict[tuple[str, str], float] = {}

    def load(self) -> None:
        """What an earlier daemon knew; a file that cannot be read is said once and left for
        the next write to replace."""
        try:
            data = statefile.read_json(self.path, 1 << 20)
            fans = {_fan(e) for e in data.get("fans_turned", ())[:MAX_ENTRIES]}
            sensors = {_sensor(e) for e in data.get("sensors", ())[:MAX_ENTRIES]}
            best = [_best(e) for e in data.get("gpu_fans_best", ())[:MAX_ENTRIES]]
            gpus = [GpuIdentity.parse(e) for e in data.get("gpus", ())[:MAX_GPUS]]
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, AttributeError) as e:
            log.warning(
                "%s cannot be read (%s): the fans that turned and the sensors seen start afresh",
                self.path,
                printable(str(e)),
            )
            return
        self.fans = {e for e in fans if e is not None}
        self.sensors = {e for e in sensors if e is not None}
        self.fan_best = dict(e for e in best if e is not None)
        self.gpus = {g.uuid: g for g in gpus if g is not None}
        self._written = (len(self.fans), len(self.sensors))
        self._written_best = dict(self.fan_best)
        self._written_gpus = dict(self.gpus)

    def consume(self, result: PollResult) -> None:
        sample = result.sample
        if sample is None:
            return
        for i in sample.gpu_info:  # as NVML lists them now: a GPU's index and name may change
            if i.uuid and (i.uuid in self.gpus or len(self.gpus) < MAX_GPUS):
                self.gpus[i.uuid] = GpuIdentity(i.uuid, i.index, i.name, i.pci_bus_id)
        if sample.host is not None and len(self.fans) < MAX_ENTRIES:
            self.fans |= {(f.chip, f.device or "", f.label) for f in sample.host.fans if f.turned}
        if result.alerts is not None and len(self.sensors) < MAX_ENTRIES:  # the engine's list, not read again
            self.sensors |= {(kind, name) for kind, name, answers in result.alerts.sensors if answers}
        grown = False
        if result.alerts is not None:
            for _, uuid, fan, rpm in result.alerts.fan_best:
                if (uuid, fan) not in self.fan_best and len(self.fan_best) >= MAX_ENTRIES:
                    continue
                self.fan_best[(uuid, fan)] = max(rpm, self.fan_best.get((uuid, fan), 0.0))
                grown |= self.fan_best[(uuid, fan)] > BEST_STEP * self._written_best.get((uuid, fan), 0.0)
        # sets only grow: a size is a change
        if grown or (len(self.fans), len(self.sensors)) != self._written or self.gpus != self._written_gpus:
            self._write()

    def _write(self) -> None:
        data = {
            "fans_turned": sorted(self.fans)[:MAX_ENTRIES],
            "sensors": sorted(self.sensors)[:MAX_ENTRIES],
            "gpu_fans_best": [[uuid, fan, rpm] for (uuid, fan), rpm in sorted(self.fan_best.items())],
            "gpus": [g.entry() for g in sorted(self.gpus.values())],
        }
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            statefile.write_atomic(self.path, json.dumps(data).encode())
        except OSError as e:
            log.warning("cannot keep what the box has had in %s: %s", self.path, e.strerror or e)
        self._written = (len(self.fans), len(self.sensors))
        self._written_best = dict(self.fan_best)
        self._written_gpus = dict(self.gpus)

    def close(self, deadline: float | None = None) -> None:
        pass  # written as it changes


def _texts(entry: object, size: int) -> list[str] | None:
    """One remembered key: ``size`` short strings, else None (a damaged entry is left out)."""
    if not isinstance(entry, list) or len(entry) != size:
        return None
    if not all(isinstance(s, str) and len(s) <= MAX_TEXT for s in entry):
        return None
    return entry


def _fan(entry: object) -> tuple[str, str, str] | None:
    """(chip, device, label), else None."""
    texts = _texts(entry, 3)
    return (texts[0], texts[1], texts[2]) if texts is not None else None


def _sensor(entry: object) -> tuple[str, str] | None:
    """(kind, name), else None."""
    texts = _texts(entry, 2)
    return (texts[0], texts[1]) if texts is not None else None


def _best(entry: object) -> tuple[tuple[str, str], float] | None:
    """One GPU fan's remembered best ([uuid, fan, rpm]), else None."""
    if not isinstance(entry, list) or len(entry) != 3:
        return None
    uuid, fan, rpm = entry
    if not (isinstance(uuid, str) and isinstance(fan, str) and len(uuid) <= MAX_TEXT and len(fan) <= MAX_TEXT):
        return None
    if isinstance(rpm, bool) or not isinstance(rpm, (int, float)) or not 0 < rpm <= MAX_RPM:  # NaN fails too
        return None
    return (uuid, fan), float(rpm)
