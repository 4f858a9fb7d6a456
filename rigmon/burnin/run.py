"""``rigmon burnin``: one training worker per GPU, the hardware watched by the daemon's own
readers and alert rules, then a verdict, a report and an exit code (0 pass, 1 fail, 2 could
not run)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from .. import __version__
from .. import args as argtypes
from .. import config as configmod
from ..sample import CLOCK_EVENT_BITS, Sample
from ..sinks.lineprotocol import line
from . import report as reportmod
from .verdict import Limits, judge, steady_rate

log = logging.getLogger("rigmon.burnin")

# Dense bf16/fp16 tensor throughput (FLOP/s), for MFU. The first name that matches wins.
PEAK_FLOPS = [("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("GH200", 989e12), ("A100", 312e12),
              ("L40S", 362e12), ("L40", 181e12), ("RTX 6000 Ada", 364e12), ("RTX 4090", 165e12),
              ("RTX 4080", 97e12), ("RTX 3090", 71e12), ("RTX 3080", 59e12), ("RTX A6000", 155e12), ("A10", 125e12),
              ("L4", 121e12), ("V100", 125e12), ("T4", 65e12)]


def add_parser(sub, add_config) -> None:
    p = sub.add_parser("burnin", help="train a GPT-style model on every GPU while watching the hardware; verdict")
    add_config(p)
    how_long = p.add_mutually_exclusive_group(required=True)
    how_long.add_argument("--hours", type=argtypes.positive)
    how_long.add_argument("--minutes", type=argtypes.positive)
    p.add_argument("--gpus", default="all", help="GPU indices, e.g. 0,1 (default: all)")
    p.add_argument("--report", metavar="DIR", help="where to write burnin.json and burnin.html")
    p.add_argument("--model", default="auto", choices=["auto", "tiny", "small", "gpt2"],
                   help="auto: GPT-2 small (124M) on 16 GB GPUs and more, smaller below, tiny on the CPU")
    p.add_argument("--baseline", metavar="OLD.json", help="compare with an earlier report of this box")
    p.add_argument("--force", action="store_true", help="run even while a chosen GPU runs a compute process (a "
                                                          "training run): by default the burn-in refuses, exit 2")
    p.add_argument("--ddp", action="store_true", help="train data-parallel across the GPUs (NCCL): stresses "
                                                      "the PCIe/NVLink paths between them")
    # hardware from a recording: for testing the verdict without a GPU
    p.add_argument("--replay", metavar="FILE", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_burnin)


def _parse_gpus(text: str) -> list[int] | None:
    """``--gpus``: None for all, else the indices."""
    from ..cli import UsageError

    if text == "all":
        return None
    try:
        indices = [int(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(f"--gpus: expected 'all' or indices like 0,1, not {text!r}") from None
    if any(i < 0 for i in indices):
        raise UsageError("--gpus: indices start at 0")
    return indices


def busy_gpus(sample: Sample, chosen: list[int] | None) -> list[str]:
    """Every compute process on a chosen GPU, as 'GPU i (name): PID p (user) command'; our own
    process is left out."""
    import psutil

    names = {i.index: i.name for i in sample.gpu_info}
    out = []
    for g in sample.gpus:
        if g.lost or (chosen is not None and g.index not in chosen):
            continue
        for p in g.processes or ():
            if p.pid == os.getpid():
                continue
            try:
                proc = psutil.Process(p.pid)
                command = " ".join(proc.cmdline()) or proc.name()
                who = f" ({proc.username()})"
            except (psutil.Error, OSError):
                command, who = "(not visible from here: another container or PID namespace?)", ""
            if len(command) > 100:
                command = command[:97] + "..."
            out.append(f"GPU {g.index} ({names.get(g.index) or 'unknown'}) runs PID {p.pid}{who} {command}")
    return out


def peak_flops(name: str | None) -> float | None:
    if not name:
        return None
    return next((flops for key, flops in PEAK_FLOPS if key.lower() in name.lower()), None)


def compact(sample: Sample, started: float) -> dict:
    """What the report and the verdict keep of a sample."""
    info = {i.index: i for i in sample.gpu_info}
    gpus = {}
    for g in sample.gpus:
        i = info.get(g.index)
        entry = {"lost": g.lost}
        if not g.lost:
            entry.update(temp=g.temperature_celsius, mem_temp=g.memory_temperature_celsius, power=g.power_watts,
                         limit=g.power_limit_watts, sm_clock=g.sm_clock_hertz, util=g.utilization_gpu_ratio,
                         energy=g.energy_joules, pcie_gen=g.pcie_generation, pcie_width=g.pcie_width,
                         ecc_uncorrected=g.ecc_errors.uncorrected_volatile if g.ecc_errors else None,
                         remap_pending=g.remapped_rows.pending if g.remapped_rows else None,
                         remap_failure=g.remapped_rows.failure if g.remapped_rows else None,
                         events={name: True for name, _ in CLOCK_EVENT_BITS
                                 if g.clock_events is not None and getattr(g.clock_events, name)})
        if i is not None:
            entry.update(slowdown_celsius=i.temperature_thresholds.slowdown, pcie_max_gen=i.max_pcie_generation,
                         pcie_max_width=i.max_pcie_width)
        gpus[str(g.index)] = entry
    tick = {"t": round(sample.time - started, 2), "gpus": gpus,
            "events": [{"gpu": e.gpu_index, "xid": e.xid} for e in sample.events]}
    if sample.host is not None:
        tick["cpu"] = {f"CPU{c.socket} {c.sensor}": c.celsius for c in sample.host.cpu_temperatures}
        tick["fans"] = {f"{f.chip}/{f.label}": f.rpm for f in sample.host.fans}
        tick["cpu_energy"] = sum(e.joules for e in sample.host.cpu_energy if e.zone.startswith("package"))
        tick["cpu_util"] = sample.host.cpu_utilization_ratio
    return tick


class Worker:
    def __init__(self, name: str, gpu: int | None, device: str, seconds: float, model: str, report_dir: Path,
                 env: dict):
        self.name, self.gpu, self.device = name, gpu, device
        self.events: list[dict] = []
        self.log = open(report_dir / f"worker-{name}.log", "w")
        command = [sys.executable, "-m", "rigmon.burnin.worker", "--device", device, "--seconds", str(seconds),
                   "--model", model]
        if env.get("WORLD_SIZE"):
            command.append("--ddp")
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env={**os.environ, **env})
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            try:
                event = json.loads(raw)
            except json.JSONDecodeError:
                self.log.write(raw)
                continue
            self.events.append(event)
            if event.get("event") == "error":
                log.error("%s: %s", self.name, event["message"])

    def latest(self, kind: str) -> dict | None:
        return next((e for e in reversed(self.events) if e.get("event") == kind), None)

    def as_unit(self) -> dict:
        return {"name": self.name, "gpu": self.gpu, "device": self.device, "events": list(self.events),
                "exit_code": self.proc.returncode}


def cmd_burnin(args) -> int:
    try:
        import torch
    except ImportError:
        print("rigmon burnin needs PyTorch: python3 -m pip install 'rigmon[burnin]' (or pip install torch)",
              file=sys.stderr)
        return 2
    from ..alerts.sink import build_engine
    from ..cli import UsageError
    from ..poller import build_poller
    from ..recording import Recording
    from ..replay import ReplayClock, ReplaySource

    config = configmod.load(args.config)
    seconds = (args.hours or 0) * 3600 + (args.minutes or 0) * 60
    if seconds <= 0:
        raise UsageError("--hours or --minutes must be positive")
    if seconds > 31 * 86400:
        raise UsageError("a burn-in runs at most 31 days (--hours 744)")
    chosen = _parse_gpus(args.gpus)
    source = ReplaySource(Recording.load(args.replay), ReplayClock(), loop=True) if args.replay else None
    poller = build_poller(config, source)
    poller.open()
    first = poller.poll()
    busy = busy_gpus(first, chosen)
    if busy and not args.force:
        poller.close()
        raise UsageError("not starting: " + "; ".join(busy) + ". A burn-in beside a training run would disturb it "
                         "and judge neither fairly; stop it, choose other GPUs with --gpus, or pass --force")
    unknown = [g.index for g in first.gpus
               if not g.lost and g.processes is None and (chosen is None or g.index in chosen)]
    if unknown:
        log.warning("cannot tell whether GPU %s runs a training job (NVML lists no processes here): starting anyway",
                    ", ".join(map(str, unknown)))
    host = socket.gethostname()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    report_dir = Path(args.report or f"rigmon-burnin-{host}-{stamp}")
    report_dir.mkdir(parents=True, exist_ok=True)
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's GPU i is NVML's GPU i
    notes = []
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        indices = list(range(count)) if chosen is None else chosen
        bad = [i for i in indices if not 0 <= i < count]
        if bad:
            raise UsageError(f"--gpus: no GPU {bad[0]} (CUDA sees {count})")
        units = [(f"GPU{i}", i, f"cuda:{i}") for i in indices]
    else:
        watched = first.gpus[0].index if first.gpus else None
        units = [("cpu", watched, "cpu")]
        notes.append("no CUDA GPU: the model trained on the CPU; this checks rigmon and the host, not a GPU")
    engine = build_engine(config)
    influx = None
    if config.influxdb.enabled:
        from ..sinks.influxdb import InfluxSink

        influx = InfluxSink(config, host)
    ddp_env = {}
    if args.ddp:
        if len(units) < 2:
            notes.append("--ddp needs two or more GPUs: each GPU trained on its own")
        else:
            from ..cli import _free_port

            ddp_env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": str(len(units))}
    started_wall = datetime.now().isoformat(timespec="seconds")
    started = time.time()
    workers = [Worker(name, gpu, device, seconds, args.model, report_dir,
                      {**ddp_env, **({"RANK": str(rank)} if ddp_env else {})})
               for rank, (name, gpu, device) in enumerate(units)]
    ticks, transitions = [], []
    pushed: dict[str, int] = {}
    interrupted = False

    def stop(signum, frame):
        nonlocal interrupted
        interrupted = True

    previous = signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    last_line = 0.0
    grace = seconds + max(120.0, 0.2 * seconds)  # compilation and start-up on top of the training time
    try:
        while not interrupted and any(w.proc.poll() is None for w in workers):
            sample = poller.poll()
            for t in engine.evaluate(sample, sample.time):
                log.warning("%s", t.line())
                transitions.append({"status": t.status, "alertname": t.alertname, "severity": t.severity,
                                    "summary": t.summary, "t": round(t.time - started, 1)})
            ticks.append(compact(sample, started))
            if influx is not None:
                influx.consume(sample)
                influx.consume_lines(progress_points(workers, pushed, host, stamp, started))
            now = time.time()
            if now - last_line >= 10:
                print(progress_line(now - started, seconds, workers, sample), flush=True)
                last_line = now
            if now - started > grace:
                log.error("workers still running %.0f s past the end: stopping them", now - started - seconds)
                break
            time.sleep(config.daemon.interval)
    finally:
        signal.signal(signal.SIGINT, previous)
        for w in workers:
            if w.proc.poll() is None:
                w.proc.terminate()
        for w in workers:
            try:
                w.proc.wait(15)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            w.thread.join(5)
        poller.close()
    units_data = [w.as_unit() for w in workers]
    overall, judgements, host_judgement = judge(units_data, ticks, transitions, Limits())
    if interrupted:
        overall = "could not run"
        notes.append("interrupted before the end")
    data = build_report(host, started_wall, started, time.time() - started, args.model, units_data, judgements,
                        host_judgement, overall, ticks, transitions, first, config, notes)
    if args.baseline:
        data["baseline"] = compare(data, json.loads(Path(args.baseline).read_text()))
    json_path, html_path = reportmod.write(data, report_dir)
    if influx is not None:
        influx.consume_lines(progress_points(workers, pushed, host, stamp, started) + [
            line("burnin_verdict", {"host": host, "run": stamp}, {"verdict": overall, "passed": overall == "pass",
                                                                  "minutes": data["duration_seconds"] / 60},
                 time.time_ns())])
        influx.close(timeout=5)
    print(summary(data, json_path, html_path))
    return {"pass": 0, "fail": 1}.get(overall, 2)


def progress_points(workers: list[Worker], pushed: dict[str, int], host: str, run: str, started: float) -> list:
    """The workers' progress since the last call, as ``burnin`` points for InfluxDB."""
    out = []
    for w in workers:
        events = [e for e in w.events if e.get("event") == "progress"]
        start = next((e for e in w.events if e.get("event") == "start"), {})
        for e in events[pushed.get(w.name, 0):]:
            tags = {"host": host, "run": run, "unit": w.name, "gpu": "" if w.gpu is None else str(w.gpu)}
            point = line("burnin", tags, {"tokens_per_s": float(e["tokens_per_s"]), "loss": e.get("loss"),
                                          "floor": start.get("floor"), "step": int(e["step"])},
                         int((started + e["t"]) * 1e9))
            if point:
                out.append(point)
        pushed[w.name] = len(events)
    return out


