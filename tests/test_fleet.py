"""A fleet as a lab runs it: ten replayed boxes, each a real ``rigmon run`` with its own
``hostname``, one Prometheus with the shipped prometheus.yml and rigmon-rules.yml, one
Alertmanager with the shipped alertmanager.yml. What the test changes is what a lab edits:
the targets file (deploy/prometheus/targets/*.yml, with a ``site`` label), where Prometheus
finds the rules and Alertmanager, the receiver's URL, and (to finish in minutes) the
Alertmanager's group waits. Every expected alert reaches the receiver once, with its site; the
healthy boxes stay quiet; a box killed raises RigmonDown and nothing else."""

import shutil
import time
from pathlib import Path

import pytest
import scenarios as sc
import yaml
from receiver import Receiver
from scenarios import timeline
from servers import Alertmanager, Prometheus, Rigmon, free_port, http_get, wait_for
from test_alert_rules import fans, temperature

ROOT = Path(__file__).resolve().parents[1]
BOXES = 10


def fan_stops_early(t, tick):
    tick["host"] = fans(1150 if t < 15 else 0)


@pytest.mark.slow
def test_ten_boxes_page_once_per_fault_with_their_site_and_a_dead_box_only_as_down(tmp_path):
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed (tests/run installs it)")
    hot = timeline(3600, 5, gpus=2, host=fans(1150), modify=temperature(90))
    fan = timeline(3600, 5, gpus=2, modify=fan_stops_early)
    healthy = timeline(3600, 5, gpus=2, host=fans(1150))
    plan = {0: ("hot", hot), 1: ("fan", fan)}
    receiver = Receiver()
    am = Alertmanager(tmp_path, receiver.url)
    boxes = []
    prom = None
    try:
        for i in range(BOXES):
            name, rec = plan.get(i, ("healthy", healthy))
            where = tmp_path / f"box{i}"
            where.mkdir()
            path = sc.write(rec, where / f"{name}.rec.jsonl")
            boxes.append(Rigmon(where, path, f'[daemon]\nhostname = "box{i}"\n'))
        for box in boxes:
            box.wait_ready(60)
        # the lab's edits: its targets (with a site), where the rules and Alertmanager are
        config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
        config["rule_files"] = [str(ROOT / "deploy" / "prometheus" / "rigmon-rules.yml")]
        config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] = [f"127.0.0.1:{am.port}"]
        (tmp_path / "prom").mkdir()
        targets = tmp_path / "prom" / "targets"
        targets.mkdir()
        (targets / "rigmon.yml").write_text(
            yaml.safe_dump([{"targets": [f"127.0.0.1:{b.port}" for b in boxes], "labels": {"site": "lab"}}])
        )
        for job in config["scrape_configs"]:
            for sd in job.get("file_sd_configs", ()):
                sd["files"] = [str(targets / "*.yml")]
        prom = Prometheus(
            tmp_path / "prom",
            [],
            scrape_configs=config["scrape_configs"],
            extra={k: v for k, v in config.items() if k in ("rule_files", "alerting")},
        )
        prom_global = config["global"]
        assert prom_global["evaluation_interval"] == "15s"  # the shipped pace, not the test's

        def told():
            return [
                (
                    a["labels"]["alertname"],
                    a["labels"]["instance"],
                    a["labels"].get("gpu", ""),
                    a["labels"].get("site"),
                    a["status"],
                )
                for body in receiver.json()
                for a in body["alerts"]
            ]

        hot_box, fan_box, dead = (f"127.0.0.1:{boxes[i].port}" for i in (0, 1, 2))
        want = {
            ("GpuAtSlowdownTemperature", hot_box, "0", "lab", "firing"),
            ("FanStalled", fan_box, "", "lab", "firing"),
        }
        wait_for(lambda: want <= set(told()), 240, interval=1, what="the two faults told")
        boxes[2].proc.kill()  # a box that dies: no warm stop
        boxes[2].proc.wait()
        wait_for(lambda: ("RigmonDown", dead, "", "lab", "firing") in told(), 240, interval=1, what="RigmonDown")
        prom.wait_evaluated(time.time())  # an evaluation more: nothing else of the dead box, not even pending
        alerts = prom.query(f'ALERTS{{instance="{dead}"}}')
        assert [a["metric"]["alertname"] for a in alerts] == ["RigmonDown"], alerts
        got = told()
        assert sorted(got) == sorted(want | {("RigmonDown", dead, "", "lab", "firing")}), got
        assert len(got) == 3  # each once
    finally:
        _stop(boxes, prom, am, receiver)


def _stop(boxes: list, prom: Prometheus | None, am: Alertmanager, receiver: Receiver) -> None:
    """A lab's parts, each stopped: the boxes, Prometheus where it started, Alertmanager, the receiver."""
    for box in boxes:
        box.stop()
    if prom is not None:
        prom.stop()
    am.stop()
    receiver.stop()


