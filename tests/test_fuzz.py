"""Fuzz of what comes from outside: recordings whose answers have the wrong type in every
position (surrogates, huge counts, nested garbage), replayed through every output (status,
line protocol, the exposition, the alert engine); and rule sets with every kind of template
and expression. No traceback, no failed render, memory bounded."""

from __future__ import annotations

import copy
import json
import random
import resource

import pytest
import scenarios as sc
from prometheus_client.exposition import choose_encoder

from rigmon.config.schema import ConfigError, parse
from rigmon.model.recording import Recording, RecordingError

GARBAGE = [
    None,
    -1,
    0,
    10**12,
    -(10**18),
    1e308,
    float("nan"),
    "x",
    "\ud800",
    "\x1b[2J\n",
    "é" * 300,
    [],
    {},
    [[1]],
    [None, "a"],
    {"a": 1},
    {"gpu": "x", "memory": []},
    True,
    {"nvml_error": "Bogus"},
    {"nvml_error": "GpuIsLost"},
    {"nvml_error": 5},
    [{"pid": "x"}],
    [{"pid": 1, "usedGpuMemory": -5}],
    [{"pid": 10**30}],
    {"total": "a", "free": None, "used": []},
]
COUNTS = ("nvmlDeviceGetNumFans", "nvmlDeviceGetCount", "nvmlDeviceGetMaxPcieLinkWidth")


def _mutate(base: Recording, rng: random.Random) -> Recording:
    rec = Recording(copy.deepcopy(base.header), copy.deepcopy(base.ticks[:3]))
    for _ in range(rng.randint(1, 6)):
        where = rng.randrange(6)
        value = rng.choice(GARBAGE)
        if where == 0:  # a GPU call in the header
            gpu = rec.header["gpus"][0]
            gpu[rng.choice(list(gpu))] = value
        elif where == 1:  # a GPU call in a tick
            gpu = rng.choice(rec.ticks)["gpus"][0]
            gpu[rng.choice(list(gpu) or ["nvmlDeviceGetPowerUsage"])] = value
        elif where == 2:  # a count that would size a list
            target = rec.header["gpus"][0] if rng.random() < 0.7 else rec.header.get("nvml", {})
            target[rng.choice(COUNTS)] = rng.choice([10**12, -3, 2**63, "many", 1e300])
        elif where == 3:  # the host's answers
            host = rng.choice(rec.ticks).setdefault("host", {})
            host[
                rng.choice(
                    [
                        "sensors_temperatures",
                        "sensors_fans",
                        "cpu_percent",
                        "processes",
                        "hwmon",
                        "powercap",
                        "virtual_memory",
                        "getloadavg",
                        "start_times",
                    ]
                )
            ] = rng.choice(
                GARBAGE
                + [
                    {"chip": [[value, value, value, value]]},
                    {"1": {"user": value, "cmdline": value, "cgroup": value, "pgid": value}},
                ]
            )
        elif where == 4:  # a name or a uuid
            rec.header["gpus"][0][rng.choice(["nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetSerial"])] = (
                rng.choice(["\ud800bad", "\x1b]52;c;eA==\x07", "a\nb", "x" * 5000, 7, None, ["a"]])
            )
        else:  # processes on the GPU
            rng.choice(rec.ticks)["gpus"][0]["nvmlDeviceGetComputeRunningProcesses"] = rng.choice(
                [[{"pid": n, "usedGpuMemory": value} for n in range(3)], value, [value] * 3]
            )
    return rec


