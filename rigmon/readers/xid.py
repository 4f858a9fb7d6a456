"""XID critical errors: NVML's event set, waited on by a thread of its own (or drained at
each poll, for a replay that must come out the same every run), each event handed out with
the next reading. The ``gpu_xid`` family of the GPU reader."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from ..model.recording import handle_key
from ..model.sample import XidEvent
from .nvml import CALL_ERRORS, pynvml

log = logging.getLogger(__name__)

# The thread's wait. An event ends it at once; nothing else can (NVML cannot interrupt it), so
# stop() never waits it out: the thread frees the event set and shuts its NVML down itself
# when the wait ends. This bounds only how long the thread outlives stop().
EVENT_WAIT_MS = 1000
MAX_KEPT = 1000  # events between two readings (a driver in a loop of errors cannot grow it)


class XidWatcher:
    """The GPUs' XID events, registered at ``start`` and handed out by ``take``."""

    def __init__(self, nvml: Any, wall: Callable[[], float], thread: bool = True):
        self._nvml = nvml
        self._wall = wall
        self._use_thread = thread
        self._registered: dict = {}  # a handle's key: its device (index, info)
        self._events: deque[XidEvent] = deque(maxlen=MAX_KEPT)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._set: Any = None
        self._lock = threading.Lock()
        self._thread_done = False
        self._then: Callable[[], None] | None = None  # stop() came while the thread waited: it calls this
        self.failures = 0  # waits failing in a row

    def start(self, devices: Sequence[Any]) -> None:
        """Register ``devices`` (each with ``handle``, ``index`` and ``info``) for XID events."""
        nv = self._nvml
        if not devices:
            return
        try:
            self._set = nv.nvmlEventSetCreate()
        except CALL_ERRORS as e:
            log.warning("XID events unavailable: %s", e)
            return
        registered = {}
        for d in devices:
            try:
                nv.nvmlDeviceRegisterEvents(d.handle, pynvml.nvmlEventTypeXidCriticalError, self._set)
                registered[handle_key(d.handle)] = d
            except CALL_ERRORS as e:
                log.warning("GPU %d: XID events unavailable: %s", d.index, e)
        if not registered:
            return
        self._registered = registered
        if not self._use_thread:
            return  # drain() takes the events itself: deterministic for offline replays
        self._thread = threading.Thread(target=self._watch, name="rigmon-xid", daemon=True)
        self._thread.start()

    def drain(self) -> float | None:
        """At each poll: the events waiting, taken where no thread waits on them; the seconds
        that took (0 where the thread waits), or None where no GPU is registered."""
        if not self._registered:
            return None
        if self._thread is not None:
            return 0.0
        started = time.perf_counter()
        while True:
            try:
                data = self._nvml.nvmlEventSetWait_v2(self._set, 0)
            except CALL_ERRORS:
                break
            self._take(data)
        return time.perf_counter() - started

    def take(self) -> tuple[XidEvent, ...]:
        """The events since the last call, oldest first."""
        events = []
        while self._events:
            events.append(self._events.popleft())
        return tuple(events)

    def stop(self, then: Callable[[], None]) -> bool:
        """Stop waiting. True where the caller may release NVML now; False where the thread is
        inside NVML's wait: it calls ``then`` itself when the wait ends."""
        self._stop.set()
        with self._lock:
            if self._thread is not None and not self._thread_done:
                self._then = then
                return False
        return True

    def free(self) -> None:
        if self._set is not None:
            try:
                self._nvml.nvmlEventSetFree(self._set)
            except CALL_ERRORS:
                pass
            self._set = None

    def _watch(self) -> None:
        try:
            self._wait()
        finally:
            with self._lock:
                self._thread_done = True
                then = self._then
            if then is not None:
                then()

    def _wait(self) -> None:
        nv = self._nvml
        failures = 0
        while not self._stop.is_set():
            try:
                data = nv.nvmlEventSetWait_v2(self._set, EVENT_WAIT_MS)
            except pynvml.NVMLError_Timeout:
                failures = 0
                continue
            except CALL_ERRORS as e:
                failures += 1
                self.failures = failures
                if failures == 1:
                    log.warning("XID event wait failed: %s", e)
                self._stop.wait(min(30.0, 0.5 * 2**failures))
                continue
            self.failures = failures = 0
            self._take(data)

    def _take(self, data: Any) -> None:
        if not data.eventType & pynvml.nvmlEventTypeXidCriticalError:
            return
        d = self._registered.get(handle_key(data.device))
        if d is None:
            return
        event = XidEvent(gpu_index=d.index, uuid=d.info.uuid, xid=int(data.eventData), time=self._wall())
        log.error("GPU %d: XID %d", d.index, event.xid)
        self._events.append(event)
