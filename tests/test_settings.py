"""The config as plain data (rigmon.config.settings): what the daemon gets from a child's validation and
what one-shot commands keep in the user's cache reads exactly as the validated models do; the
cache follows every change of the file and of the environment it names, keeps no secret, and
trusts no file it did not write; a bad config fails the same way on every path."""

import json
import marshal
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from rigmon.config import schema as configmod
from rigmon.config.settings import ConfigError, Secret, Settings, cached, validated

RICH = """
[daemon]
interval = 2
state_dir = "{tmp}/state"
[gpu]
indices = [0, 2]
[prometheus]
port = 9999
[prometheus.basic_auth]
username = "admin"
password_sha256 = "${{PROM_HASH}}"
[alerts.builtin.FanStalled]
for = "1m"
[[alerts.rules]]
name = "HotBox"
kind = "host"
when = "cpu_utilization_ratio > limit"
params = {{ limit = 0.9 }}
severity = "warning"
summary = "CPU {{cpu_utilization_ratio}}"
[[notifiers]]
type = "ntfy"
url = "https://ntfy.example/${{TOPIC}}"
token = "tk_secret"
"""
HASH = "a" * 64


def _validate(path):
    return configmod.settings(configmod.load(path))


@pytest.fixture
def rich(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PROM_HASH", HASH)
    monkeypatch.setenv("TOPIC", "gpus")
    path = tmp_path / "rigmon.toml"
    path.write_text(RICH.format(tmp=tmp_path))
    return path


def _same(view, model):
    """Every field of the pydantic model reads the same through the view."""
    for name in type(model).model_fields:
        a, b = getattr(view, name), getattr(model, name)
        if isinstance(b, BaseModel):
            _same(a, b)
        elif hasattr(b, "get_secret_value"):
            assert a.get_secret_value() == b.get_secret_value(), name
        elif isinstance(b, list) and b and isinstance(b[0], BaseModel):
            for x, y in zip(a, b, strict=True):
                _same(x, y)
        elif isinstance(b, dict) and b and isinstance(next(iter(b.values())), BaseModel):
            assert a.keys() == b.keys(), name
            for key in b:
                _same(a[key], b[key])
        else:
            assert a == b, name


def test_the_view_reads_as_the_models_do(rich):
    model = configmod.load(rich)
    view = configmod.settings(model)
    _same(view, model)
    assert [s.name for s in view.alerts.effective_rules()] == [s.name for s in model.alerts.effective_rules()]
    fan = next(s for s in view.alerts.effective_rules() if s.name == "FanStalled")
    assert fan.for_ == 60.0
    assert view.notifiers[0].url.get_secret_value() == "https://ntfy.example/gpus"
    assert "tk_secret" not in repr(view.notifiers[0].token) and "tk_secret" not in str(view.notifiers[0].token)
    with pytest.raises(AttributeError):
        view.daemon.interval = 5
    assert pickle.loads(pickle.dumps(view)) == view


def test_the_cache_keeps_no_secret_and_follows_the_file_and_its_environment(rich, tmp_path, monkeypatch):
    first = cached(rich, _validate)
    assert first.notifiers[0].token.get_secret_value() == "tk_secret"  # validated now: all of it
    files = list((tmp_path / "cache" / "rigmon").glob("config-*.pickle"))
    assert len(files) == 1
    assert oct(files[0].stat().st_mode & 0o777) == "0o600"
    raw = files[0].read_bytes()
    assert b"tk_secret" not in raw and HASH.encode() not in raw and b"ntfy.example" not in raw

    calls = []

    def counting(path):
        calls.append(path)
        return _validate(path)

    again = cached(rich, counting)
    assert calls == [] and again.daemon.interval == 2.0 and again.gpu.indices == [0, 2]
    with pytest.raises(RuntimeError, match="without its secrets"):
        again.notifiers[0].token.get_secret_value()

    rich.write_text(rich.read_text().replace("interval = 2", "interval = 3"))  # the file changed
    assert cached(rich, counting).daemon.interval == 3.0 and len(calls) == 1
    monkeypatch.setenv("TOPIC", "other")  # a variable it names changed
    cached(rich, counting)
    assert len(calls) == 2
    monkeypatch.setenv("UNRELATED", "x")  # one it does not name: still a hit
    cached(rich, counting)
    assert len(calls) == 2


def test_a_new_setting_or_rule_of_rigmon_validates_afresh(monkeypatch):
    """An upgrade that adds a config section or a built-in rule (in the same version, too) must
    not answer from a cache made before it: the digest covers the installed models and rules."""
    from rigmon.config import settings as mod

    package = Path(mod.__file__).parents[1]
    assert all((package / name).is_file() for name in mod.SCHEMA_FILES), mod.SCHEMA_FILES
    before = mod._inputs(b"[daemon]\n", "/etc/rigmon/rigmon.toml")
    real = Path.read_bytes
    for changed in ("schema.py", "builtin.toml"):
        monkeypatch.setattr(Path, "read_bytes", lambda self, c=changed: real(self) + (b"#" if self.name == c else b""))
        assert mod._inputs(b"[daemon]\n", "/etc/rigmon/rigmon.toml") != before, changed


def test_a_cache_file_others_could_write_or_a_damaged_one_is_not_trusted(rich, tmp_path):
    cached(rich, _validate)
    (file,) = (tmp_path / "cache" / "rigmon").glob("config-*.pickle")
    calls = []

    def counting(path):
        calls.append(path)
        return _validate(path)

    os.chmod(file, 0o666)
    assert cached(rich, counting).daemon.interval == 2.0 and len(calls) == 1  # group/world-writable: ignored
    file.write_bytes(b"\x80\x05garbage")
    assert cached(rich, counting).daemon.interval == 2.0 and len(calls) == 2  # damaged: validated afresh


def test_systemd_credentials_are_never_cached(rich, tmp_path, monkeypatch):
    creds = tmp_path / "creds"
    creds.mkdir()
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    cached(rich, _validate)
    assert not (tmp_path / "cache" / "rigmon").exists()


def test_a_bad_config_names_its_field_on_every_path(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[daemon]\ninterval = -1\n")
    for load in (lambda: cached(bad, _validate), lambda: validated(bad)):
        with pytest.raises(ConfigError) as e:
            load()
        assert e.value.problems[0][0] == "daemon.interval" and str(bad) in e.value.source
    assert not list((tmp_path / "cache").rglob("config-*"))  # nothing cached for a bad file


def test_the_child_validates_with_the_command_lines_overrides_and_secrets(rich):
    view = validated(rich, {"prometheus": {"port": 9100, "listen": "127.0.0.1"}})
    assert view.prometheus.port == 9100 and view.prometheus.listen == "127.0.0.1"
    assert view.notifiers[0].token.get_secret_value() == "tk_secret"
    assert view.prometheus.basic_auth.password_sha256.get_secret_value() == HASH
    assert view == validated(rich, {"prometheus": {"port": 9100, "listen": "127.0.0.1"}})  # a reload's check
    assert view != validated(rich)
    assert isinstance(view, Settings) and isinstance(view.notifiers[0].token, Secret)


def test_the_rules_are_checked_once_and_compiled_from_the_check_elsewhere(rich):
    """The validation checks every rule's expressions; the settings carry what it found, so the
    daemon (or a cached status) compiles the rules without parsing one again, to the same code."""
    probe = """
import ast, json, sys
from rigmon.config.settings import validated
config = validated(sys.argv[1])
parsed = []
real = ast.parse
ast.parse = lambda *a, **k: parsed.append(a[0]) or real(*a, **k)
from rigmon.sinks.alerts import build_engine
engine = build_engine(config.alerts)
print(json.dumps({"parsed": parsed, "rules": sorted((r.name, r.when.body, sorted(r.when.reads))
                                                    for r in engine.rules)}))
"""
    done = subprocess.run([sys.executable, "-c", probe, str(rich)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found["parsed"] == []
    from rigmon.sinks.alerts import build_engine  # checked here, in this process, from scratch

    fresh = build_engine(configmod.load(rich).alerts)
    assert found["rules"] == [list(r) for r in sorted((r.name, r.when.body, sorted(r.when.reads)) for r in fresh.rules)]
    assert "HotBox" in {name for name, _, _ in found["rules"]}


def test_the_daemon_and_status_load_no_pydantic(rich, tmp_path):
    """What runs for weeks and what a user runs often: neither imports pydantic's models
    (status: once its config is cached)."""
    probe = """
import json, sys
from rigmon.config.settings import validated
from rigmon.daemon import Daemon
from rigmon.pipeline import Pipeline
config = validated(sys.argv[1])
pipeline = Pipeline.from_config(config)
print(json.dumps(sorted(sys.modules)))
"""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", probe, str(rich)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    validating = ("pydantic", "rigmon.config.schema", "rigmon.alerts.specs")
    assert [m for m in json.loads(done.stdout) if m.startswith(validating)] == []
    status = [sys.executable, "-X", "importtime", "-m", "rigmon", "status", "--demo", "--config", str(rich)]
    for run in range(2):
        done = subprocess.run(status, capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        loaded = re.search(r"\|\s+pydantic$", done.stderr, re.M) is not None
        assert loaded is (run == 0)  # the first run validates and caches; the next loads no models


def test_what_the_validation_warned_of_is_told_on_every_cached_run(tmp_path):
    """A deprecated name in the config is not validated again while the file stays the same,
    but status still says so every time it runs."""
    config = tmp_path / "rigmon.toml"
    config.write_text(
        f'[daemon]\nstate_dir = "{tmp_path / "state"}"\nhistory = 600\n'
        '[[alerts.rules]]\nname = "Busy"\nkind = "host"\nwhen = "cpu_utilization > 0.99"\n'
        'severity = "info"\nsummary = "busy"\n'
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    told = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "rigmon", "status", "--demo", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        told.append(sorted(line.split(": ", 1)[-1] for line in done.stderr.splitlines() if "WARNING" in line))
    assert len(list((tmp_path / "cache" / "rigmon").glob("config-*.pickle"))) == 1
    assert told[0] == told[1] and len(told[0]) == 2, told
    assert any("daemon.history" in line for line in told[0]) and any("'cpu_utilization'" in line for line in told[0])


def _daemon_start(config: Path, port: int, env: dict) -> tuple[bool, list[str]]:
    """``rigmon run --demo`` on ``config`` (which listens on ``port``) until its first /metrics
    answer, then stopped: whether a validation child ran (the daemon itself imports no
    pydantic; its child does, and inherits PYTHONPROFILEIMPORTTIME) and what it warned of."""
    from servers import http_get, wait_for

    argv = [sys.executable, "-m", "rigmon", "run", "--demo", "--config", str(config)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(lambda: http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)[0] == 200, 60, what="first answer")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    child = re.search(r"\|\s+pydantic$", err, re.M) is not None
    return child, sorted(line.split(": ", 1)[-1] for line in err.splitlines() if "WARNING" in line)


def test_a_daemon_restarted_on_the_same_config_without_secrets_validates_it_once(tmp_path):
    """The daemon keeps what its validation child made of a config (and what it warned of) in
    the cache, secrets left out: started again on the same file, with nothing it depends on
    changed, it answers without a child, and warns the same. A changed file, and a config
    holding a secret, are validated by the child at every start; the cache never holds one."""
    from servers import free_port

    port = free_port()
    config = tmp_path / "rigmon.toml"
    plain = f'[daemon]\nstate_dir = "{tmp_path / "state"}"\nhistory = 600\n[prometheus]\nlisten = "127.0.0.1"\n'
    config.write_text(plain + f"port = {port}\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPROFILEIMPORTTIME": "1"}
    env.pop("CACHE_DIRECTORY", None)
    starts = [_daemon_start(config, port, env) for _ in range(2)]
    assert [child for child, _ in starts] == [True, False], starts
    assert starts[0][1] == starts[1][1] and any("daemon.history" in line for line in starts[0][1]), starts
    changed = plain.replace("history = 600\n", "history = 600\ninterval = 2\n")
    config.write_text(changed + f"port = {port}\n")  # changed: validated afresh, then kept
    assert [_daemon_start(config, port, env)[0] for _ in range(2)] == [True, False]
    secret = '[[notifiers]]\ntype = "ntfy"\nurl = "https://ntfy.example/t"\ntoken = "tk_secret"\n'
    config.write_text(plain + f"port = {port}\n" + secret)
    assert [_daemon_start(config, port, env)[0] for _ in range(2)] == [True, True]  # a secret: the child every time
    kept = b"".join(p.read_bytes() for p in (tmp_path / "cache" / "rigmon").glob("config-*.pickle"))
    assert kept and b"tk_secret" not in kept


def test_generated_code_is_kept_and_only_its_own_trusted_file_is_read(tmp_path, monkeypatch):
    """The code compiled from generated source is kept in the cache and read back by the next
    start instead of compiled again; a file someone else could write, a damaged one, or one
    holding other source under the same name is compiled afresh."""
    from rigmon.system import codecache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = "def f(x):\n    return x * 6\n"

    def run(code) -> int:
        namespace: dict = {}
        exec(code, namespace)
        return namespace["f"](7)

    assert run(codecache.compiled(source, "<test>")) == 42
    (file,) = (tmp_path / "cache" / "rigmon" / "code").glob("*.marshal")
    assert file.stat().st_mode & 0o777 == 0o600

    def refused(*args):
        raise AssertionError("compiled again")

    monkeypatch.setattr(codecache, "compile", refused, raising=False)  # the kept code, or this
    assert run(codecache.compiled(source, "<test>")) == 42
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    kept = file.read_bytes()
    other = marshal.dumps(("not the same source", compile("def f(x):\n    return 0\n", "<test>", "exec")))
    for damage, mode in ((kept, 0o666), (b"\xffgarbage", 0o600), (other, 0o600)):
        file.write_bytes(damage)
        os.chmod(file, mode)
        assert run(codecache.compiled(source, "<test>")) == 42, (damage[:10], oct(mode))
