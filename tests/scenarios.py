"""Recordings for tests, in the rigmon recording v1 format, built from the real H200
recording: each scenario changes only what its name says."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

from rigmon.model.recording import Recording, demo_path
from rigmon.readers.replay import ReplayClock, ReplaySource

SHARED_FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "h200" / "matmul-load.rec.jsonl"
H200 = SHARED_FIXTURE if SHARED_FIXTURE.exists() else demo_path()
LOAD_AT = 9.988  # seconds into the H200 recording: the first tick at 692159 mW


def h200() -> Recording:
    return Recording.load(H200)


def source(recording: Recording, at: float = 0.0, loop: bool = False) -> ReplaySource:
    clock = ReplayClock(start_at=at, realtime=False)
    clock.set(at)
    return ReplaySource(recording, clock, loop=loop)


def error(name: str) -> dict:
    return {"nvml_error": name}


def with_host(recording: Recording, **host) -> Recording:
    """The same GPU answers with these host answers in the header and every tick."""
    rec = copy.deepcopy(recording)
    rec.header["host"] = dict(rec.header.get("host", {}), **host)
    for tick in rec.ticks:
        tick["host"] = dict(tick.get("host", {}), **host)
    return rec


def half_not_supported(recording: Recording) -> Recording:
    """Every other call answers NotSupported, in the header and in every tick."""
    rec = copy.deepcopy(recording)
    keys = sorted(set(rec.header["gpus"][0]) | {k for t in rec.ticks for k in t["gpus"][0]})
    dropped = {k for i, k in enumerate(keys) if i % 2 == 1 and k not in ("nvmlDeviceGetUUID", "nvmlDeviceGetName")}
    for entry in [rec.header["gpus"][0]] + [t["gpus"][0] for t in rec.ticks]:
        for key in dropped:
            entry[key] = error("NotSupported")
    rec.dropped = dropped  # type: ignore[attr-defined]
    return rec


def gpu_lost(recording: Recording, gpus: int = 2, lost: int = 1, from_second: float = 20.0) -> Recording:
    """``gpus`` GPUs; from ``from_second`` on, GPU ``lost`` answers every call with GpuIsLost."""
    rec = copy.deepcopy(recording.widened(gpus))
    keys = set(rec.header["gpus"][lost]) | {k for t in rec.ticks for k in t["gpus"][lost]}
    keys |= {"nvmlDeviceGetFieldValues:82", "nvmlDeviceGetTemperatureV:0", "nvmlDeviceGetMemoryInfo:33554472"}
    t0 = rec.ticks[0]["t"]
    for tick in rec.ticks:
        if tick["t"] - t0 >= from_second:
            tick["gpus"][lost] = {key: error("GpuIsLost") for key in keys}
    return rec


def old_driver(recording: Recording) -> Recording:
    """A driver older than the bindings: the newer calls are FunctionNotFound."""
    rec = copy.deepcopy(recording)
    for key in (
        "nvmlDeviceGetTemperatureV:0",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetSupportedClocksEventReasons",
        "nvmlDeviceGetMemoryInfo:33554472",
        "nvmlDeviceGetGpuMaxPcieLinkGeneration",
    ):
        rec.header["gpus"][0][key] = error("FunctionNotFound")
    for tick in rec.ticks:
        tick["gpus"][0].pop("nvmlDeviceGetCurrentClocksEventReasons", None)
    rec.header["gpus"][0]["nvmlDeviceGetSupportedClocksThrottleReasons"] = 511
    return rec


def no_nvml(recording: Recording, why: str = "LibraryNotFound") -> Recording:
    rec = copy.deepcopy(recording)
    rec.header["nvml"] = {"nvmlInit": error(why)}
    return rec


def nvml_mended(recording: Recording) -> Recording:
    """The recording with NVML answering at every tick (each tick's own ``nvml`` answers): after
    ``then`` a part where it could not start, the driver mended mid-run."""
    rec = copy.deepcopy(recording)
    for tick in rec.ticks:
        tick["nvml"] = {"nvmlInit": None}
    return rec


def knowing(recording: Recording, *extra: tuple[str, int, str]) -> Recording:
    """The recorded box had its GPUs and these ones besides ((uuid, index, name)), as rigmon record
    writes what the box's state_dir remembers (the header's ``known_gpus``)."""
    rec = copy.deepcopy(recording)
    listed = [
        [g["nvmlDeviceGetUUID"], n, g["nvmlDeviceGetName"], g["nvmlDeviceGetPciInfo"]["busId"]]
        for n, g in enumerate(rec.header["gpus"])
    ]
    rec.header["known_gpus"] = listed + [[uuid, index, name, None] for uuid, index, name in extra]
    return rec


def with_xid(recording: Recording, at_second: float, xid: int, gpu: int = 0) -> Recording:
    rec = copy.deepcopy(recording)
    t0 = rec.ticks[0]["t"]
    tick = next(t for t in rec.ticks if t["t"] - t0 >= at_second)
    tick["gpus"][gpu]["nvmlEventSetWait_v2"] = [{"eventType": 8, "eventData": xid}]
    return rec


ZEN4 = {"vendor": "AuthenticAMD", "family": 25, "model": 97}  # a Ryzen 7000 (Raphael), as /proc/cpuinfo says it


def zen4(celsius, busy):
    """A Ryzen 7000 desktop: k10temp's Tctl alone (no critical value), ``busy`` % of the CPUs busy."""
    return {"sensors_temperatures": {"k10temp": [["Tctl", celsius, None, None]]}, "cpu_percent": busy, "cpuinfo": ZEN4}


