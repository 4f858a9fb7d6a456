"""Samples as InfluxDB line protocol: one documented schema (README, "InfluxDB schema").

Measurements: ``gpu``, ``gpu_info`` (static facts, once per GPU at start and every hour),
``cpu_temp``, ``temperature``, ``fan``, ``cpu_energy``, ``host``, ``xid``, ``alert``.
Every point carries the ``host`` tag. Fields are in base units, integers as integers
(``i``), flags as booleans; a value the hardware does not give is left out.
"""

from __future__ import annotations

import math

from ..alerts.engine import subject_of
from ..project import influx_gpu_fields, influx_gpu_info_fields, influx_host_points
from ..sample import Sample


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
    """The sample's points; the fields are generated from the table of readings."""
    ns = int(round(sample.time * 1e9))
    out: list[str | None] = []
    info = {i.index: i for i in sample.gpu_info}
    for g in sample.gpus:
        i = info.get(g.index)
        tags = {"host": host, "gpu": str(g.index), "uuid": g.uuid, "name": i.name if i else ""}
        out.append(line("gpu", tags, influx_gpu_fields(g, i, sample), ns))
    if with_info:
        for i in sample.gpu_info:
            out.append(line("gpu_info", {"host": host, "gpu": str(i.index), "uuid": i.uuid, "name": i.name},
                            influx_gpu_info_fields(i, sample), ns))
    for e in sample.events:
        out.append(line("xid", {"host": host, "gpu": str(e.gpu_index), "uuid": e.uuid, "xid": str(e.xid)},
                        {"code": e.xid}, int(round(e.time * 1e9))))
    if sample.host is not None:
        def point(measurement: str, names: tuple[str, ...], values: list[str], fields: dict) -> None:
            tags = {name: value for name, value in zip(names, values, strict=True) if value != ""}  # unknown: none
            out.append(line(measurement, {"host": host, **tags}, fields, ns))

        influx_host_points(sample, sample.host, point)
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
