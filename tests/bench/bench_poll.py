"""The daemon's whole poll, part by part, against the bare NVML/psutil calls it makes.

An 8-GPU replay of the H200 recording (the rich scenario: host sensors, fans, ECC) through
the daemon's own pieces, each timed in CPU seconds over the same positions:

- bare: the NVML/psutil calls the readers made, captured and replayed without the readers;
- readers: the GPU and host readers building the sample;
- alerts: the alert engine evaluating every rule on the sample;
- metrics: the Prometheus collector rendering /metrics as the daemon does for Prometheus
  (OpenMetrics; once per poll, when scraped);
- influx: the sample encoded as InfluxDB line protocol;
- poll: what the daemon does at every poll, scraped or not: poll_once (readers, alerts,
  the collector taking the sample) and the line protocol.

    python tests/bench/bench_poll.py [--polls N] [--scenario plain] [--firing] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parents[1])]

import compat  # noqa: E402
import scenarios as sc  # noqa: E402
from bench_reader import Capture, replay_calls  # noqa: E402
from prometheus_client.exposition import choose_encoder  # noqa: E402

from rigmon.config import schema as configmod  # noqa: E402
from rigmon.sinks import lineprotocol  # noqa: E402

if callable(configmod):  # an earlier rigmon (before its folders): rigmon.config was the module
    import rigmon.config as configmod  # noqa: E402

EPOCH = 1_780_000_000.0
PROMETHEUS_ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"


def renderer():
    """What the daemon's /metrics renders for Prometheus with."""
    encoder = choose_encoder(PROMETHEUS_ACCEPT)[0]
    try:
        from rigmon.exporters.exposition import Exposition
    except ImportError:  # before the exposition writer: prometheus_client's
        return encoder
    return Exposition().encoder(encoder)


STATE = tempfile.mkdtemp(prefix="rigmon-bench-")  # the jobs ledger, where there is one


# --firing: GpuPowerCapped fires at once (on the H200 recording, which runs at its power cap,
# on every GPU): the state of a busy datacenter GPU all training long, each alert described
# every poll
FIRING = {"builtin": {"GpuPowerCapped": {"for": 0}}}


# --no-cooling: the poll without the cooling baselines (as a rigmon from before them polls)
COOLING: dict = {}


def build(recording, capture: bool, firing: bool = False, **gpu):
    config = configmod.parse(
        {
            "influxdb": {"enabled": False},
            "prometheus": {"enabled": False},
            "daemon": {"state_dir": STATE},
            "gpu": {"xid_events": False, **gpu},
            "alerts": FIRING if firing else {},
            **COOLING,
        },
        "bench",
    )
    source = sc.source(recording, loop=True)
    try:
        from rigmon.readers.replay import ReplayHost, replay_backend
    except ImportError:  # before the folders: the replay at the top
        from rigmon.replay import ReplayHost, replay_backend

    nvml, host = replay_backend(source), ReplayHost(source)
    if capture:
        nvml, host = Capture(nvml), Capture(host)
    daemon, registry = compat.daemon_for(
        config, source, nvml=nvml, host_backend=host, wall=lambda: EPOCH + source.clock(), event_thread=False
    )
    return source, daemon, registry, nvml, host


def measure(gpus: int, polls: int, repeats: int, scenario: str = "rich", firing: bool = False) -> dict:
    recording = sc.rich(sc.h200(), gpus=gpus) if scenario == "rich" else sc.h200().widened(gpus)
    at = [(i * 1.0) % recording.duration for i in range(polls)]

    source, daemon, _, nvml, host = build(recording, capture=True, firing=firing)
    per_poll, named = [], []
    for t in at:
        source.clock.set(t)
        n0, h0, c0 = len(nvml.bound), len(host.bound), len(nvml.calls)
        daemon.pipeline.poller.poll()
        per_poll.append(nvml.bound[n0:] + host.bound[h0:])
        named.append(nvml.calls[c0:])

    def bare() -> float:
        return replay_calls(source, at, per_poll)

    firing_seen: list[int] = []

    def parts() -> dict[str, float]:
        src, d, registry, _, _ = build(recording, capture=False, firing=firing)
        render = renderer()
        spent = dict.fromkeys(("readers", "alerts", "metrics", "influx"), 0.0)
        samples = []
        poller, alerts = compat.poller(d), compat.alerts(d)
        for t in at:
            src.clock.set(t)
            s0 = time.process_time()
            sample = poller.poll()
            s1 = time.process_time()
            if alerts is not None:
                compat.evaluate_alerts(d, sample)
            s2 = time.process_time()
            compat.collect_sample(d, sample)
            render(registry)
            s3 = time.process_time()
            lineprotocol.encode(sample, "box")
            s4 = time.process_time()
            spent["readers"] += s1 - s0
            spent["alerts"] += s2 - s1
            spent["metrics"] += s3 - s2
            spent["influx"] += s4 - s3
            samples.append(sample)
        firing_seen.append(len(alerts.engine.firing()) if alerts is not None else 0)
        return spent

    def whole() -> float:
        src, d, registry, _, _ = build(recording, capture=False, firing=firing)
        start = time.process_time()
        for t in at:
            src.clock.set(t)
            sample = d.poll_once()
            lineprotocol.encode(sample, "box")
        return time.process_time() - start

    runs: dict[str, list[float]] = {"bare": [], "poll": []}
    part_runs: list[dict] = []
    for _ in range(repeats):  # interleaved; the least disturbed run of each
        runs["bare"].append(bare())
        runs["poll"].append(whole())
        part_runs.append(parts())
    best = {k: min(v) for k, v in runs.items()}
    best.update({k: min(p[k] for p in part_runs) for k in part_runs[0]})
    us = {k: round(v / polls * 1e6, 1) for k, v in best.items()}
    # each run's part over the same run's bare calls: the spread README quotes
    per_run = {
        k: sorted((runs[k][i] if k in runs else part_runs[i][k]) / runs["bare"][i] for i in range(repeats))
        for k in best
        if k != "bare"
    }
    spread = {
        k: {"min": round(v[0], 2), "median": round(statistics.median(v), 2), "max": round(v[-1], 2)}
        for k, v in per_run.items()
    }
    return {
        "gpus": gpus,
        "polls": polls,
        "alerts_firing": firing_seen[-1],
        "cpu_us_per_poll": us,
        "ratio_to_bare": {k: round(v / best["bare"], 2) for k, v in best.items() if k != "bare"},
        "ratio_to_bare_runs": spread,
        # the first lap of the recording: the replay's clock (which paces the slow counters) runs
        # back at a lap's end
        "real_h200": real_h200(
            named[: next((i for i in range(1, len(at)) if at[i] < at[i - 1]), len(at))],
            (best["poll"] - best["bare"]) / polls,
        ),
    }


