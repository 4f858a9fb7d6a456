"""``rigmon status --watch`` in a real 80×24 terminal (a pty): an 8-GPU box fits the screen, the
GPUs and the alerts first, and the last line says what a taller terminal would show."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

import scenarios as sc


def test_a_watch_of_eight_gpus_fits_an_80_by_24_terminal(tmp_path):
    recording = sc.write(sc.rich(sc.h200(), 8), tmp_path / "rich8.rec.jsonl")
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rigmon", "status", "--watch", "1", "--replay", str(recording)],
        stdin=follower,
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env={**env, "NO_COLOR": "1", "TERM": "xterm"},
        close_fds=True,
    )
    os.close(follower)
    out = b""
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and out.count(b"\x1b[H\x1b[2J") < 3:
            ready, _, _ = select.select([leader], [], [], 1)
            if ready:
                try:
                    out += os.read(leader, 65536)
                except OSError:
                    break
    finally:
        proc.terminate()
        proc.wait(10)
        os.close(leader)
    frames = out.decode("utf-8", "replace").split("\x1b[H\x1b[2J")
    assert len(frames) >= 3, out[-2000:]
    frame = frames[-2].replace("\r\n", "\n").rstrip("\n").split("\n")  # a whole frame, not the one being written
    print("\n".join(frame))
    assert len(frame) <= 23, len(frame)  # and the cursor's line: 24 rows
    assert max(len(line) for line in frame) <= 80
    assert frame[2].startswith("GPU") and sum(line[:1].isdigit() for line in frame[3:11]) == 8, frame
    assert any(line.startswith("ALERTS") for line in frame), frame
    assert frame[-1].startswith("… ") and "a taller terminal shows them" in frame[-1], frame[-1]
