"""rigmon's own engine feeds a real Alertmanager (Debian's, with the shipped alertmanager.yml):
``[[notifiers]] type = "alertmanager"`` posts API v2 alerts with the GPU, the box's labels and
its page, renews them while they fire, and ends them when they resolve."""

import json

import scenarios as sc
from receiver import Receiver
from servers import Alertmanager, http_get, wait_for
from test_alert_rules import SCENARIOS, recovery

RULE = "GpuAtSlowdownTemperature"


def test_the_engine_alert_reaches_alertmanager_with_gpu_and_site_then_resolves(tmp_path):
    receiver = Receiver()
    am = Alertmanager(tmp_path, receiver.url)
    config = {
        "daemon": {"hostname": "rig-04", "labels": {"site": "lab"}, "state_dir": str(tmp_path / "state")},
        "notifiers": [{"type": "alertmanager", "url": am.url, "retry_initial": 0.2}],
    }
    fault, healthy = SCENARIOS[RULE][0](), recovery(RULE)

    def ours():
        return [a for a in am.alerts() if a["labels"].get("alertname") == RULE]

    try:
        with sc.Replayed(sc.then(fault, healthy), config, recording_time=True) as r:
            end_of_fault = fault.ticks[-1]["t"] - fault.ticks[0]["t"]
            for t in range(0, int(end_of_fault) + 1, 5):
                r.poll(t)
            (alert,) = wait_for(ours, 30, what=f"{RULE} in Alertmanager")
            labels = alert["labels"]
            assert {k: labels.get(k) for k in ("gpu", "site", "host", "instance", "severity")} == {
                "gpu": "0",
                "site": "lab",
                "host": "rig-04",
                "instance": "rig-04:9963",
                "severity": "critical",
            }
            assert alert["generatorURL"] == "http://rig-04:9963/" and alert["status"]["state"] == "active"
            # the PromQL twin's words; the values go as the detail
            assert alert["annotations"]["summary"] == "GPU 0 on rig-04:9963 at its slowdown threshold"
            assert "°C" in alert["annotations"]["detail"] and "slowdown" in alert["annotations"]["detail"]
            # the receiver is told once, with the site (Alertmanager's own webhook)
            told = wait_for(
                lambda: [a for body in receiver.json() for a in body["alerts"] if a["labels"]["alertname"] == RULE],
                30,
                what="the receiver told",
            )
            assert told[0]["labels"]["site"] == "lab" and told[0]["status"] == "firing"
            healthy_until = healthy.ticks[-1]["t"] - fault.ticks[0]["t"] + 5
            for t in range(int(end_of_fault) + 5, int(healthy_until) + 1, 5):
                r.poll(t)
            wait_for(lambda: not ours(), 30, what=f"{RULE} resolved in Alertmanager")

        def statuses() -> list[str]:
            return [a["status"] for body in receiver.json() for a in body["alerts"] if a["labels"]["alertname"] == RULE]

        # the RESOLVED told: a second firing message would have come before it
        told = wait_for(lambda: "resolved" in (got := statuses()) and got, 30, what="the receiver told it resolved")
        assert told[0] == "firing" and told.count("firing") == 1, told
    finally:
        am.stop()
        receiver.stop()


def test_the_shipped_grouping_pages_a_sites_outage_once_and_a_box_once(tmp_path):
    """alertmanager.yml as shipped: RigmonDown for three boxes of one site and one of another
    (a power cut) is one notification per site naming its boxes; two alerts of one box are one
    notification for that box."""

    receiver = Receiver()
    am = Alertmanager(tmp_path, receiver.url, group_wait="3s", group_interval="10m")
    try:
        alerts = [
            {"labels": {"alertname": "RigmonDown", "severity": "critical", "site": site, "instance": box}}
            for site, box in (("lab", "a:9963"), ("lab", "b:9963"), ("lab", "c:9963"), ("home", "d:9963"))
        ] + [
            {"labels": {"alertname": name, "severity": "critical", "site": "lab", "instance": "e:9963", **more}}
            for name, more in (("FanStalled", {"chip": "nct6798", "fan": "fan2"}), ("GpuLost", {"gpu": "0"}))
        ]
        am.post("/api/v2/alerts", alerts)
        wait_for(lambda: len(receiver.json()) >= 3, 30, what="three notifications")
        # Alertmanager's own groups: three, so three notifications until the group interval (10 m)
        held = json.loads(http_get(f"{am.url}/api/v2/alerts/groups", timeout=5)[1])
        assert len(held) == 3, [g["labels"] for g in held]
        groups = sorted(
            (sorted(b["groupLabels"].items()), sorted(a["labels"]["instance"] for a in b["alerts"]))
            for b in receiver.json()
        )
        assert groups == [
            ([("alertname", "RigmonDown"), ("site", "home")], ["d:9963"]),
            ([("alertname", "RigmonDown"), ("site", "lab")], ["a:9963", "b:9963", "c:9963"]),
            ([("instance", "e:9963"), ("site", "lab")], ["e:9963", "e:9963"]),
        ], groups
    finally:
        am.stop()
        receiver.stop()
