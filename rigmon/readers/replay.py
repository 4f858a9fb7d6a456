"""Replay backends: answer the pynvml and psutil calls the readers make from a recording.

The readers cannot tell these from the real libraries: same function names, same argument
shapes, struct answers with the same attribute names, and errors raised as pynvml's own
exception classes (handed in by the GPU reader, which is the only module importing pynvml).
Which tick answers is chosen by a clock that says how far into the recording we are.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..model.recording import VALUE_FIELDS, Recording, call_key
from .procs import walk_up

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_UNKNOWN = 999


_DICT_NAMES = frozenset(dir(dict))


class Struct(dict):
    """A recorded ctypes struct: attribute access like the real one, and as quick (a ctypes
    field is a descriptor on its class; here each field is also an instance attribute, set
    when the struct is made: an answer is never changed after). A field named like one of
    dict's own attributes (``items``…) is read through ``__getattr__``, never shadowing it."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        fields = self.__dict__
        fields.update(self)
        if not _DICT_NAMES.isdisjoint(self):
            for name in _DICT_NAMES.intersection(self):
                del fields[name]

    @classmethod
    def fromkeys(cls, keys: Any, value: Any = None) -> Struct:
        return cls(dict.fromkeys(keys, value))

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class _Raise:
    __slots__ = ("name", "recorded")

    def __init__(self, name: str, recorded: bool = True):
        self.name = name
        self.recorded = recorded  # False: the recording has no answer for the call at all


