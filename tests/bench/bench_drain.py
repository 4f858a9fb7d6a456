"""How fast the InfluxDB sink drains a spool an outage left, against a bare POST of the same
bytes, and that every point arrives once.

The spool: 8 GPUs polled at 1 Hz through a 10-minute outage (600 samples, timestamps one
second apart), spooled by the real sink while InfluxDB is away, one append per poll, in two
shapes: as the sink spooled them (segments of up to 1 MiB), and one segment per poll (what
a flapping server or restarts leave: many small segments). Then a fresh sink finds the
spool, as a restarted daemon does, and drains it into a real InfluxDB (Debian's influxd
1.x); the bare drain POSTs the very bytes of the spool (gzip, the same batch size) back to
back on one kept-alive connection, into another database. Stored = produced is checked by a
count in each database, and the sink's count of points written against the spool's.

    python tests/bench/bench_drain.py [--samples 600]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

import scenarios as sc  # noqa: E402
from servers import InfluxDB  # noqa: E402

from rigmon.config.box import Box  # noqa: E402
from rigmon.config.schema import parse  # noqa: E402
from rigmon.poller import build_poller  # noqa: E402
from rigmon.sinks import influxdb as influxmod  # noqa: E402
from rigmon.sinks.influxdb import InfluxSink  # noqa: E402
from rigmon.sinks.lineprotocol import encode  # noqa: E402


def samples(count: int) -> list:
    config = parse({"gpu": {"xid_events": False}})
    source = sc.source(sc.rich(sc.h200(), gpus=8), loop=True)
    poller = build_poller(config, source, event_thread=False)
    poller.open()
    out = []
    for i in range(count):
        source.clock.set(float(i))
        out.append(poller.poll()._replace(time=1.7e9 + i))  # an outage's seconds, long ago
    poller.close()
    return out


def spool(config, polls: list, one_segment_per_poll: bool) -> tuple[int, int, int]:
    """Spool the polls with InfluxDB away; (points, bytes, segments)."""
    sink = InfluxSink(config.influxdb, Box.of(config, "bench"))
    expected = sum(len(encode(s, "bench", with_info=n == 0)) for n, s in enumerate(polls))
    for sample in polls:  # one append per poll, as the spooler makes them at 1 Hz
        if one_segment_per_poll:
            sink.spool._current = None  # the next append opens a new segment
        sink.consume(sample)
        sink.spool_now()
    deadline = time.monotonic() + 60
    while sink.spool.points < expected and time.monotonic() < deadline:
        time.sleep(0.02)
    points, size, segments = sink.spool.points, sink.spool.bytes, len(list(sink.spool.dir.glob("*.lp")))
    sink.close(timeout=0.1)  # the points stay on disk
    return points, size, segments


def drain_rigmon(config, points: int) -> tuple[float, int]:
    """(seconds to drain, points the sink counts as written: the spool's, once each)."""
    started = time.monotonic()
    drainer = InfluxSink(config.influxdb, Box.of(config, "bench"))
    while drainer.written < points:
        time.sleep(0.005)
    elapsed = time.monotonic() - started
    time.sleep(0.5)  # nothing more comes: a second write of anything would count here
    drainer.close()
    return elapsed, drainer.written


def drain_bare(url: str, database: str, chunks: list[bytes]) -> float:
    host, port = url.removeprefix("http://").split(":")
    started = time.monotonic()
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    for chunk in chunks:
        connection.request(
            "POST",
            f"/write?db={database}&precision=ns",
            body=gzip.compress(chunk, 5),
            headers={"Content-Type": "text/plain; charset=utf-8", "Content-Encoding": "gzip"},
        )
        response = connection.getresponse()
        response.read()
        assert response.status == 204, response.status
    elapsed = time.monotonic() - started
    connection.close()
    return elapsed


def batches(directory: Path) -> list[bytes]:
    """The spool's bytes in the batches rigmon sends: whole segments up to BATCH_BYTES."""
    out, current = [], b""
    for path in sorted(directory.glob("*.lp")):
        data = path.read_bytes()
        if current and len(current) + len(data) > influxmod.BATCH_BYTES:
            out.append(current)
            current = b""
        current += data
    return out + ([current] if current else [])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=600)
    args = p.parse_args(argv)
    polls = samples(args.samples)
    report = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        influx = InfluxDB(tmp)
        try:
            for shape in ("as spooled", "one segment per poll"):
                key = shape.replace(" ", "_")
                state = tmp / key
                config = parse(
                    {
                        "daemon": {"state_dir": str(state)},
                        "influxdb": {
                            "enabled": True,
                            "api": "v1",
                            "url": "http://127.0.0.1:9",
                            "database": key,
                            "flush_interval": 0.2,
                        },
                    }
                )
                points, size, segments = spool(config, polls, shape == "one segment per poll")
                chunks = batches(state / "influxdb-spool")
                influx.query(f'CREATE DATABASE "{key}"')
                influx.query(f'CREATE DATABASE "{key}_bare"')
                bare_s = drain_bare(influx.url, f"{key}_bare", chunks)
                live = parse(
                    {
                        "daemon": {"state_dir": str(state)},
                        "influxdb": {
                            "enabled": True,
                            "api": "v1",
                            "url": influx.url,
                            "database": key,
                            "flush_interval": 0.2,
                        },
                    }
                )
                rigmon_s, written = drain_rigmon(live, points)
                stored = influx.count(f'SELECT count(power_watts) FROM "{key}".."gpu"')
                stored_bare = influx.count(f'SELECT count(power_watts) FROM "{key}_bare".."gpu"')
                report[shape] = {
                    "points": points,
                    "points_written": written,
                    "spool_mb": round(size / 1e6, 2),
                    "segments": segments,
                    "requests": len(chunks),
                    "rigmon_s": round(rigmon_s, 3),
                    "bare_s": round(bare_s, 3),
                    "rigmon_points_per_s": round(points / rigmon_s),
                    "bare_points_per_s": round(points / bare_s),
                    "rigmon_over_bare_throughput": round(bare_s / rigmon_s, 2),
                    "gpu_points_stored": stored,
                    "gpu_points_stored_bare": stored_bare,
                    "gpu_points_produced": args.samples * 8,
                }
        finally:
            influx.stop()
    print(json.dumps(report, indent=2))
    ok = all(
        r["gpu_points_stored"] == r["gpu_points_produced"] and r["points_written"] == r["points"]
        for r in report.values()
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