SURFACE = HERE.parents[2] / "shared" / "fixtures" / "h200" / "nvml_surface.json"


def real_h200(named: list[list[tuple]], own_seconds: float) -> dict | None:
    """The same polls on a real H200 box: each NVML call the readers made, at the median latency
    the fixture measured for it on a real H200 (nvml_surface.json), plus rigmon's own CPU."""
    if not SURFACE.exists():
        return None
    costs = {}
    for c in json.loads(SURFACE.read_text())["devices"][0]["calls"]:
        costs[(c["fn"], tuple(c["args"]))] = c["us_median"]

    def cost(name, args):
        if name == "nvmlDeviceGetFieldValues":  # the fixture: 19 fields in 5.5 ms, energy 3.1 of it
            return (5.5 - 3.1) / 18 * 1000 * (len(args[0]) if args and args[0] else 0)
        key = (name, tuple(a for a in args if isinstance(a, int)))
        return costs.get(key, costs.get((name, ())))

    calls: dict[str, list[float]] = {}
    polls = []
    for poll in named:
        total = 0.0
        for name, args in poll:
            us = cost(name, args)
            if us is None or not name.startswith("nvmlDevice"):
                continue
            total += us
            shown = [str(a) for a in args if isinstance(a, int)] or ([f"{len(args[0])} fields"] if args else [])
            key = name + (f"({','.join(shown)})" if shown else "")
            calls.setdefault(key, []).append(us)
        polls.append(total)
    ordered = sorted(polls)
    per_call = {
        k: {"calls_per_poll": round(len(v) / len(named), 2), "us": round(v[0], 2)}
        for k, v in sorted(calls.items(), key=lambda kv: -sum(kv[1]))
    }
    own_ms = own_seconds * 1e3
    return {
        "poll_ms_median": round(ordered[len(ordered) // 2] / 1e3 + own_ms, 2),
        "poll_ms_mean": round(sum(polls) / len(polls) / 1e3 + own_ms, 2),
        "poll_ms_max": round(ordered[-1] / 1e3 + own_ms, 2),
        "own_cpu_ms": round(own_ms, 2),
        "per_call": per_call,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--polls", type=int, default=300)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--scenario",
        choices=["rich", "plain"],
        default="rich",
        help="rich: host sensors, fans, ECC (default); plain: the H200 recording widened, no sensors",
    )
    p.add_argument(
        "--firing",
        action="store_true",
        help="GpuPowerCapped fires at once: an alert firing on every GPU, described every poll",
    )
    p.add_argument(
        "--no-cooling",
        action="store_true",
        help="[cooling] enabled = false: the poll as it was before the cooling baselines (an earlier "
        "rigmon, which has no [cooling], polls without them whatever this says)",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.no_cooling:
        COOLING["cooling"] = {"enabled": False}
    result = measure(8, args.polls, args.repeats, args.scenario, args.firing)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"8 GPUs ({args.scenario}), {args.polls} polls, {args.repeats} interleaved runs, "
        f"{result['alerts_firing']} alerts firing at the end; CPU µs per poll (best run), and the ratio to the "
        f"bare calls of the same run (min / median / max over the runs)"
    )
    for key, value in result["cpu_us_per_poll"].items():
        s = result["ratio_to_bare_runs"].get(key)
        print(
            f"  {key:>8} {value:>9.1f} µs"
            + (f"  {s['min']:>5.2f} / {s['median']:.2f} / {s['max']:.2f}x" if s is not None else "")
        )
    real = result["real_h200"]
    if real is not None:
        print(
            f"on a real 8×H200 box (each call at its median latency on the fixture's H200, plus rigmon's own "
            f"{real['own_cpu_ms']} ms): poll median {real['poll_ms_median']} ms, mean {real['poll_ms_mean']} ms "
            f"(the slow counters every slow_interval), max {real['poll_ms_max']} ms; NVML calls, by time spent:"
        )
        for name, c in real["per_call"].items():
            print(f"  {name:<48} {c['calls_per_poll']:>6.2f} a poll  {c['us']:>9.2f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
