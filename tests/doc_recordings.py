"""The recordings docs/alerts.md runs ``rigmon rules test --replay`` on (docs/recordings/): each a
scenario of tests/scenarios.py, written sparse (a tick holds only the answers that changed: a
replay carries the others forward, as the format says), so the files stay small.
``RIGMON_UPDATE_DOCS=1 tests/run -k docs_recordings`` writes them again."""

from __future__ import annotations

import json
from pathlib import Path

import scenarios as sc

from rigmon.model.recording import Recording

ROOT = Path(__file__).resolve().parents[1] / "docs" / "recordings"


def _held(t, tick):
    """The fan stopped and the CPU past its TjMax from 60 s: a dead cooler, a 115 °C CPU."""
    tick["host"] = {
        **sc.intel(115 if t >= 60 else 70, 100),
        "sensors_fans": {"nct6798": [["", 1150], ["", 0 if t >= 60 else 1150]]},
    }


RECORDINGS = {
    "fan-stopped-by-its-curve": lambda: sc.timeline(180, 5, modify=sc.fan_at_duty(0.0)),
    "fan-stalled-at-60-percent": lambda: sc.timeline(180, 5, modify=sc.fan_at_duty(0.6)),
    "ryzen-7000-at-95": lambda: sc.timeline(900, 15, host=sc.zen4(95, 100)),
    "i9-at-its-100-tjmax": lambda: sc.timeline(900, 15, host=sc.intel(100, 100)),
    "dead-cpu-cooler-115": lambda: sc.timeline(180, 5, modify=_held),
    "compositor-on-an-idle-gpu": lambda: sc.timeline(
        3600, 60, modify=sc.held_on_an_idle_gpu(2345, 25 << 20, "/usr/bin/gnome-shell")
    ),
    "stalled-training-job": lambda: sc.timeline(
        3600, 60, modify=sc.held_on_an_idle_gpu(4242, 20 << 30, "python train.py --ddp")
    ),
}


def made() -> dict[str, str]:
    """Each recording's file name and text, made from the bundled H200 recording (the tests'
    scenarios take ../shared's where it is beside the checkout: the files must not depend on it)."""
    from rigmon.model.recording import demo_path

    kept, sc.H200 = sc.H200, demo_path()
    try:
        return {f"{name}.rec.jsonl": sparse(build()) for name, build in RECORDINGS.items()}
    finally:
        sc.H200 = kept


def sparse(recording: Recording) -> str:
    """The recording as JSON Lines, each tick with only what changed since the one before."""
    lines = [json.dumps(recording.header, separators=(",", ":"), sort_keys=True)]
    last_gpus: list[dict] = []
    last_host: dict = {}
    for tick in recording.ticks:
        gpus = [
            {k: v for k, v in g.items() if n >= len(last_gpus) or last_gpus[n].get(k) != v}
            for n, g in enumerate(tick.get("gpus", []))
        ]
        host = {k: v for k, v in tick.get("host", {}).items() if last_host.get(k) != v}
        out = {"t": tick["t"], **({"label": tick["label"]} if "label" in tick else {}), "gpus": gpus, "host": host}
        lines.append(json.dumps(out, separators=(",", ":"), sort_keys=True))
        last_gpus = [{**(last_gpus[n] if n < len(last_gpus) else {}), **g} for n, g in enumerate(tick.get("gpus", []))]
        last_host = {**last_host, **tick.get("host", {})}
    return "\n".join(lines) + "\n"
