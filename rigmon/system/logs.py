"""Logging set-up, and a filter that says a repeated message once with a count."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from ..model.text import printable, printable_lines

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class SafeFormatter(logging.Formatter):
    """A record is one line, whatever its arguments hold: a process's command line or a GPU's
    name with a newline cannot forge a log line, nor an escape sequence reach the terminal or
    the journal's reader. A traceback keeps its lines, each made printable."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return printable_lines(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return printable_lines(stack_info)


class RepeatFilter(logging.Filter):
    """Lets a message through once; identical repeats are counted, and reported as
    "previous message repeated N times" when another message comes or every ``every`` seconds."""

    def __init__(self, every: float = 600.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self._every = every
        self._clock = clock
        self._last: tuple[str, int, str] | None = None
        self._repeats = 0
        self._since = 0.0

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_rigmon_summary", False):
            return True
        key = (record.name, record.levelno, record.getMessage())
        now = self._clock()
        if key == self._last:
            self._repeats += 1
            if now - self._since < self._every:
                return False
            record.msg, record.args = f"{key[2]} (repeated {self._repeats} times in {now - self._since:.0f} s)", ()
            self._repeats, self._since = 0, now
            return True
        if self._repeats and self._last is not None:
            summary = logging.LogRecord(
                self._last[0],
                self._last[1],
                __file__,
                0,
                "previous message repeated %d more times: %s",
                (self._repeats, self._last[2]),
                None,
            )
            summary._rigmon_summary = True
            logging.getLogger(self._last[0]).handle(summary)
        self._last, self._repeats, self._since = key, 0, now
        return True


def setup(level: str = "info", verbose: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    # journald adds its own timestamps; keep lines short and greppable
    handler.setFormatter(SafeFormatter(FORMAT))
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else getattr(logging, level.upper()))
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
