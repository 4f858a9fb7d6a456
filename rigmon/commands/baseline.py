"""``rigmon baseline show`` and ``rigmon baseline reset [--gpu N]``: the cooling baselines the
daemon keeps in ``<state_dir>/cooling.json`` (``rigmon.readers.cooling``)."""

from __future__ import annotations

import json
import sys

from ..model import args as argtypes
from ..model.durations import format_duration
from ..model.text import PIPE_WIDTH, fit, printable, terminal_width
from .common import UsageError, add_config, load_config

UNITS = {"gpus": ("W", 1.0, "°C"), "cpus": ("% busy", 100.0, "°C"), "fans": ("% duty", 100.0, "rpm")}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "baseline",
        help="how each GPU, CPU and fan cools against its own past: the baselines, and reset after a repair",
    )
    actions = p.add_subparsers(dest="baseline_command", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="each subject's baseline and its drift from it")
    add_config(show)
    show.add_argument("--json", action="store_true", help="print them as JSON")
    show.add_argument(
        "--replay", metavar="FILE", help="the baselines a recording teaches, learned as the daemon would from it"
    )
    show.add_argument(
        "--at",
        type=argtypes.non_negative,
        metavar="SECONDS",
        help="with --replay: up to this far into it (default: all)",
    )
    reset = actions.add_parser(
        "reset", help="forget a baseline (after a repaste, a cleaning or a move): it learns afresh"
    )
    add_config(reset)
    reset.add_argument("--gpu", type=argtypes.gpu_index, metavar="N", help="only GPU N's (default: every one)")
    p.set_defaults(func=cmd_baseline)


def _config(args):
    config = load_config(args)
    if not config.cooling.enabled:
        raise UsageError("the cooling baselines are off in this config ([cooling] enabled = false)")
    return config


def _path(args):
    from ..readers.cooling import baselines_path

    config = _config(args)
    return config, baselines_path(config.daemon.state_dir)


def _read(path):
    from ..readers.cooling import read_file

    data = read_file(path)
    if data is None:
        raise UsageError(f"no cooling baseline in {path} yet (the daemon learns them while it runs: rigmon run)")
    return data


def _replayed(args, config) -> tuple[str, dict]:
    """The baselines a recording teaches up to --at, as the daemon's detector learns them."""
    from ..model.recording import Recording, RecordingError
    from ..offline import replay_rules

    try:
        recording = Recording.load(args.replay)
    except (OSError, RecordingError) as e:
        raise UsageError(f"{args.replay}: {e}") from None
    kept: dict = {}
    replay_rules(recording, config, until=args.at, kept=kept)
    if not kept.get("cooling"):
        raise UsageError(f"{args.replay}: no tick to learn from")
    return f"{args.replay} (a replay)", json.loads(json.dumps(kept["cooling"]))  # as the file would hold them


def cmd_baseline(args) -> int:
    if getattr(args, "replay", None):
        if args.baseline_command != "show":
            raise UsageError("a replay's baselines are shown, never reset")
        config = _config(args)
        path, data = _replayed(args, config)
    else:
        config, path = _path(args)
        data = _read(path)
    if args.baseline_command == "reset":
        return _reset(path, data, args.gpu)
    rows = _rows(config, data)
    if args.json:
        print(json.dumps({"file": str(path), "reference": data.get("reference"), "subjects": rows}, indent=2))
        return 0
    width = terminal_width() or PIPE_WIDTH
    reference = {"inlet": "an inlet sensor", "idle": "the GPUs idle", "none": "none (absolute)"}
    print(fit(f"{path}: the room taken from {reference.get(data.get('reference'), 'nothing yet')}", width))
    for row in rows:
        print(fit(_line(row), width, hang=4))
    return 0


def _rows(config, data) -> list[dict]:
    """Each kept subject, its baseline and its drift at its last poll, then each GPU's last
    passing burn-in (what its baseline is held to), as plain data."""
    from ..readers.cooling import PARTS, WIDTHS, Track, judged

    c = config.cooling
    widths = {"gpus": c.band_watts, **WIDTHS}
    burnin = data.get("burnin") if isinstance(data.get("burnin"), dict) else {}
    rows = []
    for part, kept in [*((p, data[p]) for p in PARTS), ("burnin", burnin)]:
        kind, width = PARTS.get(part, "burn-in"), widths.get(part, c.band_watts)
        unit, scale, _ = UNITS.get(part, UNITS["gpus"])
        for key, plain in kept.items():
            track = Track.from_plain(width, c.learn, c.window, plain)
            if track is None:
                rows.append({"kind": kind, "subject": printable(key)[:80], "state": "damaged"})
                continue
            bands = [
                {
                    "load": round(band * width * scale, 1),
                    "load_unit": unit,
                    "seconds": round(cell[0]),
                    "value": round(cell[1] / cell[0], 2),
                }
                for band, cell in sorted(track.bands.items())
            ]
            if part == "burnin":
                rows.append(
                    {
                        "kind": kind,
                        "subject": printable(key)[:80],
                        "gpu": track.index,
                        "state": "burn-in",
                        "bands": bands,
                        "drift": None,
                        "at": None,
                    }
                )
                continue
            drift = judged(part, track, track.last, key) if track.last is not None else None
            rows.append(
                {
                    "kind": kind,
                    "subject": printable(key)[:80],
                    "gpu": track.index if part == "gpus" else None,
                    "state": drift.state if drift is not None else "learning",
                    "learning_seconds": drift.learning_seconds if drift is not None else c.learn,
                    "bands": bands,
                    "drift": round(drift.drift, 3) if drift is not None and drift.drift is not None else None,
                    "at": round(drift.load * scale, 1) if drift is not None and drift.load is not None else None,
                }
            )
    return rows


def _line(row: dict) -> str:
    kind = row["kind"]
    who = f"GPU {row['gpu']}" if row.get("gpu") is not None else kind
    head = f"{who} {row['subject']}: {row['state']}"
    if row["state"] == "damaged":
        return head + " (it learns afresh)"
    if row["state"] == "learning":
        head += f", {format_duration(row['learning_seconds'])} left"
    unit = "rpm" if kind == "fan" else "°C over the room"
    bands = ", ".join(f"{b['load']:g} {b['load_unit']}: {b['value']:.1f} {unit}" for b in row["bands"])
    if bands:
        head += f"; {'seen' if kind == 'burn-in' else 'baseline'} {bands}"
    drift = row["drift"]
    if drift is not None:
        at = f" at {row['at']:g} {row['bands'][0]['load_unit']}" if row["bands"] and row["at"] is not None else ""
        head += f"; now {drift:+.0%}{at}" if kind == "fan" else f"; now {drift:+.1f} °C{at}"
    return head


def _reset(path, data, gpu: int | None) -> int:
    from ..readers.cooling import PARTS, write_file

    if gpu is None:
        for part in PARTS:
            data[part] = {}
        gone = "every baseline"
    else:
        indices = {k: v.get("index") for k, v in data["gpus"].items() if isinstance(v, dict)}
        found = [k for k, index in indices.items() if index == gpu]
        if not found:
            known = ", ".join(str(i) for i in sorted(i for i in indices.values() if isinstance(i, int))) or "none"
            raise UsageError(f"no baseline for GPU {gpu} in {path} (GPUs with one: {known})")
        for key in found:
            del data["gpus"][key]
        gone = f"GPU {gpu}'s baseline"
    try:
        write_file(path, data)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    print(
        f"{gone} forgotten: it learns afresh from its next steady load (the running daemon takes it at its next save)"
    )
    sys.stdout.flush()
    return 0
