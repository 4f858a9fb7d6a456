"""The ``rigmon`` command: one sub-command per job, shared options in one place."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from importlib import resources
from pathlib import Path

from . import __version__
from . import args as argtypes
from . import config as configmod
from .recording import Recording, RecordingError

log = logging.getLogger("rigmon")

DEMO_RECORDING = "h200-matmul-load.rec.jsonl"


def demo_path() -> Path:
    return Path(str(resources.files("rigmon") / "data" / DEMO_RECORDING))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class UsageError(Exception):
    """Bad input from the user: printed without a traceback, exit 2."""


# --- shared options -----------------------------------------------------------------------
def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", metavar="FILE",
                   help=f"config file (default {configmod.DEFAULT_PATH} if it exists)")


def _add_source(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--replay", metavar="FILE", help="read a rigmon recording instead of the hardware")
    g.add_argument("--demo", action="store_true", help="replay the bundled H200 recording (no GPU needed)")
    p.add_argument("--replay-gpus", type=argtypes.gpu_count, metavar="N",
                   help=f"widen the replayed recording to N GPUs (1 to {argtypes.MAX_GPUS})")


def _load_config(args) -> configmod.Config:
    return configmod.load(args.config)


def _replay_source(args, *, at: float = 0.0, realtime: bool = True, loop: bool = True):
    path = demo_path() if args.demo else args.replay
    if path is None:
        return None, ""
    from .replay import ReplayClock, ReplaySource

    recording = Recording.load(path)
    if not recording.ticks:
        raise UsageError(f"{path}: the recording has no ticks")
    if args.replay_gpus is not None:
        recording = recording.widened(args.replay_gpus)
    clock = ReplayClock(start_at=at, realtime=realtime)
    return ReplaySource(recording, clock, loop=loop), f"[replay {Path(path).name}]"


# --- commands -----------------------------------------------------------------------------
def cmd_status(args) -> int:
    from .alerts.sink import alert_dict, build_engine
    from .poller import build_poller
    from .status import as_json, render

    config = _load_config(args)
    source, label = _replay_source(args, at=args.at, realtime=bool(args.watch))
    poller = build_poller(config, source)
    engine = build_engine(config) if config.alerts.enabled else None
    alerts, note, daemon, alerts_now = None, "", None, None
    if engine is not None and source is not None and not args.watch:
        from .alerts.offline import replay_rules  # the recording's alerts as of --at

        replay_rules(source.recording, config, until=args.at, engine=engine)
        alerts = [alert_dict(a) for a in engine.firing()]
        alerts_now = source.recording.ticks[0]["t"] + args.at  # their ages on the recording's clock
    if args.watch:
        _stop_on_signals()
    clear = args.watch and not args.json and sys.stdout.isatty()
    poller.open()
    try:
        if source is None:
            time.sleep(0.25)  # psutil's CPU percentage and NVML's averages need a moment
        while True:
            sample = poller.poll()
            if engine is not None and source is None:
                # the daemon on this box has the history alerts need; without one, a watch
                # keeps its own engine from the moment it started
                alerts, note, daemon = _daemon_state(config)
                if alerts is None and args.watch:
                    engine.evaluate(sample, sample.time)
                    alerts, note = [alert_dict(a) for a in engine.firing()], "since this status started"
            elif engine is not None and args.watch:
                engine.evaluate(sample, sample.time)
                alerts, note = [alert_dict(a) for a in engine.firing()], "since this status started"
            where = f"{label} at {source.clock():.1f} s ({source.label() or 'no label'})" if source else ""
            if args.json:
                extra = {"alerts": alerts, "daemon": daemon}
                if source:
                    extra["replay"] = {"file": args.replay or str(demo_path()), "at": source.clock(),
                                       "label": source.label()}
                # a watch prints one object per line, for a reader that takes a line at a time
                print(json.dumps(as_json(sample, extra), indent=None if args.watch else 2, allow_nan=False))
            else:
                if clear:
                    sys.stdout.write("\x1b[H\x1b[2J")
                print(render(sample, where, alerts, note, daemon, show_info=args.all, now=alerts_now))
            if not args.watch:
                return 0
            sys.stdout.flush()
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0
    finally:
        poller.close()


def _stop_on_signals() -> None:
    """Ctrl-C and SIGTERM end a watch, even when started from a shell that ignores SIGINT
    for background jobs (Python then installs no KeyboardInterrupt handler of its own)."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def _daemon_state(config) -> tuple[list | None, str, dict | None]:
    """Firing alerts and sink state from the rigmon daemon on this machine: alerts need its history."""
    import ssl
    import urllib.request

    prom = config.prometheus
    where = f"127.0.0.1:{prom.port}"
    if not prom.enabled:
        return None, "the daemon's endpoint is disabled in the config", None
    if prom.basic_auth is not None:
        return None, f"the daemon at {where} asks for a password; see rigmon_alert_active in Prometheus", None
    scheme = "https" if prom.tls_cert else "http"
    context = ssl._create_unverified_context() if prom.tls_cert else None  # our own daemon on loopback
    try:
        with urllib.request.urlopen(f"{scheme}://{where}/state", timeout=1.0, context=context) as response:
            state = json.loads(response.read())
            return state["alerts"], f"from the daemon at {where}", state
    except (OSError, ValueError, KeyError):
        return None, f"no rigmon daemon answers on {where} (alerts need its history: start rigmon run)", None


