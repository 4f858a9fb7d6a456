"""The *rigmon recording v1* format: what the hardware answered, call by call.

Line 1 is a header with the static answers; every other line is a tick with the answers of
one poll. A call is keyed by its pynvml (or psutil) function name, plus ``:`` and its
integer arguments after the handle. Lookup at a tick: the tick's value, else the header's,
else NotSupported. Field values are keyed one field at a time
(``nvmlDeviceGetFieldValues:82``), so any batch of fields can be answered; XID events that
arrived before a tick are listed under ``nvmlEventSetWait_v2`` in that tick's GPU entry.
"""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, overload

from .. import DATA
from .sample import GpuIdentity
from .text import printable

MAX_GPUS = 64  # NVML's own limit per box (rigmon.model.args)
FORMAT = "rigmon-recording"
VERSION = 1


class RecordingError(ValueError):
    """A file that is not a readable rigmon recording; the message says where and why."""


# The members of NVML's value union (c_nvmlValue_t), indexed by a field value's valueType.
VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


DEMO_RECORDING = "h200-matmul-load.rec.jsonl"


def demo_path() -> Path:
    """The bundled H200 recording (``--demo``)."""
    return DATA / DEMO_RECORDING


def handle_key(handle: Any) -> Any:
    """A hashable identity for a device handle: the address behind NVML's ctypes pointer, or
    the handle itself (replayed handles)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return handle


def call_key(name: str, args: tuple[Any, ...] = ()) -> str:
    return f"{name}:{','.join(str(int(a)) for a in args)}" if args else name


def error_value(exc: BaseException) -> dict[str, str]:
    """How a raised pynvml error is stored: its class name without ``NVMLError_``;
    ``LibraryMismatch`` for the bindings' NVMLLibraryMismatchError (the driver lacks the call
    they asked for), which a replay raises again as it is."""
    name = type(exc).__name__
    return {"nvml_error": "LibraryMismatch" if name == "NVMLLibraryMismatchError" else name.removeprefix("NVMLError_")}


def encode(value: Any) -> Any:
    """A pynvml or psutil answer as plain JSON (ctypes structs become objects)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, ctypes.Structure):
        return {
            name: encode(getattr(value, name))
            for name, ctype, *_ in value._fields_
            if not issubclass(ctype, (ctypes._Pointer, ctypes.Union)) and not name.startswith("_")
        }
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if hasattr(value, "_asdict"):  # psutil's namedtuples that are not plain tuples
        return encode(value._asdict())
    if hasattr(value, "__dict__"):  # pynvml's "friendly objects" (processes)
        return {k: encode(v) for k, v in vars(value).items() if not k.startswith("_")}
    raise TypeError(f"cannot store a {type(value).__name__} in a recording")


Transform = Callable[[dict[str, Any]], dict[str, Any]]  # a tick changed as it is read
LAZY_BYTES = 16 << 20  # larger recordings keep their ticks as text, parsed when read


class LazyTicks(Sequence[dict[str, Any]]):
    """A large recording's ticks, kept as their JSON lines (about the file's size in memory,
    where parsed dicts take ten times that) and parsed when read; read-only. ``transform``
    changes each parsed tick (``widened``)."""

    def __init__(self, lines: list[str], times: list[float], transform: Transform | None = None):
        self._lines, self.times, self._transform = lines, times, transform

    def __len__(self) -> int:
        return len(self._lines)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        tick: dict[str, Any] = json.loads(self._lines[index])
        return self._transform(tick) if self._transform else tick

    def mentions(self, text: str) -> bool:
        return any(text in line for line in self._lines)

    def with_transform(self, transform: Transform) -> LazyTicks:
        inner = self._transform
        return LazyTicks(self._lines, self.times, (lambda t: transform(inner(t))) if inner else transform)


