"""Give freed heap memory back to the system (glibc's ``malloc_trim``).

A run allocates and frees model-sized buffers (101.8 kB for the headline MLP) by the hundred
thousand. glibc serves blocks under its mmap threshold from heap arenas and keeps what is freed
there, so a long run's resident memory follows its busiest moment, fragmented. ``malloc_trim(0)``
hands every free page of every arena back (the kernel calls it once per fleet round). It changes
no value: the results are the same bits. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from typing import Optional

__all__ = ["TRIM", "release_free_heap"]

#: Whether ``release_free_heap`` trims (False: glibc's default behaviour, to compare; analysis/bench/bench_scale.py --heap).
TRIM = True


def _malloc_trim() -> Optional[Callable[[int], int]]:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return getattr(libc, "malloc_trim", None)


_TRIM = _malloc_trim()


def release_free_heap() -> bool:
    """Return the heap's free pages to the system; False where that is not done (not glibc, or ``TRIM`` off)."""
    if _TRIM is None or not TRIM:
        return False
    _TRIM(0)
    return True
