"""``rigmon jobs``: the ledger of jobs the daemon keeps, newest first; ``rigmon jobs show ID``."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time

from ..model import args as argtypes
from ..model.text import PIPE_WIDTH, fit, printable, printable_lines, terminal_width
from .common import UsageError, add_config, load_config


def add_parser(sub) -> None:
    p = sub.add_parser("jobs", help="the jobs that used the GPUs: GPU-hours, energy, cost, starved or not")
    add_config(p)
    p.add_argument("--json", action="store_true", help="print the jobs as JSON")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--limit", type=argtypes.at_least_one, default=50, metavar="N", help="the newest N jobs (50)")
    which.add_argument("--all", action="store_true", help="every job in the ledger (read a row at a time)")
    p.add_argument("--replay", metavar="FILE", help="the jobs rigmon run --replay FILE booked (a replay's own ledger)")
    actions = p.add_subparsers(dest="jobs_command", metavar="ACTION")
    show = actions.add_parser("show", help="one job in full")
    show.add_argument("id", type=int)
    # given before or after "show": the sub-parser must not reset what the parent parsed
    show.add_argument("--config", "-c", metavar="FILE", default=argparse.SUPPRESS, help="config file")
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print it as JSON")
    show.add_argument("--replay", metavar="FILE", default=argparse.SUPPRESS, help="a replay's ledger")
    p.set_defaults(func=cmd_jobs)
    show.set_defaults(func=cmd_jobs)


def cmd_jobs(args) -> int:
    from ..sinks import jobs as ledger

    config = load_config(args)
    state_dir = config.daemon.state_dir
    if getattr(args, "replay", None):  # where rigmon run --replay FILE keeps its state, never the box's
        from .run import replay_state_dir

        state_dir = replay_state_dir(state_dir, argparse.Namespace(demo=False, replay=args.replay))
    path = ledger.ledger_path(state_dir)
    price, currency = config.jobs.price_per_kwh, config.jobs.currency
    try:
        if getattr(args, "jobs_command", None) == "show":
            found = list(ledger.load(path, args.id))
            if not found:
                raise UsageError(f"no job #{args.id} in {path}")
            job = found[0].as_dict(price, currency)
            print(json.dumps(job, indent=2, allow_nan=False) if args.json else show(job, terminal_width()))
            return 0
        limit = 0 if args.all else args.limit
        if args.json:
            _stream_json(path, (j.as_dict(price, currency) for j in ledger.load(path, limit=limit)))
            return 0
        # a row at a time, twice (the columns' widths, then the lines): any number of jobs in
        # the memory of one
        rows = lambda: (j.as_dict(price, currency) for j in ledger.load(path, limit=limit))  # noqa: E731
        widths = _widths((_cells(row, bool(price)) for row in rows()), bool(price))
    except ledger.LedgerError as e:
        raise UsageError(
            f"cannot read the jobs ledger {e} (the daemon sets a damaged one aside and starts a new one)"
        ) from None
    if widths is None:
        said = f"no jobs in {printable(str(path))} yet (the daemon books them while it runs: rigmon run)"
        print(
            "\n".join(
                textwrap.wrap(said, terminal_width() or PIPE_WIDTH, subsequent_indent="  ", break_on_hyphens=False)
            )
        )
        return 0
    write = sys.stdout.write
    head = _head(bool(price))
    width = terminal_width() or PIPE_WIDTH
    keep = _fitting(head, widths, width)
    write(_line(head, widths, keep, width))
    try:
        for row in rows():
            write(_line(_cells(row, bool(price)), widths, keep, width))
    except ledger.LedgerError as e:
        raise UsageError(f"cannot read the jobs ledger {e}") from None
    return 0


def _stream_json(path, rows) -> None:
    """``{"ledger": …, "jobs": [...]}`` written a job at a time: a year of jobs is never all in memory."""
    write = sys.stdout.write
    write('{\n  "ledger": ' + json.dumps(str(path)) + ',\n  "jobs": [')
    for n, row in enumerate(rows):
        text = json.dumps(row, indent=2, allow_nan=False).replace("\n", "\n    ")
        write(("," if n else "") + "\n    " + text)
    write("\n  ]\n}\n")


def _busy(j: dict) -> str:
    """Its busy time on each GPU (at or above jobs.starved_utilization), and their sum where
    there are several: GPU time, which can be more than the job's own duration."""
    by_gpu = j.get("busy_seconds_by_gpu") or {}
    if not by_gpu:
        where = "" if len(j["gpus"]) <= 1 else f" summed over its {len(j['gpus'])} GPUs"
        return f"{_duration(j['busy_seconds'])} of GPU time{where}"
    parts = ", ".join(f"GPU {g} {_duration(seconds)}" for g, seconds in by_gpu.items())
    return parts if len(by_gpu) == 1 else f"{parts} ({_duration(j['busy_seconds'])} of GPU time in all)"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 86400:
        return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "—"


