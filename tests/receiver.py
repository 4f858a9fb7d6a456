"""A real HTTP receiver for notifier tests: records every POST; can be stopped and restarted
on the same port, or told to answer with an error status."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, port: int = 0):
        self.bodies: list[bytes] = []
        self.headers: list[dict] = []
        self.status = 200
        self.retry_after: str | None = None
        self._lock = threading.Lock()
        self._server = None
        self.port = port
        self.start()

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status = receiver.status
                if status == 200:
                    with receiver._lock:
                        receiver.bodies.append(body)
                        receiver.headers.append(dict(self.headers))
                self.send_response(status)
                if receiver.retry_after:
                    self.send_header("Retry-After", receiver.retry_after)
                self.end_headers()

            def log_message(self, *args):
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def json(self) -> list[dict]:
        with self._lock:
            return [json.loads(b) for b in self.bodies]
