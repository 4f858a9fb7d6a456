"""``rigmon run``: the daemon in the foreground (what the systemd unit starts), its warm stop
within one deadline, and SIGHUP's validated restart."""

from __future__ import annotations

import argparse
import errno
import gc
import json
import logging
import os
import re
import signal
import socket
import stat
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..model import args as argtypes
from ..system import logs
from .common import UsageError, add_config, add_source, replay_source

if TYPE_CHECKING:  # the daemon and all it builds are imported by cmd_run alone: other commands start quicker
    from ..config.settings import Settings
    from ..daemon import Daemon

log = logging.getLogger("rigmon.daemon")


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run the monitoring daemon (Prometheus endpoint, sinks)")
    add_config(p)
    add_source(p)
    p.add_argument("--listen", metavar="ADDR", help="override prometheus.listen")
    p.add_argument("--port", type=argtypes.port, help="override prometheus.port (0 picks a free port)")
    p.add_argument(
        "--speed",
        type=argtypes.speed,
        metavar="N",
        help="with --replay: run the daemon's clock N times as fast (polls, alerts' for, jobs), so a "
        f"recorded day replays through the whole daemon in minutes ({argtypes.SPEED_RANGE[0]:g} to "
        f"{argtypes.SPEED_RANGE[1]:g})",
    )
    p.set_defaults(func=cmd_run)


RELOAD_ENV = "RIGMON_RELOAD_FD"  # set by a reload for the process it execs: the file it hands over


class _Validated(NamedTuple):
    settings: Settings
    text: str | None  # the file's text, as validated (None: the built-in defaults)
    warnings: list  # what a validation from the cache warned of, to be warned of again (logger, level, message)


def _config(args, text: str | None = None) -> _Validated:
    """The config, validated by a child Python: pydantic's models (60 ms, 20 MiB) never load in
    the process that runs for weeks. The file is read here and its text validated, so what a
    reload hands over is exactly what was checked. ``text``: that text, handed over.

    A start whose config (and all it depends on) is as a start before validated it, holding no
    secret, takes it from the cache (rigmon.config.settings.whole): no child to wait for."""
    from ..config.settings import DEFAULT_CONFIG, remember, validated, whole

    overrides = {k: v for k, v in (("listen", args.listen), ("port", args.port)) if v is not None}
    if text is None and not overrides and (kept := whole(args.config)) is not None:
        return _Validated(_own_state(kept[0], args), kept[1], kept[2])
    handed = text is not None
    if not handed:
        path = args.config if args.config is not None else (DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None)
        try:
            text = Path(path).read_text(encoding="utf-8") if path is not None else None
        except (OSError, UnicodeDecodeError):
            text = None  # the child says what is wrong with it
    warnings: list = []
    settings = validated(args.config, {"prometheus": overrides} if overrides else None, text=text, warnings=warnings)
    if not handed and not overrides:
        remember(args.config, text, settings, warnings)
    return _Validated(_own_state(settings, args), text, [])  # the child warned as it validated


def _preload() -> None:
    try:
        from .. import daemon, pipeline  # noqa: F401  # (a replay's reader comes with the poller)
    except Exception:  # noqa: S110  # the start's own import meets it again, and says it as it says any
        pass


def _own_state(config: Settings, args) -> Settings:
    """A replay is never the box: its history, ledger, spool and lock live in a state directory
    of its own, ``<state_dir>/replay/<recording>``, never the box's."""
    if not (args.replay or args.demo):
        return config
    where = replay_state_dir(config.daemon.state_dir, args)
    daemon = type(config.daemon)({**config.daemon._data, "state_dir": where})
    influx = type(config.influxdb)({**config.influxdb._data, "spool_dir": None})
    return type(config)({**config._data, "daemon": daemon, "influxdb": influx})


def replay_state_dir(state_dir: Path, args) -> Path:
    """``<state_dir>/replay/demo``, or ``<state_dir>/replay/<file's name>-<its path's hash>``."""
    if args.demo:
        return Path(state_dir) / "replay" / "demo"
    path = Path(args.replay)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", path.name)[:60].lstrip(".") or "recording"
    digest = zlib.crc32(str(path.resolve()).encode(errors="surrogateescape"))
    return Path(state_dir) / "replay" / f"{name}-{digest:08x}"


def _hand_over(handed: dict) -> None:
    """What a reload hands to the process it execs (the config text it validated and the one
    before, its listening socket's descriptor, its alerts), as JSON in an anonymous file that
    the exec inherits: a memfd, never on disk, so the config's secrets go with it."""
    try:
        fd = os.memfd_create("rigmon-reload", 0)  # not close-on-exec
        os.write(fd, json.dumps(handed).encode())
        os.lseek(fd, 0, os.SEEK_SET)
    except (AttributeError, OSError, TypeError, ValueError) as e:
        log.warning("reload: cannot hand over (%s); the next process starts without the alerts", e)
        return
    os.environ[RELOAD_ENV] = str(fd)


