"""Soak: the daemon polls 8 replayed GPUs every second into a real InfluxDB that goes away
for a long outage (10 minutes by default) and comes back; then every poll must be stored,
once. Prints a JSON report; exit 1 if anything was lost.

    python tests/bench/soak_influx_outage.py [--outage-minutes 10] [--before 60] [--after 60]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

import scenarios as sc  # noqa: E402
from servers import InfluxDB, Rigmon, http_get, wait_for  # noqa: E402


def metric(rigmon: Rigmon, name: str) -> float:
    body = http_get(rigmon.url, {"Accept": "text/plain"})[1].decode()
    match = re.search(rf"^{name} (\S+)$", body, re.M)
    return float(match.group(1)) if match else 0.0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--outage-minutes", type=float, default=10)
    p.add_argument("--before", type=float, default=60, help="seconds of normal writes before the outage")
    p.add_argument("--after", type=float, default=30, help="seconds of normal writes after the drain")
    p.add_argument("--interval", type=float, default=1.0)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        influx = InfluxDB(tmp)
        recording = sc.write(sc.h200().widened(8), tmp / "soak.rec.jsonl")
        config = f"""
[daemon]
interval = {args.interval}
state_dir = "{tmp / "state"}"
[influxdb]
enabled = true
api = "v1"
url = "{influx.url}"
"""
        rigmon = Rigmon(tmp, recording, config)
        report: dict = {}
        try:
            rigmon.wait_ready()
            time.sleep(args.before)
            influx.stop()
            started = time.monotonic()
            time.sleep(args.outage_minutes * 60)
            report["spooled_at_end_of_outage"] = metric(rigmon, "rigmon_influxdb_spool_points")
            report["spool_bytes_at_end_of_outage"] = metric(rigmon, "rigmon_influxdb_spool_bytes")
            influx.start()
            back = time.monotonic()
            wait_for(lambda: metric(rigmon, "rigmon_influxdb_spool_points") == 0, 600, 0.5, "the spool to drain")
            report["drain_seconds"] = round(time.monotonic() - back, 1)
            report["outage_seconds"] = round(back - started, 1)
            time.sleep(args.after)
            report["dropped"] = metric(rigmon, "rigmon_influxdb_points_dropped_total")
            report["produced"] = metric(rigmon, "rigmon_influxdb_points_produced_total")
            report["written"] = metric(rigmon, "rigmon_influxdb_points_written_total")
        finally:
            code = rigmon.stop()
        polls = sum(int(n) for n in re.findall(r"stopped after \d+ s, (\d+) polls", rigmon.output()))
        stored = influx.count("SELECT count(power_watts) FROM gpu WHERE gpu = '0'")
        stored_all = influx.count("SELECT count(power_watts) FROM gpu")
        influx.stop()
    report.update(
        polls=polls,
        stored_gpu0=stored,
        stored_gpu_points=stored_all,
        expected_gpu_points=polls * 8,
        lost=polls * 8 - stored_all,
        daemon_exit=code,
    )
    print(json.dumps(report, indent=2))
    return 0 if report["lost"] == 0 and code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
