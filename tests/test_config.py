"""``rigmon config check`` names the field and exits 2; good files print masked."""

import json
import os
import subprocess
import sys

import pytest

from rigmon.config import render
from rigmon.config import schema as config


def check(path, env=None):
    return subprocess.run(
        [sys.executable, "-m", "rigmon", "config", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


BAD = [
    (
        "unknown field",
        "[daemon]\ninterval = 1\nintervall = 2\n",
        "daemon.intervall: unknown field (did you mean interval?)",
    ),
    ("unknown section", "[gpus]\nenabled = true\n", "gpus: unknown field (did you mean gpu?)"),
    (
        "unknown nested field",
        '[[notifiers]]\ntype = "webhook"\nurl = "http://x"\nheader = {}\n',
        "notifiers[0].header: unknown field (did you mean headers?)",
    ),
    (
        "unknown override field",
        '[alerts.builtin.FanStalled]\nfro = "1m"\n',
        "alerts.builtin.FanStalled.fro: unknown field (did you mean for?)",
    ),
    ("wrong type", '[gpu]\npcie_throughput = "fast"\n', "gpu.pcie_throughput: Input should be a valid boolean"),
    ("bad duration setting", '[gpu]\nslow_interval = "fast"\n', "gpu.slow_interval: not a duration: 'fast'"),
    ("out of range", "[prometheus]\nport = 70000\n", "prometheus.port: Input should be less than or equal to 65535"),
    ("not positive", "[daemon]\ninterval = 0\n", "daemon.interval: Input should be greater than 0"),
    ("bad list item", "[gpu]\nindices = [0, -1]\n", "gpu.indices[1]: Input should be greater than or equal to 0"),
    ("bad choice", '[daemon]\nlog_level = "loud"\n', "daemon.log_level: Input should be 'debug', 'info'"),
    ("bad TOML", "[daemon\ninterval = 1\n", "not valid TOML"),
    (
        "missing env",
        '[prometheus.basic_auth]\nusername = "u"\npassword_sha256 = "${NO_SUCH_VAR_X}"\n',
        "prometheus.basic_auth.password_sha256: environment variable NO_SUCH_VAR_X is not set",
    ),
    (
        "bad hash",
        '[prometheus.basic_auth]\nusername = "u"\npassword_sha256 = "secret"\n',
        "prometheus.basic_auth.password_sha256: must be 64 hex digits",
    ),
    (
        "missing field",
        '[prometheus.basic_auth]\nusername = "u"\n',
        "prometheus.basic_auth: set one of password_bcrypt (preferred) or password_sha256",
    ),
    (
        "misspelt builtin param",
        "[alerts.builtin.GpuStarved]\nparams = { min_power_ratoi = 0.5 }\n",
        "alerts: builtin.GpuStarved: params.min_power_ratoi: no condition, value or text of the rule reads it (did "
        "you mean min_power_ratio?)",
    ),
    (
        "misspelt placeholder",
        '[[alerts.rules]]\nname = "X"\nkind = "gpu"\nwhen = "power_watts > 1"\n'
        'severity = "info"\nsummary = "at {temperatur_celsius}"\n',
        "alerts.rules[0]: summary: {temperatur_celsius}: unknown name (did you mean temperature_celsius?)",
    ),
    (
        "headline naming a value",
        '[[alerts.rules]]\nname = "X"\nkind = "gpu"\nwhen = "power_watts > 1"\n'
        'severity = "info"\nsummary = "x"\nheadline = "GPU {gpu} on {instance} at {power_watts}"\n',
        "alerts.rules[0]: headline: {power_watts}: unknown name",
    ),
    (
        "headline formatting a label",
        '[alerts.builtin.GpuStarved]\nheadline = "GPU {gpu:>3}"\n',
        "alerts: builtin.GpuStarved: headline: {gpu:>3}: a label is text: {gpu} alone",
    ),
    (
        "misspelt variable",
        '[[alerts.rules]]\nname = "X"\nkind = "gpu"\nwhen = "temperatur_celsius > 1"\n'
        'severity = "info"\nsummary = "x"\n',
        "alerts.rules[0]: when: unknown name 'temperatur_celsius' (did you mean temperature_celsius?)",
    ),
    (
        "bad param type",
        '[alerts.builtin.GpuStarved]\nparams = { min_power_ratio = "half" }\n',
        "alerts.builtin.GpuStarved.params.min_power_ratio: a param is a number or true/false",
    ),
    (
        "unknown builtin rule",
        "[alerts.builtin.GpuStarvd]\nenabled = false\n",
        "alerts: no built-in rule named GpuStarvd (did you mean GpuStarved?)",
    ),
    (
        "rule with a typo",
        '[alerts.builtin.GpuStarved]\nwhen = "utilisation_gpu > 0.9"\n',
        "alerts: builtin.GpuStarved: when: unknown name 'utilisation_gpu'",
    ),
    (
        "bad duration",
        '[alerts.builtin.GpuStarved]\nfor = "10 parsecs"\n',
        "alerts.builtin.GpuStarved.for: not a duration: '10 parsecs'",
    ),
    (
        "user rule syntax",
        '[[alerts.rules]]\nname = "X"\nkind = "gpu"\nwhen = "power_watts >"\nseverity = "warning"\nsummary = "s"\n',
        "alerts.rules[0]: when: syntax error",
    ),
    (
        "user rule kind",
        '[[alerts.rules]]\nname = "X"\nkind = "psu"\nwhen = "rpm > 0"\nseverity = "warning"\nsummary = "s"\n',
        "alerts.rules[0]: when: unknown name 'rpm'",
    ),
    (
        "notifier type",
        '[[notifiers]]\ntype = "pager"\nurl = "http://x"\n',
        "notifiers[0].type: Input should be 'webhook', 'alertmanager', 'slack', 'discord' or 'ntfy'",
    ),
    (
        "notifier secret url",
        '[[notifiers]]\ntype = "slack"\nurl = "hooks.slack.com/T0/B0/secret"\n',
        "notifiers[0].url: must be an http:// or https:// URL",
    ),
]


@pytest.mark.parametrize("name, text, message", BAD, ids=[b[0] for b in BAD])
def test_bad_config_names_the_field_and_exits_2(tmp_path, name, text, message):
    path = tmp_path / "rigmon.toml"
    path.write_text(text)
    done = check(path)
    assert done.returncode == 2, done.stdout
    assert " ".join(message.split()) in " ".join(done.stderr.split())  # a long one wraps at COLUMNS
    assert done.stderr.startswith(str(path))
    assert "Traceback" not in done.stderr
    if name == "bad param type":  # one problem, not one per type it could have been
        assert sum(line.startswith(str(path)) for line in done.stderr.splitlines()) == 1
    assert "secret" not in done.stderr.replace("password_sha256", "")  # secrets are never echoed


def test_missing_file_exits_2(tmp_path):
    done = check(tmp_path / "absent.toml")
    assert done.returncode == 2 and "cannot read" in done.stderr


def test_good_config_prints_effective_config_with_secret_masked(tmp_path):
    digest = "ab" * 32
    path = tmp_path / "rigmon.toml"
    path.write_text(
        '[daemon]\ninterval = 2.5\n[prometheus.basic_auth]\nusername = "ops"\n'
        'password_sha256 = "${RIGMON_TEST_HASH}"\n[influxdb]\ntoken = "literal-secret"\n'
    )
    done = check(path, env={**os.environ, "RIGMON_TEST_HASH": digest})
    assert done.returncode == 0, done.stderr
    assert 'interval = "2.5s"' in done.stdout and "[prometheus.basic_auth]" in done.stdout
    assert digest not in done.stdout and 'password_sha256 = "${RIGMON_TEST_HASH}"' in done.stdout
    assert "literal-secret" not in done.stdout and 'token = "********"' in done.stdout
    assert "port = 9963" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == f"# OK: {path} is a valid rigmon config"


# A config with every kind of table: notifiers (with headers), overrides, custom rules with
# params, PSU groups; secrets by reference, as README advises.
FULL = """\
[daemon]
interval = "5s"
state_dir = "/srv/rigmon"

[gpu]
indices = [0, 2]
slow_interval = 10

[prometheus]
listen = "127.0.0.1"
port = 9999

[prometheus.basic_auth]
username = "prom"
password_sha256 = "${HASH}"

[alerts]
repeat_interval = "2h"
expected_sensors = ["fan:nct6798/fan2", "NVML"]

[alerts.builtin.FanStalled]
for = "1m"

[alerts.builtin.GpuStarved]
params = { min_power_ratio = 0.4 }
severity = "critical"

[alerts.builtin.GpuPowerCapped]
enabled = false

[[alerts.rules]]
name = "GpuHot"
kind = "gpu"
when = "temperature_celsius >= limit and strict"
clear = "temperature_celsius < limit - 5"
for = "90s"
severity = "warning"
summary = "GPU {gpu} hot"
params = { limit = 83, strict = true }

[alerts.power_budget]
watts = 3000
include_cpu = false

[[alerts.power_budget.groups]]
name = "psu A"
watts = 1500
gpus = [0, 1]

[[alerts.power_budget.groups]]
name = "psu B"
watts = 1500
gpus = [2, 3]
include_cpu = true

[[notifiers]]
type = "slack"
url = "${SLACK}"
min_severity = "critical"

[[notifiers]]
type = "webhook"
url = "https://hooks.example/x?key=${HOOK_KEY}"
name = "lab"
headers = { "X-Api-Key" = "${HOOK_KEY}", Tenant = "${TENANT}" }
retry_max = "5m"

[influxdb]
enabled = true
url = "https://influx.lab:8086"
org = "lab"
token = "${INFLUX_TOKEN}"
flush_interval = "2s"
spool_max_bytes = 1048576

[burnin]
price_per_kwh = 0.31
currency = "CHF"
"""
ENV = {
    "HASH": "cd" * 32,
    "SLACK": "https://hooks.slack.com/services/T0/B0/xyzsecret",
    "HOOK_KEY": "k3y-secret",
    "TENANT": "tenant-secret",
    "INFLUX_TOKEN": "influx-secret",
}


def leaves(data, path=""):
    if isinstance(data, dict):
        return {k: v for key, value in data.items() for k, v in leaves(value, f"{path}.{key}").items()} or {path: {}}
    if isinstance(data, list) and data and all(isinstance(v, dict) for v in data):
        return {k: v for i, item in enumerate(data) for k, v in leaves(item, f"{path}[{i}]").items()}
    return {path: data}


def test_config_check_output_parses_back_into_the_same_config(tmp_path):
    import tomllib

    path = tmp_path / "rigmon.toml"
    path.write_text(FULL)
    original = config.parse(tomllib.loads(FULL), "full", ENV)
    done = check(path, env={**os.environ, **ENV})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert all(value not in out for value in ENV.values())  # secrets never printed
    assert "for_" not in out and 'for = "1m"' in out and 'for = "1m30s"' in out and 'repeat_interval = "2h"' in out
    assert "[alerts.builtin.FanStalled]" in out and "[[alerts.rules]]" in out and "[alerts.rules.params]" in out
    assert out.count("[[alerts.power_budget.groups]]") == 2 and out.count("[[notifiers]]") == 2
    parsed = tomllib.loads(out)
    back = config.parse(parsed, "check output", ENV)
    assert back == original
    settings = leaves(render.masked(original))
    preserved = {k for k, v in leaves(render.masked(back)).items() if settings.get(k) == v}
    assert preserved == set(settings), set(settings) - preserved
    print(f"\nconfig check round trip: {len(preserved)} of {len(settings)} settings preserved")


def test_durations_are_accepted_everywhere():
    c = config.parse(
        {
            "daemon": {"interval": "0.5s"},
            "gpu": {"slow_interval": "1m"},
            "influxdb": {"timeout": "30s", "flush_interval": 2, "retry_max": "1h"},
            "notifiers": [{"type": "webhook", "url": "http://x", "timeout": "5s", "max_age": "2h"}],
        }
    )
    assert (c.daemon.interval, c.gpu.slow_interval, c.influxdb.timeout, c.influxdb.flush_interval) == (0.5, 60, 30, 2)
    assert (c.influxdb.retry_max, c.notifiers[0].timeout, c.notifiers[0].max_age) == (3600, 5, 7200)


def test_a_secret_comes_from_a_systemd_credential(tmp_path):
    (tmp_path / "INFLUX_TOKEN").write_text("from-credential\n")
    c = config.parse({"influxdb": {"token": "${INFLUX_TOKEN}"}}, env={"CREDENTIALS_DIRECTORY": str(tmp_path)})
    assert c.influxdb.token.get_secret_value() == "from-credential"
    c = config.parse(
        {"influxdb": {"token": "${INFLUX_TOKEN}"}},
        env={"CREDENTIALS_DIRECTORY": str(tmp_path), "INFLUX_TOKEN": "from-env"},
    )
    assert c.influxdb.token.get_secret_value() == "from-env"  # the environment first
    with pytest.raises(config.ConfigError, match="INFLUX_TOKEN is not set nor a credential"):
        config.parse({"influxdb": {"token": "${INFLUX_TOKEN}"}}, env={"CREDENTIALS_DIRECTORY": str(tmp_path / "x")})


def test_no_file_means_defaults():
    assert config.load(None) == config.Config() or config.DEFAULT_PATH.exists()


def test_schema_is_json_schema():
    done = subprocess.run([sys.executable, "-m", "rigmon", "config", "schema"], capture_output=True, text=True)
    schema = json.loads(done.stdout)
    assert schema["additionalProperties"] is False
    assert "daemon" in schema["properties"] and "interval" in json.dumps(schema)


SIX_WRONG = """\
[daemon]
interval = -1

[prometheus]
port = 70000

[alerts]
repeat_interval = "-5m"

[alerts.builtin.GpuStarved]
params = { min_power_ratio = 5 }

[alerts.builtin.GpuNearSlowdown]
params = { margin_celsius = -50 }

[alerts.builtin.CpuTemperatureCritical]
params = { max_celsius = 900, ovr_celsius = 5 }

[alerts.builtin.GpuStarvd]
enabled = false

[[notifiers]]
type = "webhook"
url = "https://hooks.example.com/${RIGMON_NOT_SET_ANYWHERE}"
"""


def test_every_wrong_value_is_told_in_one_run_within_80_columns(tmp_path):
    """Six kinds of wrong value (a negative time, a port out of range, a share above 1, a negative
    margin, a temperature no sensor reads, a misspelt threshold), a misspelt rule name and an
    unset variable: every one told in the same run, each naming its field, exit 2, nothing
    wider than COLUMNS."""
    path = tmp_path / "rigmon.toml"
    path.write_text(SIX_WRONG)
    env = {k: v for k, v in os.environ.items() if k != "RIGMON_NOT_SET_ANYWHERE"}
    done = subprocess.run(  # the file named as a user names it, from its folder
        [sys.executable, "-m", "rigmon", "config", "check", "rigmon.toml"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "COLUMNS": "80"},
        cwd=tmp_path,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    problems = [line for line in done.stderr.splitlines() if line.startswith("rigmon.toml: ")]
    told = " ".join(done.stderr.split())
    for field in (
        "daemon.interval:",
        "prometheus.port:",
        "alerts.repeat_interval:",
        "builtin.GpuStarved: params.min_power_ratio: 5 is no share",
        "builtin.GpuNearSlowdown: params.margin_celsius: -50 is no margin",
        "builtin.CpuTemperatureCritical: params.max_celsius: 900 is outside",
        "params.ovr_celsius: no condition, value or text of the rule reads it (did you mean over_celsius?)",
        "notifiers[0].url: environment variable RIGMON_NOT_SET_ANYWHERE is not set",
        "alerts: no built-in rule named GpuStarvd (did you mean GpuStarved?)",  # beside the rules' thresholds
    ):
        assert field in told, (field, done.stderr)
    assert len(problems) == 9, done.stderr
    assert max(len(line) for line in done.stderr.splitlines()) <= 80, done.stderr


def test_a_plain_webhook_url_shows_as_typed_and_a_hook_token_does_not(tmp_path):
    path = tmp_path / "rigmon.toml"
    path.write_text(
        '[[notifiers]]\ntype = "webhook"\nurl = "http://alerts.lab:8080/hook"\n'
        '[[notifiers]]\ntype = "slack"\nurl = "https://hooks.slack.com/services/T00/B00/sekrit"\n'
        '[[notifiers]]\ntype = "alertmanager"\nurl = ["https://ops:pa55@am1.lab:9093", "http://am2.lab:9093"]\n'
    )
    done = check(path)
    assert done.returncode == 0, done.stderr
    assert 'url = "http://alerts.lab:8080/hook"' in done.stdout
    assert 'url = "https://hooks.slack.com/********"' in done.stdout
    assert '"https://ops:********@am1.lab:9093"' in done.stdout and '"http://am2.lab:9093"' in done.stdout
    assert "sekrit" not in done.stdout and "pa55" not in done.stdout
