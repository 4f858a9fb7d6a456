"""The GPU reader on the real H200 recording and on scenarios built from it."""

import threading
import time

import pytest
import scenarios as sc

from rigmon.readers.gpu import GpuReader, make_error
from rigmon.readers.replay import ReplayClock, ReplayEventSet, replay_backend

Counting = sc.CallLog


def open_reader(recording, at=0.0, **kw):
    source = sc.source(recording, at)
    backend = Counting(replay_backend(source))
    reader = GpuReader(backend, xid_events=kw.pop("xid_events", False), **kw)
    reader.open()
    return reader, source, backend


def test_h200_under_load_in_base_units():
    reader, _, _ = open_reader(sc.h200(), at=sc.LOAD_AT)
    (gpu,), events = reader.read()
    info = reader.info[0]
    assert gpu.power_watts == pytest.approx(692.159)
    assert gpu.power_limit_watts == 700.0
    assert gpu.sm_clock_hertz == 1470e6
    assert gpu.memory_clock_hertz == 3201e6
    assert gpu.temperature_celsius == 63
    assert gpu.utilization_gpu_ratio == 1.0 and gpu.utilization_memory_ratio == 0.25
    assert gpu.clock_events.sw_power_cap is True and gpu.clock_events.active() == ("sw_power_cap",)
    assert gpu.energy_joules == pytest.approx(73208.040)
    assert gpu.memory_used_bytes == 1839071232 and gpu.memory_total_bytes == 150754820096
    assert gpu.pcie_generation == 5 and gpu.pcie_width == 16 and gpu.pcie_replays == 1
    assert gpu.remapped_rows.pending is False and gpu.ecc_errors.uncorrected_volatile == 0
    assert gpu.fan_speed_ratios is None  # passively cooled board
    assert events == ()
    assert info.name == "NVIDIA H200" and info.uuid == "GPU-051bc521-f352-6ece-a775-fbe39f974666"
    assert info.temperature_thresholds.slowdown == 89 and info.temperature_thresholds.shutdown == 95
    assert info.temperature_thresholds.gpu_max == 87 and info.temperature_thresholds.memory_max == 95
    assert info.max_sm_clock_hertz == 1980e6 and info.max_pcie_generation == 5 and info.max_pcie_width == 16
    assert info.power_limit_min_watts == 200 and info.power_limit_max_watts == 700
    assert info.compute_capability == "9.0" and info.pci_bus_id == "00000000:00:06.0"
    assert info.ecc_enabled is True and info.persistence_mode is True and info.mig_enabled is False
    assert len(info.supported_clock_events) == 9
    assert reader.system.driver_version == "580.159.04" and reader.system.cuda_driver_version == "13.0"


def test_idle_tick_reads_idle():
    reader, _, _ = open_reader(sc.h200(), at=0.0)
    (gpu,), _ = reader.read()
    assert gpu.power_watts == pytest.approx(84.307)
    assert gpu.clock_events.active() == ("gpu_idle",)


def test_slow_calls_are_not_paid_every_poll():
    reader, source, backend = open_reader(sc.h200(), slow_interval=3600)
    reader.read()
    for step in range(1, 20):
        source.clock.set(step * 0.5)
        reader.read()
    names = [name for name, _ in backend.calls]
    assert names.count("nvmlDeviceGetTotalEnergyConsumption") == 1
    assert "nvmlDeviceGetPcieThroughput" not in names
    assert names.count("nvmlDeviceGetPowerUsage") == 20
    # static facts are read once, at start-up
    assert names.count("nvmlDeviceGetMaxClockInfo") == 2 and names.count("nvmlDeviceGetName") == 1


def test_not_supported_is_remembered_and_not_asked_again():
    rec = sc.half_not_supported(sc.h200())
    reader, source, backend = open_reader(rec, at=sc.LOAD_AT)
    first = reader.read()[0][0]
    asked_first = len(backend.calls)
    backend.calls.clear()
    source.clock.set(sc.LOAD_AT + 1)
    second = reader.read()[0][0]
    assert not first.lost and not second.lost
    # every call that said NotSupported once is absent from the second poll
    unsupported = reader.unsupported()[0]
    assert unsupported
    assert not [c for c in backend.calls if c[0] in {k.split(":")[0] for k in unsupported if ":" not in k}]
    assert len(backend.calls) < asked_first
    # and the reading says None for them rather than failing
    none_fields = [
        f
        for f in (
            "power_watts",
            "power_limit_watts",
            "temperature_celsius",
            "sm_clock_hertz",
            "pcie_generation",
            "utilization_gpu_ratio",
        )
        if getattr(second, f) is None
    ]
    assert none_fields


