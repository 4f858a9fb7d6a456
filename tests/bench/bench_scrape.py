"""The daemon under scrape load, and its CPU cost per poll.

Starts ``rigmon run`` on the H200 recording widened to 8 GPUs (1 s polls), then:
1. idle: daemon CPU per poll (from /proc) against the bare replayed calls one poll makes
   (measured as in bench_reader.py);
2. load: N concurrent scrapers for S seconds: scrapes, failures, p50/p99 latency, and the
   daemon's CPU per second while serving them.

    python tests/bench/bench_scrape.py [--scrapers 50] [--seconds 30] [--gpus 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1]), str(HERE)]

import bench_reader  # noqa: E402
import scenarios as sc  # noqa: E402
from servers import Rigmon, http_get  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def rss_bytes(pid: int) -> int:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def polls(url: str) -> float:
    body = http_get(url, {"Accept": "text/plain"})[1].decode()
    return float(next(line.split()[1] for line in body.splitlines() if line.startswith("rigmon_polls_total ")))


def scraper(url: str, until: float, latencies: list, failures: list) -> None:
    while time.monotonic() < until:
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                response.read()
                ok = response.status == 200
        except Exception as e:
            failures.append(repr(e))
            continue
        if ok:
            latencies.append(time.perf_counter() - started)
        else:
            failures.append("status")


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scrapers", type=int, default=50)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--idle-seconds", type=float, default=20)
    p.add_argument("--gpus", type=int, default=8)
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        recording = sc.write(sc.h200().widened(args.gpus), tmp / "bench.rec.jsonl")
        rigmon = Rigmon(tmp, recording, "[daemon]\ninterval = 1.0\n")
        try:
            rigmon.wait_ready()
            time.sleep(2)
            pid = rigmon.proc.pid
            # 1. idle
            cpu0, polls0 = cpu_seconds(pid), polls(rigmon.url)
            time.sleep(args.idle_seconds)
            cpu1, polls1 = cpu_seconds(pid), polls(rigmon.url)
            cpu_per_poll_us = (cpu1 - cpu0) / (polls1 - polls0) * 1e6
            bare = bench_reader.measure(args.gpus, 500)["bare_calls_cpu_us_per_poll"]
            exposition = http_get(rigmon.url, {"Accept": "text/plain"})[1]
            # 2. load
            latencies: list[float] = []
            failures: list[str] = []
            cpu2, polls2 = cpu_seconds(pid), polls(rigmon.url)
            until = time.monotonic() + args.seconds
            threads = [
                threading.Thread(target=scraper, args=(rigmon.url, until, latencies, failures))
                for _ in range(args.scrapers)
            ]
            started = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - started
            cpu3, polls3 = cpu_seconds(pid), polls(rigmon.url)
            rss = rss_bytes(pid)
        finally:
            code = rigmon.stop()
    cost_file = HERE.parents[2] / "shared" / "fixtures" / "h200" / "sample_cost.json"
    real_cpu_ms = json.loads(cost_file.read_text())["nvml_full_sample_cpu_ms"] if cost_file.exists() else None
    result = {
        "gpus": args.gpus,
        "daemon_rss_mib": round(rss / 2**20, 1),
        "exposition_bytes": len(exposition),
        "idle": {
            "seconds": args.idle_seconds,
            "polls": polls1 - polls0,
            "daemon_cpu_us_per_poll": round(cpu_per_poll_us),
            "bare_replayed_calls_us_per_poll": bare,
            "ratio": round(cpu_per_poll_us / bare, 2),
            # The H200 fixture's NVML calls cost 4.67 ms CPU per GPU sample; replayed ones ~50x less.
            "estimated_ratio_on_real_nvml": round(
                (cpu_per_poll_us - bare + args.gpus * real_cpu_ms * 1e3) / (args.gpus * real_cpu_ms * 1e3), 3
            )
            if real_cpu_ms
            else None,
            "note": "daemon CPU includes the scheduler, the sinks and the two scrapes that read the poll counter; "
            "/proc counts in clock ticks (10 ms), so short windows are coarse",
        },
        "load": {
            "scrapers": args.scrapers,
            "seconds": round(elapsed, 1),
            "scrapes": len(latencies),
            "failed": len(failures),
            "scrapes_per_second": round(len(latencies) / elapsed, 1),
            "p50_ms": round(statistics.median(latencies) * 1e3, 2) if latencies else None,
            "p99_ms": round(percentile(latencies, 99) * 1e3, 2) if latencies else None,
            "polls_during_load": polls3 - polls2,
            "polls_expected": round(elapsed),
            "daemon_cpu_share_of_one_core": round((cpu3 - cpu2) / elapsed, 2),
            "first_failures": failures[:3],
        },
        "daemon_exit_code": code,
    }
    print(json.dumps(result, indent=2))
    return 0 if not failures and code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
