"""The table of readings: every reading reaches each output it names, the old rule-variable
names keep working with a warning, the docs' tables are the table's, and the layout has no
import circle (nothing below ``rigmon.commands`` imports it)."""

import ast
import importlib
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import scenarios as sc
from prometheus_client.parser import text_string_to_metric_families

import rigmon
from rigmon.config import schema as configmod
from rigmon.model import readings
from rigmon.sinks import lineprotocol

ROOT = Path(__file__).resolve().parents[1]


def rigmon_cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "rigmon", *args], capture_output=True, text=True, timeout=timeout)


def learned(sample):
    """A cooling detector that has learned every subject of ``sample`` at its load (a GPU's fans at
    50 %, a CPU's fan curve at 40 %), and whose last window ran 2 °C hotter (a GPU), 3 °C hotter
    (a CPU) or 3 rpm faster (a fan): every cooling reading has a value at the next poll."""
    from rigmon.readers.cooling import Detector

    def track(load, width, value, now, fan=None):
        band = int(load // width)
        day = 86400.0
        fans = (fan * day, day) if fan is not None else (0.0, 0.0)
        return {
            "first": now - 4 * day,
            "learned": True,
            "bands": [[band, day, value * day, *fans]],
            "recent": [[now, band, day, (value + (2 if width > 1 else 3)) * day, *fans, load * day]],
        }

    now = sample.time
    host = sample.host
    pwm = {(f.chip, f.device, f.fan): f.pwm_ratio for f in host.fan_controls}
    data = {
        "format": 1,
        "reference": "inlet",
        "gpus": {
            g.uuid: track(g.power_watts, 25.0, 30.0, now, fan=0.5) for g in sample.gpus if g.power_watts is not None
        },
        "cpus": {
            f"cpu{c.socket}": track(host.cpu_utilization_ratio, 0.1, 20.0, now, fan=0.4) for c in host.cpu_temperatures
        },
        "fans": {
            f"{f.chip}/{f.device}/{f.label}": track(pwm[(f.chip, f.device, f.label)], 0.05, 1000.0, now)
            for f in host.fans
            if pwm.get((f.chip, f.device, f.label)) is not None
        },
    }
    detector = Detector(None)
    detector._take(data)
    return detector


def one_poll(recording, at=sc.LOAD_AT, start=None, cooling=False, then=()):
    """One sample of a replay through the daemon's sinks: (sample, exposition, points, entities);
    with ``start``, the readers open there and the replay moves on to ``at``; with ``cooling``,
    a poll before it has taught the cooling baselines every subject (``learned``); ``then``: the
    later times it polls at, the last one's sample kept."""
    config = configmod.parse(
        {
            "influxdb": {"enabled": False},
            "prometheus": {"enabled": False},
            "jobs": {"enabled": False},
            "gpu": {
                "pcie_throughput": True,
                "pcie_expected_generation": {"0": 5},
                "pcie_expected_width": {"0": 16},
                "process_series": 4,
            },
        },
        "test",
    )
    with sc.Replayed(recording, config, at=at if start is None else start) as replayed:
        sample = replayed.poll()
        if cooling:
            replayed.pipeline.cooling = learned(sample)
            sample = replayed.poll(at)
        if start is not None:
            sample = replayed.poll(at)
        for t in then:
            sample = replayed.poll(t)
        exposition = replayed.metrics()
        entities = replayed.daemon.pipeline.alerts.engine.entities(sample)
    points = lineprotocol.encode(sample, "box", with_info=True)
    return sample, exposition, points, entities


def test_every_reading_reaches_the_outputs_it_names():
    """Eight GPUs with every optional reading between two boards: an Ampere-or-newer one with row
    remapping, GPU fans, every ECC counter and host sensors, and one before Ampere (retired pages)."""
    ecc = {f"nvmlDeviceGetTotalEccErrors__{t},{c}": 3 for t in (0, 1) for c in (0, 1)}
    rich = sc.on_every_gpu(sc.gpu_fans(sc.rich(sc.h200(), gpus=8)), **ecc)
    series, fields, entities = set(), {}, {}
    every_reason = sc.on_every_gpu(rich, nvmlDeviceGetCurrentClocksEventReasons=0x7FF)  # a sparse family's series

    def still(t, tick):  # …and another's: an energy counter that stands still at 692 W
        sc.set_gpu(tick, nvmlDeviceGetPowerUsage=692_000 + 150 * (int(t) % 3), nvmlDeviceGetTotalEnergyConsumption=9)

    stuck = (sc.timeline(120, 5, modify=still), {"at": 0, "then": range(5, 121, 5)})
    polls = [(r, {}) for r in (rich, sc.pre_ampere(rich), sc.asleep(sc.mig(rich, gpu=0), gpu=1), every_reason)]
    for recording, when in [*polls, stuck]:
        _, exposition, points, seen = one_poll(recording, cooling=True, **when)
        series |= {
            (s.name, tuple(sorted(s.labels.items())))
            for f in text_string_to_metric_families(exposition)
            for s in f.samples
        }
        for point in points:
            measurement = point.split(",", 1)[0]
            body = point.split(" ")[-2]
            fields.setdefault(measurement, set()).update(re.findall(r"(?:^|,)([a-z0-9_<>]+)=", body))
        for key, values in seen.items():
            entities.setdefault(key, {}).update(values)
    names = {name for name, _ in series}
    kinds = {key[0] for key in entities}
    checked = {"prometheus": 0, "influxdb": 0, "rules": 0}
    for r in readings.READINGS:
        entity = readings.ENTITIES[r.entity]
        if r.family is not None:
            family = readings.FAMILIES[r.family]
            exported = family.name + ("_total" if family.type == "counter" else "")
            assert exported in names, f"{r.name}: no {exported} series"
            if r.labels and family.type == "info":  # the reading is a label of the family's one series
                assert any(n == exported and r.labels[0] in dict(labels) for n, labels in series), r.name
            elif r.labels:
                own = dict(zip(family.labels, r.labels, strict=True))
                assert any(n == exported and own.items() <= dict(labels).items() for n, labels in series), (
                    f"{r.name}: no {exported}{own}"
                )
            checked["prometheus"] += 1
        measurement = r.measurement or entity.measurement
        if r.influx and measurement is not None:
            field = f"fan0_{r.name}" if r.entity == "gpu_fan" else r.name
            assert field in fields.get(measurement, set()), f"{r.name}: no field in {measurement}"
            checked["influxdb"] += 1
        if r.rule and entity.rule_kind in kinds:
            assert any(r.name in v for k, v in entities.items() if k[0] == entity.rule_kind), (
                f"{r.name}: not a {entity.rule_kind} variable"
            )
            checked["rules"] += 1
    everything = {
        "prometheus": sum(1 for r in readings.READINGS if r.family),
        "influxdb": sum(
            1 for r in readings.READINGS if r.influx and (r.measurement or readings.ENTITIES[r.entity].measurement)
        ),
        "rules": sum(1 for r in readings.READINGS if r.rule and readings.ENTITIES[r.entity].rule_kind in kinds),
    }
    assert checked == everything


def test_a_lost_gpu_exports_only_that_it_is_lost():
    sample, exposition, points, entities = one_poll(
        sc.gpu_lost(sc.h200(), gpus=2, lost=1, from_second=5.0), at=30.0, start=0.0
    )
    assert 'rigmon_gpu_up{gpu="1",uuid=' in exposition and re.search(r'rigmon_gpu_up\{gpu="1"[^}]*\} 0\.0', exposition)
    assert not re.search(r'rigmon_gpu_power_watts\{gpu="1"', exposition)
    lost = next(p for p in points if p.startswith("gpu,gpu=1,"))
    assert " lost=true " in lost and "power_watts" not in lost
    # rules still see the lost GPU's thresholds (read once at start)
    assert entities[("gpu", 1)]["lost"] is True and entities[("gpu", 1)]["slowdown_celsius"] == 89.0
    assert "power_watts" not in entities[("gpu", 1)]


def test_old_rule_variable_names_work_with_a_warning(tmp_path):
    config = tmp_path / "rigmon.toml"
    config.write_text(
        '[[alerts.rules]]\nname = "Busy"\nkind = "gpu"\n'
        'when = "utilization_gpu >= 0.5 and sw_power_cap"\nseverity = "warning"\n'
        'summary = "GPU {gpu} at {utilization_gpu:.0%}"\n'
        '[[alerts.rules]]\nname = "Draw"\nkind = "psu"\nwhen = "power_watts > 10"\n'
        'severity = "info"\nsummary = "{psu} {power_watts:.0f} W"\n'
        "[alerts.power_budget]\nwatts = 2000\n"
    )
    done = rigmon_cli("config", "check", str(config))
    assert done.returncode == 0, done.stderr
    for old, new in (
        ("utilization_gpu", "utilization_gpu_ratio"),
        ("sw_power_cap", "event_sw_power_cap"),
        ("power_watts", "draw_watts"),
    ):
        assert f"variable '{old}' is deprecated and goes in the next release; use '{new}'" in done.stderr
    done = rigmon_cli("rules", "test", "--config", str(config), "--replay", str(sc.H200), "--all")
    assert done.returncode == 0, done.stderr
    busy = [line for line in done.stdout.splitlines() if "FIRING" in line and "Busy" in line]
    assert busy and re.search(r"GPU 0 at \d+%", busy[0]), busy  # the old name in the summary has its value
    draw = [line for line in done.stdout.splitlines() if "FIRING" in line and " Draw " in line]
    assert draw and re.search(r"all GPUs[ +A-Z]* \d+ W", draw[0]), draw


def test_a_new_name_and_its_old_one_are_the_same_variable():
    from rigmon.alerts.rules import Expression

    old = Expression("utilization_gpu >= 0.5", "gpu", {})
    assert old.deprecated == {"utilization_gpu": "utilization_gpu_ratio"}
    assert old.variables == {"utilization_gpu_ratio"}
    assert old.evaluate({"utilization_gpu_ratio": 0.9}) is True
    # a param of the old name is the user's own: not renamed
    assert Expression("utilization_gpu >= 0.5", "gpu", {"utilization_gpu": 1}).deprecated == {}


def test_the_docs_tables_are_the_table():
    held = set()
    for path in sorted((ROOT / "docs").glob("*.md")):
        text = path.read_text()
        assert readings.docs(text) == text, (
            f"{path.name}'s tables differ from rigmon/model/readings.py: run python -m rigmon.model.readings docs/*.md"
        )
        held |= {name for name in readings.DOC_TABLES if f"<!-- readings:{name} -->" in text}
    assert held == set(readings.DOC_TABLES)


def _modules():
    for info in pkgutil.walk_packages(rigmon.__path__, "rigmon."):
        yield info.name


@pytest.mark.slow
def test_nothing_below_the_commands_imports_them():
    below = [m for m in _modules() if not m.startswith("rigmon.commands") and m != "rigmon.__main__"]
    # at run time: each module imported alone, in a fresh interpreter
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('rigmon.commands')))"
    )
    for name in below:
        done = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]", f"{name} imports {done.stdout.strip()}"
    # and in the source, imports inside functions too
    for name in below:
        spec = importlib.util.find_spec(name)
        tree = ast.parse(Path(spec.origin).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = importlib.util.resolve_name(
                    "." * node.level + (node.module or ""),
                    name.rpartition(".")[0] if not spec.submodule_search_locations else name,
                )
                assert not target.startswith("rigmon.commands") and target != "rigmon.cli", f"{name}: {target}"


def test_the_architecture_names_every_package_and_module():
    text = (ROOT / "docs" / "development.md").read_text()
    paragraph = text[text.index("How it fits together") : text.index("Adding a per-poll NVML reading")]
    named = set(re.findall(r"`(rigmon/[a-z_/]+(?:\.py)?)`", paragraph))
    for path in named:
        assert (ROOT / path).exists(), f"docs/development.md names {path}, which is not there"
    packages = {f"rigmon/{p.name}/" for p in (ROOT / "rigmon").iterdir() if (p / "__init__.py").exists()}
    assert packages <= named, f"not described: {packages - named}"


NEW_POLLED = '    Polled("memory_clock_max_hertz", (("nvmlDeviceGetMaxClockInfo", (2,)),), "hertz"),\n'
NEW_READING = (
    '    R("memory_clock_max_hertz", "gpu", "g.memory_clock_max_hertz", "hertz", "memory clock maximum",\n'
    '      Family("rigmon_gpu_memory_clock_max_hertz", "gauge", "Maximum memory clock."), page=True),\n'
)
SEE_IT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import scenarios as sc
from rigmon.model.recording import Recording, demo_path
from rigmon.http.page import Page
from rigmon.sinks import lineprotocol
with sc.Replayed(Recording.load(demo_path()), {"prometheus": {"enabled": False}}, at=sc.LOAD_AT) as r:
    sample = r.poll()
    entities = r.daemon.pipeline.alerts.engine.entities(sample)
    history = r.pipeline.history
    state = Page(r.pipeline, history, r.config.jobs).state_dict()
    now = history.latest
    kept = history.query(["gpu0/memory_clock_max_hertz"], now - 60, now)["series"].get("gpu0/memory_clock_max_hertz")
    print(json.dumps({"metrics": r.metrics(), "points": lineprotocol.encode(sample, "box"),
                      "variable": entities[("gpu", 0)].get("memory_clock_max_hertz"),
                      "state": state["gpus"][0].get("memory_clock_max_hertz"),
                      "card": Page(r.pipeline, history, r.config.jobs).index("")[1].decode(), "history": kept}))
"""


def test_a_new_per_poll_reading_is_two_table_lines_and_reaches_every_output(tmp_path):
    """GPU memory-clock max, added as a line in the per-poll NVML table (its call and conversion)
    and a line in the table of readings (its name, unit, family), and nothing else: a copy of
    the installed package with just those two lines shows it in /metrics, in the line protocol,
    as a rule variable a rule fires on, in ``status --json``, in ``rules list --variables`` and, with
    page=True on its line, in the page's /api/state, its card's readings and its week of history."""
    package = tmp_path / "site" / "rigmon"

    shutil.copytree(Path(rigmon.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    polled = package / "model" / "polled.py"
    text = polled.read_text()
    polled.write_text(text.replace('    Polled("performance_state"', NEW_POLLED + '    Polled("performance_state"'))
    table = package / "model" / "readings.py"
    text = table.read_text()
    anchor = '    R("memory_used_bytes", "gpu"'
    assert anchor in text
    table.write_text(text.replace(anchor, NEW_READING + anchor, 1))
    env = {**os.environ, "PYTHONPATH": str(package.parent)}

    def run(*args):
        done = subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    seen = json.loads(run("-c", SEE_IT, str(ROOT / "tests")))
    assert 'rigmon_gpu_memory_clock_max_hertz{gpu="0",uuid=' in seen["metrics"]
    assert any(",memory_clock_max_hertz=" in p or " memory_clock_max_hertz=" in p for p in seen["points"])
    want = seen["variable"]
    assert want and want > 1e9  # the H200's memory clock maximum, in hertz
    # the page: /api/state's GPU, the card's readings (each shown by its unit), the week's history
    assert seen["state"] == want and '{"name": "memory_clock_max_hertz", "unit": "hertz"' in seen["card"]
    assert seen["history"] and seen["history"][-1][2] == pytest.approx(want)
    status = json.loads(run("-m", "rigmon", "status", "--demo", "--at", str(sc.LOAD_AT), "--json"))
    assert status["gpus"][0]["memory_clock_max_hertz"] == want
    assert "memory_clock_max_hertz" in run("-m", "rigmon", "rules", "list", "--variables")
    config = tmp_path / "rule.toml"
    config.write_text(
        '[[alerts.rules]]\nname = "MemoryClockCapped"\nkind = "gpu"\nseverity = "warning"\n'
        'when = "memory_clock_hertz < memory_clock_max_hertz"\n'
        'summary = "memory clock below its maximum"\n'
    )
    assert "MemoryClockCapped" in run("-m", "rigmon", "rules", "test", "--demo", "--config", str(config), "--all")
    # and in the copy as installed, nothing but the two tables differs
    changed = sorted(
        p.name
        for p in package.rglob("*.py")
        if p.read_bytes() != (Path(rigmon.__file__).parent / p.relative_to(package)).read_bytes()
    )
    assert changed == ["polled.py", "readings.py"]


def test_the_influxdb_table_lists_every_measurement_rigmon_writes(tmp_path):
    import scenarios as sc

    from rigmon.sinks.lineprotocol import encode, encode_burnin_progress, encode_burnin_verdict, encode_transition

    documented = set(re.findall(r"^\| `([a-z_]+)` \|", (ROOT / "docs" / "influxdb.md").read_text(), re.M))
    with sc.Replayed(sc.rich(sc.h200(), gpus=4), {"daemon": {"state_dir": str(tmp_path)}}, recording_time=True) as r:
        sample = r.poll(2)
    lines = encode(sample, "box", with_info=True)
    lines += [
        encode_burnin_progress(
            "box", "run1", "gpu0", 0, {"tokens_per_s": 1.0, "loss": 2.0, "step": 3, "t": 1.0}, 1.0, 0.0
        ),
        encode_burnin_verdict("box", "run1", "pass", 60.0, 0),
    ]
    from rigmon.alerts.engine import Transition

    lines.append(
        encode_transition(Transition("firing", "X", "warning", {"gpu": "0"}, "s", "", "", 1.0, None, 1.0, {}), "box")
    )
    written = {line.split(",", 1)[0] for line in lines if line}
    assert {"gpu", "gpu_info", "host", "xid", "alert", "burnin", "burnin_verdict"} <= written
    assert written - documented == set(), f"written but not in docs/influxdb.md: {written - documented}"


def test_a_process_memory_nvml_does_not_give_is_left_out_never_zero():
    """Under WSL (or WDDM) NVML gives no process's memory: the processes are counted, their
    memory is unknown, so no series says 0 bytes for it (nor the process series)."""
    rec = sc.on_every_gpu(
        sc.rich(sc.h200(), gpus=4), nvmlDeviceGetComputeRunningProcesses=[{"pid": 4242, "usedGpuMemory": None}]
    )
    sample, exposition, points, _ = one_poll(rec)
    assert sample.gpus[0].processes[0].used_memory_bytes is None
    assert 'rigmon_gpu_processes{gpu="0"' in exposition
    assert "rigmon_gpu_processes_memory_bytes{" not in exposition and "rigmon_gpu_job_memory_bytes{" not in exposition
    assert "rigmon_gpu_process_memory_bytes{" not in exposition
    assert not any("processes_memory_bytes=" in p for p in points)
