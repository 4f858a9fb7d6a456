"""What rigmon costs where a user feels it, against an earlier rigmon and against its peers, each
ratio beside its budget. ``--before DIR`` is a checkout of the earlier rigmon (``git worktree
add /tmp/before 6ee5be6``); "now" is this checkout; both run from their source on this
virtual environment's Python. The peers (nvitop, nvitop-exporter) run from ``--peers VENV`` (a
virtual environment with ``pip install nvitop-exporter``), their pynvml answering from the same
widened recording as rigmon's ``--demo --replay-gpus 8`` (``nvitop_replay/``). Every figure is
measured for each side in every round, the sides' order turned each round; min / median / max
over the rounds; each ratio is of the medians. The figures:

- ``rigmon status --demo --replay-gpus 8``, wall (its CPU is its wall), and ``nvitop -1``, each
  the median of STATUS_RUNS in a round (after one status a side: the config's cache, as a box has it);
- the idle daemon, started on its defaults with the page: start to its first /metrics answer
  (restarted on the config it ran on before, as a box restarts it; and its first start on
  that config, validated afresh), its RSS after ``--seconds``, its CPU over that time past its
  first 5 s; and nvitop-exporter's;
- the same daemon started with a week of history and a ledger of 100,000 jobs in its state;
- the page's first render in headless Chromium and Chromium's CPU with it settled;
- ``rigmon rules test --replay`` over two weeks of 4 GPUs (a tick every 5 minutes, the
  cooling baselines on), CPU, the median of RULES_RUNS in a round;
- ``rigmon jobs --all --json`` over the 100,000 jobs, CPU, and a bare sqlite-and-json dump of
  the same rows (the floor).

    python tests/bench/bench_footprint.py --before /tmp/before [--peers /tmp/peers] [--rounds 3]
        [--seconds 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent)]

from bench_memory import rss_mib  # noqa: E402
from bench_page import render  # noqa: E402
from bench_scrape import cpu_seconds  # noqa: E402
from browser import Chromium  # noqa: E402
from servers import free_port  # noqa: E402

HOOK = HERE / "nvitop_replay"
JOBS = 100_000
STATUS_RUNS = 5  # status and nvitop -1, each round: the round's figure is their median
RULES_RUNS = 3  # rules test, each round: the same
# figure: (what it is compared with, the budget for the ratio of the medians)
BUDGETS = {
    "status_ms": ("peer", 0.85),
    "rss_mib": ("peer", 1.0),
    "idle_cpu_pct": ("peer", 1.0),
    "first_answer_ms": ("peer", 1.5),  # a restart: the config as the start before validated it
    "new_config_first_answer_ms": ("peer", None),  # the first start on a new or changed config
    "week_rss_mib": ("peer_rss_mib", 1.15),
    "week_first_answer_ms": ("first_answer_ms", 1.2),  # over itself fresh
    "render_ms": ("before", 1.0),
    "page_cpu_pct": ("before", 1.0),
    "rules_test_s": ("before", 1.05),
    "jobs_json_s": ("floor", 1.5),
}

LEDGER = """
import json, random, sqlite3, sys
try:
    from rigmon.sinks.jobs import SCHEMA
except ImportError:
    from rigmon.jobs import SCHEMA
db = sqlite3.connect(sys.argv[1])
db.executescript(SCHEMA)
rng, t = random.Random(7), 1.7e9
rows = []
for n in range(int(sys.argv[2])):
    t += rng.uniform(60, 600)
    gpus = sorted(rng.sample(range(8), rng.choice((1, 2, 4, 8))))
    held = rng.uniform(60, 36000)
    rows.append((f"user{n % 40}/pgid:{1000 + n}", f"user{n % 40}", "python train.py", f"pgid:{1000 + n}", t,
                 t + held, t + held, json.dumps(gpus), held * len(gpus), held, 300.0 * held * len(gpus)))
