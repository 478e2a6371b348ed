"""Seed streams: one root seed, one independent stream per purpose and node.

Every consumer (topology, partition, init, per-device shuffling, network loss,
churn) gets ``stream(seed, purpose, *ids)``; nothing uses global RNG state.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

__all__ = ["seed_sequence", "stream", "torch_generator", "child_seed", "child_seeds"]


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


_M32 = np.uint64(0xFFFFFFFF)


def _words(value: int) -> list[int]:
    """``value``'s 32-bit words, least significant first (``0`` is one word): SeedSequence's coercion."""
    out = []
    while value:
        out.append(value & 0xFFFFFFFF)
        value >>= 32
    return out or [0]


def child_seeds(seed: int, purpose: str, ids: np.ndarray) -> np.ndarray:
    """``[child_seed(seed, purpose, i) for i in ids]`` as int64, computed for all ids at once (ids below 2^32).

    numpy's SeedSequence (O'Neill's seed_seq hash: a pool of four 32-bit words mixed with every entropy word,
    then hashed out) done over arrays: the multipliers depend only on how many words were hashed, so each step
    is one operation for every id. The same integers as ``child_seed`` (tested against it)."""
    ids = np.asarray(ids, dtype=np.uint64)
    if len(ids) and int(ids.max()) >= 2**32:
        raise ValueError("child_seeds takes ids below 2^32")
    run = _words(int(seed))
    run += [0] * (4 - len(run))  # a spawn key follows: the run entropy fills the pool first
    entropy: list[np.ndarray | int] = [*run, zlib.crc32(purpose.encode("utf-8")), ids]
    const = [0x43B0D7E5]

    def hashmix(value: np.ndarray | int) -> np.ndarray:
        v = np.asarray(value, dtype=np.uint64) ^ np.uint64(const[0])
        const[0] = (const[0] * 0x931E8875) & 0xFFFFFFFF
        v = (v * np.uint64(const[0])) & _M32
        return v ^ (v >> np.uint64(16))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        r = np.bitwise_and(np.subtract(np.multiply(x, np.uint64(0xCA01F9DD)), np.multiply(y, np.uint64(0x4973F715))),
                           _M32)
        return r ^ (r >> np.uint64(16))

    with np.errstate(over="ignore"):  # uint64 wraps modulo 2^64, a multiple of 2^32: the low words stay right
        pool = [hashmix(entropy[i]) for i in range(4)]
        for src in range(4):
            for dst in range(4):
                if src != dst:
                    pool[dst] = mix(pool[dst], hashmix(pool[src]))
        for src in range(4, len(entropy)):
            for dst in range(4):
                pool[dst] = mix(pool[dst], hashmix(entropy[src]))
        words = []
        const_b = 0x8B51F9DD
        for i in range(2):  # generate_state(2, uint64)[0]: the first two 32-bit words
            v = pool[i] ^ np.uint64(const_b)
            const_b = (const_b * 0x58F38DED) & 0xFFFFFFFF
            v = (v * np.uint64(const_b)) & _M32
            words.append(v ^ (v >> np.uint64(16)))
        full = np.broadcast_to(words[0] | (words[1] << np.uint64(32)), ids.shape)
        return (full >> np.uint64(1)).astype(np.int64)
