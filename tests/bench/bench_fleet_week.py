"""The fleet panels over a day and a week, measured at the sizes that fit here and drawn to
10,000 GPUs.

bench_fleet.py times the panels on the minutes of data it scrapes; a dashboard is also read over
a day or a week. Every time-series panel of the fleet dashboard reads the ``rigmon-fleet``
recording rules (one series a box, a sample a minute), so a week of a fleet is a week of
those: this bench writes them for ``--boxes`` boxes of 8 GPUs (sites a, b and c) with
``promtool tsdb create-blocks-from openmetrics`` (in blocks of 36 hours at most, as a Prometheus
keeping the default 15 days compacts them), starts Debian's Prometheus on the blocks and
runs each time-series panel's PromQL (dashboards/build.py, every variable at All) over the last
24 hours (a step of 2 minutes) and the last 7 days (10 minutes; the energy bars a day), as
Grafana asks for a panel about 1,000 pixels wide: the median of three, per panel and all
together. The table and stat panels are instant queries, measured by bench_fleet.py.

Then each figure's slope per 1,000 GPUs and its value at 10,000 GPUs, by a straight line
through the measured sizes (least squares).

    python tests/bench/bench_fleet_week.py [--boxes 16,32,64] [--days 7]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent), str(ROOT / "dashboards")]

from bench_fleet import GPUS_PER_BOX, SITES, _get, fitted, print_fits  # noqa: E402
from servers import free_port, http_get, wait_for  # noqa: E402

import build  # noqa: E402


def _troubled(n: int, m: int, value: float) -> float | None:
    """``value`` in the hour of the day that box ``n`` has trouble delivering, else no sample."""
    return value if (m // 60 + n) % 24 == 0 else None


# each recorded series a box has, and a value about where a busy 8-GPU box keeps it
RECORDED = {
    "instance:rigmon_gpu_power_watts:sum": lambda n, m: 5200 + 300 * math.sin(m / 97 + n),
    "instance:rigmon_gpu_temperature_celsius:max": lambda n, m: 70 + 6 * math.sin(m / 53 + n),
    "instance:rigmon_cpu_temperature_celsius:max": lambda n, m: 60 + 8 * math.sin(m / 41 + n),
    "instance:rigmon_fan_speed_rpm:min": lambda n, m: 1100 + 40 * math.sin(m / 29 + n),
    "instance:rigmon_gpu_energy_joules:increase1m": lambda n, m: 60 * (5200 + 300 * math.sin(m / 97 + n)),
    "instance:rigmon_poll_duration_seconds:max": lambda n, m: 0.02 + 0.005 * math.sin(m / 7 + n),
    "instance:rigmon_reader_success:min": lambda n, m: 1.0,
    # recorded only where a box has something undelivered: here every box an hour a day
    "instance:rigmon_influxdb_points_dropped:increase1h": lambda n, m: _troubled(n, m, 120.0),
    "instance:rigmon_notifications_failed:increase1h": lambda n, m: _troubled(n, m, 2.0),
    "instance:rigmon_notifications_queued:sum": lambda n, m: _troubled(n, m, 3.0),
}
RANGES = {"24 h": (86400, 120), "7 d": (7 * 86400, 600)}


def openmetrics(path: Path, boxes: int, minutes: int, end: int) -> int:
    """``minutes`` of each box's recorded series up to ``end``, a sample a minute, in time
    order; the number of samples."""
    count = 0
    with path.open("w") as f:
        for name in RECORDED:
            f.write(f"# TYPE {name} gauge\n")
        for m in range(minutes):
            t = end - (minutes - m) * 60
            for n in range(boxes):
                labels = f'instance="box-{n}:9963",job="rigmon",site="{SITES[n % 3]}"'
                for name, value in RECORDED.items():
                    if (v := value(n, m)) is not None:
                        f.write(f"{name}{{{labels}}} {v:.4g} {t}\n")
                        count += 1
        f.write("# EOF\n")
    return count


def panels() -> list[tuple[str, str, bool]]:
    """(title, PromQL, whether it is the energy bars) of every time-series fleet panel."""
    out = []
    for panel in build.FLEET:
        if panel.type in ("table", "stat", "row"):
            continue
        for query, _ in panel.prom:
            q = query.replace("$job", ".+").replace("$site", ".*").replace("$__rate_interval", "1m")
            out.append((panel.title, q, "[1d]" in q))
    return out


def measure(boxes: int, days: float, tmp: Path) -> dict:
    minutes = int(days * 1440)
    end = int(time.time()) // 60 * 60
    data = tmp / "data"
    started = time.perf_counter()
    samples = openmetrics(tmp / "week.om", boxes, minutes, end)
    done = subprocess.run(
        # blocks as a Prometheus with the default 15 days' retention compacts them: 36 h at most
        [
            "promtool",
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--max-block-duration=36h",
            str(tmp / "week.om"),
            str(data),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    (tmp / "week.om").unlink()
    written = time.perf_counter() - started
    (tmp / "prometheus.yml").write_text(json.dumps({"global": {"scrape_interval": "1m"}}))
    port = free_port()
    proc = subprocess.Popen(
        [
            shutil.which("prometheus") or "prometheus",
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=30d",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_get(f"{base}/-/ready", timeout=2)[0] == 200, 300, what="prometheus to be ready")
        times: dict[str, dict[str, float]] = {}  # a panel's queries one after another
        queries: dict[str, float] = {}  # the slowest single query (Grafana may send a panel's at once)
        for label, (span, step) in RANGES.items():
            if span > minutes * 60:
                continue
            for title, q, daily in panels():
                params = {"query": q, "start": end - span, "end": end, "step": 86400 if daily else step}
                url = f"{base}/api/v1/query_range?{urllib.parse.urlencode(params)}"
                answer = json.loads(_get(url)[1])["data"]["result"]
                if not answer:
                    raise RuntimeError(f"{title}: no data over {label}: {q}")
                took = statistics.median(_get(url)[0] for _ in range(3))
                times.setdefault(label, {})[title] = times.get(label, {}).get(title, 0.0) + took
                queries[label] = max(queries.get(label, 0.0), took)
        return {
            "boxes": boxes,
            "gpus": boxes * GPUS_PER_BOX,
            "samples": samples,
            "written_s": written,
            **{
                f"{label} {what}": value
                for label, per in times.items()
                for what, value in (
                    ("panels_ms", sum(per.values()) * 1000),
                    ("slowest_panel_ms", max(per.values()) * 1000),
                    ("slowest_panel", max(per, key=per.get)),
                    ("slowest_query_ms", queries[label] * 1000),
                )
            },
        }
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--boxes", default="16,32,64")
    p.add_argument("--days", type=float, default=7.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows = []
    for n in (int(b) for b in args.boxes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(measure(n, args.days, Path(tmp)))
    fits = fitted(rows, [k for k in rows[0] if k.endswith("_ms")])
    if args.json:
        print(json.dumps({"sizes": rows, "fits": fits}, indent=2))
        return 0
    for r in rows:
        print(f"{r['gpus']:>6} GPUs ({r['boxes']} boxes), {r['samples']:,} recorded samples")
        for label in RANGES:
            if f"{label} panels_ms" in r:
                print(
                    f"    over {label}: every time-series panel {r[f'{label} panels_ms']:.0f} ms, the slowest "
                    f"({r[f'{label} slowest_panel']}) {r[f'{label} slowest_panel_ms']:.0f} ms, the slowest "
                    f"query {r[f'{label} slowest_query_ms']:.0f} ms"
                )
    print_fits(fits)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
