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
