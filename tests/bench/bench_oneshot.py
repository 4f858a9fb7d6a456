"""What a one-shot command costs a user: the rigmon CLI's import (``-X importtime`` total of
``rigmon.commands``) and the wall time of ``rigmon status --demo --replay-gpus 8``, beside
``nvitop -1`` on the same replay where nvitop is installed: ``nvitop_replay/sitecustomize.py``
makes its pynvml answer from the same widened recording; ``python -c "import nvitop"`` beside
them. Both tools pay for the replay's set-up (rigmon's replay code, the recording's load and
widening), which a real GPU does not need: the ratio is given with it in both walls, and with
it taken off both (what each spends besides the replay, as on real GPUs). rigmon's set-up is
timed in a child of its own each round (the same ``replay_source`` call status makes).
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
import tempfile
import time
from pathlib import Path

ENV = {**os.environ, "PYTHONSAFEPATH": "1"}
HOOK = Path(__file__).resolve().parent / "nvitop_replay"


def import_ms(module: str) -> float | None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, env=ENV
    )
    if done.returncode != 0:
        return None
    last = [line for line in done.stderr.splitlines() if re.search(rf"\|\s*{re.escape(module)}$", line)]
    return int(last[-1].split("|")[1]) / 1000 if last else None


def wall_ms(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, check=True)
    return (time.perf_counter() - started) * 1000


REPLAY_SETUP = """
import sys, time
from rigmon.commands import common
started = time.perf_counter()
args = type("Args", (), {"demo": True, "replay": None, "replay_gpus": 8})()
common.replay_source(args, at=0.0, realtime=False)
print(time.perf_counter() - started)
"""


def rigmon_replay_setup_ms() -> float:
    """What status's replay set-up costs it: rigmon.readers.replay's import, the recording's load and widening."""
    done = subprocess.run([sys.executable, "-c", REPLAY_SETUP], capture_output=True, text=True, env=ENV, check=True)
    return float(done.stdout) * 1000


def nvitop_once_ms(cost_file: Path) -> tuple[float, float]:
    """nvitop -1 on the demo recording widened to 8 GPUs: its wall, and its replay's set-up."""
    from rigmon.model.recording import demo_path

    env = {
        **ENV,
        "PYTHONPATH": str(HOOK),
        "RIGMON_REPLAY": str(demo_path()),
        "RIGMON_REPLAY_GPUS": "8",
        "RIGMON_REPLAY_COST": str(cost_file),
    }
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "nvitop", "-1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        check=True,
    )
    wall = (time.perf_counter() - started) * 1000
    return wall, float(cost_file.read_text()) * 1000


def spread(values: list[float]) -> dict:
    return {"min": round(min(values), 1), "median": round(statistics.median(values), 1), "max": round(max(values), 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    nvitop = import_ms("nvitop") is not None
    runs: dict[str, list[float]] = {"cli_import_ms": [], "status_wall_ms": [], "status_less_replay_ms": []}
    if nvitop:
        runs.update(
            nvitop_once_wall_ms=[], nvitop_once_less_replay_ms=[], nvitop_import_ms=[], nvitop_import_wall_ms=[]
        )
    cost = Path(tempfile.mkdtemp()) / "replay-cost"
    status = [sys.executable, "-m", "rigmon", "status", "--demo", "--replay-gpus", "8"]
    for _ in range(args.rounds):
        runs["cli_import_ms"].append(import_ms("rigmon.commands"))
        wall = wall_ms(status)
        runs["status_wall_ms"].append(wall)
        runs["status_less_replay_ms"].append(wall - rigmon_replay_setup_ms())
        if nvitop:
            wall, setup = nvitop_once_ms(cost)
            runs["nvitop_once_wall_ms"].append(wall)
            runs["nvitop_once_less_replay_ms"].append(wall - setup)
            runs["nvitop_import_ms"].append(import_ms("nvitop"))
            runs["nvitop_import_wall_ms"].append(wall_ms([sys.executable, "-c", "import nvitop"]))
    result = {k: spread(v) for k, v in runs.items()}
    if nvitop:
        median = {k: v["median"] for k, v in result.items()}
        result["status_to_nvitop_once"] = round(median["status_wall_ms"] / median["nvitop_once_wall_ms"], 2)
        result["status_to_nvitop_once_less_replay"] = round(
            median["status_less_replay_ms"] / median["nvitop_once_less_replay_ms"], 2
        )
        result["status_to_nvitop_import"] = round(median["status_wall_ms"] / median["nvitop_import_wall_ms"], 2)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.rounds} interleaved rounds, ms (min / median / max)")
    for key, s in result.items():
        if isinstance(s, dict):
            print(f"  {key:<28} {s['min']:>7.1f} {s['median']:>7.1f} {s['max']:>7.1f}")
    if nvitop:
        print(f"  rigmon status / nvitop -1, both walls with the replay's set-up: {result['status_to_nvitop_once']}x")
        print(f"  rigmon status / nvitop -1, the set-up off both walls: {result['status_to_nvitop_once_less_replay']}x")
        print(f"  rigmon status wall / python -c 'import nvitop' wall: {result['status_to_nvitop_import']}x")
    else:
        print("  (nvitop is not installed here: pip install nvitop to compare)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
