"""The PromQL rules for Prometheus users: valid, unit-tested, and the same set as rigmon's."""

import re
import subprocess
from pathlib import Path

from rigmon.config.schema import Config

RULES = Path(__file__).resolve().parents[1] / "deploy" / "prometheus"


def test_promtool_check_rules():
    done = subprocess.run(
        ["promtool", "check", "rules", str(RULES / "rigmon-rules.yml")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_test_rules():
    done = subprocess.run(
        ["promtool", "test", "rules", "rigmon-rules.test.yml", "rigmon-fleet.test.yml"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=RULES,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_builtin_rule_has_a_promql_twin():
    promql = set(re.findall(r"^\s+- alert: (\w+)", (RULES / "rigmon-rules.yml").read_text(), re.M))
    builtin = {spec.name for spec in Config().alerts.effective_rules()}
    assert builtin <= promql, builtin - promql
    # only Prometheus can see rigmon itself gone, or its own notifications stuck (the engine's
    # own alert about them would go the way that is stuck)
    assert promql - builtin == {"RigmonDown", "RigmonNotificationsUndelivered"}


def test_each_twin_says_what_the_engine_says_and_links_the_same_runbook():
    """Both paths' alerts for one cause carry the same summary (the rule's headline, in the
    labels' words), the same description and the same runbook link, so a notification reads one
    way whichever path it came by, and a group of them keeps its common annotations (test_fleet
    checks one such pair at a real Alertmanager). Values go along as each path's detail."""
    import yaml

    doc = yaml.safe_load((RULES / "rigmon-rules.yml").read_text())
    twins = {r["alert"]: r["annotations"] for g in doc["groups"] for r in g["rules"] if "alert" in r}
    for spec in Config().alerts.effective_rules():
        said = twins[spec.name]
        # the box's own link (rigmon_runbook_info), whatever its scheme: none where its page is off
        assert said["runbook_url"] == (
            '{{ with printf "rigmon_runbook_info{instance=%q}" $labels.instance | query }}'
            '{{ . | first | label "url" }}#' + spec.name + "{{ end }}"
        ), spec.name
        assert spec.headline and said["summary"] == re.sub(r"\{(\w+)\}", r"{{ $labels.\1 }}", spec.headline), spec.name
        assert spec.description and said["description"] == spec.description, spec.name


def test_each_box_exports_the_runbook_link_its_engine_posts():
    """rigmon_runbook_info{url} on the daemon's /metrics is the page the engine's own alerts
    link (so the PromQL rules' runbook_url, which reads it, links the same): by instance, by
    external_url (a proxy, HTTPS), and none where the page is off."""
    import scenarios as sc

    from rigmon.alerts import runbook
    from rigmon.config.box import Box
    from rigmon.config.schema import parse

    for daemon, want in (
        ({"instance": "rig.lab:9963"}, "http://rig.lab:9963/runbook"),
        ({"external_url": "https://rig.example/rigmon/"}, "https://rig.example/rigmon/runbook"),
        ({"page": False, "instance": "rig.lab:9963"}, None),
    ):
        config = parse({"daemon": daemon}, "test")
        with sc.Replayed(sc.h200(), config) as replayed:
            replayed.poll()
            exposition = replayed.metrics()
        found = re.findall(r'^rigmon_runbook_info\{url="([^"]*)"\} 1\.0$', exposition, re.M)
        assert found == ([want] if want else []), exposition[:2000]
        assert runbook.url(Box.of(config).runbook_base, "FanStalled") == (f"{want}#FanStalled" if want else "")
