"""What the sub-commands share: the config and source options, the replay they ask for, and
a watch that Ctrl-C or SIGTERM ends. Everything below ``rigmon.commands`` is imported from
here, never the other way round."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..model import args as argtypes
from ..model.args import DEFAULT_CONFIG, UsageError
from ..model.recording import Recording, demo_path

if TYPE_CHECKING:
    from ..config.schema import Config
    from ..config.settings import Settings

__all__ = [
    "UsageError",
    "add_config",
    "add_source",
    "demo_path",
    "load_config",
    "load_settings",
    "replay_source",
    "stop_on_signals",
]


def add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", metavar="FILE", help=f"config file (default {DEFAULT_CONFIG} if it exists)")


def add_source(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--replay", metavar="FILE", help="read a rigmon recording instead of the hardware")
    g.add_argument("--demo", action="store_true", help="replay the bundled H200 recording (no GPU needed)")
    p.add_argument(
        "--replay-gpus",
        type=argtypes.gpu_count,
        metavar="N",
        help=f"widen the replayed recording to N GPUs (1 to {argtypes.MAX_GPUS})",
    )


def load_config(args) -> Config:
    from ..config.schema import load

    return load(args.config)


def load_settings(args) -> Settings:
    """The config as a one-shot command reads it: validated once per change of the file (or of
    the environment it names), kept in the user's cache without its secrets (rigmon.config.settings)."""
    from ..config.settings import cached

    def validate(path):
        from ..config import schema as configmod

        return configmod.settings(configmod.load(path))

    return cached(args.config, validate)


def replay_source(args, *, at: float = 0.0, realtime: bool = True, loop: bool = True, speed: float = 1.0):
    """The replay that --replay or --demo asks for, and a label for it; (None, "") for the hardware."""
    path = demo_path() if args.demo else args.replay
    if path is None:
        given = [flag for flag, value in (("--replay-gpus", args.replay_gpus), ("--at", at or None)) if value]
        if given:
            raise UsageError(
                f"{' and '.join(given)} {'go' if len(given) > 1 else 'goes'} only with --replay FILE or --demo"
            )
        return None, ""
    from ..readers.replay import ReplayClock, ReplaySource

    recording = Recording.load(path)
    if not recording.ticks:
        raise UsageError(f"{path}: the recording has no ticks")
    if at > recording.duration:
        raise UsageError(f"--at {at:g}: the recording lasts {recording.duration:.1f} s")
    if args.replay_gpus is not None:
        recording = recording.widened(args.replay_gpus, shared=True)  # read only
    clock = ReplayClock(start_at=at, speed=speed, realtime=realtime)
    return ReplaySource(recording, clock, loop=loop), f"[replay {Path(path).name}]"


def stop_on_signals() -> None:
    """Ctrl-C and SIGTERM end a watch, even when started from a shell that ignores SIGINT
    for background jobs (Python then installs no KeyboardInterrupt handler of its own)."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
