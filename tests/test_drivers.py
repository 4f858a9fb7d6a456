"""The drivers our users own, met where nvidia-ml-py meets them: a stand-in libnvidia-ml.so.1
(tests/stub_nvml) with the symbols and struct layouts of driver 470 (no ``_v3`` process call:
nvidia-ml-py's unversioned call raises NVMLLibraryMismatchError), 535.54 (``_v3`` writes 32-byte
process records where nvidia-ml-py reads 24) and a current one, answering for an RTX 3090 and a
GTX 1660 SUPER with two processes each. The real bindings and the real reader run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import nvml_stub
import pytest
import scenarios as sc
from servers import Rigmon, http_get

PROCESSES = {0: [(4242, 2 << 30), (4343, 1 << 30)], 1: [(5252, 512 << 20), (5353, 256 << 20)]}


@pytest.fixture(scope="module", params=sorted(nvml_stub.DRIVERS))
def driver(request, tmp_path_factory):
    """(branch, the environment that loads its stand-in library)."""
    where = nvml_stub.build(request.param, tmp_path_factory.mktemp("nvml"))
    return request.param, {**os.environ, "LD_LIBRARY_PATH": str(where)}


def rigmon(env, *args):
    return subprocess.run([sys.executable, "-m", "rigmon", *args], capture_output=True, text=True, timeout=60, env=env)


def test_the_bindings_alone_fail_where_rigmon_reads(driver):
    """What nvidia-ml-py itself does with this driver (the bugs rigmon reads around)."""
    branch, env = driver
    probe = (
        "import pynvml; pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)\n"
        "try: print([(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)])\n"
        "except Exception as e: print(type(e).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60).stdout
    expected = {
        "470": "NVMLLibraryMismatchError",
        "535": "[(4242, 2147483648), (0, 4343)]",
        "550": "[(4242, 2147483648), (1073741824, 0)]",  # 16-byte records read as 24
        "580": "[(4242, 2147483648), (4343, 1073741824)]",
    }[branch]
    assert out.strip() == expected


def test_status_shows_every_gpu_and_both_processes_right(driver):
    branch, env = driver
    done = rigmon(env, "status", "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    state = json.loads(done.stdout)
    assert state["system"]["driver_version"] == nvml_stub.DRIVERS[branch]
    gpus = {g["index"]: g for g in state["gpus"]}
    assert [gpus[0]["power_watts"], gpus[1]["power_watts"]] == [312.0, 67.0]
    assert [gpus[0]["temperature_celsius"], gpus[1]["temperature_celsius"]] == [71.0, 58.0]
    for index, expected in PROCESSES.items():
        got = [(p["pid"], p["used_memory_bytes"]) for p in gpus[index]["processes"]]
        assert got == expected, (branch, index, got)
    assert not gpus[0]["lost"] and not gpus[1]["lost"]


def test_metrics_show_the_gpus_and_their_processes(driver, tmp_path):
    branch, env = driver
    daemon = Rigmon(tmp_path, None, "[daemon]\ninterval = 0.5\n[gpu]\nprocess_series = 8\n", env=env)
    try:
        daemon.wait_ready()
        daemon.wait_polls(2)
        body = http_get(daemon.url)[1].decode()
    finally:
        assert daemon.stop() == 0
    assert 'rigmon_gpu_power_watts{gpu="0",uuid="GPU-3090aaaa-0000-4000-8000-000000000000"} 312.0' in body
    assert 'rigmon_gpu_power_watts{gpu="1",uuid="GPU-1660bbbb-0000-4000-8000-000000000001"} 67.0' in body
    assert body.count("rigmon_gpu_processes{") == 2 and 'rigmon_gpu_up{gpu="1"' in body
    held = {
        int(line.split('pid="')[1].split('"')[0]): float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith("rigmon_gpu_process_memory_bytes{")
    }
    assert held == {pid: used for expected in PROCESSES.values() for pid, used in expected}, (branch, held)
    assert "Traceback" not in daemon.output()


def test_doctor_names_the_driver_for_what_it_lacks(driver):
    branch, env = driver
    done = rigmon(env, "doctor")
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    lacking = next((line for line in done.stdout.splitlines() if "does not have" in line), "")
    assert f"driver {nvml_stub.DRIVERS[branch]}" in lacking
    # the older calls stood in: nothing that was read is listed as missing
    assert "nvmlDeviceGetComputeRunningProcesses" not in lacking and "nvmlDeviceGetTemperatureV" not in lacking
    assert "nvmlDeviceGetTemperature(0)" not in lacking and "nvmlDeviceGetMemoryInfo" not in lacking
    assert ("before R510 NVML's memory used includes" in done.stdout) == (branch == "470")
    assert "containers hide" not in done.stdout


def test_the_record_layout_follows_the_driver():
    from rigmon.readers import nvml as reader

    v3, v2, v1 = ("nvmlDeviceGetComputeRunningProcesses" + suffix for suffix in ("_v3", "_v2", ""))
    assert reader.process_layout(v3, "535.54.03") is reader._ProcessV3CC
    assert reader.process_layout(v3, "535.43.02") is reader._ProcessV3CC
    assert reader.process_layout(v3, "535.98") is reader._ProcessV2
    assert reader.process_layout(v3, "580.95.05") is reader._ProcessV2
    assert reader.process_layout(v2, "470.256.02") is reader._ProcessV2
    assert reader.process_layout(v1, "470.256.02") is reader._ProcessV1


def test_the_records_are_read_in_the_layout_the_driver_wrote():
    """Each size a driver has written, measured from how far it wrote into the buffer, whatever
    its call's version says; where the extent is no record size, the version's layout."""
    import ctypes

    from rigmon.readers import nvml as reader

    v3 = "nvmlDeviceGetComputeRunningProcesses_v3"
    for layout in (reader._ProcessV1, reader._ProcessV2, reader._ProcessV3CC):
        buffer = (ctypes.c_ubyte * (7 * reader.WIDEST))()
        ctypes.memset(buffer, reader.UNWRITTEN, ctypes.sizeof(buffer))
        records = (layout * 2).from_buffer(buffer)
        for n, record in enumerate(records):
            ctypes.memset(ctypes.addressof(record), 0, ctypes.sizeof(layout))
            record.pid, record.usedGpuMemory = 4242 + n, 1 << 30
            if layout is not reader._ProcessV1:
                record.gpuInstanceId = record.computeInstanceId = 0xFFFFFFFF
        assert reader.record_layout(buffer, 2, v3, "580.95.05") is layout
    untouched = (ctypes.c_ubyte * 64)()
    ctypes.memset(untouched, reader.UNWRITTEN, 64)
    assert reader.record_layout(untouched, 2, v3, "535.54.03") is reader._ProcessV3CC


def test_records_that_read_as_no_process_are_said_once_and_left_out(tmp_path):
    """Records that do not read as processes in the layout taken for them (here: 535.54's 32-byte
    records read as 24, as if the driver had written past them): the list is left out and said
    once, never a process with PID 0 passed on."""
    where = nvml_stub.build("535", tmp_path)
    probe = """
