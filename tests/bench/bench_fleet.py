"""The fleet's cost in Prometheus, measured at the sizes that fit here and drawn to 10,000 GPUs.

One rigmon replays the rich 8-GPU H200 box; its /metrics answer is served as it is by one small
server to ``--boxes`` targets of a real Prometheus (each its own instance, box-N:9963, by
relabelling; sites a, b and c), which scrapes every 5 s and evaluates the shipped
rigmon-rules.yml every 15 s, as prometheus.yml does. For each fleet size:

- series per GPU (the answer's series with gpu="0") and per box, and Prometheus's head series;
- the rule group's evaluation time (its evaluationTime in Prometheus's /api/v1/rules, the median
  of the evaluations after the first minute);
- each fleet panel's query (dashboards/build.py's PromQL, every variable at All) over the last
  5 minutes at a 15 s step: the median of three, the slowest panel and all of them together.
  These read the minutes of data the bench holds: a panel over days reads as many more samples;
- a /federate scrape of every rigmon_* series and up: time and size.

Then each figure's slope per 1,000 GPUs and its value at 10,000 GPUs, by a straight line
through the measured sizes (least squares).

    python tests/bench/bench_fleet.py [--boxes 16,32,64,128] [--minutes 2.5]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE.parent), str(ROOT / "dashboards")]

import scenarios as sc  # noqa: E402
from servers import Prometheus, Rigmon, http_get  # noqa: E402

import build  # noqa: E402

GPUS_PER_BOX = 8
SITES = ("a", "b", "c")


def exposition(tmp: Path) -> bytes:
    """One rich 8-GPU box's /metrics answer, in the text format, as rigmon serves it."""
    recording = sc.write(sc.rich(sc.h200(), GPUS_PER_BOX), tmp / "box.rec.jsonl")
    rigmon = Rigmon(tmp, recording, "[daemon]\ninterval = 1\n")
    try:
        rigmon.wait_ready()
        rigmon.wait_polls(3)
        return http_get(rigmon.url, {"Accept": "text/plain"})[1]
    finally:
        rigmon.stop()


def serve(body: bytes) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def panels() -> list[tuple[str, str]]:
    """(title, PromQL) of every fleet panel, its variables at All."""
    out = []
    for panel in build.FLEET:
        for query, _ in panel.prom:
            q = query.replace("$job", ".+").replace("$site", ".*")
            q = q.replace("$__rate_interval", "1m").replace("$__interval", "15s").replace("$__range", "5m")
            out.append((panel.title, q))
    return out


def _get(url: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    status, body = http_get(url, timeout=120)
    if status != 200:
        raise RuntimeError(f"{url}: {status} {body[:300]!r}")
    return time.perf_counter() - started, body


def measure(boxes: int, body: bytes, port: int, minutes: float, tmp: Path) -> dict:
    config = [
        {
            "job_name": "rigmon",
            "scrape_interval": "5s",
            "scrape_timeout": "4s",
            "static_configs": [
                {"targets": [f"127.0.0.1:{port}"], "labels": {"box": f"box-{n}", "site": SITES[n % 3]}}
                for n in range(boxes)
            ],
            "relabel_configs": [
                {"source_labels": ["box"], "target_label": "instance", "replacement": "${1}:9963"},
                {"regex": "box", "action": "labeldrop"},
                {"target_label": "exporter", "replacement": "rigmon"},
            ],
        }
    ]
    prom = Prometheus(
        tmp,
        [],
        scrape_interval="15s",
        scrape_configs=config,
        rule_files=[str(ROOT / "deploy" / "prometheus" / "rigmon-rules.yml")],
    )
    base = f"http://127.0.0.1:{prom.port}"
    try:
        durations, seen = [], set()
        warm = time.monotonic() + 60
        end = time.monotonic() + minutes * 60
        while time.monotonic() < end:
            time.sleep(5)
            groups = json.loads(_get(f"{base}/api/v1/rules")[1])["data"]["groups"]
            for group in groups:
                if time.monotonic() > warm and group["lastEvaluation"] not in seen:
                    seen.add(group["lastEvaluation"])
                    durations.append(float(group["evaluationTime"]))
        head = float(json.loads(_get(f"{base}/api/v1/status/tsdb")[1])["data"]["headStats"]["numSeries"])
        now = time.time()
        times = {}
        for title, q in panels():
            params = urllib.parse.urlencode({"query": q, "start": now - 300, "end": now, "step": 15})
            took = statistics.median(_get(f"{base}/api/v1/query_range?{params}")[0] for _ in range(3))
            times[title] = times.get(title, 0.0) + took
        match = urllib.parse.urlencode([("match[]", '{__name__=~"rigmon_.*"}'), ("match[]", "up")])
        federate = [_get(f"{base}/federate?{match}") for _ in range(3)]
        slowest = max(times, key=times.get)
        return {
            "boxes": boxes,
            "gpus": boxes * GPUS_PER_BOX,
            "head_series": head,
            "rules_ms": statistics.median(durations) * 1000 if durations else float("nan"),
            "rule_evaluations": len(durations),
            "panels_ms": sum(times.values()) * 1000,
            "slowest_panel": slowest,
            "slowest_panel_ms": times[slowest] * 1000,
            "federate_ms": statistics.median(t for t, _ in federate) * 1000,
            "federate_mb": len(federate[0][1]) / 1e6,
        }
    finally:
        prom.stop()


def line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares: (slope, intercept)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def fitted(rows: list[dict], keys) -> dict:
    """Each figure's straight line through the sizes: per 1,000 GPUs, and at 10,000."""
    gpus = [r["gpus"] for r in rows]
    fits = {}
    for key in keys:
        slope, intercept = line(gpus, [r[key] for r in rows])
        fits[key] = {"per_1000_gpus": slope * 1000, "at_10000_gpus": intercept + slope * 10_000}
    return fits


def print_fits(fits: dict) -> None:
    for key, f in fits.items():
        print(f"  {key}: {f['per_1000_gpus']:.1f} per 1,000 GPUs; at 10,000 GPUs {f['at_10000_gpus']:.0f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--boxes", default="16,32,64,128")
    p.add_argument("--minutes", type=float, default=2.5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    sizes = [int(b) for b in args.boxes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        body = exposition(tmp)
        text = body.decode()
        samples = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
        per_gpu = sum(1 for ln in samples if re.search(r'[{,]gpu="0"', ln))
        per_box = len(samples)
        server = serve(body)
        rows = []
        for n in sizes:
            where = tmp / f"prom-{n}"
            where.mkdir()
            rows.append(measure(n, body, server.server_address[1], args.minutes, where))
        server.shutdown()
    out = {"series_per_gpu": per_gpu, "series_per_box": per_box, "sizes": rows}
    keys = ("rules_ms", "panels_ms", "slowest_panel_ms", "federate_ms", "federate_mb", "head_series")
    fits = out["fits"] = fitted(rows, keys)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"series per GPU {per_gpu}, per 8-GPU box {per_box} (the rich H200 box)")
    print(
        f"{'GPUs':>6} {'series':>8} {'rules ms':>9} {'panels ms':>10} {'slowest panel':>30} "
        f"{'fed. ms':>8} {'fed. MB':>8}"
    )
    for r in rows:
        slowest = f"{r['slowest_panel'][:22]} {r['slowest_panel_ms']:.0f} ms"
        print(
            f"{r['gpus']:>6} {r['head_series']:>8.0f} {r['rules_ms']:>9.1f} {r['panels_ms']:>10.1f} "
            f"{slowest:>30} {r['federate_ms']:>8.0f} {r['federate_mb']:>8.1f}"
        )
    print_fits(fits)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
