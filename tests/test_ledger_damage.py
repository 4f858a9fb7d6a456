"""The jobs ledger is a file, and a file can be damaged: the daemon sets it aside and goes on,
``rigmon jobs`` answers in one line, and a large ledger is read only as far as it is printed."""

from __future__ import annotations

import json
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import scenarios as sc

from rigmon.config import schema as configmod
from rigmon.config.box import Box
from rigmon.sinks.jobs import _COLUMNS, Job, JobLedger, _row, connect


def _ledger(path: Path, jobs: int = 3) -> None:
    db = connect(path)
    with db:
        for n in range(jobs):
            job = Job(
                0,
                f"pgid:{100 + n}",
                "alice",
                "python train.py",
                None,
                1000.0 + n,
                1060.0 + n,
                ended=1060.0 + n,
                gpus={0},
                gpu_seconds=60.0,
                energy_joules=42000.0,
            )
            db.execute(f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})", _row(job))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def _zero_a_page(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[4096:8192] = bytes(4096)
    path.write_bytes(bytes(data))


def _sql(statement: str):
    def damage(path: Path) -> None:
        db = sqlite3.connect(path)
        with db:
            db.execute(statement)
        db.close()

    return damage


DAMAGE = {
    "zeroed page": _zero_a_page,
    "gpus not JSON": _sql("UPDATE jobs SET gpus = '{not json' WHERE id = 1"),
    "alerts an object": _sql("UPDATE jobs SET alerts = '{\"a\": 1}', gpus = '[\"x\", true, 2]' WHERE id = 2"),
    "text where numbers go": _sql("UPDATE jobs SET started = 'yesterday', energy_joules = x'00ff' WHERE id = 3"),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:5000]),
    "not a database": lambda p: p.write_bytes(b"this is not SQLite\n" * 400),
    "columns missing": lambda p: (
        p.unlink(),
        _sql("CREATE TABLE jobs (id INTEGER PRIMARY KEY, key TEXT)")(p),
        _sql("INSERT INTO jobs (key) VALUES ('pgid:1')")(p),
    ),
    "escape sequences": _sql("UPDATE jobs SET key = 'pgid:1\x1b]52;c;eA==\x07', user = 'a\nb' WHERE id = 1"),
}


def rigmon_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rigmon", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_ledger_never_stops_the_daemon_or_the_cli(kind, tmp_path, caplog):
    state = tmp_path / "state"
    state.mkdir()
    path = state / "jobs.sqlite"
    _ledger(path)
    DAMAGE[kind](path)
    config_file = tmp_path / "rigmon.toml"
    config_file.write_text(f'[daemon]\nstate_dir = "{state}"\n')
    for args in (["jobs"], ["jobs", "--json"], ["jobs", "show", "1"], ["jobs", "--limit", "1"]):
        done = rigmon_cli(*args, "--config", str(config_file))
        assert "Traceback" not in done.stderr, (kind, args, done.stderr)
        assert done.returncode in (0, 2), (kind, args, done.returncode)
        if done.returncode == 2:
            # one message says what is wrong (going on under itself past COLUMNS)
            assert sum(not line.startswith(" ") for line in done.stderr.strip().splitlines()) == 1, done.stderr
        assert "\x1b" not in done.stdout + done.stderr
        if args[-1] == "--json" and done.returncode == 0:
            json.loads(done.stdout)
    # the daemon's ledger opens it, books a job on it, and closes
    config = configmod.parse({"daemon": {"state_dir": str(state)}, "prometheus": {"enabled": False}})
    ledger = JobLedger(config.jobs, Box.of(config, "box"))
    sample = _sample_with_a_process()
    ledger.book(sample)
    ledger.close()
    after = rigmon_cli("jobs", "--json", "--config", str(config_file))
    assert after.returncode == 0 and "Traceback" not in after.stderr, after.stderr
    keys = [j["job"] for j in json.loads(after.stdout)["jobs"]]
    assert "bob/pgid:4242" in keys
    aside = [p for p in state.glob("jobs.sqlite.damaged-*") if not p.name.endswith(("-wal", "-shm"))]
    said = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    if kind in ("zeroed page", "truncated", "not a database", "columns missing"):
        assert len(aside) == 1 and len(said) == 1, (kind, aside, said)
    else:  # the file is whole; the damaged rows read as what can be read of them
        assert not aside and not said


def _sample_with_a_process():
    from rigmon.poller import build_poller

    rec = sc.on_every_gpu(sc.h200(), nvmlDeviceGetComputeRunningProcesses=[{"pid": 4242, "usedGpuMemory": 1 << 30}])
    rec = sc.with_host(
        rec,
        processes={
            "4242": {
                "user": "bob",
                "uid": 1000,
                "cmdline": "python x.py",
                "cgroup": "",
                "ppid": 1,
                "pgid": 4242,
                "start": 1.0,
            }
        },
    )
    config = configmod.parse({"gpu": {"xid_events": False}, "host": {"rapl": False}})
    poller = build_poller(config, sc.source(rec, sc.LOAD_AT), event_thread=False)
    poller.open()
    try:
        return poller.poll()
    finally:
        poller.close()


