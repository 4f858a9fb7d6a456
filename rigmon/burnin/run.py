"""``rigmon burnin``: one training worker per GPU, the hardware watched by the daemon's own
readers and alert rules, then a verdict, a report and an exit code (0 pass, 1 fail, 2 could
not run)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from ..config import schema as configmod
from ..model.args import UsageError
from ..model.project import burnin_gpu
from ..model.sample import Sample
from ..sinks.alerts import log_level
from ..sinks.lineprotocol import encode_burnin_progress, encode_burnin_verdict
from . import report as reportmod
from .results import build_report, compare, summary
from .timeline import Downsampled, Run
from .verdict import NOT_TESTED, Limits, judge

log = logging.getLogger("rigmon.burnin")


def free_port() -> int:
    """A free TCP port on loopback, for the data-parallel ranks' rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _parse_gpus(text: str) -> list[int] | None:
    """``--gpus``: None for all, else the indices."""
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


def compact(sample: Sample, started: float) -> dict:
    """What the timeline and the verdict take of a sample."""
    info = {i.index: i for i in sample.gpu_info}
    gpus = {}
    for g in sample.gpus:
        entry = burnin_gpu(g, info.get(g.index), sample)  # the table's burn-in readings
        if not g.lost:
            ce = g.clock_events
            entry["events"] = {name: True for name in ce._fields if getattr(ce, name)} if ce is not None else {}
        gpus[g.index] = entry
    tick = {
        "t": round(sample.time - started, 2),
        "gpus": gpus,
        "events": [{"gpu": e.gpu_index, "xid": e.xid} for e in sample.events],
    }
    if sample.host is not None:
        tick["cpu"] = {f"CPU{c.socket} {c.sensor}": c.celsius for c in sample.host.cpu_temperatures}
        tick["fans"] = {f"{f.chip}/{f.label}": f.rpm for f in sample.host.fans}
        tick["cpu_energy"] = sum(e.joules for e in sample.host.cpu_energy if e.zone.startswith("package")) or None
    return tick


MAX_FAILED_PROBES = 10


class Worker:
    """One training process; what it reports is kept bounded: the first start, end and error,
    a count of probes with the first failures, and progress as downsampled series."""

    def __init__(
        self, name: str, gpu: int | None, device: str, seconds: float, model: str, report_dir: Path, env: dict
    ):
        self.name, self.gpu, self.device = name, gpu, device
        self.start: dict | None = None
        self.end: dict | None = None
        self.error: dict | None = None
        self.probes = 0
        self.failed_probes: list[dict] = []
        self.rates = Downsampled()
        self.losses = Downsampled()
        self.last: dict | None = None  # the latest progress event
        self.unpushed: list[dict] = []  # progress events not yet sent to InfluxDB
        self.stopped_because: str | None = None
        self.log = open(report_dir / f"worker-{name}.log", "w")
        command = [
            sys.executable,
            "-m",
            "rigmon.burnin.worker",
            "--device",
            device,
            "--seconds",
            str(seconds),
            "--model",
            model,
        ]
        if env.get("WORLD_SIZE"):
            command.append("--ddp")
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self.log, text=True, env={**os.environ, **env}
        )
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            try:
                event = json.loads(raw)
            except json.JSONDecodeError:
                self.log.write(raw)
                continue
            kind = event.get("event")
            if kind == "progress":
                self.last = event
                self.rates.add(event["t"], event.get("tokens_per_s"))
                self.losses.add(event["t"], event.get("loss"))
                if len(self.unpushed) < 10_000:
                    self.unpushed.append(event)
            elif kind == "probe":
                self.probes += 1
                if not event.get("ok") and len(self.failed_probes) < MAX_FAILED_PROBES:
                    self.failed_probes.append(event)
            elif kind in ("start", "end", "error") and getattr(self, kind) is None:
                setattr(self, kind, event)
                if kind == "error":
                    log.error("%s: %s", self.name, event["message"])

    def as_unit(self) -> dict:
        return {
            "name": self.name,
            "gpu": self.gpu,
            "device": self.device,
            "start": self.start,
            "end": self.end,
            "error": self.error,
            "probes": self.probes,
            "failed_probes": self.failed_probes,
            "rates": [(p[0], p[2]) for p in self.rates.points()],
            "exit_code": self.proc.returncode,
            "stopped_because": self.stopped_because,
        }


def watch_only(index: int) -> dict:
    """A GPU the burn-in watched but could not train on."""
    return {"name": f"GPU{index}", "gpu": index, "device": "none", "watch_only": True}


def _duration(args) -> float:
    seconds = (args.hours or 0) * 3600 + (args.minutes or 0) * 60
    if not 0 < seconds <= 31 * 86400:
        raise UsageError("--hours or --minutes: more than 0, at most 31 days")
    return seconds


