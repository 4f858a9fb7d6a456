"""The alert sink: runs the engine on every sample, logs every transition, hands them to
the notifiers (with a reminder every ``repeat_interval`` while firing), and exports the
alert state as metrics.

The engine belongs to the poll thread. Everything another thread reads (the HTTP server's
/metrics and /state) comes from an immutable ``AlertState`` built once per poll and published
by one attribute assignment: a scrape sees one poll's state, whole, and never a dict that the
poll thread is changing."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..alerts.engine import Alert, AlertEngine, PsuGroup, Transition, hint_of
from ..alerts.rules import SEVERITY_RANK, Rule, compile_rules
from ..model.sample import Sample
from .base import AlertState, Budget, FiringAlert, close_side_by_side

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from ..config.box import Box
    from ..config.schema import AlertsConfig, NotifierConfig
    from .notify import Notifier

log = logging.getLogger("rigmon.alerts")
_ALERT_LABELS = ("alertname", "severity", "subject")  # the alert's own: its subject's labels never replace them


MAX_CARRIED = 100_000  # alerts read back from a reload or a stop: bounded whatever the file says


def _gone(a: dict[str, Any], now: float) -> Transition:
    """A carried alert whose rule changed or went while rigmon was stopped, resolved."""
    return Transition(
        status="resolved",
        alertname=str(a["rule"])[:200],
        severity=a["severity"],
        labels={str(k)[:100]: str(v)[:1000] for k, v in dict(a["labels"]).items()},
        summary=str(a.get("summary", ""))[:4096],
        description="",
        hint="",
        starts_at=float(a.get("fired_at") or a["active_since"]),
        ends_at=now,
        time=now,
        values={},
        reason="its rule was changed or removed while rigmon was stopped",
    )


def firing_alert(alert: Alert) -> FiringAlert:
    return FiringAlert(
        alert.name,
        alert.severity,
        alert.subject,
        tuple(alert.labels.items()),
        alert.summary,
        alert.fired_at,
        hint_of(alert),
    )


def alert_dict(alert: Alert) -> dict[str, Any]:
    """A firing alert of an engine as plain data (rigmon status without a daemon)."""
    return firing_alert(alert).as_dict()


def _notifiers(config: NotifierConfig, box: Box) -> list[Notifier]:
    """One entry's notifiers (one per peer of an Alertmanager cluster), with the box's name,
    labels and page (its generatorURL for Alertmanager)."""
    from .notify import Notifier, peers  # urllib's client: only where a webhook is configured

    return [
        Notifier(
            config,
            box.host,
            labels=dict(box.labels),
            port=box.port,
            peer=peer,
            page_url=box.page_url,
            instance=box.instance,
            runbook_base=box.runbook_base,
        )
        for peer in peers(config)
    ]


def log_level(t: Transition) -> int:
    """The level a transition is logged at: WARNING for a warning or critical alert that fires,
    INFO for an info alert and for every resolution (the daemon's log and the burn-in's alike)."""
    return logging.WARNING if t.status == "firing" and t.severity != "info" else logging.INFO


class _Dumps(Protocol):
    def model_dump(self) -> dict[str, Any]: ...


def fingerprint(spec: _Dumps) -> str:
    """A rule as it is configured: equal before and after a reload when the reload left it alone."""
    return json.dumps(spec.model_dump(), sort_keys=True)  # a specs.RuleSpec or its settings view alike


def build_engine(config: AlertsConfig, rules: list[Rule] | None = None) -> AlertEngine:
    budget = config.power_budget
    groups = []
    if budget.watts is not None:
        groups.append(
            PsuGroup("all GPUs" + (" + CPU" if budget.include_cpu else ""), budget.watts, None, budget.include_cpu)
        )
    groups += [
        PsuGroup(g.name, g.watts, tuple(g.gpus) if g.gpus is not None else None, g.include_cpu, g.sensor)
        for g in budget.groups
    ]
    rules = rules if rules is not None else compile_rules(config)
    return AlertEngine(rules, groups, config.expected_sensors, config.unknown_timeout)


class AlertSink:
    """The rules on every sample, and what they tell: each transition logged and notified
    (``announce``), the alert state kept for scrapes, counted and exported."""

    name = "alerts"

    def __init__(
        self,
        config: AlertsConfig,
        box: Box,
        notify: Sequence[NotifierConfig] = (),
        notifiers: list[Notifier] | None = None,
        rules: list[Rule] | None = None,
        engine: AlertEngine | None = None,
        announce: bool = True,
    ):
        self.engine = engine if engine is not None else build_engine(config, rules)
        self.announce = announce
        self.latest: Sample | None = None
        # the notifiers handed in, else those of ``notify`` ([[notifiers]]) for this box
        self.notifiers = notifiers if notifiers is not None else [one for n in notify for one in _notifiers(n, box)]
        self.repeat_interval = config.repeat_interval
        self.transitions: Counter[tuple[str, str, str]] = Counter()
        self._last_sent: dict[str, float] = {}
        self.state = AlertState()  # replaced, never changed, once per poll

    def evaluate(self, sample: Sample) -> list[Transition]:
        """The rules on one sample: its transitions logged, counted and notified, and the state
        after it (``state``) kept for scrapes. The pipeline hands both on to the other sinks."""
        now = sample.time
        transitions = self.engine.evaluate(sample, now)
        self._announce(transitions, now)
        if self.repeat_interval > 0:
            for alert in self.engine.firing():
                key = alert.notification_key
                if now - self._last_sent.get(key, now) >= self.repeat_interval:
                    self._send(self.engine.transition_of(alert, now), reminder=True)
                    self._last_sent[key] = now
        self.state = self._snapshot(sample)
        return transitions

    def _announce(self, transitions: list[Transition], now: float) -> None:
        """Logged, counted and notified."""
        for t in transitions:
            if self.announce:
                log.log(log_level(t), "%s", t.line())
            self.transitions[(t.alertname, t.severity, t.status)] += 1
            self._send(t, reminder=False)
            if t.status == "resolved":
                self._last_sent.pop(t.key, None)
            else:
                self._last_sent[t.key] = now

    # --- across a reload or a restart ---------------------------------------------------------
    def carry(self, new_specs: dict[str, str] | None, now: float) -> tuple[list[dict[str, Any]], list[Transition]]:
        """Before a reload to rules ``new_specs`` ({name: fingerprint}): an alert whose rule the
        reload changes or removes is resolved now (logged, notified, and its transition returned
        second); the others are returned first as plain data for the next process to take up, with when each
        was last notified, so it neither fires again nor repeats a reminder early. ``new_specs``
        None (a stop): every alert is returned, with its rule's fingerprint for the next start to
        compare."""
        kept: list[dict[str, Any]] = []
        gone: list[Transition] = []
        for key, alert in list(self.engine.alerts.items()):
            if new_specs is None or new_specs.get(alert.rule.name) == fingerprint(alert.rule.spec):
                kept.append(
                    {
                        "rule": alert.rule.name,
                        "fingerprint": fingerprint(alert.rule.spec),
                        "severity": alert.severity,
                        "key": list(alert.key),
                        "labels": alert.labels,
                        "active_since": alert.active_since,
                        "state": alert.state,
                        "fired_at": alert.fired_at,
                        "summary": alert.summary,
                        "description": alert.description,
                        "announced": alert.announced,
                        "last_sent": self._last_sent.get(alert.notification_key),
                    }
                )
                continue
            del self.engine.alerts[key]
            if alert.announced:
                gone.append(self.engine.resolved(alert, now, "its rule was changed or removed by a reload"))
        self._announce(gone, now)
        return kept, gone

    def take_up(self, carried: list[dict[str, Any]], now: float | None = None) -> int:
        """The alerts a reload or a stop carried over (``carry``), for rules that are still the
        same: they go on as they were, without a new FIRING. One whose rule changed or went
        meanwhile (a restart with another config) and whose FIRING was told is resolved now."""
        rules = {rule.name: rule for rule in self.engine.rules}
        now = time.time() if now is None else now
        taken, gone = 0, []
        for a in carried[:MAX_CARRIED]:
            try:
                rule = rules.get(a["rule"])
                if rule is None or a.get("fingerprint", fingerprint(rule.spec)) != fingerprint(rule.spec):
                    if a["state"] == "firing" and a.get("announced", True) and a.get("severity") in SEVERITY_RANK:
                        gone.append(_gone(a, now))
                    continue
                alert = self.engine.adopt(
                    rule,
                    tuple(a["key"]),
                    {str(k): str(v) for k, v in a["labels"].items()},
                    float(a["active_since"]),
                    a["state"],
                    a.get("fired_at"),
                    str(a.get("summary", "")),
                    str(a.get("description", "")),
                    bool(a.get("announced", True)),
                )
                if a.get("last_sent") is not None:
                    self._last_sent[alert.notification_key] = float(a["last_sent"])
                taken += 1
            except (KeyError, TypeError, ValueError, AttributeError):
                continue  # a carried alert that does not read: it starts afresh, as at a start
        self._announce(gone, now)
        self.renew(now)
        return taken

    def renew(self, now: float) -> None:
        """Alertmanager's notifiers take up the alerts firing now, to renew them each minute."""
        firing = [self.engine.transition_of(alert, now) for alert in self.engine.firing()]
        for n in self.notifiers:
            n.track(firing)

    def kept_notifications(self) -> list[dict[str, Any]]:
        """What each notifier has queued, for the next process."""
        return [kept for kept in (n.kept() for n in self.notifiers) if kept["queue"]]

    def take_notifications(self, kept: list[Any]) -> int:
        """What an earlier process's notifiers had queued, each to the notifier that posts where
        it did; a queue whose receiver is no longer configured is said and let go."""
        by_key = {n.key: n for n in self.notifiers}
        taken = 0
        for entry in kept[: 4 * len(self.notifiers) + 4]:
            if not isinstance(entry, dict) or not isinstance(entry.get("queue"), list):
                continue
            notifier = by_key.get(str(entry.get("key")))
            if notifier is None:
                name = str(entry.get("key", "")).split(" ")[0][:80]
                log.warning(
                    "%d notification(s) queued for %s, no longer configured: dropped", len(entry["queue"]), name
                )
                continue
            taken += notifier.take(entry)
        return taken

    def _snapshot(self, sample: Sample) -> AlertState:
        entities = self.engine.entities(sample, complete=False)
        budgets = tuple(
            Budget(v["psu"], v["budget_watts"], v["draw_watts"]) for key, v in entities.items() if key[0] == "psu"
        )
        sensors = tuple(
            sorted(
                (v["sensor_kind"], v["sensor"], bool(v["present"])) for key, v in entities.items() if key[0] == "sensor"
            )
        )
        return AlertState(
            sample.time,
            tuple(firing_alert(a) for a in self.engine.firing()),
            tuple(sorted(self.transitions.items())),
            budgets,
            sensors,
            self.engine.fan_best(),
        )

    def _send(self, transition: Transition, reminder: bool) -> None:
        for notifier in self.notifiers:
            notifier.submit(transition, reminder)

    def collect(self) -> Iterator[Metric]:
        # on a scrape: one-shot commands (status) evaluate rules and never load the Prometheus client
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

        state = self.state  # one poll's state, whatever the poll thread does meanwhile
        # each alert with its subject's own labels (gpu, uuid; chip, fan; socket; psu…), as
        # Prometheus's ALERTS: a query joins an alert to the GPU's other series on gpu
        active = Metric(
            "rigmon_alert_active",
            "1 for each firing alert (from the last poll), with the labels of what it is about.",
            "gauge",
        )
        for alert in state.firing:
            labels = {k: v for k, v in alert.labels if k not in _ALERT_LABELS}
            labels.update(alertname=alert.alertname, severity=alert.severity, subject=alert.subject)
            active.add_sample("rigmon_alert_active", labels, 1)
        yield active
        # what SensorMissing knows, so a PromQL rule needs no look-back window: every sensor
        # the box has had (since start, or named in alerts.expected_sensors), 0 once it is gone
        present = GaugeMetricFamily(
            "rigmon_sensor_present",
            "1 while a sensor the box has had answers, 0 once it is gone (fans, temperatures, NVML).",
            labels=["sensor_kind", "sensor"],
        )
        for kind, name, answers in state.sensors:
            present.add_metric([kind, name], 1 if answers else 0)
        yield present
        # what GpuFanStalled holds a GPU fan against (its ever_max), for the same reason
        best = GaugeMetricFamily(
            "rigmon_gpu_fan_best_speed_rpm_per_ratio",
            "The best rpm a GPU fan has turned per unit of the speed asked (since the box was "
            "first watched): a fan far below it is stalled or failing.",
            labels=["gpu", "uuid", "fan"],
        )
        for gpu, uuid, fan, rpm in state.fan_best:
            best.add_metric([gpu, uuid, fan], rpm)
        yield best
        transitions = CounterMetricFamily(
            "rigmon_alert_transitions", "Alert transitions since start.", labels=["alertname", "severity", "status"]
        )
        for (name, severity, status), count in state.transitions:
            transitions.add_metric([name, severity, status], count)
        yield transitions
        sent = CounterMetricFamily("rigmon_notifications_sent", "Notifications delivered.", labels=["notifier"])
        failed = CounterMetricFamily(
            "rigmon_notifications_failed", "Notifications given up on (refused or too old).", labels=["notifier"]
        )
        dropped = CounterMetricFamily(
            "rigmon_notifications_dropped", "Notifications dropped from a full queue.", labels=["notifier"]
        )
        queued = GaugeMetricFamily(
            "rigmon_notifications_queued", "Notifications waiting for delivery.", labels=["notifier"]
        )
        errors = CounterMetricFamily(
            "rigmon_notification_errors",
            "Failed tries to post, by kind: timeout, connection, truncated, server (5xx, 429), refused "
            "(another 4xx), redirect (not followed).",
            labels=["notifier", "error"],
        )
        for n in self.notifiers:
            sent.add_metric([n.name], n.sent)
            failed.add_metric([n.name], n.failed)
            dropped.add_metric([n.name], n.dropped)
            queued.add_metric([n.name], n.pending)
            for kind, count in sorted(n.errors.items()):
                errors.add_metric([n.name, kind], count)
        yield from (sent, failed, dropped, queued, errors)
        budget = GaugeMetricFamily(
            "rigmon_power_budget_watts", "Configured power budget per PSU group.", labels=["psu"]
        )
        draw = GaugeMetricFamily(
            "rigmon_power_budget_draw_watts",
            "Power drawn against each budget (GPUs, plus the CPU package where counted).",
            labels=["psu"],
        )
        for b in state.budgets:
            budget.add_metric([b.psu], b.budget_watts)
            draw.add_metric([b.psu], b.draw_watts)
        yield from (budget, draw)

    def close(self, deadline: float | None = None) -> None:
        """Every notifier delivers what it can until the one shared deadline, side by side."""
        deadline = deadline if deadline is not None else time.monotonic() + 2.0
        close_side_by_side(self.notifiers, deadline, "notifiers")
        for n in self.notifiers:
            if n.pending:
                log.warning("notifier %s: %d message(s) undelivered at exit", n.name, n.pending)
