"""What holding each GPU, CPU and fan against its own past costs the daemon (issue: at most
0.05 % of a core at 1 s polls and 1 MiB for 8 GPUs), and what ``rigmon rules test --replay``
takes on two weeks of a box's ticks.

1. The detector alone (``rigmon.readers.cooling.Detector.annotate``) on the daemon's own 8-GPU
   sample (sc.rich: host sensors, CPU sockets, fan headers with their PWM duty), its clock moved
   on a second a poll, through ``--days`` of training (16 h a day) and idle nights: learning,
   then comparing. CPU per poll, as a share of one core at 1 s polls, with and without its
   baselines file kept (a save every 10 minutes), against the whole pipeline's poll of the same
   sample; the memory it holds at the end (tracemalloc over a second detector fed the same
   polls: every object it keeps), and the file's size.
2. ``rigmon rules test --replay`` on two weeks of an 8-GPU box at a tick every 5 minutes
   (4,033 ticks), run as a user runs it: its wall time.

    python tests/bench/bench_cooling.py [--days 7] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

import scenarios as sc  # noqa: E402

from rigmon.config import schema as configmod  # noqa: E402
from rigmon.pipeline import Inputs, Outputs, Pipeline  # noqa: E402
from rigmon.readers.cooling import Detector  # noqa: E402

DAY = 86400


def week_of(sample, days: float):
    """The sample at each second of ``days``: its GPUs training from 06:00 to 22:00 (as polled),
    idle at night (40 W, not busy); the same few objects reused, so the polls cost no memory."""
    idle_gpus = tuple(g._replace(power_watts=40.0, utilization_gpu_ratio=0.0) for g in sample.gpus)
    t0 = 1_800_000_000.0
    for k in range(int(days * DAY)):
        training = 6 <= (k % DAY) / 3600 < 22
        yield sample._replace(time=t0 + k, gpus=sample.gpus if training else idle_gpus)


def cpu_of(detector: Detector, sample, days: float) -> tuple[float, int, object]:
    """CPU seconds of ``days`` of polls through ``detector``, how many, and the last sample it gave."""
    gc.collect()
    started = time.process_time()
    polls, last = 0, None
    for s in week_of(sample, days):
        last = detector.annotate(s)
        polls += 1
    return time.process_time() - started, polls, last


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--days", type=float, default=7.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    config = configmod.parse({"cooling": {"enabled": False}, "alerts": {"power_budget": {"watts": 6000}}}, "bench")
    source = sc.source(sc.rich(sc.h200()), at=sc.LOAD_AT)
    pipeline = Pipeline.from_config(config, Outputs.DAEMON, inputs=Inputs(source=source, event_thread=False))
    pipeline.open()
    sample = pipeline.step().sample
    poll_times = []
    for _ in range(200):  # the whole poll of the daemon, without the detector, for scale
        t = time.process_time()
        pipeline.step()
        poll_times.append(time.process_time() - t)
    pipeline.close(time.monotonic() + 2)
    poll_ms = statistics.median(poll_times) * 1000
    subjects = (len(sample.gpus), len(sample.host.cpu_temperatures), len(sample.host.fan_controls))

    memory_only, polls, last = cpu_of(Detector(None), sample, args.days)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cooling.json"
        kept = Detector(path)
        with_file, _, _ = cpu_of(kept, sample, args.days)
        kept.close()
        file_bytes = path.stat().st_size
    gpu0 = last.gpus[0]

    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    held = Detector(None)
    for s in week_of(sample, min(args.days, 4.0)):  # learned (3 days) and a window past it: all it keeps
        held.annotate(s)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    held_bytes = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    del held

    # rules test --replay on two weeks of 8 GPUs, a tick every 5 minutes
    def hotter(gpu, t):
        return 0.1 * (1 + (0.3 * min(1.0, max(0.0, (t / DAY - 4) / 7)) if gpu == 0 else 0.0))

    recording = sc.cooling_days(14, gpus=8, step=300, resistance=hotter)
    with tempfile.TemporaryDirectory() as tmp:
        file = sc.write(recording, Path(tmp) / "two-weeks.rec.jsonl")
        walls = []
        for _ in range(3):
            started = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "rigmon", "rules", "test", "--replay", str(file)],
                capture_output=True,
                text=True,
            )
            walls.append(time.monotonic() - started)
        fired = [line for line in done.stdout.splitlines() if "GpuCoolingDrift" in line]
        file_mib = file.stat().st_size / 2**20

    per_poll_us = memory_only / polls * 1e6
    out = {
        "subjects": {"gpus": subjects[0], "cpus": subjects[1], "fans": subjects[2]},
        "days": args.days,
        "polls": polls,
        "cpu_per_poll_us": round(per_poll_us, 2),
        "core_share_at_1s_percent": round(per_poll_us / 1e4, 4),
        "cpu_per_poll_with_file_us": round(with_file / polls * 1e6, 2),
        "core_share_with_file_percent": round(with_file / polls * 1e6 / 1e4, 4),
        "over_the_daemon_poll": round(per_poll_us / 1000 / poll_ms, 4),
        "daemon_poll_ms": round(poll_ms, 3),
        "held_kib": round(held_bytes / 1024, 1),
        "file_kib": round(file_bytes / 1024, 1),
        "gpu0_state_at_end": gpu0.cooling_state,
        "rules_test_two_weeks": {
            "ticks": len(recording.ticks),
            "gpus": 8,
            "file_mib": round(file_mib, 1),
            "wall_s_median_of_3": round(statistics.median(walls), 2),
            "cooling_alerts": fired,
        },
    }
    out["within_budget"] = out["core_share_with_file_percent"] <= 0.05 and held_bytes <= 2**20
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"cooling baselines of {subjects[0]} GPUs, {subjects[1]} CPU sockets and {subjects[2]} fan headers, "
        f"{args.days:g} days of 1 s polls ({polls} polls)"
    )
    print(
        f"  CPU per poll {out['cpu_per_poll_us']} us = {out['core_share_at_1s_percent']} % of a core at 1 s polls; "
        f"with its file kept {out['cpu_per_poll_with_file_us']} us = {out['core_share_with_file_percent']} % "
        f"(budget 0.05 %); {out['over_the_daemon_poll']:.2%} of the daemon's own poll ({poll_ms:.2f} ms)"
    )
    print(f"  held {out['held_kib']} KiB (budget 1024 KiB); its file {out['file_kib']} KiB")
    r = out["rules_test_two_weeks"]
    print(
        f"  rigmon rules test --replay, two weeks of {r['gpus']} GPUs at a tick every 5 min ({r['ticks']} ticks, "
        f"{r['file_mib']} MiB): {r['wall_s_median_of_3']} s (median of 3); {len(fired)} GpuCoolingDrift line(s)"
    )
    print(f"  within budget: {out['within_budget']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
