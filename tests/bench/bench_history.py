"""What the page's week of history costs the daemon, for 8 GPUs over a full week at 1 s polls:
the project's pipeline polls the rich 8-GPU replay once; its PollResult, with the clock moved on
a second each time, is then handed to ``History.consume`` 604,800 times (a week of polls).

Prints the series kept, the bytes the rings hold, the process's RSS growth over the week, the
CPU per poll (and as a share of one core at 1 s polls), the save's time and file size (and its
share of a core at one save per 5 minutes), the load at start, and the page's chart drawing
(the median of 5 draws: the hour's charts are drawn again every 5 s while a page is open, the
week's every 14 minutes; all cards, and the 3 that a 1400x900 screen shows, which is what an open
page asks for), and /api/history over the week against a scrape of /metrics: the ask the
daemon keeps ready, a script's first ask after it, and asks again. Budget (issue 34): at most
+20 MB RSS and +0.5 % of a core; (issue 52) the week's ask at most 10x a scrape.

    python tests/bench/bench_history.py [--days 7] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import scenarios as sc  # noqa: E402
from bench_memory import rss_mib as rss_of  # noqa: E402

from rigmon.config import schema as configmod  # noqa: E402
from rigmon.pipeline import Inputs, Outputs, Pipeline  # noqa: E402
from rigmon.sinks.history import SAVE_SECONDS, History  # noqa: E402


def rss_mib() -> float:
    return rss_of(os.getpid())


def _median_ms(answer, rounds: int = 5) -> tuple[float, int]:
    """The median time of ``answer()`` in ms, and the size of what it answered."""
    took, size = [], 0
    for _ in range(rounds):
        t = time.perf_counter()
        got = answer()
        took.append(time.perf_counter() - t)
        size = len(got[1]) if isinstance(got, tuple) else len(got)
    return round(statistics.median(took) * 1000, 2), size


def _scrape(result):
    """One /metrics answer as the server renders it for Prometheus (OpenMetrics, gzip), over the
    8-GPU sample: what a scrape costs the daemon, less the socket."""
    from prometheus_client import CollectorRegistry

    from rigmon.exporters.prometheus import SampleCollector
    from rigmon.http.server import MetricsApp

    collector = SampleCollector()
    collector.consume(result)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    app = MetricsApp(registry, lambda: 0)
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    return lambda: app._render(accept, True).body


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--days", type=float, default=7.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    config = configmod.parse({"alerts": {"power_budget": {"watts": 6000}}}, "bench")
    source = sc.source(sc.rich(sc.h200()), at=sc.LOAD_AT)
    pipeline = Pipeline.from_config(config, Outputs(), inputs=Inputs(source=source, event_thread=False))
    pipeline.open()
    result = pipeline.step()
    sample = result.sample
    polls = int(args.days * 86400)
    t0 = 1_800_000_000.0
    results = [result._replace(sample=sample._replace(time=t0 + k)) for k in range(3600)]  # made before measuring
    gc.collect()
    before = rss_mib()
    with tempfile.TemporaryDirectory() as tmp:
        history = History(None, interval=1.0)
        started = time.process_time()
        for k in range(polls):
            r = results[k % 3600]
            if k >= 3600:
                r = r._replace(sample=r.sample._replace(time=t0 + k))
            history.consume(r)
        cpu = time.process_time() - started
        gc.collect()
        grown = rss_mib() - before
        held = sum(a.nbytes for ring in (history.raw, *history.rings) for a in (ring.times, ring.values))
        history.path = Path(tmp) / "history.bin"
        t = time.perf_counter()
        history.save()
        save_s = time.perf_counter() - t
        size = history.path.stat().st_size
        t = time.perf_counter()
        loaded = History(history.path, interval=1.0)
        load_s = time.perf_counter() - t
        loaded.close()
        from rigmon.http.page import Page

        pipeline.latest = sample._replace(time=t0 + polls - 1)
        page = Page(pipeline, history, config.jobs)
        draws = {}
        for key, span, cards in (("1h", "1h", None), ("7d", "7d", None), ("1h_3_cards", "1h", ["0", "1", "2"])):
            took = []
            for _ in range(5):
                t = time.perf_counter()
                body = json.dumps(page.draw(span, cards)).encode()
                took.append(time.perf_counter() - t)
            draws[key] = {"ms": round(statistics.median(took) * 1000, 1), "bytes": len(body)}
        # /api/history over the whole week (every series) against one scrape of /metrics as
        # Prometheus asks for it (OpenMetrics, gzip), rendered for the same poll. The daemon
        # makes the page's kept-ready ask in the history's background soon after start and after
        # each save (every SAVE_SECONDS): that one makes every group (what an ask on a cold
        # history costs). A script's first ask comes up to a save later, worst case: it makes
        # the first and last group of each series and any closed since. Then medians of 5 asks a
        # poll apart (a page or script asking again).
        t = time.perf_counter()
        history.make_ready()
        ready_ms = round((time.perf_counter() - t) * 1000, 2)
        asked = polls + int(SAVE_SECONDS) - 1
        for k in range(polls, asked):
            r = results[k % 3600]
            history.consume(r._replace(sample=r.sample._replace(time=t0 + k)))
        t = time.perf_counter()
        page.history_json(f"since=-{polls}")
        first_ms = round((time.perf_counter() - t) * 1000, 2)
        took, week_bytes = [], 0
        for k in range(asked, asked + 5):
            r = results[k % 3600]
            history.consume(r._replace(sample=r.sample._replace(time=t0 + k)))
            t = time.perf_counter()
            week_bytes = len(page.history_json(f"since=-{polls}")[1])
            took.append(time.perf_counter() - t)
        week_ms = round(statistics.median(took) * 1000, 2)
        scrape_ms, _ = _median_ms(_scrape(result))
        answers = {
            "history_week_ms": week_ms,
            "history_week_bytes": week_bytes,
            "scrape_ms": scrape_ms,
            "history_week_over_scrape": round(week_ms / scrape_ms, 1),
            "history_week_first_ms": first_ms,
            "history_week_first_over_scrape": round(first_ms / scrape_ms, 1),
            "history_week_ready_ms": ready_ms,
            "history_week_ready_over_scrape": round(ready_ms / scrape_ms, 1),
            "history_ready_core_pct": round(ready_ms / 1000 / SAVE_SECONDS * 100, 4),
        }
    pipeline.close(time.monotonic() + 2)
    per_poll_us = cpu / polls * 1e6
    out = {
        "gpus": len(sample.gpus),
        "days": args.days,
        "polls": polls,
        "series": len(history.series_names()),
        "rings_mib": round(held / 2**20, 2),
        "rss_growth_mib": round(grown, 1),
        "cpu_per_poll_us": round(per_poll_us, 1),
        "core_share_at_1s_percent": round(per_poll_us / 1e4, 3),
        "save_ms": round(save_s * 1000, 1),
        "file_mib": round(size / 2**20, 2),
        "save_core_share_percent": round(save_s / SAVE_SECONDS * 100, 4),
        "load_ms": round(load_s * 1000, 1),
        "draw_per_open_page_poll": draws,
        **answers,
    }
    out["within_budget"] = (
        out["rss_growth_mib"] <= 20 * 1e6 / 2**20
        and out["core_share_at_1s_percent"] + out["save_core_share_percent"] + out["history_ready_core_pct"] <= 0.5
    )
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"history of {out['gpus']} GPUs, {out['days']:g} days of 1 s polls ({polls} polls), {out['series']} series")
    print(f"  rings hold {out['rings_mib']} MiB; RSS grew {out['rss_growth_mib']} MiB over the week (budget 20 MB)")
    print(f"  CPU per poll {out['cpu_per_poll_us']} us = {out['core_share_at_1s_percent']} % of a core at 1 s polls")
    print(
        f"  save every {SAVE_SECONDS:g} s: {out['save_ms']} ms, {out['file_mib']} MiB file "
        f"({out['save_core_share_percent']} % of a core); load at start {out['load_ms']} ms"
    )
    print(
        f"  with a page open, each draw of the charts: 1 h {draws['1h']['ms']} ms ({draws['1h']['bytes']} bytes; "
        f"every 5 s = {draws['1h']['ms'] / 50:.1f} % of a core), 7 d {draws['7d']['ms']} ms "
        f"({draws['7d']['bytes']} bytes)"
    )
    print(
        f"  the hour's charts of the 3 cards on a 1400x900 screen, as an open page asks: "
        f"{draws['1h_3_cards']['ms']} ms (every 5 s = {draws['1h_3_cards']['ms'] / 50:.2f} % of a core)"
    )
    print(
        f"  /api/history over the week, every series, asked again a poll later: {out['history_week_ms']} ms "
        f"({out['history_week_bytes']} bytes), {out['history_week_over_scrape']}x one Prometheus scrape of "
        f"/metrics ({out['scrape_ms']} ms); a script's first ask, a save after the daemon made it ready, "
        f"{out['history_week_first_ms']} ms ({out['history_week_first_over_scrape']}x)"
    )
    print(
        f"  the ask kept ready, made in the background after each save: {out['history_week_ready_ms']} ms "
        f"({out['history_week_ready_over_scrape']}x a scrape, what an ask on a cold history costs; "
        f"{out['history_ready_core_pct']} % of a core)"
    )
    print(f"  within budget (+20 MB, +0.5 % of a core): {out['within_budget']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