def _baseline(path: str | None) -> dict | None:
    if path is None:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"--baseline {path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise UsageError(f"--baseline {path}: not JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != "rigmon-burnin" or not isinstance(data.get("units"), list):
        raise UsageError(f"--baseline {path}: not a rigmon burn-in report (burnin.json)")
    return data


def _writable(directory: Path) -> None:
    """The report directory, made and written once before any training starts."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".rigmon-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"--report {directory}: cannot write there ({e.strerror or e})") from None


def choose_units(args, first: Sample, cuda_count: int, chosen: list[int] | None) -> tuple[list, list, list[str]]:
    """(units to train as (name, gpu, device), GPUs only watched, notes). Raises UsageError
    (exit 2, "could not run") when the chosen GPUs cannot be trained on."""
    nvml = [g.index for g in first.gpus]
    if chosen is not None:
        missing = [i for i in chosen if i not in nvml]
        if missing:
            raise UsageError(
                f"could not run: --gpus {','.join(map(str, chosen))}: there is no GPU "
                f"{missing[0]} (NVML sees {len(nvml) or 'no'} GPU{'s' if len(nvml) != 1 else ''}"
                f"{': ' + ', '.join(map(str, nvml)) if nvml else ''})"
            )
    wanted = [i for i in nvml if chosen is None or i in chosen]
    notes = []
    if args.cpu:
        ranks = 2 if args.ddp else 1
        units = [("cpu" if ranks == 1 else f"cpu{r}", None, "cpu") for r in range(ranks)]
        notes.append(
            "trained on the CPU (--cpu): this checks rigmon and the CPU (its cooling where a sensor shows "
            "it), not a GPU" + (f"; GPU {', '.join(map(str, wanted))} only watched" if wanted else "")
        )
        return units, wanted, notes
    if not nvml:
        notes.append(
            "no GPU here (NVML found none): the model trained on the CPU; this checks rigmon and the CPU "
            "(its cooling where a sensor shows it), not a GPU"
        )
        return [("cpu", None, "cpu")], [], notes
    if cuda_count == 0:
        raise UsageError(
            f"could not run: NVML sees {len(nvml)} GPU(s) but PyTorch cannot use CUDA (a CPU-only "
            f"torch wheel, or a driver older than the wheel's CUDA); install a CUDA build of PyTorch, or "
            f"pass --cpu to train on the CPU and only watch the GPUs"
        )
    unusable = [i for i in wanted if i >= cuda_count]
    if unusable:
        raise UsageError(
            f"could not run: GPU {unusable[0]} is seen by NVML but not by CUDA ({cuda_count} "
            f"device(s)); check CUDA_VISIBLE_DEVICES"
        )
    return [(f"GPU{i}", i, f"cuda:{i}") for i in wanted], [], notes


class Plan(NamedTuple):
    """What the burn-in will do, decided before any training starts."""

    seconds: float
    units: list  # (name, gpu, device) to train
    watched: list[int]  # GPUs only watched
    notes: list[str]
    first: Sample  # the hardware as the burn-in found it
    early: tuple  # the alert transitions of that first poll
    host: str
    stamp: str  # the run's name in InfluxDB
    report_dir: Path
    ddp_env: dict


def cmd_burnin(args) -> int:
    """plan → launch → watch (the daemon's pipeline) → judge → report."""
    seconds = _duration(args)
    chosen = _parse_gpus(args.gpus)
    baseline = _baseline(args.baseline)
    try:
        import torch
    except ImportError:
        # the pip of this rigmon's own environment; on a box without an NVIDIA GPU, PyTorch's CPU
        # build (a few hundred MB, where the default is a CUDA build of several GB)
        pip = f"{sys.executable} -m pip install torch"
        if not Path("/proc/driver/nvidia").exists():
            pip += " --index-url https://download.pytorch.org/whl/cpu"
        print(f"rigmon burnin needs PyTorch: {pip}", file=sys.stderr)
        return 2
    from ..model.recording import Recording
    from ..pipeline import Inputs, Outputs, Pipeline
    from ..readers.replay import ReplayClock, ReplaySource

    config = configmod.load(args.config)
    source = ReplaySource(Recording.load(args.replay), ReplayClock(), loop=True) if args.replay else None
    host = config.daemon.hostname or socket.gethostname()
    # the daemon's readers and rules; its InfluxDB where configured (the transitions are logged
    # and judged here, not sent to the notifiers)
    # its progress and verdict go to the config's InfluxDB, as the daemon's polls do
    pipeline = Pipeline.from_config(config, Outputs(influxdb=True), inputs=Inputs(source=source))
    pipeline.open()
    try:
        plan = _plan(args, pipeline, torch, chosen, seconds, host)
    except BaseException:
        pipeline.close()
        raise
    for note in plan.notes:
        print(f"note: {note}", flush=True)
    started_wall = datetime.now().isoformat(timespec="seconds")
    started = time.time()
    workers = [
        Worker(
            name,
            gpu,
            device,
            seconds,
            args.model,
            plan.report_dir,
            {**plan.ddp_env, **({"RANK": str(rank)} if plan.ddp_env else {})},
        )
        for rank, (name, gpu, device) in enumerate(plan.units)
    ]
    run, transitions, interrupted = _watch(pipeline, plan, workers, started, config.daemon.interval)
    units_data = [w.as_unit() for w in workers] + [watch_only(i) for i in plan.watched]
    overall, judgements, host_judgement = _judge(units_data, run, transitions, interrupted, plan.notes)
    data = build_report(
        host,
        started_wall,
        started,
        time.time() - started,
        args.model,
        units_data,
        judgements,
        host_judgement,
        overall,
        run,
        transitions,
        plan.first,
        config,
        plan.notes,
        workers,
    )
    if baseline is not None:
        data["baseline"] = compare(data, baseline)
    json_path, html_path = reportmod.write(data, plan.report_dir)
    pipeline.between_polls(
        lines=progress_points(workers, host, plan.stamp, started)
        + (encode_burnin_verdict(host, plan.stamp, overall, data["duration_seconds"], time.time_ns()),)
    )
    seeded, measured = _seed_cooling(pipeline, overall, source is not None)
    pipeline.close(time.monotonic() + 5)
    try:
        print(summary(data, json_path, html_path))
        if seeded:
            print(
                f"cooling baseline taken from this burn-in for GPU {', '.join(map(str, seeded))} (rigmon baseline show)"
            )
        held = [i for i in measured if i not in seeded]
        if held:
            print(f"GPU {', '.join(map(str, held))}: cooling baseline held against this burn-in from now")
    except OSError:  # no terminal left to print on (a hangup): the report is written
        pass
    if interrupted:
        return 128 + interrupted  # as a shell reports a command its signal stopped: 130 for Ctrl-C, 143 for SIGTERM
    return {"pass": 0, "fail": 1}.get(overall, 2)


def _plan(args, pipeline, torch, chosen: list[int] | None, seconds: float, host: str) -> Plan:
    """The first look at the hardware, and what to train where; UsageError (exit 2) where the
    burn-in cannot run or would disturb a training run."""
    result = pipeline.step()
    first = result.sample
    busy = busy_gpus(first, chosen)
    if busy and not args.force:
        raise UsageError(
            "not starting: " + "; ".join(busy) + ". A burn-in beside a training run would disturb "
            "it and judge neither fairly; stop it, choose other GPUs with --gpus, or pass --force"
        )
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's GPU i is NVML's GPU i
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    units, watched, notes = choose_units(args, first, cuda_count, chosen)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    report_dir = Path(args.report or f"rigmon-burnin-{host}-{stamp}")
    _writable(report_dir)
    unknown = [
        g.index for g in first.gpus if not g.lost and g.processes is None and (chosen is None or g.index in chosen)
    ]
    if unknown:
        log.warning(
            "cannot tell whether GPU %s runs a training job (NVML lists no processes here): starting anyway",
            ", ".join(map(str, unknown)),
        )
    ddp_env = {}
    if args.ddp:
        if len(units) < 2:
            notes.append("--ddp needs two or more GPUs: each GPU trained on its own")
        else:
            ddp_env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(len(units))}
    return Plan(seconds, units, watched, notes, first, result.transitions, host, stamp, report_dir, ddp_env)


