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
from servers import Alertmanager, Prometheus, Rigmon, wait_for
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
        time.sleep(20)  # an evaluation more: anything else of the dead box would have come by now
        got = told()
        assert sorted(got) == sorted(want | {("RigmonDown", dead, "", "lab", "firing")}), got
        assert len(got) == 3  # each once
    finally:
        for box in boxes:
            box.stop()
        if prom is not None:
            prom.stop()
        am.stop()
        receiver.stop()
