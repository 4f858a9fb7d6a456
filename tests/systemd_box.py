"""A real systemd, booted as PID 1 of fresh PID and mount namespaces, for tests of the shipped
units: READY, the watchdog, DynamicUser, StateDirectory, credentials, stop.

What the box writes stays in it: /etc, /var/lib, /var/log (the journal) and /opt are overlays on the machine's own
(writes land in a tmpfs), and /run, /tmp, /var/tmp and both tmpfiles.d directories are fresh
tmpfs mounts. The last two matter: without them systemd-tmpfiles would clean the machine's
real /tmp at boot. The network is the machine's, so a unit's port answers on 127.0.0.1.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

SYSTEMD = Path("/lib/systemd/systemd")

INIT = """#!/bin/bash
set -e
mount --make-rprivate /
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd /run/box/checkout
mount --bind {checkout} /run/box/checkout
for dir in /tmp /var/tmp /etc/tmpfiles.d /usr/lib/tmpfiles.d; do mount -t tmpfs tmpfs "$dir"; done
for dir in /etc /var/lib /var/log /opt; do
    name=$(echo "$dir" | tr / _)
    mkdir -p "/run/box/$name.up" "/run/box/$name.work"
    mount -t overlay overlay -o "lowerdir=$dir,upperdir=/run/box/$name.up,workdir=/run/box/$name.work" "$dir"
done
# a fresh machine's state: what rigmon run as root left on this one is not the box's
rm -rf /var/lib/rigmon /var/lib/private/rigmon
echo "box: mounts ready"
exec {systemd} --system --unit=basic.target --log-target=journal
"""

# sudo's secure_path: what "sudo python3" and "sudo install" find on a Debian or Ubuntu box.
SECURE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def available() -> str | None:
    """Why a box cannot be booted here, or None."""
    if os.geteuid() != 0:
        return "needs root (namespaces and mounts)"
    for tool in ("unshare", "nsenter", "systemctl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not SYSTEMD.exists():
        return f"{SYSTEMD} is not installed"
    return None


class SystemdBox:
    # Where the box sees the checkout it was given (the machine's path may be under /tmp).
    CHECKOUT = "/run/box/checkout"

    def __init__(self, workdir: Path, checkout: Path):
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.init = workdir / "init.sh"
        self.init.write_text(INIT.format(systemd=SYSTEMD, checkout=shlex.quote(str(checkout))))
        self.init.chmod(0o755)
        self.log = workdir / "boot.log"
        self.pid: int | None = None

    def boot(self, timeout: float = 60.0) -> None:
        with open(self.log, "w") as log:
            # its own session, never the foreground of this process: systemd owns its terminal
            self._proc = subprocess.Popen(
                ["unshare", "--fork", "--pid", "--mount", "--mount-proc", str(self.init)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while self.pid is None and time.monotonic() < deadline:
            self.pid = self._find_pid()
            time.sleep(0.1)
        if self.pid is None:
            raise RuntimeError(f"systemd did not start: {self.log.read_text()}")
        state = ""
        while state not in ("running", "degraded") and time.monotonic() < deadline:
            # fails until PID 1 listens on its private socket; then waits for the boot to end
            state = self.run("systemctl", "is-system-running", "--wait", timeout=timeout, check=False).stdout.strip()
            time.sleep(0.2)
        if state not in ("running", "degraded"):
            raise RuntimeError(f"systemd is {state!r}: {self.log.read_text()}")

    def _find_pid(self) -> int | None:
        """systemd's PID on the machine: the unshare child that exec'd it."""
        for child in Path(f"/proc/{self._proc.pid}/task/{self._proc.pid}/children").read_text().split():
            try:
                if Path(f"/proc/{child}/exe").resolve() == SYSTEMD.resolve():
                    return int(child)
            except OSError:
                continue
        return None

    def run(
        self,
        *command: str,
        timeout: float = 120.0,
        check: bool = True,
        input: str | None = None,
        env: dict | None = None,
        cwd: str | None = None,
    ) -> subprocess.CompletedProcess:
        """A command inside the box, as root, with sudo's PATH; ``cwd`` is a path in the box."""
        assert self.pid is not None
        environment = {
            "PATH": SECURE_PATH,
            "LANG": "C.UTF-8",
            "SYSTEMD_PAGER": "",
            "SYSTEMD_COLORS": "0",
            **(env or {}),
        }
        done = subprocess.run(
            [
                "nsenter",
                "-t",
                str(self.pid),
                "-m",
                "-p",
                "--",
                "env",
                "-i",
                *(f"{k}={v}" for k, v in environment.items()),
                "sh",
                "-c",
                'cd "$0" && exec "$@"',
                cwd or "/",
                *command,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def sh(self, script: str, **kw) -> subprocess.CompletedProcess:
        return self.run("bash", "-euo", "pipefail", "-c", script, **kw)

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        self.sh(f"install -D -m {mode:o} /dev/stdin {path}", input=text)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.run("systemctl", "show", unit, *(f"--property={p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, unit: str) -> str:
        return self.run("journalctl", "--no-pager", "-o", "cat", "-u", unit, check=False).stdout

    def shutdown(self) -> None:
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)  # PID 1 of its namespace ignores SIGTERM
            except ProcessLookupError:
                pass
        if getattr(self, "_proc", None) is not None:
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self.pid = None
