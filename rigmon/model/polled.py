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

# The GPU reader's families, each timed and judged on its own at every poll, as node_exporter's
# collectors are: rigmon_reader_success{reader="gpu_ecc"} and rigmon_reader_duration_seconds.
POWER, THERMAL, UTILIZATION, CLOCKS, MEMORY, PCIE = (
    "gpu_power",  # power, limits, energy
    "gpu_thermal",  # temperatures
    "gpu_utilization",  # GPU and memory busy shares
    "gpu_clocks",  # clocks, P-state, clock events and the time spent in each
    "gpu_memory",  # device memory used and total
    "gpu_pcie",  # link, replays, throughput
)
ECC = "gpu_ecc"  # ECC counts, row remaps, retired pages
FANS = "gpu_fans"
PROCESSES = "gpu_processes"  # the compute processes and their SM shares
FIELD_VALUES = "gpu_field_values"  # the field-value calls (memory temperature, throttle times, …)
XID = "gpu_xid"  # the XID event watch


class Polled(NamedTuple):
    field: str  # the GpuReading field: the reading's name everywhere
    calls: tuple[tuple[str, tuple[object, ...]], ...]  # (NVML function, arguments), newest first; () for a field value
    convert: str  # watts (from mW), celsius, hertz (from MHz), ratio (from %), count (a number as it is)
    attr: str | None = None  # the member of the answer (a struct) that holds the value
    field_id: int | None = None  # read through nvmlDeviceGetFieldValues (NVML_FI_DEV_*), batched per GPU
    rare: bool = False  # changes rarely (a counter of faults, a setting): read every slow_interval unless a
    # rule looks at it over a short window
    family: str = "gpu_other"  # the reader family it is timed and judged with: rigmon_reader_success{reader=…}
    # (every field_id entry is read in one batched call: FIELD_VALUES)


# a table, one line per entry: the formatter leaves it as written
# fmt: off
POLLED: tuple[Polled, ...] = (
    Polled("power_watts", (("nvmlDeviceGetPowerUsage", ()),), "watts", family=POWER),
    Polled("power_limit_watts", (("nvmlDeviceGetEnforcedPowerLimit", ()),), "watts", family=POWER),
    # set by an administrator (nvidia-smi -pl), not by load: 164 µs a GPU on an H200, every slow_interval
    Polled("power_management_limit_watts", (("nvmlDeviceGetPowerManagementLimit", ()),), "watts", rare=True,
           family=POWER),
    Polled("temperature_celsius", (("nvmlDeviceGetTemperatureV", (0,)), ("nvmlDeviceGetTemperature", (0,))),
           "celsius", family=THERMAL),
    Polled("memory_temperature_celsius", (), "celsius", field_id=82, family=FIELD_VALUES),  # NVML_FI_DEV_MEMORY_TEMP
    Polled("utilization_gpu_ratio", (("nvmlDeviceGetUtilizationRates", ()),), "ratio", attr="gpu", family=UTILIZATION),
    Polled("utilization_memory_ratio", (("nvmlDeviceGetUtilizationRates", ()),), "ratio", attr="memory",
           family=UTILIZATION),
    Polled("graphics_clock_hertz", (("nvmlDeviceGetClockInfo", (0,)),), "hertz", family=CLOCKS),
    Polled("sm_clock_hertz", (("nvmlDeviceGetClockInfo", (1,)),), "hertz", family=CLOCKS),
    Polled("memory_clock_hertz", (("nvmlDeviceGetClockInfo", (2,)),), "hertz", family=CLOCKS),
    Polled("memory_used_bytes", (("nvmlDeviceGetMemoryInfo", (MEMORY_V2,)), ("nvmlDeviceGetMemoryInfo", ())), "count",
           attr="used", family=MEMORY),
    Polled("memory_total_bytes", (("nvmlDeviceGetMemoryInfo", (MEMORY_V2,)), ("nvmlDeviceGetMemoryInfo", ())),
           "count", attr="total", family=MEMORY),
    Polled("performance_state", (("nvmlDeviceGetPerformanceState", ()),), "count", family=CLOCKS),
    Polled("pcie_generation", (("nvmlDeviceGetCurrPcieLinkGeneration", ()),), "count", family=PCIE),
    Polled("pcie_width", (("nvmlDeviceGetCurrPcieLinkWidth", ()),), "count", family=PCIE),
    Polled("pcie_replays", (("nvmlDeviceGetPcieReplayCounter", ()),), "count", rare=True, family=PCIE),
)
# fmt: on
