"""Each one-shot command loads what it uses and nothing of the daemon: no scheduler, no HTTP
server, no InfluxDB client, no burn-in. Run as users run them, each in a fresh interpreter,
and the modules it loaded read at its exit."""

import json
import subprocess
import sys

import pytest

FORBIDDEN = (
    "apscheduler",
    "influxdb_client",
    "rigmon.daemon",
    "rigmon.exporters.prometheus",
    "rigmon.sinks.influxdb",
    "rigmon.burnin",
    "torch",
)
PROBE = """
import json, sys
from rigmon.commands import main
try:
    main(sys.argv[2:])
except SystemExit:
    pass
with open(sys.argv[1], "w") as f:
    json.dump(sorted(sys.modules), f)
"""


@pytest.mark.parametrize(
    "args",
    [
        ["status", "--demo"],
        ["status", "--demo", "--json", "--replay-gpus", "8"],
        ["rules", "list"],
        ["rules", "list", "--variables"],
        ["rules", "test", "--demo"],
        ["doctor", "--demo"],
        ["config", "check"],
        ["jobs"],
        ["record", "--demo", "--seconds", "0.3", "--interval", "0.1", "--out", "{tmp}/x.rec.jsonl"],
    ],
    ids=" ".join,
)
def test_a_one_shot_command_loads_nothing_of_the_daemon(args, tmp_path):
    config = tmp_path / "rigmon.toml"
    config.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    args += [] if args[0] == "config" else ["--config", str(config)]
    if args[0] == "config":
        args.append(str(config))
    loaded = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(loaded), *args], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules = json.loads(loaded.read_text())
    assert [m for m in modules if m.split(".")[0] in FORBIDDEN or m.startswith(FORBIDDEN)] == [], args


def test_the_cli_entry_and_help_load_nothing_heavy():
    """``rigmon --help`` and the entry module: no config models (pydantic), no NVML, no psutil, no
    Prometheus client; each command imports its own needs on dispatch."""
    probe = (
        "import json, sys, contextlib, io\nfrom rigmon.commands import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout)
    heavy = (
        "pydantic",
        "rigmon.config.schema",
        "pynvml",
        "psutil",
        "prometheus_client",
        "rigmon.readers",
        "rigmon.alerts",
    )
    assert [m for m in modules if m.startswith(heavy)] == []
