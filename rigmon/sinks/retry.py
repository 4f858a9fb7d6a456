"""Retry pacing shared by the notifiers and the InfluxDB writer: exponential backoff with
jitter, capped, and the server's Retry-After when it gives one."""

from __future__ import annotations

import random


class Retry(Exception):
    """A failure worth trying again (timeouts, refused connections, 429, 5xx); ``after`` is
    the server's Retry-After in seconds, when it sent one."""

    def __init__(self, reason: str, after: float | None = None):
        super().__init__(reason)
        self.after = after


def retry_after(header: str | None) -> float | None:
    """Seconds from a Retry-After header (its delay-seconds form; an HTTP date gives None)."""
    if header and header.strip().replace(".", "", 1).isdigit():
        return float(header)
    return None


def backoff(attempt: int, initial: float, maximum: float, after: float | None = None) -> float:
    """Seconds to wait before attempt ``attempt + 1``: Retry-After if given, else
    initial × 2^(attempt-1), times a jitter of 0.5–1.5; never more than ``maximum`` (a server
    asking for an hour must not silence alerts or freeze writes for an hour)."""
    if after is not None:
        return min(max(after, 0.0), maximum)
    return float(min(maximum, initial * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5))
