"""NVML's bindings as the GPU reader calls them: nvidia-ml-py's ``pynvml`` with the calls it gets
wrong fixed (``NVML``): the fan's rpm by its index, and the compute processes through the newest
call the driver has, each record read in the layout that driver writes (drivers 535.43 to 535.86
wrote a record nvidia-ml-py does not know), never a record that does not read as a process.
Also pynvml's own exception for a recorded error (``make_error``), for the replay."""

from __future__ import annotations

import ctypes
from typing import Any, NamedTuple

from ..model.args import UsageError


def _bindings() -> Any:
    """nvidia-ml-py's ``pynvml`` module, or a one-line error where another module of that name
    stands in its place: the old ``pynvml`` package (11.x, still pulled in by some tools) is a
    package holding an older copy of the bindings, and shadows nvidia-ml-py's single module."""
    import pynvml as module

    if hasattr(module, "__path__"):  # a package, not nvidia-ml-py's pynvml.py
        version = getattr(module, "__version__", "?")
        raise UsageError(
            f"the module pynvml comes from the old 'pynvml' package {version} ({module.__path__[0]}), which "
            "shadows nvidia-ml-py's: pip uninstall -y pynvml && pip install --force-reinstall nvidia-ml-py "
            "(pynvml 12 and later no longer shadow it)"
        )
    return module


pynvml = _bindings()


class NVMLLibraryMismatchError(Exception):
    """Stands for nvidia-ml-py's own where the bindings are older than it (12.535)."""


# What pynvml raises when its unversioned call asks a driver older than the bindings for a
# versioned symbol it lacks (nvidia-ml-py 12.550 and later)
LIBRARY_MISMATCH: type[Exception] = getattr(pynvml, "NVMLLibraryMismatchError", NVMLLibraryMismatchError)

# What a call can raise that is that call's failure, never the GPU's or the poll's: NVML's
# errors, and the bindings' own (an unversioned call on a driver older than the bindings
# raises NVMLLibraryMismatchError; a ctypes argument the library's symbol does not take).
CALL_ERRORS = (pynvml.NVMLError, LIBRARY_MISMATCH, ctypes.ArgumentError)


class NotInBindings(pynvml.NVMLError_FunctionNotFound):
    """The installed nvidia-ml-py has no wrapper of this name (older than the call, or newer
    than a deprecated one it dropped): that call's reading only, as a driver without the
    symbol; the reader tries the older call."""

    def __new__(cls, name: str) -> NotInBindings:  # pynvml's error classes take no argument to __new__
        return Exception.__new__(cls)

    def __init__(self, name: str):
        self.value = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
        self.name = name

    def __str__(self) -> str:
        return f"nvidia-ml-py has no {self.name}"


def _not_in_bindings(name: str) -> Any:
    def call(*args: Any) -> Any:
        raise NotInBindings(name)

    call.__name__ = name
    return call


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


# The record layouts drivers have written, by their size: a record's pid and memory lie at the
# same offsets in each, its GPU and compute instance ids (MIG) in all but the first.
LAYOUTS: dict[int, type[ctypes.Structure]] = {
    ctypes.sizeof(layout): layout for layout in (_ProcessV1, _ProcessV2, _ProcessV3CC)
}
WIDEST = max(LAYOUTS)
UNWRITTEN = 0xA5  # what the buffer holds before the driver writes: no record's last byte is ever this
MAX_PID = 1 << 22  # the kernel's pid_max can go no higher
MAX_PROCESSES = 4096
NO_INSTANCE = 0xFFFFFFFF  # a process's GPU or compute instance id where the GPU is not in MIG mode


def process_layout(symbol: str, driver: str | None) -> type[ctypes.Structure]:
    """The record a driver is known to write for this versioned call, where the records it
    wrote do not tell (``record_layout``). The first 535 releases (535.43 to 535.86) wrote
    32-byte ``_v3`` records with a field later dropped; 535.98 went back to 24 (nvitop #89);
    nvidia-ml-py reads 24 whatever the driver."""
    if symbol.endswith("_v3") and driver:
        try:
            major, minor = (int(x) for x in driver.split(".")[:2])
        except ValueError:
            major = minor = 0
        if major == 535 and 43 <= minor < 98:
            return _ProcessV3CC
    return _ProcessV1 if not symbol.endswith(("_v2", "_v3")) else _ProcessV2


def record_layout(buffer: ctypes.Array, count: int, symbol: str, driver: str | None) -> type[ctypes.Structure]:
    """The layout the driver really wrote ``count`` records in: measured from how far into a
    buffer filled with UNWRITTEN it wrote (a record ends in the high byte of a memory size or
    an instance id, never 0xA5), as a driver may write another size than its call's version
    says (550.127.08 writes 16-byte records through ``_v3``, nvitop #226). Where the extent is
    no known record size, the layout the version says."""
    raw = bytes(buffer)
    written = len(raw.rstrip(bytes([UNWRITTEN])))
    for size, layout in LAYOUTS.items():
        if count and size * (count - 1) < written <= size * count and written > size * count - 8:
            return layout
    return process_layout(symbol, driver)


class _Process:  # as pynvml's own answer reads (and a recording stores it)
    __slots__ = ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId")

    def __init__(
        self, pid: int, used: int | None, gpu_instance: int = NO_INSTANCE, compute_instance: int = NO_INSTANCE
    ):
        self.pid, self.usedGpuMemory = pid, used
        self.gpuInstanceId, self.computeInstanceId = gpu_instance, compute_instance


