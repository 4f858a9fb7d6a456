"""Does the generated per-poll code pay? Each generated function against plain closures over
the same table, on the same samples, with the same output.

rigmon writes straight-line Python from the table of readings for the four things it does with
every poll: the GPU reader building each ``GpuReading`` (``rigmon.readers.gpu._build``), the
Prometheus families (``fill_prometheus``), the InfluxDB lines (``influx_gpu_line``,
``influx_host_lines``) and the alert engine's variables (``gpu_entities``, ``host_entities``).
This bench builds the plain alternative to each (a list of ``project.getter`` closures walked
per sample, as one would write it without code generation), checks that both give the same
output for every sample, and times both over the rich 8-GPU scenario (CPU seconds, best of
``--repeats``). A generated function is worth its ``exec`` where it is clearly faster: the
ratio is printed per function, and the docstrings of ``rigmon.model.project`` and
``rigmon.readers.gpu`` quote it.

    python tests/bench/bench_generated.py [--samples N] [--repeats R] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parents[1])]

import scenarios as sc  # noqa: E402

from rigmon.config import schema as configmod  # noqa: E402
from rigmon.exporters import prometheus as exporter  # noqa: E402
from rigmon.model import project  # noqa: E402
from rigmon.model.project import _HOST_LOOPS, getter, gpu_fans  # noqa: E402
from rigmon.model.readings import ENTITIES, FAMILIES, READINGS  # noqa: E402
from rigmon.model.sample import GpuReading  # noqa: E402
from rigmon.readers import gpu as gpu_reader  # noqa: E402

# The host-side records and their labels, as plain functions of (h, r).
_RECORDS = {
    entity: eval(f"lambda h: {records}", {"_unique": project.unique_temperatures})
    for entity, (records, _) in _HOST_LOOPS.items()
}  # noqa: E501, S307
_LABELS = {entity: eval(f"lambda r: {labels}") for entity, (_, labels) in _HOST_LOOPS.items()}  # noqa: S307


def _parts(entity: str, **flags):
    rs = [
        r
        for r in READINGS
        if r.entity == entity and r.get is not None and all(getattr(r, k) == v for k, v in flags.items())
    ]
    return [r for r in rs if r.always], [r for r in rs if not r.always and not r.static], [r for r in rs if r.static]


# --- Prometheus ---------------------------------------------------------------------------------
def plain_fill():
    def prepared(rs):
        return [(r.family, getter(r), tuple(r.labels), r.unit == "bool") for r in rs if r.family]

    always, polled, static = (prepared(p) for p in _parts("gpu"))
    fan = prepared(r for r in READINGS if r.entity == "gpu_fan" and r.get is not None)
    gpu_host = prepared(r for r in READINGS if r.entity == "host" and r.family and FAMILIES[r.family].group == "gpu")
    procs = prepared(r for r in READINGS if r.entity == "gpu_process")
    loops = [(e, prepared(r for r in READINGS if r.entity == e)) for e in _HOST_LOOPS]
    host = prepared(r for r in READINGS if r.entity == "host" and r.family and FAMILIES[r.family].group == "host")

    def emit(families, items, env, labels):
        for family, get, extra, flag in items:
            v = get(env)
            if v is not None:
                families[family].add_metric(labels + extra, int(v) if flag else v)

    def fill(s, families, process_series=0):
        h = s.host
        info = {x.index: x for x in s.gpu_info}
        env = {"s": s, "h": h}
        for g in s.gpus:
            i = info.get(g.index)
            env["g"], env["i"] = g, i
            labels = (str(g.index), g.uuid)
            emit(families, always, env, labels)
            if g.lost:
                continue
            emit(families, polled, env, labels)
            for n, f in enumerate(gpu_fans(g)):
                env["f"] = f
                emit(families, fan, env, (*labels, str(n)))
            if i is not None:
                emit(families, static, env, labels)
        emit(families, gpu_host, env, ())
        for r in project.process_series(s, process_series):
            env["r"] = r
            emit(families, procs, env, (r.gpu, r.uuid, r.pid, r.user, r.job))
        if h is None:
            return
        for entity, items in loops:
            if items:
                for r in _RECORDS[entity](h):
                    env["r"] = r
                    emit(families, items, env, tuple(_LABELS[entity](r)))
        emit(families, host, env, ())

    return fill


# --- InfluxDB -----------------------------------------------------------------------------------
def _field(key: str, v) -> str | None:
    text = project.influx_value(v)
    return None if text is None else key + text


def plain_influx():
    def prepared(rs):
        return [(project.influx_tag(r.name) + "=", getter(r)) for r in rs]

    always, polled, static = (prepared(p) for p in _parts("gpu", influx=True))
    static = [
        x for x, r in zip(static, _parts("gpu", influx=True)[2], strict=True) if (r.measurement or "gpu") == "gpu"
    ]
    fan = [(r.name, getter(r)) for r in READINGS if r.entity == "gpu_fan" and r.influx and r.get is not None]

    def add(fields, items, env):
        for key, get in items:
            text = _field(key, get(env))
            if text is not None:
                fields.append(text)

    def gpu_line(g, i, s, host, ns):
        name = i.name if i is not None else ""
        head = project.influx_head("gpu", {"host": host, "gpu": str(g.index), "uuid": g.uuid, "name": name})
        env, fields = {"g": g, "i": i, "s": s}, []
        add(fields, always, env)
        if not g.lost:
            add(fields, polled, env)
            if i is not None:
                add(fields, static, env)
            fans = gpu_fans(g)
            for name, get in fan:
                for n, f in enumerate(fans):
                    env["f"] = f
                    text = _field(f"fan{n}_{name}=", get(env))
                    if text is not None:
                        fields.append(text)
        return f"{head} {','.join(fields)} {ns}" if fields else None

    loops = []
    for entity in _HOST_LOOPS:
        rs = [r for r in READINGS if r.entity == entity and r.influx]
        if rs:
            loops.append((entity, ENTITIES[entity].measurement, ENTITIES[entity].influx_tags, prepared(rs)))
    host_items = prepared(r for r in READINGS if r.entity == "host" and r.influx)

    def host_lines(s, h, host, ns, out):
        env = {"s": s, "h": h}
        for entity, measurement, names, items in loops:
            for r in _RECORDS[entity](h):
                env["r"] = r
                labels = _LABELS[entity](r)
                head = project.influx_head(
                    measurement, {"host": host, **{k: x for k, x in zip(names, labels, strict=True) if x != ""}}
                )
                fields = []
                add(fields, items, env)
                if fields:
                    out.append(f"{head} {','.join(fields)} {ns}")
        fields = []
        add(fields, host_items, env)
        if fields:
            out.append(f"{project.influx_head('host', {'host': host})} {','.join(fields)} {ns}")

    return gpu_line, host_lines


# --- alert entities -----------------------------------------------------------------------------
def plain_entities():
    def prepared(rs):
        return [(r.name, getter(r)) for r in rs]

    always, polled, static = (prepared(p) for p in _parts("gpu", rule=True))
    fan = prepared(r for r in READINGS if r.entity == "gpu_fan" and r.rule and r.get is not None)
    kinds = [
        (e, prepared(r for r in READINGS if r.entity == e and r.rule), ENTITIES[e].prometheus_labels)
        for e in ("cpu", "fan")
    ]
    keys = {"cpu": lambda r: ("cpu", r.socket), "fan": lambda r: ("fan", r.chip, r.device, r.label)}
    host = prepared(r for r in READINGS if r.entity == "host" and r.rule)

    def gpu_entities(s, xid_totals, last_xids, gpu=None):
        out = {}
        info = {x.index: x for x in s.gpu_info}
        env = {"s": s}
        for g in s.gpus:
            if gpu is not None and g.index != gpu:
                continue
            i = info.get(g.index)
            env["g"], env["i"] = g, i
            labels = {"gpu": str(g.index), "uuid": g.uuid, "name": i.name if i else ""}
            v = {**labels, **{n: get(env) for n, get in always}}
            v["xid_total"], v["last_xid"] = xid_totals.get(g.index, 0), last_xids.get(g.index, 0)
            if not g.lost:
                v.update((n, get(env)) for n, get in polled)
            if i is not None:
                v.update((n, get(env)) for n, get in static)
            out[("gpu", g.index)] = v
            if g.lost:
                continue
            for n, f in enumerate(gpu_fans(g)):
                env["f"] = f
                out[("gpu_fan", g.index, n)] = {**labels, "fan": str(n), **{name: get(env) for name, get in fan}}
        return out

    def host_entities(s, kind=None):
        out, h = {}, s.host
        env = {"s": s, "h": h}
        for entity, items, names in kinds:
            if h is not None and kind in (None, entity):
                for r in _RECORDS[entity](h):
                    env["r"] = r
                    labels = _LABELS[entity](r)
                    out[keys[entity](r)] = {
                        **dict(zip(names, labels, strict=True)),
                        **{n: get(env) for n, get in items},
                    }
        if kind in (None, "host"):
            out[("host",)] = {n: get(env) for n, get in host}
        return out

    return gpu_entities, host_entities


# --- the GPU reader's build ---------------------------------------------------------------------
def plain_build():
    """build(...) as a list of per-field closures, the tuple made from their answers."""
    fixed = {
        "index": lambda a: a[0].index,
        "uuid": lambda a: a[0].info.uuid,
        "lost": lambda a: False,
        "energy_joules": lambda a: a[0].energy,
        "clock_events": lambda a: a[3],
        "throttle_seconds": lambda a: a[0].throttle,
        "fan_speed_ratios": lambda a: a[4],
        "fan_target_ratios": lambda a: a[5],
        "fan_speed_rpm": lambda a: a[6],
        "pcie_rx_bytes_per_second": lambda a: a[0].pcie_rx,
        "pcie_tx_bytes_per_second": lambda a: a[0].pcie_tx,
        "ecc_errors": lambda a: a[7],
        "remapped_rows": lambda a: a[8],
        "retired_pages": lambda a: a[0].retired_pages,
        "processes": lambda a: a[9],
        "pcie_full_in_other_pstate": lambda a: a[10],
    }
    convert = {
        "watts": gpu_reader._watts,
        "celsius": gpu_reader._celsius,
        "hertz": gpu_reader._hertz,
        "ratio": gpu_reader._ratio,
        "count": gpu_reader._num,
    }

    def polled(p):
        conv, attr = convert[p.convert], p.attr
        if p.field_id is not None:
            fid = p.field_id
            if attr:
                return lambda a: conv(gpu_reader._attr(a[2].get(fid), attr))
            return lambda a: conv(a[2].get(fid))
        key = gpu_reader._plan_name(p)
        if attr:
            return lambda a: conv(gpu_reader._attr(a[1](key), attr))
        return lambda a: conv(a[1](key))

    by_field = {**fixed, **{p.field: polled(p) for p in gpu_reader.POLLED}}
    fields = [by_field[f] for f in GpuReading._fields]
    new = tuple.__new__

    def build(*args):
        return new(GpuReading, [f(args) for f in fields])

    return build


# --- the run ------------------------------------------------------------------------------------
def samples(count: int):
    config = configmod.parse({"prometheus": {"enabled": False}, "alerts": {"enabled": True}}, "bench")
    built = []
    calls = []  # the reader's build calls, with their arguments, to replay through both builds
    real = gpu_reader._build

    def keep(*args):
        calls.append(args)
        return real(*args)

    gpu_reader._build = keep
    try:
        with sc.Replayed(sc.rich(sc.h200()), config, at=sc.LOAD_AT, loop=True) as r:
            for n in range(count):
                built.append(r.poll(sc.LOAD_AT + n))
    finally:
        gpu_reader._build = real
    return built, calls


def cpu(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    logging.disable(logging.CRITICAL)  # the scenario's XID and alert lines
    built, calls = samples(args.samples)
    fill, (gpu_line, host_lines), (gpu_ents, host_ents), build = (
        plain_fill(),
        plain_influx(),
        plain_entities(),
        plain_build(),
    )

    def prometheus(f):
        def run():
            for s in built:
                families = {name: family.empty() for name, family in exporter._FAMILIES.items()}
                f(s, families, 8)
            return families

        return run

    def influx(line, lines):
        def run():
            for s in built:
                info = {i.index: i for i in s.gpu_info}
                out = [line(g, info.get(g.index), s, "box", 1) for g in s.gpus]
                lines(s, s.host, "box", 1, out)
            return out

        return run

    def entities(g, h):
        def run():
            for s in built:
                out = g(s, {3: 1}, {3: 79})
                out.update(h(s))
            return out

        return run

    def reader(b):
        def run():
            return [b(*a) for a in calls]

        return run

    cases = {
        "reader build (GpuReading)": (reader(gpu_reader._build), reader(build)),
        "Prometheus families": (prometheus(project.fill_prometheus), prometheus(fill)),
        "InfluxDB lines": (
            influx(project.influx_gpu_line, project.influx_host_lines),
            influx(gpu_line, host_lines),
        ),
        "alert variables": (
            entities(project.gpu_entities, project.host_entities),
            entities(gpu_ents, host_ents),
        ),
    }
    per = len(built)
    results = {}
    for name, (generated, plain) in cases.items():
        a, b = generated(), plain()
        if name == "Prometheus families":
            a, b = ({k: f.samples for k, f in x.items()} for x in (a, b))
        if a != b:
            raise SystemExit(f"{name}: the plain closures do not give the generated code's output")
        g_s, p_s = cpu(generated, args.repeats), cpu(plain, args.repeats)
        results[name] = {
            "generated_us": g_s / per * 1e6,
            "plain_us": p_s / per * 1e6,
            "plain_over_generated": p_s / g_s,
        }
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{per} samples of 8 GPUs (rich scenario); CPU per sample, best of {args.repeats}")
    print(f"{'':28} {'generated':>10} {'closures':>10} {'closures/generated':>19}")
    for name, r in results.items():
        print(f"{name:28} {r['generated_us']:8.1f}µs {r['plain_us']:8.1f}µs {r['plain_over_generated']:18.2f}×")


if __name__ == "__main__":
    main()
