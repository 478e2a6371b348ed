"""CUA, compatible update aggregation (FedDRMan, Pal et al. 2026, Sec. III-C1): the server groups
clients whose accumulated updates point the same way, then averages within each group.

Pure functions on state dicts and similarity matrices:

* ``update_similarity``: cosine similarity of accumulated updates from the common initial model,
  restricted to a submodule Omega (Eq. 10).
* ``cua_partition``: C groups maximising mean intra- minus mean inter-cluster similarity
  (Eq. 11, scored by ``partition_score``); exhaustive over all partitions for small K, a seeded
  local search beyond.
* ``match_clusters``: keeps persistent cluster models persistent across rounds.

Not to be confused with ``p2pfl.clustering.compatibility`` (RND's novelty-threshold compatibility
graph). Spectral rebalancing, the step after CUA, is in ``p2pfl.learning.spectral``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Optional

import numpy as np
import torch

__all__ = [
    "update_similarity",
    "partition_score",
    "cua_partition",
    "match_clusters",
    "EXHAUSTIVE_MAX_K",
]

#: Up to this many clients Eq. 11 is solved exactly (Stirling S(10, 3) = 9330 partitions).
EXHAUSTIVE_MAX_K = 10


def update_similarity(states: Sequence[Mapping[str, torch.Tensor]], init: Mapping[str, torch.Tensor],
                      keys: Optional[Sequence[str]] = None) -> np.ndarray:
    """S_ij = cos(v_i, v_j), v_k = vec((theta_k - theta_0)|_Omega) over ``keys`` (all float entries if None)."""
    if not states:
        raise ValueError("update_similarity needs at least one state")
    keys = [k for k in (init.keys() if keys is None else keys) if torch.is_floating_point(init[k])]
    if not keys:
        raise ValueError("the submodule Omega selects no floating-point parameter")
    v = torch.stack([torch.cat([(s[k].double() - init[k].double()).reshape(-1) for k in keys]) for s in states])
    norms = v.norm(dim=1).clamp_min(1e-12)
    s = (v @ v.T) / (norms[:, None] * norms[None, :])
    return s.numpy()


def _mean_between(sim: np.ndarray, a: Sequence[int], b: Sequence[int]) -> Optional[float]:
    """S-bar(a, b): mean S_ij over i in a, j in b, i != j; None when there is no such pair."""
    vals = [sim[i, j] for i in a for j in b if i != j]
    return float(np.mean(vals)) if vals else None


def partition_score(sim: np.ndarray, groups: Sequence[Sequence[int]]) -> float:
    """Eq. 11 objective: (1/C) sum_s S-bar(G_s, G_s) minus the mean inter-group similarity.

    S-bar is a mean over distinct pairs, so a singleton group has none: its intra term is 0 (an empty
    sum; no evidence of coherence) and it still counts in the 1/C. Two readings we tried first made a
    singleton free. S_ii = 1 made any client alone look perfectly coherent. Averaging the intra terms over
    the groups with pairs only (1/(C - singletons), not Eq. 11's 1/C) still scored a 3-1 split above the
    suite split on FedDRMan's object+goal round-1 updates in seeds 0-2 (Omega = temporal; seed 0: 0.236
    vs 0.172), and the split then stuck (grouped clients share a cluster model, so their accumulated
    updates align): CUA never separated the suites. With 1/C the suite split scores highest in all three.
    """
    c = len(groups)
    intra = sum(m for m in (_mean_between(sim, g, g) for g in groups) if m is not None) / c
    if c == 1:
        return intra
    inter = float(np.mean([_mean_between(sim, groups[s], groups[t]) for s, t in itertools.combinations(range(c), 2)]))
    return intra - inter


def _set_partitions(n: int, c: int) -> Iterator[list[list[int]]]:
    """All partitions of range(n) into exactly c non-empty groups (restricted growth strings)."""
    def rec(i: int, labels: list[int], used: int) -> Iterator[list[int]]:
        if n - i < c - used:
            return
        if i == n:
            if used == c:
                yield labels
            return
        for g in range(min(used + 1, c)):
            yield from rec(i + 1, labels + [g], max(used, g + 1))
    for labels in rec(0, [], 0):
        yield [[i for i in range(n) if labels[i] == g] for g in range(c)]


def _local_search(sim: np.ndarray, c: int, rng: np.random.Generator, restarts: int = 8) -> list[list[int]]:
    """Heuristic for large K: random balanced starts, then single-client moves while Eq. 11 improves."""
    n = sim.shape[0]
    best, best_score = None, -np.inf
    for _ in range(restarts):
        labels = rng.permutation(np.arange(n) % c)
        improved = True
        while improved:
            improved = False
            for i in range(n):
                for g in range(c):
                    if g == labels[i] or np.sum(labels == labels[i]) == 1:
                        continue
                    trial = labels.copy()
                    trial[i] = g
                    cur = partition_score(sim, [list(np.flatnonzero(labels == h)) for h in range(c)])
                    new = partition_score(sim, [list(np.flatnonzero(trial == h)) for h in range(c)])
                    if new > cur + 1e-12:
                        labels, improved = trial, True
        groups = [[int(i) for i in np.flatnonzero(labels == h)] for h in range(c)]
        score = partition_score(sim, groups)
        if score > best_score:
            best, best_score = groups, score
    assert best is not None  # restarts >= 1 and every score is finite
    return sorted(best, key=min)


def cua_partition(sim: np.ndarray, n_groups: int, *, rng: Optional[np.random.Generator] = None) -> list[list[int]]:
    """argmax over partitions into exactly ``n_groups`` non-empty groups of Eq. 11.

    Exhaustive (ties -> first in enumeration order) up to ``EXHAUSTIVE_MAX_K`` clients; beyond,
    a seeded local search (``rng`` required). Groups are returned sorted by their smallest member.
    """
    sim = np.asarray(sim, dtype=np.float64)
    n = sim.shape[0]
    if sim.ndim != 2 or sim.shape[1] != n:
        raise ValueError(f"similarity matrix must be square; got shape {sim.shape}")
    if not 1 <= n_groups <= n:
        raise ValueError(f"n_groups must be in [1, {n}]; got {n_groups}")
    if n_groups == 1:
        return [list(range(n))]
    if n > EXHAUSTIVE_MAX_K:
        if rng is None:
            raise ValueError(f"K={n} > {EXHAUSTIVE_MAX_K} uses a local search; pass rng")
        return _local_search(sim, n_groups, rng)
    best, best_score = None, -np.inf
    for groups in _set_partitions(n, n_groups):
        score = partition_score(sim, groups)
        if score > best_score + 1e-12:
            best, best_score = groups, score
    return best  # type: ignore[return-value]


def match_clusters(groups: Sequence[Sequence[int]], previous: Mapping[int, int], n_clusters: int) -> list[int]:
    """Persistent cluster id for each new group: maximise overlap with clients' previous clusters.

    ``previous`` maps client -> cluster id of last round (empty in round 1). Hungarian assignment.
    """
    from scipy.optimize import linear_sum_assignment

    overlap = np.zeros((len(groups), n_clusters))
    for g, members in enumerate(groups):
        for k in members:
            if k in previous:
                overlap[g, previous[k]] += 1
    rows, cols = linear_sum_assignment(-overlap)
    out = [0] * len(groups)
    for r, c in zip(rows, cols):
        out[r] = int(c)
    return out