def cmd_record(args) -> int:
    from .poller import build_poller
    from .readers import gpu as gpureader
    from .readers.host import SystemHost
    from .record import Recorder

    config = _load_config(args)
    interval = args.interval if args.interval is not None else config.daemon.interval
    if interval <= 0 or args.seconds <= 0:
        raise UsageError("--interval and --seconds must be positive")
    source, _ = _replay_source(args)
    if source is not None:
        from .replay import ReplayHost

        nvml, host = gpureader.replay_backend(source), ReplayHost(source)
        what = f"re-recorded from {args.replay or demo_path()}"
    else:
        nvml, host = gpureader.real_backend(), SystemHost(config.host.sysfs)
        what = "recorded by rigmon record"
    recorder = Recorder(f"{what}; rigmon {__version__}; {interval:g} s interval")
    _stop_on_signals()  # Ctrl-C or SIGTERM ends the recording cleanly
    poller = build_poller(config, nvml=recorder.nvml(nvml), host_backend=recorder.host(host))
    poller.open()
    ticks = 0
    gpus = len(poller.gpu.devices) if poller.gpu else 0
    try:
        with open(args.out, "w", encoding="utf-8") as out:
            recorder.write_header(out)
            started = time.monotonic()
            while time.monotonic() - started < args.seconds:
                due = started + ticks * interval
                time.sleep(max(0.0, due - time.monotonic()))
                recorder.begin_tick(time.time(), args.label)
                poller.poll()
                out.write(json.dumps(recorder.end_tick(), separators=(",", ":")) + "\n")
                out.flush()
                ticks += 1
    except KeyboardInterrupt:
        pass
    except OSError as e:
        raise UsageError(f"{args.out}: {e.strerror or e}") from None
    finally:
        poller.close()
    print(f"recorded {ticks} ticks of {gpus} GPU(s) to {args.out}", file=sys.stderr)
    return 0


def cmd_config_check(args) -> int:
    data, source = configmod.read(args.file or args.config)
    config = configmod.parse(data, source) if data else configmod.Config()
    print(f"# effective config from {source}; secrets masked")
    print(configmod.to_toml(configmod.masked(config, data)))
    print(f"\n# OK: {source} is a valid rigmon config")
    return 0


def cmd_config_schema(args) -> int:
    print(json.dumps(configmod.schema(), indent=2))
    return 0


def cmd_config_example(args) -> int:
    sys.stdout.write(configmod.example())
    return 0


# --- parser -------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rigmon", description="Hardware-health monitoring for GPU training rigs.")
    p.add_argument("--version", action="version", version=f"rigmon {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("status", help="show every GPU and the host sensors once")
    _add_config(s)
    _add_source(s)
    s.add_argument("--json", action="store_true", help="print the sample as JSON")
    s.add_argument("--watch", type=argtypes.positive, nargs="?", const=2.0, metavar="SECONDS",
                   help="refresh every SECONDS (2)")
    s.add_argument("--at", type=argtypes.non_negative, default=0.0, metavar="SECONDS",
                   help="with --replay: seconds into the recording")
    s.add_argument("--all", action="store_true", help="show info alerts too (a GPU at its power cap under load)")
    s.set_defaults(func=cmd_status)

    r = sub.add_parser("record", help="record the hardware's answers to a file (rigmon recording v1)")
    _add_config(r)
    _add_source(r)
    r.add_argument("--out", "-o", required=True, metavar="FILE")
    r.add_argument("--seconds", type=argtypes.positive, default=60.0, help="how long to record (60)")
    r.add_argument("--interval", type=argtypes.positive, help="seconds between ticks (the config's poll interval)")
    r.add_argument("--label", help="a label stored with every tick")
    r.set_defaults(func=cmd_record)

    c = sub.add_parser("config", help="check the config or print its schema")
    csub = c.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = csub.add_parser("check", help="validate a config file and print the effective config")
    _add_config(check)
    check.add_argument("file", nargs="?", help="the file to check (default: --config or the default path)")
    check.set_defaults(func=cmd_config_check)
    schema = csub.add_parser("schema", help="print the config's JSON Schema (for editors)")
    schema.set_defaults(func=cmd_config_schema)
    example = csub.add_parser("example", help="print every setting with its default and what it does (TOML)")
    example.set_defaults(func=cmd_config_example)

    from .daemon import add_parser as add_run

    add_run(sub, _add_config, _add_source)

    from .alerts.commands import add_parsers as add_alert_commands

    add_alert_commands(sub, _add_config, _add_source)

    from .burnin.run import add_parser as add_burnin

    add_burnin(sub, _add_config)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return args.func(args)
    except configmod.ConfigError as e:
        for path, message in e.problems:
            print(f"{e.source}: {path}: {message}" if path else f"{e.source}: {message}", file=sys.stderr)
        return 2
    except (RecordingError, UsageError) as e:
        print(f"rigmon: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (status --watch --json | head -1): not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0
