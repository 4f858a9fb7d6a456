"""``rigmon run``: the daemon in the foreground (what the systemd unit starts), its warm stop
within one deadline, and SIGHUP's validated restart."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import threading
import time

from .. import config as configmod
from .. import logs
from ..daemon import STOP_GRACE_SECONDS, Daemon
from ..poller import build_poller
from .common import UsageError, add_config, add_source, replay_source

log = logging.getLogger("rigmon.daemon")


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run the monitoring daemon (Prometheus endpoint, sinks)")
    add_config(p)
    add_source(p)
    p.add_argument("--listen", metavar="ADDR", help="override prometheus.listen")
    p.add_argument("--port", type=int, help="override prometheus.port (0 picks a free port)")
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    config = configmod.load(args.config)
    overrides = {k: v for k, v in (("listen", args.listen), ("port", args.port)) if v is not None}
    if overrides:
        data = config.model_dump()
        data["prometheus"].update(overrides)
        config = configmod.parse(data, "command line")
    logs.setup(config.daemon.log_level, args.verbose)
    _lock = _lock_state_dir(config.daemon.state_dir)  # held until exit (an exec for SIGHUP takes it anew)
    _raise_open_files()
    source, label = replay_source(args)
    if source is not None:
        log.info("replaying %s (%d GPU(s), %.0f s, looping)", label, source.recording.gpu_count,
                 source.recording.duration)
    try:
        daemon = Daemon(config, build_poller(config, source))
    except OSError as e:  # the spool's state directory cannot be made or written
        raise UsageError(f"{getattr(e, 'filename', '') or ''}: {e.strerror or e}".lstrip(": ")) from None
    daemon.install_signal_handlers()
    try:
        daemon.start()
    except OSError as e:
        daemon.poller.close()
        raise UsageError(str(e)) from None
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
            configmod.load(args.config)
        except configmod.ConfigError as e:
            problems = "; ".join(f"{p}: {m}" if p else m for p, m in e.problems)
            log.error("SIGHUP: %s is not valid, the running config stays: %s", e.source, problems)
            continue
        log.info("SIGHUP: the config is valid; restarting with it")
        daemon.notifier.reloading()
        _stop_within_grace(daemon, reloading=True)
        logging.shutdown()
        os.execv(sys.executable, [sys.executable, "-m", "rigmon", *sys.argv[1:]])
    if not _stop_within_grace(daemon):
        return 0  # what could not finish in time is abandoned; the spool keeps the rest
    log.info("stopped after %.0f s, %d polls (%d skipped)", time.monotonic() - started, daemon.stats.polls,
             daemon.stats.skipped)
    return 0


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


def _lock_state_dir(state_dir) -> int | None:
    """One daemon per state directory: two would send and delete each other's spool segments and
    book each job twice. The lock is the kernel's (flock): a crashed daemon holds none."""
    import errno
    import fcntl

    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(state_dir / "rigmon.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None  # the spool and ledger report what is wrong with the directory
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise UsageError(f"another rigmon daemon uses the state directory {state_dir}: stop it first, or give "
                             f"this one its own daemon.state_dir") from None
        return None
    return fd


def _stop_within_grace(daemon: Daemon, reloading: bool = False) -> bool:
    """Warm stop within STOP_GRACE_SECONDS (plus the running poll); True when it finished."""
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    stopper = threading.Thread(target=daemon.stop, args=(deadline, reloading), daemon=True)
    stopper.start()
    stopper.join(STOP_GRACE_SECONDS + 0.8)
    if stopper.is_alive():
        log.error("warm stop took over %.0f s; exiting anyway (the spool keeps what was not sent)",
                  STOP_GRACE_SECONDS)
        return False
    return True
