"""Benchmark: what a day-long 8-GPU burn-in costs the parent process. A synthetic tick stream
(8 GPUs, 1 Hz, 24 h, with CPU sensors and fans, and each worker's progress every 2 s) goes
through the burn-in's own ``Run.observe`` and downsampled progress series, then the report is
built and written. Prints a JSON report: RSS growth, burnin.json size, time to write the
report, and that no spike was lost; exit 1 past the bounds (RSS growth 50 MB, JSON 20 MB).

    python tests/bench/burnin_memory.py [--hours 24] [--gpus 8]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hours", type=float, default=24)
    p.add_argument("--gpus", type=int, default=8)
    args = p.parse_args(argv)

    from rigmon.burnin import report as reportmod
    from rigmon.burnin.results import build_report
    from rigmon.burnin.timeline import Downsampled, Run
    from rigmon.burnin.verdict import judge
    from rigmon.config.schema import Config
    from rigmon.model.sample import GpuInfo, Sample, SystemInfo

    rng = random.Random(12)
    before = rss_mb()
    started = time.perf_counter()
    run = Run()
    workers = [SimpleNamespace(name=f"GPU{i}", rates=Downsampled(), losses=Downsampled()) for i in range(args.gpus)]
    seconds = int(args.hours * 3600)
    spike_at = seconds * 2 // 3
    for t in range(seconds):
        gpus = {}
        for i in range(args.gpus):
            hot = 95.0 if (t == spike_at and i == 3) else 70.0 + rng.random() * 3
            gpus[i] = {
                "lost": False,
                "temperature_celsius": hot,
                "memory_temperature_celsius": 80.0 + rng.random(),
                "power_watts": 340 + rng.random() * 10,
                "power_limit_watts": 350.0,
                "sm_clock_hertz": 1.9e9,
                "utilization_gpu_ratio": 1.0,
                "energy_joules": 1e6 + t * 345.0,
                "pcie_generation": 4,
                "pcie_width": 16,
                "fan_speed_rpm_max": 2000.0,
                "ecc_uncorrected_volatile": 0,
                "events": {"sw_power_cap": True},
                "slowdown_celsius": 90.0,
                "target_pcie_generation": 4,
                "max_pcie_width": 16,
            }
        run.observe(
            {
                "t": float(t),
                "gpus": gpus,
                "events": [],
                "cpu": {"CPU0 Tctl": 60.0 + rng.random()},
                "fans": {"nct6798/fan1": 1100.0, "nct6798/fan2": 900.0},
                "cpu_energy": t * 120.0,
            }
        )
        if t % 2 == 0:
            for w in workers:
                w.rates.add(float(t), 150_000 + rng.random() * 3000)
                w.losses.add(float(t), 1.0 + 5.0 / (1 + t / 60))
    fed = time.perf_counter() - started
    during = rss_mb()
    units = [
        {
            "name": w.name,
            "gpu": i,
            "device": f"cuda:{i}",
            "exit_code": 0,
            "probes": 100,
            "failed_probes": [],
            "start": {"gpu_name": "NVIDIA GeForce RTX 3090", "model": "gpt2", "floor": 1.0, "flops_per_token": 7e8},
            "end": {"final_loss": 1.01, "floor": 1.0, "tokens": 10**10},
            "rates": [(p[0], p[2]) for p in w.rates.points()],
        }
        for i, w in enumerate(workers)
    ]
    overall, judgements, host = judge(units, run.tallies, [])
    first = Sample(
        time=0.0,
        host=None,
        gpus=(),
        gpu_info=tuple(GpuInfo(index=i, uuid=f"GPU-{i}", name="NVIDIA GeForce RTX 3090") for i in range(args.gpus)),
        system=SystemInfo(driver_version="580.0", cuda_driver_version="13.0"),
    )
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        data = build_report(
            "bench",
            "2026-12-01T00:00:00",
            0.0,
            float(seconds),
            "gpt2",
            units,
            judgements,
            host,
            overall,
            run,
            [],
            first,
            Config(),
            [],
            workers,
        )
        json_path, html_path = reportmod.write(data, Path(tmp))
        write_s = time.perf_counter() - t0
        json_mb = json_path.stat().st_size / 1e6
        html_mb = html_path.stat().st_size / 1e6
        summary_kb = (Path(tmp) / "summary.json").stat().st_size / 1e3
    spike_kept = any(p[3] == 95.0 for p in run.timeline.get("gpu/3/temperature_celsius").points())
    growth = during - before
    out = {
        "hours": args.hours,
        "gpus": args.gpus,
        "ticks": seconds,
        "feed_seconds": round(fed, 1),
        "rss_growth_mb": round(growth, 1),
        "burnin_json_mb": round(json_mb, 2),
        "burnin_html_mb": round(html_mb, 2),
        "summary_json_kb": round(summary_kb, 1),
        "report_write_seconds": round(write_s, 2),
        "series": len(run.timeline.series),
        "points_per_series": len(run.timeline.get("gpu/0/temperature_celsius")),
        "spike_kept": spike_kept,
        "verdict": overall,
    }
    print(json.dumps(out, indent=2))
    return 0 if growth <= 50 and json_mb <= 20 and spike_kept else 1


if __name__ == "__main__":
    sys.exit(main())