def intel(celsius, busy, critical=100.0):
    """An Intel CPU (an i9-14900K): coretemp's package at ``celsius``, its TjMax ``critical``."""
    return {
        "sensors_temperatures": {
            "coretemp": [["Package id 0", celsius, 80.0, critical], ["Core 0", celsius - 2, 80.0, critical]]
        },
        "cpu_percent": busy,
        "cpuinfo": {"vendor": "GenuineIntel", "family": 6, "model": 183},
    }


def cpu_cooler(hotter: float = 0.0, climb: float = 0.0, since: float = 5400):
    """The CPU's cooler: the GPUs idle (the room, 26 °C), the CPU 80 % busy from 15 minutes on at
    62 °C, the board's curve driving its two headers (pwm1, pwm3: pwmN_enable 5) at 40 %; from
    ``since`` the CPU runs ``hotter`` °C hotter, the curve ``climb`` more duty; 3 h, a tick a minute."""

    def modify(t, tick):
        for g in tick["gpus"]:
            g["nvmlDeviceGetPowerUsage"] = 40000
            g["nvmlDeviceGetUtilizationRates"] = {"gpu": 0, "memory": 0}
            g["nvmlDeviceGetTemperature:0"] = 26
        busy = 80 if t >= 900 else 5
        late = t >= since
        duty = 0.4 + (climb if late else 0.0)
        pwm, rpm = str(round(duty * 255)), str(round(3000 * duty))
        files = {"fan1_input": rpm, "fan3_input": rpm, "pwm1": pwm, "pwm1_enable": "5", "pwm3": pwm, "pwm3_enable": "5"}
        tick["host"] = {
            **intel(30 + 0.4 * busy + (hotter if late else 0.0), busy),
            "sensors_fans": {"nct6798": [["", int(rpm)], ["", int(rpm)]]},
            "hwmon": {"hwmon3": {"name": "nct6798", "device": "nct6775.656", "files": files}},
        }

    return timeline(3 * 3600, 60, modify=modify)


def fan_at_duty(duty: float):
    """nct6798's fan2 turning at 1150 rpm for 60 s, then 0 rpm, its header (pwm2) at ``duty``
    after that, as hwmon says it beside psutil's speeds."""

    def modify(t, tick):
        rpm = 1150 if t < 60 else 0
        pwm = 128 if t < 60 else round(duty * 255)
        tick["host"] = {
            "sensors_fans": {"nct6798": [["", 1150], ["", rpm]]},
            "hwmon": {
                "hwmon3": {
                    "name": "nct6798",
                    "device": "nct6775.656",
                    "files": {"fan1_input": "1150", "fan2_input": str(rpm), "pwm1": "128", "pwm2": str(pwm)},
                }
            },
        }

    return modify


def held_on_an_idle_gpu(pid: int, memory: int, command: str):
    """An idle GPU (0 % busy) on which process ``pid``, running ``command``, holds ``memory``."""

    def modify(t, tick):
        set_gpu(
            tick,
            nvmlDeviceGetUtilizationRates={"gpu": 0, "memory": 0},
            nvmlDeviceGetComputeRunningProcesses=[{"pid": pid, "usedGpuMemory": memory}],
        )
        tick["host"] = {
            "processes": {
                str(pid): {"user": "erin", "uid": 1004, "cmdline": command, "cgroup": "", "ppid": 1, "pgid": pid}
            }
        }

    return modify


