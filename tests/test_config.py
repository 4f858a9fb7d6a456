"""``rigmon config check`` names the field and exits 2; good files print masked."""

import json
import os
import subprocess
import sys

import pytest

from rigmon import config


def check(path, env=None):
    return subprocess.run([sys.executable, "-m", "rigmon", "config", "check", str(path)], capture_output=True,
                          text=True, timeout=60, env=env)


BAD = [
    ("unknown field", "[daemon]\ninterval = 1\nintervall = 2\n", "daemon.intervall: unknown field"),
    ("unknown section", "[gpus]\nenabled = true\n", "gpus: unknown field"),
    ("wrong type", "[gpu]\nslow_interval = \"fast\"\n", "gpu.slow_interval: Input should be a valid number"),
    ("out of range", "[prometheus]\nport = 70000\n", "prometheus.port: Input should be less than or equal to 65535"),
    ("not positive", "[daemon]\ninterval = 0\n", "daemon.interval: Input should be greater than 0"),
    ("bad list item", "[gpu]\nindices = [0, -1]\n", "gpu.indices[1]: Input should be greater than or equal to 0"),
    ("bad choice", "[daemon]\nlog_level = \"loud\"\n", "daemon.log_level: Input should be 'debug', 'info'"),
    ("bad TOML", "[daemon\ninterval = 1\n", "not valid TOML"),
    ("missing env", "[prometheus.basic_auth]\nusername = \"u\"\npassword_sha256 = \"${NO_SUCH_VAR_X}\"\n",
     "prometheus.basic_auth.password_sha256: environment variable NO_SUCH_VAR_X is not set"),
    ("bad hash", "[prometheus.basic_auth]\nusername = \"u\"\npassword_sha256 = \"secret\"\n",
     "prometheus.basic_auth.password_sha256: must be 64 hex digits"),
    ("missing field", "[prometheus.basic_auth]\nusername = \"u\"\n",
     "prometheus.basic_auth.password_sha256: required field is missing"),
    ("unknown builtin rule", "[alerts.builtin.GpuStarvd]\nenabled = false\n",
     "alerts: no built-in rule named GpuStarvd"),
    ("rule with a typo", "[alerts.builtin.GpuStarved]\nwhen = \"utilisation_gpu > 0.9\"\n",
     "alerts: builtin.GpuStarved: when: unknown name 'utilisation_gpu'"),
    ("bad duration", "[alerts.builtin.GpuStarved]\nfor = \"10 parsecs\"\n",
     "alerts.builtin.GpuStarved.for: not a duration: '10 parsecs'"),
    ("user rule syntax", "[[alerts.rules]]\nname = \"X\"\nkind = \"gpu\"\nwhen = \"power_watts >\"\n"
     "severity = \"warning\"\nsummary = \"s\"\n", "alerts.rules[0]: when: syntax error"),
    ("user rule kind", "[[alerts.rules]]\nname = \"X\"\nkind = \"psu\"\nwhen = \"rpm > 0\"\n"
     "severity = \"warning\"\nsummary = \"s\"\n", "alerts.rules[0]: when: unknown name 'rpm'"),
    ("notifier type", "[[notifiers]]\ntype = \"pager\"\nurl = \"http://x\"\n",
     "notifiers[0].type: Input should be 'webhook', 'slack', 'discord' or 'ntfy'"),
    ("notifier secret url", "[[notifiers]]\ntype = \"slack\"\nurl = \"hooks.slack.com/T0/B0/secret\"\n",
     "notifiers[0].url: must be an http:// or https:// URL"),
]


@pytest.mark.parametrize("name, text, message", BAD, ids=[b[0] for b in BAD])
def test_bad_config_names_the_field_and_exits_2(tmp_path, name, text, message):
    path = tmp_path / "rigmon.toml"
    path.write_text(text)
    done = check(path)
    assert done.returncode == 2, done.stdout
    assert message in done.stderr
    assert done.stderr.startswith(str(path))
    assert "Traceback" not in done.stderr
    assert "secret" not in done.stderr.replace("password_sha256", "")  # secrets are never echoed


def test_missing_file_exits_2(tmp_path):
    done = check(tmp_path / "absent.toml")
    assert done.returncode == 2 and "cannot read" in done.stderr


def test_good_config_prints_effective_config_with_secret_masked(tmp_path):
    digest = "ab" * 32
    path = tmp_path / "rigmon.toml"
    path.write_text("[daemon]\ninterval = 2.5\n[prometheus.basic_auth]\nusername = \"ops\"\n"
                    "password_sha256 = \"${RIGMON_TEST_HASH}\"\n")
    done = check(path, env={**os.environ, "RIGMON_TEST_HASH": digest})
    assert done.returncode == 0, done.stderr
    assert "interval = 2.5" in done.stdout and "[prometheus.basic_auth]" in done.stdout
    assert digest not in done.stdout and "**********" in done.stdout
    assert "port = 9963" in done.stdout


def test_no_file_means_defaults():
    assert config.load(None) == config.Config() or config.DEFAULT_PATH.exists()


def test_schema_is_json_schema():
    done = subprocess.run([sys.executable, "-m", "rigmon", "config", "schema"], capture_output=True, text=True)
    schema = json.loads(done.stdout)
    assert schema["additionalProperties"] is False
    assert "daemon" in schema["properties"] and "interval" in json.dumps(schema)
