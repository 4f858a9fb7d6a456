"""Durations as the config and the rules write them: seconds, or "30s", "10m", "1h30m", "7d"."""

from __future__ import annotations

import math
import re
from typing import Any

_DURATION = re.compile(
    r"^\s*(?:(\d+(?:\.\d+)?)w)?\s*(?:(\d+(?:\.\d+)?)d)?\s*(?:(\d+(?:\.\d+)?)h)?\s*"
    r"(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*$"
)


def parse_duration(value: Any) -> float:
    """Seconds from 30, 2.5, "30s", "10m", "1h30m", "7d", "2w"."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '10m'")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError("a duration must be a finite number of seconds")
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match and any(match.groups()):
            w, d, h, m, s = (float(g) if g else 0.0 for g in match.groups())
            return w * 604800 + d * 86400 + h * 3600 + m * 60 + s
    raise ValueError(f"not a duration: {value!r} (use seconds or e.g. '30s', '10m', '1h', '7d')")


def format_duration(seconds: float) -> str:
    """The shortest duration string that parses back to ``seconds``: 14400 → "4h", 90 → "1m30s", 86400 → "1d"."""
    if seconds != int(seconds) or seconds < 60:
        text = repr(float(seconds))
        text = f"{seconds:.20f}".rstrip("0") if "e" in text else text.removesuffix(".0")
        return f"{text}s"
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((d, "d"), (h, "h"), (m, "m"), (s, "s")) if n)
