"""The daemon's alerts end to end: rigmon run → engine → webhook receiver, and /metrics."""

import re

import scenarios as sc
from receiver import Receiver
from scenarios import set_gpu, timeline
from servers import Rigmon, http_get, wait_for


def hot_then_cool(t, tick):
    set_gpu(tick, nvmlDeviceGetTemperature__0=90 if t < 4 else 70)


def logged_transitions(output: str) -> list[tuple[str, str]]:
    return re.findall(r"(FIRING|resolved) critical (GpuAtSlowdownTemperature):", output)


def test_every_transition_reaches_the_webhook_in_order_across_an_outage(tmp_path):
    recording = sc.write(timeline(10, 0.5, modify=hot_then_cool), tmp_path / "cycle.rec.jsonl")
    first = Receiver()
    config = f"""
[daemon]
interval = 0.5
[alerts.builtin.GpuAtSlowdownTemperature]
for = "1s"
[[notifiers]]
type = "webhook"
url = "{first.url}"
retry_initial = "0.2s"
retry_max = "1s"
"""
    rigmon = Rigmon(tmp_path, recording, config)
    second = None
    try:
        rigmon.wait_ready()
        wait_for(lambda: first.bodies, 20, what="the first alert")
        active = [
            line
            for line in http_get(rigmon.url, {"Accept": "text/plain"})[1].decode().splitlines()
            if line.startswith("rigmon_alert_active{")
        ]
        assert any('alertname="GpuAtSlowdownTemperature"' in a and 'subject="gpu=0"' in a for a in active), active
        first.stop()  # the receiver goes away for a stretch: two transitions or more while it is away
        wait_for(
            lambda: len(logged_transitions(rigmon.output())) - len(first.bodies) >= 2,
            60,
            what="two transitions during the outage",
        )
        during_outage = len(logged_transitions(rigmon.output())) - len(first.bodies)
        second = Receiver(first.port)
        wait_for(
            lambda: len(first.bodies) + len(second.bodies) >= len(logged_transitions(rigmon.output())),
            30,
            what="the queued transitions",
        )
    finally:
        assert rigmon.stop() == 0  # a warm stop flushes what is queued
        if second is not None:
            second.stop()
    logged = [("firing" if s == "FIRING" else "resolved", name) for s, name in logged_transitions(rigmon.output())]
    received = [(b["status"], b["alerts"][0]["labels"]["alertname"]) for b in first.json() + second.json()]
    assert during_outage >= 2
    assert received == logged  # every transition, once, in order
    statuses = [s for s, _ in received]
    assert all(a != b for a, b in zip(statuses, statuses[1:], strict=False))  # firing, resolved, firing, ...


def test_reminders_while_firing(tmp_path):
    recording = sc.write(
        timeline(60, 1, modify=lambda t, tick: set_gpu(tick, nvmlDeviceGetTemperature__0=95)),
        tmp_path / "hot.rec.jsonl",
    )
    receiver = Receiver()
    config = f"""
[daemon]
interval = 0.5
[alerts]
repeat_interval = "2s"
[alerts.builtin.GpuAtSlowdownTemperature]
for = "0s"
[[notifiers]]
type = "webhook"
url = "{receiver.url}"
"""
    rigmon = Rigmon(tmp_path, recording, config)
    try:
        rigmon.wait_ready()
        wait_for(lambda: len(receiver.bodies) >= 3, 20, what="reminders")
    finally:
        rigmon.stop()
        receiver.stop()
    bodies = receiver.json()
    assert {b["alerts"][0]["labels"]["alertname"] for b in bodies} == {"GpuAtSlowdownTemperature"}
    assert all(b["status"] == "firing" for b in bodies)


def test_an_alert_joins_its_gpu_in_promql(tmp_path):
    """Two GPUs, the second at its slowdown temperature: a PromQL join of the alert to the GPU's
    power, on gpu, answers that GPU's power from a real Prometheus."""
    from servers import Prometheus

    def second_hot(t, tick):
        tick["gpus"][1]["nvmlDeviceGetTemperature:0"] = 95

    recording = sc.write(timeline(120, 1, gpus=2, modify=second_hot), tmp_path / "hot.rec.jsonl")
    rigmon = Rigmon(
        tmp_path, recording, '[daemon]\ninterval = 0.5\n[alerts.builtin.GpuAtSlowdownTemperature]\nfor = "0s"\n'
    )
    prometheus = None
    try:
        rigmon.wait_ready()
        prometheus = Prometheus(tmp_path, [f"127.0.0.1:{rigmon.port}"])
        joined = prometheus.wait_query(
            'rigmon_alert_active{alertname="GpuAtSlowdownTemperature"} '
            "* on (instance, gpu) group_left rigmon_gpu_power_watts",
            60,
        )
    finally:
        if prometheus is not None:
            prometheus.stop()
        rigmon.stop()
    assert [(s["metric"]["gpu"], s["metric"]["alertname"]) for s in joined] == [("1", "GpuAtSlowdownTemperature")]
    assert 600 < float(joined[0]["value"][1]) < 710  # the hot GPU's power, in watts
