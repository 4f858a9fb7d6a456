"""``rigmon status`` tells one box's story: ``--watch`` in a real 80×24 terminal (a pty) fits an
8-GPU box on the screen, the GPUs and the alerts first, the last line saying what a taller
terminal would show; a replay that answers on the daemon's port lends this box none of its
alerts."""

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
from servers import Rigmon


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


def test_a_replay_on_the_daemons_port_lends_this_box_none_of_its_alerts(tmp_path):
    """A replay of 8 GPUs at 95 °C runs on the port rigmon status asks: status on this machine
    (no GPU) shows none of the replay's alerts, and says whose they would have been."""
    replay = Rigmon(tmp_path, sc.hot_box(tmp_path))
    try:
        replay.wait_ready()
        replay.wait_polls(2)
        config = tmp_path / "status.toml"
        config.write_text(f'[daemon]\nstate_dir = "{tmp_path / "status-state"}"\n[prometheus]\nport = {replay.port}\n')
        done = subprocess.run(
            [sys.executable, "-m", "rigmon", "status", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200"},
        )
    finally:
        replay.stop()
    assert "GpuAtSlowdownTemperature" not in done.stdout, done.stdout
    assert f"the daemon at 127.0.0.1:{replay.port} replays [replay hot.rec.jsonl]" in done.stdout, done.stdout


def test_status_without_a_daemon_and_jobs_without_a_ledger_fit_80_columns(tmp_path):
    config = tmp_path / "rigmon.toml"
    config.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n[prometheus]\nport = 9\n')
    for args in (["status"], ["jobs"]):
        done = subprocess.run(
            [sys.executable, "-m", "rigmon", *args, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "80"},
        )
        lines = done.stdout.splitlines()  # (a log record on stderr stays one line, as a log's reader wants)
        assert lines and max(len(line) for line in lines) <= 80, (args, [line for line in lines if len(line) > 80])
