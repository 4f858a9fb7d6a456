"""InfluxDB sink throughput: how fast a full spool drains into a real InfluxDB, and the
writer's CPU per point (encoding, spooling with fsync, sending).

    python tests/bench/bench_influx.py [--samples 2000]
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
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

import scenarios as sc  # noqa: E402
from servers import InfluxDB  # noqa: E402

from rigmon.config.box import Box  # noqa: E402
from rigmon.config.schema import parse  # noqa: E402
from rigmon.poller import build_poller  # noqa: E402
from rigmon.sinks.influxdb import InfluxSink  # noqa: E402
from rigmon.sinks.lineprotocol import encode  # noqa: E402


def thread_cpu(thread: threading.Thread) -> float:
    import os

    tid = thread.native_id
    stat = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=2000, help="8-GPU samples to spool and drain")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        influx = InfluxDB(tmp)
        config = parse(
            {
                "daemon": {"state_dir": str(tmp / "state")},
                "influxdb": {"enabled": True, "api": "v1", "url": influx.url, "flush_interval": 0.2},
            }
        )
        source = sc.source(sc.h200().widened(8), loop=True)
        poller = build_poller(config, source, event_thread=False)
        poller.open()
        samples = []
        for i in range(args.samples):
            source.clock.set(i * 0.1)
            sample = poller.poll()
            samples.append(sample._replace(time=1.7e9 + i))  # distinct, old timestamps
        poller.close()
        per_sample = len(encode(samples[0], "bench"))

        # 1. drain: the server is away while the samples are spooled, then comes back
        influx.stop()
        sink = InfluxSink(config.influxdb, Box.of(config, "bench"))
        cpu0 = thread_cpu(sink._thread)
        for sample in samples:
            sink.consume(sample)
        while sink.spool.points < args.samples * per_sample:
            time.sleep(0.05)
        spool_cpu = thread_cpu(sink._thread) - cpu0
        points, size = sink.spool.points, sink.spool.bytes
        sink.close(timeout=0.1)  # the points stay on disk
        influx.start()
        # a new sink finds the spool of the earlier one, as a restarted daemon does
        started = time.monotonic()
        drainer = InfluxSink(config.influxdb, Box.of(config, "bench"))
        while drainer.spool.points:
            time.sleep(0.01)
        drain_s, drain_cpu = time.monotonic() - started, thread_cpu(drainer._thread)
        drainer.close()
        stored = influx.count("SELECT count(power_watts) FROM gpu")
        influx.stop()
    report = {
        "samples": args.samples,
        "points": points,
        "points_per_sample": per_sample,
        "spool_mb": round(size / 1e6, 1),
        "drain_seconds": round(drain_s, 2),
        "drain_points_per_second": round(points / drain_s),
        "writer_cpu_us_per_point_encode_and_spool": round(spool_cpu / points * 1e6, 1),
        "writer_cpu_us_per_point_drain": round(drain_cpu / points * 1e6, 1),
        "writer_cpu_seconds_drain": drain_cpu,
        "stored_gpu_points": stored,
        "expected_gpu_points": args.samples * 8,
        "note": "thread CPU from /proc in 10 ms ticks; influxd shares the same 2 cores",
    }
    print(json.dumps(report, indent=2))
    return 0 if stored == args.samples * 8 else 1


if __name__ == "__main__":
    raise SystemExit(main())