def _watch(pipeline, plan: Plan, workers: list[Worker], started: float, interval: float) -> tuple[Run, list[dict], int]:
    """Poll through the pipeline while the workers train: (the run's tallies, the alert
    transitions, the signal that stopped it early or 0). The workers are stopped at the end."""
    run = Run()
    transitions: list[dict] = []
    interrupted = 0
    wake = threading.Event()

    def stop(signum, frame):
        nonlocal interrupted
        interrupted = interrupted or signum
        wake.set()

    # Ctrl-C, a stop, or the terminal gone (an SSH session dropped): the workers are stopped and
    # the report is written, with no verdict
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    last_line = 0.0
    grace = plan.seconds + max(120.0, 0.2 * plan.seconds)  # compilation and start-up on top of the training time
    told = plan.early
    try:
        while not interrupted and any(w.proc.poll() is None for w in workers):
            result = pipeline.step(lines=progress_points(workers, plan.host, plan.stamp, started))
            sample = result.sample
            told, now_told = (), told + result.transitions
            for t in now_told:
                log.log(log_level(t), "%s", t.line())  # as the daemon logs it: resolutions and info at INFO
                transitions.append(
                    {
                        "status": t.status,
                        "alertname": t.alertname,
                        "severity": t.severity,
                        "subject": t.subject,
                        "summary": t.summary,
                        "t": round(t.time - started, 1),
                    }
                )
            run.observe(compact(sample, started))
            now = time.time()
            if now - last_line >= 10:
                print(progress_line(now - started, plan.seconds, workers, sample), flush=True)
                last_line = now
            if plan.ddp_env and _a_rank_died(workers):
                break
            if now - started > grace:
                log.error("workers still running %.0f s past the end: stopping them", now - started - plan.seconds)
                break
            wake.wait(interval)  # a signal ends the wait at once
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _stop_workers(workers)
    if plan.ddp_env:
        _a_rank_died(workers)  # also when the others already failed in the collective
    return run, transitions, interrupted


