"""What rules see: a sample broken into entities (each GPU, GPU fan, fan, CPU socket, sensor,
PSU group, the host), each a flat dict of named values in base units. The variables, per
kind, with what they mean, are the table of readings' (``rigmon.readings``): rule
validation, ``rigmon doctor`` and docs/alerts.md use the same lists, and the code that builds the
GPU and host entities is generated from it."""

from __future__ import annotations

from ..project import gpu_entities, host_entities
from ..readings import DEPRECATED, KINDS
from ..sample import Sample

__all__ = ["DEPRECATED", "KINDS", "LABELS", "gpu_entities", "host_entities", "sensor_keys"]

# Labels that identify each kind's entities (also shown in alert labels).
LABELS = {"gpu": ("gpu", "uuid", "name"), "gpu_fan": ("gpu", "uuid", "name", "fan"), "fan": ("chip", "fan"),
          "cpu": ("socket", "chip", "sensor"),
          "host": (), "psu": ("psu",), "sensor": ("sensor_kind", "sensor")}


def sensor_keys(sample: Sample) -> set[tuple[str, str]]:
    """Every sensor this sample shows, as (kind, name): fans, hwmon temperatures, NVML."""
    keys = set()
    if sample.host is not None:
        keys |= {("fan", f"{f.chip}/{f.label}") for f in sample.host.fans}
        keys |= {("temperature", f"{t.chip}/{t.label}") for t in sample.host.temperatures}
    if any(r.name == "gpu" and r.ok for r in sample.readers):
        keys.add(("nvml", "NVML"))
    return keys
