"""Giving the host memory the server has freed back to the system.

A turn's transient tensors (prefill activations, logits) and the caches of closed or parked sessions are freed
into the C allocator's heaps, and glibc keeps what it can reuse instead of returning it: after a load the
process's resident memory stays at its high-water mark, though nothing holds it (docs/server.md, "Memory").
`trim()` asks glibc to return it (`malloc_trim(0)`); the scheduler calls it when it goes idle after turns ended or
sessions were parked or closed. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import time
from collections.abc import Hashable
from functools import cache


@cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library has none (macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def trim() -> bool:
    """Return the free memory at the top and inside the allocator's heaps to the system; False where unsupported."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True


class IdleTrim:
    """`trim()` when the scheduler is idle and memory was freed since the last trim, at most once per `every_s`
    (a trim takes milliseconds: never between two decode steps)."""

    def __init__(self, every_s: float = 1.0) -> None:
        self.every_s = every_s
        self.last: float | None = None  # when it last trimmed (monotonic; None: never)
        self.freed: Hashable | None = None  # the free counters the last trim covered

    def __call__(self, freed: Hashable) -> bool:
        """`freed`: counters of what frees memory (turns ended, sessions parked or closed); True when it trimmed."""
        now = time.monotonic()
        if freed == self.freed or (self.last is not None and now - self.last < self.every_s):
            return False
        self.last, self.freed = now, freed
        return trim()
