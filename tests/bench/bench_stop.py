"""How long one-shot commands and stops wait on nothing.

- ``rigmon status --json --demo``: wall time against the CPU time it spends (children's
  rusage), median of N runs: waiting shows as wall above CPU;
- ``rigmon run --demo``, idle: seconds from SIGTERM to the process's exit, median of N.

    python tests/bench/bench_stop.py [--runs 9]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

from servers import Rigmon, free_port  # noqa: E402


def status_once() -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rigmon", "status", "--demo", "--json"], capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def stop_once(tmp: Path) -> float:
    tmp.mkdir(parents=True)
    daemon = Rigmon(tmp, config=f'[daemon]\nstate_dir = "{tmp / "state"}"\n', extra_args=["--demo"], port=free_port())
    daemon.wait_ready()
    time.sleep(1.5)  # idle between polls
    started = time.perf_counter()
    daemon.proc.send_signal(signal.SIGTERM)
    daemon.proc.wait(timeout=30)
    return time.perf_counter() - started


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=9)
    args = p.parse_args(argv)
    statuses = [status_once() for _ in range(args.runs)]
    with tempfile.TemporaryDirectory() as tmp:
        stops = [stop_once(Path(tmp) / str(n)) for n in range(args.runs)]
    wall = statistics.median(w for w, _ in statuses)
    cpu = statistics.median(c for _, c in statuses)
    result = {
        "status_wall_s": round(wall, 3),
        "status_cpu_s": round(cpu, 3),
        "status_wall_over_cpu": round(wall / cpu, 2),
        "stop_after_sigterm_s": round(statistics.median(stops), 3),
        "stop_max_s": round(max(stops), 3),
        "runs": args.runs,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONSAFEPATH", "1")
    raise SystemExit(main())
