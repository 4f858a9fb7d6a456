"""``rigmon record``: the hardware's answers, call by call, to a rigmon recording v1."""

from __future__ import annotations

import json
import socket
import sys
import time

from .. import __version__
from ..model import args as argtypes
from .common import UsageError, add_config, add_source, demo_path, load_config, replay_source, stop_on_signals

PROGRESS_SECONDS = 10.0  # how often a recording says how far it is


def add_parser(sub) -> None:
    r = sub.add_parser("record", help="record the hardware's answers to a file (rigmon recording v1)")
    add_config(r)
    add_source(r)
    r.add_argument("--out", "-o", required=True, metavar="FILE")
    r.add_argument("--seconds", type=argtypes.positive, default=60.0, help="how long to record (60)")
    r.add_argument("--interval", type=argtypes.positive, help="seconds between ticks (the config's poll interval)")
    r.add_argument("--label", help="a label stored with every tick")
    r.add_argument(
        "--live-host",
        action="store_true",
        help="with --replay: the GPUs from the recording, the host (sensors, the GPU processes' /proc "
        "entries) read live from this box",
    )
    r.set_defaults(func=cmd_record)


def cmd_record(args) -> int:
    from ..pipeline import Inputs, Outputs, Pipeline
    from ..readers import gpu as gpureader
    from ..readers.host import SystemHost
    from ..readers.record import Recorder

    config = load_config(args)
    interval = args.interval if args.interval is not None else config.daemon.interval
    if interval <= 0 or args.seconds <= 0:
        raise UsageError("--interval and --seconds must be positive")
    source, _ = replay_source(args)
    if source is not None:
        from ..readers.replay import ReplayHost, replay_backend

        live = SystemHost(config.host.sysfs, launchers=tuple(config.jobs.launchers))
        nvml, host = replay_backend(source), live if args.live_host else ReplayHost(source)
        what = f"re-recorded from {args.replay or demo_path()}" + (", the host live" if args.live_host else "")
    else:
        if args.live_host:
            raise UsageError("--live-host goes only with --replay FILE or --demo")
        nvml, host = gpureader.real_backend(), SystemHost(config.host.sysfs, launchers=tuple(config.jobs.launchers))
        what = "recorded by rigmon record"
    # the box's name: the replayed box's where it is re-recorded, so a page replaying the file shows it
    box = source.recording.hostname if source is not None else config.daemon.hostname or socket.gethostname()
    recorder = Recorder(f"{what}; rigmon {__version__}; {interval:g} s interval", hostname=box)
    stop_on_signals()  # Ctrl-C or SIGTERM ends the recording cleanly
    pipeline = Pipeline.from_config(
        config,
        Outputs.NOTHING,
        inputs=Inputs(source=source, nvml=recorder.nvml(nvml), host_backend=recorder.host(host)),
    )
    known = _known_gpus(config, source)
    if known:  # the GPUs the box has had: a replay misses those NVML does not list, as the box did
        recorder.header["known_gpus"] = [g.entry() for g in known]
        if pipeline.poller.gpu is not None:
            pipeline.poller.gpu.remember(known)
    pipeline.open()
    ticks = 0
    gpus = len(pipeline.poller.gpu.devices) if pipeline.poller.gpu else 0
    print(
        f"recording {gpus} GPU(s) every {interval:g} s for {args.seconds:g} s to {args.out} (Ctrl-C ends it "
        f"early, and keeps what was recorded)",
        file=sys.stderr,
        flush=True,
    )
    said = time.monotonic()
    try:
        with open(args.out, "w", encoding="utf-8") as out:
            recorder.write_header(out)
            started = time.monotonic()
            while time.monotonic() - started < args.seconds:
                if time.monotonic() - said >= PROGRESS_SECONDS:
                    said = time.monotonic()
                    print(
                        f"  {said - started:.0f} of {args.seconds:g} s, {ticks} ticks, {out.tell() / 1e6:.1f} MB",
                        file=sys.stderr,
                        flush=True,
                    )
                due = started + ticks * interval
                time.sleep(max(0.0, due - time.monotonic()))
                recorder.begin_tick(time.time(), args.label)
                pipeline.step()
                out.write(json.dumps(recorder.end_tick(), separators=(",", ":")) + "\n")
                out.flush()
                ticks += 1
    except KeyboardInterrupt:
        pass
    except OSError as e:
        raise UsageError(f"{args.out}: {e.strerror or e}") from None
    finally:
        pipeline.close()
    print(f"recorded {ticks} ticks of {gpus} GPU(s) to {args.out}", file=sys.stderr)
    return 0


def _known_gpus(config, source) -> tuple:
    """The GPUs the box has had: a replayed recording's, else those the daemon keeps in its
    state_dir (read only; nothing where it is not readable)."""
    if source is not None:
        return source.recording.known_gpus
    from ..config.box import Box
    from ..sinks.known import Known

    known = Known(Box.of(config).state_dir / "known.json")
    known.load()
    return tuple(known.gpus.values())
