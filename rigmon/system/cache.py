"""The user's cache (or the service's ``CacheDirectory=``): files only this user can write,
trusted as Python trusts its own ``__pycache__``, each written whole or not at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def directory() -> Path | None:
    """systemd's CacheDirectory= (the service's, where its home is out of reach), else the
    user's cache; None where neither is an absolute path."""
    service = os.environ.get("CACHE_DIRECTORY", "").split(":")[0]
    if service and os.path.isabs(service):
        return Path(service)
    base = os.environ.get("XDG_CACHE_HOME") or (os.path.join(os.path.expanduser("~"), ".cache"))
    if not os.path.isabs(base):
        return None
    return Path(base) / "rigmon"


def read_own(file: Path, most: int) -> bytes | None:
    """The bytes of ``file`` where it is a regular file of this user's own, no one else can
    write it and it holds at most ``most`` bytes; else None."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022 or st.st_size > most:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(most + 1)[:most]
    except OSError:
        return None
    finally:
        os.close(fd)


def write_own(file: Path, data: bytes, keep: int, pattern: str) -> None:
    """``data`` as ``file``, atomically, readable by this user only; of the files in its folder
    that match ``pattern``, the ``keep`` newest stay. A cache that cannot be written is no cache."""
    try:
        file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = file.with_name(f".{file.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, file)
        kept = sorted(file.parent.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[keep:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