import logging, sys
logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(message)s")
from rigmon.readers import nvml as reader
reader.record_layout = lambda buffer, count, symbol, driver: reader._ProcessV2
from rigmon.config import schema as config
from rigmon.poller import build_poller
poller = build_poller(config.parse({"gpu": {"xid_events": False}}), event_thread=False)
poller.open()
for _ in range(3):
    sample = poller.poll()
print("processes", [g.processes for g in sample.gpus], [g.power_watts for g in sample.gpus])
"""
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LD_LIBRARY_PATH": str(where)},
    )
    assert done.returncode == 0, done.stderr
    assert "processes [None, None] [312.0, 67.0]" in done.stdout, done.stdout
    told = [line for line in done.stdout.splitlines() if "do not read as processes" in line]
    assert len(told) == 2 and "PID 0" in told[0], done.stdout  # once for each GPU, not every poll


def test_a_recording_can_say_the_driver_lacks_a_call(tmp_path):
    """``{"nvml_error": "LibraryMismatch"}``: a replay raises what nvidia-ml-py raises on such a
    driver, and the reader reads on without that call."""
    from rigmon.config import schema as configmod
    from rigmon.poller import build_poller

    rec = sc.on_every_gpu(sc.h200(), nvmlDeviceGetComputeRunningProcesses=sc.error("LibraryMismatch"))
    poller = build_poller(
        configmod.parse({"gpu": {"xid_events": False}}), sc.source(rec, sc.LOAD_AT), event_thread=False
    )
    poller.open()
    try:
        sample = poller.poll()
    finally:
        poller.close()
    g = sample.gpus[0]
    assert not g.lost and g.power_watts == pytest.approx(692.159) and g.processes is None
    assert poller.gpu.not_in_driver()[0] == ("nvmlDeviceGetComputeRunningProcesses",)
