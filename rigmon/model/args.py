"""Argument types for the command line: a number that is not finite, or out of range, is a
clear usage error (exit 2) at parse time, never a traceback later."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from .recording import MAX_GPUS  # NVML's own limit per box; also the most a recording may replay

DEFAULT_CONFIG = Path("/etc/rigmon/rigmon.toml")  # read where no --config is given, if it exists


class UsageError(Exception):
    """Bad input from the user: printed without a traceback, exit 2."""


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
    return value


def positive(text: str) -> float:
    """Seconds or hours that must be more than zero."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text!r}")
    return value


SPEED_RANGE = (0.01, 10000.0)  # a replay's clock: a hundredth of real time to ten thousand times as fast


def speed(text: str) -> float:
    """How many times as fast a replay runs: within SPEED_RANGE (past it a poll's interval is no
    longer a time a scheduler, or the history's buckets, can keep)."""
    value = _number(text)
    lo, hi = SPEED_RANGE
    if not lo <= value <= hi:
        raise argparse.ArgumentTypeError(f"must be {lo:g} to {hi:g}, not {text!r}")
    return value


def at_least_one(text: str) -> int:
    """A count of 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value} (--all for every one)")
    return value


def non_negative(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text!r}")
    return value


def _whole(text: str, lo: int, hi: int) -> int:
    """A whole number from ``lo`` to ``hi``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not lo <= value <= hi:
        raise argparse.ArgumentTypeError(f"must be {lo} to {hi}, not {value}")
    return value


def gpu_index(text: str) -> int:
    """A GPU's index, as nvidia-smi numbers them."""
    return _whole(text, 0, MAX_GPUS - 1)


def gpu_count(text: str) -> int:
    return _whole(text, 1, MAX_GPUS)


def port(text: str) -> int:
    """A TCP port: 0 (any free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535 (0: any free one), not {value}")
    return value
