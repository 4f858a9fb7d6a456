"""A replay run faster than the wall (``rigmon run --replay F --speed N``): it polls as often as
its recording was made, no more often than the box can, and says skipped polls counted, not one
line each; the alerts it posts to a real
Alertmanager start and end no later than Alertmanager's now, so a resolved one ends at once."""

from __future__ import annotations

import time

import pytest
import scenarios as sc
from receiver import Receiver
from servers import Alertmanager, Rigmon, wait_for


def polls_a_second(rigmon: Rigmon, polls: int) -> float:
    """The daemon's polls a second of the wall, over its next ``polls`` polls."""
    first, started = rigmon.metric("rigmon_polls_total"), time.monotonic()
    wait_for(lambda: rigmon.metric("rigmon_polls_total") - first >= polls, 60, what=f"{polls} polls")
    return (rigmon.metric("rigmon_polls_total") - first) / (time.monotonic() - started)


def test_a_replay_at_a_thousand_times_says_a_few_lines_while_it_polls_on(tmp_path):
    """Three hours of a steady GPU (no loop within the test) at 1000 times as fast: the skipped
    polls are said once and counted, never a line each."""
    steady = sc.write(sc.timeline(3 * 3600, 5), tmp_path / "steady.rec.jsonl")
    rigmon = Rigmon(tmp_path, steady, "", extra_args=["--speed", "1000"])
    try:
        rigmon.wait_ready()
        rate = polls_a_second(rigmon, 30)
    finally:
        rigmon.stop()
    lines = [line for line in rigmon.output().splitlines() if line.strip()]
    print(f"{len(lines)} lines, {rate:.1f} polls a second")
    assert len(lines) <= 12, "\n".join(lines[:40])
    assert not any("apscheduler" in line for line in lines), lines
    assert 2 <= rate <= 12, rate  # about ten a second: 100 s of the replay each, not one


def test_a_replay_run_faster_polls_as_often_as_it_was_recorded(tmp_path):
    """A day recorded once a minute, at 60 times as fast: a poll a second of the wall (a minute
    of the replay), each a new tick, not ten reading the same one."""
    day = sc.write(sc.timeline(24 * 3600, 60), tmp_path / "day.rec.jsonl")
    rigmon = Rigmon(tmp_path, day, "", extra_args=["--speed", "60"])
    try:
        rigmon.wait_ready()
        rate = polls_a_second(rigmon, 4)
        assert rigmon.metric("rigmon_poll_interval_seconds") == 60
    finally:
        rigmon.stop()
    assert 0.6 <= rate <= 1.4, rate  # at the 1 s interval: 0.1 s of the wall, ten a second
    assert "every 60 s" in rigmon.output(), rigmon.output()[-2000:]


def hot_then_cool(t, tick):
    for g in tick["gpus"]:
        g["nvmlDeviceGetTemperature:0"] = 95 if t < 600 else 60


@pytest.mark.system  # Alertmanager
def test_at_sixty_times_alertmanager_ends_a_resolved_alert_at_once(tmp_path):
    """Ten minutes at 95 °C, then half an hour cool, replayed 60 times as fast: the alert reaches
    Alertmanager started no later than its now, and leaves its active list as soon as the
    replay resolves it (10 s of the wall in), not when the wall reaches the replay's end."""
    receiver = Receiver()
    am = Alertmanager(tmp_path, receiver.url)
    recording = sc.write(sc.timeline(2400, 1, modify=hot_then_cool), tmp_path / "hot.rec.jsonl")
    config = f'[[notifiers]]\ntype = "alertmanager"\nurl = "{am.url}"\n'
    rigmon = Rigmon(tmp_path, recording, config, extra_args=["--speed", "60"])
    try:
        rigmon.wait_ready()

        def held() -> list[dict]:
            return [a for a in am.alerts() if a["labels"]["alertname"] == "GpuAtSlowdownTemperature"]

        (alert,) = wait_for(held, 20, interval=0.2, what="the alert at Alertmanager")
        posted = time.time()
        assert alert["startsAt"] <= time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(posted + 1)), alert
        rigmon.wait_output("resolved critical GpuAtSlowdownTemperature", 30)
        resolved = time.monotonic()
        wait_for(lambda: not held(), 10, interval=0.2, what="Alertmanager to end the resolved alert")
        print(f"ended {time.monotonic() - resolved:.1f} s after the replay resolved it")
    finally:
        rigmon.stop()
        am.stop()
        receiver.stop()
