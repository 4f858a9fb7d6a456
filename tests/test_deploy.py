"""Deploy files: the systemd units verify, the Prometheus config checks, the compose and
Grafana provisioning files parse and point at files that exist."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit", ["rigmon.service", "rigmon-burnin.service", "rigmon-burnin.timer"])
def test_systemd_analyze_verify(unit, tmp_path):
    import sys

    beside = Path(sys.executable).parent / "rigmon"  # pip's scripts directory, wherever PATH points
    rigmon = shutil.which("rigmon") or (str(beside) if beside.exists() else None)
    assert rigmon, "rigmon is not installed (tests/run installs it)"
    for name in ("rigmon.service", "rigmon-burnin.service", "rigmon-burnin.timer"):
        text = (ROOT / "systemd" / name).read_text()
        # verify checks that ExecStart's program exists: point it at the rigmon installed here
        (tmp_path / name).write_text(text.replace("/opt/rigmon/bin/rigmon", rigmon))
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / unit)], capture_output=True, text=True, timeout=60
    )
    problems = [line for line in done.stderr.splitlines() if unit in line or "rigmon" in line]
    assert done.returncode == 0 and not problems, done.stderr


def test_promtool_check_config():
    done = subprocess.run(
        ["promtool", "check", "config", str(ROOT / "deploy" / "prometheus" / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_compose_and_provisioning_parse_and_reference_existing_files():
    import yaml

    deploy = ROOT / "deploy"
    compose = yaml.safe_load((deploy / "compose.yml").read_text())
    assert set(compose["services"]) == {"prometheus", "alertmanager", "influxdb", "grafana"}
    for name, service in compose["services"].items():
        assert service["image"].split(":")[1], f"{name}: pin the image version"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (deploy / source).exists(), f"{name}: {source} does not exist"
            else:
                assert source in compose["volumes"], f"{name}: volume {source} is not declared"
    env = {
        line.split("=")[0]
        for line in (deploy / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    needed = set(re.findall(r"\$\{(\w+)", (deploy / "compose.yml").read_text()))
    assert needed <= env, needed - env
    sources = yaml.safe_load((deploy / "grafana/provisioning/datasources/rigmon.yml").read_text())
    assert {d["type"] for d in sources["datasources"]} == {"prometheus", "influxdb"}
    providers = yaml.safe_load((deploy / "grafana/provisioning/dashboards/rigmon.yml").read_text())
    path = providers["providers"][0]["options"]["path"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in compose["services"]["grafana"]["volumes"]}
    assert (deploy / mounted[path]).resolve() == ROOT / "dashboards"
    assert len(list((ROOT / "dashboards").glob("*.json"))) == 4
    assert yaml.safe_load((deploy / "alertmanager/alertmanager.yml").read_text())["route"]["receiver"]
    assert yaml.safe_load((deploy / "prometheus/targets/rigmon.yml").read_text())[0]["targets"]
    prometheus = yaml.safe_load((deploy / "prometheus/prometheus.yml").read_text())
    for rule_file in prometheus["rule_files"]:
        assert (deploy / "prometheus" / rule_file).exists()


def test_alertmanager_mutes_everything_on_a_box_while_rigmon_is_down(tmp_path):
    """The shipped alertmanager.yml, in a real Alertmanager (its receiver pointed at a test one,
    its waits shortened): while RigmonDown fires for a box, no other alert of that box reaches
    the receiver, whatever its severity; another box's alerts still do, and there one thermal
    event on a GPU is one page (the worst), while the same rule on another GPU still pages."""
    import datetime

    from receiver import Receiver
    from servers import Alertmanager, wait_for

    receiver = Receiver()
    am = Alertmanager(tmp_path, receiver.url)
    want = {
        ("RigmonDown", "box1:9963", ""),
        ("GpuStarved", "box2:9963", "0"),
        ("GpuAtSlowdownTemperature", "box2:9963", "1"),
        ("GpuNearSlowdown", "box2:9963", "2"),
    }

    def got():
        return {
            (a["labels"]["alertname"], a["labels"]["instance"], a["labels"].get("gpu", ""))
            for body in receiver.json()
            for a in body["alerts"]
        }

    try:
        now = datetime.datetime.now(datetime.UTC).isoformat()
        alerts = [
            {"labels": {"alertname": name, "severity": severity, "instance": instance, "gpu": gpu}, "startsAt": now}
            for name, severity, instance, gpu in (
                ("RigmonDown", "critical", "box1:9963", ""),
                ("GpuAtSlowdownTemperature", "critical", "box1:9963", "0"),
                ("GpuStarved", "warning", "box1:9963", "0"),
                ("GpuStarved", "warning", "box2:9963", "0"),
                ("GpuAtSlowdownTemperature", "critical", "box2:9963", "1"),
                ("GpuThermalSlowdown", "warning", "box2:9963", "1"),
                ("GpuNearSlowdown", "warning", "box2:9963", "1"),
                ("GpuNearSlowdown", "warning", "box2:9963", "2"),
            )
        ]
        for a in alerts:
            if not a["labels"]["gpu"]:
                del a["labels"]["gpu"]
        am.post("/api/v2/alerts", alerts)
        wait_for(lambda: got() >= want, 30, what="alertmanager's notifications")

        def others() -> dict:  # each alert not wanted, as Alertmanager holds it
            return {
                (a["labels"]["alertname"], a["labels"]["instance"], a["labels"].get("gpu", "")): a["status"]
                for a in am.alerts()
                if (a["labels"]["alertname"], a["labels"]["instance"], a["labels"].get("gpu", "")) not in want
            }

        # every other alert held inhibited by Alertmanager itself: none of them is ever sent
        held = wait_for(
            lambda: (o := others()) and all(s["state"] == "suppressed" and s["inhibitedBy"] for s in o.values()) and o,
            10,
            what="the other alerts inhibited",
        )
        assert len(held) == len(alerts) - len(want), held
    finally:
        am.stop()
        receiver.stop()
    assert got() == want, got()


# labels an alert of each kind carries in Alertmanager (rigmon's engine and the PromQL rules alike)
_KIND_LABELS = {
    "gpu": {"gpu": "0", "uuid": "GPU-a"},
    "gpu_fan": {"gpu": "0", "uuid": "GPU-a", "fan": "0"},
    "fan": {"chip": "nct6798", "fan": "fan2"},
    "cpu": {"socket": "0"},
    "host": {},
    "psu": {"psu": "psu-a"},
    "sensor": {"sensor_kind": "fan", "sensor": "nct6798/fan2"},
}


def test_alertmanager_holds_back_what_rigmons_engine_holds_back(tmp_path):
    """One cause, one page in both engines: for every pair the built-in rules mark (inhibits),
    the shipped alertmanager.yml mutes the target on the source's box (and GPU, where the engine
    holds back only that GPU's), and leaves it alone on another box or GPU."""
    import datetime

    from servers import Alertmanager, wait_for

    from rigmon.alerts.entities import BOX, EVERY, inhibit_scope
    from rigmon.alerts.specs import builtin_specs

    specs = builtin_specs()
    pairs = [(name, target) for name, spec in specs.items() for target in spec.get("inhibits", ())]
    assert len(pairs) >= 10
    now = datetime.datetime.now(datetime.UTC).isoformat()
    alerts, held, free = [], set(), set()

    def alert(name, box, **labels):
        alerts.append(
            {
                "labels": {
                    "alertname": name,
                    "severity": specs[name]["severity"],
                    "instance": box,
                    "site": "lab",
                    **_KIND_LABELS[specs[name]["kind"]],
                    **labels,
                },
                "startsAt": now,
            }
        )
        return (name, box, alerts[-1]["labels"].get("gpu", ""))

    for i, (source, target) in enumerate(pairs):
        box = f"pair{i}:9963"
        alert(source, box)
        held.add(alert(target, box))
        free.add(alert(target, f"other{i}:9963"))  # another box: never held
        scope = inhibit_scope(specs[source]["kind"], specs[target]["kind"])
        if "gpu" in _KIND_LABELS[specs[target]["kind"]] and scope not in (BOX, EVERY):
            free.add(alert(target, box, gpu="1", uuid="GPU-b"))  # the box's other GPU: not held
    receiver_url = "http://127.0.0.1:9/none"  # nothing is delivered: the API says what is muted
    am = Alertmanager(tmp_path, receiver_url)
    try:
        am.post("/api/v2/alerts", alerts)

        def state():
            return {
                (a["labels"]["alertname"], a["labels"]["instance"], a["labels"].get("gpu", "")): bool(
                    a["status"]["inhibitedBy"]
                )
                for a in am.alerts()
            }

        wait_for(lambda: {k for k, muted in state().items() if muted} >= held, 30, what="the inhibitions of every pair")
        got = state()
    finally:
        am.stop()
    print(f"{len(pairs)} pairs: {len(held)} alerts held back, {len(free)} left alone")
    assert {k for k in held if not got[k]} == set(), "not held back as rigmon's engine holds them"
    assert {k for k in free if got[k]} == set(), "held back where rigmon's engine does not"
