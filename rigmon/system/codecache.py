"""The code rigmon generates at start (the rules' batches, the table's projections), compiled
once and kept in the user's cache as marshalled code objects, as Python keeps the bytecode of
its modules: a start reads them instead of compiling them again (most of what building the
rules costs a one-shot command). A kept file is used only where it is this user's own, no one
else can write it, and it holds the very source it was compiled from, compared whole, for this
Python; anything else is compiled afresh."""

from __future__ import annotations

import marshal
import sys
import zlib
from types import CodeType

from . import cache

MAX_FILES = 64  # kept (the oldest goes): a few configs' worth of rules
MAX_BYTES = 1 << 20


def compiled(source: str, filename: str, mode: str = "exec") -> CodeType:
    """``compile(source, filename, mode)``, from the cache where it holds it."""
    folder = cache.directory()
    if folder is None:
        return compile(source, filename, mode)
    key = f"{sys.implementation.cache_tag}\0{filename}\0{mode}\0{source}"
    file = folder / "code" / f"{zlib.crc32(key.encode('utf-8', 'surrogateescape')):08x}-{len(key):x}.marshal"
    data = cache.read_own(file, MAX_BYTES)
    if data is not None:
        try:
            found = marshal.loads(data)
        except (EOFError, ValueError, TypeError):
            found = None
        if isinstance(found, tuple) and len(found) == 2 and found[0] == key and isinstance(found[1], CodeType):
            return found[1]
    code = compile(source, filename, mode)
    cache.write_own(file, marshal.dumps((key, code)), MAX_FILES, "*.marshal")
    return code
