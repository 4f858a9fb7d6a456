"""Notifiers against a real HTTP receiver: formats, order, outages, refusals."""

import json
import time

import pytest
from receiver import Receiver
from servers import wait_for

from rigmon.alerts.engine import Transition
from rigmon.config.box import Box
from rigmon.config.schema import NotifierConfig
from rigmon.sinks import notify
from rigmon.sinks.notify import Message, Notifier, peers


def transition(n: int, status: str = "firing", severity: str = "critical") -> Transition:
    return Transition(
        status=status,
        alertname=f"Test{n}",
        severity=severity,
        labels={"gpu": str(n), "uuid": "GPU-x"},
        summary=f"summary {n}",
        description="desc",
        hint="check it",
        starts_at=1000.0 + n,
        ends_at=1010.0 + n if status == "resolved" else None,
        time=1000.0 + n,
        values={},
    )


def notifier(url: str, **kw) -> Notifier:
    config = NotifierConfig.model_validate(
        {
            "type": kw.pop("type", "webhook"),
            "url": url,
            "retry_initial": 0.05,
            "retry_max": 0.3,
            "min_severity": "info",
            **kw,
        }
    )
    return Notifier(config, "rig-01")


def test_alertmanager_webhook_format():
    receiver = Receiver()
    n = notifier(receiver.url, name="am")
    try:
        n.submit(transition(1))
        n.submit(transition(1, "resolved"))
        wait_for(lambda: len(receiver.bodies) == 2, 10)
        firing, resolved = receiver.json()
        assert firing["version"] == "4" and firing["status"] == "firing" and firing["receiver"] == "am"
        (alert,) = firing["alerts"]
        assert alert["labels"] == {
            "alertname": "Test1",
            "severity": "critical",
            "host": "rig-01",
            "gpu": "1",
            "uuid": "GPU-x",
        }
        assert alert["annotations"] == {"summary": "summary 1", "description": "desc", "hint": "check it"}
        assert alert["startsAt"] == "1970-01-01T00:16:41.000Z" and alert["endsAt"] == "0001-01-01T00:00:00Z"
        assert firing["groupLabels"] == {"alertname": "Test1", "host": "rig-01"} and alert["fingerprint"]
        assert resolved["status"] == "resolved" and resolved["alerts"][0]["endsAt"] == "1970-01-01T00:16:51.000Z"
        assert receiver.headers[0]["Content-Type"] == "application/json"
    finally:
        n.close()
        receiver.stop()


@pytest.mark.parametrize(
    "kind, check",
    [
        ("slack", lambda body, headers: "*[FIRING] Test1 on rig-01 (critical)*" in body["text"]),
        ("discord", lambda body, headers: "**[FIRING] Test1 on rig-01 (critical)**" in body["content"]),
    ],
)
def test_chat_formats(kind, check):
    receiver = Receiver()
    n = notifier(receiver.url, type=kind)
    try:
        n.submit(transition(1))
        wait_for(lambda: receiver.bodies, 10)
        assert check(receiver.json()[0], receiver.headers[0])
        assert "Check: check it" in str(receiver.json()[0])
    finally:
        n.close()
        receiver.stop()


def test_ntfy_format_and_token():
    receiver = Receiver()
    n = notifier(receiver.url, type="ntfy", token="tk_secret")
    try:
        n.submit(transition(1, severity="warning"))
        wait_for(lambda: receiver.bodies, 10)
        headers = receiver.headers[0]
        assert headers["Title"] == "[FIRING] Test1 on rig-01 (warning)" and headers["Priority"] == "4"
        assert headers["Authorization"] == "Bearer tk_secret"
        assert receiver.bodies[0].decode().startswith("summary 1")
    finally:
        n.close()
        receiver.stop()


def test_receiver_down_for_a_stretch_then_back_loses_nothing_and_keeps_order():
    receiver = Receiver()
    port = receiver.port
    n = notifier(receiver.url)
    try:
        for i in range(3):
            n.submit(transition(i))
        wait_for(lambda: len(receiver.bodies) == 3, 10)
        receiver.stop()
        for i in range(3, 20):
            n.submit(transition(i, "firing" if i % 2 else "resolved"))
            time.sleep(0.05)
        wait_for(lambda: n.backing_off, 10, what="the notifier to back off from refused connections")
        assert n.pending == 17 and n.sent == 3
        receiver = Receiver(port)
        wait_for(lambda: len(receiver.bodies) == 17, 20, what="the queued transitions")
        names = [b["alerts"][0]["labels"]["alertname"] for b in receiver.json()]
        assert names == [f"Test{i}" for i in range(3, 20)]
        assert n.sent == 20 and n.failed == 0 and n.dropped == 0
    finally:
        n.close()
        receiver.stop()


