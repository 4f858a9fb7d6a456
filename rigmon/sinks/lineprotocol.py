"""Samples as InfluxDB line protocol: one documented schema (README, "InfluxDB schema").

Measurements: ``gpu``, ``gpu_info`` (static facts, once per GPU at start and every hour),
``cpu_temp``, ``temperature``, ``fan``, ``cpu_energy``, ``host``, ``xid``, ``alert``.
Every point carries the ``host`` tag. Fields are in base units, integers as integers
(``i``), flags as booleans; a value the hardware does not give is left out.
"""

from __future__ import annotations

import math

from ..alerts.engine import subject_of
from ..sample import CLOCK_EVENT_BITS, Sample


def _tag(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ") or "_"


def _field_value(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}i"
    if isinstance(value, float):
        # InfluxDB rejects the whole point for one NaN or inf: such a field is left out
        return repr(value) if math.isfinite(value) else None
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'


def line(measurement: str, tags: dict[str, str], fields: dict, ns: int) -> str | None:
    encoded = []
    for key, value in fields.items():
        text = _field_value(value)
        if text is not None:
            encoded.append(f"{_tag(key)}={text}")
    if not encoded:
        return None
    tag_text = "".join(f",{_tag(k)}={_tag(v)}" for k, v in sorted(tags.items()))
    return f"{_tag(measurement)}{tag_text} {','.join(encoded)} {ns}"


def encode(sample: Sample, host: str, with_info: bool = False) -> list[str]:
    ns = int(round(sample.time * 1e9))
    out: list[str | None] = []
    info = {i.index: i for i in sample.gpu_info}
    for g in sample.gpus:
        i = info.get(g.index)
        tags = {"host": host, "gpu": str(g.index), "uuid": g.uuid, "name": i.name if i else ""}
        fields = {"lost": g.lost}
        if not g.lost:
            fields.update(
                power_watts=g.power_watts, power_limit_watts=g.power_limit_watts, energy_joules=g.energy_joules,
                temperature_celsius=g.temperature_celsius, memory_temperature_celsius=g.memory_temperature_celsius,
                utilization_gpu_ratio=g.utilization_gpu_ratio, utilization_memory_ratio=g.utilization_memory_ratio,
                graphics_clock_hertz=g.graphics_clock_hertz, sm_clock_hertz=g.sm_clock_hertz,
                memory_clock_hertz=g.memory_clock_hertz, memory_used_bytes=g.memory_used_bytes,
                memory_total_bytes=g.memory_total_bytes, performance_state=g.performance_state,
                pcie_generation=g.pcie_generation, pcie_width=g.pcie_width, pcie_replays=g.pcie_replay_total,
                pcie_rx_bytes_per_second=g.pcie_rx_bytes_per_second,
                pcie_tx_bytes_per_second=g.pcie_tx_bytes_per_second,
            )
            if i is not None:
                fields.update(slowdown_celsius=i.temperature_thresholds.slowdown,
                              shutdown_celsius=i.temperature_thresholds.shutdown)
            if g.clock_events is not None:
                mask = 0
                for name, bit in CLOCK_EVENT_BITS:
                    active = getattr(g.clock_events, name)
                    if active is not None:
                        fields[f"event_{name}"] = active
                        mask |= bit if active else 0
                fields["clock_event_mask"] = mask
            if g.throttle_seconds is not None:
                for name, value in g.throttle_seconds._asdict().items():
                    fields[f"throttle_{name}_seconds"] = value
            for suffix, values in (("speed_ratio", g.fan_speed_ratios), ("target_speed_ratio", g.fan_target_ratios),
                                   ("speed_rpm", g.fan_speed_rpm)):
                for n, value in enumerate(values or ()):
                    fields[f"fan{n}_{suffix}"] = value
            if g.ecc_errors is not None:
                for name, value in g.ecc_errors._asdict().items():
                    fields[f"ecc_{name}"] = value
            if g.remapped_rows is not None:
                r = g.remapped_rows
                fields.update(remapped_rows_correctable=r.correctable, remapped_rows_uncorrectable=r.uncorrectable,
                              remap_pending=r.pending, remap_failure=r.failure)
            if g.retired_pages is not None:
                p = g.retired_pages
                fields.update(retired_pages_single_bit=p.single_bit, retired_pages_double_bit=p.double_bit,
                              retired_pages_pending=p.pending)
            if g.processes is not None:
                fields.update(processes=len(g.processes),
                              processes_memory_bytes=sum(p.used_memory_bytes or 0 for p in g.processes))
        out.append(line("gpu", tags, fields, ns))
    if with_info:
        system = sample.system
        for i in sample.gpu_info:
            out.append(line("gpu_info", {"host": host, "gpu": str(i.index), "uuid": i.uuid, "name": i.name}, {
                "pci_bus_id": i.pci_bus_id, "serial": i.serial, "vbios": i.vbios_version,
                "compute_capability": i.compute_capability,
                "driver": system.driver_version if system else None,
                "power_limit_default_watts": i.power_limit_default_watts,
                "max_sm_clock_hertz": i.max_sm_clock_hertz, "max_pcie_generation": i.max_pcie_generation,
                "max_pcie_width": i.max_pcie_width, "gpu_max_pcie_generation": i.gpu_max_pcie_generation,
                "expected_pcie_generation": i.expected_pcie_generation}, ns))
    for e in sample.events:
        out.append(line("xid", {"host": host, "gpu": str(e.gpu_index), "uuid": e.uuid, "xid": str(e.xid)},
                        {"code": e.xid}, int(round(e.time * 1e9))))
    h = sample.host
    if h is not None:
        for c in h.cpu_temperatures:
            out.append(line("cpu_temp", {"host": host, "socket": str(c.socket), "chip": c.chip, "sensor": c.sensor},
                            {"celsius": c.celsius, "high_celsius": c.high_celsius,
                             "critical_celsius": c.critical_celsius}, ns))
        seen = set()
        for t in h.temperatures:
            if (t.chip, t.label) not in seen:
                seen.add((t.chip, t.label))
                out.append(line("temperature", {"host": host, "chip": t.chip, "sensor": t.label},
                                {"celsius": t.celsius}, ns))
        for f in h.fans:
            out.append(line("fan", {"host": host, "chip": f.chip, "fan": f.label}, {"rpm": f.rpm, "turned": f.turned},
                            ns))
        for e in h.cpu_energy:
            out.append(line("cpu_energy", {"host": host, "zone": e.zone}, {"joules": e.joules}, ns))
        out.append(line("host", {"host": host}, {
            "cpu_utilization_ratio": h.cpu_utilization_ratio, "cpu_cores": h.cpu_count, "load1": h.load1,
            "load5": h.load5, "load15": h.load15, "memory_total_bytes": h.memory_total_bytes,
            "memory_available_bytes": h.memory_available_bytes,
            "gpus_answering": sum(1 for g in sample.gpus if not g.lost), "gpus_at_start": len(sample.gpu_info),
            # a float even with no GPU (sum() of nothing is the integer 0: a field type conflict)
            "gpu_power_watts": float(sum(g.power_watts or 0.0 for g in sample.gpus if not g.lost))}, ns))
    return [x for x in out if x is not None]


def encode_transition(t, host: str) -> str | None:
    """An alert transition as a point in ``alert``."""
    subject = subject_of(t.labels, sep=",")  # a tag: no spaces
    return line("alert", {"host": host, "alertname": t.alertname, "severity": t.severity, "subject": subject},
                {"status": t.status, "firing": t.status == "firing", "summary": t.summary},
                int(round(t.time * 1e9)))


def encode_budgets(state, host: str) -> list[str]:
    """Power drawn against each configured budget, as points in ``power_budget``."""
    ns = int(round(state.time * 1e9))
    return [x for x in (line("power_budget", {"host": host, "psu": b.psu},
                             {"budget_watts": float(b.budget_watts), "draw_watts": float(b.draw_watts)}, ns)
                        for b in state.budgets) if x is not None]
