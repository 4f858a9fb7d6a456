"""Everything rigmon exports for a replayed recording, tick by tick, for diffing two versions.

Replays a recording at a fixed clock (no wall time, no timing metrics) through the daemon's
sinks and writes, per tick, the /metrics exposition and the InfluxDB line protocol. Run it on
two versions of rigmon and ``diff -r`` the two folders: any difference is a renamed or
changed series.

    python tests/bench/outputs.py OUT_DIR [--ticks N]
    python tests/bench/outputs.py --compare OLD_DIR NEW_DIR [--except NAME,...]

The comparison takes the expositions byte for byte and the InfluxDB points as points (the
same measurement, tags, fields and time; the order of fields within a line is no part of a
point).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

import compat  # noqa: E402
import scenarios as sc  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402

from rigmon.config import schema as configmod  # noqa: E402
from rigmon.model.recording import Recording  # noqa: E402
from rigmon.sinks import lineprotocol  # noqa: E402

TIMING = re.compile(
    rb"^(# (HELP|TYPE) )?rigmon_(poll_duration_seconds|last_poll_timestamp_seconds|"
    rb"reader_duration_seconds|build_info)\b.*\n",
    re.M,
)
EPOCH = 1_780_000_000.0


def scenarios() -> dict[str, Recording]:
    try:
        from rigmon.model.recording import demo_path
    except ImportError:  # before 0.2
        from rigmon.cli import demo_path
    base = sc.h200()
    return {
        "demo": Recording.load(demo_path()),
        "rich8": sc.rich(base, gpus=8),
        "old8": sc.pre_ampere(sc.gpu_fans(sc.rich(base, gpus=8))),
        "lost2": sc.gpu_lost(base, gpus=2, lost=1, from_second=20.0),
    }


def dump(name: str, recording: Recording, out: Path, ticks: int) -> None:
    settings = {"influxdb": {"enabled": False}, "prometheus": {"enabled": False}}
    if "jobs" in configmod.Config.model_fields:  # 0.2 on: the ledger writes state; not what is compared here
        settings["jobs"] = {"enabled": False}
    config = configmod.parse(settings, "outputs")
    source = sc.source(recording, loop=True)
    clock = source.clock
    daemon, registry = compat.daemon_for(config, source, wall=lambda: EPOCH + clock(), event_thread=False)
    step = recording.duration / ticks
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(ticks):
        clock.set(n * step)
        sample = daemon.poll_once()
        (folder / f"{n:03d}.prom").write_bytes(TIMING.sub(b"", generate_latest(registry)))
        lines = lineprotocol.encode(sample, "box", with_info=n == 0)
        (folder / f"{n:03d}.lp").write_text("\n".join(lines) + "\n")
    compat.close(daemon)


def _points(text: str, skip: set[str]) -> list[tuple]:
    out = []
    for raw in text.splitlines():
        head, fields, ns = re.match(r"^((?:[^ \\]|\\.)+) (.*) (\d+)$", raw).groups()
        parts = re.split(r'(?<!\\),(?=(?:[^"]*"[^"]*")*[^"]*$)', fields)
        out.append((head, tuple(sorted(p for p in parts if p.split("=", 1)[0] not in skip)), ns))
    return sorted(out)


def _exposition(data: bytes, skip: set[str]) -> bytes:
    if not skip:
        return data
    pattern = re.compile(rb"^(# (HELP|TYPE) )?(" + b"|".join(re.escape(s.encode()) for s in skip) + rb")\b.*\n", re.M)
    return pattern.sub(b"", data)


def compare(old: Path, new: Path, skip: set[str] = frozenset()) -> int:
    """Old against new; ``skip``: metric families and InfluxDB fields new on purpose."""
    counts = {"prom_same": 0, "prom_differ": 0, "lp_bytes_same": 0, "lp_points_same": 0, "lp_differ": 0}
    for a in sorted(old.rglob("*.prom")) + sorted(old.rglob("*.lp")):
        b = new / a.relative_to(old)
        if a.suffix == ".prom":
            same = _exposition(a.read_bytes(), skip) == _exposition(b.read_bytes(), skip)
            counts["prom_same" if same else "prom_differ"] += 1
            if not same and counts["prom_differ"] == 1:
                print(f"first differing exposition: {b}")
        elif a.read_bytes() == b.read_bytes():
            counts["lp_bytes_same"] += 1
        elif _points(a.read_text(), skip) == _points(b.read_text(), skip):
            counts["lp_points_same"] += 1
        else:
            counts["lp_differ"] += 1
            if counts["lp_differ"] == 1:
                print(f"first differing points: {b}")
    print(", ".join(f"{k}: {v}" for k, v in counts.items()))
    return 1 if counts["prom_differ"] or counts["lp_differ"] else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, nargs="+")
    p.add_argument("--ticks", type=int, default=40)
    p.add_argument("--compare", action="store_true", help="compare two folders this script wrote")
    p.add_argument(
        "--except",
        dest="skip",
        default="",
        metavar="NAMES",
        help="with --compare: metric families and fields added on purpose, comma-separated",
    )
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.out, skip={n for n in args.skip.split(",") if n})
    args.out = args.out[0]
    for name, recording in scenarios().items():
        dump(name, recording, args.out, args.ticks)
        print(f"{name}: {args.ticks} ticks of {recording.gpu_count} GPU(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
