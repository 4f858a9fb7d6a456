"""The state directory and its files, as only the daemon's user may steer them.

A state directory is refused (``Unsafe``) where someone else could plant or swap what is in
it: not owned by the daemon's user, or under a directory another user can write to without
the sticky bit's guarantee (a sticky directory such as /tmp is safe only for what its owner,
root or the daemon's user, made). Within it every file is opened without following a link
(``O_NOFOLLOW``), must be a regular file (a FIFO would hang the read), is read up to a bound,
and is written through a new temporary file (``O_EXCL``) renamed over the old one."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any


class Unsafe(OSError):
    """A state directory another user could steer: its path and why."""


def check_dir(path: Path) -> None:
    """Raise Unsafe where ``path`` or a directory above it lets a user other than the daemon's
    (and root) change what is in it: each one that exists is checked, before anything is made
    in it, along the path as given and along the real one. A link on the way (systemd's
    DynamicUser makes /var/lib/rigmon one to /var/lib/private/rigmon) must be root's or the
    daemon's user's. ``path`` itself, where it exists, must be the daemon's user's directory."""
    me = os.geteuid()
    given = Path(os.path.abspath(path))
    real = Path(os.path.realpath(given))
    for where in dict.fromkeys((given, real)):
        for parent in reversed(where.parents):
            _check_parent(parent, me)
        try:
            link = os.lstat(where)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(link.st_mode) and link.st_uid not in (0, me):
            raise Unsafe(f"{where} is a link of uid {link.st_uid}'s: that user can point it elsewhere")
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise Unsafe(f"{given} is not a directory")
    if st.st_uid != me:
        raise Unsafe(
            f"{given} belongs to uid {st.st_uid}, not to the daemon's user (uid {me}): another user made it; "
            f"remove it or choose another daemon.state_dir"
        )


def _check_parent(parent: Path, me: int) -> None:
    try:
        link = os.lstat(parent)
        st = os.stat(parent)
    except FileNotFoundError:
        return  # made by the daemon, below one checked here
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (0, me):
        raise Unsafe(f"{parent}, above the state directory, is a link of uid {link.st_uid}'s")
    if st.st_uid not in (0, me):
        raise Unsafe(
            f"{parent}, above the state directory, belongs to uid {st.st_uid}: that user can swap what is below"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise Unsafe(
            f"{parent}, above the state directory, is writable by others and not sticky: "
            f"choose a daemon.state_dir whose parents only root can change"
        )


def open_regular(path: Path, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """An open descriptor of ``path``, never through a link, and only of a regular file; raises
    OSError (ELOOP for a link) or ValueError (a FIFO, a device, a directory)."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path, limit: int) -> bytes:
    """A state file's bytes: a link, a special file or more than ``limit`` bytes is damage
    (ValueError); a missing file is FileNotFoundError."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit} bytes")
    return data


def read_json(path: Path, limit: int) -> Any:
    """A state file's JSON, bounded: too large, nested past the parser's depth or not JSON is
    damage (ValueError)."""
    data = read_bytes(path, limit)
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deep") from None


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` as ``path``'s new content, whole or not at all: written to a temporary file
    made afresh (a link or file planted under its name is removed, never followed), then renamed
    over ``path`` (a rename replaces a link itself, not its target)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
