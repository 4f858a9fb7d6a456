"""What knowing the processes, the jobs and the sysfs sensors costs a poll, and how many series.

8 replayed H200s (the rich scenario: host sensors, a Corsair PSU, a fan controller), three
compute processes on each GPU. The daemon's whole poll (readers, alert rules, exporter,
jobs ledger) with processes, the jobs ledger and the sysfs hwmon reader on, against the
same poll with them off; interleaved, best of N, CPU time. Then the /metrics series count
with process series off and on, and what /proc costs once per new set of processes.

    python tests/bench/bench_processes.py [--polls 300] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parents[1])]

import compat  # noqa: E402
import scenarios as sc  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402

from rigmon.config import schema as configmod  # noqa: E402
from rigmon.readers.host import SystemHost  # noqa: E402


def recording():
    rec = sc.rich(sc.h200(), gpus=8)
    procs = [{"pid": 4242 + n, "usedGpuMemory": (n + 1) << 30} for n in range(3)]
    rec = sc.on_every_gpu(rec, nvmlDeviceGetComputeRunningProcesses=procs)
    info = sc.PROCESSES_RICH["4242"]
    return sc.with_host(rec, processes={str(4242 + n): dict(info, pgid=4242) for n in range(3)})


def daemon(rec, state: str, extras: bool, process_series: int = 0) -> tuple:
    config = configmod.parse(
        {
            "daemon": {"state_dir": state},
            "influxdb": {"enabled": False},
            "prometheus": {"enabled": False},
            "gpu": {"xid_events": False, "processes": extras, "process_series": process_series},
            "host": {"sysfs_sensors": extras},
            "jobs": {"enabled": extras},
        },
        "bench",
    )
    source = sc.source(rec, loop=True)
    t0 = rec.ticks[0]["t"]  # the recording's own clock, after its processes started
    d, registry = compat.daemon_for(config, source, wall=lambda: t0 + source.clock(), event_thread=False)
    return source, d, registry


def poll_cpu(rec, extras: bool, polls: int) -> float:
    with tempfile.TemporaryDirectory() as state:
        source, d, _ = daemon(rec, state, extras)
        start = time.process_time()
        for i in range(polls):
            source.clock.set(i * 0.1 % rec.duration)  # forward through the recording: polls 0.1 s apart
            d.poll_once()
        spent = time.process_time() - start
        compat.close(d)
    return spent


def series(rec, process_series: int) -> int:
    with tempfile.TemporaryDirectory() as state:
        source, d, registry = daemon(rec, state, True, process_series)
        source.clock.set(sc.LOAD_AT)
        d.poll_once()
        text = generate_latest(registry).decode()
        compat.close(d)
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def proc_cost(count: int) -> float:
    """Seconds of CPU to read /proc for ``count`` real processes (once per new set of them)."""
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(count)]
    try:
        host = SystemHost()
        pids = [c.pid for c in children]
        start = time.process_time()
        for _ in range(50):
            host.processes(pids)
        return (time.process_time() - start) / 50
    finally:
        for c in children:
            c.kill()
            c.wait()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--polls", type=int, default=300)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    rec = recording()
    on, off = [], []
    for _ in range(args.repeats):
        on.append(poll_cpu(rec, True, args.polls))
        off.append(poll_cpu(rec, False, args.polls))
    result = {
        "gpus": 8,
        "processes_per_gpu": 3,
        "polls": args.polls,
        "poll_cpu_us_extras_on": round(min(on) / args.polls * 1e6, 1),
        "poll_cpu_us_extras_off": round(min(off) / args.polls * 1e6, 1),
        "ratio_on_over_off": round(min(on) / min(off), 3),
        "series_process_series_off": series(rec, 0),
        "series_process_series_8": series(rec, 8),
        "series_process_series_64": series(rec, 64),
        "proc_read_us_per_process_once": round(proc_cost(24) / 24 * 1e6, 1),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
