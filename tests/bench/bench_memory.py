"""The daemon's resident memory once it has settled: ``rigmon run --demo --replay-gpus 8`` on
the built-in defaults (alerts on, InfluxDB off; a state directory of its own), scraped every
5 s, its VmRSS read after --seconds. Several rounds, each a fresh daemon; min / median / max.
Three ways, interleaved: with the page on a fresh start (the default: the history's rings hold
memory only as their slots are written, so a fresh daemon holds little of them); with the page
and a full week of history in the state directory (week.py: what the daemon loads at start
after a week of polls, its rings full); and without the page (``[daemon] page = false``).
Which heavy modules the daemon holds is printed beside it (from /proc/PID/maps and the log).

    python tests/bench/bench_memory.py [--rounds 3] [--seconds 60] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]

ENV = {**os.environ, "PYTHONSAFEPATH": "1"}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_round(seconds: float, history: bool = True, week: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        config = Path(tmp) / "rigmon.toml"
        if week is not None:  # where the demo's daemon keeps its history: a replay's state is its own
            from argparse import Namespace

            from rigmon.commands.run import replay_state_dir

            state = replay_state_dir(Path(tmp) / "state", Namespace(demo=True, replay=None))
            state.mkdir(parents=True)
            shutil.copyfile(week, state / "history.bin")
        config.write_text(
            f'[daemon]\nstate_dir = "{tmp}/state"\npage = {str(history).lower()}\n'
            f'[prometheus]\nlisten = "127.0.0.1"\nport = {port}\n'
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "rigmon", "run", "--demo", "--replay-gpus", "8", "-c", str(config)],
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            started = time.monotonic()
            scrapes = 0
            while time.monotonic() - started < seconds:
                time.sleep(min(5.0, max(0.0, seconds - (time.monotonic() - started))))
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                        r.read()
                        scrapes += 1
                except OSError:
                    pass
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
            return {"rss_mib": rss_mib(proc.pid), "scrapes": scrapes, "pydantic_loaded": "pydantic_core" in maps}
        finally:
            proc.terminate()
            proc.wait(30)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        from week import write_week

        from rigmon.model.recording import Recording, demo_path

        week = Path(tmp) / "history.bin"
        series = write_week(week, Recording.load(demo_path()).widened(8, shared=True), {}, replay=True)
        ways = {"page": (True, None), "week": (True, week), "off": (False, None)}
        rounds = [(way, one_round(args.seconds, *ways[way])) for _ in range(args.rounds) for way in ways]

    def spread(way: str) -> dict:
        values = [r["rss_mib"] for w, r in rounds if w == way]
        return {
            "min": round(min(values), 1),
            "median": round(statistics.median(values), 1),
            "max": round(max(values), 1),
        }

    result = {
        "gpus": 8,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "series": series,
        "rss_mib": spread("page"),
        "rss_mib_week_loaded": spread("week"),
        "rss_mib_without_history": spread("off"),
        "scrapes": [r["scrapes"] for _, r in rounds],
        "pydantic_loaded": any(r["pydantic_loaded"] for _, r in rounds),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"rigmon run --demo --replay-gpus 8, {args.rounds} daemons each way, VmRSS after {args.seconds:g} s "
        f"(scraped every 5 s)"
    )
    for key, said in (
        ("rss_mib", "with the page, fresh (default)"),
        ("rss_mib_week_loaded", f"with the page, a week of {series} series loaded"),
        ("rss_mib_without_history", "page = false"),
    ):
        s = result[key]
        print(f"  RSS MiB {said} (min / median / max): {s['min']:.1f} / {s['median']:.1f} / {s['max']:.1f}")
    print(f"  pydantic in the daemon: {'yes' if result['pydantic_loaded'] else 'no'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
