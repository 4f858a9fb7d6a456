"""What a burn-in keeps of the hardware and the training, bounded for a run of any length.

Every series keeps full resolution for a recent window, and (min, mean, max) buckets beyond
it: when the buckets reach their bound, neighbours merge in pairs and the bucket width
doubles, so a 24-hour run takes the same memory as a 20-minute one, and no spike is lost
(a bucket's max is the max of everything in it). The verdict does not read series at all:
it reads running tallies (``GpuTally``), updated once per tick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..model.sample import SLOWDOWNS

RECENT_SECONDS = 600.0  # full resolution for the last ten minutes
MAX_BUCKETS = 720  # then (min, mean, max) buckets: 720 of them cover any run
# clock-event reasons drawn in the report (share of time active)
EVENT_REASONS = ("sw_power_cap", *SLOWDOWNS)


class Downsampled:
    """A numeric series over time (seconds since the start): raw recent points, older ones in
    (t, min, mean, max) buckets of a width that doubles as the run grows."""

    __slots__ = ("_recent", "_buckets", "_width")

    def __init__(self, width: float = 5.0):
        self._recent: list[tuple[float, float]] = []  # (t, value)
        self._buckets: list[list[float]] = []  # [t_start, min, sum, max, count]
        self._width = width

    def add(self, t: float, value: float | None) -> None:
        if value is None or not math.isfinite(value):
            return
        self._recent.append((t, float(value)))
        horizon = t - RECENT_SECONDS
        cut = 0
        while cut < len(self._recent) and self._recent[cut][0] < horizon:
            cut += 1
        if cut:
            for old_t, old_v in self._recent[:cut]:
                self._bucket(old_t, old_v)
            del self._recent[:cut]

    def _bucket(self, t: float, v: float) -> None:
        start = math.floor(t / self._width) * self._width
        if self._buckets and self._buckets[-1][0] == start:
            b = self._buckets[-1]
            b[1], b[2], b[3], b[4] = min(b[1], v), b[2] + v, max(b[3], v), b[4] + 1
        else:
            self._buckets.append([start, v, v, v, 1])
            if len(self._buckets) > MAX_BUCKETS:
                self._coarsen()

    def _coarsen(self) -> None:
        self._width *= 2
        merged: list[list[float]] = []
        for b in self._buckets:
            start = math.floor(b[0] / self._width) * self._width
            if merged and merged[-1][0] == start:
                m = merged[-1]
                m[1], m[2], m[3], m[4] = min(m[1], b[1]), m[2] + b[2], max(m[3], b[3]), m[4] + b[4]
            else:
                merged.append([start, b[1], b[2], b[3], b[4]])
        self._buckets = merged

    def points(self) -> list[tuple[float, float, float, float]]:
        """(t, min, mean, max), oldest first: buckets (at their middle), then raw points."""
        out = [(b[0] + self._width / 2, b[1], b[2] / b[4], b[3]) for b in self._buckets]
        return out + [(t, v, v, v) for t, v in self._recent]

    def values(self) -> list[float]:
        """Means, oldest first (one per bucket or raw point)."""
        return [p[2] for p in self.points()]

    def __len__(self) -> int:
        return len(self._buckets) + len(self._recent)

    def maximum(self) -> float | None:
        return max((p[3] for p in self.points()), default=None)

    def to_json(self) -> list[list[float]]:
        return [[round(t, 1), _r(lo), _r(mean), _r(hi)] for t, lo, mean, hi in self.points()]


def _r(v: float) -> float:
    return float(f"{v:.5g}")


@dataclass
class GpuTally:
    """What the verdict needs of one GPU's readings, kept as they arrive."""

    ticks: int = 0
    busy_ticks: int = 0
    slowdown_ticks: dict[str, int] = field(default_factory=dict)  # reason -> busy ticks active
    lost: bool = False
    hottest: float | None = None
    slowdown_celsius: float | None = None
    ecc_first: int | None = None
    ecc_last: int | None = None
    remap_failure: bool = False
    remap_pending: bool = False
    max_power: float | None = None
    max_power_ratio: float | None = None
    limit: float | None = None
    pcie_below_ticks: int = 0
    pcie_below_last: tuple | None = None
    energy_first: float | None = None
    energy_last: float | None = None
    energy_readings: int = 0
    power_joules: float = 0.0  # its power integrated over the run
    power_at: float | None = None  # the tick it was last read at
    counter_stuck: bool = False  # its energy counter stood still while it drew power: power_joules stands in
    xids: list[tuple[float, int]] = field(default_factory=list)

    def add(self, t: float, g: dict, slowdown_reasons: tuple[str, ...]) -> None:
        self.ticks += 1
        if g.get("lost"):
            self.lost = True
            return
        busy = (g.get("utilization_gpu_ratio") or 0) >= 0.5
        if busy:
            self.busy_ticks += 1
            for reason in slowdown_reasons:
                if g.get("events", {}).get(reason):
                    self.slowdown_ticks[reason] = self.slowdown_ticks.get(reason, 0) + 1
            gen, width = g.get("pcie_generation"), g.get("pcie_width")
            target, widest = g.get("target_pcie_generation"), g.get("max_pcie_width")
            if gen is not None and target is not None and (gen < target or (width or 0) < (widest or 0)):
                self.pcie_below_ticks += 1
                self.pcie_below_last = (gen, width, target, widest)
        temperature = g.get("temperature_celsius")
        if temperature is not None:
            self.hottest = temperature if self.hottest is None else max(self.hottest, temperature)
        if self.slowdown_celsius is None:
            self.slowdown_celsius = g.get("slowdown_celsius")
        ecc = g.get("ecc_uncorrected_volatile")
        if ecc is not None:
            self.ecc_first = ecc if self.ecc_first is None else self.ecc_first
            self.ecc_last = ecc
        self.remap_failure |= bool(g.get("remap_failure"))
        self.remap_pending |= bool(g.get("remap_pending"))
        power, limit = g.get("power_watts"), g.get("power_limit_watts")
        if power is not None and 0 <= power < 1e5:
            if self.power_at is not None:
                self.power_joules += power * max(0.0, min(t - self.power_at, 60.0))
            self.power_at = t
        self.counter_stuck |= bool(g.get("energy_counter_stuck"))
        if power is not None:
            self.max_power = power if self.max_power is None else max(self.max_power, power)
            if limit:
                self.limit = limit
                ratio = power / limit
                self.max_power_ratio = ratio if self.max_power_ratio is None else max(self.max_power_ratio, ratio)
        if g.get("energy_joules") is not None:
            self.energy_first = g["energy_joules"] if self.energy_first is None else self.energy_first
            self.energy_last = g["energy_joules"]
            self.energy_readings += 1

    @property
    def energy_joules(self) -> float | None:
        """Energy over the run; None (not measured) without two readings of the counter. A counter
        that stood still while the GPU drew power: its power integrated instead."""
        if self.counter_stuck:
            return self.power_joules
        if self.energy_readings < 2 or self.energy_first is None or self.energy_last is None:
            return None
        return max(self.energy_last - self.energy_first, 0.0)