MAX_HANDED_BYTES = 16 << 20


def _taken_over() -> dict:
    """What the process before a reload handed over, checked; {} when this is no reload, or
    (with a warning) when what was handed over cannot be read."""
    fd = os.environ.pop(RELOAD_ENV, None)
    if fd is None:
        return {}
    try:
        with os.fdopen(int(fd), "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise ValueError("not a file")
            data = f.read(MAX_HANDED_BYTES + 1)
            if len(data) > MAX_HANDED_BYTES:
                raise ValueError(f"larger than {MAX_HANDED_BYTES >> 20} MiB")
            handed = json.loads(data)
    except (OSError, ValueError) as e:
        logs.setup("INFO", 0)
        log.warning("reload: what the process before handed over cannot be read (%s); starting afresh", e)
        return {}
    if not isinstance(handed, dict):
        log.warning("reload: what the process before handed over is not an object; starting afresh")
        return {}
    out = {}
    for key, kind in (("fd", int), ("listen", list), ("alerts", list), ("notifications", list)):
        value = handed.get(key)
        if isinstance(value, kind) and not isinstance(value, bool):
            out[key] = value
    for key in ("config", "previous"):  # a file's text, or None for the built-in defaults
        if key in handed and (handed[key] is None or isinstance(handed[key], str)):
            out[key] = handed[key]
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from ..config.settings import ConfigError
    from ..system import heap

    heap.tune()  # before any thread: they all share one arena
    os.umask(0o077)  # the history, ledger, spool and lock: the owner's alone, whoever starts rigmon
    handed = _taken_over()
    if "previous" not in handed:  # a start, not a reload: what goes wrong is said and rigmon exits
        return _run(args, handed)
    # a reload: the new config was checked, but whatever still keeps it from starting (a state
    # directory another rigmon took meanwhile, a file changed since) goes back to the one before
    try:
        return _run(args, handed)
    except (UsageError, ConfigError, OSError) as e:
        logs.setup("INFO", args.verbose)
        reason = "; ".join(f"{p}: {m}" if p else m for p, m in e.problems) if isinstance(e, ConfigError) else e
        log.error("SIGHUP: the new config cannot start (%s); going back to the config before it", reason)
        back = {k: v for k, v in handed.items() if k in ("fd", "listen", "alerts", "notifications")}
        back["config"] = handed["previous"]
        _hand_over(back)
        logging.shutdown()
        os.execv(sys.executable, [sys.executable, "-m", "rigmon", *sys.argv[1:]])
        raise  # not reached: execv returns only by raising


def _run(args: argparse.Namespace, handed: dict) -> int:
    from ..config.settings import ConfigError, describe_source, warn_again

    reloaded = bool(handed)  # a reload, or its way back to the config before
    # the daemon's modules imported on another core while the child validates the config: the
    # two together, not one after the other, before the first scrape can be answered
    preload = threading.Thread(target=_preload, name="preload", daemon=True)
    preload.start()
    config, text, warnings = _config(args, handed["config"]) if "config" in handed else _config(args)
    preload.join()
    logs.setup(config.daemon.log_level, args.verbose)
    warn_again(warnings)
    speed = args.speed or 1.0
    if args.speed is not None and not (args.replay or args.demo):
        raise UsageError("--speed goes only with --replay FILE or --demo: the hardware's clock cannot be hurried")
    _lock = _lock_state_dir(config.daemon.state_dir)  # held until exit (an exec for SIGHUP takes it anew)
    log.info("config: %s", describe_source(args.config))
    _raise_open_files()
    handed = _handed_over(config, handed)
    cert_times = _cert_times(config)
    source, label = replay_source(args, speed=speed)
    wall = time.time
    if source is not None:
        log.info(
            "replaying %s (%d GPU(s), %.0f s, looping%s); its state in %s, never the box's",
            label,
            source.recording.gpu_count,
            source.recording.duration,
            f", {speed:g}× as fast" if speed != 1 else "",
            config.daemon.state_dir,
        )
        if speed != 1:  # the samples' clock: from now, as fast as the replay
            start, replay_start = time.time(), source.clock()
            wall = lambda: start + source.clock() - replay_start  # noqa: E731
    try:
        from ..daemon import Daemon
        from ..pipeline import Inputs

        daemon = Daemon.from_config(config, Inputs(source=source, wall=wall), speed=speed)
    except OSError as e:  # the spool's state directory cannot be made or written
        raise UsageError(f"{getattr(e, 'filename', '') or ''}: {e.strerror or e}".lstrip(": ")) from None
    daemon.replay = label if source is not None else None
    daemon.install_signal_handlers()
    # a reload blocked SIGTERM and SIGINT across its exec: one that came meanwhile is a warm stop now
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    _take_up(daemon, config.daemon.state_dir, handed if reloaded else None)
    try:
        daemon.start(sock=handed.sock)
    except OSError as e:
        daemon.pipeline.close()
        where = "--port" if args.port is not None else "prometheus.port"
        raise UsageError(
            f"{e.strerror or e}: another program has the port? Choose another with {where} (or stop the other rigmon)"
            if e.errno == errno.EADDRINUSE
            else (e.strerror or str(e))
        ) from None
    # SIGHUP was blocked across the exec of a reload: one that came meanwhile is taken now
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
    # What start-up built (modules, config, readers, a replayed recording) lives as long as the
    # process (SIGHUP execs a new one): kept out of the collector's sight, so the full collections
    # that short-lived objects (a connection per scrape) set off stay short, ~1 ms, not ~20 ms
    # of the HTTP thread's time for every scrape waiting behind them.
    gc.collect()
    gc.freeze()
    started = time.monotonic()
    while True:
        daemon.wait()
        if not daemon.reload_requested.is_set() or daemon._signals:
            break  # SIGTERM or SIGINT: stop
        daemon.reload_requested.clear()
        daemon._stop_requested.clear()
        try:
            new, new_text, warnings = _config(args)
            warn_again(warnings)
        except ConfigError as e:
            problems = "; ".join(f"{p}: {m}" if p else m for p, m in e.problems)
            log.error("SIGHUP: %s is not valid, the running config stays: %s", e.source, problems)
            continue
        if daemon._signals:
            break  # a SIGTERM while the new config was checked: it stops
        if new == config and _cert_times(new) == cert_times:  # SIGHUPs that came while the last reload ran
            log.info("SIGHUP: the config and its files are unchanged; nothing to reload")
            continue
        problem = _cannot_start(new, config, daemon)
        if problem:
            log.error("SIGHUP: %s; the running config stays", problem)
            continue
        log.info("SIGHUP: the config is valid; restarting with it")
        _reload(daemon, config, new, new_text, text)  # returns only where a SIGTERM stopped the reload
        return 0
    stopped = _stop_within_grace(daemon)
    _keep(daemon, config.daemon.state_dir)
    if not stopped:
        return 0  # what could not finish in time is abandoned; the spool keeps the rest
    log.info(
        "stopped after %.0f s, %d polls (%d skipped)",
        time.monotonic() - started,
        daemon.stats.polls,
        daemon.stats.skipped,
    )
    return 0


class _HandedOver(NamedTuple):
    sock: socket.socket | None = None
    alerts: list = []
    notifications: list = []


def _handed_over(config: Settings, state: dict) -> _HandedOver:
    """What the process before a reload left: its listening socket (used where this config
    listens on the same address and port) and its alerts."""
    sock = None
    fd = state.get("fd")
    if isinstance(fd, int):
        try:
            sock = socket.socket(fileno=fd)
            prom = config.prometheus
            if not prom.enabled or [prom.listen, prom.port] != state.get("listen"):
                sock.close()
                sock = None
        except OSError:
            sock = None
    alerts, queued = state.get("alerts"), state.get("notifications")
    return _HandedOver(sock, alerts if isinstance(alerts, list) else [], queued if isinstance(queued, list) else [])


KEPT = "alerts.json"  # in the state directory: the alerts and the queued notifications at a stop
KEPT_FORMAT = "rigmon-alerts 1"
MAX_KEPT_BYTES = 32 << 20


def _keep(daemon: Daemon, state_dir: Path) -> None:
    """At a stop: the alerts (with their rules' fingerprints) and what each notifier still had
    queued, for the next start to go on from (``_take_up``)."""
    alerts, latest = daemon.pipeline.alerts, daemon.pipeline.latest
    if alerts is None:
        return
    carried, _ = alerts.carry(None, latest.time if latest is not None else time.time())
    queued = alerts.kept_notifications()
    if not _write_kept(state_dir, carried, queued):
        return
    pending = sum(len(q["queue"]) for q in queued)
    if pending:
        log.info("%d notification(s) kept for the next start: they are sent then", pending)


def _write_kept(state_dir: Path, carried: list, queued: list) -> bool:
    """The alerts and queues in ``<state_dir>/alerts.json`` (none: the file goes); False where
    that failed, which is said."""
    from ..system import statefile

    path = Path(state_dir) / KEPT
    try:
        if not carried and not queued:
            path.unlink(missing_ok=True)
            return True
        data = {"format": KEPT_FORMAT, "saved_at": time.time(), "alerts": carried, "notifications": queued}
        statefile.write_atomic(path, json.dumps(data).encode())
    except OSError as e:
        log.warning("cannot keep the alerts for the next start in %s: %s", path, e.strerror or e)
        return False
    return True


def _take_up(daemon: Daemon, state_dir: Path, handed: _HandedOver | None) -> None:
    """The alerts and queued notifications a reload handed over (``handed``) or a stop kept
    (``_keep``): the alerts go on as they were, Alertmanager's are renewed, the queues are sent.
    What a stop kept is read once: the file goes."""
    from ..system import statefile

    alerts = daemon.pipeline.alerts
    path = Path(state_dir) / KEPT
    kept: object = {}
    if handed is None:
        try:
            kept = statefile.read_json(path, MAX_KEPT_BYTES)
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as e:
            log.warning("%s cannot be read (%s): the alerts start afresh", path, getattr(e, "strerror", None) or e)
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass
    if handed is not None:
        carried, queued = handed.alerts, handed.notifications
    elif isinstance(kept, dict) and kept.get("format") == KEPT_FORMAT:
        carried, queued = kept.get("alerts"), kept.get("notifications")
    else:
        return
    if alerts is None:
        return
    taken = alerts.take_up(carried if isinstance(carried, list) else [])
    sent = alerts.take_notifications(queued if isinstance(queued, list) else [])
    if taken or sent:
        log.info(
            "%s: %d alert(s) go on as they were, %d queued notification(s) to send",
            "reload" if handed is not None else "start",
            taken,
            sent,
        )


def _cert_times(config: Settings) -> list:
    """When the certificate and key files last changed: a reload is how a renewed one is taken."""
    out = []
    for path in (config.prometheus.tls_cert, config.prometheus.tls_key):
        try:
            out.append(os.stat(path).st_mtime_ns if path is not None else None)
        except OSError:
            out.append(-1)
    return out


def _cannot_start(new: Settings, old: Settings, daemon: Daemon) -> str | None:
    """What in ``new`` would keep the next process from starting, said with the setting at
    fault; None when it can start. The running daemon goes on when it cannot."""
    from ..http.server import tls_context

    prom, was = new.prometheus, old.prometheus
    if prom.enabled:
        try:
            tls_context(prom)
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
            return f"prometheus.tls_cert/tls_key: {getattr(e, 'strerror', None) or e}"
        if not (was.enabled and (prom.listen, prom.port) == (was.listen, was.port) and daemon.port is not None):
            try:
                family = socket.AF_INET6 if ":" in prom.listen else socket.AF_INET
                with socket.create_server((prom.listen, prom.port), family=family) as probe:
                    probe.getsockname()
            except OSError as e:
                return f"prometheus.port: cannot listen on {prom.listen}:{prom.port}: {e.strerror or e}"
    if new.daemon.state_dir != old.daemon.state_dir:
        try:
            new.daemon.state_dir.mkdir(parents=True, exist_ok=True)
            probe = _lock_state_dir(new.daemon.state_dir)  # another rigmon's: the next process could not start
            if probe is not None:
                os.close(probe)
        except OSError as e:
            return f"daemon.state_dir: {new.daemon.state_dir}: {e.strerror or e}"
        except UsageError as e:
            return str(e) if str(e).startswith("daemon.state_dir") else f"daemon.state_dir: {e}"
    return None


def _reload(daemon: Daemon, old: Settings, new: Settings, new_text: str | None, old_text: str | None) -> None:
    """Hand over and exec: SIGHUP blocked from here until the next process can take it (the mask
    survives the exec), the listening socket kept open across, the alerts of unchanged rules
    carried, and a RESOLVED sent (by these notifiers, before they flush) for a firing alert
    whose rule the reload changed or removed."""
    from ..sinks.alerts import fingerprint

    # SIGTERM and SIGINT too: one that comes from here stops this process warm, or the next
    # (the mask and what is pending survive the exec), never lost between them
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP, signal.SIGTERM, signal.SIGINT})
    daemon.stop_polling()  # the alerts are read below: no poll may change them meanwhile
    state: dict = {}
    if daemon._server is not None and new.prometheus.enabled:
        state["fd"] = daemon._server.hand_over()
        state["listen"] = [old.prometheus.listen, old.prometheus.port]
    alerts, latest = daemon.pipeline.alerts, daemon.pipeline.latest
    if alerts is not None:
        specs = (
            {spec.name: fingerprint(spec) for spec in new.alerts.effective_rules() if spec.enabled}
            if new.alerts.enabled
            else {}
        )
        last = latest.time if latest is not None else time.time()
        state["alerts"], resolved = alerts.carry(specs, last)
        daemon.pipeline.between_polls(resolved)  # kept with the jobs, written to InfluxDB
    state["config"], state["previous"] = new_text, old_text
    daemon.notifier.reloading()
    _stop_within_grace(daemon, reloading=True)
    if daemon._signals:  # a SIGTERM came while it stopped: the stop is the warm one it asks for
        log.info("stopping (warm) instead of reloading")
        _keep(daemon, old.daemon.state_dir)
        return
    if alerts is not None:
        state["notifications"] = alerts.kept_notifications()
        if new.daemon.state_dir == old.daemon.state_dir:
            # on disk too, as a stop keeps them: a next process killed before it takes them up
            # (a stop deadline on a loaded box) leaves them to the start after it
            _write_kept(old.daemon.state_dir, state["alerts"], state["notifications"])
    _hand_over(state)
    logging.shutdown()
    try:
        os.execv(sys.executable, [sys.executable, "-m", "rigmon", *sys.argv[1:]])
    except OSError as e:  # stopped already: exit so that the service manager starts it again
        print(f"rigmon: reload: cannot start {sys.executable}: {e}", file=sys.stderr)
        raise SystemExit(1) from None