K10TEMP_TCTL_ONLY = {"k10temp": [["Tctl", 71.25, None, None]], "nvme": [["Composite", 38.85, 84.85, 84.85]]}
CORETEMP_TWO_PACKAGES = {
    "coretemp": [
        ["Package id 0", 58.0, 80.0, 100.0],
        ["Core 0", 55.0, 80.0, 100.0],
        ["Core 1", 57.0, 80.0, 100.0],
        ["Package id 1", 64.0, 80.0, 100.0],
        ["Core 0", 61.0, 80.0, 100.0],
        ["Core 1", 63.0, 80.0, 100.0],
    ]
}
K10TEMP_TDIE = {"k10temp": [["Tctl", 80.5, None, None], ["Tdie", 70.5, None, None], ["Tccd1", 68.0, None, None]]}
FAN_STOPPED = {"nct6798": [["", 1150], ["", 0], ["", 870]]}
# What rigmon's own sysfs walk finds on the rich box (the host key "hwmon"): the same chips as
# psutil's answers above, each with its device, and what psutil leaves out: PWM, fan minimum
# and alarm, voltages, and a Corsair PSU's power and current inputs.
HWMON_RICH = {
    "hwmon0": {"name": "nvme", "device": "nvme0", "files": {"temp1_input": "38850", "temp1_label": "Composite"}},
    "hwmon1": {
        "name": "coretemp",
        "device": "coretemp.0",
        "files": {
            "temp1_input": "58000",
            "temp1_label": "Package id 0",
            "temp2_input": "55000",
            "temp2_label": "Core 0",
            "temp3_input": "57000",
            "temp3_label": "Core 1",
        },
    },
    "hwmon2": {
        "name": "coretemp",
        "device": "coretemp.1",
        "files": {
            "temp1_input": "64000",
            "temp1_label": "Package id 1",
            "temp2_input": "61000",
            "temp2_label": "Core 0",
            "temp3_input": "63000",
            "temp3_label": "Core 1",
        },
    },
    "hwmon3": {
        "name": "nct6798",
        "device": "nct6775.656",
        "files": {
            "fan1_input": "1150",
            "fan2_input": "0",
            "fan3_input": "870",
            "pwm1": "128",
            "pwm1_enable": "5",
            "pwm2": "255",
            "pwm2_enable": "1",
            "pwm3": "102",
            "pwm3_enable": "5",
            "fan1_min": "300",
            "fan2_min": "300",
            "fan2_alarm": "1",
            "fan1_alarm": "0",
            "in0_input": "1056",
            "in0_label": "Vcore",
            "in1_input": "12096",
            "in1_alarm": "0",
            "intrusion0_alarm": "0",
        },
    },
    "hwmon4": {
        "name": "corsair-psu",
        "device": "0003:1B1C:1C05.0001",
        "files": {
            "power1_input": "412000000",
            "power1_label": "power total",
            "curr1_input": "34500",
            "curr1_label": "curr +12v",
            "in0_input": "12040",
            "in0_label": "v_out +12v",
        },
    },
}
# /proc's answer for the rich box's GPU processes (the host key "processes")
PROCESSES_RICH = {
    "4242": {
        "user": "alice",
        "uid": 1000,
        "cmdline": "python train.py --config gpt.yaml",
        "cgroup": "0::/user.slice/user-1000.slice/session-3.scope\n",
        "ppid": 4200,
        "pgid": 4242,
        "start": 1796170000.0,
    }
}


def write(recording: Recording, path: Path) -> Path:
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps(recording.header) + "\n")
        for tick in recording.ticks:
            out.write(json.dumps(tick) + "\n")
    return path


def then(first: Recording, second: Recording, gap: float = 5.0) -> Recording:
    """``first``, then ``second``'s ticks moved to follow it: a fault, then its recovery. The
    header is ``first``'s (both must come from the same box)."""
    rec = copy.deepcopy(first)
    shift = rec.ticks[-1]["t"] + gap - second.ticks[0]["t"]
    # A replay carries a call's last answer forward: the second part answers every call the
    # first part recorded, from its own ticks, else its header, else NotSupported.
    gpu_keys = [set().union(*(t["gpus"][i] for t in first.ticks)) for i in range(len(first.header["gpus"]))]
    host_keys = set().union(*(t.get("host", {}) for t in first.ticks))
    for tick in copy.deepcopy(second.ticks):
        tick["t"] = round(tick["t"] + shift, 3)
        for i, keys in enumerate(gpu_keys):
            for key in keys - set(tick["gpus"][i]) - {"nvmlEventSetWait_v2"}:
                tick["gpus"][i][key] = second.header["gpus"][i].get(key, error("NotSupported"))
        host = tick.setdefault("host", {})
        for key in host_keys - set(host):
            host[key] = second.header.get("host", {}).get(key, {} if key.startswith("sensors_") else None)
        rec.ticks.append(tick)
    return rec


