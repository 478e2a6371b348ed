"""Seed streams: one root seed, one independent stream per purpose and node.

Every consumer (topology, partition, init, per-device shuffling, network loss,
churn) gets ``stream(seed, purpose, *ids)``; nothing uses global RNG state.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

__all__ = ["seed_sequence", "stream", "torch_generator", "child_seed"]


def seed_sequence(seed: int, purpose: str, *ids: int) -> np.random.SeedSequence:
    """SeedSequence keyed by ``(purpose, *ids)``; stable across runs and platforms."""
    key = (zlib.crc32(purpose.encode("utf-8")),) + tuple(int(i) for i in ids)
    return np.random.SeedSequence(entropy=int(seed), spawn_key=key)


def stream(seed: int, purpose: str, *ids: int) -> np.random.Generator:
    """A numpy Generator private to ``purpose`` (and optionally node ids)."""
    return np.random.Generator(np.random.PCG64(seed_sequence(seed, purpose, *ids)))


def child_seed(seed: int, purpose: str, *ids: int) -> int:
    """A 63-bit integer seed for libraries that take an int (torch, sklearn)."""
    return int(seed_sequence(seed, purpose, *ids).generate_state(2, np.uint64)[0] >> np.uint64(1))


def torch_generator(seed: int, purpose: str, *ids: int) -> torch.Generator:
    """A CPU torch.Generator private to ``purpose`` (and node ids)."""
    g = torch.Generator()
    g.manual_seed(child_seed(seed, purpose, *ids))
    return g
