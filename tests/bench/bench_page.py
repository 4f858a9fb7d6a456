"""The page at / on ``rigmon run --demo --replay-gpus 8`` (1 s polls, the history on): what it
ships (the page's bytes, and each poll's state and charts, plain and gzipped as a browser asks
for them), its first render in a real headless Chromium (from navigation to all eight GPU cards
drawn with their charts), and /metrics under 10 kept-alive scrapers (bench_http's client) with
no page open, with a script asking what an open page asks each second (the daemon's own cost),
with Chromium showing the page (Chromium's drawing shares this machine's CPUs too), and with
Chromium showing a blank page (what Chromium costs the scrapers whatever it shows); and
Chromium's own CPU (all its processes), nothing else asked of the box: over the 3 s after the
first render (Chromium still rasterising the page it has just laid out), then showing the page
settled, over 10 s (two of the daemon's chart redraws), and showing a blank page; interleaved
rounds; min / median / max. With ``--today DIR`` (a checkout of an earlier rigmon, e.g.
``git worktree add /tmp/today af3caa7~1``), that rigmon's page too, in the same rounds: its first
render and Chromium's CPU showing it, and now's over today's.

    python tests/bench/bench_page.py [--rounds 3] [--seconds 5] [--today DIR] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from bench_http import load, wait_port  # noqa: E402
from browser import Chromium  # noqa: E402

ENV = {**os.environ, "PYTHONSAFEPATH": "1"}
# all eight GPU cards with their charts (each card's drawn at once: however many a page draws)
CARDS_DRAWN = (
    "(() => { const c = document.querySelectorAll('#gpus .card .charts');"
    " return c.length >= 8 && [...c].every((x) => x.querySelector('svg')); })()"
)
SETTLE_S = 3.0  # after the first render: Chromium finishes rasterising the page it has just drawn
STEADY_S = 10.0  # two of the daemon's chart redraws (every 5 s) in each window


def get(url: str, zipped: bool = False) -> bytes:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if zipped else {})
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.read()


def unzip(body: bytes) -> bytes:
    return gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body  # small answers go plain


def as_a_page(base: str, stop) -> None:
    """What an open page asks (gzipped): its state each second, and its hour of charts when the
    daemon has drawn them again."""
    due = None
    while not stop.wait(1.0):
        state = json.loads(unzip(get(base + "api/state", True)))
        if due is None or state["time"] >= due:
            due = json.loads(unzip(get(base + "api/charts?range=1h", True)))["next"]


def tree_cpu(pid: int) -> float:
    """CPU seconds used so far by ``pid`` and every process under it (Chromium's renderer, GPU
    and utility processes)."""
    parents, used, tick = {}, {}, os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        child = int(stat.parent.name)
        parents[child] = int(fields[1])
        used[child] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime, as bench_scrape.cpu_seconds
    total = 0.0
    for child, seconds in used.items():
        up = child
        while up > 1 and up != pid:
            up = parents.get(up, 0)
        if up == pid:
            total += seconds
    return total


def browser_cpu(browser, seconds: float) -> float:
    """Chromium's CPU over ``seconds`` with nothing else asked of the box, in % of a core."""
    before = tree_cpu(browser.proc.pid)
    time.sleep(seconds)
    return (tree_cpu(browser.proc.pid) - before) / seconds * 100