def _stop_workers(workers: list[Worker]) -> None:
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


def _seed_cooling(pipeline, overall: str, replayed: bool) -> tuple[list[int], list[int]]:
    """A passing burn-in on the box's own GPUs: the steady load it saw is kept as each GPU's
    burn-in, which its cooling baseline is held to, and those without a learned baseline take
    it as theirs (rigmon.readers.cooling.Detector.seed); a replay's is never the box's, and a
    failed or unfinished run teaches nothing. (GPUs seeded, GPUs whose burn-in was kept.)"""
    if overall != "pass" or replayed or pipeline.cooling is None:
        return [], []
    try:
        return pipeline.cooling.seed()
    except OSError as e:
        log.warning("cannot keep the cooling baseline this burn-in saw: %s", e.strerror or e)
        return [], []


def _judge(units_data: list[dict], run: Run, transitions: list[dict], interrupted: int, notes: list[str]):
    """(overall, per-unit judgements, the host's): no verdict on what was not tested, none at
    all where the operator stopped the run."""
    overall, judgements, host_judgement = judge(units_data, run.tallies, transitions, Limits())
    if not run.host_sensors_seen and host_judgement.status != "fail":  # nothing was there to judge it by
        host_judgement.status = NOT_TESTED
        host_judgement.reasons.append("no CPU temperature or fan sensor visible: the CPU's cooling was not checked")
    if interrupted:
        # the operator stopped it: no verdict on the hardware, and a worker stopped with it did not "die"
        overall = "interrupted"
        name = signal.Signals(interrupted).name
        notes.append(f"interrupted by {name} before the end: no verdict")
        for j in judgements:
            j.reasons = [r for r in j.reasons if not r.startswith(_STOPPED_WORKER)]
            if j.status == "fail" and not j.reasons:
                j.status = "interrupted"
                j.reasons.append(f"stopped by {name} before the end")
    return overall, judgements, host_judgement


# what the judge says of a worker that ended early: not a fault where the run was interrupted
_STOPPED_WORKER = ("the training process died", "the training process failed")


def _a_rank_died(workers: list[Worker]) -> bool:
    """In a data-parallel run a rank that exits early leaves the others waiting in a collective
    (or failing in it): stop them, and say in each one's verdict which rank died."""
    dead = [w for w in workers if w.proc.poll() is not None and w.end is None and w.error is None]
    if not dead:
        return False
    for w in workers:
        if w not in dead:
            w.stopped_because = f"stopped: rank {workers.index(dead[0])} ({dead[0].name}) died"
    if any(w.proc.poll() is None for w in workers):
        log.error("%s died (exit code %s): stopping the other ranks", dead[0].name, dead[0].proc.returncode)
    return True


def progress_points(workers: list[Worker], host: str, run: str, started: float) -> tuple[str, ...]:
    """The workers' progress since the last call, as ``burnin`` points for InfluxDB."""
    out = []
    for w in workers:
        events, w.unpushed = w.unpushed, []
        floor = (w.start or {}).get("floor")
        out += [encode_burnin_progress(host, run, w.name, w.gpu, e, floor, started) for e in events]
    return tuple(p for p in out if p)


def progress_line(elapsed: float, total: float, workers: list[Worker], sample: Sample) -> str:
    def mmss(s):
        return f"{int(s // 60):d}:{int(s % 60):02d}"

    parts = [f"[{mmss(elapsed)} / {mmss(total)}, ETA {mmss(max(total - elapsed, 0))}]"]
    by_gpu = {g.index: g for g in sample.gpus}
    for w in workers:
        p = w.last
        text = f"{w.name}: "
        if p and p.get("loss") is not None:
            floor = (w.start or {}).get("floor")
            text += f"{p['tokens_per_s'] / 1e3:.0f}k tok/s loss {p['loss']:.3f}" + (
                f" (floor {floor:.3f})" if floor is not None else ""
            )
        else:
            text += "starting"
        g = by_gpu.get(w.gpu) if w.gpu is not None else None
        if g is not None and not g.lost and g.temperature_celsius is not None:
            text += f" {g.temperature_celsius:.0f} °C {g.power_watts or 0:.0f} W"
        parts.append(text)
    return " | ".join(parts)