def test_server_errors_are_retried_and_client_errors_for_a_while(monkeypatch):
    monkeypatch.setattr(notify, "REFUSAL_PATIENCE", 0.5)
    receiver = Receiver()
    n = notifier(receiver.url)
    try:
        receiver.status = 503
        n.submit(transition(1))
        wait_for(lambda: receiver.requests >= 2, 10, what="a retry after the 503")
        assert receiver.bodies == [] and n.pending == 1
        receiver.status = 200
        wait_for(lambda: len(receiver.bodies) == 1, 10)
        receiver.status = 400
        n.submit(transition(2))
        wait_for(lambda: n.failed == 1, 10)
        receiver.status = 200
        n.submit(transition(3))
        wait_for(lambda: len(receiver.bodies) == 2, 10)
        assert [b["alerts"][0]["labels"]["alertname"] for b in receiver.json()] == ["Test1", "Test3"]
    finally:
        n.close()
        receiver.stop()


def test_full_queue_drops_the_oldest_and_counts(caplog):
    n = notifier("http://127.0.0.1:9/none", queue_size=3, retry_initial=5)
    try:
        for i in range(6):
            n.submit(transition(i))
        assert n.dropped >= 2 and n.pending <= 3
        assert any("queue full" in r.message for r in caplog.records)
    finally:
        n.close(timeout=0.1)


def test_min_severity_filters():
    receiver = Receiver()
    n = notifier(receiver.url, min_severity="critical")
    try:
        n.submit(transition(1, severity="info"))
        n.submit(transition(2, severity="warning"))
        n.submit(transition(3, severity="critical"))
        wait_for(lambda: receiver.bodies, 10)
        time.sleep(0.2)
        assert [b["alerts"][0]["labels"]["alertname"] for b in receiver.json()] == ["Test3"]
    finally:
        n.close()
        receiver.stop()


def test_alertmanager_firing_alerts_are_posted_again_until_they_resolve():
    """Alertmanager ends an alert whose endsAt passes: a firing one is renewed every minute
    (its endsAt minutes ahead), a resolved one is posted with its end and then left alone."""
    import json

    n = Notifier(NotifierConfig(type="alertmanager", url="http://127.0.0.1:9"), "box")
    n._stop.set()  # the thread stops: the queue is looked at by hand
    n._thread.join(5)
    n.submit(transition(1))
    body = json.loads(n.request(n._queue.popleft())[0])
    (alert,) = body
    assert alert["labels"]["instance"] == "box:9963" and alert["endsAt"] > alert["startsAt"]
    n._resend_at = 0
    n._renew()
    assert [m.transition.alertname for m in n._queue] == ["Test1"] and n._queue[0].reminder
    n._queue.clear()
    n.submit(transition(1, status="resolved"))
    n._queue.clear()
    n._resend_at = 0
    n._renew()
    assert not n._queue


def test_alertmanager_gets_the_rules_headline_as_summary_and_the_values_as_detail():
    """Posted to Alertmanager, where its PromQL twin posts too, an alert's summary is its rule's
    headline in the labels' words, the box's instance among them (the twin's very words), and the
    summary with its values goes as ``detail``. A kept message keeps its headline; one read back
    from a file fills in labels alone (``{instance.__class__}`` stays as written)."""
    import json

    n = Notifier(NotifierConfig(type="alertmanager", url="http://127.0.0.1:9"), "box")
    n._stop.set()  # the thread stops: the queue is looked at by hand
    n._thread.join(5)
    headline = "GPU {gpu} on {instance}: {uuid}, {instance.__class__}, {missing}"
    n.submit(transition(1)._replace(headline=headline))
    kept = notify.message_of(json.loads(json.dumps(notify.message_data(n._queue.popleft()))), "box", ())
    ((alert,),) = [json.loads(n.request(m)[0]) for m in (kept,)]
    assert alert["annotations"]["summary"] == "GPU 1 on box:9963: GPU-x, {instance.__class__}, n/a"
    assert alert["annotations"]["detail"] == "summary 1" and alert["annotations"]["description"] == "desc"
    n.submit(transition(2))  # no headline (a rule of the config's own): its summary as it is
    (alert,) = json.loads(n.request(n._queue.popleft())[0])
    assert alert["annotations"]["summary"] == "summary 2" and "detail" not in alert["annotations"]


def test_alertmanager_takes_a_list_of_peers_each_given_every_alert():
    """An HA pair: each Alertmanager gets every alert, from its own queue (am-1, am-2)."""
    receivers = [Receiver(), Receiver()]
    config = NotifierConfig.model_validate(
        {
            "type": "alertmanager",
            "name": "am",
            "min_severity": "info",
            "url": [f"http://127.0.0.1:{r.port}" for r in receivers],
        }
    )
    notifiers = [Notifier(config, "rig-01", peer=peer) for peer in peers(config)]
    try:
        assert [n.name for n in notifiers] == ["am-1", "am-2"]
        for n in notifiers:
            n.submit(transition(1))
        for r in receivers:
            wait_for(lambda r=r: r.bodies, 10)
            (alert,) = r.json()[0]
            assert alert["labels"]["alertname"] == "Test1"
    finally:
        for n in notifiers:
            n.close()
        for r in receivers:
            r.stop()