def test_fan_not_asked_on_passive_board_but_read_on_fans():
    rec = sc.h200()
    rec.header["gpus"][0]["nvmlDeviceGetNumFans"] = 2
    rec.header["gpus"][0]["nvmlDeviceGetFanSpeed_v2:0"] = 45
    rec.header["gpus"][0]["nvmlDeviceGetFanSpeed_v2:1"] = 47
    reader, _, _ = open_reader(rec)
    assert reader.read()[0][0].fan_speed_ratios == (0.45, 0.47)
    reader, _, backend = open_reader(sc.h200())
    reader.read()
    assert not [c for c in backend.calls if c[0].startswith("nvmlDeviceGetFanSpeed")]


def test_gpu_lost_mid_run_others_go_on():
    rec = sc.gpu_lost(sc.h200(), gpus=2, lost=1, from_second=20)
    reader, source, _ = open_reader(rec, at=sc.LOAD_AT)
    before, _ = reader.read()
    assert [g.lost for g in before] == [False, False]
    source.clock.set(25)
    after, _ = reader.read()
    assert after[0].lost is False and after[0].power_watts > 600
    assert after[1].lost is True and after[1].power_watts is None
    assert after[1].uuid == reader.info[1].uuid and after[1].uuid != after[0].uuid
    source.clock.set(26)
    again, _ = reader.read()
    assert again[1].lost and again[0].power_watts is not None


def test_driver_older_than_bindings_falls_back():
    reader, _, backend = open_reader(sc.old_driver(sc.h200()), at=sc.LOAD_AT)
    (gpu,), _ = reader.read()
    names = [n for n, _ in backend.calls]
    assert "nvmlDeviceGetTemperature" in names and "nvmlDeviceGetCurrentClocksThrottleReasons" in names
    assert gpu.temperature_celsius == 63
    assert gpu.clock_events.sw_power_cap is True
    assert gpu.memory_used_bytes == 1839071232
    assert reader.info[0].max_pcie_generation == 5


@pytest.mark.parametrize("why", ["LibraryNotFound", "DriverNotLoaded"])
def test_no_nvml_runs_without_gpus_and_says_why(why, caplog):
    reader, _, _ = open_reader(sc.no_nvml(sc.h200(), why))
    assert reader.read() == ((), ())
    assert why in reader.unavailable
    assert sum(why in r.message for r in caplog.records) == 1


def test_xid_arrives_from_the_event_thread():
    rec = sc.with_xid(sc.h200(), at_second=12, xid=79)
    reader, source, _ = open_reader(rec, at=sc.LOAD_AT, xid_events=True)
    try:
        assert reader.read()[1] == ()
        source.clock.set(13)
        deadline = time.monotonic() + 3
        events = ()
        while not events and time.monotonic() < deadline:
            time.sleep(0.02)
            events = reader.read()[1]
        assert [(e.gpu_index, e.xid, e.uuid) for e in events] == [(0, 79, reader.info[0].uuid)]
        source.clock.set(14)
        time.sleep(0.1)
        assert reader.read()[1] == ()  # delivered once
    finally:
        reader.close()


class BlockingWait(Counting):
    """NVML's event wait as it is in C: it blocks until an event or its timeout, and nothing
    else ends it (here: until the test releases it)."""

    def __init__(self, inner):
        super().__init__(inner)
        self.waiting, self.release = threading.Event(), threading.Event()

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        self.calls.append(("nvmlEventSetWait_v2", (timeout_ms,)))
        self.waiting.set()
        self.release.wait(30)
        raise make_error("Timeout")


def test_close_does_not_wait_out_the_xid_threads_wait_and_nvml_is_released_after_it():
    backend = BlockingWait(replay_backend(sc.source(sc.h200(), sc.LOAD_AT)))
    reader = GpuReader(backend, xid_events=True)
    reader.open()
    assert backend.waiting.wait(5)
    thread = reader._xid._thread
    reader.close()  # returns with the thread still inside the wait
    assert thread.is_alive()
    assert _calls(backend, "nvmlEventSetFree") == 0 and _calls(backend, "nvmlShutdown") == 0
    backend.release.set()
    thread.join(5)
    assert not thread.is_alive()
    assert _calls(backend, "nvmlEventSetFree") == 1 and _calls(backend, "nvmlShutdown") == 1
    names = [name for name, _ in backend.calls]
    assert names.index("nvmlEventSetFree") > max(i for i, n in enumerate(names) if n == "nvmlEventSetWait_v2")
    reader.close()  # again: nothing more to release
    assert _calls(backend, "nvmlShutdown") == 1


