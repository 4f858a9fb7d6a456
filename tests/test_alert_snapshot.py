"""The HTTP threads read alert state while the poll thread changes it: they see one poll's
state, whole (an immutable snapshot published once per poll). Scraped continuously for a
minute while a replay makes 8 GPUs' alerts flip at every 0.1 s poll."""

import copy
import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

import pytest
import scenarios as sc
from servers import Rigmon, http_get, wait_for

from rigmon.model.recording import Recording

SECONDS = 15  # 150 polls, each flipping every GPU
GPUS = 8


def flipping(gpus: int = GPUS, ticks: int = 40, step: float = 0.1) -> Recording:
    """Every GPU at 95 °C on even ticks and 60 °C on odd ones."""
    base = sc.one_tick(sc.h200().widened(gpus))
    template, t0 = base.ticks[0], base.ticks[0]["t"]
    out = []
    for i in range(ticks):
        tick = copy.deepcopy(template)
        tick["t"] = round(t0 + i * step, 3)
        for g in tick["gpus"]:
            g["nvmlDeviceGetTemperatureV:0"] = g["nvmlDeviceGetTemperature:0"] = 95 if i % 2 == 0 else 60
        out.append(tick)
    return Recording(copy.deepcopy(base.header), out)


CONFIG = """
[daemon]
interval = "0.1s"

[gpu]
xid_events = false

[[alerts.rules]]
name = "Flip"
kind = "gpu"
when = "temperature_celsius >= 90"
severity = "warning"
summary = "GPU {gpu} at {temperature_celsius:.0f}"
"""


@pytest.mark.slow
def test_scrapes_see_whole_polls_while_alerts_flip_every_poll(tmp_path):
    path = sc.write(flipping(), tmp_path / "flip.rec.jsonl")
    rigmon = Rigmon(tmp_path, replay=path, config=CONFIG)
    stop = threading.Event()
    result = Counter()
    firing_seen = Counter()
    problems = []

    def scrape(which: str):
        url = rigmon.url if which == "metrics" else rigmon.url.replace("/metrics", "/state")
        while not stop.is_set():
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    body = r.read().decode()
            except (OSError, urllib.error.URLError) as e:
                result["failed"] += 1
                problems.append(f"{which}: {e}")
                continue
            if which == "metrics":
                active = sum(1 for line in body.splitlines() if line.startswith('rigmon_alert_active{alertname="Flip"'))
                transitions = [
                    line
                    for line in body.splitlines()
                    if line.startswith("rigmon_alert_transitions_total") and 'alertname="Flip"' in line
                ]
            else:
                state = json.loads(body)
                active = sum(1 for a in state["alerts"] if a["alertname"] == "Flip")
                transitions = True
            firing_seen[active] += 1
            if active not in (0, GPUS) or not transitions:
                problems.append(f"{which}: {active} of {GPUS} firing")
            result[which] += 1

    try:
        rigmon.wait_ready()
        # The replay's clock starts before the daemon's first poll, which may land on a 60 °C
        # tick: until a poll at 95 °C, no Flip transition exists to be seen, whole or not.
        wait_for(
            lambda: b'rigmon_alert_transitions_total{alertname="Flip"' in http_get(rigmon.url)[1],
            10,
            what="the first Flip transition",
        )
        threads = [threading.Thread(target=scrape, args=(w,)) for w in ("metrics", "metrics", "state", "state")]
        for t in threads:
            t.start()
        time.sleep(SECONDS)
        stop.set()
        for t in threads:
            t.join(30)
    finally:
        stop.set()
        code = rigmon.stop()
    log = rigmon.output()
    flips = log.count("FIRING warning Flip") + log.count("resolved warning Flip")
    print(
        f"\n{result['metrics']} /metrics and {result['state']} /state scrapes, {result['failed']} failed; "
        f"{flips} transitions; firing GPUs seen per scrape: {dict(firing_seen)}"
    )
    assert code == 0, log[-3000:]
    assert result["failed"] == 0 and not problems, problems[:10]
    assert result["metrics"] > 100 and result["state"] > 100
    assert firing_seen[0] > 0 and firing_seen[GPUS] > 0  # both states were seen: the alerts did flip
    assert flips > 20 * SECONDS, flips  # about one transition per GPU and poll
    assert "Traceback" not in log and "Exception" not in log and " ERROR " not in log, log[-3000:]
