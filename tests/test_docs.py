"""README, the docs and the shipped example config stay true."""

import os
import re
import subprocess
import sys
from pathlib import Path

import readme
import scenarios as sc
from servers import Rigmon, http_get, wait_for

ROOT = Path(__file__).resolve().parents[1]


def test_example_config_is_generated_valid_and_equals_the_defaults():
    from rigmon.config import schema as config

    shipped = (ROOT / "deploy" / "rigmon.toml").read_text()
    done = subprocess.run([sys.executable, "-m", "rigmon", "config", "example"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == shipped, "deploy/rigmon.toml: rigmon config example > it"
    assert config.load(ROOT / "deploy" / "rigmon.toml") == config.Config()
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "config", "check", str(ROOT / "deploy" / "rigmon.toml")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def every_field(model, prefix=""):
    from rigmon.config.render import _item_model, _model_of

    for name, field in model.model_fields.items():
        key = field.alias or name
        yield f"{prefix}{key}", field
        inner = _model_of(field.annotation) or _item_model(field.annotation)
        if inner is not None and key != "builtin":
            yield from every_field(inner, f"{prefix}{key}.")


def test_example_config_shows_every_setting_with_a_comment():
    from rigmon.config import schema as config

    shipped = (ROOT / "deploy" / "rigmon.toml").read_text()
    fields = list(every_field(config.Config))
    assert len(fields) > 80
    for path, field in fields:
        assert field.description, f"{path} has no description"
        key = path.rsplit(".", 1)[-1]
        assert re.search(rf"^(# )?(\[\[?[a-z_.]*{key}[].]|{key} = )", shipped, re.M), f"{path} is not in the example"


def test_example_config_commented_settings_are_valid_when_uncommented():
    """Each commented-out table and setting is a working example: uncomment them all (but the
    TLS files, which must exist, and password_sha256, the older alternative to password_bcrypt)
    and the file is still a valid config."""
    import tomllib

    from rigmon.config import schema as config

    lines = []
    for line in (ROOT / "deploy" / "rigmon.toml").read_text().splitlines():
        if re.match(r"^# (\[|[a-z0-9_]+ = )", line) and "tls_" not in line and "password_sha256" not in line:
            line = line[2:]
        lines.append(line)
    env = {
        "RIGMON_METRICS_PASSWORD_BCRYPT": "$2b$10$" + "a" * 53,
        "SLACK_WEBHOOK_URL": "https://hooks.slack.com/x",
        "NTFY_TOKEN": "t",
        "INFLUX_TOKEN": "t",
        "INFLUX_PASSWORD": "p",
    }
    c = config.parse(tomllib.loads("\n".join(lines)), "uncommented", env)
    assert c.alerts.rules[0].name == "GpuHot" and c.alerts.power_budget.groups[0].watts == 1500
    assert c.notifiers[0].type == "slack" and c.prometheus.basic_auth.username == "prometheus"
    assert c.alerts.builtin["FanStalled"].for_ == 60 and c.gpu.indices == [0, 1]


def test_the_metrics_table_matches_the_exporter(tmp_path):
    documented = set(re.findall(r"^\| `(rigmon_[a-z0-9_]+)`", (ROOT / "docs" / "metrics.md").read_text(), re.M))
    config = (
        f'[daemon]\ninterval = 0.3\nstate_dir = "{tmp_path / "state"}"\n'
        "[gpu]\nprocess_series = 2\n"
        '[influxdb]\nenabled = true\napi = "v1"\nurl = "http://127.0.0.1:9"\n'
    )
    rigmon = Rigmon(tmp_path, sc.write(sc.rich(sc.h200()), tmp_path / "rich.rec.jsonl"), config)
    try:
        rigmon.wait_ready()

        def exported():  # counters carry _total here
            body = http_get(rigmon.url, {"Accept": "text/plain"})[1].decode()
            return set(re.findall(r"^# TYPE (rigmon_[a-z0-9_]+) ", body, re.M))

        try:  # what the first polls show, once every documented family is there (the XID tick's too)
            names = wait_for(lambda: (n := exported()) >= documented and n, 10, what="every documented family")
        except TimeoutError:
            names = exported()
    finally:
        rigmon.stop()
    assert names - documented == set(), "exported but not in docs/metrics.md"
    assert documented - names == set(), "in docs/metrics.md but not exported"


def test_readme_has_exactly_two_setup_commands():
    commands = readme.sh_blocks("Set up")
    assert len(commands) == 2, commands
    assert "rigmon run" in commands[0] and commands[1].strip() == "tests/run"


def test_every_toml_example_is_valid_config():
    import tomllib

    from rigmon.config import schema as config

    blocks = readme.blocks("toml")
    assert len(blocks) >= 5 and any(p.name == "README.md" for p, _ in blocks)
    env = {"SLACK_WEBHOOK_URL": "https://hooks.slack.example/T/B/x", "NTFY_TOKEN": "tk", "INFLUX_TOKEN": "t"}
    for path, block in blocks:
        config.parse(tomllib.loads(block), path.name, env)


def test_readme_is_short_and_every_link_lands():
    """README is for a newcomer; the reference is in docs/. A link to a file or a heading that
    is not there fails, in README and in every doc."""
    assert len(readme.README.read_text().splitlines()) <= 350
    for path in readme.FILES:
        text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            assert linked.exists(), f"{path.name} links to {target}, which is not there"
            if anchor:
                headings = re.findall(r"^#+ (.*)$", linked.read_text(), re.M)
                slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
                assert anchor in slugs, f"{path.name} links to {target}: no such heading in {linked.name}"


def test_the_docs_recordings_are_the_scenarios():
    """docs/recordings/ holds what tests/doc_recordings.py makes of the scenarios, no more or less:
    what docs/alerts.md shows a user can run is what the tests check."""
    import doc_recordings

    made = doc_recordings.made()
    if os.environ.get("RIGMON_UPDATE_DOCS"):
        for name, text in made.items():
            (doc_recordings.ROOT / name).write_text(text)
    shipped = {p.name: p.read_text() for p in doc_recordings.ROOT.glob("*.rec.jsonl")}
    assert shipped == made, "docs/recordings: RIGMON_UPDATE_DOCS=1 tests/run -k docs_recordings"
