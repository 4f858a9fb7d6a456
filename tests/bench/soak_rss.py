"""Soak: the daemon polls 8 replayed GPUs at 1 Hz for an hour (alerts on, InfluxDB on and
writing to a real influxd, a scraper every 5 s, the page's history on) and its resident memory
is read every minute. It starts as a daemon does after a week of polls: with a week of the
page's history in its state directory (week.py), so the history's rings are full from the start
(a fresh daemon's rings take memory as their slots fill: an hour for the last hour's polls, a
week for the buckets; --fresh starts without it). Once the windows have filled (the alert
history's longest window is an hour, but the series it keeps are small), RSS must be flat: the
growth over the second half of the run is printed with the figures at 1, 5, 15, 30 and 60
minutes. Prints a JSON report; exit 1 if the second half grew more than --max-growth MiB.
--speed N replays the box N times as fast (N polls a second at the 1 s interval, the buckets'
clocks as fast; the saves and scrapes keep the wall clock's pace): an hour shows whether what
grows levels off over N hours of polls.

    python tests/bench/soak_rss.py [--minutes 60] [--interval 1] [--max-growth 0.1] [--fresh] [--speed 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parents[1])]

import scenarios as sc  # noqa: E402
from servers import InfluxDB, Rigmon, http_get  # noqa: E402
from week import write_week  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--max-growth", type=float, default=0.1, metavar="MIB")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--speed", type=float, default=1.0, help="replay this many times as fast")
    p.add_argument("--fresh", action="store_true", help="start without a week of history")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        influx = InfluxDB(tmp)
        recording = sc.write(sc.rich(sc.h200()), tmp / "rich.rec.jsonl")
        config = f"""
[daemon]
interval = {args.interval}
state_dir = "{tmp / "state"}"
[influxdb]
enabled = true
api = "v1"
url = "{influx.url}"
[alerts.power_budget]
watts = 6000
"""
        if not args.fresh:  # where the replay's daemon keeps its history, marked as a replay's
            from argparse import Namespace

            from rigmon.commands.run import replay_state_dir

            state = replay_state_dir(tmp / "state", Namespace(demo=False, replay=str(recording)))
            state.mkdir(parents=True)
            write_week(
                state / "history.bin",
                sc.rich(sc.h200()),
                {"alerts": {"power_budget": {"watts": 6000}}},
                interval=args.interval,
                replay=True,
            )
        rigmon = Rigmon(tmp, recording, config, extra_args=["--speed", f"{args.speed:g}"] if args.speed != 1 else None)
        stop = threading.Event()
        scrapes = [0]

        def scrape():
            while not stop.wait(5):
                if http_get(rigmon.url, timeout=10)[0] == 200:
                    scrapes[0] += 1

        samples: list[tuple[float, float]] = []
        try:
            rigmon.wait_ready()
            threading.Thread(target=scrape, daemon=True).start()
            started = time.monotonic()
            while (elapsed := time.monotonic() - started) < args.minutes * 60:
                samples.append((elapsed / 60, rss_mb(rigmon.proc.pid)))
                time.sleep(min(60.0, args.minutes * 60 - elapsed))
            samples.append(((time.monotonic() - started) / 60, rss_mb(rigmon.proc.pid)))
        finally:
            stop.set()
            code = rigmon.stop()
            influx.stop()

    def at(minute: float) -> float:
        return min(samples, key=lambda s: abs(s[0] - minute))[1]

    half = at(args.minutes) - at(args.minutes / 2)
    report = {
        "minutes": args.minutes,
        "interval_s": args.interval,
        "gpus": 8,
        "week_loaded": not args.fresh,
        "speed": args.speed,
        "scrapes": scrapes[0],
        "rss_mb": {f"{m:g} min": round(at(m), 1) for m in (1, 5, 15, 30, 60) if m <= args.minutes},
        f"growth_last_{args.minutes / 2:g}_min_mib": round(half, 2),
        "exit_code": code,
        "series": [(round(m, 1), round(r, 1)) for m, r in samples],
    }
    print(json.dumps(report, indent=2))
    return 0 if half <= args.max_growth and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
