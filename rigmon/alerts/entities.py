"""What rules see: a sample broken into entities (each GPU, fan, CPU socket, sensor, PSU
group, the host), each a flat dict of named values in base units. Variables a rule may use
are listed here, per kind, with what they mean (``rigmon doctor`` and rule validation use
the same lists)."""

from __future__ import annotations

from ..sample import Sample

GPU_VARS = {
    "lost": "the GPU fell off the bus or stopped answering",
    "power_watts": "power draw",
    "power_limit_watts": "enforced power limit",
    "power_ratio": "power_watts / power_limit_watts",
    "temperature_celsius": "GPU temperature",
    "memory_temperature_celsius": "memory temperature",
    "slowdown_celsius": "slowdown threshold",
    "shutdown_celsius": "shutdown threshold",
    "utilization_gpu": "GPU busy share (0-1)",
    "utilization_memory": "memory controller busy share (0-1)",
    "sm_clock_hertz": "SM clock",
    "max_sm_clock_hertz": "maximum SM clock",
    "sw_power_cap": "SW power cap active (normal under full load)",
    "hw_slowdown": "HW slowdown active",
    "sw_thermal_slowdown": "SW thermal slowdown active",
    "hw_thermal_slowdown": "HW thermal slowdown active",
    "hw_power_brake_slowdown": "HW power brake active",
    "pcie_generation": "current PCIe generation",
    "pcie_max_generation": "PCIe generation the link should reach: the config's expected generation, else "
                           "the lower of the GPU's and the slot's maximum",
    "pcie_gpu_max_generation": "the GPU's own maximum PCIe generation",
    "pcie_width": "current PCIe width",
    "pcie_max_width": "maximum PCIe width",
    "pcie_replays": "PCIe replay counter (since the driver loaded)",
    "ecc_uncorrected": "uncorrected ECC errors (volatile)",
    "ecc_uncorrected_aggregate": "uncorrected ECC errors (lifetime)",
    "remap_pending": "a row remap waits for a reset",
    "remap_failure": "a row remap failed",
    "retired_pages": "memory pages retired, any cause (boards before Ampere)",
    "retired_pages_single_bit": "pages retired for repeated correctable errors",
    "retired_pages_double_bit": "pages retired for an uncorrectable error",
    "retired_pages_pending": "a page retirement waits for a reset",
    "processes": "compute processes on the GPU",
    "process_memory_bytes": "device memory held by compute processes",
    "memory_used_bytes": "device memory in use",
    "xid_total": "XID errors seen since start",
    "last_xid": "the latest XID code (0: none)",
}
FAN_VARS = {"rpm": "fan speed"}
GPU_FAN_VARS = {
    "target_ratio": "the speed the driver asks for (0-1; the reported intended speed where no target is given)",
    "speed_ratio": "the speed NVML reports (the intended speed: a blocked fan still reports it)",
    "rpm": "measured speed, where the board reports it",
    "rpm_per_target": "rpm / target_ratio: how fast the fan turns for what it is asked",
}
CPU_VARS = {
    "celsius": "the socket's chosen temperature",
    "high_celsius": "the sensor's high limit",
    "critical_celsius": "the sensor's critical limit",
    "cpu_utilization": "CPU busy share across all cores (0-1)",
}
HOST_VARS = {
    "gpus_answering": "GPUs answering now",
    "gpus_at_start": "GPUs found at start",
    "gpu_power_watts": "total GPU power",
    "cpu_utilization": "CPU busy share (0-1)",
    "nvml_ok": "the GPU reader worked this poll",
}
PSU_VARS = {"power_watts": "power of the group's GPUs (plus the CPU package where counted)",
            "budget_watts": "the group's budget"}
SENSOR_VARS = {"present": "the sensor answers now"}

KINDS = {"gpu": GPU_VARS, "gpu_fan": GPU_FAN_VARS, "fan": FAN_VARS, "cpu": CPU_VARS, "host": HOST_VARS,
         "psu": PSU_VARS, "sensor": SENSOR_VARS}
# Labels that identify each kind's entities (also shown in alert labels).
LABELS = {"gpu": ("gpu", "uuid", "name"), "gpu_fan": ("gpu", "uuid", "name", "fan"), "fan": ("chip", "fan"),
          "cpu": ("socket", "chip", "sensor"),
          "host": (), "psu": ("psu",), "sensor": ("sensor_kind", "sensor")}