def test_a_list_of_urls_is_refused_but_for_alertmanager():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="a list of URLs is for an Alertmanager cluster"):
        NotifierConfig.model_validate({"type": "slack", "url": ["http://a/x", "http://b/x"]})
    with pytest.raises(ValidationError, match="names one URL twice"):
        NotifierConfig.model_validate({"type": "alertmanager", "url": ["http://a:9093", "http://a:9093"]})


def test_alertmanager_refusing_an_alert_is_logged_once_per_cause_and_posted_again_at_renewals(caplog, monkeypatch):
    """A 4xx other than 429 (an Alertmanager that rejects the alert): tried for a while, then
    dropped and counted; each cause (alert and answer) logged once however often it recurs, with
    the receiver's words; the alert stays among those renewed, so a refusal that passes keeps
    it out of Alertmanager no longer than a renewal."""
    monkeypatch.setattr(notify, "REFUSAL_PATIENCE", 0.5)
    receiver = Receiver()
    receiver.status = 400
    n = notifier(f"http://127.0.0.1:{receiver.port}", type="alertmanager")
    try:
        n.submit(transition(1))
        wait_for(lambda: n.failed == 1, 10)
        assert n.errors["refused"] >= 2  # tried again before it was given up
        n.submit(transition(1))  # the same alert again (a new transition): the same refusal
        n.submit(transition(2))  # another alert: another cause
        wait_for(lambda: n.failed == 3, 10)
        refused = [r for r in caplog.records if r.levelname == "ERROR" and "refused" in r.message]
        assert [r.message.split(": refused ")[1].split(":")[0] for r in refused] == ["firing Test1", "firing Test2"]
        receiver.status = 200
        n._resend_at = 0  # a renewal is due: the refused alerts are posted again, and taken
        wait_for(lambda: len(receiver.bodies) >= 2, 10)
        assert sorted(a["labels"]["alertname"] for b in receiver.json() for a in b) == ["Test1", "Test2"]
    finally:
        n.close()
        receiver.stop()


def test_the_daemon_makes_one_notifier_per_alertmanager_peer():
    """What the daemon runs with (the validated config as plain settings) lists the peers too."""
    from rigmon.config.schema import parse, settings
    from rigmon.sinks.alerts import AlertSink

    config = settings(
        parse(
            {
                "notifiers": [
                    {"type": "alertmanager", "name": "am", "url": ["http://127.0.0.1:9", "http://127.0.0.1:10"]},
                    {"type": "webhook", "url": "http://127.0.0.1:11/hook"},
                ]
            }
        )
    )
    sink = AlertSink(config.alerts, Box.of(config, "box"), config.notifiers)
    try:
        assert [(n.name, n._url) for n in sink.notifiers] == [
            ("am-1", "http://127.0.0.1:9"),
            ("am-2", "http://127.0.0.1:10"),
            ("webhook", "http://127.0.0.1:11/hook"),
        ]
    finally:
        sink.close(time.monotonic() + 0.5)


def test_the_webhook_links_the_box_page_and_external_url_overrides_it():
    """externalURL and generatorURL carry the box's page: http(s)://host:port/ by default, or
    [daemon] external_url (a proxy's name); a box without its page links nothing."""
    from rigmon.config.schema import parse, settings
    from rigmon.sinks.alerts import AlertSink

    hook = {"notifiers": [{"type": "webhook", "url": "http://127.0.0.1:9/hook"}]}
    for daemon, want in (
        ({}, "http://rig-04:9963/"),
        ({"external_url": "https://rig-04.lab.example/"}, "https://rig-04.lab.example/"),
        ({"page": False}, ""),
    ):
        config = settings(parse({**hook, "daemon": daemon}))
        sink = AlertSink(config.alerts, Box.of(config, "rig-04"), config.notifiers)
        try:
            (n,) = sink.notifiers
            message = Message(transition(1), "rig-04", False, time.time())
            body = json.loads(n.request(message)[0])
            assert body["externalURL"] == want and body["alerts"][0]["generatorURL"] == want, (daemon, body)
        finally:
            sink.close(time.monotonic() + 0.5)


def test_external_url_must_be_a_web_address():
    from rigmon.config.schema import ConfigError, parse

    with pytest.raises(ConfigError, match="daemon.external_url: must be an http:// or https:// URL"):
        parse({"daemon": {"external_url": "rig-04.lab"}})


def test_a_transition_is_logged_at_its_severity_in_the_daemon_and_the_burnin_alike():
    import logging

    from rigmon.sinks.alerts import log_level

    assert log_level(transition(1, "firing", "critical")) == logging.WARNING
    assert log_level(transition(1, "firing", "warning")) == logging.WARNING
    assert log_level(transition(1, "firing", "info")) == logging.INFO  # GpuPowerCapped under full load
    assert log_level(transition(1, "resolved", "critical")) == logging.INFO