class Timeline:
    """Every series a report draws, by name: ``gpu/0/temp``, ``cpu/CPU0 Tctl``, ``fan/nct6798/fan1``,
    ``event/0/sw_power_cap`` (share of time active)."""

    def __init__(self):
        self.series: dict[str, Downsampled] = {}

    def add(self, name: str, t: float, value: float | None) -> None:
        if value is None:
            return
        s = self.series.get(name)
        if s is None:
            s = self.series[name] = Downsampled()
        s.add(t, value)

    def get(self, name: str) -> Downsampled | None:
        return self.series.get(name)

    def names(self, prefix: str) -> list[str]:
        return sorted(n for n in self.series if n.startswith(prefix))

    def to_json(self) -> dict[str, list]:
        return {name: s.to_json() for name, s in sorted(self.series.items())}


class Run:
    """Everything the parent keeps while the workers train, bounded whatever the length."""

    GPU_SERIES = (
        "temperature_celsius",
        "memory_temperature_celsius",
        "power_watts",
        "power_limit_watts",
        "sm_clock_hertz",
        "utilization_gpu_ratio",
        "fan_speed_rpm_max",
    )

    def __init__(self):
        self.timeline = Timeline()
        self.tallies: dict[int, GpuTally] = {}
        self.cpu_energy: list[float | None] = [None, None]  # first, latest
        self.ticks = 0
        self.slowdown_celsius: dict[int, float] = {}
        self.host_sensors_seen = False  # a CPU temperature or a fan: the host's cooling could be judged

    def observe(self, tick: dict) -> None:
        t = tick["t"]
        self.ticks += 1
        for index, g in tick["gpus"].items():
            tally = self.tallies.setdefault(index, GpuTally())
            tally.add(t, g, SLOWDOWNS)
            if g.get("lost"):
                continue
            for key in self.GPU_SERIES:
                value = g.get(key)
                self.timeline.add(f"gpu/{index}/{key}", t, value)
            for reason in EVENT_REASONS:
                self.timeline.add(f"event/{index}/{reason}", t, 1.0 if g.get("events", {}).get(reason) else 0.0)
            if g.get("slowdown_celsius") is not None:
                self.slowdown_celsius[index] = g["slowdown_celsius"]
        for e in tick["events"]:
            self.tallies.setdefault(e["gpu"], GpuTally()).xids.append((t, e["xid"]))
        if tick.get("cpu") or tick.get("fans"):
            self.host_sensors_seen = True
        for name, value in tick.get("cpu", {}).items():
            self.timeline.add(f"cpu/{name}", t, value)
        for name, value in tick.get("fans", {}).items():
            self.timeline.add(f"fan/{name}", t, value)
        if tick.get("cpu_energy") is not None:
            self.cpu_energy = [
                self.cpu_energy[0] if self.cpu_energy[0] is not None else tick["cpu_energy"],
                tick["cpu_energy"],
            ]
