"""What the GPU reader reads once: each GPU's facts at start (or when it first wakes), and
which GPUs the box has had that NVML no longer lists."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from ..model.sample import CLOCK_EVENT_BITS, ClockEvents, GpuIdentity, GpuInfo, TemperatureThresholds
from .gpu_values import MAX_FANS, _bounded, _celsius, _hertz, _num, _numbers, _text, _watts

ALL_CLOCK_EVENTS = sum(bit for _, bit in CLOCK_EVENT_BITS)


def facts(d: Any, nv: Any, pci: Any, expected_generation: dict[int, int], expected_width: dict[int, int]) -> GpuInfo:
    """GPU ``d``'s facts (identity, limits, thresholds, modes, link maxima), its calls made
    through ``d.get`` (the reader's error policy); ``pci`` its PCI info, read already."""
    g = d.get
    cc = g("nvmlDeviceGetCudaComputeCapability", nv.nvmlDeviceGetCudaComputeCapability)
    constraints = g("nvmlDeviceGetPowerManagementLimitConstraints", nv.nvmlDeviceGetPowerManagementLimitConstraints)
    ecc = g("nvmlDeviceGetEccMode", nv.nvmlDeviceGetEccMode)
    mig = g("nvmlDeviceGetMigMode", nv.nvmlDeviceGetMigMode)
    persistence = g("nvmlDeviceGetPersistenceMode", nv.nvmlDeviceGetPersistenceMode)
    supported = d.first(
        ("nvmlDeviceGetSupportedClocksEventReasons", nv.nvmlDeviceGetSupportedClocksEventReasons),
        ("nvmlDeviceGetSupportedClocksThrottleReasons", nv.nvmlDeviceGetSupportedClocksThrottleReasons),
    )
    if supported.__class__ is int:  # a bitmask
        d.supported_events = supported
    thresholds = [
        g(f"nvmlDeviceGetTemperatureThreshold:{i}", nv.nvmlDeviceGetTemperatureThreshold, i) for i in range(4)
    ]
    fans = _bounded(g("nvmlDeviceGetNumFans", nv.nvmlDeviceGetNumFans), MAX_FANS, f"GPU {d.index}: fan count")
    gpu_max_generation = _num(g("nvmlDeviceGetGpuMaxPcieLinkGeneration", nv.nvmlDeviceGetGpuMaxPcieLinkGeneration))
    if _numbers(ecc, 2) and ecc[0]:
        # Ampere and newer remap rows; older ECC boards retire pages instead (read slowly).
        rows = g("nvmlDeviceGetRemappedRows", nv.nvmlDeviceGetRemappedRows)
        d.read_retired_pages = rows is None and "nvmlDeviceGetRemappedRows" in d.unsupported
    info = GpuInfo(
        index=d.index,
        uuid=_text(g("nvmlDeviceGetUUID", nv.nvmlDeviceGetUUID)) or "",
        name=_text(g("nvmlDeviceGetName", nv.nvmlDeviceGetName)) or "unknown",
        serial=_text(g("nvmlDeviceGetSerial", nv.nvmlDeviceGetSerial)),
        pci_bus_id=_text(getattr(pci, "busId", None)),
        vbios_version=_text(g("nvmlDeviceGetVbiosVersion", nv.nvmlDeviceGetVbiosVersion)),
        compute_capability=f"{cc[0]}.{cc[1]}" if _numbers(cc, 2) else None,
        power_limit_default_watts=_watts(
            g("nvmlDeviceGetPowerManagementDefaultLimit", nv.nvmlDeviceGetPowerManagementDefaultLimit)
        ),
        power_limit_min_watts=_watts(constraints[0]) if _numbers(constraints, 2) else None,
        power_limit_max_watts=_watts(constraints[1]) if _numbers(constraints, 2) else None,
        temperature_thresholds=TemperatureThresholds(*(_celsius(t) for t in thresholds)),
        max_sm_clock_hertz=_hertz(g("nvmlDeviceGetMaxClockInfo:1", nv.nvmlDeviceGetMaxClockInfo, 1)),
        max_memory_clock_hertz=_hertz(g("nvmlDeviceGetMaxClockInfo:2", nv.nvmlDeviceGetMaxClockInfo, 2)),
        # the link's maximum is the lower of the GPU's and the system's (slot, riser, bridge)
        max_pcie_generation=_num(g("nvmlDeviceGetMaxPcieLinkGeneration", nv.nvmlDeviceGetMaxPcieLinkGeneration))
        or gpu_max_generation,
        max_pcie_width=_num(g("nvmlDeviceGetMaxPcieLinkWidth", nv.nvmlDeviceGetMaxPcieLinkWidth)),
        gpu_max_pcie_generation=gpu_max_generation,
        expected_pcie_generation=expected_generation.get(d.index),
        expected_pcie_width=expected_width.get(d.index),
        applications_sm_clock_hertz=_hertz(g("nvmlDeviceGetApplicationsClock:1", nv.nvmlDeviceGetApplicationsClock, 1)),
        supported_clock_events=ClockEvents.decode(d.supported_events, ALL_CLOCK_EVENTS).active(),
        ecc_enabled=bool(ecc[0]) if _numbers(ecc, 2) else None,
        persistence_mode=bool(persistence) if _num(persistence) is not None else None,
        mig_enabled=bool(mig[0]) if _numbers(mig, 2) else None,
        mig_pending=bool(mig[1]) if _numbers(mig, 2) else None,
        fan_count=fans,
    )
    return info


def missing_gpus(
    known: Iterable[GpuIdentity], listed: Collection[str], unnamed: Collection[int], indices: list[int] | None
) -> tuple[GpuIdentity, ...]:
    """Of the GPUs the box has had, those NVML no longer lists: not among the ``listed`` UUIDs,
    nor at an index where NVML lists a GPU it could not name (lost at start: reported as lost),
    and watched (``gpu.indices``)."""
    gone = (
        g for g in known if g.uuid not in listed and g.index not in unnamed and (indices is None or g.index in indices)
    )
    return tuple(sorted(gone, key=lambda g: (g.index, g.uuid)))