def start(tmp: Path, name: str, today: str | None = None) -> tuple[subprocess.Popen, int]:
    """``rigmon run --demo --replay-gpus 8`` (the installed one, or the checkout ``today``) on a free port."""
    from servers import free_port

    port = free_port()
    (tmp / f"{name}.toml").write_text(
        f'[daemon]\nstate_dir = "{tmp}/{name}-state"\n[prometheus]\nlisten = "127.0.0.1"\nport = {port}\n'
    )
    daemon = subprocess.Popen(
        [sys.executable, "-m", "rigmon", "run", "--demo", "--replay-gpus", "8", "-c", str(tmp / f"{name}.toml")],
        env={**ENV, "PYTHONPATH": str(Path(today).resolve())} if today else ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return daemon, port


def render(browser, base: str) -> tuple[float, float, float]:
    """The page's first render (ms), then Chromium's CPU while it settles and once settled (%)."""
    started = time.perf_counter()
    browser.open(base, 1400)
    while not browser.js(CARDS_DRAWN):
        time.sleep(0.01)
    first = (time.perf_counter() - started) * 1000
    return first, browser_cpu(browser, SETTLE_S), browser_cpu(browser, STEADY_S)


def spread(values: list[float]) -> dict:
    return {"min": round(min(values), 1), "median": round(statistics.median(values), 1), "max": round(max(values), 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--today", metavar="DIR", help="a checkout of an earlier rigmon whose page to render too")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="rigmon-bench-"))
    daemon, port = start(tmp, "now")
    earlier = start(tmp, "today", args.today) if args.today else None
    base = f"http://127.0.0.1:{port}/"
    runs: dict[str, list[float]] = {
        "first_render_ms": [],
        "settling_browser_cpu_pct": [],
        "page_browser_cpu_pct": [],
        "blank_browser_cpu_pct": [],
        **({"today_first_render_ms": [], "today_page_browser_cpu_pct": []} if earlier else {}),
    }
    for what in ("closed", "polled", "open", "blank"):
        runs[f"{what}_scrapes_per_s"], runs[f"{what}_p99_ms"] = [], []
    try:
        wait_port(port)
        if earlier:
            wait_port(earlier[1])
        time.sleep(3)
        sizes = {
            "page_bytes": len(get(base)),
            "page_gzip_bytes": len(gzip.compress(get(base), 6)),
            "state_bytes": len(get(base + "api/state")),
            "state_gzip_bytes": len(get(base + "api/state", True)),
            "charts_1h_bytes": len(get(base + "api/charts?range=1h")),
            "charts_1h_gzip_bytes": len(get(base + "api/charts?range=1h", True)),
        }
        for n in range(args.rounds):
            closed = load(port, "keepalive", 10, args.seconds)
            stop = threading.Event()
            poller = threading.Thread(target=as_a_page, args=(base, stop))
            poller.start()
            polled = load(port, "keepalive", 10, args.seconds)
            stop.set()
            poller.join()
            browser = Chromium(tmp / f"chromium{n}")
            try:
                first, settling, settled = render(browser, base)
                runs["first_render_ms"].append(first)
                runs["settling_browser_cpu_pct"].append(settling)
                runs["page_browser_cpu_pct"].append(settled)
                opened = load(port, "keepalive", 10, args.seconds)  # the page polling beside the scrapers
            finally:
                browser.close()
            browser = Chromium(tmp / f"blank{n}")
            try:
                browser.open("about:blank", 1400)
                time.sleep(SETTLE_S)
                runs["blank_browser_cpu_pct"].append(browser_cpu(browser, STEADY_S))
                blank = load(port, "keepalive", 10, args.seconds)
            finally:
                browser.close()
            if earlier:  # the earlier page in the same round, on its own daemon
                browser = Chromium(tmp / f"today{n}")
                try:
                    first, _, settled = render(browser, f"http://127.0.0.1:{earlier[1]}/")
                    runs["today_first_render_ms"].append(first)
                    runs["today_page_browser_cpu_pct"].append(settled)
                finally:
                    browser.close()
            for what, figures in (("closed", closed), ("polled", polled), ("open", opened), ("blank", blank)):
                runs[f"{what}_scrapes_per_s"].append(figures["per_second"])
                runs[f"{what}_p99_ms"].append(figures["p99_ms"])
    finally:
        for running in (daemon, earlier[0] if earlier else None):
            if running is not None:
                running.terminate()
                running.wait(30)
    result = {**sizes, **{k: spread(v) for k, v in runs.items()}}
    median = {k: statistics.median(v) for k, v in runs.items()}  # the ratios from these, not the rounded figures

    def ratio(what: str, over: str, figure: str) -> float:
        return round(median[f"{what}_{figure}"] / median[f"{over}_{figure}"], 2)

    for what in ("polled", "open", "blank"):
        result[f"{what}_to_closed_throughput"] = ratio(what, "closed", "scrapes_per_s")
        result[f"{what}_to_closed_p99"] = ratio(what, "closed", "p99_ms")
    if earlier:
        result["first_render_over_today"] = round(median["first_render_ms"] / median["today_first_render_ms"], 2)
        result["page_cpu_over_today"] = round(median["page_browser_cpu_pct"] / median["today_page_browser_cpu_pct"], 2)
    result["open_to_blank_throughput"] = ratio("open", "blank", "scrapes_per_s")
    result["open_to_blank_p99"] = ratio("open", "blank", "p99_ms")
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"the page on 8 replayed GPUs, {args.rounds} rounds (min / median / max)")
    print(
        f"  page {sizes['page_bytes']} bytes ({sizes['page_gzip_bytes']} gzipped); each poll: state "
        f"{sizes['state_bytes']} ({sizes['state_gzip_bytes']} gzipped); the hour's charts, drawn again every 5 s: "
        f"{sizes['charts_1h_bytes']} ({sizes['charts_1h_gzip_bytes']} gzipped)"
    )
    for key in runs:
        figures = runs[key]
        print(f"  {key:<26} {min(figures):>9.2f} {statistics.median(figures):>9.2f} {max(figures):>9.2f}")
    for what, said in (
        ("polled", "the page's requests by a script"),
        ("open", "the page open in Chromium"),
        ("blank", "a blank page open in Chromium"),
    ):
        print(
            f"  /metrics with {said} / with none: throughput {result[f'{what}_to_closed_throughput']}x, "
            f"p99 {result[f'{what}_to_closed_p99']}x"
        )
    print(
        f"  /metrics with the page open in Chromium / with a blank page: throughput "
        f"{result['open_to_blank_throughput']}x, p99 {result['open_to_blank_p99']}x"
    )
    if earlier:
        print(
            f"  now over today ({args.today}): first render {result['first_render_over_today']}x, Chromium's CPU "
            f"with the page settled {result['page_cpu_over_today']}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