def progress_line(elapsed: float, total: float, workers: list[Worker], sample: Sample) -> str:
    def mmss(s):
        return f"{int(s // 60):d}:{int(s % 60):02d}"

    parts = [f"[{mmss(elapsed)} / {mmss(total)}, ETA {mmss(max(total - elapsed, 0))}]"]
    by_gpu = {g.index: g for g in sample.gpus}
    for w in workers:
        p = w.latest("progress")
        text = f"{w.name}: "
        text += f"{p['tokens_per_s'] / 1e3:.0f}k tok/s loss {p['loss']:.3f}" if p and p.get("loss") else "starting"
        g = by_gpu.get(w.gpu) if w.gpu is not None else None
        if g is not None and not g.lost and g.temperature_celsius is not None:
            text += f" {g.temperature_celsius:.0f} °C {g.power_watts or 0:.0f} W"
        parts.append(text)
    return " | ".join(parts)


def build_report(host, started_wall, started_unix, duration, model, units, judgements, host_judgement, overall,
                 ticks, transitions, first: Sample, config, notes) -> dict:
    info = {i.index: i for i in first.gpu_info}
    out_units = []
    gpu_joules = 0.0
    for unit, j in zip(units, judgements, strict=True):
        start = next((e for e in unit["events"] if e.get("event") == "start"), {})
        end = next((e for e in unit["events"] if e.get("event") == "end"), {})
        gpu = unit["gpu"]
        rows = [t["gpus"][str(gpu)] for t in ticks if gpu is not None and str(gpu) in t["gpus"]]
        energies = [r["energy"] for r in rows if r.get("energy") is not None]
        joules = energies[-1] - energies[0] if len(energies) > 1 else None
        gpu_joules += joules or 0.0
        rate = steady_rate(unit)
        name = start.get("gpu_name") if start.get("gpu_name") != "cpu" else (info[gpu].name if gpu in info else None)
        peak = peak_flops(name) if unit["device"] != "cpu" else None
        out_units.append({
            "name": unit["name"], "gpu": gpu, "device": unit["device"], "gpu_name": name,
            "uuid": info[gpu].uuid if gpu in info else None, "status": j.status, "reasons": j.reasons,
            "warnings": j.warnings, "model": start.get("model"), "params": start.get("params"),
            "precision": start.get("precision"), "compiled": start.get("compiled"), "tokens": end.get("tokens"),
            "tokens_per_s": rate, "floor": start.get("floor"), "final_loss": end.get("final_loss"),
            "mfu": rate * start["flops_per_token"] / peak if rate and peak and start.get("flops_per_token") else None,
            "max_temperature_celsius": max((r["temp"] for r in rows if r.get("temp") is not None), default=None),
            "max_power_watts": max((r["power"] for r in rows if r.get("power") is not None), default=None),
            "power_limit_watts": next((r["limit"] for r in rows if r.get("limit")), None),
            "energy_kwh": joules / 3.6e6 if joules is not None else None,
            "progress": [e for e in unit["events"] if e.get("event") == "progress"],
            "probes": [e for e in unit["events"] if e.get("event") == "probe"],
            "exit_code": unit["exit_code"],
        })
    cpu = [t["cpu_energy"] for t in ticks if t.get("cpu_energy")]
    cpu_kwh = (cpu[-1] - cpu[0]) / 3.6e6 if len(cpu) > 1 else 0.0
    total = gpu_joules / 3.6e6 + cpu_kwh
    price = config.burnin.price_per_kwh
    return {
        "format": "rigmon-burnin", "version": 1, "rigmon": __version__, "host": host, "started": started_wall,
        "started_unix": round(started_unix, 3),
        "duration_seconds": round(duration, 1), "model": model, "verdict": overall,
        "python": platform.python_version(), "units": out_units,
        "host_verdict": {"status": host_judgement.status, "reasons": host_judgement.reasons},
        "energy": {"gpu_kwh": gpu_joules / 3.6e6, "cpu_kwh": cpu_kwh, "total_kwh": total,
                   "price_per_kwh": price, "currency": config.burnin.currency,
                   "cost": total * price if price is not None else None},
        "alerts": transitions, "notes": notes,
        "hardware": {"driver": first.system.driver_version if first.system else None, "ticks": ticks},
    }