def one_tick(recording: Recording, at: float = LOAD_AT) -> Recording:
    """Only the tick at ``at``: a replay that holds those values for ever."""
    offsets = recording.offsets()
    index = max(i for i, o in enumerate(offsets) if o <= at + 1e-6)
    return Recording(copy.deepcopy(recording.header), [copy.deepcopy(recording.ticks[index])])


def rich(recording: Recording, gpus: int = 8) -> Recording:
    """Every kind of reading present: 8 GPUs, fans, field values, CPU sensors and an XID."""
    rec = with_host(
        recording.widened(gpus),
        sensors_temperatures={**CORETEMP_TWO_PACKAGES, "nvme": [["Composite", 38.85, 84.85, 84.85]]},
        sensors_fans=FAN_STOPPED,
        cpu_percent=42.0,
        getloadavg=[3.5, 2.5, 1.5],
        virtual_memory={"total": 128 * 2**30, "available": 100 * 2**30},
        powercap={"package-0": [123456789, 262143328850]},
        hwmon=HWMON_RICH,
        processes=PROCESSES_RICH,
    )
    rec = copy.deepcopy(rec)
    for g in rec.header["gpus"]:
        g["nvmlDeviceGetSupportedClocksEventReasons"] = 0x7FF  # R570's eleven reasons
        g["nvmlDeviceGetFieldValues:82"] = {"nvmlReturn": 0, "valueType": 1, "value": 43}
        g["nvmlDeviceGetFieldValues:74"] = {"nvmlReturn": 0, "valueType": 3, "value": 86826926400}
        g["nvmlDeviceGetFieldValues:269"] = {"nvmlReturn": 0, "valueType": 3, "value": 0}
        g["nvmlDeviceGetFieldValues:270"] = {"nvmlReturn": 0, "valueType": 3, "value": 0}
        g["nvmlDeviceGetFieldValues:271"] = {"nvmlReturn": 0, "valueType": 3, "value": 0}
        g["nvmlDeviceGetNumFans"] = 1
        g["nvmlDeviceGetFanSpeed_v2:0"] = 55
        g["nvmlDeviceGetTargetFanSpeed:0"] = 55
        g["nvmlDeviceGetFanSpeedRPM:0"] = 1650
        g["nvmlDeviceGetComputeRunningProcesses"] = [{"pid": 4242, "usedGpuMemory": 1 << 30}]
        g["nvmlDeviceGetProcessUtilization:0"] = [
            {"pid": 4242, "timeStamp": 1796170761000000, "smUtil": 97, "memUtil": 40, "encUtil": 0, "decUtil": 0}
        ]
    return with_xid(rec, at_second=1.0, xid=79, gpu=3)


H100_MIG_INSTANCES = [  # two 3g.40gb instances of an H100 80GB, as nvmlDeviceGetMigInstances answers
    {
        "gpuInstanceId": gi,
        "computeInstanceId": 0,
        "uuid": f"MIG-5e1f{gi:04x}-0000-4000-8000-00000000000{gi}",
        "name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        "memoryUsed": used,
        "memoryTotal": 42949672960,
    }
    for gi, used in ((1, 20 << 30), (2, 0))
]


def mig(recording: Recording, gpu: int = 0) -> Recording:
    """GPU ``gpu`` in MIG mode with two instances, a 20 GiB process in the first: NVML gives no
    utilisation on it (NotSupported), as on a real MIG GPU."""
    rec = copy.deepcopy(recording)
    entries = [rec.header["gpus"][gpu]] + [t["gpus"][gpu] for t in rec.ticks if gpu < len(t["gpus"])]
    for entry in entries:
        entry["nvmlDeviceGetUtilizationRates"] = error("NotSupported")
    header = rec.header["gpus"][gpu]
    header["nvmlDeviceGetMigMode"] = [1, 1]
    header["nvmlDeviceGetMigInstances"] = H100_MIG_INSTANCES
    header["nvmlDeviceGetComputeRunningProcesses"] = [
        {"pid": 4242, "usedGpuMemory": 20 << 30, "gpuInstanceId": 1, "computeInstanceId": 0}
    ]
    for tick in rec.ticks:
        if gpu < len(tick["gpus"]):
            tick["gpus"][gpu].pop("nvmlDeviceGetComputeRunningProcesses", None)
    return rec


