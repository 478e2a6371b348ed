"""The C heap of a simulation process: model-sized buffers go straight to the OS.

A run allocates and frees buffers of one model's size (101.8 kB for the headline MLP) by the
hundreds of thousands: message snapshots, training copies, averaged states. glibc's malloc
serves blocks under its mmap threshold (128 KiB at first) from the heap, and raises the threshold
each time it frees a larger mmapped block, so those buffers land in heap arenas that fragment and
are never given back. Measured (``analysis/bench_heap.py``): gossip on 2,000 devices peaked at
5.3 GB of resident memory this way, 3.5 GB with the threshold pinned; at 10,000 devices the
unpinned run was killed at 24 GB. Pinning the threshold (``mallopt(M_MMAP_THRESHOLD)``; it also
stops the threshold's growth) maps every buffer of 64 KiB or more on its own and unmaps it when
freed. Results are unchanged: only where the bytes live moves.

This module is a leaf: it imports only the standard library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from typing import Optional

__all__ = ["MMAP_THRESHOLD", "pin_mmap_threshold", "mmapped_bytes"]

#: Blocks of this many bytes or more are mapped on their own (below any model's state; above
#: small tensors and Python objects, which the heap serves faster).
MMAP_THRESHOLD = 64 * 1024
_M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


@functools.lru_cache(maxsize=1)
def _libc() -> Optional[ctypes.CDLL]:
    """glibc, or None (another C library or platform: nothing to pin)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version") else None


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Pin glibc's mmap threshold for this process; True if it was set (False off glibc)."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)) == 1)


def mmapped_bytes() -> Optional[int]:
    """Bytes this process holds in blocks mapped on their own (glibc's ``mallinfo2().hblkhd``), or None."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = _Mallinfo2
    return int(libc.mallinfo2().hblkhd)
