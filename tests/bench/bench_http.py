"""/metrics under concurrent scrapers: rigmon's server against the floor, and against an
earlier rigmon.

The servers answer the same 8-GPU exposition, each in its own process:
- rigmon: ``rigmon run`` replaying the H200 recording widened to 8 GPUs (1 s polls);
- quiet: the same, polling once an hour: rigmon's HTTP stack without the polls and renders
  that share its process (and its GIL) once a second;
- floor: a minimal keep-alive HTTP/1.1 server (asyncio protocol) writing the very bytes
  rigmon answered, with the same headers: no parsing beyond finding the blank line;
- control: a second floor, the same code and bytes: what two identical servers differ by
  here is the noise of the measurement itself (a p99 on a shared 2-core machine moves a lot
  from one run to the next), the margin any "within 1.2x" has to be read against;
- today (with ``--today DIR``, a checkout of an earlier rigmon, e.g. ``git worktree add
  /tmp/today 0e02687``): that rigmon, run the same way.

The load comes from another process: N scrapers (1, 10, 50), each a connection that sends
Prometheus's own headers (OpenMetrics, gzip) and reads whole responses; ``keepalive``
reuses the connection like Prometheus, ``close`` opens one per scrape. For each: scrapes/s,
p50, p99 and p99.9 latency (request written to body read), failures, and the server's CPU
per scrape (its threads' run time while it served them, from /proc). Rounds are interleaved,
every server measured at each level before the next, in the opposite order every other
round; figures are medians over the rounds, and a p99 or a CPU per scrape "over the floor" is
the median of each round's ratio (the server's over the floor's in the same round, seconds
apart).

Where there are two CPUs or more the load runs on the first and every server on the rest
(``--no-pin``: anywhere), as Prometheus runs on another core or machine than the exporter;
and while one server is measured the others are stopped (SIGSTOP), so that the polls of
the rigmons not measured do not land on it (each measured after 1.5 s to catch up).

The client is ``wrk`` where it is installed (Debian's ``wrk``: C, one thread, epoll), so the
servers, not the client, are what is measured; otherwise (or with ``--client asyncio``) an
asyncio client, which on two cores saturates first when a connection is opened per scrape.

    python tests/bench/bench_http.py [--seconds 5] [--rounds 3] [--today DIR] [--scrapers 1,10,50]
        [--modes keepalive,close] [--client wrk|asyncio] [--no-pin] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

import scenarios as sc  # noqa: E402
from servers import Rigmon, free_port  # noqa: E402

ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
REQUEST = (
    f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: Prometheus/2.53.0\r\nAccept: {ACCEPT}\r\n"
    f"Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n"
).encode()

# ``--style plain``: what curl or a person asks (the text format, no gzip)
PLAIN_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n"
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far: its threads' run time in nanoseconds from schedstat where
    the kernel keeps it (utime and stime come in 10 ms ticks: 0.5 % of a 2-second run at half
    a core), else utime and stime from /proc/PID/stat."""
    try:
        return (
            sum(int((task / "schedstat").read_text().split()[0]) for task in Path(f"/proc/{pid}/task").iterdir()) / 1e9
        )
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK


FLOOR = r"""
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
"""


# wrk's script: the same request as REQUEST; "close" (its argument) adds Connection: close, and
# wrk opens a new connection for every scrape; done() prints the figures as one JSON line
WRK_SCRIPT = r"""
wrk.headers["User-Agent"] = "Prometheus/2.53.0"
wrk.headers["Accept"] = "<ACCEPT>"
wrk.headers["Accept-Encoding"] = "gzip"
wrk.headers["X-Prometheus-Scrape-Timeout-Seconds"] = "10"
function init(args)
  if args[1] == "close" then wrk.headers["Connection"] = "close" end
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests": %d, "us": %d, "connect": %d, "read": %d, "write": %d, "status": %d, ' ..
    '"timeout": %d, "p50": %d, "p99": %d, "p999": %d}\n', summary.requests, summary.duration, e.connect,
    e.read, e.write, e.status, e.timeout, latency:percentile(50), latency:percentile(99), latency:percentile(99.9)))
end
""".replace("<ACCEPT>", ACCEPT)


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

    def quantile(q):
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3, 3) if latencies else None

    out.send(
        {
            "scrapes": len(latencies),
            "failed": len(failures),
            "first_failure": failures[:1],
            "per_second": round(len(latencies) / elapsed, 1),
            "p50_ms": quantile(0.5),
            "p99_ms": quantile(0.99),
            "p999_ms": quantile(0.999),
        }
    )


