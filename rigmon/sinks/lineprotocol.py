"""Samples as InfluxDB line protocol: one documented schema (docs/influxdb.md, its schema).

Measurements: ``gpu``, ``gpu_info`` (static facts, once per GPU at start and every hour),
``cpu_temp``, ``temperature``, ``fan``, ``cpu_energy``, ``host``, ``xid``, ``alert``,
``power_budget``, ``job`` (a finished job), ``burnin`` and ``burnin_verdict``.
Every point carries the ``host`` tag. Fields are in base units, integers as integers
(``i``), flags as booleans; a value the hardware does not give is left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..alerts.engine import subject_of
from ..model.project import (
    influx_gpu_info_fields,
    influx_gpu_line,
    influx_head,
    influx_host_lines,
    influx_mig_lines,
    influx_tag,
    influx_value,
)
from ..model.sample import Sample

if TYPE_CHECKING:
    from ..alerts.engine import Transition
    from .base import AlertState
    from .jobs import Job


def line(measurement: str, tags: dict[str, str], fields: dict[str, Any], ns: int) -> str | None:
    """One point; None when no field has a value."""
    encoded = []
    for key, value in fields.items():
        text = influx_value(value)
        if text is not None:
            encoded.append(f"{influx_tag(key)}={text}")
    if not encoded:
        return None
    return f"{influx_head(measurement, tags)} {','.join(encoded)} {ns}"


def encode(sample: Sample, host: str, with_info: bool = False) -> list[str]:
    """The sample's points; the code that writes them is generated from the table of readings."""
    ns = int(round(sample.time * 1e9))
    out: list[str] = []
    info = {i.index: i for i in sample.gpu_info}
    for g in sample.gpus:
        point = influx_gpu_line(g, info.get(g.index), sample, host, ns)
        if point is not None:
            out.append(point)
        if g.mig_instances:
            influx_mig_lines(g, host, ns, out)
    if with_info:
        for i in sample.gpu_info:
            point = line(
                "gpu_info",
                {"host": host, "gpu": str(i.index), "uuid": i.uuid, "name": i.name},
                influx_gpu_info_fields(i, sample),
                ns,
            )
            if point is not None:
                out.append(point)
    for e in sample.events:
        xid = line(
            "xid",
            {"host": host, "gpu": str(e.gpu_index), "uuid": e.uuid, "xid": str(e.xid)},
            {"code": e.xid},
            int(round(e.time * 1e9)),
        )
        if xid is not None:
            out.append(xid)
    if sample.host is not None:
        influx_host_lines(sample, sample.host, host, ns, out)
    return out


def encode_transition(t: Transition, host: str) -> str | None:
    """An alert transition as a point in ``alert``."""
    subject = subject_of(t.labels, sep=",")  # a tag: no spaces
    return line(
        "alert",
        {"host": host, "alertname": t.alertname, "severity": t.severity, "subject": subject},
        {"status": t.status, "firing": t.status == "firing", "summary": t.summary},
        int(round(t.time * 1e9)),
    )


def encode_budgets(state: AlertState, host: str) -> list[str]:
    """Power drawn against each configured budget, as points in ``power_budget``."""
    ns = int(round((state.time or 0.0) * 1e9))
    return [
        x
        for x in (
            line(
                "power_budget",
                {"host": host, "psu": b.psu},
                {"budget_watts": float(b.budget_watts), "draw_watts": float(b.draw_watts)},
                ns,
            )
            for b in state.budgets
        )
        if x is not None
    ]


def encode_job(job: Job, host: str, price_per_kwh: float = 0.0) -> str | None:
    """A finished job as a point in ``job``."""
    d = job.as_dict(price_per_kwh)
    tags = {"host": host, "job": job.key, "user": job.user or ""}
    if job.unit:
        tags["unit"] = job.unit
    fields = {
        "id": job.id,
        "command": job.command,
        "started": job.started,
        "seconds": d["seconds"],
        "gpus": ",".join(map(str, sorted(job.gpus))),
        "gpu_seconds": job.gpu_seconds,
        "energy_joules": job.energy_joules,
        "cost": d["cost"],
        "mean_power_watts": d["mean_power_watts"],
        "mean_power_ratio": d["mean_power_ratio"],
        "mean_utilization_ratio": d["mean_utilization_ratio"],
        "peak_temperature_celsius": job.peak_temperature,
        "throttle_seconds": job.throttle_seconds,
        "starved": job.starved,
        "alerts": ",".join(sorted(job.alerts)),
    }
    return line("job", tags, fields, int(round((job.ended or job.last_seen) * 1e9)))


def encode_burnin_progress(
    host: str, run: str, unit: str, gpu: int | None, event: dict[str, Any], floor: float | None, started: float
) -> str | None:
    """One step of a burn-in worker as a point in ``burnin``."""
    tags = {"host": host, "run": run, "unit": unit, "gpu": "" if gpu is None else str(gpu)}
    return line(
        "burnin",
        tags,
        {
            "tokens_per_s": float(event["tokens_per_s"]),
            "loss": event.get("loss"),
            "floor": floor,
            "step": int(event["step"]),
        },
        int((started + event["t"]) * 1e9),
    )


def encode_burnin_verdict(host: str, run: str, verdict: str, seconds: float, ns: int) -> str | None:
    """A burn-in's verdict as a point in ``burnin_verdict``."""
    return line(
        "burnin_verdict",
        {"host": host, "run": run},
        {"verdict": verdict, "passed": verdict == "pass", "minutes": seconds / 60},
        ns,
    )