def _prometheus(tmp_path: Path, targets: list[str], am_port: int) -> Prometheus:
    """The shipped prometheus.yml and rules, with the lab's edits: its targets (site lab) and
    where Alertmanager is."""
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    config["rule_files"] = [str(ROOT / "deploy" / "prometheus" / "rigmon-rules.yml")]
    config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] = [f"127.0.0.1:{am_port}"]
    (tmp_path / "prom" / "targets").mkdir(parents=True)
    (tmp_path / "prom" / "targets" / "rigmon.yml").write_text(
        yaml.safe_dump([{"targets": targets, "labels": {"site": "lab"}}])
    )
    for job in config["scrape_configs"]:
        for sd in job.get("file_sd_configs", ()):
            sd["files"] = [str(tmp_path / "prom" / "targets" / "*.yml")]
    return Prometheus(
        tmp_path / "prom",
        [],
        scrape_configs=config["scrape_configs"],
        extra={k: v for k, v in config.items() if k in ("rule_files", "alerting")},
    )


@pytest.mark.slow
def test_boxes_listed_by_ip_and_by_name_have_one_identity_on_both_paths(tmp_path):
    """Two hot boxes, one listed by IP (127.0.0.1:port), one by name (localhost:port), each
    with ``[daemon] instance`` set to how it is listed; both rigmon's engine (posting to
    Alertmanager) and the PromQL rules alert. Each box is one notification with both paths'
    alerts; a silence on one instance covers both paths; the box that dies raises RigmonDown,
    which holds back its engine's alerts too."""
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed (tests/run installs it)")

    hot = timeline(3600, 5, gpus=1, host=fans(1150), modify=temperature(90))
    receiver = Receiver()
    am = Alertmanager(tmp_path, receiver.url, group_wait="25s", group_interval="10m")
    boxes, prom = [], None
    try:
        for i, host in enumerate(("127.0.0.1", "localhost")):
            where = tmp_path / f"box{i}"
            where.mkdir()
            port = free_port()
            config = (
                f'[daemon]\nhostname = "box{i}"\ninstance = "{host}:{port}"\nlabels = {{ site = "lab" }}\n'
                f'[[notifiers]]\ntype = "alertmanager"\nurl = "{am.url}"\n'
            )
            boxes.append(Rigmon(where, sc.write(hot, where / "hot.rec.jsonl"), config, port=port))
        for box in boxes:
            box.wait_ready(60)
        by_ip, by_name = f"127.0.0.1:{boxes[0].port}", f"localhost:{boxes[1].port}"
        prom = _prometheus(tmp_path, [by_ip, by_name], am.port)

        def held(instance: str) -> list[dict]:
            return [
                a
                for a in am.alerts()
                if a["labels"]["alertname"] == "GpuAtSlowdownTemperature" and a["labels"]["instance"] == instance
            ]

        def both_paths(instance: str) -> bool:  # the engine's alert carries host, Prometheus's job
            alerts = held(instance)
            return any("host" in a["labels"] for a in alerts) and any("job" in a["labels"] for a in alerts)

        wait_for(lambda: both_paths(by_ip) and both_paths(by_name), 120, interval=1, what="both paths' alerts")
        wait_for(lambda: len(receiver.json()) >= 2, 60, interval=1, what="the first notifications")
        time.sleep(5)
        pages = {}
        for body in receiver.json():
            (instance,) = {a["labels"]["instance"] for a in body["alerts"]}
            pages.setdefault(instance, []).append(body)
        assert sorted(pages) == sorted([by_ip, by_name]), pages.keys()
        for instance, bodies in pages.items():
            assert len(bodies) == 1, f"{instance}: {len(bodies)} notifications"
            alerts = [a for a in bodies[0]["alerts"] if a["labels"]["alertname"] == "GpuAtSlowdownTemperature"]
            assert {"host" in a["labels"] for a in alerts} == {True, False}, alerts  # the engine's and the rule's
            # the same words on both paths, and a runbook link that answers with the rule
            said = {tuple(a["annotations"][k] for k in ("summary", "description", "runbook_url")) for a in alerts}
            assert len(said) == 1, alerts
            ((summary, description, link),) = said
            assert summary == f"GPU 0 on {instance} at its slowdown threshold", summary
            assert description and link == f"http://{instance}/runbook#GpuAtSlowdownTemperature", link
            status, page = http_get(link)
            assert status == 200 and b"<section id='GpuAtSlowdownTemperature'>" in page, page[:300]
            assert "hint" in next(a for a in alerts if "host" in a["labels"])["annotations"]  # the engine's extra

        # one silence on the instance covers both paths
        silence = {
            "matchers": [{"name": "instance", "value": by_name, "isRegex": False, "isEqual": True}],
            "startsAt": "2000-01-01T00:00:00Z",
            "endsAt": "2100-01-01T00:00:00Z",
            "createdBy": "test",
            "comment": "maintenance",
        }
        am.post("/api/v2/silences", silence)
        wait_for(
            lambda: all(a["status"]["state"] == "suppressed" and a["status"]["silencedBy"] for a in held(by_name)),
            30,
            what="both paths' alerts of the silenced box suppressed",
        )

        # the box listed by IP dies: RigmonDown holds back its engine's alerts as well as the rules'
        boxes[0].proc.kill()
        boxes[0].proc.wait()

        def down() -> bool:
            return any(
                a["labels"]["alertname"] == "RigmonDown" and a["labels"]["instance"] == by_ip for a in am.alerts()
            )

        wait_for(down, 180, interval=1, what="RigmonDown for the dead box")
        wait_for(
            lambda: all(a["status"]["inhibitedBy"] for a in held(by_ip)) and both_paths(by_ip),
            60,
            what="the dead box's alerts of both paths inhibited",
        )
    finally:
        _stop(boxes, prom, am, receiver)