@pytest.mark.slow
def test_jobs_limit_reads_only_what_it_prints(tmp_path):
    """400,000 jobs (years of a busy shared box): --limit 5 is quick and small."""
    state = tmp_path / "state"
    state.mkdir()
    db = connect(state / "jobs.sqlite")
    row = _row(
        Job(
            0,
            "pgid:1",
            "alice",
            "python train.py",
            None,
            0.0,
            60.0,
            ended=60.0,
            gpus={0, 1},
            gpu_seconds=120.0,
            energy_joules=1e5,
        )
    )
    with db:
        db.executemany(
            f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
            ((f"pgid:{n}", *row[1:4], float(n), float(n) + 60, float(n) + 60, *row[7:]) for n in range(400_000)),
        )
    db.close()
    (tmp_path / "rigmon.toml").write_text(f'[daemon]\nstate_dir = "{state}"\n')
    probe = (
        f"import resource, subprocess, sys, time\nt = time.perf_counter()\n"
        f"p = subprocess.run([sys.executable, '-m', 'rigmon', 'jobs', '--limit', '5', '--config', "
        f"{str(tmp_path / 'rigmon.toml')!r}], capture_output=True, text=True)\n"
        f"print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)\n"
        f"print(p.stdout)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    first, *rest = done.stdout.splitlines()
    seconds, max_rss_kib, code = first.split()
    print(f"rigmon jobs --limit 5 on 400,000 jobs: {float(seconds):.2f} s, {int(max_rss_kib) / 1024:.0f} MiB peak")
    assert code == "0"
    assert len([line for line in rest if "alice" in line]) == 5 and "pgid:399999" in rest[1]
    assert int(max_rss_kib) < 120 * 1024
    assert resource  # the probe reads the child's peak memory


def test_finished_jobs_leave_the_ledger_after_jobs_keep_and_keep_their_energy(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    _ledger(state / "jobs.sqlite", jobs=3)  # ended around t=1060
    config = configmod.parse(
        {"daemon": {"state_dir": str(state)}, "prometheus": {"enabled": False}, "jobs": {"keep": "7d"}}
    )
    assert config.jobs.keep == 7 * 86400
    ledger = JobLedger(config.jobs, Box.of(config, "box"))
    before = {
        m.samples[0].labels["user"]: m.samples[0].value
        for m in ledger.collect()
        if m.name == "rigmon_job_energy_joules"
    }
    sample = _sample_with_a_process()._replace(time=1060.0 + 8 * 86400)
    ledger.book(sample)
    ledger.close()
    db = sqlite3.connect(state / "jobs.sqlite")
    users = [r[0] for r in db.execute("SELECT user FROM jobs")]
    db.close()
    assert users == ["bob"]  # alice's three old jobs are gone, bob's running one stays
    ledger = JobLedger(config.jobs, Box.of(config, "box"))
    after = {
        s.labels["user"]: s.value for m in ledger.collect() if m.name == "rigmon_job_energy_joules" for s in m.samples
    }
    ledger.close()
    assert before["alice"] == after["alice"] == 3 * 42000.0
    assert time  # durations in days and weeks parse
    assert configmod.parse({"jobs": {"keep": "2w"}}).jobs.keep == 14 * 86400


def test_a_ledger_from_before_held_time_and_estimated_energy_gains_them(tmp_path):
    """A ledger written before the jobs table had held_seconds, energy_estimated and busy_by_gpu:
    read as it is, then given the columns (no job lost) when the daemon opens it."""
    import sqlite3

    from rigmon.sinks import jobs as ledger

    path = tmp_path / "state" / "jobs.sqlite"
    path.parent.mkdir()
    old = [c for c in _COLUMNS if c not in ("held_seconds", "energy_estimated", "busy_by_gpu")]
    db = sqlite3.connect(path)
    db.execute(f"CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, {', '.join(old)})")
    db.execute(
        f"INSERT INTO jobs ({', '.join(old)}) VALUES ({', '.join('?' * len(old))})",
        (
            "pgid:7",
            "ada",
            "python t.py",
            None,
            10.0,
            70.0,
            70.0,
            None,
            "[0]",
            60.0,
            4200.0,
            0,
            0,
            0,
            0,
            0,
            0,
            None,
            "[]",
        ),
    )
    db.commit()
    db.close()
    (job,) = ledger.load(path)
    assert job.key == "pgid:7" and job.held_seconds == 0.0 and job.energy_estimated is False and job.busy_by_gpu == {}
    config = configmod.parse({"daemon": {"state_dir": str(path.parent)}})
    JobLedger(config.jobs, Box.of(config)).close()
    (job,) = ledger.load(path)
    assert job.energy_joules == 4200.0
    assert {"held_seconds", "energy_estimated", "busy_by_gpu"} <= {
        r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(jobs)")
    }