def compare(new: dict, old: dict) -> dict:
    rows = []
    old_units = {u.get("uuid") or u["name"]: u for u in old.get("units", [])}
    for u in new["units"]:
        o = old_units.get(u.get("uuid") or u["name"])
        if o is None:
            rows.append([u["name"], "not in the baseline", "", ""])
            continue

        def delta(a, b, fmt):
            if a is None or b is None:
                return "n/a"
            change = f" ({100 * (a - b) / b:+.1f} %)" if b else ""
            return f"{fmt.format(b)} → {fmt.format(a)}{change}"

        def per_million(unit):
            return unit["energy_kwh"] / unit["tokens"] * 1e6 if unit.get("energy_kwh") and unit.get("tokens") else None

        rows.append([u["name"], delta(u.get("tokens_per_s"), o.get("tokens_per_s"), "{:,.0f}"),
                     delta(u.get("max_temperature_celsius"), o.get("max_temperature_celsius"), "{:.0f} °C"),
                     delta(per_million(u), per_million(o), "{:.4f} kWh")])
    return {"started": old.get("started"), "rows": rows}


def summary(data: dict, json_path: Path, html_path: Path) -> str:
    lines = [f"rigmon burn-in: {data['verdict'].upper()} after {data['duration_seconds'] / 60:.1f} min"]
    for u in data["units"]:
        lines.append(f"  {u['name']} {u.get('gpu_name') or ''}: {u['status']}" +
                     (f", {u['tokens_per_s']:,.0f} tokens/s" if u.get("tokens_per_s") else "") +
                     (f", MFU {100 * u['mfu']:.1f} %" if u.get("mfu") else ""))
        for reason in u["reasons"]:
            lines.append(f"    ✗ {reason}")
        for warning in u["warnings"]:
            lines.append(f"    ⚠ {warning}")
    for reason in data["host_verdict"]["reasons"]:
        lines.append(f"  host ✗ {reason}")
    lines.append(f"  energy {data['energy']['total_kwh']:.4f} kWh" + (
        f", {data['energy']['cost']:.2f} {data['energy']['currency']}" if data["energy"]["cost"] is not None else ""))
    lines.append(f"  report: {html_path} (and {json_path.name})")
    return "\n".join(lines)
