"""/metrics under concurrent scrapers: rigmon's server against the floor, and against an
earlier rigmon.

Three servers answer the same 8-GPU exposition, each in its own process:
- rigmon: ``rigmon run`` replaying the H200 recording widened to 8 GPUs (1 s polls);
- floor: a minimal keep-alive HTTP/1.1 server (asyncio protocol) writing the very bytes
  rigmon answered, with the same headers: no parsing beyond finding the blank line;
- today (with ``--today DIR``, a checkout of an earlier rigmon, e.g. ``git worktree add
  /tmp/today 0e02687``): that rigmon, run the same way.

The load comes from another process: N scrapers (1, 10, 50), each a connection that sends
Prometheus's own headers (OpenMetrics, gzip) and reads whole responses; ``keepalive``
reuses the connection like Prometheus, ``close`` opens one per scrape. For each: scrapes/s,
p50 and p99 latency (request written to body read), failures.

    python tests/bench/bench_http.py [--seconds 5] [--rounds 3] [--today DIR] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

import scenarios as sc  # noqa: E402
from servers import Rigmon, free_port  # noqa: E402

ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
          "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
REQUEST = (f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: Prometheus/2.53.0\r\nAccept: {ACCEPT}\r\n"
           f"Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n").encode()

FLOOR = r'''
import asyncio, sys
head, body = open(sys.argv[2], "rb").read().split(b"\r\n\r\n", 1)
keep = head + b"\r\n\r\n" + body
close = head + b"\r\nConnection: close\r\n\r\n" + body

class Floor(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""
    def data_received(self, data):
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            request, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            if b"onnection: close" in request:
                self.transport.write(close)
                self.transport.close()
                return
            self.transport.write(keep)

async def main():
    server = await asyncio.get_running_loop().create_server(Floor, "127.0.0.1", int(sys.argv[1]), backlog=128)
    print("ready", flush=True)
    await server.serve_forever()

asyncio.run(main())
'''


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """(status, the server closes the connection after it) of one whole response."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    lines = [line.lower() for line in head.split(b"\r\n")]
    length = next(int(line.split(b":", 1)[1]) for line in lines if line.startswith(b"content-length:"))
    await reader.readexactly(length)
    closes = b"connection: close" in lines or (head.startswith(b"HTTP/1.0") and b"connection: keep-alive" not in lines)
    return status, closes


async def _scraper(port: int, mode: str, until: float, latencies: list, failures: list) -> None:
    reader = writer = None
    while time.monotonic() < until:
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            started = time.perf_counter()
            writer.write(REQUEST + (b"Connection: close\r\n\r\n" if mode == "close" else b"\r\n"))
            status, closes = await asyncio.wait_for(_read_response(reader), 10)
            if status != 200:
                failures.append(f"HTTP {status}")
            else:
                latencies.append(time.perf_counter() - started)
            if mode == "close" or closes:  # as Prometheus does with a server that closes: a new one next
                writer.close()
                writer = None
        except (OSError, asyncio.IncompleteReadError, TimeoutError, StopIteration) as e:
            failures.append(repr(e))
            if writer is not None:
                writer.close()
            writer = None
    if writer is not None:
        writer.close()