def test_close_without_an_xid_thread_releases_nvml_at_once():
    reader, _, backend = open_reader(sc.h200(), at=sc.LOAD_AT)
    reader.close()
    assert _calls(backend, "nvmlShutdown") == 1


def test_replayed_xid_arrives_when_a_running_clock_reaches_it(monkeypatch):
    """The replay's event wait sleeps until the next tick that holds an event (like NVML
    blocking in C: not a look every 50 ms), and delivers it when the clock gets there."""
    looks = []
    collect = ReplayEventSet._collect
    monkeypatch.setattr(ReplayEventSet, "_collect", lambda self: looks.append(self) or collect(self))
    rec = sc.with_xid(sc.h200(), at_second=12, xid=79)
    source = sc.source(rec)
    source.clock = ReplayClock(start_at=11.0)
    nvml = replay_backend(source)
    reader = GpuReader(nvml, xid_events=True)
    reader.open()
    try:
        assert reader.read()[1] == ()
        deadline = time.monotonic() + 5
        events = ()
        while not events and time.monotonic() < deadline:
            time.sleep(0.05)
            events = reader.read()[1]
        assert [(e.gpu_index, e.xid) for e in events] == [(0, 79)]
        assert 11.9 < source.clock() < 13.5
        mine = [look for look in looks if look is reader._xid._set]  # other tests' threads may still wait
        assert len(mine) < 10  # about a second of waiting: a look every 50 ms would be 20 or more
    finally:
        reader.close()


def test_field_values_give_memory_temperature_and_throttle_seconds():
    rec = sc.h200()
    g = rec.header["gpus"][0]
    g["nvmlDeviceGetFieldValues:82"] = {"nvmlReturn": 0, "valueType": 1, "value": 43}
    g["nvmlDeviceGetFieldValues:74"] = {"nvmlReturn": 0, "valueType": 3, "value": 86826926400}
    g["nvmlDeviceGetFieldValues:269"] = {"nvmlReturn": 0, "valueType": 3, "value": 0}
    g["nvmlDeviceGetFieldValues:270"] = {"nvmlReturn": 3, "valueType": 3, "value": 0}
    reader, _, _ = open_reader(rec)
    (gpu,), _ = reader.read()
    assert gpu.memory_temperature_celsius == 43
    assert gpu.throttle_seconds.sw_power_cap == pytest.approx(86.8269264)
    assert gpu.throttle_seconds.sw_thermal_slowdown == 0
    assert gpu.throttle_seconds.hw_thermal_slowdown is None


def test_widened_recording_has_distinct_gpus():
    reader, _, _ = open_reader(sc.h200().widened(8), at=sc.LOAD_AT)
    gpus, _ = reader.read()
    assert len(gpus) == 8 and len({g.uuid for g in gpus}) == 8
    assert len({i.pci_bus_id for i in reader.info}) == 8
    assert all(g.power_watts == pytest.approx(692.159) for g in gpus)


def _calls(backend, name):
    return sum(1 for n, _ in backend.calls if n == name)


def test_rare_counters_are_read_every_slow_interval_and_hold_between():
    """PCIe replays, ECC and row remaps change rarely: read every slow_interval (5 s), their
    last answers shown at every poll in between."""
    source = sc.source(sc.h200(), sc.LOAD_AT)
    clock = source.clock
    backend = Counting(replay_backend(source))
    reader = GpuReader(backend, xid_events=False, slow_interval=5.0, monotonic=clock)  # the replay paces it
    reader.open()
    backend.calls.clear()
    readings = []
    for n in range(20):  # 10 s of 0.5 s polls
        clock.set(sc.LOAD_AT + n * 0.5)
        (gpu,), _ = reader.read()
        readings.append(gpu)
    assert _calls(backend, "nvmlDeviceGetPowerUsage") == 20
    assert _calls(backend, "nvmlDeviceGetPcieReplayCounter") == 2
    assert _calls(backend, "nvmlDeviceGetRemappedRows") == 2
    # all four ECC counters at the first read; the one this board lacks is not asked again
    assert _calls(backend, "nvmlDeviceGetTotalEccErrors") == 4 + 3
    assert all(g.pcie_replays == 1 and g.remapped_rows.pending is False for g in readings)
    assert all(g.ecc_errors.uncorrected_volatile == 0 for g in readings)


