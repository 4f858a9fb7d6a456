"""``rigmon burnin`` on the CPU: a passing run with a complete report, and injected faults
(from replayed hardware, a stalled fan, a corrupted determinism result) that fail it."""

import json
import os
import subprocess
import sys

import pytest
import scenarios as sc
from scenarios import set_gpu, timeline

pytest.importorskip("torch")


def burnin(tmp_path, *args, env=None, timeout=600):
    report = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "rigmon", "burnin", "--report", str(report), *args],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    data = json.loads((report / "burnin.json").read_text()) if (report / "burnin.json").exists() else None
    return done, data, report


def test_cpu_burnin_passes_with_a_complete_report(tmp_path):
    done, data, report = burnin(tmp_path, "--minutes", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert data["verdict"] == "pass" and "PASS" in done.stdout
    (unit,) = data["units"]
    assert unit["status"] == "pass" and unit["device"] == "cpu" and unit["model"] == "tiny"
    assert unit["final_loss"] - unit["floor"] < 0.1  # the loss approached the data's floor
    assert unit["tokens"] > 0 and unit["tokens_per_s"] > 0
    assert len(unit["progress"]) >= 30 and unit["probes"] and all(p["ok"] for p in unit["probes"])
    assert len(data["hardware"]["ticks"]) >= 60 and data["energy"]["total_kwh"] >= 0
    assert "no CUDA GPU" in data["notes"][0]
    page = (report / "burnin.html").read_text()
    assert page.count("<svg") >= 4 and "loss against the data&#x27;s floor" in page and "http" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    render_in_chromium(report / "burnin.html", tmp_path / "burnin.png")


def render_in_chromium(page, png):
    """The report as a person sees it: headless Chromium's screenshot of the self-contained page."""
    import shutil

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={png.parent / 'chromium'}", "--hide-scrollbars", "--window-size=1560,1500",
                    f"--screenshot={png}", page.as_uri()], capture_output=True, timeout=120)
    assert png.exists() and png.stat().st_size > 30_000  # charts, not a blank page


def replayed(tmp_path, recording, name):
    return str(sc.write(recording, tmp_path / f"{name}.rec.jsonl"))


def test_xid_from_replayed_hardware_fails(tmp_path):
    path = replayed(tmp_path, sc.with_xid(sc.h200(), at_second=5, xid=79), "xid")
    done, data, _ = burnin(tmp_path, "--minutes", "0.5", "--replay", path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert any(r.startswith("XID 79 at") and "fallen off the bus" in r for r in data["units"][0]["reasons"])


def test_thermal_slowdown_from_replayed_hardware_fails(tmp_path):
    hot = timeline(60, 1, modify=lambda t, tick: set_gpu(tick, nvmlDeviceGetCurrentClocksEventReasons=0x20 | 0x4,
                                                          nvmlDeviceGetTemperature__0=86))
    done, data, _ = burnin(tmp_path, "--minutes", "0.5", "--replay", replayed(tmp_path, hot, "hot"))
    assert done.returncode == 1
    assert any("sw thermal slowdown active 100 % of the time" in r for r in data["units"][0]["reasons"])


def test_stalled_cpu_fan_fails(tmp_path):
    def fan(t, tick):
        tick["host"] = {"sensors_fans": {"nct6798": [["", 1150 if t < 3 else 0]]}}

    done, data, _ = burnin(tmp_path, "--minutes", "0.75", "--replay", replayed(tmp_path, timeline(120, 1, modify=fan),
                                                                               "fan"))
    assert done.returncode == 1, done.stdout
    assert data["host_verdict"]["status"] == "fail"
    assert any(r.startswith("FanStalled: Fan nct6798/fan1 stopped") for r in data["host_verdict"]["reasons"])


def test_corrupted_determinism_result_fails(tmp_path):
    done, data, _ = burnin(tmp_path, "--minutes", "0.5", env={"RIGMON_BURNIN_INJECT": "determinism"})
    assert done.returncode == 1
    assert any(r.startswith("determinism probe mismatch") for r in data["units"][0]["reasons"])


def test_nan_loss_fails(tmp_path):
    done, data, _ = burnin(tmp_path, "--minutes", "0.25", env={"RIGMON_BURNIN_INJECT": "nan"})
    assert done.returncode == 1
    assert "the loss became NaN or infinite" in data["units"][0]["reasons"]


def test_without_torch_says_how_to_install_and_exits_2(tmp_path):
    code = ("import sys; sys.modules['torch'] = None\n"
            "from rigmon.cli import main\n"
            "raise SystemExit(main(['burnin', '--minutes', '1', '--report', sys.argv[1]]))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r")], capture_output=True, text=True)
    assert done.returncode == 2 and "pip install 'rigmon[burnin]'" in done.stderr


def test_refuses_to_start_beside_a_training_run_unless_forced(tmp_path):
    """A scheduled burn-in must never land on a training run: a compute process on a chosen GPU
    (here a real process, named by PID in the replayed NVML answers) stops it with exit 2."""
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)  # train_gpt.py --epochs 9"])
    try:
        busy = timeline(60, 1, modify=lambda t, tick: set_gpu(
            tick, nvmlDeviceGetComputeRunningProcesses=[{"pid": job.pid, "usedGpuMemory": 20 << 30}]))
        path = replayed(tmp_path, busy, "busy")
        done, data, report = burnin(tmp_path, "--minutes", "0.25", "--replay", path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "not starting: GPU 0 (NVIDIA H200) runs PID" in done.stderr and f"PID {job.pid} (" in done.stderr
        assert "train_gpt.py --epochs 9" in done.stderr and "--force" in done.stderr
        assert "Traceback" not in done.stderr and not report.exists()  # refused before anything was written
        other = burnin(tmp_path, "--minutes", "0.25", "--replay", path, "--gpus", "1")[0]
        assert "not starting" not in other.stderr  # GPU 1 is not busy (and not there: another matter)
        forced, data, _ = burnin(tmp_path, "--minutes", "0.25", "--replay", path, "--force")
        assert "not starting" not in forced.stderr and data is not None, forced.stderr
    finally:
        job.kill()
        job.wait()


def test_bad_gpu_list_is_a_usage_error(tmp_path):
    done, _, report = burnin(tmp_path, "--minutes", "1", "--gpus", "zero")
    assert done.returncode == 2 and "--gpus: expected 'all' or indices like 0,1" in done.stderr
    assert "Traceback" not in done.stderr and not report.exists()