def compute_processes(handle: Any, driver: str | None) -> list[_Process]:
    """The GPU's compute processes through the newest call the driver has (``_v3``, ``_v2``, the
    first), each record read in the layout the driver wrote; records that do not read as
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
        count = ctypes.c_uint(0)
        ret = fn(handle, ctypes.byref(count), None)
        if ret == pynvml.NVML_SUCCESS:
            return []
        if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
            raise pynvml.NVMLError(ret)
        count.value = min(count.value * 2 + 5, MAX_PROCESSES)
        buffer = (ctypes.c_ubyte * (count.value * WIDEST))()  # room for the widest record, whatever is written
        ctypes.memset(buffer, UNWRITTEN, ctypes.sizeof(buffer))
        pynvml._nvmlCheckReturn(fn(handle, ctypes.byref(count), buffer))
        n = min(count.value, MAX_PROCESSES)
        layout = record_layout(buffer, n, symbol, driver)
        records = (layout * n).from_buffer(buffer)
        out = []
        for record in records:
            used = record.usedGpuMemory
            if not 0 < record.pid < MAX_PID:
                raise UntrustedProcessRecords(f"PID {record.pid} from {symbol}, driver {driver}")
            if used == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                used = None  # WDDM: not given
            elif used > 1 << 50:
                raise UntrustedProcessRecords(f"{used} bytes from {symbol}, driver {driver}")
            instances = (
                (record.gpuInstanceId, record.computeInstanceId) if layout is not _ProcessV1 else (NO_INSTANCE,) * 2
            )
            out.append(_Process(record.pid, used, *instances))
        return out
    raise pynvml.NVMLError_FunctionNotFound()


class _FanSpeedInfo(ctypes.Structure):  # nvmlFanSpeedInfo_v1_t (nvidia-ml-py has it from 12.570 only)
    _fields_ = [("version", ctypes.c_uint), ("fan", ctypes.c_uint), ("speed", ctypes.c_uint)]


MAX_MIG_DEVICES = 64  # an H100 holds seven: a count past this is a damaged answer


def _asked(fn: Any, *args: Any) -> Any:
    """fn(*args), or None where NVML gives no answer."""
    try:
        return fn(*args)
    except CALL_ERRORS:
        return None


class MigDevice(NamedTuple):  # one MIG instance as nvmlDeviceGetMigInstances answers it (and a recording keeps it)
    gpuInstanceId: Any
    computeInstanceId: Any
    uuid: Any
    name: Any
    memoryUsed: Any
    memoryTotal: Any


class _Bindings:
    """pynvml, with the calls it gets wrong fixed: its ``nvmlDeviceGetFanSpeedRPM(handle)``
    always asks for fan 0, here it takes the fan's index like ``nvmlDeviceGetFanSpeed_v2``; its
    ``nvmlDeviceGetComputeRunningProcesses`` asks for ``_v3`` alone (a driver before R510 has
    none: NVMLLibraryMismatchError) and reads 24-byte records whatever the driver wrote, here
    the newest call the driver has, in the layout it writes."""

    _driver: str | None = None

    def __getattr__(self, name: str) -> Any:
        """pynvml's function of that name, looked up where it is called: one the installed
        bindings lack raises NotInBindings when called, so it costs its own reading only."""
        try:
            return getattr(pynvml, name)
        except AttributeError:
            if not name.startswith("nvml"):
                raise
            return _not_in_bindings(name)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list:
        if self._driver is None:
            version = pynvml.nvmlSystemGetDriverVersion()
            self._driver = version.decode() if isinstance(version, bytes) else str(version)
        return compute_processes(handle, self._driver)

    @staticmethod
    def nvmlDeviceGetMigInstances(handle: Any) -> list[MigDevice]:
        """rigmon's own call (NVML has no single one): each MIG instance of a GPU in MIG mode,
        through nvmlDeviceGetMaxMigDeviceCount and nvmlDeviceGetMigDeviceHandleByIndex, with its
        ids, UUID, name and memory. A recording keeps the answer under this name."""
        count = pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
        out = []
        for slot in range(min(count, MAX_MIG_DEVICES) if isinstance(count, int) else 0):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError_NotFound:
                continue  # a slot no instance holds
            except CALL_ERRORS:
                continue

            memory = _asked(pynvml.nvmlDeviceGetMemoryInfo, mig)
            out.append(
                MigDevice(
                    _asked(pynvml.nvmlDeviceGetGpuInstanceId, mig),
                    _asked(pynvml.nvmlDeviceGetComputeInstanceId, mig),
                    _asked(pynvml.nvmlDeviceGetUUID, mig),
                    _asked(pynvml.nvmlDeviceGetName, mig),
                    getattr(memory, "used", None),
                    getattr(memory, "total", None),
                )
            )
        return out

    @staticmethod
    def nvmlDeviceGetFanSpeedRPM(handle: Any, fan: int) -> int:
        info = _FanSpeedInfo()
        info.version = ctypes.sizeof(_FanSpeedInfo) | 1 << 24  # NVML_STRUCT_VERSION(FanSpeedInfo, 1)
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
        return LIBRARY_MISMATCH("the driver lacks this call (recorded)")
    cls = getattr(pynvml, f"NVMLError_{name}", None)
    return cls() if cls is not None else pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)


def real_backend() -> Any:
    """The real NVML bindings (what ``rigmon record`` wraps)."""
    return NVML


def bindings_version() -> str:
    """The installed nvidia-ml-py's version, as pip knows it ("?" where it does not)."""
    from importlib import metadata

    try:
        return metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        return "?"