def _every_output(rec: Recording, path) -> None:
    from rigmon.config.schema import Config
    from rigmon.exporters.exposition import Exposition
    from rigmon.sinks.lineprotocol import encode
    from rigmon.status import as_json, render

    text = json.dumps(rec.header) + "\n" + "".join(json.dumps(t) + "\n" for t in rec.ticks)
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        rec = Recording.load(path)
    except RecordingError as e:
        assert str(e)
        return
    config = Config.model_validate(
        {
            "daemon": {"state_dir": str(path.parent / "state")},
            "gpu": {"xid_events": False},
            "prometheus": {"enabled": False},
            "jobs": {"enabled": False},
        }
    )
    replayed = sc.Replayed(rec, config)
    exposition = Exposition()
    try:
        for at in (0.0, 0.4, 1.0):
            sample = replayed.poll(at)
            for line in encode(sample, "h", True):
                line.encode("utf-8", "backslashreplace")
                assert "\n" not in line
            json.dumps(as_json(sample), allow_nan=False)
            render(sample)
            for accept in ("text/plain", "application/openmetrics-text; version=1.0.0"):
                exposition.encoder(choose_encoder(accept)[0])(replayed.registry)
    finally:
        replayed.close(0.0)


@pytest.mark.slow
def test_fuzz_recordings_through_every_output(tmp_path, caplog):
    rng = random.Random(29)
    base = sc.h200()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for i in range(2000):
        rec = _mutate(base, rng)
        try:
            _every_output(rec, tmp_path / "m.rec.jsonl")
        except Exception as e:
            pytest.fail(f"recording {i}: {type(e).__name__}: {e}\n{json.dumps(rec.header)[:2000]}")
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage() and r.levelname == "ERROR"]
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(
        f"\nfuzz: 2,000 damaged recordings through status, line protocol, /metrics and the rules; "
        f"peak memory +{grown:.0f} MiB; {len(failed)} sink failures logged"
    )
    assert not failed, failed[:5]
    assert grown < 300


def test_fuzz_rule_sets(tmp_path):
    """1,000 rule sets with random templates (format specs, unknown names) and expressions:
    each is refused with its field named, or runs on a replayed box without a traceback."""
    from rigmon.poller import build_poller
    from rigmon.sinks.alerts import build_engine

    rng = random.Random(30)
    names = ["temperature_celsius", "power_watts", "memory_total_bytes", "gpu", "name", "p", "nope", "xid_total"]
    specs = ["", ":c", ":d", ":.2f", ":>60", ":x", ":%", ":e", ":,", ":=^20", ":b", ":s", ":.0f", ":99", ":{p}"]
    expressions = [
        "temperature_celsius > p",
        "power_watts / 0 > 1",
        "name == 'H200'",
        "increase(xid_total, 60) > 0",
        "memory_total_bytes * 10**6 > p",
        "abs(power_watts) > -1",
        "p > 0 and nope",
        "rate(x, 1) > 1",
        "max(power_watts, p) >= 0",
        "temperature_celsius >",
    ]
    rec = sc.one_tick(sc.h200())
    source = sc.source(rec, 0)
    poller = build_poller(parse({"gpu": {"xid_events": False}}, "fuzz"), source, event_thread=False)
    poller.open()
    sample = poller.poll()
    poller.close()
    accepted = refused = 0
    for _ in range(1000):
        rules = []
        for n in range(rng.randint(1, 3)):
            fields = ["{" + rng.choice(names) + rng.choice(specs) + "}" for _ in range(rng.randint(1, 3))]
            summary = " ".join(fields) + " {p}"  # p read, so an unused param is not what refuses it
            rules.append(
                {
                    "name": f"R{n}",
                    "kind": "gpu",
                    "when": rng.choice(expressions),
                    "severity": "warning",
                    "summary": summary,
                    "params": {"p": rng.choice([0, 1, 10**9, 2.5, True, -7])},
                }
            )
        try:
            config = parse({"alerts": {"rules": rules}}, "fuzz", env={})
        except ConfigError as e:
            assert e.problems and all(m for _, m in e.problems)
            refused += 1
            continue
        accepted += 1
        engine = build_engine(config.alerts)
        for t in (0.0, 10.0):
            for transition in engine.evaluate(sample, sample.time + t):
                assert isinstance(transition.summary, str)
    print(f"\nfuzz: 1,000 rule sets, {accepted} accepted and run, {refused} refused with the field named")
    assert accepted > 100 and refused > 100