db.executemany("INSERT INTO jobs (key, user, command, unit, started, last_seen, ended, gpus, gpu_seconds, "
               "held_seconds, energy_joules) VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
db.commit()
"""

FLOOR = """
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.row_factory = sqlite3.Row
json.dump({"jobs": [dict(r) for r in db.execute("SELECT * FROM jobs ORDER BY started DESC, id DESC")]}, sys.stdout)
"""


CACHES = Path(tempfile.mkdtemp(prefix="footprint-cache-"))


def env_of(side: Path | None, **extra: str) -> dict:
    """Each rigmon its own cache of validated configs: two rigmons taking turns would each find
    the other's there and validate afresh every time, which neither does on a box."""
    own = {"PYTHONPATH": str(side), "XDG_CACHE_HOME": str(CACHES / str(abs(hash(side))))} if side else {}
    return {**os.environ, "PYTHONSAFEPATH": "1", **own, **extra}


def cpu_of(argv: list[str], env: dict) -> float:
    """The CPU seconds (user and system) a command takes to its end."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv}: exit {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def wall_ms(argv: list[str], env: dict) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - started) * 1000


def answered(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return r.status == 200 and bool(r.read())
    except OSError:
        return False


class Daemon:
    """One exporter started: how long to its first answer; its RSS and CPU once idle."""

    def __init__(self, argv: list[str], env: dict, port: int):
        self.port = port
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not answered(port):
            if self.proc.poll() is not None or time.perf_counter() - self.started > 60:
                raise RuntimeError(f"{argv}: no answer on {port}")
            time.sleep(0.005)
        self.first_answer_ms = (time.perf_counter() - self.started) * 1000
        self.new_config_ms: float | None = None
        self.cpu_at_5 = None

    def mark(self) -> None:
        self.cpu_at_5, self.marked = cpu_seconds(self.proc.pid), time.perf_counter()

    def idle(self) -> tuple[float, float]:
        """RSS MiB now; CPU % of a core since ``mark``."""
        cpu = (cpu_seconds(self.proc.pid) - self.cpu_at_5) / (time.perf_counter() - self.marked) * 100
        return rss_mib(self.proc.pid), cpu

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def rigmon_daemon(side: Path, tmp: Path, name: str, state: Path | None = None) -> Daemon:
    """``side``'s demo daemon on a config of its own, restarted: started once on the new config
    (its first answer kept as ``new_config_ms``) and stopped, then started again, as a box
    restarts it (a boot, ``systemctl restart``) on the config it ran before."""
    port = free_port()
    config = tmp / f"{name}.toml"
    config.write_text(
        f'[daemon]\nstate_dir = "{state or tmp / (name + "-state")}"\n'
        f'[prometheus]\nlisten = "127.0.0.1"\nport = {port}\n'
    )
    argv = [sys.executable, "-m", "rigmon", "run", "--demo", "--replay-gpus", "8", "-c", str(config)]
    first = Daemon(argv, env_of(side), port)
    first.stop()
    again = Daemon(argv, env_of(side), port)
    again.new_config_ms = first.first_answer_ms
    return again


def peer_env(peers: Path) -> dict:
    from rigmon.model.recording import demo_path

    return env_of(None, PYTHONPATH=f"{HOOK}:{ROOT}", RIGMON_REPLAY=str(demo_path()), RIGMON_REPLAY_GPUS="8")


def week_state(side: Path, tmp: Path, name: str, week: Path) -> Path:
    """A state directory where ``side``'s demo daemon loads a week of history and the ledger of
    100,000 jobs: found by starting it once (a replay keeps its state where its rigmon keeps it)."""
    state = tmp / f"{name}-week"
    first = rigmon_daemon(side, tmp, name + "-setup", state)
    first.stop()
    (saved,) = state.rglob("history.bin")
    shutil.copyfile(week, saved)
    subprocess.run(
        [sys.executable, "-c", LEDGER, str(saved.parent / "jobs.sqlite"), str(JOBS)], env=env_of(side), check=True
    )
    return state


def spread(values: list[float]) -> dict:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, type=Path, help="a checkout of the earlier rigmon")
    p.add_argument("--peers", type=Path, default=Path("/tmp/peers"), help="a venv with nvitop-exporter")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=30.0, help="how long an idle daemon runs before its RSS")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    before, now = args.before.resolve(), ROOT
    for side in (now, before):  # each side's bytecode, as pip leaves an installed rigmon's
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(side / "rigmon")], stdout=subprocess.DEVNULL)
    peers = args.peers / "bin"
    have_peers = (peers / "nvitop-exporter").exists()
    tmp = Path(tempfile.mkdtemp(prefix="footprint-"))
    load = [os.getloadavg()[0]]
    import scenarios as sc
    from week import write_week

    from rigmon.model.recording import Recording, demo_path

    week = tmp / "week.bin"
    write_week(week, Recording.load(demo_path()).widened(8, shared=True), {}, replay=True)  # as --demo keeps it
    states = {side: week_state(side, tmp, name, week) for name, side in (("now", now), ("before", before))}
    ledgers = {}
    for name, side in (("now", now), ("before", before)):
        (tmp / f"{name}-jobs").mkdir()
        ledgers[side] = tmp / f"{name}-jobs" / "jobs.sqlite"
        subprocess.run([sys.executable, "-c", LEDGER, str(ledgers[side]), str(JOBS)], env=env_of(side), check=True)
        (tmp / f"{name}-jobs.toml").write_text(f'[daemon]\nstate_dir = "{ledgers[side].parent}"\n')
    every_job = {}  # an earlier rigmon says "all" as --limit 0
    for side in (now, before):
        said = subprocess.run([sys.executable, "-m", "rigmon", "jobs", "--help"], env=env_of(side), capture_output=True)
        every_job[side] = ["--all"] if b"--all" in said.stdout else ["--limit", "0"]
    recording = sc.write(sc.cooling_days(14, gpus=4, step=300), tmp / "two-weeks.rec.jsonl")

    runs: dict[str, dict[str, list[float]]] = {}

    def put(side: str, figure: str, value: float) -> None:
        runs.setdefault(figure, {}).setdefault(side, []).append(value)

    sides = [("now", now), ("before", before)]
    status = ["-m", "rigmon", "status", "--demo", "--replay-gpus", "8"]
    for _, side in sides:  # a box's one-shot commands find the config validated by the first
        wall_ms([sys.executable, *status], env_of(side))
    for n in range(args.rounds):
        order = sides if n % 2 == 0 else sides[::-1]
        walls: dict[str, list[float]] = {}
        for _ in range(STATUS_RUNS):  # a one-shot command's wall moves by tens of ms: a round's median
            for name, side in order:
                walls.setdefault(name, []).append(wall_ms([sys.executable, *status], env_of(side)))
            if have_peers:
                nvitop = [str(peers / "python"), "-m", "nvitop", "-1"]
                walls.setdefault("peer", []).append(wall_ms(nvitop, peer_env(args.peers)))
        for name, values in walls.items():
            put(name, "status_ms", statistics.median(values))
        # the idle daemons, started one after another, then idle together
        daemons = {name: rigmon_daemon(side, tmp, f"{name}{n}") for name, side in order}
        if have_peers:
            port = free_port()
            exporter = [str(peers / "nvitop-exporter"), "--bind-address", "127.0.0.1", "--port", str(port)]
            daemons["peer"] = Daemon(exporter, peer_env(args.peers), port)
        try:
            time.sleep(5)
            for d in daemons.values():
                d.mark()
            time.sleep(max(0.0, args.seconds - 5))
            for name, d in daemons.items():
                rss, cpu = d.idle()
                put(name, "first_answer_ms", d.first_answer_ms)
                if d.new_config_ms is not None:
                    put(name, "new_config_first_answer_ms", d.new_config_ms)
                put(name, "rss_mib", rss)
                put(name, "idle_cpu_pct", cpu)
        finally:
            for d in daemons.values():
                d.stop()
        for name, side in order:  # with a week of history and 100,000 jobs
            d = rigmon_daemon(side, tmp, f"{name}-week{n}", states[side])
            try:
                time.sleep(min(args.seconds, 10))
                put(name, "week_first_answer_ms", d.first_answer_ms)
                put(name, "week_rss_mib", rss_mib(d.proc.pid))
            finally:
                d.stop()
        for name, side in order:  # the page
            d = rigmon_daemon(side, tmp, f"{name}-page{n}")
            browser = Chromium(tmp / f"chromium-{name}{n}")
            try:
                first, _, settled = render(browser, f"http://127.0.0.1:{d.port}/")
                put(name, "render_ms", first)
                put(name, "page_cpu_pct", settled)
            finally:
                browser.close()
                d.stop()
        rules = [sys.executable, "-m", "rigmon", "rules", "test", "--replay", str(recording)]
        for name, side in order:
            put(name, "rules_test_s", statistics.median(cpu_of(rules, env_of(side)) for _ in range(RULES_RUNS)))
        for name, side in order:
            jobs = [
                sys.executable,
                "-m",
                "rigmon",
                "jobs",
                *every_job[side],
                "--json",
                "-c",
                str(tmp / f"{name}-jobs.toml"),
            ]
            put(name, "jobs_json_s", cpu_of(jobs, env_of(side)))
        put("floor", "jobs_json_s", cpu_of([sys.executable, "-c", FLOOR, str(ledgers[now])], env_of(None)))
        load.append(os.getloadavg()[0])
    shutil.rmtree(tmp, ignore_errors=True)

    result: dict = {
        "rounds": args.rounds,
        "seconds": args.seconds,
        "before": str(before),
        "load1": load,
        "cores": os.cpu_count(),
        "figures": {},
    }
    for figure, by_side in runs.items():
        medians = {side: statistics.median(v) for side, v in by_side.items()}
        against, budget = BUDGETS[figure]
        base = (
            statistics.median(runs["rss_mib"]["peer"])
            if against == "peer_rss_mib" and "peer" in runs["rss_mib"]
            else statistics.median(runs[against]["now"])
            if against in runs
            else medians.get(against)
        )
        ratio = medians["now"] / base if base else None
        result["figures"][figure] = {
            **{side: spread(v) for side, v in by_side.items()},
            "over_before": round(medians["now"] / medians["before"], 3),
            "against": against,
            "ratio": round(ratio, 3) if ratio is not None else None,
            "budget": budget,
            "within": None if budget is None else ratio is not None and ratio <= budget,
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    loads = ", ".join(f"{x:.2f}" for x in load)
    print(f"{args.rounds} interleaved rounds on {os.cpu_count()} cores, load average {loads} (at the start and after")
    print(f"each round); now = {ROOT}, before = {before}; min / median / max")
    for figure, f in result["figures"].items():
        sides_said = "; ".join(
            f"{side} {s['min']:g} / {s['median']:g} / {s['max']:g}" for side, s in f.items() if isinstance(s, dict)
        )
        verdict = (
            "no budget"
            if f["budget"] is None
            else "within"
            if f["within"]
            else "OVER"
            if f["ratio"] is not None
            else "no peer"
        )
        print(f"  {figure:<21} {sides_said}")
        print(
            f"  {'':<21} now/before {f['over_before']}×; now/{f['against']} {f['ratio']}× (budget "
            f"{f['budget']}×): {verdict}"
        )
    return 0 if all(f["within"] is not False for f in result["figures"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