class Recording:
    """A recording: its header and its ticks (a list, or LazyTicks decoding each when read)."""

    def __init__(self, header: dict[str, Any], ticks: list[dict[str, Any]] | LazyTicks | None = None):
        self.header = header
        self.ticks = [] if ticks is None else ticks
        self.path: Path | None = None  # the file it was loaded from, where it was

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Recording) and (self.header, self.ticks) == (other.header, other.ticks)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Recording({self.gpu_count} GPU(s), {len(self.ticks)} tick(s))"

    @property
    def gpu_count(self) -> int:
        return len(self.header.get("gpus", []))

    @property
    def hostname(self) -> str | None:
        """The name of the box it was recorded on, where the header says it (``"hostname"``,
        written by ``rigmon record``; files without it stay valid v1): printable, at most a
        DNS name's 253 characters, or None."""
        said = self.header.get("hostname")
        if not isinstance(said, str) or not said.strip():
            return None
        return printable(said.strip())[:253]

    @property
    def known_gpus(self) -> tuple[GpuIdentity, ...]:
        """The GPUs the box had when it was recorded (``"known_gpus"``, written by ``rigmon
        record`` from its state_dir): a replay misses those NVML does not list, as the box did."""
        said = self.header.get("known_gpus")
        entries = [GpuIdentity.parse(e) for e in said[:64]] if isinstance(said, list) else []
        return tuple(g for g in entries if g is not None)

    def _times(self) -> list[float]:
        return self.ticks.times if isinstance(self.ticks, LazyTicks) else [tick["t"] for tick in self.ticks]

    @property
    def duration(self) -> float:
        times = self._times()
        return times[-1] - times[0] if times else 0.0

    def offsets(self) -> list[float]:
        times = self._times()
        t0 = times[0] if times else 0.0
        return [round(t - t0, 3) for t in times]  # ticks carry milliseconds

    def mentions(self, text: str) -> bool:
        """Whether any tick holds ``text`` as a key (an XID event, say)."""
        if isinstance(self.ticks, LazyTicks):
            return self.ticks.mentions(f'"{text}"')
        return any(text in g for tick in self.ticks for g in tick.get("gpus", []))

    @classmethod
    def load(cls, path: str | Path) -> Recording:
        path = Path(path)
        try:
            with open(path, encoding="utf-8") as f:  # line by line: never the whole text and its lines at once
                size = os.fstat(f.fileno()).st_size
                lines = [line.rstrip("\r\n") for line in f if line.strip()]
        except OSError as e:
            raise RecordingError(f"{path}: cannot read: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise RecordingError(f"{path}: not UTF-8 text (byte {e.start} of a line)") from None
        if not lines:
            raise RecordingError(f"{path}: empty file, not a rigmon recording")
        header = _parse_line(path, 1, lines[0])
        if header.get("format") != FORMAT:
            raise RecordingError(f"{path}: line 1: format is {header.get('format')!r}, expected {FORMAT!r}")
        if header.get("version") != VERSION:
            raise RecordingError(f"{path}: line 1: version {header.get('version')!r} is not supported (only {VERSION})")
        if not isinstance(header.get("gpus", []), list):
            raise RecordingError(f"{path}: line 1: 'gpus' must be a list")
        count = header.get("nvml", {}).get("nvmlDeviceGetCount") if isinstance(header.get("nvml"), dict) else None
        if len(header.get("gpus", [])) > MAX_GPUS or (isinstance(count, int) and count > MAX_GPUS):
            raise RecordingError(f"{path}: line 1: more than {MAX_GPUS} GPUs (NVML's own limit per box)")
        for key in ("nvml", "host"):
            if not isinstance(header.get(key, {}), dict):
                raise RecordingError(f"{path}: line 1: {key!r} must be an object")
        if not all(isinstance(g, dict) for g in header.get("gpus", [])):
            raise RecordingError(f"{path}: line 1: every entry of 'gpus' must be an object")
        lazy = size > LAZY_BYTES
        parsed: list[dict[str, Any]] = []
        kept: list[str] = []  # a large recording's ticks as their lines (LazyTicks)
        times: list[float] = []
        for number, line in enumerate(lines[1:], start=2):
            tick = _parse_line(path, number, line)
            if not isinstance(tick.get("t"), (int, float)):
                raise RecordingError(f"{path}: line {number}: tick has no numeric 't'")
            if not isinstance(tick.get("gpus", []), list) or not all(isinstance(g, dict) for g in tick.get("gpus", [])):
                raise RecordingError(f"{path}: line {number}: 'gpus' must be a list of objects")
            if not isinstance(tick.get("host", {}), dict):
                raise RecordingError(f"{path}: line {number}: 'host' must be an object")
            have, want = len(tick.get("gpus", [])), len(header.get("gpus", []))
            if have != want:
                raise RecordingError(f"{path}: line {number}: {have} GPU entries, header has {want}")
            if lazy:
                times.append(tick["t"])
                kept.append(line)
            else:
                parsed.append(tick)
        loaded = cls(header, LazyTicks(kept, times) if lazy else parsed)
        loaded.path = path
        return loaded

    def widened(self, count: int, shared: bool = False) -> Recording:
        """The same recording with ``count`` GPUs, copies of the recorded ones with their own
        identities: a way to drive an 8-GPU box from a 1-GPU recording. ``shared``: the
        copies' ticks are the recorded answers themselves, not copies of them (a replay, which
        only reads them, holds one GPU's answers, not eight)."""
        source = self.header.get("gpus", [])
        if not source:
            raise RecordingError("a recording without GPUs cannot be widened")

        def copy(entries: list[dict[str, Any]], with_identity: bool) -> list[dict[str, Any]]:
            out = []
            for i in range(count):
                entry = entries[i % len(entries)]
                if not (shared and not with_identity):
                    entry = dict(entry)
                if with_identity and i >= len(entries):
                    _give_identity(entry, i)
                out.append(entry)
            return out

        header = dict(self.header, gpus=copy(source, True))
        header["nvml"] = dict(header.get("nvml", {}), nvmlDeviceGetCount=count)
        if isinstance(self.ticks, LazyTicks):  # widened as each tick is read
            wide = Recording(header, self.ticks.with_transform(lambda t: dict(t, gpus=copy(t["gpus"], False))))
        else:
            wide = Recording(header, [dict(tick, gpus=copy(tick["gpus"], False)) for tick in self.ticks])
        wide.path = self.path
        return wide


def _give_identity(entry: dict[str, Any], index: int) -> None:
    uuid = entry.get("nvmlDeviceGetUUID")
    if isinstance(uuid, str):
        entry["nvmlDeviceGetUUID"] = f"{uuid[:-4]}{index:04x}"
    pci = entry.get("nvmlDeviceGetPciInfo")
    if isinstance(pci, dict) and "busId" in pci:
        bus = f"{0x10 + index:02x}"
        entry["nvmlDeviceGetPciInfo"] = dict(
            pci, bus=0x10 + index, busId=f"00000000:{bus}:00.0", busIdLegacy=f"0000:{bus}:00.0"
        )
    if isinstance(entry.get("nvmlDeviceGetSerial"), str):
        entry["nvmlDeviceGetSerial"] = f"{entry['nvmlDeviceGetSerial']}-{index}"


def _parse_line(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as e:
        raise RecordingError(f"{path}: line {number}: not JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise RecordingError(f"{path}: line {number}: JSON nested too deeply") from None
    if not isinstance(value, dict):
        raise RecordingError(f"{path}: line {number}: expected a JSON object")
    return value
