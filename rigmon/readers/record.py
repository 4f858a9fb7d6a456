"""Recording: proxies that stand between the readers and pynvml/psutil and write down
every answer in the rigmon recording v1 format. Replaying the file drives the same reader
code through the same calls, so a recording made on one box reproduces it anywhere.

Calls made while the readers start up go to the header (static facts); calls made during
a poll go to that poll's tick.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from typing import Any, TextIO

from ..model.recording import FORMAT, VALUE_FIELDS, VERSION, call_key, encode, error_value, handle_key

_PASS_THROUGH = {"nvmlInitWithFlags", "nvmlShutdown", "nvmlEventSetCreate", "nvmlEventSetFree"}


class Recorder:
    def __init__(self, source: str, hostname: str | None = None):
        self.header: dict = {"format": FORMAT, "version": VERSION, "source": source, "nvml": {}, "gpus": [], "host": {}}
        if hostname:
            self.header["hostname"] = hostname  # the box's name, for a page replaying the file
        self._tick: dict | None = None
        self._events: dict[int, list] = defaultdict(list)
        self._lock = threading.Lock()

    # --- phases --------------------------------------------------------------------------
    def begin_tick(self, t: float, label: str | None = None) -> None:
        self._tick = {
            "t": round(t, 3),
            **({"label": label} if label else {}),
            "gpus": [{} for _ in self.header["gpus"]],
            "host": {},
        }

    def end_tick(self) -> dict:
        tick, self._tick = self._tick, None
        with self._lock:
            for index, events in self._events.items():
                if index < len(tick["gpus"]):
                    tick["gpus"][index]["nvmlEventSetWait_v2"] = events
            self._events = defaultdict(list)
        return tick

    # --- storing -------------------------------------------------------------------------
    def _gpu_entry(self, index: int) -> dict:
        while len(self.header["gpus"]) <= index:
            self.header["gpus"].append({})
        if self._tick is None:
            return self.header["gpus"][index]
        while len(self._tick["gpus"]) <= index:
            self._tick["gpus"].append({})
        return self._tick["gpus"][index]

    def store_gpu(self, index: int, key: str, value: Any) -> None:
        self._gpu_entry(index)[key] = value

    def store_system(self, key: str, value: Any) -> None:
        self.header["nvml"][key] = value

    def store_host(self, key: str, value: Any) -> None:
        (self.header if self._tick is None else self._tick)["host"][key] = value

    def store_event(self, index: int, event_type: int, xid: int) -> None:
        with self._lock:
            self._events[index].append({"eventType": int(event_type), "eventData": int(xid)})

    # --- proxies -------------------------------------------------------------------------
    def nvml(self, real: Any) -> RecordingNVML:
        return RecordingNVML(real, self)

    def host(self, real: Any) -> RecordingHost:
        return RecordingHost(real, self)

    def write_header(self, out: TextIO) -> None:
        out.write(json.dumps(self.header, separators=(",", ":")) + "\n")


class RecordingNVML:
    def __init__(self, real: Any, recorder: Recorder):
        self._real = real
        self._rec = recorder
        self._index: dict[Any, int] = {}

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._real, name)
        if not callable(target) or not name.startswith("nvml") or name in _PASS_THROUGH:
            return target
        special = getattr(self, f"_record_{name}", None)
        if special is not None:
            return special
        if name.startswith("nvmlDevice") and name != "nvmlDeviceGetCount":

            def device_call(handle: Any, *args: Any) -> Any:
                index = self._index[handle_key(handle)]
                key = call_key(name, args)
                try:
                    value = target(handle, *args)
                except Exception as e:
                    self._rec.store_gpu(index, key, error_value(e))
                    raise
                self._rec.store_gpu(index, key, encode(value))
                return value

            return device_call

        def system_call(*args: Any) -> Any:
            key = call_key(name, args)
            try:
                value = target(*args)
            except Exception as e:
                self._rec.store_system(key, error_value(e))
                raise
            self._rec.store_system(key, encode(value))
            return value

        return system_call

    def _record_nvmlInit(self, *args: Any) -> None:
        """NVML that cannot start is recorded (a replay starts no better); one that starts is not."""
        try:
            self._real.nvmlInit(*args)
        except Exception as e:
            self._rec.store_system("nvmlInit", error_value(e))
            raise
        self._rec.header["nvml"].pop("nvmlInit", None)

    def _record_nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        try:
            handle = self._real.nvmlDeviceGetHandleByIndex(index)
        except Exception as e:
            self._rec.store_system(call_key("nvmlDeviceGetHandleByIndex", (index,)), error_value(e))
            raise
        self._index[handle_key(handle)] = index
        self._rec._gpu_entry(index)
        return handle

    def _record_nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[int]) -> Any:
        index = self._index[handle_key(handle)]
        try:
            values = self._real.nvmlDeviceGetFieldValues(handle, field_ids)
        except Exception as e:
            for field_id in field_ids:
                self._rec.store_gpu(index, f"nvmlDeviceGetFieldValues:{int(field_id)}", error_value(e))
            raise
        for v in values:
            key = f"nvmlDeviceGetFieldValues:{int(v.fieldId)}"
            if v.nvmlReturn == 0:
                self._rec.store_gpu(
                    index,
                    key,
                    {
                        "nvmlReturn": 0,
                        "valueType": int(v.valueType),
                        "value": getattr(v.value, VALUE_FIELDS[v.valueType]),
                    },
                )
            else:
                self._rec.store_gpu(
                    index, key, {"nvmlReturn": int(v.nvmlReturn), "valueType": int(v.valueType), "value": 0}
                )
        return values

    def _record_nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:
        index = self._index[handle_key(handle)]
        try:
            self._real.nvmlDeviceRegisterEvents(handle, event_types, event_set)
        except Exception as e:
            self._rec.store_gpu(index, "nvmlDeviceRegisterEvents", error_value(e))
            raise

    def _record_nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        data = self._real.nvmlEventSetWait_v2(event_set, timeout_ms)
        index = self._index.get(handle_key(data.device))
        if index is not None:
            self._rec.store_event(index, data.eventType, data.eventData)
        return data


class RecordingHost:
    _CALLS = (
        "sensors_temperatures",
        "sensors_fans",
        "cpu_percent",
        "cpu_count",
        "getloadavg",
        "virtual_memory",
        "powercap",
        "hwmon",
        "cpuinfo",
    )

    def __init__(self, real: Any, recorder: Recorder):
        self._real = real
        self._rec = recorder

    def __getattr__(self, name: str) -> Any:
        if name not in self._CALLS:
            raise AttributeError(name)
        target = getattr(self._real, name)

        def call() -> Any:
            value = target()
            self._rec.store_host(name, _host_value(name, value))
            return value

        return call

    def processes(self, pids: list[int]) -> dict:
        """Asked when the set of GPU processes changes, for all of them: stored as answered."""
        value = self._real.processes(pids)
        self._rec.store_host("processes", value)
        return value

    def start_times(self, pids: list[int]) -> dict:
        """Asked every poll while GPU processes run: a PID reused between two polls replays so."""
        value = self._real.start_times(pids)
        self._rec.store_host("start_times", value)
        return value

    def gpu_runtime_status(self, buses: list[str]) -> dict:
        """Asked every poll where a GPU's runtime power management is on: its sleep replays so."""
        value = self._real.gpu_runtime_status(buses)
        if value:
            self._rec.store_host("gpu_runtime_status", value)
        return value


def _host_value(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name == "virtual_memory":
        return {"total": value.total, "available": value.available}
    if name in ("sensors_temperatures", "sensors_fans"):
        return {chip: [list(entry) for entry in entries] for chip, entries in value.items()}
    return encode(value)
