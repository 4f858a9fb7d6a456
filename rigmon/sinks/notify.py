"""Notifiers: deliver alert transitions to webhooks without ever blocking polling.

Each configured receiver has its own bounded queue and thread. Messages go out in order:
the oldest is retried (exponential backoff with jitter, honouring Retry-After) on
timeouts, connection errors, 429 and 5xx until it is delivered or older than ``max_age``;
other 4xx answers are permanent (counted, dropped, each cause logged once). A full queue drops its oldest
message and counts it. Delivery errors are logged, never raised.

Formats: ``webhook`` posts Alertmanager's webhook JSON (version 4), so receivers written
for Alertmanager work unchanged; ``slack`` and ``discord`` post their incoming-webhook JSON;
``ntfy`` posts the text with title, priority and tags headers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..alerts.engine import Transition
from ..alerts.rules import SEVERITY_RANK
from .retry import Retry, backoff, retry_after

if TYPE_CHECKING:
    from ..config.schema import NotifierConfig

log = logging.getLogger(__name__)

ZERO_TIME = "0001-01-01T00:00:00Z"
MAX_CAUSES = 1024  # refusals remembered, to log each once: bounded whatever a receiver answers
RESEND = 60.0  # seconds between posts of a firing alert to Alertmanager (Prometheus: 1 min)
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
    """The receiver refused the message for good (4xx other than 429)."""


def _rfc3339(t: float | None) -> str:
    if t is None:
        return ZERO_TIME
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _labels_and_annotations(m: Message, **more: str) -> tuple[dict[str, str], dict[str, str]]:
    """An alert's labels (the box's own, then rigmon's, then its subject's) and annotations."""
    t = m.transition
    labels = {
        **dict(m.box_labels),
        "alertname": t.alertname,
        "severity": t.severity,
        "host": m.host,
        **more,
        **t.labels,
    }
    annotations = {k: v for k, v in (("summary", t.summary), ("description", t.description), ("hint", t.hint)) if v}
    return labels, annotations


def alertmanager_alert(m: Message, instance: str, page_url: str, ends_at: float | None) -> dict[str, Any]:
    """One alert as Alertmanager's API v2 takes it: the labels a PromQL rule's alert would have
    (``instance`` the box's host:port, so the shipped inhibit rules match it to its box alone),
    and ``endsAt`` set: when resolved, its end; while firing, a few minutes ahead, renewed by
    the next post, so an alert whose box stops posting resolves on its own."""
    t = m.transition
    labels, annotations = _labels_and_annotations(m, instance=instance)
    return {
        "labels": labels,
        "annotations": annotations,
        "startsAt": _rfc3339(t.starts_at),
        "endsAt": _rfc3339(ends_at),
        "generatorURL": page_url,
    }


def alertmanager_payload(m: Message, receiver: str, page_url: str = "") -> dict[str, Any]:
    """One transition as Alertmanager's webhook JSON (version 4); ``page_url``, the box's page,
    is its generatorURL and externalURL (Alertmanager's own: where a person goes to see it)."""
    t = m.transition
    labels, annotations = _labels_and_annotations(m)
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
    ):
        """``peer``: the (name, URL) this one posts to, of the entry's ``peers``; default its first."""
        self.config = config
        self.name, self._url = peer or peers(config)[0]
        self.host = host
        self.box_labels = tuple(sorted((labels or {}).items()))
        self.instance = f"{host}:{port}"
        self.page_url = page_url
        # alertmanager: the firing alerts, posted again every RESEND seconds (Alertmanager ends
        # an alert whose endsAt passes, so a firing one must be renewed, as Prometheus does)
        self._firing: dict[str, Transition] = {}
        self._causes: set[tuple[str, str]] = set()  # refusals logged once: (alertname, the answer)
        self._resend_at = time.monotonic() + RESEND
        self._queue: deque[Message] = deque()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self.sent = 0
        self.failed = 0
        self.dropped = 0
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
    def pending(self) -> int:
        return len(self._queue)

    def _run(self) -> None:
        attempt = 0
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
                attempt = 0
                continue
            try:
                self.send(message)
            except Retry as e:
                attempt += 1
                delay = backoff(attempt, self.config.retry_initial, self.config.retry_max, e.after)
                if attempt == 1 or attempt % 10 == 0:
                    log.warning(
                        "notifier %s: %s; retrying (attempt %d, next in %.1f s, %d queued)",
                        self.name,
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
            except Permanent as e:
                self._refused(message, str(e))
                attempt = 0
                continue
            except Exception as e:  # anything else fails this message, never the thread
                # the type only: messages of URL errors carry the URL, whose path is a secret
                self._drop(message, f"{type(e).__name__} (not retried)")
                attempt = 0
                continue
            with self._cond:
                if self._queue and self._queue[0] is message:
                    self._queue.popleft()
            self.sent += 1
            if attempt:
                log.info("notifier %s: delivered after %d retries", self.name, attempt)
            attempt = 0

    def _drop(self, message: Message, why: str) -> None:
        with self._cond:
            if self._queue and self._queue[0] is message:
                self._queue.popleft()
        self.failed += 1
        log.error(
            "notifier %s: gave up on %s %s: %s", self.name, message.transition.status, message.transition.alertname, why
        )

    def _refused(self, message: Message, why: str) -> None:
        """A 4xx other than 429: the message is dropped and counted, never retried. Each cause
        (the alert and the answer) is logged once, not at every renewal: and Alertmanager's
        renewals of that alert stop until it changes (a firing alert it refused would be posted,
        and refused, every minute for as long as it fires)."""
        t = message.transition
        cause = (t.alertname, why)
        with self._cond:
            if self._queue and self._queue[0] is message:
                self._queue.popleft()
            if self._firing.get(t.key) is t:
                del self._firing[t.key]
        self.failed += 1
        if cause in self._causes:
            log.debug("notifier %s: refused %s %s again: %s", self.name, t.status, t.alertname, why)
            return
        if len(self._causes) < MAX_CAUSES:
            self._causes.add(cause)
        log.error(
            "notifier %s: refused %s %s: %s; not retried (the receiver rejects it: check its URL, "
            "credentials and version); the same refusal again is logged at debug",
            self.name,
            t.status,
            t.alertname,
            why,
        )

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
            data = alertmanager_payload(message, self.name, self.page_url)
        elif kind == "alertmanager":
            ends = t.ends_at if t.status == "resolved" else time.time() + 5 * RESEND
            data = [alertmanager_alert(message, self.instance, self.page_url, ends)]
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
        """alertmanager, the queue empty: every RESEND seconds, the firing alerts again."""
        if self.config.type != "alertmanager" or time.monotonic() < self._resend_at:
            return
        self._resend_at = time.monotonic() + RESEND
        now = time.time()
        self._queue.extend(Message(t, self.host, True, now, self.box_labels) for t in self._firing.values())

    def send(self, message: Message) -> None:
        body, headers = self.request(message)
        url = self._url.rstrip("/") + "/api/v2/alerts" if self.config.type == "alertmanager" else self._url
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout) as response:
                response.read()
        except urllib.error.HTTPError as e:
            if e.code == 429 or e.code >= 500:
                after = retry_after(e.headers.get("Retry-After") if e.headers else None)
                raise Retry(f"HTTP {e.code}", after) from None
            raise Permanent(f"HTTP {e.code} {e.reason}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
            raise Retry(f"{type(e).__name__}: {getattr(e, 'reason', e)}") from None

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