def test_a_rule_with_a_short_window_on_a_rare_counter_reads_it_every_poll():
    from rigmon.config.schema import parse
    from rigmon.poller import build_poller

    rule = {
        "name": "ReplaysFast",
        "kind": "gpu",
        "when": "rate(pcie_replays, '30s') > 1",
        "severity": "warning",
        "summary": "fast",
    }
    for rules, every_poll in (([], False), ([rule], True)):
        config = parse({"alerts": {"rules": rules}, "gpu": {"xid_events": False}, "host": {"enabled": False}})
        source = sc.source(sc.h200(), sc.LOAD_AT)
        backend = Counting(replay_backend(source))
        poller = build_poller(config, source, nvml=backend, event_thread=False)
        poller.open()
        backend.calls.clear()
        samples = []
        for n in range(10):
            source.clock.set(sc.LOAD_AT + n * 0.2)  # 2 s: inside one slow interval
            samples.append(poller.poll())
        poller.close()
        assert _calls(backend, "nvmlDeviceGetPcieReplayCounter") == (10 if every_poll else 1), rules
        # read every poll or every slow_interval, the counters reach every poll's reading
        gpus = [gpu for sample in samples for gpu in sample.gpus]
        assert len(gpus) == 10 and all(g.pcie_replays == 1 for g in gpus), rules
        assert all(g.ecc_errors is not None and g.ecc_errors.uncorrected_volatile == 0 for g in gpus), rules
        assert all(g.remapped_rows is not None and g.remapped_rows.pending is False for g in gpus), rules


def test_the_power_limit_set_is_read_on_the_slow_interval_and_when_the_enforced_limit_moves():
    """nvmlDeviceGetPowerManagementLimit (164 µs a GPU on an H200) changes by an administrator's
    hand, not by load: read every slow_interval, and at once where the enforced limit moves."""

    def modify(t, tick):
        watts = 700_000 if t < 6 else 450_000  # nvidia-smi -pl 450 six seconds in
        sc.set_gpu(tick, nvmlDeviceGetEnforcedPowerLimit=watts, nvmlDeviceGetPowerManagementLimit=watts)

    reader, source, backend = open_reader(sc.timeline(12, 1, modify=modify), slow_interval=5.0)
    asked, seen = [], []
    for second in range(12):
        source.clock.set(float(second))
        reader._monotonic = lambda s=second: float(s)  # the slow interval on the replay's clock
        before = len(backend.calls)
        (gpu,), _ = reader.read()
        asked.append(sum(name == "nvmlDeviceGetPowerManagementLimit" for name, _ in backend.calls[before:]))
        seen.append(gpu.power_management_limit_watts)
    reader.close()
    assert asked == [1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0], asked  # slow reads at 0, 5, 10 s; the move at 6 s
    assert seen[5] == 700 and seen[6] == 450 and seen[-1] == 450


def test_each_reader_family_is_timed_and_judged_on_its_own():
    """A call that fails marks its own family (rigmon_reader_success{reader="gpu_power"} 0), not
    the other families nor the GPU reader; it reads 1 again once the call answers. A family read
    only every slow_interval keeps its last success between its reads, at 0 s."""

    def modify(t, tick):
        if 20 <= t < 35:
            sc.set_gpu(tick, nvmlDeviceGetPowerUsage=sc.error("Unknown"))

    reader, source, _ = open_reader(sc.timeline(60, gpus=2, modify=modify), slow_interval=15)

    def families(t):
        source.clock.set(t)
        gpus, _ = reader.read()
        return gpus, {s.name: s for s in reader.statuses}

    gpus, before = families(0)
    assert {"gpu_power", "gpu_thermal", "gpu_clocks", "gpu_memory", "gpu_pcie", "gpu_utilization"} <= set(before)
    assert all(s.ok for s in before.values()) and all(s.duration_seconds > 0 for s in before.values())
    gpus, failing = families(20)
    assert gpus[0].power_watts is None and gpus[1].power_watts is not None
    assert not failing["gpu_power"].ok
    assert all(s.ok for name, s in failing.items() if name != "gpu_power")
    _, between = families(25)  # the slow families were read at 15; not now
    assert not between["gpu_power"].ok
    slow = [n for n in before if n not in between or between[n].duration_seconds == 0]
    assert all(between[n].ok for n in slow if n in between)
    _, after = families(40)
    assert all(s.ok for s in after.values()), after


def test_a_lost_gpu_fails_every_family_it_was_read_with():
    rec = sc.gpu_lost(sc.h200(), gpus=2, lost=1, from_second=20)
    reader, source, _ = open_reader(rec, at=sc.LOAD_AT)
    reader.read()
    assert all(s.ok for s in reader.statuses)
    source.clock.set(25)
    reader.read()
    assert not any(s.ok for s in reader.statuses if s.name != "gpu_xid"), reader.statuses
