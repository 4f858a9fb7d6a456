"""A real HTTP receiver for notifier tests: records every POST; can be stopped and restarted
on the same port, or told to answer with an error status."""

from __future__ import annotations

import json
import threading

from servers import LoopbackHTTP


class Receiver(LoopbackHTTP):
    def __init__(self, port: int = 0):
        self.bodies: list[bytes] = []
        self.headers: list[dict] = []
        self.status = 200
        self.retry_after: str | None = None
        self._lock = threading.Lock()
        super().__init__(port)

    def answer(self, path, headers, body):
        status = self.status
        if status == 200:
            with self._lock:
                self.bodies.append(body)
                self.headers.append(dict(headers))
        return status, [("Retry-After", self.retry_after)] if self.retry_after else [], b""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def json(self) -> list[dict]:
        with self._lock:
            return [json.loads(b) for b in self.bodies]