def bus_of(recording: Recording, gpu: int) -> str:
    """GPU ``gpu``'s PCI address as sysfs names it (0000:10:00.0)."""
    bus_id = recording.header["gpus"][gpu]["nvmlDeviceGetPciInfo"]["busId"]
    return bus_id[4:].lower()


def asleep(recording: Recording, gpu: int = 1) -> Recording:
    """GPU ``gpu``'s PCI device runtime-suspended all along, as sysfs says it (host key
    ``gpu_runtime_status``)."""
    return with_host(recording, gpu_runtime_status={bus_of(recording, gpu): "suspended"})


def on_every_gpu(recording: Recording, **answers) -> Recording:
    """Every GPU answers these calls so, in the header and in every tick (``__`` stands for ``:``)."""
    rec = copy.deepcopy(recording)
    for entry in rec.header["gpus"] + [g for t in rec.ticks for g in t["gpus"]]:
        entry.update({k.replace("__", ":"): copy.deepcopy(v) for k, v in answers.items()})
    return rec


def gpu_fans(recording: Recording, fans: int = 2, percent: int = 60, rpm: int = 1800) -> Recording:
    """A board with ``fans`` fans (a 3090 or 4090) asked for ``percent`` and turning at ``rpm``."""
    answers = {"nvmlDeviceGetNumFans": fans}
    for i in range(fans):
        answers.update(
            {
                f"nvmlDeviceGetFanSpeed_v2__{i}": percent,
                f"nvmlDeviceGetTargetFanSpeed__{i}": percent,
                f"nvmlDeviceGetFanSpeedRPM__{i}": rpm,
            }
        )
    return on_every_gpu(recording, **answers)


def pre_ampere(recording: Recording, single_bit: int = 2, double_bit: int = 0, pending: int = 0) -> Recording:
    """An ECC board before Ampere (a V100): no row remapping, retired pages instead."""
    return on_every_gpu(
        recording,
        nvmlDeviceGetRemappedRows=error("NotSupported"),
        nvmlDeviceGetRetiredPages__0=[0x1000 * (i + 1) for i in range(single_bit)],
        nvmlDeviceGetRetiredPages__1=[0x9000 * (i + 1) for i in range(double_bit)],
        nvmlDeviceGetRetiredPagesPendingStatus=pending,
    )


def timeline(
    seconds: float,
    step: float = 5.0,
    at: float = LOAD_AT,
    gpus: int = 1,
    host: dict | None = None,
    modify=None,
    board=None,
) -> Recording:
    """``seconds`` of ticks every ``step`` s, each a copy of the H200 tick at ``at`` (with
    ``gpus`` GPUs and the given host answers, the board changed by ``board(recording)``),
    changed by ``modify(t, tick)``. Each GPU's energy counter moves by its power, as the
    driver's does (``modify`` may set it otherwise)."""
    base = h200().widened(gpus) if gpus > 1 else h200()
    if board is not None:
        base = board(base)
    template = one_tick(base, at).ticks[0]
    header = copy.deepcopy(base.header)
    if host is not None:
        header["host"] = dict(header.get("host", {}), **copy.deepcopy(host))
    t0 = template["t"]
    ticks = []
    used = [0.0] * len(template["gpus"])  # mJ each GPU drew since the template's tick
    for i in range(int(seconds / step) + 1):
        t = i * step
        tick = copy.deepcopy(template)
        tick["t"] = round(t0 + t, 3)
        tick["label"] = "scenario"
        for g, mj in zip(tick["gpus"], used, strict=True):
            if isinstance(g.get(ENERGY), int):
                g[ENERGY] += round(mj)
        if host is not None:
            tick["host"] = copy.deepcopy(host)
        if modify is not None:
            modify(t, tick)
        for n, g in enumerate(tick["gpus"]):
            milliwatts = g.get("nvmlDeviceGetPowerUsage")
            used[n] += milliwatts * step if isinstance(milliwatts, int) else 0.0
        ticks.append(tick)
    return Recording(header, ticks)


ENERGY = "nvmlDeviceGetTotalEnergyConsumption"


