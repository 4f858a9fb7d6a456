"""NVML's bindings as the GPU reader calls them: nvidia-ml-py's ``pynvml`` with the calls it gets
wrong fixed (``NVML``): the fan's rpm by its index, and the compute processes through the newest
call the driver has, each record read in the layout that driver writes (drivers 535.43 to 535.86
wrote a record nvidia-ml-py does not know), never a record that does not read as a process.
Also pynvml's own exception for a recorded error (``make_error``), for the replay."""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

# What a call can raise that is that call's failure, never the GPU's or the poll's: NVML's
# errors, and the bindings' own (an unversioned call on a driver older than the bindings
# raises NVMLLibraryMismatchError; a ctypes argument the library's symbol does not take).
CALL_ERRORS = (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError, ctypes.ArgumentError)


class UntrustedProcessRecords(pynvml.NVMLError):
    """The driver's process records do not read as processes in any layout rigmon knows."""

    def __init__(self, why: str):
        self.value = pynvml.NVML_ERROR_UNKNOWN
        self.why = why

    def __str__(self) -> str:
        return f"process records that do not read as processes ({self.why}): the list is left out"


class _ProcessV1(ctypes.Structure):  # nvmlProcessInfo_v1_t: before R450
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class _ProcessV2(ctypes.Structure):  # nvmlProcessInfo_v2_t, and _v3_t on every driver but 535.43-535.86
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class _ProcessV3CC(ctypes.Structure):  # nvmlProcessInfo_v3_t as drivers 535.43 to 535.86 write it
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
        ("usedGpuCcProtectedMemory", ctypes.c_ulonglong),
    ]


MAX_PID = 1 << 22  # the kernel's pid_max can go no higher
MAX_PROCESSES = 4096


def process_layout(symbol: str, driver: str | None) -> type[ctypes.Structure]:
    """The record a driver writes for this versioned call. The first 535 releases (535.43 to
    535.86) wrote 32-byte ``_v3`` records with a field later dropped; 535.98 went back to 24
    (nvitop #89); nvidia-ml-py reads 24 whatever the driver."""
    if symbol.endswith("_v3") and driver:
        try:
            major, minor = (int(x) for x in driver.split(".")[:2])
        except ValueError:
            major = minor = 0
        if major == 535 and 43 <= minor < 98:
            return _ProcessV3CC
    return _ProcessV1 if not symbol.endswith(("_v2", "_v3")) else _ProcessV2


class _Process:  # as pynvml's own answer reads (and a recording stores it)
    def __init__(self, pid: int, used: int | None):
        self.pid, self.usedGpuMemory = pid, used


def compute_processes(handle: Any, driver: str | None) -> list[_Process]:
    """The GPU's compute processes through the newest call the driver has (``_v3``, ``_v2``, the
    first), each record read in the layout this driver writes; records that do not read as
    processes (a PID of 0 or past pid_max, more memory than any GPU has) raise
    UntrustedProcessRecords, never pass on as processes."""
    for symbol in (
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses",
    ):
        try:
            fn = pynvml._nvmlGetFunctionPointer(symbol)
        except pynvml.NVMLError_FunctionNotFound:
            continue
        layout = process_layout(symbol, driver)
        count = ctypes.c_uint(0)
        ret = fn(handle, ctypes.byref(count), None)
        if ret == pynvml.NVML_SUCCESS:
            return []
        if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
            raise pynvml.NVMLError(ret)
        count.value = min(count.value * 2 + 5, MAX_PROCESSES)
        records = (layout * count.value)()
        pynvml._nvmlCheckReturn(fn(handle, ctypes.byref(count), records))
        out = []
        for record in records[: min(count.value, MAX_PROCESSES)]:
            used = record.usedGpuMemory
            if not 0 < record.pid < MAX_PID:
                raise UntrustedProcessRecords(f"PID {record.pid} from {symbol}, driver {driver}")
            if used == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                used = None  # WDDM, or a MIG instance: not given
            elif used > 1 << 50:
                raise UntrustedProcessRecords(f"{used} bytes from {symbol}, driver {driver}")
            out.append(_Process(record.pid, used))
        return out
    raise pynvml.NVMLError_FunctionNotFound()


class _Bindings:
    """pynvml, with the calls it gets wrong fixed: its ``nvmlDeviceGetFanSpeedRPM(handle)``
    always asks for fan 0, here it takes the fan's index like ``nvmlDeviceGetFanSpeed_v2``; its
    ``nvmlDeviceGetComputeRunningProcesses`` asks for ``_v3`` alone (a driver before R510 has
    none: NVMLLibraryMismatchError) and reads 24-byte records whatever the driver wrote, here
    the newest call the driver has, in the layout it writes."""

    _driver: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(pynvml, name)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list:
        if self._driver is None:
            version = pynvml.nvmlSystemGetDriverVersion()
            self._driver = version.decode() if isinstance(version, bytes) else str(version)
        return compute_processes(handle, self._driver)

    @staticmethod
    def nvmlDeviceGetFanSpeedRPM(handle: Any, fan: int) -> int:
        info = pynvml.c_nvmlFanSpeedInfo_t()
        info.version = pynvml.nvmlFanSpeedInfo_v1
        info.fan = fan
        fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFanSpeedRPM")
        pynvml._nvmlCheckReturn(fn(handle, ctypes.byref(info)))
        return info.speed


NVML = _Bindings()


def make_error(name: str) -> BaseException:
    """pynvml's own exception for a recorded error name (used by the replay backend):
    ``NVMLError_<name>``, or ``LibraryMismatch`` for what pynvml raises when it asks a driver
    older than itself for a call that driver lacks (NVMLLibraryMismatchError)."""
    if name == "LibraryMismatch":
        return pynvml.NVMLLibraryMismatchError("the driver lacks this call (recorded)")
    cls = getattr(pynvml, f"NVMLError_{name}", None)
    return cls() if cls is not None else pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)


def real_backend() -> Any:
    """The real NVML bindings (what ``rigmon record`` wraps)."""
    return NVML
