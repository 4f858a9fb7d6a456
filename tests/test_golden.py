"""Golden files: what an 8-GPU box's poll becomes in /metrics and in InfluxDB line protocol,
committed, so any change to an output shows as a diff in review. The rich scenario (host
sensors, fans, ECC, PSU input) at the recording's load tick, at a fixed time.

A change that means to change an output rewrites them: RIGMON_UPDATE_GOLDEN=1 tests/run -k golden
"""

import difflib
import os
from pathlib import Path

import pytest
import scenarios as sc
from prometheus_client import CollectorRegistry, generate_latest

from rigmon.config import schema as configmod
from rigmon.exporters.prometheus import _families
from rigmon.model.recording import Recording, demo_path
from rigmon.poller import build_poller
from rigmon.sinks.lineprotocol import encode

GOLDEN = Path(__file__).resolve().parent / "golden"
TIME = 1796085950.0  # the sample's time, fixed


class _Sample:
    def __init__(self, sample):
        self.sample = sample

    def collect(self):
        return _families(self.sample, {})


@pytest.fixture(scope="module")
def sample():
    config = configmod.parse({"influxdb": {"enabled": False}, "prometheus": {"enabled": False}}, "test")
    # the recording the wheel carries, wherever the suite runs (the shared fixture may be absent)
    source = sc.source(sc.rich(Recording.load(demo_path()), gpus=8), sc.LOAD_AT)
    poller = build_poller(config, source, wall=lambda: TIME, event_thread=False)
    poller.open()
    try:
        return poller.poll()
    finally:
        poller.close()


def _compare(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("RIGMON_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    want = path.read_text()
    diff = "".join(
        difflib.unified_diff(want.splitlines(True), text.splitlines(True), f"{name} (committed)", f"{name} (now)")
    )
    assert text == want, f"{name} changed (RIGMON_UPDATE_GOLDEN=1 rewrites it if it should):\n{diff[:6000]}"


def test_metrics_of_an_eight_gpu_poll(sample):
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Sample(sample))
    _compare("rich8.metrics", generate_latest(registry).decode())


def test_line_protocol_of_an_eight_gpu_poll(sample):
    _compare("rich8.lp", "\n".join(encode(sample, "box-01", with_info=True)) + "\n")