def _answers(entry: dict[str, Any]) -> dict[str, Any]:
    """One GPU's (or the host's) answers by call, each decoded: a plain dict, looked up by key."""
    return {k: _decode(v) if v.__class__ is dict or v.__class__ is list else v for k, v in entry.items()}


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "nvml_error" in value:
            return _Raise(str(value["nvml_error"]))
        return Struct((k, _decode(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


EVENT_KEYS = ("nvmlEventSetWait_v2",)  # an event happens once: never carried forward


CHECKPOINT_TICKS = 256  # the carried state is kept every this many ticks, and rebuilt between


def _merge(last: list[dict], entries: list[dict]) -> list[dict]:
    """The carried answers after one more tick: its own answers over the last ones (events
    are never carried: an event happens once)."""
    out = []
    for i, entry in enumerate(entries):
        before = last[i] if i < len(last) else {}
        merged = {**before, **entry}
        for key in EVENT_KEYS:
            merged.pop(key, None)
        out.append(merged)
    return out + last[len(entries) :]


class ReplayClock:
    """Seconds into the recording. Real time from ``start_at`` at ``speed``, or set by hand
    (``set``) when a test or benchmark steps through ticks."""

    def __init__(self, start_at: float = 0.0, speed: float = 1.0, realtime: bool = True):
        self._base = start_at
        self._speed = speed
        self._started = time.monotonic()
        self._realtime = realtime

    def set(self, seconds: float) -> None:
        self._base, self._realtime = seconds, False

    @property
    def rate(self) -> float | None:
        """Recording seconds per real second; None once the clock is set by hand."""
        return self._speed if self._realtime else None

    def __call__(self) -> float:
        if self._realtime:
            return self._base + (time.monotonic() - self._started) * self._speed
        return self._base


class ReplaySource:
    """A decoded recording and the clock that picks the current tick. Past the end it loops
    (``loop=True``) or holds the last tick."""

    def __init__(self, recording: Recording, clock: Callable[[], float] | None = None, loop: bool = True):
        if not recording.ticks:
            raise ValueError("the recording has no ticks to replay")
        self.recording = recording
        self.clock = clock or ReplayClock()
        self.loop = loop
        self._offsets = recording.offsets()
        interval = recording.duration / max(len(self._offsets) - 1, 1)  # its mean tick interval
        self._period = recording.duration + interval  # a looped recording restarts one interval after its last tick
        self.cadence = min(max(interval, 0.0), 3600.0)  # how often it was recorded (an hour at most, whatever it says)
        self.header_nvml = _decode(recording.header.get("nvml", {}))
        self.header_gpus = [_decode(g) for g in recording.header.get("gpus", [])]
        self.header_host = _decode(recording.header.get("host", {}))
        self.has_events = recording.mentions("nvmlEventSetWait_v2")
        # Each tick's answers with the last recorded answer of every call it lacks carried
        # forward: the daemon reads slow counters (energy, throttle times) only every few
        # seconds, so a recording holds them on some ticks only, and a replay must answer what
        # was last seen, not NotSupported (a call never recorded falls back to the header).
        # Worked out as the replay reaches a tick, from checkpoints: memory stays a small
        # multiple of one tick whatever the recording's length.
        self._checkpoints: list[tuple[list[dict], dict]] = []  # carried (gpus, host) at k * CHECKPOINT_TICKS
        self._at: tuple[int, list[dict], dict] | None = None  # the last tick worked out, raw
        self._decoded: tuple[int, list, Any, Any] | None = None  # (index, gpus, host, label), decoded
        self._lock = threading.Lock()
        self._held: int | None = None  # the tick of the poll under way (held)

    def _carried_at(self, index: int) -> tuple[list[dict], dict]:
        ticks = self.recording.ticks
        if self._at is not None and self._at[0] <= index < self._at[0] + CHECKPOINT_TICKS:
            position, gpus, host = self._at
        else:
            k = index // CHECKPOINT_TICKS
            while len(self._checkpoints) <= k:  # each checkpoint from the one before it
                n = len(self._checkpoints)
                if n == 0:
                    tick = ticks[0]
                    gpus, host = _merge([], tick.get("gpus", [])), _merge([], [tick.get("host", {})])[0]
                else:
                    gpus, host = self._checkpoints[-1]
                    for i in range((n - 1) * CHECKPOINT_TICKS + 1, n * CHECKPOINT_TICKS + 1):
                        tick = ticks[i]
                        gpus, host = _merge(gpus, tick.get("gpus", [])), _merge([host], [tick.get("host", {})])[0]
                self._checkpoints.append((gpus, host))
            position = k * CHECKPOINT_TICKS
            gpus, host = self._checkpoints[k]
        for i in range(position + 1, index + 1):
            tick = ticks[i]
            gpus, host = _merge(gpus, tick.get("gpus", [])), _merge([host], [tick.get("host", {})])[0]
        self._at = (index, gpus, host)
        return gpus, host

    def _current(self, index: int) -> tuple[list, Any, Any]:
        with self._lock:  # the XID thread and the poll thread ask at once
            if self._decoded is None or self._decoded[0] != index:
                gpus, host = self._carried_at(index)
                tick = self.recording.ticks[index]
                own = tick.get("gpus", [])
                gpus = [
                    dict(g, **{k: own[i][k] for k in EVENT_KEYS if i < len(own) and k in own[i]})
                    for i, g in enumerate(gpus)
                ]
                self._decoded = (index, [_answers(g) for g in gpus], _answers(host), tick.get("label"))
            return self._decoded[1:]

    def gpus_at(self, index: int) -> list[dict[str, Any]]:
        """The decoded answers of every GPU at tick ``index`` (carried forward), by call."""
        decoded = self._decoded  # the last tick's, made whole under the lock before it is set
        if decoded is not None and decoded[0] == index:
            return decoded[1]
        return self._current(index)[0]

    def host_at(self, index: int) -> Any:
        return self._current(index)[1]

    def events_at(self, index: int) -> list[list]:
        """The events recorded in tick ``index`` itself, per GPU."""
        return [g.get("nvmlEventSetWait_v2", ()) or () for g in self.recording.ticks[index].get("gpus", [])]

    def __len__(self) -> int:
        return len(self._offsets)

    @contextmanager
    def held(self) -> Iterator[int]:
        """One tick for everything asked meanwhile: a poll that straddles a tick boundary still
        reads every GPU and the host from one tick, as the hardware answers one moment."""
        self._held = self._tick_now()
        try:
            yield self._held
        finally:
            self._held = None

    def tick_index(self) -> int:
        held = self._held
        return held if held is not None else self._tick_now()

    def _tick_now(self) -> int:
        position = self.clock()
        if self.loop and self._period > 0:
            position %= self._period
        return max(bisect.bisect_right(self._offsets, position) - 1, 0)

    def seconds_to(self, index: int) -> float | None:
        """Real seconds until the clock reaches tick ``index`` (its next time round, when the
        replay loops); None when the clock does not run by itself or will never get there."""
        rate = getattr(self.clock, "rate", None)
        if not rate or rate < 0:
            return None
        ahead = self._offsets[index] - self.clock()
        if self.loop and self._period > 0:
            ahead %= self._period
        return ahead / rate if ahead >= 0 else None

    def label(self) -> str | None:
        return self._current(self.tick_index())[2]


class ReplayHandle:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __repr__(self) -> str:
        return f"<replayed GPU {self.index}>"


class ReplayNVML:
    """pynvml-shaped: ``nvmlDeviceGetPowerUsage(handle)`` and friends, from a recording.

    ``make_error(name)`` builds pynvml's ``NVMLError_<name>`` so the reader's own error
    handling runs unchanged."""

    def __init__(self, source: ReplaySource, make_error: Callable[[str], BaseException]):
        self._source = source
        self._error = make_error
        self._handles = [ReplayHandle(i) for i in range(len(source.header_gpus))]

    # --- lookups -------------------------------------------------------------------------
    def _answer(self, value: Any) -> Any:
        if isinstance(value, _Raise):
            error = self._error(value.name)
            if not value.recorded:  # NotSupported, as the format says, marked for what people read
                error.not_recorded = True
            raise error
        return value

    def _system(self, key: str) -> Any:
        return self._answer(self._source.header_nvml.get(key, _NOT_RECORDED))

    def _device(self, index: int, key: str) -> Any:
        source = self._source
        value = source.gpus_at(source.tick_index())[index].get(key, _MISSING)
        if value is _MISSING:
            value = source.header_gpus[index].get(key, _NOT_RECORDED)
        return self._answer(value) if value.__class__ is _Raise else value

    # --- system --------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        """Recorded only where it failed: in the header (at start), or in a tick's own ``nvml``
        answers (``{"nvmlInit": null}`` where it answers again: a driver mended mid-recording)."""
        tick = self._source.recording.ticks[self._source.tick_index()].get("nvml")
        if isinstance(tick, dict) and "nvmlInit" in tick:
            self._answer(_decode(tick["nvmlInit"]))
        elif "nvmlInit" in self._source.header_nvml:
            self._system("nvmlInit")

    def nvmlInitWithFlags(self, flags: int) -> None:
        self.nvmlInit()

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        if "nvmlDeviceGetCount" in self._source.header_nvml:
            return self._system("nvmlDeviceGetCount")
        return len(self._handles)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> ReplayHandle:
        key = call_key("nvmlDeviceGetHandleByIndex", (index,))
        if key in self._source.header_nvml:
            self._system(key)
        if not 0 <= index < len(self._handles):
            raise self._error("InvalidArgument")
        return self._handles[index]

    def nvmlDeviceGetFieldValues(self, handle: ReplayHandle, field_ids: list[int]) -> list[Struct]:
        out = []
        for field_id in field_ids:
            try:
                recorded = self._device(handle.index, f"nvmlDeviceGetFieldValues:{int(field_id)}")
            except Exception as e:  # a whole-call failure (GpuIsLost) fails the batch as NVML does
                if type(e).__name__.endswith("_NotSupported"):
                    out.append(
                        Struct(
                            fieldId=field_id,
                            nvmlReturn=NVML_ERROR_NOT_SUPPORTED,
                            valueType=0,
                            value=Struct.fromkeys(VALUE_FIELDS, 0),
                            timestamp=0,
                            latencyUsec=0,
                            not_recorded=getattr(e, "not_recorded", False),
                        )
                    )
                    continue
                raise
            if not isinstance(recorded, dict):  # a damaged answer: this field failed, the others stand
                out.append(
                    Struct(
                        fieldId=field_id,
                        nvmlReturn=NVML_ERROR_UNKNOWN,
                        valueType=0,
                        value=Struct.fromkeys(VALUE_FIELDS, 0),
                        timestamp=0,
                        latencyUsec=0,
                    )
                )
                continue
            number = recorded.get("value", 0)
            out.append(Struct(recorded, fieldId=field_id, value=Struct.fromkeys(VALUE_FIELDS, number)))
        return out

    # --- XID events ----------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> ReplayEventSet:
        return ReplayEventSet(self._source)

    def nvmlDeviceRegisterEvents(self, handle: ReplayHandle, event_types: int, event_set: ReplayEventSet) -> None:
        if "nvmlDeviceRegisterEvents" in self._source.header_gpus[handle.index]:  # recorded only when it failed
            self._device(handle.index, "nvmlDeviceRegisterEvents")
        event_set.register(handle, event_types)

    def nvmlEventSetWait_v2(self, event_set: ReplayEventSet, timeout_ms: int) -> Struct:
        event = event_set.next_event(timeout_ms)
        if event is None:
            raise self._error("Timeout")
        return event

    nvmlEventSetWait = nvmlEventSetWait_v2

    def nvmlEventSetFree(self, event_set: ReplayEventSet) -> None:
        event_set.close()

    # --- every other call ------------------------------------------------------------------
    def __getattr__(self, name: str) -> Callable:
        if name.startswith("nvmlSystem"):

            def system_call(*args: Any) -> Any:
                return self._system(call_key(name, args))

            fn = system_call
        elif name.startswith("nvmlDevice"):
            device = self._device

            def device_call(handle: ReplayHandle, *args: Any) -> Any:
                return device(handle.index, call_key(name, args) if args else name)

            fn = device_call
        else:
            raise AttributeError(name)
        setattr(self, name, fn)  # cache: the next call skips __getattr__
        return fn


_MISSING = object()
_NOT_RECORDED = _Raise("NotSupported", recorded=False)


class ReplayEventSet:
    """Delivers each recorded XID once, when the replay clock passes its tick."""

    def __init__(self, source: ReplaySource):
        self._source = source
        self._handles: dict[int, ReplayHandle] = {}
        self._cursor = source.tick_index()
        self._pending: list[Struct] = []
        self._event_ticks: list[int] | None = None  # the ticks that hold events, found at the first wait
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def register(self, handle: ReplayHandle, event_types: int) -> None:
        self._handles[handle.index] = handle

    def close(self) -> None:
        self._closed.set()

    def _collect(self) -> None:
        now = self._source.tick_index()
        if now == self._cursor:
            return
        count = len(self._source)
        index = self._cursor
        while index != now:
            index = (index + 1) % count
            for gpu, events in enumerate(self._source.events_at(index)):
                if gpu not in self._handles:
                    continue
                for event in events:
                    self._pending.append(
                        Struct(
                            device=self._handles[gpu],
                            eventType=event.get("eventType", 8),
                            eventData=event.get("eventData", 0),
                            gpuInstanceId=0xFFFFFFFF,
                            computeInstanceId=0xFFFFFFFF,
                        )
                    )
        self._cursor = now

    def _until_next(self) -> float:
        """How long to sleep before the next tick that holds an event can have come: like NVML
        blocking in C, no wake-ups for nothing while the clock runs by itself; a clock set by
        hand is looked at every 50 ms."""
        if not getattr(self._source.clock, "rate", None):
            return 0.05
        if self._event_ticks is None:
            self._event_ticks = [i for i in range(len(self._source)) if any(self._source.events_at(i))]
        ticks = self._event_ticks
        after = bisect.bisect_right(ticks, self._cursor)
        following = ticks[after] if after < len(ticks) else ticks[0] if ticks and self._source.loop else None
        seconds = self._source.seconds_to(following) if following is not None else None
        return math.inf if seconds is None else seconds + 0.001  # just past the tick, so tick_index() has moved

    def next_event(self, timeout_ms: int) -> Struct | None:
        if not self._source.has_events:
            self._closed.wait(timeout_ms / 1000)
            return None
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            with self._lock:
                self._collect()
                if self._pending:
                    return self._pending.pop(0)
                pause = self._until_next()
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed.wait(min(remaining, pause)):
                return None


class ReplayHost:
    """The host reader's backend (psutil's calls and RAPL), answered from a recording."""

    def __init__(self, source: ReplaySource):
        self._source = source

    def _get(self, key: str, default: Any) -> Any:
        tick = self._source.host_at(self._source.tick_index())
        if key in tick:
            return tick[key]
        return self._source.header_host.get(key, default)

    # A recording may hold anything: each answer is given in psutil's shape or not at all, as
    # the real backend gives it (an entry of the wrong shape is left out).
    def sensors_temperatures(self) -> dict:
        return _sensors(self._get("sensors_temperatures", {}), 4)

    def sensors_fans(self) -> dict:
        return _sensors(self._get("sensors_fans", {}), 2)

    def cpu_percent(self) -> float | None:
        return _number(self._get("cpu_percent", None))

    def cpu_count(self) -> int | None:
        count = self._get("cpu_count", None)
        return count if count.__class__ is int and 0 < count <= 1 << 16 else None

    def getloadavg(self) -> list | None:
        load = self._get("getloadavg", None)
        values = [_number(v) for v in load] if isinstance(load, list) and len(load) == 3 else None
        return values if values is not None and None not in values else None

    def virtual_memory(self) -> Struct | None:
        memory = self._get("virtual_memory", None)
        if (
            not isinstance(memory, dict)
            or _number(memory.get("total")) is None
            or _number(memory.get("available")) is None
        ):
            return None
        return memory

    def powercap(self) -> dict:
        zones = self._get("powercap", {})
        if not isinstance(zones, dict):
            return {}
        return {
            str(zone): value
            for zone, value in zones.items()
            if isinstance(value, list) and len(value) == 2 and all(v.__class__ is int and v >= 0 for v in value)
        }

    def hwmon(self) -> dict:
        return self._get("hwmon", {})

    def cpuinfo(self) -> dict:
        """As recorded (the first CPU's vendor, family and model), each checked."""
        info = self._get("cpuinfo", {})
        if not isinstance(info, dict):
            return {}
        out: dict = {}
        if isinstance(info.get("vendor"), str):
            out["vendor"] = info["vendor"][:32]
        for key in ("family", "model"):
            if info.get(key).__class__ is int and 0 <= info[key] < 1 << 16:
                out[key] = info[key]
        return out

    def gpu_runtime_status(self, buses: list[str]) -> dict[str, str]:
        """As recorded (the host key ``gpu_runtime_status``, {bus: state}): a recording made on a
        laptop replays its GPU's sleep; none recorded, every GPU is awake."""
        states = self._get("gpu_runtime_status", {})
        if not isinstance(states, dict):
            return {}
        return {bus: states[bus] for bus in buses if isinstance(states.get(bus), str) and len(states[bus]) <= 32}

    def processes(self, pids: list[int]) -> dict:
        """As recorded: these PIDs' /proc answers and their recorded ancestors'."""
        answer = self._get("processes", {})
        if not isinstance(answer, dict):
            return {}
        out = {}
        for pid in pids:
            info = answer.get(str(pid))
            if isinstance(info, dict):
                out[str(pid)] = info
                out.update((str(p), e) for p, e in walk_up(pid, lambda p: answer.get(str(p))))
        return out

    def start_times(self, pids: list[int]) -> dict:
        """As recorded, or (older recordings) the start times of the recorded /proc answers."""
        starts = self._get("start_times", None)
        if isinstance(starts, dict):
            return starts
        return {pid: info.get("start") for pid, info in self.processes(pids).items() if isinstance(info, dict)}


def _number(value: Any) -> float | None:
    """A number as psutil gives one: any float (NaN and the infinities too: the check of every
    sample counts and drops what no sensor can mean, as it does the hardware's), an int a C
    long holds."""
    cls = value.__class__
    if cls is float:
        return value
    return value if cls is int and -(1 << 63) <= value < 1 << 64 else None


def _sensors(answer: Any, width: int) -> dict:
    """psutil's sensors shape: {chip: [[label, value, …], …]}, the label text, the values numbers."""
    if not isinstance(answer, dict):
        return {}
    out = {}
    for chip, entries in answer.items():
        if not isinstance(entries, list):
            continue
        kept = [
            entry
            for entry in entries
            if isinstance(entry, list)
            and len(entry) == width
            and isinstance(entry[0], str)
            and all(v is None or _number(v) is not None for v in entry[1:])
        ]
        if kept:
            out[str(chip)] = kept
    return out


def replay_backend(source: ReplaySource) -> ReplayNVML:
    """A pynvml stand-in answering from a replay source, raising pynvml's own exceptions."""
    from .gpu import make_error  # the only module that imports pynvml

    return ReplayNVML(source, make_error)