def _flags(job: dict) -> str:
    flags = (["running"] if job["running"] else []) + (["STARVED"] if job["starved"] else [])
    if job["alerts"]:
        flags.append("alerts: " + ",".join(job["alerts"]))
    return " ".join(flags)


def _head(with_cost: bool) -> list[str]:
    return [
        "ID",
        "USER",
        "JOB",
        "GPUS",
        "STARTED",
        "TOOK",
        "GPU-H",
        "kWh",
        *(["COST"] if with_cost else []),
        "W/LIMIT",
        "UTIL",
        "PEAK°C",
        "FLAGS",
        "COMMAND",
    ]


def _cells(j: dict, with_cost: bool) -> list[str]:
    ratio, util = j["mean_power_ratio"], j["mean_utilization_ratio"]
    cost = [f"{j['cost']:.2f}{(' ' + j['currency']) if j['currency'] else ''}" if j["cost"] is not None else "—"]
    cells = [
        str(j["id"]),
        j["user"] or "?",
        j["job"][:24],
        ",".join(map(str, j["gpus"])) or "—",
        _when(j["started"]),
        _duration(j["seconds"]),
        f"{j['gpu_hours']:.2f}",
        f"{j['energy_kwh']:.3f}",
        *(cost if with_cost else []),
        f"{j['mean_power_watts']:.0f} W/{ratio:.0%}" if ratio is not None and j["mean_power_watts"] else "—",
        f"{util:.0%}" if util is not None else "—",
        f"{j['peak_temperature_celsius']:.0f}" if j["peak_temperature_celsius"] is not None else "—",
        _flags(j),
        (j["command"] or "?")[:40],
    ]
    return [printable(c) for c in cells]


def _widths(rows, with_cost: bool) -> list[int] | None:
    """Each column's width over the head and ``rows`` (read once); None where there is no row."""
    widths, seen = [len(c) for c in _head(with_cost)], False
    for cells in rows:
        widths, seen = [max(w, len(c)) for w, c in zip(widths, cells, strict=True)], True
    return widths if seen else None


# Where the table is wider than the terminal, these columns go first, in this order; what
# says which job, whose, on which GPUs, how long, its energy and its flags stays.
DROPPED_FIRST = ("COMMAND", "PEAK°C", "UTIL", "W/LIMIT", "GPU-H", "STARTED", "COST")


def _fitting(head: list[str], widths: list[int], width: int) -> list[int]:
    """The columns kept (their indexes) so that a line fits ``width``, dropping DROPPED_FIRST in
    order; the last kept one is cut where even those that stay do not fit."""
    keep = list(range(len(head)))
    for name in DROPPED_FIRST:
        if sum(widths[i] for i in keep) + 2 * (len(keep) - 1) <= width:
            break
        if name in head:
            keep.remove(head.index(name))
    return keep


def _line(cells: list[str], widths: list[int], keep: list[int] | None = None, width: int = PIPE_WIDTH) -> str:
    keep = keep if keep is not None else list(range(len(cells)))
    line = "  ".join(cells[i].ljust(widths[i]) for i in keep).rstrip()
    return (line if len(line) <= width else line[: width - 1] + "…") + "\n"