def set_gpu(tick: dict, **values) -> None:
    """Set GPU 0's answers: set_gpu(tick, nvmlDeviceGetPowerUsage=300000)."""
    for key, value in values.items():
        tick["gpus"][0][key.replace("__", ":")] = value


class Replayed:
    """The daemon's pipeline over a recording, stepped by hand: the set-up the tests share.
    ``recording_time``: the samples carry the recording's times (jobs, alerts' ``for``), not now."""

    def __init__(
        self, recording: Recording, config, at: float = 0.0, loop: bool = False, recording_time: bool = False, **kw
    ):
        from rigmon.config import schema as configmod
        from rigmon.daemon import Daemon
        from rigmon.pipeline import Inputs

        if isinstance(config, dict):
            config = configmod.parse(config, "test")
        self._own_state = None
        if config.daemon.state_dir == configmod.DaemonConfig().state_dir:  # never the box's own
            import tempfile

            self._own_state = Path(tempfile.mkdtemp(prefix="rigmon-test-state-"))
            config = config.model_copy(
                update={"daemon": config.daemon.model_copy(update={"state_dir": self._own_state})}
            )
        self.config = config
        self.source = source(recording, at, loop=loop)
        if recording_time:
            t0 = recording.ticks[0]["t"]
            kw["wall"] = lambda: t0 + self.source.clock()
        kw.setdefault("event_thread", False)
        self.daemon = Daemon.from_config(config, Inputs(source=self.source, **kw))
        self.pipeline = self.daemon.pipeline
        self.registry = self.daemon.registry()
        self.pipeline.open()

    def poll(self, at: float | None = None):
        """One poll through every sink (at ``at`` seconds into the recording); its sample."""
        return self.daemon.poll_once(at)

    def metrics(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()

    def close(self, deadline_seconds: float = 2.0) -> None:
        self.pipeline.close(time.monotonic() + deadline_seconds)
        if self._own_state is not None:
            import shutil

            shutil.rmtree(self._own_state, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class CallLog:
    """A backend (NVML, or the host's) that keeps every call made on it: ``calls`` as (name,
    arguments without the device handle), to check what a reader asks; ``bound`` as (function,
    all arguments), to replay them bare in a benchmark."""

    def __init__(self, inner):
        self._inner = inner
        self.calls: list[tuple] = []
        self.bound: list[tuple] = []

    def __getattr__(self, name):
        target = getattr(self._inner, name)
        if not callable(target):
            return target

        def call(*args):
            self.calls.append((name, args[1:] if name.startswith("nvmlDevice") else args))
            self.bound.append((target, args))
            return target(*args)

        return call


DAY = 86400.0


def cooling_days(
    days: float,
    gpus: int = 2,
    step: float = 600.0,
    resistance=lambda gpu, t: 0.1,
    power=lambda gpu, t: 300.0,
    room=lambda t: 22.0,
    training=lambda t: 6 <= (t % DAY) / 3600 < 22,
    idle_watts: float = 40.0,
    limit_watts: float = 350.0,
) -> Recording:
    """``days`` of a box's GPUs training and idle (by default from 06:00 to 22:00 each day), a tick
    each ``step`` s: each GPU at ``power(gpu, t)`` W while training (idle_watts otherwise), and at
    the whole degrees NVML reports of ``room(t)`` + ``resistance(gpu, t)`` (°C/W) × its power."""

    def modify(t, tick):
        busy = training(t)
        for k, g in enumerate(tick["gpus"]):
            watts = power(k, t) if busy else idle_watts
            g["nvmlDeviceGetPowerUsage"] = int(watts * 1000)
            g["nvmlDeviceGetEnforcedPowerLimit"] = int(limit_watts * 1000)
            g["nvmlDeviceGetUtilizationRates"] = {"gpu": 100 if busy else 0, "memory": 30 if busy else 0}
            g["nvmlDeviceGetTemperature:0"] = int(round(room(t) + resistance(k, t) * watts))

    return timeline(days * DAY, step=step, gpus=gpus, modify=modify)


def hot_box(where: Path, gpus: int = 8) -> Path:
    """``gpus`` GPUs at 95 °C (past an H200's slowdown threshold) for 10 minutes, written as
    ``where/hot.rec.jsonl``: GpuAtSlowdownTemperature on each from the first poll."""
    return write(
        timeline(
            600,
            1,
            gpus=gpus,
            modify=lambda t, tick: [g.update({"nvmlDeviceGetTemperature:0": 95}) for g in tick["gpus"]],
        ),
        where / "hot.rec.jsonl",
    )