def _wrk(port: int, mode: str, scrapers: int, seconds: float, script: Path, pin) -> dict:
    pinned = ["taskset", "-c", ",".join(map(str, sorted(pin[0])))] if pin else []
    run = subprocess.run(
        [
            *pinned,
            "wrk",
            "-t1",
            f"-c{scrapers}",
            f"-d{seconds:g}s",
            "--timeout",
            "10s",
            "-s",
            str(script),
            f"http://127.0.0.1:{port}/metrics",
            "--",
            mode,
        ],
        capture_output=True,
        text=True,
    )
    try:
        figures = json.loads(run.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise RuntimeError(f"wrk said: {run.stdout}{run.stderr}") from None
    failed = sum(figures[k] for k in ("connect", "read", "write", "status", "timeout"))
    first = [f"{k} errors: {figures[k]}" for k in ("connect", "read", "write", "status", "timeout") if figures[k]]
    return {
        "scrapes": figures["requests"] - figures["status"],
        "failed": failed,
        "first_failure": first[:1],
        "per_second": round((figures["requests"] - figures["status"]) / figures["us"] * 1e6, 1),
        **{f"{q}_ms": figures[q] / 1e3 for q in ("p50", "p99", "p999")},
    }


def load(
    port: int,
    mode: str,
    scrapers: int,
    seconds: float,
    wrk_script: Path | None = None,
    pin: tuple[set, set] | None = None,
) -> dict:
    """The load from its own process (on the load's CPUs where ``pin`` says): wrk's, or the
    asyncio client's."""
    if wrk_script is not None:
        return _wrk(port, mode, scrapers, seconds, wrk_script, pin)
    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.Process(target=_load, args=(port, mode, scrapers, seconds, child))
    proc.start()
    if pin:
        os.sched_setaffinity(proc.pid, pin[0])
    result = parent.recv()
    proc.join()
    return result


def cpus(pin: bool) -> tuple[set, set] | None:
    """(the load's CPUs, the servers') where pinned: the first CPU for the load, the rest for
    the servers, so that neither takes the other's core and every server gets the same ones
    (with one CPU, nothing is pinned)."""
    available = sorted(os.sched_getaffinity(0))
    if not pin or len(available) < 2:
        return None
    return {available[0]}, set(available[1:])


@contextlib.contextmanager
def only(pids: dict[str, int], name: str, settle: float = 1.5):
    """Only ``name``'s server runs meanwhile: the others are stopped (SIGSTOP), so that their
    polls do not land on the one measured. ``name``'s own has just been continued: the
    ``settle`` seconds before the load let it catch up (the poll it missed, its render)."""
    others = [pid for other, pid in pids.items() if other != name]
    for pid in others:
        os.kill(pid, signal.SIGSTOP)
    time.sleep(settle)
    try:
        yield
    finally:
        for pid in others:
            os.kill(pid, signal.SIGCONT)


def _median(runs: list[dict]) -> dict:
    """Each figure's median over the rounds (failures summed: one failure anywhere counts)."""

    def median(key):
        values = sorted(r[key] for r in runs if r[key] is not None)
        return values[len(values) // 2] if values else None

    return {
        "scrapes": sum(r["scrapes"] for r in runs),
        "failed": sum(r["failed"] for r in runs),
        "first_failure": next((r["first_failure"] for r in runs if r["first_failure"]), []),
        "per_second": median("per_second"),
        "p50_ms": median("p50_ms"),
        "p99_ms": median("p99_ms"),
        "p999_ms": median("p999_ms"),
        "cpu_per_scrape_us": median("cpu_per_scrape_us"),
        "rounds": len(runs),
    }


def _over(server: list[dict], floor: list[dict], key: str = "p99_ms", places: int = 2) -> dict:
    """A server's figure (``key``) over the floor's, round by round (the two measured seconds
    apart, so a drift of the machine's speed cancels): the median and the range."""
    pairs = zip(server, floor, strict=True)
    ratios = sorted(s[key] / f[key] for s, f in pairs if s[key] and f[key])
    if not ratios:
        return {"median": None, "low": None, "high": None}
    return {
        "median": round(statistics.median(ratios), places),
        "low": round(ratios[0], places),
        "high": round(ratios[-1], places),
    }


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
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat every load this many times, interleaved; report the median of each figure",
    )
    p.add_argument("--today", metavar="DIR", help="a checkout of an earlier rigmon to measure too")
    p.add_argument(
        "--style",
        choices=["prometheus", "plain"],
        default="prometheus",
        help="the scrapers' request: Prometheus's (OpenMetrics, gzip) or a plain one (text format, no gzip)",
    )
    p.add_argument("--scrapers", default="1,10,50")
    p.add_argument("--modes", default="keepalive,close", help="keepalive, close or both")
    p.add_argument(
        "--client",
        choices=["wrk", "asyncio"],
        default="wrk" if shutil.which("wrk") else "asyncio",
        help="the load generator (default: wrk where it is installed)",
    )
    p.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="let the load and the servers share every CPU (default: the load on the first, the servers on the rest)",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    global REQUEST, WRK_SCRIPT
    if args.style == "plain":  # set before the load's processes are forked: they send it
        REQUEST = PLAIN_REQUEST
        WRK_SCRIPT = "\n".join(x for x in WRK_SCRIPT.splitlines() if "Accept" not in x and "Prometheus" not in x)
    pin = cpus(args.pin)
    levels = [int(n) for n in args.scrapers.split(",")]
    modes = [m for m in ("keepalive", "close") if m in args.modes.split(",")]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        wrk_script = None
        if args.client == "wrk":
            wrk_script = tmp / "scrape.lua"
            wrk_script.write_text(WRK_SCRIPT)
        recording = sc.write(sc.h200().widened(8), tmp / "bench.rec.jsonl")
        servers = {"rigmon": None, "quiet": None, "floor": None, "control": None}
        if args.today:
            servers["today"] = None
        procs = []
        try:
            for name in servers:
                port = free_port()
                if name in ("floor", "control"):
                    body = tmp / "floor.http"
                    if name == "floor":
                        body.write_bytes(fetch(servers["rigmon"]))
                    procs.append(
                        subprocess.Popen([sys.executable, "-c", FLOOR, str(port), str(body)], stdout=subprocess.DEVNULL)
                    )
                    wait_port(port)
                else:
                    folder = tmp / name
                    folder.mkdir()
                    env = {"PYTHONPATH": str(Path(args.today).resolve())} if name == "today" else {}
                    env["PYTHONSAFEPATH"] = "1"
                    settings = f'[daemon]\nstate_dir = "{folder / "state"}"\n' + (
                        "interval = 3600\n" if name == "quiet" else ""
                    )
                    daemon = Rigmon(folder, recording, settings, env=env, port=port)
                    daemon.wait_ready()
                    procs.append(daemon)
                servers[name] = port
            pids = {
                name: (proc.proc if isinstance(proc, Rigmon) else proc).pid
                for name, proc in zip(servers, procs, strict=True)
            }
            if pin:
                for pid in pids.values():
                    os.sched_setaffinity(pid, pin[1])
            time.sleep(1.0)
            rounds: dict[tuple, list[dict]] = {}
            for round_ in range(args.rounds):  # rounds interleaved: a disturbance hits every server alike
                # the servers side by side at each level, in the opposite order every other round:
                # a steady drift of the machine's speed favours none of them
                order = list(servers.items())[:: -1 if round_ % 2 else 1]
                for mode in modes:
                    for n in levels:
                        for name, port in order:
                            with only(pids, name):
                                cpu = cpu_seconds(pids[name])
                                got = load(port, mode, n, args.seconds, wrk_script, pin)
                                cpu = cpu_seconds(pids[name]) - cpu  # the server's CPU while it served them
                                got["cpu_per_scrape_us"] = (
                                    round(cpu / got["scrapes"] * 1e6, 2) if got["scrapes"] else None
                                )
                                rounds.setdefault((name, mode, n), []).append(got)
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
    for mode in modes:
        for n in levels:
            r, q, f, c = (results[name][mode][n] for name in ("rigmon", "quiet", "floor", "control"))
            over = {
                name: _over(rounds[(name, mode, n)], rounds[("floor", mode, n)])
                for name in ("rigmon", "quiet", "control")
            }
            cpu = {
                name: _over(rounds[(name, mode, n)], rounds[("floor", mode, n)], "cpu_per_scrape_us", 3)
                for name in ("rigmon", "quiet", "control")
            }
            row = {
                "rigmon_per_s": r["per_second"],
                "floor_per_s": f["per_second"],
                "rigmon_p99_ms": r["p99_ms"],
                "floor_p99_ms": f["p99_ms"],
                "p99_over_floor": over["rigmon"]["median"],
                "p99_over_floor_range": over["rigmon"],
                "rigmon_p999_ms": r["p999_ms"],
                "floor_p999_ms": f["p999_ms"],
                "quiet_per_s": q["per_second"],
                "quiet_p99_ms": q["p99_ms"],
                "quiet_p99_over_floor": over["quiet"]["median"],
                "control_p99_over_floor": over["control"]["median"],
                "control_p99_over_floor_range": over["control"],
                "failed": r["failed"] + q["failed"] + f["failed"] + c["failed"],
                # the server's CPU per scrape over the floor's (the median of each round's ratio):
                # quiet is rigmon's HTTP stack alone, rigmon the same with its polls
                "quiet_cpu_per_scrape_us": q["cpu_per_scrape_us"],
                "floor_cpu_per_scrape_us": f["cpu_per_scrape_us"],
                **{f"{name}_cpu_per_scrape_over_floor": cpu[name]["median"] for name in ("quiet", "rigmon", "control")},
                **{f"{name}_cpu_over_floor_range": cpu[name] for name in ("quiet", "rigmon", "control")},
            }
            if "today" in results:
                t = results["today"][mode][n]
                row.update(
                    today_per_s=t["per_second"],
                    today_p99_ms=t["p99_ms"],
                    throughput_over_today=round(r["per_second"] / t["per_second"], 2) if t["per_second"] else None,
                    cpu_per_scrape_over_today=_over(
                        rounds[("rigmon", mode, n)], rounds[("today", mode, n)], "cpu_per_scrape_us", 3
                    )["median"],
                    failed=row["failed"] + t["failed"],
                )
            summary[f"{mode} x{n}"] = row
    if args.json:
        print(
            json.dumps(
                {
                    "client": args.client,
                    "cpus": {"load": sorted(pin[0]), "servers": sorted(pin[1])} if pin else None,
                    "summary": summary,
                    "detail": results,
                },
                indent=2,
            )
        )
    else:
        where = f"; load on CPU {sorted(pin[0])}, servers on {sorted(pin[1])}" if pin else ""
        print(f"client: {args.client}{where}")
        for key, row in summary.items():
            print(f"{key:>14}: " + ", ".join(f"{k} {v}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONSAFEPATH", "1")
    raise SystemExit(main())
