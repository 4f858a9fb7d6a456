"""What a one-shot command costs a user: the rigmon CLI's import (``-X importtime`` total of
``rigmon.commands``) and the wall time of ``rigmon status --demo --replay-gpus 8``, beside
``nvitop -1`` on the same replay where nvitop is installed: ``nvitop_replay/sitecustomize.py``
makes its pynvml answer from the same widened recording, and the seconds that set-up takes
(rigmon's replay code and the recording's load, which a real GPU does not need) come off
nvitop's wall time; ``python -c "import nvitop"`` beside them. Interleaved rounds;
min / median / max.

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
import tempfile
import time
from pathlib import Path

ENV = {**os.environ, "PYTHONSAFEPATH": "1"}
HOOK = Path(__file__).resolve().parent / "nvitop_replay"


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


def nvitop_once_ms(cost_file: Path) -> float:
    """nvitop -1 on the demo recording widened to 8 GPUs, less its replay's set-up."""
    from rigmon.recording import demo_path

    env = {**ENV, "PYTHONPATH": str(HOOK), "RIGMON_REPLAY": str(demo_path()), "RIGMON_REPLAY_GPUS": "8",
           "RIGMON_REPLAY_COST": str(cost_file)}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "nvitop", "-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env, check=True)
    wall = (time.perf_counter() - started) * 1000
    return wall - float(cost_file.read_text()) * 1000


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
        runs.update(nvitop_once_wall_ms=[], nvitop_import_ms=[], nvitop_import_wall_ms=[])
    cost = Path(tempfile.mkdtemp()) / "replay-cost"
    status = [sys.executable, "-m", "rigmon", "status", "--demo", "--replay-gpus", "8"]
    for _ in range(args.rounds):
        runs["cli_import_ms"].append(import_ms("rigmon.commands"))
        runs["status_wall_ms"].append(wall_ms(status))
        if nvitop:
            runs["nvitop_once_wall_ms"].append(nvitop_once_ms(cost))
            runs["nvitop_import_ms"].append(import_ms("nvitop"))
            runs["nvitop_import_wall_ms"].append(wall_ms([sys.executable, "-c", "import nvitop"]))
    result = {k: spread(v) for k, v in runs.items()}
    if nvitop:
        for other in ("nvitop_once", "nvitop_import"):
            result[f"status_to_{other}"] = round(result["status_wall_ms"]["median"] /
                                                 result[f"{other}_wall_ms"]["median"], 2)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.rounds} interleaved rounds, ms (min / median / max)")
    for key, s in result.items():
        if isinstance(s, dict):
            print(f"  {key:<24} {s['min']:>7.1f} {s['median']:>7.1f} {s['max']:>7.1f}")
    if nvitop:
        print(f"  rigmon status wall / nvitop -1 wall (same replay): {result['status_to_nvitop_once']}x")
        print(f"  rigmon status wall / python -c 'import nvitop' wall: {result['status_to_nvitop_import']}x")
    else:
        print("  (nvitop is not installed here: pip install nvitop to compare)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
