"""The command line as a user meets it."""

import json
import os
import re
import subprocess
import sys

import pytest
import scenarios as sc


def rigmon(*args, env=None, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "rigmon", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


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
    for expected in (
        "°C/SLOW",
        "W/LIMIT",
        "SM MHz",
        "H200",
        "692/700",
        "63/89",
        "1470",
        "pwr-cap",
        "n/s",
        "Gen5 x16",
        "no temperature or fan sensors",
    ):
        assert expected in text, expected


def test_status_with_eight_replayed_gpus():
    done = rigmon("status", "--demo", "--at", "10", "--replay-gpus", "8", "--json")
    assert len(json.loads(done.stdout)["gpus"]) == 8


def test_status_without_nvml_still_shows_the_host(tmp_path):
    path = sc.write(sc.with_host(sc.no_nvml(sc.h200()), sensors_temperatures=sc.K10TEMP_TDIE), tmp_path / "x.jsonl")
    done = rigmon("status", "--replay", str(path))
    assert done.returncode == 0, done.stderr
    assert "GPUs: none (no NVIDIA driver is installed (libnvidia-ml.so.1 is not found))" in done.stdout
    assert "NVML CANNOT START" not in done.stdout  # a box without the driver that never had GPUs: nothing wrong
    assert "k10temp Tdie" in done.stdout


def test_watch_refreshes_until_interrupted():
    proc = subprocess.Popen(
        [sys.executable, "-m", "rigmon", "status", "--demo", "--watch", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    import signal

    frames = 0
    while frames < 2:  # two frames out: rigmon is running and refreshing, not starting
        frames += "rigmon status" in proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err  # Ctrl-C ends a watch quietly, with the shell's code for SIGINT
    assert "Traceback" not in err


def test_version_and_help():
    assert rigmon("--version").stdout.startswith("rigmon ")
    helptext = rigmon("--help").stdout
    for command in ("status", "record", "config", "run"):
        assert command in helptext
    assert rigmon("status", "--replay", "/nonexistent.jsonl").returncode == 2


@pytest.mark.parametrize(
    "argv", [["status", "--replay-gpus", "0", "--demo"], ["record", "--demo", "--out", "/x", "--seconds", "-1"]]
)
def test_bad_arguments_exit_2(argv):
    done = rigmon(*argv)
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_rules_test_prints_transitions_with_times(tmp_path):
    from test_alert_rules import SCENARIOS

    path = sc.write(SCENARIOS["GpuStarved"][0](), tmp_path / "starved.rec.jsonl")
    done = rigmon("rules", "test", "--replay", str(path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.lstrip().startswith("600.0 s") and "FIRING   warning  GpuStarved [gpu=0]" in line for line in lines)
    assert "fired: 1 warning" in done.stdout


def test_rules_test_on_the_h200_recording_is_quiet():
    done = rigmon("rules", "test", "--replay", str(sc.H200), "--all")
    assert done.returncode == 0 and "0 transition(s); fired: none" in done.stdout


def test_rules_list_shows_overrides(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[alerts.builtin.GpuStarved]\nenabled = false\n")
    import os

    done = rigmon("rules", "list", "--config", str(config), env={**os.environ, "COLUMNS": "100"})
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    at = next(n for n, line in enumerate(lines) if line.startswith("GpuStarved"))
    assert "(disabled)" in lines[at] and "for 10m" in lines[at]
    end = next(n for n in range(at + 1, len(lines)) if not lines[n].startswith(" "))
    block = " ".join(lines[at + 1 : end])
    assert "when:" in block and "utilization_gpu_ratio >= min_utilization" in block and "min_utilization=0.9" in block
    assert max(len(line) for line in lines) <= 100  # not a repr on one 300-column line
    at = lines.index(next(line for line in lines if line.startswith("GpuAtSlowdownTemperature")))
    assert "  inhibits: GpuNearSlowdown, GpuThermalSlowdown" in lines[at + 1 : at + 6]


def test_doctor_on_a_box_where_nothing_evaluates_says_what_to_do_and_exits_1():
    done = rigmon("doctor")  # this machine: no NVML, no hwmon, no power budget
    assert done.returncode == 1, done.stdout
    out = done.stdout
    # the facts, then once for the GPU rules, not once each
    flat = " ".join(out.split())  # as read, whatever the lines wrapped at
    assert flat.count("no NVIDIA driver is installed (libnvidia-ml.so.1 is not found)") == 2, out
    assert "NVML cannot start: LibraryNotFound, no NVIDIA driver is installed (20 rule(s)): install the NVIDIA" in flat
    assert "no power budget configured (2 rule(s)): set [alerts.power_budget] watts" in out
    assert "No rule can evaluate here" in out


def test_doctor_says_what_cannot_evaluate_and_why():
    done = rigmon("doctor", "--demo")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "FanStalled                 cannot evaluate: no fan sensors visible" in out
    assert "PowerBudgetExceeded        cannot evaluate: no power budget configured" in out
    assert "GpuStarved                 ok" in out
    assert "GPU 0: no fans (passively cooled" in out


def test_status_shows_the_alerts_of_a_recording(tmp_path):
    from test_alert_rules import SCENARIOS

    path = sc.write(SCENARIOS["GpuStarved"][0](), tmp_path / "starved.rec.jsonl")
    done = rigmon("status", "--replay", str(path), "--at", "700")
    assert "ALERTS  1 firing" in done.stdout
    assert (
        "WARNING  GpuStarved [gpu=0]  for 1m40s  GPU 0 (NVIDIA H200) shows 100% busy but draws 300 of 700 W"
        in done.stdout
    ), done.stdout
    early = rigmon("status", "--replay", str(path), "--at", "100", "--json")
    assert json.loads(early.stdout)["alerts"] == []


def test_live_status_without_a_daemon_says_alerts_are_unknown(default_port):
    done = rigmon("status")
    assert done.returncode == 0
    assert "ALERTS  unknown: no rigmon daemon answers on 127.0.0.1:9963" in done.stdout


def test_status_fits_120_columns_with_8_gpus_and_a_lost_one(tmp_path):
    rec = sc.rich(sc.gpu_lost(sc.h200(), gpus=8, lost=5, from_second=5.0))
    rec = sc.gpu_fans(rec, fans=2, percent=55, rpm=1650)
    path = sc.write(rec, tmp_path / "eight.rec.jsonl")
    done = rigmon("status", "--replay", str(path), "--at", "10")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    table = lines[2:11]
    assert max(len(line) for line in table) <= 120, max(table, key=len)
    assert table[0].startswith("GPU  NAME") and len(table) == 9
    # lost before status started: NVML never said its name
    assert table[6] == "5    unknown  LOST: fell off the bus or stopped answering"
    assert "55% 1650 ×2" in table[1]  # two fans that read the same, once


def test_status_hides_info_alerts_unless_all(tmp_path):
    from test_alert_rules import SCENARIOS

    path = sc.write(SCENARIOS["GpuPowerCapped"][0](), tmp_path / "capped.rec.jsonl")
    done = rigmon("status", "--replay", str(path), "--at", "170")
    assert "ALERTS  none firing" in done.stdout and "1 info alert(s) not shown: --all shows them" in done.stdout
    shown = rigmon("status", "--replay", str(path), "--at", "170", "--all")
    assert "ALERTS  1 firing" in shown.stdout and "INFO     GpuPowerCapped [gpu=0]" in shown.stdout


def test_status_shows_the_daemons_alerts_with_their_age(tmp_path):
    """The daemon on this machine (its hardware, not a replay: a replay's alerts are not this
    box's), with two rules of its own that fire here."""
    from servers import Rigmon, wait_for

    config = """
[[alerts.rules]]
name = "Watched"
kind = "host"
when = "gpus_at_start >= 0"
severity = "warning"
summary = "this box is watched"

[[alerts.rules]]
name = "Counted"
kind = "host"
when = "gpus_answering >= 0"
severity = "warning"
summary = "its CPUs are counted"
"""
    daemon = Rigmon(tmp_path, config=config)
    try:
        daemon.wait_ready()
        wait_for(lambda: "Watched" in daemon.output() and "Counted" in daemon.output(), 30, what="the daemon's alerts")
        conf = tmp_path / "status.toml"
        conf.write_text(daemon.config.read_text() + f"\n[prometheus]\nport = {daemon.port}\n")
        done = rigmon("status", "--config", str(conf))
    finally:
        daemon.stop()
    assert done.returncode == 0, done.stderr
    assert f"ALERTS  2 firing (from the daemon at 127.0.0.1:{daemon.port})" in done.stdout, done.stdout
    shown = [line for line in done.stdout.splitlines() if "Watched" in line or "Counted" in line]
    assert len(shown) == 2 and all(re.search(r"\]  for \w+s  ", line) for line in shown), shown


def test_watch_without_a_terminal_does_not_clear_and_json_is_one_object_per_line():
    import signal

    for extra, check in ((["--json"], "json"), ([], "text")):
        proc = subprocess.Popen(
            [sys.executable, "-m", "rigmon", "status", "--demo", "--watch", "0.2", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        seen, frames = [], 0
        while frames < 2:  # two frames out
            seen.append(proc.stdout.readline())
            frames += seen[-1].startswith("{") if check == "json" else "rigmon status" in seen[-1]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        out = "".join(seen) + out
        assert proc.returncode == 130, err
        assert "\x1b[" not in out
        if check == "json":
            frames = [json.loads(line) for line in out.splitlines()]
            assert len(frames) >= 2 and all("gpus" in f for f in frames)
        else:
            assert out.count("rigmon status") >= 2


def test_watch_json_into_head_exits_quietly():
    done = subprocess.run(
        f"{sys.executable} -m rigmon status --demo --watch 0.1 --json | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(done.stdout)["gpus"] and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--port", "99999"], "--port: a port is 0 to 65535 (0: any free one), not 99999"),
        (["status", "--demo", "--at", "999"], "--at 999: the recording lasts 53.3 s"),
        (["status", "--at", "5"], "--at goes only with --replay FILE or --demo"),
        (["status", "--replay-gpus", "8"], "--replay-gpus goes only with --replay FILE or --demo"),
        (["rules", "test"], "give --replay FILE (rigmon record makes one), or --demo"),
    ],
)
def test_options_that_cannot_work_are_one_clear_line(args, message):
    done = rigmon(*args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 3 and "Traceback" not in done.stderr  # argparse adds its usage


def test_rules_test_on_the_bundled_recording():
    done = rigmon("rules", "test", "--demo", "--replay-gpus", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    first = " ".join([lines[0], *(x.strip() for x in lines[1:3] if x.startswith(" "))])  # wraps past COLUMNS
    assert "2 GPU(s)" in first, done.stdout


def _throttled_eight(tmp_path):
    """8 GPUs; GPU 3 in thermal slowdown with five more reasons, GPU 5 hot at its slowdown threshold."""
    from scenarios import timeline

    def throttle(t, tick):
        for n, g in enumerate(tick["gpus"]):
            g["nvmlDeviceGetSupportedClocksEventReasons"] = 0x1FF
            g["nvmlDeviceGetCurrentClocksEventReasons"] = 0xED if n == 3 else 0x4
        tick["gpus"][5]["nvmlDeviceGetTemperature:0"] = 90

    return sc.write(timeline(30, 1, gpus=8, modify=throttle), tmp_path / "throttled.rec.jsonl")


@pytest.mark.parametrize("columns", [80, 100, 120])
def test_status_fits_the_terminal_and_keeps_the_worst_clock_event(tmp_path, columns):
    import os

    path = _throttled_eight(tmp_path)
    done = rigmon("status", "--replay", str(path), "--at", "10", env={**os.environ, "COLUMNS": str(columns)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns, max(lines, key=len)
    assert "\x1b" not in done.stdout  # no colour into a pipe
    rows = {line.split()[0]: line for line in lines[2:11] if line[:1].isdigit()}
    assert "HW-THERMAL" in rows["3"] and all("pwr-cap" in rows[g] for g in "0124567")
    assert rows["3"].endswith(("+5", "+4", "+3", "+2", "+1")) or columns >= 120  # the rest counted, not cut
    assert lines[0].startswith(f"rigmon status  {__import__('socket').gethostname()}")


def test_status_in_a_real_terminal_of_80_columns_is_in_colour(tmp_path):
    import fcntl
    import os
    import pty
    import re
    import struct
    import termios

    path = _throttled_eight(tmp_path)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rigmon", "status", "--replay", str(path), "--at", "10"],
        stdout=slave,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(30)
    os.close(master)
    text = out.decode()
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert "\x1b[31m" in text  # the thermal slowdown and the hot GPU, in red
    assert "\x1b" not in plain  # colours only, nothing else
    assert max(len(line) for line in plain.replace("\r", "").splitlines()) <= 80
    with_no_color = subprocess.run(
        [sys.executable, "-m", "rigmon", "status", "--replay", str(path), "--at", "10"],
        capture_output=True,
        text=True,
        env={**env, "NO_COLOR": "1"},
    )
    assert "\x1b" not in with_no_color.stdout


def test_status_exit_code_for_scripts(tmp_path):
    lost = sc.write(sc.gpu_lost(sc.h200(), gpus=2, lost=1, from_second=5.0), tmp_path / "lost.rec.jsonl")
    assert rigmon("status", "--replay", str(lost), "--at", "10", "--exit-code").returncode == 1
    assert rigmon("status", "--replay", str(lost), "--at", "10").returncode == 0
    assert rigmon("status", "--demo", "--at", "10", "--exit-code").returncode == 0


def test_doctor_says_when_the_service_could_not_see_this_python():
    """ProtectHome=yes hides /root and /home: a venv made from a pyenv or conda Python there makes
    the unit fail with 203/EXEC. doctor says so where that is this interpreter, and not otherwise."""
    import os

    from rigmon.commands.rules import hidden_from_the_service

    done = rigmon("doctor", "--demo")
    real = os.path.realpath(sys.executable)
    if real.startswith(("/root/", "/home/")):
        assert f"service: {real} is under /{real.split('/')[1]}" in done.stdout, done.stdout
        assert "sudo /usr/bin/python3 -m venv /opt/rigmon" in " ".join(done.stdout.split())  # wrapped at 120
    else:
        assert "service:" not in done.stdout
    assert hidden_from_the_service(("/usr/bin/python3", "/opt/rigmon/lib/python3.11/site-packages/rigmon")) is None
    assert hidden_from_the_service(("/home/ada/miniconda3/bin/python",)) == ("/home/ada/miniconda3/bin/python", "/home")
    assert hidden_from_the_service(("/rootless/python",)) is None


def test_doctor_lists_the_calls_the_gpu_does_not_support(tmp_path):
    rec = sc.half_not_supported(sc.h200())
    path = sc.write(rec, tmp_path / "half.rec.jsonl")
    done = rigmon("doctor", "--replay", str(path), env={**os.environ, "COLUMNS": "1000"})  # the list on one line
    line = next(x for x in done.stdout.splitlines() if "NVML calls not supported here" in x)
    asked = {
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetPerformanceState",
        "nvmlDeviceGetMemoryInfo",
    }  # a few that every poll asks
    listed = set(line.split(": ", 2)[-1].split(", "))
    assert listed & asked == {k for k in rec.dropped if k in asked}, (line, rec.dropped)


def test_every_command_fits_80_columns(tmp_path):
    """doctor, rules list, rules test and status at COLUMNS=80: no line wider (a long line goes on
    under itself), and status's alert lines keep how long each has fired (the summary is cut)."""
    from test_alert_rules import SCENARIOS

    env = {**os.environ, "COLUMNS": "80"}
    starved = sc.write(SCENARIOS["GpuStarved"][0](), tmp_path / "starved.rec.jsonl")
    runs = {
        "doctor": rigmon("doctor", "--demo", env=env),
        "rules list": rigmon("rules", "list", env=env),
        "rules test": rigmon("rules", "test", "--replay", str(starved), env=env),
        "status": rigmon("status", "--replay", str(starved), "--at", "700", env=env),
    }
    for name, done in runs.items():
        assert done.returncode in (0, 1), (name, done.stderr)
        wide = [line for line in (done.stdout + done.stderr).splitlines() if len(line) > 80]
        assert wide == [], (name, wide)
    alert = next(line for line in runs["status"].stdout.splitlines() if "GpuStarved [gpu=0]" in line)
    assert "  for 1m40s  " in alert, alert
