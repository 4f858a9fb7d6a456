"""Reader cost per poll against the bare NVML/psutil calls it makes.

Drives the real readers (GPU + host) over the H200 recording widened to 1 and 8 GPUs, and
replays the very same calls (captured from the readers) without the readers around them.
The ratio is rigmon's overhead; the difference is what rigmon adds per poll in CPU time.
Real NVML costs come from ../shared/fixtures/h200/sample_cost.json where present.

    python tests/bench/bench_reader.py [--polls N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

import scenarios as sc  # noqa: E402

from rigmon.readers.gpu import GpuReader  # noqa: E402
from rigmon.readers.host import HostReader  # noqa: E402

try:
    from rigmon.readers.replay import ReplayHost, replay_backend
except ImportError:  # an earlier rigmon, for a before-and-after run: the replay at the top
    from rigmon.replay import ReplayHost, replay_backend


Capture = sc.CallLog  # its ``bound`` calls replay bare


def replay_calls(source, at: list[float], per_poll: list[list]) -> float:
    """CPU seconds of the captured calls alone, each poll's at its position in the replay."""
    start = time.process_time()
    for t, calls in zip(at, per_poll, strict=True):
        source.clock.set(t)
        for fn, args in calls:
            try:
                fn(*args)
            except Exception:
                pass
    return time.process_time() - start


def positions(polls: int, duration: float) -> list[float]:
    return [(i * 1.0) % duration for i in range(polls)]  # 1 s poll interval through the recording


def measure(gpus: int, polls: int, repeats: int = 9) -> dict:
    rec = sc.h200().widened(gpus) if gpus > 1 else sc.h200()
    at = positions(polls, rec.duration)

    def make(capture: bool):
        source = sc.source(rec, loop=True)
        nvml, host = replay_backend(source), ReplayHost(source)
        if capture:
            nvml, host = Capture(nvml), Capture(host)
        gpu = GpuReader(nvml, xid_events=False, slow_interval=5.0, monotonic=source.clock)
        hostr = HostReader(host, rapl=False)
        gpu.open()
        hostr.open()
        return source, gpu, hostr, nvml, host

    # 1. capture the calls the readers make over the run
    cap_source, gpu, hostr, nvml, host = make(capture=True)
    source = cap_source
    nvml.bound.clear()
    host.bound.clear()
    per_poll: list[list] = []
    for t in at:
        source.clock.set(t)
        n0, h0 = len(nvml.bound), len(host.bound)
        gpu.read()
        hostr.read()
        per_poll.append(nvml.bound[n0:] + host.bound[h0:])
    calls_per_poll = sum(len(c) for c in per_poll) / polls

    # 2. the readers, timed
    def run_readers() -> float:
        source, gpu, hostr, _, _ = make(capture=False)
        start = time.process_time()
        for t in at:
            source.clock.set(t)
            gpu.read()
            hostr.read()
        return time.process_time() - start

    # 3. the same calls, bare, on the captured backend's functions at the same positions
    def run_bare() -> float:
        return replay_calls(cap_source, at, per_poll)

    # Interleaved, best of each: the least disturbed run of both.
    reader_runs, bare_runs = [], []
    for _ in range(repeats):
        reader_runs.append(run_readers())
        bare_runs.append(run_bare())
    reader_s, bare_s = min(reader_runs), min(bare_runs)
    return {
        "gpus": gpus,
        "polls": polls,
        "calls_per_poll": round(calls_per_poll, 1),
        "reader_cpu_us_per_poll": round(reader_s / polls * 1e6, 1),
        "bare_calls_cpu_us_per_poll": round(bare_s / polls * 1e6, 1),
        "ratio": round(reader_s / bare_s, 2),
        "added_cpu_us_per_gpu": round((reader_s - bare_s) / polls / gpus * 1e6, 1),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--polls", type=int, default=2000)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    results = [measure(1, args.polls), measure(8, max(args.polls // 2, 1))]
    cost_file = HERE.parents[2] / "shared" / "fixtures" / "h200" / "sample_cost.json"
    real = json.loads(cost_file.read_text()) if cost_file.exists() else None
    if args.json:
        print(json.dumps({"results": results, "real_h200": real}, indent=2))
        return 0
    print(f"{'GPUs':>4} {'calls/poll':>10} {'reader µs':>10} {'bare µs':>9} {'ratio':>6} {'added µs/GPU':>12}")
    for r in results:
        print(
            f"{r['gpus']:>4} {r['calls_per_poll']:>10} {r['reader_cpu_us_per_poll']:>10} "
            f"{r['bare_calls_cpu_us_per_poll']:>9} {r['ratio']:>5}x {r['added_cpu_us_per_gpu']:>12}"
        )
    if real:
        nvml_ms = real["nvml_full_sample_ms"]["median"]
        smi_ms = real["nvidia_smi_query_ms"]["median"]
        added_ms = results[0]["added_cpu_us_per_gpu"] / 1000
        print(f"\nOn the real H200: one full NVML sample {nvml_ms:.2f} ms wall, an nvidia-smi spawn {smi_ms:.1f} ms.")
        print(
            f"rigmon's own work on top of NVML: {added_ms:.3f} ms/GPU, i.e. a poll costs about "
            f"{(nvml_ms + added_ms) / nvml_ms:.3f}x the bare NVML calls and {(nvml_ms + added_ms) / smi_ms:.3f}x "
            f"an nvidia-smi spawn."
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