def table(rows: list[dict], with_cost: bool, width: int = PIPE_WIDTH) -> str:
    """The jobs as ``rigmon jobs`` prints them, ``width`` columns wide."""
    cells = [_cells(j, with_cost) for j in rows]
    head = _head(with_cost)
    widths = _widths(cells, with_cost) or [len(c) for c in head]
    keep = _fitting(head, widths, width)
    return "".join(_line(c, widths, keep, width) for c in [head, *cells]).rstrip("\n")


def _unit(j: dict) -> str:
    if j["unit"]:
        return j["unit"]
    job = j["job"].split("/", 1)[-1]  # without its owner (OWNER/pgid:4242; a ledger from before: pgid:4242)
    if job.startswith("pid:"):  # its /proc entry could not be read: nothing is known of it
        return "unknown (/proc could not be read: gone, or hidden in another PID namespace)"
    if ":" in job and not job.startswith("pgid:"):
        return f"— (started by {job.split(':', 1)[0]})"
    return "— (a login session)"


def show(j: dict, width: int | None = None) -> str:
    """One job as ``rigmon jobs show`` prints it, ``width`` columns wide: a long value goes on
    under itself."""
    from ..sinks import jobs as ledger

    lines = [f"job #{j['id']}: {j['job']}" + (" (running)" if j["running"] else "")]
    fields = [
        ("user", j["user"] or "?"),
        ("command", j["command"] or "?"),
        ("unit", _unit(j)),
        ("started", _when(j["started"])),
        ("ended", _when(j["ended"]) if j["ended"] else "— (running)"),
        ("took", _duration(j["seconds"])),
        ("GPUs", ",".join(map(str, j["gpus"])) or "—"),
        (
            "GPU-hours",
            f"{j['gpu_hours']:.3f} (its share of each GPU's time; held {j['held_gpu_hours']:.3f}, each GPU "
            f"it was on counted whole)"
            if abs(j["held_gpu_hours"] - j["gpu_hours"]) > 5e-4
            else f"{j['gpu_hours']:.3f}",
        ),
        (
            "energy",
            f"{j['energy_kwh']:.4f} kWh ({j['energy_joules']:.0f} J)"
            + (
                ", partly estimated: power × time where the GPU's energy counter is missing or stood still"
                if j["energy_estimated"]
                else ", from the GPUs' energy counters"
            ),
        ),
        (
            "cost",
            f"{j['cost']:.2f} {j['currency'] or ''}".rstrip() if j["cost"] is not None else "— (no jobs.price_per_kwh)",
        ),
        ("mean power", f"{j['mean_power_watts']:.1f} W" if j["mean_power_watts"] is not None else "—"),
        ("of the limit", f"{j['mean_power_ratio']:.0%}" if j["mean_power_ratio"] is not None else "—"),
        ("utilisation", f"{j['mean_utilization_ratio']:.0%}" if j["mean_utilization_ratio"] is not None else "—"),
        ("busy", _busy(j)),
        (
            "starved",
            f"too short to judge: busy {_duration(j['busy_seconds'])} of GPU time, under the "
            f"{_duration(ledger.STARVED_MIN_BUSY_SECONDS)} the judgement needs"
            if j["starved"] is None
            else f"yes: {_duration(j['starved_seconds'])} of its busy GPU time below the power limit share"
            if j["starved"]
            else f"no ({_duration(j['starved_seconds'])} of {_duration(j['busy_seconds'])} busy GPU time)",
        ),
        ("throttled", _duration(j["throttle_seconds"])),
        (
            "peak temperature",
            f"{j['peak_temperature_celsius']:.0f} °C" if j["peak_temperature_celsius"] is not None else "—",
        ),
        ("alerts", ", ".join(j["alerts"]) or "none"),
    ]
    key = max(len(k) for k, _ in fields)
    text = printable_lines("\n".join(lines + [f"  {k:<{key}}  {v}" for k, v in fields]))
    return fit(text, width, hang=key + 4)
