"""The box's identity: ``[daemon] hostname`` and ``[daemon] labels`` (a site, a rack) on every
notification, every InfluxDB point, the page and status; a bad one is refused by name."""

import json
import subprocess
import sys

import pytest
import scenarios as sc

from rigmon.alerts.engine import Transition
from rigmon.config import schema as configmod
from rigmon.config.box import Box
from rigmon.config.schema import NotifierConfig
from rigmon.config.settings import ConfigError
from rigmon.sinks.influxdb import InfluxSink
from rigmon.sinks.notify import Notifier, text

IDENTITY = {"hostname": "rig-04", "labels": {"site": "lab", "rack": "b2"}}


def _transition() -> Transition:
    return Transition(
        status="firing",
        alertname="GpuLost",
        severity="critical",
        labels={"gpu": "1", "uuid": "GPU-b"},
        summary="GPU 1 fell off the bus",
        description="",
        hint="",
        starts_at=1.0,
        ends_at=None,
        time=1.0,
        values={},
    )


def test_notifications_carry_the_name_and_labels(tmp_path):
    config = configmod.parse(
        {
            "daemon": {**IDENTITY, "state_dir": str(tmp_path)},
            "notifiers": [{"type": "webhook", "url": "http://127.0.0.1:9/hook"}],
        },
        "test",
    )
    from rigmon.sinks.alerts import AlertSink

    sink = AlertSink(config.alerts, Box.of(config), config.notifiers)
    try:
        (notifier,) = sink.notifiers
        notifier.submit(_transition())
        message = notifier._queue[0]
        body, _ = notifier.request(message)
        alert = json.loads(body)["alerts"][0]
        assert alert["labels"] | {} == {
            "site": "lab",
            "rack": "b2",
            "alertname": "GpuLost",
            "severity": "critical",
            "host": "rig-04",
            "gpu": "1",
            "uuid": "GPU-b",
        }
        assert text(message)[0] == "[FIRING] GpuLost on rig-04 rack=b2 site=lab (critical)"
    finally:
        sink.close(0)


def test_every_influxdb_point_carries_the_labels_as_tags(tmp_path):
    config = configmod.parse(
        {
            "daemon": {**IDENTITY, "state_dir": str(tmp_path)},
            "influxdb": {"enabled": True, "url": "http://127.0.0.1:9"},
        },
        "test",
    )
    sink = InfluxSink(config.influxdb, Box.of(config), sender=object())
    with sc.Replayed(sc.rich(sc.h200(), gpus=4), {"daemon": {"state_dir": str(tmp_path / "r")}}) as r:
        sample = r.poll(1)
    lines = sink._encode(("sample", sample)) + sink._encode(("transition", _transition()))
    assert len(lines) > 5
    for line in lines:
        head = line.split(" ", 1)[0]
        assert ",host=rig-04,rack=b2,site=lab" in head, line


@pytest.mark.parametrize(
    "labels, field",
    [
        ({"9site": "x"}, "daemon.labels"),
        ({"host": "x"}, "daemon.labels"),
        ({"site": "a\nb"}, "daemon.labels"),
        ({"site": ""}, "daemon.labels"),
    ],
)
def test_a_bad_label_is_refused_by_name(labels, field):
    with pytest.raises(ConfigError) as e:
        configmod.parse({"daemon": {"labels": labels}}, "test")
    assert field in str(e.value)


def test_a_bad_hostname_is_refused_by_name():
    with pytest.raises(ConfigError) as e:
        configmod.parse({"daemon": {"hostname": "rig 04"}}, "test")
    assert "daemon.hostname" in str(e.value)


def test_status_and_the_page_show_them(tmp_path):
    path = tmp_path / "rigmon.toml"
    path.write_text(f'[daemon]\nhostname = "rig-04"\nstate_dir = "{tmp_path}"\n[daemon.labels]\nsite = "lab"\n')
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "status", "--demo", "--at", "10", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("rigmon status  rig-04  site=lab  "), done.stdout.splitlines()[0]
    from rigmon.http.page import Page

    config = configmod.parse({"daemon": {**IDENTITY, "state_dir": str(tmp_path / "r")}}, "test")
    with sc.Replayed(sc.h200(), config) as r:
        r.poll(1)
        state = Page(r.pipeline, r.pipeline.history, config.jobs).state_dict()
    assert state["host"] == "rig-04" and state["labels"] == {"site": "lab", "rack": "b2"}


def test_the_notifier_takes_no_labels_it_was_not_given():
    notifier = Notifier(NotifierConfig(type="webhook", url="http://127.0.0.1:9/hook"), "box")
    try:
        notifier.submit(_transition())
        alert = json.loads(notifier.request(notifier._queue[0])[0])["alerts"][0]
        assert set(alert["labels"]) == {"alertname", "severity", "host", "gpu", "uuid"}
    finally:
        notifier._stop.set()


def test_the_page_says_why_it_shows_no_gpu_and_that_it_replays_a_file(tmp_path):
    """/api/state: a box whose GPUs are not read says so where the GPUs would be, and a replay
    names its file and what the recording says it is."""
    from rigmon.http.page import Page

    with sc.Replayed(sc.h200(), {"gpu": {"enabled": False}, "daemon": {"state_dir": str(tmp_path)}}) as r:
        r.poll()
        state = Page(r.pipeline, r.pipeline.history, r.config.jobs).state_dict()
    assert state["gpus"] == [] and state["gpus_note"] == "GPUs not read ([gpu] enabled = false)", state["gpus_note"]
    path = sc.write(sc.h200(), tmp_path / "rig-07.rec.jsonl")
    from rigmon.model.recording import Recording

    with sc.Replayed(Recording.load(path), {"daemon": {"state_dir": str(tmp_path / "s")}}) as r:
        r.poll()
        state = Page(r.pipeline, r.pipeline.history, r.config.jobs).state_dict()
    assert state["replay"]["file"] == "rig-07.rec.jsonl" and "H200" in state["replay"]["source"], state["replay"]
    assert state["gpus_note"] is None


def test_a_replay_at_speed_keeps_one_clock_on_the_page():
    """At --speed 60 the samples' clock runs sixty times as fast: the page's "rigmon up" and the
    alerts' ages are on that clock, and it shows no boot time (this box's would be another clock)."""
    import logging

    from rigmon.http.page import Page

    logging.disable(logging.CRITICAL)
    try:
        clock = [1_800_000_000.0]
        with sc.Replayed(
            sc.rich(sc.h200()), {"prometheus": {"enabled": False}}, at=sc.LOAD_AT, loop=True, wall=lambda: clock[0]
        ) as r:
            r.poll()
            page = Page(r.pipeline, r.pipeline.history, r.config.jobs)  # as the daemon makes it: after the first poll
            for _ in range(10):
                clock[0] += 60  # a second of real time at --speed 60
                r.poll()
            state = page.state_dict()
    finally:
        logging.disable(logging.NOTSET)
    assert state["boot"] is None and state["time"] - state["started"] == 600
    assert all(0 <= a["age_seconds"] <= 600 for a in state["alerts"]), state["alerts"]