def _load(port: int, mode: str, scrapers: int, seconds: float, out) -> None:
    async def run():
        latencies, failures = [], []
        until = time.monotonic() + seconds
        started = time.monotonic()
        await asyncio.gather(*(_scraper(port, mode, until, latencies, failures) for _ in range(scrapers)))
        return latencies, failures, time.monotonic() - started

    latencies, failures, elapsed = asyncio.run(run())
    latencies.sort()
    out.send({"scrapes": len(latencies), "failed": len(failures), "first_failure": failures[:1],
              "per_second": round(len(latencies) / elapsed, 1),
              "p50_ms": round(latencies[len(latencies) // 2] * 1e3, 3) if latencies else None,
              "p99_ms": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1e3, 3)
              if latencies else None})


def load(port: int, mode: str, scrapers: int, seconds: float) -> dict:
    """The load from its own process (the server's process keeps its core)."""
    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.Process(target=_load, args=(port, mode, scrapers, seconds, child))
    proc.start()
    result = parent.recv()
    proc.join()
    return result


def _median(runs: list[dict]) -> dict:
    """Each figure's median over the rounds (failures summed: one failure anywhere counts)."""
    def median(key):
        values = sorted(r[key] for r in runs if r[key] is not None)
        return values[len(values) // 2] if values else None

    return {"scrapes": sum(r["scrapes"] for r in runs), "failed": sum(r["failed"] for r in runs),
            "first_failure": next((r["first_failure"] for r in runs if r["first_failure"]), []),
            "per_second": median("per_second"), "p50_ms": median("p50_ms"), "p99_ms": median("p99_ms"),
            "rounds": len(runs)}


def fetch(port: int) -> bytes:
    """One whole response (head and body) as the scrapers ask for it."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(REQUEST + b"Connection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {port}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=1, help="repeat every load this many times, interleaved; "
                                                            "report the median of each figure")
    p.add_argument("--today", metavar="DIR", help="a checkout of an earlier rigmon to measure too")
    p.add_argument("--scrapers", default="1,10,50")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    levels = [int(n) for n in args.scrapers.split(",")]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        recording = sc.write(sc.h200().widened(8), tmp / "bench.rec.jsonl")
        servers = {"rigmon": None, "floor": None}
        if args.today:
            servers["today"] = None
        procs = []
        try:
            for name in servers:
                port = free_port()
                if name == "floor":
                    body = tmp / "floor.http"
                    body.write_bytes(fetch(servers["rigmon"]))
                    procs.append(subprocess.Popen([sys.executable, "-c", FLOOR, str(port), str(body)],
                                                  stdout=subprocess.DEVNULL))
                    wait_port(port)
                else:
                    folder = tmp / name
                    folder.mkdir()
                    env = {"PYTHONPATH": str(Path(args.today).resolve())} if name == "today" else {}
                    env["PYTHONSAFEPATH"] = "1"
                    daemon = Rigmon(folder, recording, f'[daemon]\nstate_dir = "{folder / "state"}"\n', env=env,
                                    port=port)
                    daemon.wait_ready()
                    procs.append(daemon)
                servers[name] = port
            time.sleep(1.0)
            rounds: dict[tuple, list[dict]] = {}
            for _ in range(args.rounds):  # rounds interleaved: a disturbance hits every server alike
                for mode in ("keepalive", "close"):
                    for n in levels:
                        for name, port in servers.items():  # the servers side by side at each level
                            rounds.setdefault((name, mode, n), []).append(load(port, mode, n, args.seconds))
            for (name, mode, n), runs in rounds.items():
                results.setdefault(name, {}).setdefault(mode, {})[n] = _median(runs)
        finally:
            for proc in procs:
                if isinstance(proc, Rigmon):
                    proc.stop()
                else:
                    proc.terminate()
                    proc.wait()
    summary = {}
    for mode in ("keepalive", "close"):
        for n in levels:
            r, f = results["rigmon"][mode][n], results["floor"][mode][n]
            row = {"rigmon_per_s": r["per_second"], "floor_per_s": f["per_second"],
                   "rigmon_p99_ms": r["p99_ms"], "floor_p99_ms": f["p99_ms"],
                   "p99_over_floor": round(r["p99_ms"] / f["p99_ms"], 2) if r["p99_ms"] and f["p99_ms"] else None,
                   "failed": r["failed"] + f["failed"]}
            if "today" in results:
                t = results["today"][mode][n]
                row.update(today_per_s=t["per_second"], today_p99_ms=t["p99_ms"],
                           throughput_over_today=round(r["per_second"] / t["per_second"], 2)
                           if t["per_second"] else None, failed=row["failed"] + t["failed"])
            summary[f"{mode} x{n}"] = row
    if args.json:
        print(json.dumps({"summary": summary, "detail": results}, indent=2))
    else:
        for key, row in summary.items():
            print(f"{key:>14}: " + ", ".join(f"{k} {v}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONSAFEPATH", "1")
    raise SystemExit(main())
