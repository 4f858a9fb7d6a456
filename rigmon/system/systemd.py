"""sd_notify without libsystemd: one datagram to $NOTIFY_SOCKET."""

from __future__ import annotations

import os
import socket


class Notifier:
    """Tells systemd READY, STOPPING and WATCHDOG. Silent when not run by systemd."""

    def __init__(self, environ: dict[str, str] | None = None):
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):  # abstract namespace
            address = "\0" + address[1:]
        self._address = address or None
        usec = env.get("WATCHDOG_USEC", "")
        self.watchdog_seconds = int(usec) / 1e6 if usec.isdigit() and int(usec) > 0 else None

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, message: str) -> bool:
        if self._address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.connect(self._address)
                sock.sendall(message.encode())
            return True
        except OSError:
            return False

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def status(self, text: str) -> bool:
        """What ``systemctl status`` shows beside the unit's state."""
        return self.notify(f"STATUS={text}")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def reloading(self) -> bool:
        import time

        return self.notify(f"RELOADING=1\nMONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")
