"""Notifiers: deliver alert transitions to webhooks without ever blocking polling.

Each configured receiver has its own bounded queue and thread. Messages go out in order:
the oldest is retried (exponential backoff with jitter, honouring Retry-After) on
timeouts, connection errors, answers cut short, 429 and 5xx until it is delivered or older
than ``max_age``; a refusal (another 4xx, a redirect not followed) is tried again for
REFUSAL_PATIENCE seconds, then given up (counted, each cause logged once with the receiver's
words). A full queue drops its oldest message and counts it. Delivery errors are logged, never
raised. Each post is bounded (``post``): one deadline, an answer read up to a small size, no
redirect followed but a 307/308 to the same host where allowed. What is queued outlives a
reload and a restart (``kept``, ``take``), and Alertmanager's firing alerts are renewed by
the notifiers that follow (``track``).

Formats: ``webhook`` posts Alertmanager's webhook JSON (version 4), so receivers written
for Alertmanager work unchanged; ``slack`` and ``discord`` post their incoming-webhook JSON;
``ntfy`` posts the text with title, priority and tags headers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..alerts import runbook
from ..alerts.engine import Transition
from ..alerts.rules import SEVERITY_RANK
from .post import Failed, post
from .retry import Retry, backoff, retry_after

if TYPE_CHECKING:
    from ..config.schema import NotifierConfig

log = logging.getLogger(__name__)

ZERO_TIME = "0001-01-01T00:00:00Z"
MAX_CAUSES = 1024  # refusals remembered, to log each once: bounded whatever a receiver answers
REFUSAL_PATIENCE = 30.0  # seconds a refused message is tried again before it is given up (a proxy's passing 404)
NTFY_PRIORITY = {"critical": "5", "warning": "4", "info": "3"}
EMOJI = {"critical": "🔴", "warning": "🟠", "info": "🔵", "resolved": "✅"}


@dataclass(frozen=True)
class Message:
    transition: Transition
    host: str
    reminder: bool
    queued_at: float
    box_labels: tuple[tuple[str, str], ...] = ()  # [daemon] labels: site, rack…


class Permanent(Exception):
    """The receiver refused the message (a 4xx other than 429, a redirect not followed): tried
    again for REFUSAL_PATIENCE seconds, then given up."""


def _rfc3339(t: float | None) -> str:
    if t is None:
        return ZERO_TIME
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_HEADLINE_NAME = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")  # a headline names labels, {name} alone


def _labels_and_annotations(m: Message, runbook_base: str = "", **more: str) -> tuple[dict[str, str], dict[str, str]]:
    """An alert's labels (the box's own, then rigmon's, then its subject's) and annotations: the
    PromQL rules' (summary; description; runbook_url: the box's /runbook at the rule), and the
    engine's extras: detail and hint. Posted to Alertmanager beside its PromQL twin, the summary
    is the rule's headline in the labels' words, as the twin's, and the summary with its values
    goes as the detail."""
    t = m.transition
    labels = {
        **dict(m.box_labels),
        "alertname": t.alertname,
        "severity": t.severity,
        "host": m.host,
        **more,
        **t.labels,
    }
    # Alertmanager's API (with the box's instance, as Prometheus's alerts): the PromQL twin's words
    headline = _HEADLINE_NAME.sub(lambda n: labels.get(n[1], "n/a"), t.headline) if "instance" in more else ""
    annotations = {
        k: v
        for k, v in (
            ("summary", headline or t.summary),
            ("detail", t.summary if headline else ""),
            ("description", t.description),
            ("runbook_url", runbook.url(runbook_base, t.alertname)),
            ("hint", t.hint),
        )
        if v
    }
    return labels, annotations


def alertmanager_alert(
    m: Message, instance: str, page_url: str, ends_at: float | None, runbook_base: str = ""
) -> dict[str, Any]:
    """One alert as Alertmanager's API v2 takes it: the labels a PromQL rule's alert would have
    (``instance`` the box's host:port, so the shipped inhibit rules match it to its box alone),
    and ``endsAt`` set: when resolved, its end; while firing, a few minutes ahead, renewed by
    the next post, so an alert whose box stops posting resolves on its own.

    Alertmanager keeps the wall's time: a replay run faster than the wall (``--speed``) stamps
    its alerts ahead of it, so a start or end is posted no later than now, and a resolved
    alert ends at once, as the replay says, rather than when the wall reaches the replay."""
    t = m.transition
    labels, annotations = _labels_and_annotations(m, runbook_base, instance=instance)
    now = time.time()
    return {
        "labels": labels,
        "annotations": annotations,
        "startsAt": _rfc3339(min(t.starts_at, now) if t.starts_at is not None else None),
        "endsAt": _rfc3339(min(ends_at, now) if ends_at is not None and t.status == "resolved" else ends_at),
        "generatorURL": page_url,
    }


def alertmanager_payload(m: Message, receiver: str, page_url: str = "", runbook_base: str = "") -> dict[str, Any]:
    """One transition as Alertmanager's webhook JSON (version 4); ``page_url``, the box's page,
    is its generatorURL and externalURL (Alertmanager's own: where a person goes to see it)."""
    t = m.transition
    labels, annotations = _labels_and_annotations(m, runbook_base)
    fingerprint = hashlib.sha256(json.dumps(sorted(labels.items())).encode()).hexdigest()[:16]
    alert = {
        "status": t.status,
        "labels": labels,
        "annotations": annotations,
        "startsAt": _rfc3339(t.starts_at),
        "endsAt": _rfc3339(t.ends_at),
        "generatorURL": page_url,
        "fingerprint": fingerprint,
    }
    return {
        "version": "4",
        "groupKey": f'{{}}:{{alertname="{t.alertname}", host="{m.host}"}}',
        "truncatedAlerts": 0,
        "status": t.status,
        "receiver": receiver,
        "groupLabels": {"alertname": t.alertname, "host": m.host},
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": page_url,
        "alerts": [alert],
    }


MAX_TEXT = 4096  # characters of a kept message's text: what a restart reads back is bounded
MAX_VALUES = 64


def message_data(m: Message) -> dict[str, Any]:
    """A queued message as plain data, kept across a reload or a restart."""
    t = m.transition
    return {"transition": {**t._asdict(), "values": _plain(t.values)}, "reminder": m.reminder, "queued_at": m.queued_at}


def _plain(values: Any) -> dict[str, Any]:
    if not isinstance(values, dict):
        return {}
    out = {}
    for k, v in list(values.items())[:MAX_VALUES]:
        if isinstance(k, str) and (v is None or isinstance(v, (bool, int, float)) or isinstance(v, str)):
            if isinstance(v, float) and not math.isfinite(v):
                v = None
            out[k[:80]] = v[:200] if isinstance(v, str) else v
    return out


def _time(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e11:
        raise ValueError(f"not a time: {v!r}")
    return float(v)


def message_of(data: Any, host: str, box_labels: tuple[tuple[str, str], ...]) -> Message:
    """A kept message read back (``message_data``), every field checked: ValueError where one
    is not what it must be."""
    t = data["transition"]
    text = {k: t[k] if isinstance(t[k], str) else "" for k in ("alertname", "summary", "description", "hint")}
    if not text["alertname"] or t["status"] not in ("firing", "resolved") or t["severity"] not in SEVERITY_RANK:
        raise ValueError("not a transition")
    labels = t["labels"]
    if not isinstance(labels, dict) or len(labels) > 32:
        raise ValueError("bad labels")
    transition = Transition(
        status=t["status"],
        alertname=text["alertname"][:200],
        severity=t["severity"],
        labels={str(k)[:100]: str(v)[:MAX_TEXT] for k, v in labels.items()},
        summary=text["summary"][:MAX_TEXT],
        description=text["description"][:MAX_TEXT],
        hint=text["hint"][:MAX_TEXT],
        starts_at=_time(t["starts_at"]),
        ends_at=None if t.get("ends_at") is None else _time(t["ends_at"]),
        time=_time(t["time"]),
        values=_plain(t.get("values")),
        reason=str(t.get("reason") or "")[:MAX_TEXT],
        headline=t["headline"][:MAX_TEXT] if isinstance(t.get("headline"), str) else "",
    )
    return Message(transition, host, bool(data.get("reminder")), _time(data["queued_at"]), box_labels)


def text(m: Message) -> tuple[str, str]:
    """(title, body) for chat receivers."""
    t = m.transition
    state = "RESOLVED" if t.status == "resolved" else ("still firing" if m.reminder else "FIRING")
    where = m.host + "".join(f" {k}={v}" for k, v in m.box_labels)
    title = f"[{state}] {t.alertname} on {where} ({t.severity})"
    lines = [t.summary]
    if t.description and t.status == "firing":
        lines.append(t.description)
    if t.hint and t.status == "firing":
        lines.append(f"Check: {t.hint}")
    return title, "\n".join(lines)


def peers(config: NotifierConfig) -> list[tuple[str, str]]:
    """(name, URL) of each receiver one ``[[notifiers]]`` entry posts to: its URL, or each of an
    Alertmanager cluster's peers, named name-1, name-2… (each gets every alert, from its own
    queue, as Prometheus sends them)."""
    name, url = config.name or config.type, config.url
    if not isinstance(url, list):
        return [(name, url.get_secret_value())]
    if len(url) == 1:
        return [(name, url[0].get_secret_value())]
    return [(f"{name}-{i}", u.get_secret_value()) for i, u in enumerate(url, 1)]


class Notifier:
    def __init__(
        self,
        config: NotifierConfig,
        host: str,
        labels: dict[str, str] | None = None,
        port: int = 9963,
        page_url: str = "",
        peer: tuple[str, str] | None = None,
        instance: str | None = None,
        runbook_base: str = "",
    ):
        """``peer``: the (name, URL) this one posts to, of the entry's ``peers``; default its first."""
        self.config = config
        self.name, self._url = peer or peers(config)[0]
        self.host = host
        self.box_labels = tuple(sorted((labels or {}).items()))
        self.instance = instance or f"{host}:{port}"  # as Prometheus calls the box: [daemon] instance
        self.page_url = page_url
        self.runbook_base = runbook_base  # an alert's runbook_url: its /runbook#alertname
        # alertmanager: the firing alerts, posted again every resend_interval (Alertmanager ends
        # an alert whose endsAt passes, so a firing one must be renewed, as Prometheus does)
        self._firing: dict[str, Transition] = {}
        self._causes: set[tuple[str, str]] = set()  # refusals logged once: (alertname, the answer)
        self._resend_at = time.monotonic() + config.resend_interval
        self._queue: deque[Message] = deque()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self.sent = 0
        self.failed = 0
        self.dropped = 0
        # failed tries by kind: timeout, connection, truncated, server, refused, redirect
        self.errors: Counter[str] = Counter()
        self.backing_off = False  # asleep between retries: nothing will go out before the next try
        self._thread = threading.Thread(target=self._run, name=f"rigmon-notify-{self.name}", daemon=True)
        self._thread.start()

    def submit(self, transition: Transition, reminder: bool = False) -> None:
        if SEVERITY_RANK[transition.severity] < SEVERITY_RANK[self.config.min_severity]:
            return
        with self._cond:
            if self.config.type == "alertmanager":
                if transition.status == "firing":
                    self._firing[transition.key] = transition
                else:
                    self._firing.pop(transition.key, None)
            if len(self._queue) >= self.config.queue_size:
                lost = self._queue.popleft()
                self.dropped += 1
                log.error(
                    "notifier %s: queue full, dropped %s %s",
                    self.name,
                    lost.transition.status,
                    lost.transition.alertname,
                )
            self._queue.append(Message(transition, self.host, reminder, time.time(), self.box_labels))
            self._cond.notify()

    @property
    def key(self) -> str:
        """What a kept queue is matched on at the next start: the name, the type and where it posts
        (as a digest: the URL may hold a token)."""
        return f"{self.name} {self.config.type} {hashlib.sha256(self._url.encode()).hexdigest()[:16]}"

    def kept(self) -> dict[str, Any]:
        """What is queued, as plain data for the next process (``take``)."""
        with self._cond:
            return {"key": self.key, "queue": [message_data(m) for m in self._queue]}

    def take(self, kept: dict[str, Any]) -> int:
        """The messages an earlier process had queued for this receiver, first in the queue (a
        message that does not read is skipped); how many were taken."""
        messages = []
        for data in kept.get("queue", ())[: self.config.queue_size]:
            try:
                messages.append(message_of(data, self.host, self.box_labels))
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
        with self._cond:
            self._queue.extendleft(reversed(messages))
            while len(self._queue) > self.config.queue_size:
                self._queue.pop()
                self.dropped += 1
            self._cond.notify()
        return len(messages)

    def track(self, firing: list[Transition]) -> None:
        """Alertmanager: the alerts firing as this notifier starts (carried over a reload or a
        restart), renewed each minute from now as if it had posted them itself."""
        if self.config.type != "alertmanager":
            return
        with self._cond:
            for t in firing:
                if SEVERITY_RANK[t.severity] >= SEVERITY_RANK[self.config.min_severity]:
                    self._firing[t.key] = t

    @property
    def pending(self) -> int:
        return len(self._queue)

    def _run(self) -> None:
        attempt = 0
        refused_since: float | None = None  # when the message at the head was first refused
        while not self._stop.is_set():
            with self._cond:
                while not self._queue and not self._stop.is_set():
                    self._cond.wait(1.0)
                    self._renew()
                if self._stop.is_set() and not self._queue:
                    return
                message = self._queue[0]
            if time.time() - message.queued_at > self.config.max_age:
                self._drop(message, f"older than max_age ({self.config.max_age:.0f} s)")
                attempt, refused_since = 0, None
                continue
            try:
                self.send(message)
            except (Retry, Permanent) as e:
                if isinstance(e, Permanent):
                    now = time.monotonic()
                    refused_since = now if refused_since is None else refused_since
                    if now - refused_since >= REFUSAL_PATIENCE:
                        self._refused(message, str(e))
                        attempt, refused_since = 0, None
                        continue
                attempt += 1
                delay = backoff(attempt, self.config.retry_initial, self.config.retry_max, getattr(e, "after", None))
                if attempt == 1 or attempt % 10 == 0:
                    log.warning(
                        "notifier %s: %s %s: %s; retrying (attempt %d, next in %.1f s, %d queued)",
                        self.name,
                        message.transition.status,
                        message.transition.alertname,
                        e,
                        attempt,
                        delay,
                        len(self._queue),
                    )
                self.backing_off = True
                stopped = self._stop.wait(delay)
                self.backing_off = False
                if stopped:
                    return
                continue
            except Exception as e:  # anything else fails this message, never the thread
                # the type only: messages of URL errors carry the URL, whose path is a secret
                self._drop(message, f"{type(e).__name__} (not retried)")
                attempt, refused_since = 0, None
                continue
            with self._cond:
                if self._queue and self._queue[0] is message:
                    self._queue.popleft()
            self.sent += 1
            if attempt:
                log.info("notifier %s: delivered after %d retries", self.name, attempt)
            attempt, refused_since = 0, None

    def _drop(self, message: Message, why: str) -> None:
        with self._cond:
            if self._queue and self._queue[0] is message:
                self._queue.popleft()
        log.error(
            "notifier %s: gave up on %s %s: %s", self.name, message.transition.status, message.transition.alertname, why
        )
        self.failed += 1  # after its log line: whoever sees the count finds the line

    def _refused(self, message: Message, why: str) -> None:
        """Refused for REFUSAL_PATIENCE seconds: the message is dropped and counted. Each cause
        (the alert and the receiver's answer) is logged once, not at every renewal. An
        Alertmanager's firing alert stays among those renewed each minute: a refusal that passes
        (a proxy's 404 while it restarts) keeps no alert out of it for longer."""
        t = message.transition
        cause = (t.alertname, why)
        with self._cond:
            if self._queue and self._queue[0] is message:
                self._queue.popleft()
        if cause in self._causes:
            log.debug("notifier %s: refused %s %s again: %s", self.name, t.status, t.alertname, why)
            self.failed += 1
            return
        if len(self._causes) < MAX_CAUSES:
            self._causes.add(cause)
        log.error(
            "notifier %s: refused %s %s: %s; given up after %.0f s of tries (check its URL, credentials "
            "and version); the same refusal again is logged at debug",
            self.name,
            t.status,
            t.alertname,
            why,
            REFUSAL_PATIENCE,
        )
        self.failed += 1  # after its log line: whoever sees the count finds the line

    # --- one delivery --------------------------------------------------------------------
    def request(self, message: Message) -> tuple[bytes, dict[str, str]]:
        kind = self.config.type
        headers = {"User-Agent": "rigmon", **{k: v.get_secret_value() for k, v in self.config.headers.items()}}
        if self.config.token is not None:
            headers["Authorization"] = f"Bearer {self.config.token.get_secret_value()}"
        title, body = text(message)
        t = message.transition
        data: dict[str, Any] | list[dict[str, Any]]
        if kind == "webhook":
            data = alertmanager_payload(message, self.name, self.page_url, self.runbook_base)
        elif kind == "alertmanager":
            ends = t.ends_at if t.status == "resolved" else time.time() + 5 * self.config.resend_interval
            data = [alertmanager_alert(message, self.instance, self.page_url, ends, self.runbook_base)]
        elif kind == "slack":
            icon = EMOJI["resolved" if t.status == "resolved" else t.severity]
            data = {"text": f"{icon} *{title}*\n{body}"}
        elif kind == "discord":
            icon = EMOJI["resolved" if t.status == "resolved" else t.severity]
            data = {"content": f"{icon} **{title}**\n{body}"[:2000], "allowed_mentions": {"parse": []}}
        else:  # ntfy
            headers.update(
                {
                    "Title": title.encode("utf-8").decode("latin-1", "replace"),
                    "Priority": "3" if t.status == "resolved" else NTFY_PRIORITY[t.severity],
                    "Tags": "white_check_mark" if t.status == "resolved" else f"warning,{t.alertname}",
                    "Content-Type": "text/plain; charset=utf-8",
                }
            )
            return body.encode(), headers
        headers["Content-Type"] = "application/json"
        return json.dumps(data).encode(), headers

    def _renew(self) -> None:
        """alertmanager, the queue empty: every resend_interval, the firing alerts again."""
        if self.config.type != "alertmanager" or time.monotonic() < self._resend_at:
            return
        self._resend_at = time.monotonic() + self.config.resend_interval
        now = time.time()
        self._queue.extend(Message(t, self.host, True, now, self.box_labels) for t in self._firing.values())

    def send(self, message: Message) -> None:
        body, headers = self.request(message)
        url = self._url.rstrip("/") + "/api/v2/alerts" if self.config.type == "alertmanager" else self._url
        try:
            answer = post(url, body, headers, self.config.timeout, self.config.follow_redirects)
        except Failed as e:
            self.errors[e.kind] += 1
            raise Retry(str(e)) from None
        status = answer.status
        if 200 <= status < 300:
            return
        said = f": {answer.excerpt}" if answer.excerpt else ""
        if status == 429 or 500 <= status < 600:
            self.errors["server"] += 1
            after = retry_after(answer.headers.get("Retry-After") if answer.headers else None)
            raise Retry(f"HTTP {status} {answer.reason}{said}", after)
        if 300 <= status < 400:
            self.errors["redirect"] += 1
            raise Permanent(
                f"HTTP {status} {answer.reason}, a redirect to {answer.location or 'nowhere'}: not followed "
                + (
                    "(only a 307 or 308 to the same host is, with follow_redirects); "
                    if self.config.follow_redirects
                    else "(follow_redirects is off); "
                )
                + "set the notifier's url to where it points"
            )
        self.errors["refused"] += 1
        raise Permanent(f"HTTP {status} {answer.reason}{said}")

    def close(self, deadline: float | None = None, timeout: float = 2.0) -> None:
        """Deliver what is queued until ``deadline`` (monotonic; else ``timeout`` from now),
        then stop. A notifier asleep between retries cannot deliver: it stops at once."""
        deadline = deadline if deadline is not None else time.monotonic() + timeout
        while self._queue and not self.backing_off and time.monotonic() < deadline:
            time.sleep(0.02)
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(max(0.0, min(0.5, deadline - time.monotonic())))
