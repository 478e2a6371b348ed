"""Size limits a scenario is checked against when it is validated, before anything is allocated.

A typo such as ``n: 1000000000000`` must be refused in a second with one line,
not hang building a graph or die with ``MemoryError``. Two kinds of limits:

* fixed maxima (documented here, the same on every machine): at most
  ``MAX_DEVICES`` devices, ``MAX_PAIRWISE_DEVICES`` for kinds that test every
  pair of devices, ``MAX_TRIES`` redraws, ...;
* memory estimates compared with this machine's physical memory
  (``machine_memory_bytes``): links of the graph, one model per device,
  generated data. The estimates are lower bounds, so a refused scenario
  certainly does not fit.

This module is a leaf: it imports only the standard library.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Optional

__all__ = [
    "MAX_DEVICES",
    "MAX_PAIRWISE_DEVICES",
    "MAX_TRIES",
    "MAX_SAMPLES_PER_CLIENT",
    "MAX_HIDDEN",
    "MAX_FEATURES",
    "MAX_COUNT",
    "MAX_YAML_BYTES",
    "MAX_YAML_VALUES",
    "BYTES_PER_DEVICE",
    "BYTES_PER_LINK",
    "MODEL_COPIES",
    "machine_memory_bytes",
    "fmt_bytes",
    "at_most",
    "check_fits",
    "model_parameters",
]

#: Devices of one topology (every graph kind; rows * cols for grid and torus).
MAX_DEVICES = 1_000_000
#: Devices of kinds whose builder tests all n(n-1)/2 pairs (erdos_renyi): 2*10^8 pairs take minutes.
MAX_PAIRWISE_DEVICES = 20_000
#: Redraws of a random topology until it is connected.
MAX_TRIES = 10_000
#: Training samples per device (``data.samples_per_client``) and minimum samples (``min_samples``).
MAX_SAMPLES_PER_CLIENT = 10_000_000
#: Hidden width of the ``mlp`` model (``model.hidden``).
MAX_HIDDEN = 1_000_000
#: Feature dimension of the synthetic datasets (each cluster draws a D x D matrix).
MAX_FEATURES = 10_000
#: Any other count (epochs, protocol integers such as rounds, clusters, ranks, episodes).
MAX_COUNT = 1_000_000
#: Largest scenario or topology YAML file read.
MAX_YAML_BYTES = 16 * 2**20
#: Largest number of values a YAML file may expand to (aliases can repeat a subtree many times).
MAX_YAML_VALUES = 1_000_000

#: Memory of one device beyond its model: graph node, profile, bookkeeping (measured ~0.8 kB on a ring).
BYTES_PER_DEVICE = 1_000
#: Memory of one link of the networkx graph with its attributes (measured ~300 B on a complete graph).
BYTES_PER_LINK = 300
#: Model copies each device holds at least (its model and the one it trains or receives).
MODEL_COPIES = 2


@functools.lru_cache(maxsize=1)
def machine_memory_bytes() -> Optional[int]:
    """Physical memory of this machine in bytes (None when the OS does not say)."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    if pages <= 0 or size <= 0:
        return None
    return int(pages) * int(size)


def fmt_bytes(n: float) -> str:
    """``1.5 GiB``-style size."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover


def _num(v: float) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


def at_most(value: Optional[int], limit: int, what: str, fix: str) -> Optional[int]:
    """``value`` unchanged if it is None or <= ``limit``; else a ValueError naming the limit and the fix.

    For pydantic field validators: the message reads ``at most <limit> <what>; got <value>; <fix>``.
    """
    if value is not None and value > limit:
        raise ValueError(f"at most {limit:,} {what}; got {_num(value)}; {fix}")
    return value


def check_fits(need_bytes: float, what: str, fix: str) -> None:
    """A ValueError when ``need_bytes`` exceeds this machine's physical memory (no check when unknown)."""
    have = machine_memory_bytes()
    if have is not None and need_bytes > have:
        raise ValueError(f"{what} need at least {fmt_bytes(need_bytes)} of memory, more than the "
                         f"{fmt_bytes(have)} of this machine; {fix}")


def model_parameters(name: str, input_shape: tuple[int, ...], num_classes: int, hidden: int) -> int:
    """Approximate parameter count of a zoo model (``p2pfl.learning.models``) without building it.

    ``name`` is resolved already (not ``auto``); unknown names count as small.
    """
    c = max(num_classes, 1)
    if name == "mlp":
        d = math.prod(input_shape)
        return d * hidden + hidden + hidden * c + c
    in_ch = input_shape[0] if input_shape else 1
    if name == "cnn28":
        return (in_ch * 32 * 9 + 32) + (32 * 64 * 9 + 64) + (3136 * 128 + 128) + (128 * c + c)
    if name == "cnn32":
        convs = (in_ch * 32 + 32 * 32) * 9 + (32 * 64 + 64 * 64) * 9 + 4 * (32 + 64) * 2
        return convs + (4096 * 256 + 256) + (256 * c + c)
    return 200_000  # robot_policy (~104k parameters) and anything else: a small model
