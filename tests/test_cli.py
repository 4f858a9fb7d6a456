"""The command line as a user meets it."""

import json
import subprocess
import sys

import pytest
import scenarios as sc


def rigmon(*args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "rigmon", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_status_replay_json_in_base_units():
    """The issue's must-show: the shared H200 recording, read under load."""
    done = rigmon("status", "--replay", str(sc.H200), "--at", "10", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    gpu = out["gpus"][0]
    assert gpu["power_watts"] == 692.159
    assert gpu["power_limit_watts"] == 700.0
    assert gpu["sm_clock_hertz"] == 1470e6
    assert gpu["clock_events"]["sw_power_cap"] is True
    assert gpu["clock_events_active"] == ["sw_power_cap"]
    assert out["gpu_info"][0]["temperature_thresholds"]["slowdown"] == 89
    assert out["replay"]["label"] == "load"


def test_status_table_shows_units_and_unsupported():
    done = rigmon("status", "--demo", "--at", "10")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    for expected in ("NVIDIA H200", "692.2 / 700 W", "63 °C", "1470 MHz", "sw_power_cap", "n/s", "5x16 / 5x16",
                     "no temperature or fan sensors"):
        assert expected in text, expected


def test_status_with_eight_replayed_gpus():
    done = rigmon("status", "--demo", "--at", "10", "--replay-gpus", "8", "--json")
    assert len(json.loads(done.stdout)["gpus"]) == 8


def test_status_without_nvml_still_shows_the_host(tmp_path):
    path = sc.write(sc.with_host(sc.no_nvml(sc.h200()), sensors_temperatures=sc.K10TEMP_TDIE), tmp_path / "x.jsonl")
    done = rigmon("status", "--replay", str(path))
    assert done.returncode == 0, done.stderr
    assert "NVML unavailable (LibraryNotFound" in done.stdout
    assert "k10temp Tdie" in done.stdout


def test_watch_refreshes_until_interrupted():
    proc = subprocess.Popen([sys.executable, "-m", "rigmon", "status", "--demo", "--watch", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    import signal
    import time

    time.sleep(2.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert out.count("rigmon status") >= 3


def test_version_and_help():
    assert rigmon("--version").stdout.startswith("rigmon ")
    helptext = rigmon("--help").stdout
    for command in ("status", "record", "config", "run"):
        assert command in helptext
    assert rigmon("status", "--replay", "/nonexistent.jsonl").returncode == 2


@pytest.mark.parametrize("argv", [["status", "--replay-gpus", "0", "--demo"], ["record", "--demo", "--out", "/x",
                                                                               "--seconds", "-1"]])
def test_bad_arguments_exit_2(argv):
    done = rigmon(*argv)
    assert done.returncode == 2 and "Traceback" not in done.stderr