def gpu_entities(sample: Sample, xid_totals: dict[int, int], last_xids: dict[int, int]) -> dict[tuple, dict]:
    info = {i.index: i for i in sample.gpu_info}
    out = {}
    for g in sample.gpus:
        i = info.get(g.index)
        labels = {"gpu": str(g.index), "uuid": g.uuid, "name": i.name if i else ""}
        v: dict = dict(labels, lost=g.lost, xid_total=xid_totals.get(g.index, 0), last_xid=last_xids.get(g.index, 0))
        if not g.lost:
            ce = g.clock_events
            power, limit = g.power_watts, g.power_limit_watts
            v.update(
                power_watts=power, power_limit_watts=limit,
                power_ratio=power / limit if power is not None and limit else None,
                temperature_celsius=g.temperature_celsius, memory_temperature_celsius=g.memory_temperature_celsius,
                utilization_gpu=g.utilization_gpu_ratio, utilization_memory=g.utilization_memory_ratio,
                sm_clock_hertz=g.sm_clock_hertz,
                sw_power_cap=ce.sw_power_cap if ce else None, hw_slowdown=ce.hw_slowdown if ce else None,
                sw_thermal_slowdown=ce.sw_thermal_slowdown if ce else None,
                hw_thermal_slowdown=ce.hw_thermal_slowdown if ce else None,
                hw_power_brake_slowdown=ce.hw_power_brake_slowdown if ce else None,
                pcie_generation=g.pcie_generation, pcie_width=g.pcie_width, pcie_replays=g.pcie_replay_total,
                ecc_uncorrected=g.ecc_errors.uncorrected_volatile if g.ecc_errors else None,
                ecc_uncorrected_aggregate=g.ecc_errors.uncorrected_aggregate if g.ecc_errors else None,
                remap_pending=g.remapped_rows.pending if g.remapped_rows else None,
                remap_failure=g.remapped_rows.failure if g.remapped_rows else None,
                **_retired(g.retired_pages),
                processes=len(g.processes) if g.processes is not None else None,
                process_memory_bytes=sum(p.used_memory_bytes or 0 for p in g.processes)
                if g.processes is not None else None,
                memory_used_bytes=g.memory_used_bytes,
            )
        if i is not None:
            t = i.temperature_thresholds
            v.update(slowdown_celsius=t.slowdown, shutdown_celsius=t.shutdown, max_sm_clock_hertz=i.max_sm_clock_hertz,
                     pcie_max_generation=i.expected_pcie_generation or i.max_pcie_generation,
                     pcie_gpu_max_generation=i.gpu_max_pcie_generation, pcie_max_width=i.max_pcie_width)
        out[("gpu", g.index)] = v
        if not g.lost:
            out.update(_gpu_fans(g, labels))
    return out


def _retired(pages) -> dict:
    if pages is None:
        return {}
    counts = [c for c in (pages.single_bit, pages.double_bit) if c is not None]
    return {"retired_pages": sum(counts) if counts else None, "retired_pages_single_bit": pages.single_bit,
            "retired_pages_double_bit": pages.double_bit, "retired_pages_pending": pages.pending}


def _gpu_fans(g, labels: dict) -> dict[tuple, dict]:
    out = {}
    speeds, targets, rpms = g.fan_speed_ratios or (), g.fan_target_ratios or (), g.fan_speed_rpm or ()
    for n in range(max(len(speeds), len(targets), len(rpms))):
        speed = speeds[n] if n < len(speeds) else None
        target = targets[n] if n < len(targets) and targets[n] is not None else speed
        rpm = rpms[n] if n < len(rpms) else None
        out[("gpu_fan", g.index, n)] = dict(labels, fan=str(n), target_ratio=target, speed_ratio=speed, rpm=rpm,
                                            rpm_per_target=rpm / target if rpm is not None and target else None)
    return out


def host_entities(sample: Sample) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    host = sample.host
    util = host.cpu_utilization_ratio if host else None
    if host is not None:
        for f in host.fans:
            out[("fan", f.chip, f.label)] = {"chip": f.chip, "fan": f.label, "rpm": f.rpm}
        for c in host.cpu_temperatures:
            out[("cpu", c.socket)] = {"socket": str(c.socket), "chip": c.chip, "sensor": c.sensor,
                                      "celsius": c.celsius, "high_celsius": c.high_celsius,
                                      "critical_celsius": c.critical_celsius, "cpu_utilization": util}
    gpu_status = next((r for r in sample.readers if r.name == "gpu"), None)
    out[("host",)] = {
        "gpus_answering": sum(1 for g in sample.gpus if not g.lost),
        "gpus_at_start": len(sample.gpu_info),
        "gpu_power_watts": sum(g.power_watts or 0 for g in sample.gpus if not g.lost),
        "cpu_utilization": util,
        "nvml_ok": gpu_status.ok if gpu_status else None,
    }
    return out


def sensor_keys(sample: Sample) -> set[tuple[str, str]]:
    """Every sensor this sample shows, as (kind, name): fans, hwmon temperatures, NVML."""
    keys = set()
    if sample.host is not None:
        keys |= {("fan", f"{f.chip}/{f.label}") for f in sample.host.fans}
        keys |= {("temperature", f"{t.chip}/{t.label}") for t in sample.host.temperatures}
    if any(r.name == "gpu" and r.ok for r in sample.readers):
        keys.add(("nvml", "NVML"))
    return keys
