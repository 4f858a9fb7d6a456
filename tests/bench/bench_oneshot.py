"""What a one-shot command costs a user: the rigmon CLI's import (``-X importtime`` total of
``rigmon.commands``) and the wall time of ``rigmon status --demo --replay-gpus 8``, beside
``python -c "import nvitop"`` where nvitop is installed (nvitop -1 needs a real GPU).
Interleaved rounds; min / median / max.

    python tests/bench/bench_oneshot.py [--rounds 11] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ENV = {**os.environ, "PYTHONSAFEPATH": "1"}


def import_ms(module: str) -> float | None:
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True,
                          text=True, env=ENV)
    if done.returncode != 0:
        return None
    last = [line for line in done.stderr.splitlines() if re.search(rf"\|\s*{re.escape(module)}$", line)]
    return int(last[-1].split("|")[1]) / 1000 if last else None


def wall_ms(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, check=True)
    return (time.perf_counter() - started) * 1000


def spread(values: list[float]) -> dict:
    return {"min": round(min(values), 1), "median": round(statistics.median(values), 1), "max": round(max(values), 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    nvitop = import_ms("nvitop") is not None
    runs: dict[str, list[float]] = {"cli_import_ms": [], "status_wall_ms": []}
    if nvitop:
        runs.update(nvitop_import_ms=[], nvitop_import_wall_ms=[])
    status = [sys.executable, "-m", "rigmon", "status", "--demo", "--replay-gpus", "8"]
    for _ in range(args.rounds):
        runs["cli_import_ms"].append(import_ms("rigmon.commands"))
        runs["status_wall_ms"].append(wall_ms(status))
        if nvitop:
            runs["nvitop_import_ms"].append(import_ms("nvitop"))
            runs["nvitop_import_wall_ms"].append(wall_ms([sys.executable, "-c", "import nvitop"]))
    result = {k: spread(v) for k, v in runs.items()}
    if nvitop:
        result["status_to_nvitop_import"] = round(result["status_wall_ms"]["median"] /
                                                  result["nvitop_import_wall_ms"]["median"], 2)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.rounds} interleaved rounds, ms (min / median / max)")
    for key, s in result.items():
        if isinstance(s, dict):
            print(f"  {key:<24} {s['min']:>7.1f} {s['median']:>7.1f} {s['max']:>7.1f}")
    if nvitop:
        print(f"  rigmon status wall / python -c 'import nvitop' wall: {result['status_to_nvitop_import']}x")
    else:
        print("  (nvitop is not installed here: pip install nvitop to compare)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
