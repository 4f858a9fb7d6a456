"""Handing freed memory back to the system. glibc keeps what a process frees for its next
allocations, and a burst (start-up's parse and compile, a save of the history) would otherwise
stay resident for the process's life: a daemon that runs for weeks hands it back after each."""

from __future__ import annotations


def give_back() -> None:
    """``malloc_trim(0)``: every arena's free pages back to the system. Elsewhere than glibc,
    nothing to do."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)  # the process's own symbols: glibc's, where it is glibc
    except (OSError, AttributeError):
        pass
