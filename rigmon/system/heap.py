"""How the daemon's C heap is kept. glibc keeps what a process frees for its next allocations,
and a burst (start-up's parse and compile, a save of the history) would otherwise stay resident
for the process's life: a daemon that runs for weeks hands it back after each (``give_back``).

And glibc's defaults suit a program whose threads allocate at once, not a Python one, whose
threads take turns under the GIL (``tune``): each thread gets an arena of its own, whose free
space no other thread reuses and whose top ``malloc_trim`` does not return; and once a large
buffer has been freed (the history's 8 MB at load), buffers up to its size come from the heap
instead of their own mapping, and stay there fragmented.

CPython keeps free lists of its own: up to 2,000 freed tuples of each length under 20, which
only a full collection empties. In a daemon polling 8 GPUs, the lists of 3-, 5-, 7- and 8-tuples
grew from a few hundred to 2,000 each over its first hour of polls, about 0.5 MiB that stayed.
The daemon empties them every TIDY_SECONDS (``tidy``), so they never hold more than that
interval's worth and their memory goes back to the next poll's objects."""

from __future__ import annotations

import gc
from typing import Any

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # glibc's malloc.h
TIDY_SECONDS = 60.0  # a full collection, 16 ms on a 2-core VM: 0.03 % of a core
LARGE = 128 << 10  # glibc's default mmap threshold, kept fixed: a buffer this big has its own mapping


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None)  # the process's own symbols: glibc's, where it is glibc


def tune() -> None:
    """Before the daemon starts its threads: one arena for all of them, and the thresholds fixed
    at their defaults (setting them stops glibc raising them). Elsewhere than glibc, nothing."""
    try:
        mallopt = _libc().mallopt
    except (OSError, AttributeError):
        return
    for option, value in ((M_ARENA_MAX, 1), (M_MMAP_THRESHOLD, LARGE), (M_TRIM_THRESHOLD, LARGE)):
        mallopt(option, value)


def give_back() -> None:
    """``malloc_trim(0)``: every arena's free pages back to the system. Elsewhere than glibc,
    nothing to do."""
    try:
        _libc().malloc_trim(0)
    except (OSError, AttributeError):
        pass


def tidy() -> None:
    """A full collection: cyclic garbage, and CPython's free lists emptied into its allocator,
    where the next objects of any type reuse their memory."""
    gc.collect()
