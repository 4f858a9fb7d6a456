"""The per-poll NVML readings, one line each: the ``GpuReading`` field it fills, the NVML calls
that give it (newest first: an older one stands in where the newer is not supported, and the
reader asks it from then on), and how the answer becomes a value in base units.

``GpuReading``'s fields, the GPU reader's plan of calls (keyed as a recording keys them,
``recording.call_key``) and the code that builds each reading come from this table. With its
entry in the table of readings (``rigmon.model.readings``: unit, Prometheus family, InfluxDB field,
rule variable), a new per-poll reading reaches every output; nothing else changes.

Readings made of several answers (clock events, ECC, row remaps, fans, processes) and those read
every ``slow_interval`` (energy, throttle times, PCIe throughput) are the reader's own.
"""

from __future__ import annotations

from typing import NamedTuple

MEMORY_V2 = "memory_v2"  # an argument the reader passes as pynvml.nvmlMemory_v2


class Polled(NamedTuple):
    field: str  # the GpuReading field: the reading's name everywhere
    calls: tuple[tuple[str, tuple[object, ...]], ...]  # (NVML function, arguments), newest first; () for a field value
    convert: str  # watts (from mW), celsius, hertz (from MHz), ratio (from %), count (a number as it is)
    attr: str | None = None  # the member of the answer (a struct) that holds the value
    field_id: int | None = None  # read through nvmlDeviceGetFieldValues (NVML_FI_DEV_*), batched per GPU
    rare: bool = False  # changes rarely (a counter of faults, a setting): read every slow_interval unless a
    # rule looks at it over a short window


# a table, one line per entry: the formatter leaves it as written
# fmt: off
POLLED: tuple[Polled, ...] = (
    Polled("power_watts", (("nvmlDeviceGetPowerUsage", ()),), "watts"),
    Polled("power_limit_watts", (("nvmlDeviceGetEnforcedPowerLimit", ()),), "watts"),
    # set by an administrator (nvidia-smi -pl), not by load: 164 µs a GPU on an H200, every slow_interval
    Polled("power_management_limit_watts", (("nvmlDeviceGetPowerManagementLimit", ()),), "watts", rare=True),
    Polled("temperature_celsius", (("nvmlDeviceGetTemperatureV", (0,)), ("nvmlDeviceGetTemperature", (0,))),
           "celsius"),
    Polled("memory_temperature_celsius", (), "celsius", field_id=82),  # NVML_FI_DEV_MEMORY_TEMP
    Polled("utilization_gpu_ratio", (("nvmlDeviceGetUtilizationRates", ()),), "ratio", attr="gpu"),
    Polled("utilization_memory_ratio", (("nvmlDeviceGetUtilizationRates", ()),), "ratio", attr="memory"),
    Polled("graphics_clock_hertz", (("nvmlDeviceGetClockInfo", (0,)),), "hertz"),
    Polled("sm_clock_hertz", (("nvmlDeviceGetClockInfo", (1,)),), "hertz"),
    Polled("memory_clock_hertz", (("nvmlDeviceGetClockInfo", (2,)),), "hertz"),
    Polled("memory_used_bytes", (("nvmlDeviceGetMemoryInfo", (MEMORY_V2,)), ("nvmlDeviceGetMemoryInfo", ())), "count",
           attr="used"),
    Polled("memory_total_bytes", (("nvmlDeviceGetMemoryInfo", (MEMORY_V2,)), ("nvmlDeviceGetMemoryInfo", ())),
           "count", attr="total"),
    Polled("performance_state", (("nvmlDeviceGetPerformanceState", ()),), "count"),
    Polled("pcie_generation", (("nvmlDeviceGetCurrPcieLinkGeneration", ()),), "count"),
    Polled("pcie_width", (("nvmlDeviceGetCurrPcieLinkWidth", ()),), "count"),
    Polled("pcie_replays", (("nvmlDeviceGetPcieReplayCounter", ()),), "count", rare=True),
)
# fmt: on
