"""Compatibility criterion and federation discovery (RND clustered-FL paper, Secs. IV-V)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pfl.clustering import (
    adjusted_rand_index,
    compatibility_clusters,
    compatibility_graph,
    compatible,
    label_propagation_clusters,
)
from p2pfl.clustering.compatibility import compatible_row
from p2pfl.seeding import stream


def planted(sizes: list[int], *, seed: int, within: float = 0.05, across: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """Block novelty matrix: u_ii ~ 1-2, within-block u_ij within +-within of u_ii, across >= across * u_ii."""
    rng = stream(seed, "test.planted")
    truth = np.repeat(np.arange(len(sizes)), sizes)
    n = truth.size
    own = rng.uniform(1.0, 2.0, size=n)
    U = own[:, None] * np.where(truth[:, None] == truth[None, :],
                                1.0 + rng.uniform(-within, within, size=(n, n)),
                                across + rng.uniform(0.0, 1.0, size=(n, n)))
    np.fill_diagonal(U, own)
    perm = rng.permutation(n)  # hide the block order
    return U[np.ix_(perm, perm)], truth[perm]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("sizes", [[3, 3, 3, 3], [5, 2, 7], [1, 4, 4], [10]])
def test_planted_partition_is_recovered_exactly(sizes, seed):
    U, truth = planted(sizes, seed=seed)
    clusters = compatibility_clusters(U, 0.3)
    assert adjusted_rand_index(truth, clusters) == 1.0
    assert sorted(len(f) for f in clusters) == sorted(sizes)
    assert clusters == sorted(clusters, key=lambda f: f[0]) and all(f == sorted(f) for f in clusters)


def test_band_edges_inclusive():
    U = np.array([[4.0, 5.0, 3.0, 5.01, 2.99], [1.0] * 5, [1.0] * 5, [1.0] * 5, [1.0] * 5])
    C = compatible(U, 0.25)
    # row 0: band [3, 5] around u_00 = 4 is inclusive; 5.01 and 2.99 are out
    assert C[0].tolist() == [True, True, True, False, False]
    assert compatible(U, 0.0)[0].tolist() == [True, False, False, False, False]
    assert C.diagonal().all()


def test_asymmetric_broad_predictor_does_not_glue_clusters():
    """Device 6's predictor (trained broadly) fits everyone's data, but no one's predictor fits 6's data."""
    U, truth = planted([3, 3], seed=0)
    order = np.argsort(truth, kind="stable")
    U = U[np.ix_(order, order)]
    n = 7
    V = np.full((n, n), 5.0)
    V[:6, :6] = U
    V[:6, 6] = np.diag(U)  # column 6: predictor 6 is as good as the owner's on every dataset
    V[6, 6] = 1.0
    C = compatible(V, 0.3)
    assert C[:6, 6].all() and not C[6, :6].any()
    assert not compatibility_graph(V, 0.3)[6].any()
    assert compatibility_clusters(V, 0.3) == [[0, 1, 2], [3, 4, 5], [6]]
    # an OR rule would have made one federation of all seven
    assert nx.number_connected_components(nx.from_numpy_array((C | C.T).astype(int))) == 1


def test_majority_refinement_splits_off_a_bridge():
    """Two triangles joined by one compatible pair: components merge them, the majority rule separates."""
    n = 6
    U = np.full((n, n), 10.0)
    np.fill_diagonal(U, 1.0)
    for block in ([0, 1, 2], [3, 4, 5]):
        U[np.ix_(block, block)] = 1.0
    U[2, 3] = U[3, 2] = 1.1  # the bridge
    assert nx.is_connected(nx.from_numpy_array(compatibility_graph(U, 0.3).astype(int)))
    assert compatibility_clusters(U, 0.3) == [[0, 1, 2], [3, 4, 5]]


def test_chain_is_cut_into_majority_groups():
    """A path 0-1-2-3-4 (each only compatible with its neighbours) is not one federation."""
    n = 5
    U = np.full((n, n), 10.0)
    np.fill_diagonal(U, 1.0)
    for i in range(n - 1):
        U[i, i + 1] = U[i + 1, i] = 1.0
    clusters = compatibility_clusters(U, 0.3)
    assert clusters == [[0, 1], [2, 3], [4]]
    A = compatibility_graph(U, 0.3)
    for f in clusters:  # every member is compatible with a strict majority of its fellows
        for m in f:
            others = [j for j in f if j != m]
            assert not others or 2 * A[m, others].sum() > len(others)


def test_unscored_pairs_are_unknown_not_incompatible():
    """Ring of 8, scores only within 1 hop: two groups of 4 consecutive devices on the ring."""
    U_full, _ = planted([4, 4], seed=3, within=0.05)
    order = np.argsort(_, kind="stable")
    U_full = U_full[np.ix_(order, order)]
    n = 8
    ring = nx.cycle_graph(n)
    scored = np.eye(n, dtype=bool)
    for a, b in ring.edges:
        scored[a, b] = scored[b, a] = True
    U = np.where(scored, U_full, np.nan)
    assert compatibility_clusters(U, 0.3) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert not compatible(U, 0.3)[0, 2]  # unscored -> no edge
    # the majority is over scored pairs: member 0 has 1 scored fellow (1) in its group, compatible
    clusters, iters = label_propagation_clusters(compatibility_graph(U, 0.3))
    assert clusters == [[0, 1, 2, 3], [4, 5, 6, 7]] and iters == 4


@pytest.mark.parametrize("alpha", [1.5, -0.1, 1.0, True, "0.3", float("nan")])
def test_alpha_validation(alpha):
    with pytest.raises(ValueError, match=r"The 'alpha' parameter must be in \[0, 1\); got .* instead"):
        compatibility_clusters(np.eye(2) + 1, alpha)


def test_gap_criterion_is_one_sided_and_absolute_where_the_band_is_two_sided_and_relative():
    # devices 0, 1: each explains the other's data better than its own (s_ij < s_ii): the band's lower edge
    # rejects the pair, the one-sided gap accepts it. Devices 2, 3: large scores, in-group 20% above the own
    # score: inside the relative band (alpha 0.3), but 2.0 above it in absolute terms, outside gap 0.5.
    U = np.array([[1.0, 0.5, 20.0, 20.0],
                  [0.6, 1.0, 20.0, 20.0],
                  [20.0, 20.0, 10.0, 12.0],
                  [20.0, 20.0, 12.0, 10.0]])
    assert compatibility_clusters(U, 0.3) == [[0], [1], [2, 3]]
    assert compatibility_clusters(U, 0.5, criterion="gap") == [[0, 1], [2], [3]]
    assert compatible(U, 0.5, criterion="gap").tolist() == [[True, True, False, False], [True, True, False, False],
                                                            [False, False, True, False], [False, False, False, True]]
    assert compatible(np.array([[1.0, 1.5], [2.0, 1.0]]), 0.5, criterion="gap")[0, 1]  # the edge is inclusive
    assert compatible(U, 2.0, criterion="gap")[2, 3] and not compatible(U, 1.99, criterion="gap")[2, 3]
    for criterion, threshold in (("band", 0.3), ("gap", 0.5)):  # a device's own row gives its row of verdicts
        for i in range(4):
            assert np.array_equal(compatible_row(U[i], i, threshold, criterion=criterion),
                                  compatible(U, threshold, criterion=criterion)[i])
    V = U.copy()
    V[0, 2] = np.nan
    assert not compatible(V, 100.0, criterion="gap")[0, 2]  # unscored -> never compatible


@pytest.mark.parametrize("criterion,alpha,message", [
    ("gap", -0.1, r"The 'alpha' parameter \(the gap\) must be a finite float >= 0; got -0.1 instead"),
    ("gap", float("inf"), r"The 'alpha' parameter \(the gap\) must be a finite float >= 0"),
    ("gap", float("nan"), r"The 'alpha' parameter \(the gap\) must be a finite float >= 0"),
    ("ratio", 0.3, r"The 'criterion' parameter must be one of band, gap; got 'ratio' instead"),
])
def test_criterion_validation(criterion, alpha, message):
    with pytest.raises(ValueError, match=message):
        compatibility_clusters(np.eye(2) + 1, alpha, criterion=criterion)
    assert compatibility_clusters(np.eye(2) + 1, 1.5, criterion="gap") == [[0, 1]]  # a gap may exceed 1


def test_novelty_matrix_validation():
    with pytest.raises(ValueError, match="square"):
        compatibility_clusters(np.ones((2, 3)), 0.3)
    with pytest.raises(ValueError, match="diagonal"):
        compatibility_clusters(np.array([[np.nan, 1.0], [1.0, 1.0]]), 0.3)
    with pytest.raises(ValueError, match=">= 0"):
        compatibility_clusters(np.array([[1.0, -1.0], [1.0, 1.0]]), 0.3)
    with pytest.raises(ValueError, match="inf"):
        compatibility_clusters(np.array([[1.0, np.inf], [1.0, 1.0]]), 0.3)
    assert compatibility_clusters(np.zeros((0, 0)), 0.3) == []
    assert compatibility_clusters(np.array([[2.0]]), 0.3) == [[0]]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 14), p=st.floats(0.0, 0.6), seed=st.integers(0, 10_000))
def test_label_propagation_equals_connected_components(n, p, seed):
    g = nx.gnp_random_graph(n, p, seed=seed)
    A = nx.to_numpy_array(g, nodelist=range(n)).astype(bool)
    clusters, iterations = label_propagation_clusters(A)
    expected = sorted((sorted(c) for c in nx.connected_components(g)), key=lambda f: f[0])
    assert clusters == expected
    diameter = max(nx.diameter(g.subgraph(c)) for c in nx.connected_components(g))
    assert 1 <= iterations <= diameter + 1


def test_label_propagation_counts_rounds_exactly_and_uses_mutual_edges():
    path = nx.to_numpy_array(nx.path_graph(6)).astype(bool)
    assert label_propagation_clusters(path) == ([[0, 1, 2, 3, 4, 5]], 6)  # 5 hops from node 0, +1 quiet round
    one_way = np.zeros((3, 3), dtype=bool)
    one_way[0, 1] = True  # 0 trusts 1 but not the reverse: no edge
    assert label_propagation_clusters(one_way) == ([[0], [1], [2]], 1)
    with pytest.warns(RuntimeWarning, match="max_iter=2"):
        clusters, it = label_propagation_clusters(path, max_iter=2)
    assert it == 2 and clusters == [[0, 1, 2], [3], [4], [5]]
    with pytest.raises(ValueError, match="'max_iter' parameter must be an int >= 1; got 0"):
        label_propagation_clusters(path, max_iter=0)
