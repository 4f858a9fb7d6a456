"""``rigmon status``: every GPU and the host sensors, once or as a watch."""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from ..model import args as argtypes
from ..model.text import printable, printable_lines, terminal_width
from .common import add_config, add_source, demo_path, load_settings, replay_source, stop_on_signals


def add_parser(sub) -> None:
    s = sub.add_parser("status", help="show every GPU and the host sensors once")
    add_config(s)
    add_source(s)
    s.add_argument("--json", action="store_true", help="print the sample as JSON")
    s.add_argument(
        "--watch", type=argtypes.positive, nargs="?", const=2.0, metavar="SECONDS", help="refresh every SECONDS (2)"
    )
    s.add_argument(
        "--at",
        type=argtypes.non_negative,
        default=0.0,
        metavar="SECONDS",
        help="with --replay: seconds into the recording",
    )
    s.add_argument("--all", action="store_true", help="show info alerts too (a GPU at its power cap under load)")
    s.add_argument(
        "--exit-code", action="store_true", help="exit 1 when a GPU is lost or a critical alert fires (for scripts)"
    )
    s.set_defaults(func=cmd_status)


def cmd_status(args) -> int:
    from ..pipeline import Inputs, Outputs, Pipeline
    from ..sinks.alerts import alert_dict, build_engine
    from ..status import as_json, exit_code, render

    config = load_settings(args)
    source, label = replay_source(args, at=args.at, realtime=bool(args.watch))
    # a watch keeps its own rules from the moment it started (shown where no daemon answers);
    # one look shows the daemon's alerts, or a recording's as of --at
    replayed = config.alerts.enabled and source is not None and not args.watch
    engine = build_engine(config.alerts) if replayed else None
    # one look at a replay shows the sample the rules ended on; the hardware, or a watch, its own polls
    pipeline = (
        None
        if replayed
        else Pipeline.from_config(
            config,
            Outputs(rules=bool(args.watch)),  # one read: no XID thread
            inputs=Inputs(source=source, event_thread=bool(args.watch)),
        )
    )
    alerts, note, daemon, alerts_now = None, "", None, None
    replayed_to: dict = {}  # the replay's last sample as the rules saw it: its cooling, learned up to --at
    if replayed:
        from ..offline import replay_rules  # the recording's alerts as of --at

        replay_rules(source.recording, config, until=args.at, engine=engine, source=source, kept=replayed_to)
        source.clock.set(args.at)  # where the status looks: the tick the rules ended on, decoded already
        alerts = [alert_dict(a) for a in engine.firing()]
        alerts_now = source.recording.ticks[0]["t"] + args.at  # their ages on the recording's clock
    if args.watch:
        stop_on_signals()
    tty = sys.stdout.isatty()
    clear = args.watch and not args.json and tty
    color = tty and not os.environ.get("NO_COLOR")  # no-color.org: any value turns colour off
    host = (config.daemon.hostname or socket.gethostname()) + "".join(
        f"  {k}={v}" for k, v in sorted(config.daemon.labels.items())
    )
    if pipeline is not None:
        pipeline.open()
    try:
        if source is None:
            time.sleep(0.25)  # psutil's CPU percentage and NVML's averages need a moment
        while True:
            if pipeline is None:
                sample, own, not_recorded = replayed_to["sample"], None, replayed_to["not_recorded"]
            else:
                sample = pipeline.step().sample
                own = [alert_dict(a) for a in pipeline.alerts.engine.firing()] if pipeline.alerts else None
                gpu = pipeline.poller.gpu
                not_recorded = gpu.not_recorded() if source is not None and gpu is not None else ()
            if config.alerts.enabled and source is None:
                # the daemon on this box has the history alerts need
                alerts, note, daemon = _daemon_state(config)
                if alerts is None and own is not None:
                    alerts, note = own, "since this status started"
            elif own is not None:
                alerts, note = own, "since this status started"
            where = f"{label} at {source.clock():.1f} s ({source.label() or 'no label'})" if source else ""
            if args.json:
                extra = {"alerts": alerts, "daemon": daemon}
                if source:
                    extra["replay"] = {
                        "file": args.replay or str(demo_path()),
                        "at": source.clock(),
                        "label": source.label(),
                        "not_recorded": list(not_recorded),
                    }
                # a watch prints one object per line, for a reader that takes a line at a time
                print(json.dumps(as_json(sample, extra), indent=None if args.watch else 2, allow_nan=False))
            else:
                if clear:
                    sys.stdout.write("\x1b[H\x1b[2J")
                # whatever a process, a recording or the local port put in a string is made printable in
                # render, before its colours; without colours, the whole text once more
                text = render(
                    sample,
                    where,
                    alerts,
                    note,
                    daemon,
                    show_info=args.all,
                    now=alerts_now,
                    width=_width(),
                    color=color,
                    host=host,
                    not_recorded=not_recorded,
                    height=_height() if clear else None,
                )
                print(text if color else printable_lines(text))
            if not args.watch:
                return exit_code(sample, alerts) if args.exit_code else 0
            sys.stdout.flush()
            time.sleep(args.watch)
    except KeyboardInterrupt:  # Ctrl-C ends a watch quietly, with the shell's code for SIGINT
        return 130
    finally:
        if pipeline is not None:
            pipeline.close()


def _width() -> int:
    """COLUMNS where set, else the terminal's width; 120 when the output goes to no terminal."""
    from ..status import WIDTH

    return max(terminal_width() or WIDTH, 40)


def _height() -> int | None:
    """A watch's rows: LINES where set, else the terminal's, less the one the cursor waits on."""
    lines = os.environ.get("LINES", "").strip()
    if lines.isdigit() and int(lines) > 0:
        return max(int(lines) - 1, 8)
    try:
        return max(os.get_terminal_size(sys.stdout.fileno()).lines - 1, 8)
    except OSError:
        return None


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
            state = json.loads(response.read(1 << 20))
            alerts = state["alerts"]
            if (
                not isinstance(alerts, list)
                or not all(isinstance(a, dict) for a in alerts)
                or not isinstance(state.get("influxdb") or {}, dict)
            ):
                raise ValueError("not a rigmon daemon's state")
            replay = state.get("replay")
            if replay:  # a replay's alerts are its recording's, not this box's
                shown = printable(str(replay))[:60]
                return None, f"the daemon at {where} replays {shown}: its alerts are not this box's", None
            return alerts, f"from the daemon at {where}", state
    except (OSError, ValueError, KeyError, TypeError):
        return None, f"no rigmon daemon answers on {where} (alerts need its history: start rigmon run)", None
