"""CUA, compatible update aggregation (FedDRMan Eq. 10-11): p2pfl.clustering.cua."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from p2pfl.clustering.cua import cua_partition, match_clusters, partition_score, update_similarity


# --- compatible update aggregation (Eq. 10-11) ----------------------------------------------
def _planted_updates(groups: list[list[int]], dim: int = 50, noise: float = 0.3, seed: int = 0):
    rng = np.random.default_rng(seed)
    init = {"temporal.w": torch.zeros(dim, dtype=torch.float64), "other": torch.zeros(3, dtype=torch.float64)}
    n = sum(len(g) for g in groups)
    states = [None] * n
    for g in groups:
        direction = rng.standard_normal(dim)
        for k in g:
            v = direction + noise * rng.standard_normal(dim)
            states[k] = {"temporal.w": torch.tensor(v), "other": torch.tensor(rng.standard_normal(3))}
    return states, init


@pytest.mark.parametrize("planted", [[[0, 2], [1, 3]], [[0, 1, 4], [2, 3, 5]], [[0, 3], [1, 4], [2, 5]], [[0], [1, 2, 3]]])
def test_cua_finds_the_planted_partition(planted):
    states, init = _planted_updates(planted, seed=len(planted))
    sim = update_similarity(states, init, ["temporal.w"])
    found = cua_partition(sim, len(planted))
    assert sorted(map(sorted, found)) == sorted(map(sorted, planted))


def test_cua_does_not_split_off_a_singleton_when_all_updates_are_alike():
    # within-suite 0.90, across suites 0.85 (accumulated updates share a common component)
    sim = np.full((4, 4), 0.85)
    sim[0, 1] = sim[1, 0] = sim[2, 3] = sim[3, 2] = 0.90
    np.fill_diagonal(sim, 1.0)
    assert cua_partition(sim, 2) == [[0, 1], [2, 3]]
    assert partition_score(sim, [[0, 1], [2, 3]]) == pytest.approx(0.05)
    # Eq. 11's 1/C counts the singleton's empty intra term as 0
    intra, inter = (0.90 + 0.85 + 0.85) / 3 / 2, (0.85 + 0.85 + 0.90) / 3
    assert partition_score(sim, [[0, 1, 2], [3]]) == pytest.approx(intra - inter)


@pytest.mark.parametrize("pairs", [
    # S01, S23 (within suites), S02, S03, S12, S13: FedDRMan object+goal, round 1, Omega = temporal, seeds 0-2
    (0.692, 0.495, 0.517, 0.304, 0.581, 0.282),
    (0.605, 0.541, 0.473, 0.483, 0.645, 0.614),
    (0.635, 0.476, 0.556, 0.407, 0.621, 0.486),
])
def test_cua_separates_the_suites_on_measured_round_one_updates(pairs):
    """The similarities CUA saw in round 1 of object+goal (2 clients per suite): the old reading (intra mean
    over non-singleton groups only) chose a 3-1 split in every seed and kept it; Eq. 11's 1/C picks the suites."""
    s01, s23, s02, s03, s12, s13 = pairs
    sim = np.array([[1, s01, s02, s03], [s01, 1, s12, s13], [s02, s12, 1, s23], [s03, s13, s23, 1]])
    assert cua_partition(sim, 2) == [[0, 1], [2, 3]]


def test_cua_local_search_beyond_exhaustive_range_finds_planted_partition():
    planted = [list(range(0, 12, 3)), list(range(1, 12, 3)), list(range(2, 12, 3))]
    states, init = _planted_updates(planted, seed=9)
    sim = update_similarity(states, init, ["temporal.w"])
    found = cua_partition(sim, 3, rng=np.random.default_rng(0))
    assert sorted(map(sorted, found)) == sorted(map(sorted, planted))


def test_update_similarity_uses_only_omega_and_partition_score_prefers_truth():
    states, init = _planted_updates([[0, 1], [2, 3]])
    s = update_similarity(states, init, ["temporal.w"])
    assert s.shape == (4, 4) and np.allclose(np.diag(s), 1.0)
    assert partition_score(s, [[0, 1], [2, 3]]) > partition_score(s, [[0, 2], [1, 3]])
    s_other = update_similarity(states, init, ["other"])
    assert not np.allclose(s, s_other)


def test_match_clusters_keeps_persistent_ids():
    assert match_clusters([[0, 1], [2, 3]], {0: 1, 1: 1, 2: 0, 3: 0}, 2) == [1, 0]
    assert sorted(match_clusters([[0], [1]], {}, 2)) == [0, 1]
