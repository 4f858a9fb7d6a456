"""What rules see: a sample broken into entities (each GPU, GPU fan, fan, CPU socket, sensor,
PSU group, the host), each a flat dict of named values in base units. The variables, per
kind, with what they mean, are the table of readings' (``rigmon.model.readings``): rule
validation, ``rigmon doctor`` and docs/alerts.md use the same lists, and the code that builds the
GPU and host entities is generated from it."""

from __future__ import annotations

from ..model.project import gpu_entities, host_entities
from ..model.readings import DEPRECATED, KINDS
from ..model.sample import Sample

__all__ = [
    "BOX",
    "DEPRECATED",
    "ENTITY",
    "EVERY",
    "ITS_GPU",
    "KINDS",
    "LABELS",
    "MISSING",
    "NVML_SENSOR",
    "gpu_entities",
    "host_entities",
    "inhibit_scope",
    "sensor_aliases",
    "sensor_keys",
    "sensor_name",
]

# Labels that identify each kind's entities (also shown in alert labels).
LABELS = {
    "gpu": ("gpu", "uuid", "name"),
    "gpu_fan": ("gpu", "uuid", "name", "fan"),
    "fan": ("chip", "fan"),
    "cpu": ("socket", "chip", "sensor"),
    "host": (),
    "psu": ("psu",),
    "sensor": ("sensor_kind", "sensor"),
}


# What a firing alert holds back of the rules it inhibits, by (its kind, theirs): its own
# entity for a rule of its kind; the box's for a host rule (a lost GPU holds back the box's count
# of GPUs); its GPU's for a GPU fan (a stalled fan explains its GPU's heat); every socket's for a
# fan (a stopped fan explains a hot idle CPU: hwmon does not say which CPU a fan cools).
ENTITY, BOX, ITS_GPU, EVERY = "entity", "box", "its gpu", "every"


def inhibit_scope(kind: str, target_kind: str) -> str | None:
    """Which alerts of a ``target_kind`` rule an alert of a ``kind`` rule holds back; None: none
    (the pair is refused)."""
    if kind == target_kind:
        return ENTITY
    if target_kind == "host":
        return BOX
    return {("gpu_fan", "gpu"): ITS_GPU, ("fan", "cpu"): EVERY}.get((kind, target_kind))


def sensor_name(chip: str, device: str | None, label: str) -> str:
    """A sensor as SensorMissing names it: chip/device/label where its device is known (two
    sockets' coretemp, two drives' nvme), else chip/label."""
    return f"{chip}/{device}/{label}" if device else f"{chip}/{label}"


def sensor_aliases(sample: Sample) -> dict[tuple[str, str], tuple[str, str]]:
    """The sensors known by device, each under the name an earlier rigmon (and a config's
    expected_sensors) gave it without one: chip/label."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    if sample.host is not None:
        for kind, records in (("fan", sample.host.fans), ("temperature", sample.host.temperatures)):
            for r in records:
                if r.device:
                    out.setdefault((kind, f"{r.chip}/{r.label}"), (kind, sensor_name(r.chip, r.device, r.label)))
    return out


MISSING = "missing"  # a GPU the box has had that NVML no longer lists: its entity is ("gpu", MISSING, uuid)
NVML_SENSOR = ("nvml", "NVML")  # NVML itself, as SensorMissing names it


def sensor_keys(sample: Sample) -> set[tuple[str, str]]:
    """Every sensor this sample shows, as (kind, name): fans, hwmon temperatures, NVML."""
    keys = set()
    if sample.host is not None:
        keys |= {("fan", sensor_name(f.chip, f.device, f.label)) for f in sample.host.fans}
        keys |= {("temperature", sensor_name(t.chip, t.device, t.label)) for t in sample.host.temperatures}
    if any(r.name == "gpu" and r.ok for r in sample.readers):
        keys.add(NVML_SENSOR)
    return keys