def _raise_open_files(want: int = 8192) -> None:
    """Room for the HTTP server's connections (its own bound is far below) beside NVML, the
    spool and the ledger: the soft limit is often 1,024 where the hard one allows far more."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass


def _private(state_dir: Path) -> None:
    """The state directory is its owner's: made 0700 (the daemon's umask is 077, so every file
    in it is 0600); one found wider is narrowed to 0700, but for 0750, which the systemd unit
    sets (StateDirectoryMode) for the service's own group, or an administrator for theirs.
    One that others may steer (another user's, a shared directory such as /tmp, one under a
    directory others can write to) is refused: ``statefile.Unsafe``, before anything in it is
    opened, made or changed."""
    from ..system.statefile import Unsafe, check_dir

    check_dir(state_dir)  # before anything is made in it
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_dir(state_dir)  # and after: another user may have made it between the check and mkdir
    mode = stat.S_IMODE(os.stat(state_dir).st_mode)
    if mode & (stat.S_ISVTX | stat.S_IWOTH | stat.S_IWGRP):
        raise Unsafe(
            f"{state_dir} is mode {mode:04o}, a directory others may write to (shared, like /tmp): "
            f"choose a daemon.state_dir of rigmon's own"
        )
    if mode & 0o077 and mode != 0o750:
        os.chmod(state_dir, 0o700)
        log.info("state directory %s was mode %04o: now 0700 (its owner's alone)", state_dir, mode)


def _lock_state_dir(state_dir) -> int | None:
    """One daemon per state directory: two would send and delete each other's spool segments and
    book each job twice. The lock is the kernel's (flock): a crashed daemon holds none. A state
    directory others could steer is refused (UsageError)."""
    import fcntl

    from ..system.statefile import Unsafe, open_regular

    try:
        _private(state_dir)
    except Unsafe as e:
        raise UsageError(f"daemon.state_dir: {e}") from None
    except OSError:
        return None  # the spool and ledger report what is wrong with the directory
    try:
        fd = open_regular(state_dir / "rigmon.lock", os.O_RDWR | os.O_CREAT)
    except (OSError, ValueError) as e:
        raise UsageError(
            f"daemon.state_dir: {state_dir / 'rigmon.lock'}: {getattr(e, 'strerror', None) or e}"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise UsageError(
                f"another rigmon daemon uses the state directory {state_dir}: stop it first, or give "
                f"this one its own daemon.state_dir"
            ) from None
        return None
    return fd


def _stop_within_grace(daemon: Daemon, reloading: bool = False) -> bool:
    """Warm stop within STOP_GRACE_SECONDS (plus the running poll); True when it finished."""
    from ..daemon import STOP_GRACE_SECONDS

    deadline = time.monotonic() + STOP_GRACE_SECONDS
    stopper = threading.Thread(target=daemon.stop, args=(deadline, reloading), daemon=True)
    stopper.start()
    stopper.join(STOP_GRACE_SECONDS + 0.8)
    if stopper.is_alive():
        log.error("warm stop took over %.0f s; exiting anyway (the spool keeps what was not sent)", STOP_GRACE_SECONDS)
        return False
    return True
