"""What every sink takes and how sinks stop: one ``PollResult`` per poll, handed to each sink
in turn, and one deadline that all of them close by, side by side."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from ..alerts.engine import Transition
    from ..model.sample import Sample
    from .jobs import Job

log = logging.getLogger(__name__)


class FiringAlert(NamedTuple):
    alertname: str
    severity: str
    subject: str
    labels: tuple[tuple[str, str], ...]
    summary: str
    since: float | None
    hint: str

    def as_dict(self) -> dict[str, Any]:
        """Plain data (the daemon's /state, rigmon status)."""
        return {
            "alertname": self.alertname,
            "severity": self.severity,
            "subject": self.subject,
            "labels": dict(self.labels),
            "summary": self.summary,
            "since": self.since,
            "hint": self.hint,
        }


class Budget(NamedTuple):
    psu: str
    budget_watts: float
    draw_watts: float


class AlertState(NamedTuple):
    """What one poll left: the firing alerts, the transition counts so far, the power budgets,
    every sensor the box has had (answering or not: (kind, name, present)), and each GPU fan's
    best rpm per asked speed so far ((gpu, uuid, fan, rpm))."""

    time: float | None = None
    firing: tuple[FiringAlert, ...] = ()
    transitions: tuple[tuple[tuple[str, str, str], int], ...] = ()
    budgets: tuple[Budget, ...] = ()
    sensors: tuple[tuple[str, str, bool], ...] = ()
    fan_best: tuple[tuple[str, str, str, float], ...] = ()


class PollResult(NamedTuple):
    """One poll and what it made: the sample, the alerts' transitions and state after it, the
    jobs it ended, and any points its loop adds (the burn-in's progress). ``sample`` is None
    for what happens between polls: the alerts a reload resolves, the burn-in's verdict."""

    sample: Sample | None
    transitions: tuple[Transition, ...] = ()
    alerts: AlertState | None = None
    finished_jobs: tuple[Job, ...] = ()
    lines: tuple[str, ...] = ()
    duration_seconds: float = 0.0


class Sink(Protocol):
    def consume(self, result: PollResult) -> None:
        """Called on the poll's thread after every poll: must not block on I/O."""

    def close(self, deadline: float) -> None:
        """Deliver what is held until ``deadline`` (time.monotonic()), then give up."""


def close_side_by_side(closables: Iterable[Any], deadline: float, what: str = "stop") -> list[str]:
    """``close(deadline)`` on each, each on its own thread, all waited for until the one
    ``deadline``; returns the names of those still closing then (abandoned, logged)."""
    threads = []
    for c in closables:
        name = getattr(c, "name", None) or type(c).__name__
        threads.append(
            threading.Thread(target=_close, args=(c, name, deadline), daemon=True, name=f"rigmon-close-{name}")
        )
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    late = [t.name.removeprefix("rigmon-close-") for t in threads if t.is_alive()]
    if late:
        log.warning("%s: %s still closing at the deadline; abandoned", what, ", ".join(late))
    return late


def _close(closable: Any, name: str, deadline: float) -> None:
    try:
        closable.close(deadline)
    except Exception:
        log.exception("closing %s failed", name)
