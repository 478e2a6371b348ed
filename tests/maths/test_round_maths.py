"""The round maths both engines call (``p2pfl.maths``, ``p2pfl.sim.cost.tx_time_s``): the tensor engine's arrays
give the event kernel's per-device values bit for bit."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch

from p2pfl.maths.clusters import choose_cluster, choose_clusters, clusters_from_assignment
from p2pfl.maths.consensus import MIN_COLS, consensus_distance
from p2pfl.maths.mixing import metropolis_edge_weights, metropolis_self_weights
from p2pfl.protocols.serverless.dsgd import live_metropolis_row, metropolis_weights
from p2pfl.sim.cost import tx_time_s
from p2pfl.tensor.graph import Adjacency


def test_the_fleets_metropolis_weights_are_each_devices_row_bit_for_bit() -> None:
    g = nx.gnp_random_graph(40, 0.15, seed=3)
    g.add_node(40)  # an isolated device keeps its model
    adj = Adjacency.from_graph(g)
    deg, src = adj.degree, adj.sources
    w = metropolis_edge_weights(deg[src], deg[adj.indices])
    w_self = metropolis_self_weights(src, w, adj.n)
    for i in range(adj.n):
        at = slice(adj.indptr[i], adj.indptr[i + 1])
        fleet = {**dict(zip(adj.indices[at].tolist(), w[at].tolist())), i: float(w_self[i])}
        row = metropolis_weights(g, i)
        assert list(row) == list(fleet) and all(row[j].hex() == fleet[j].hex() for j in row), i
    assert w_self[40] == 1.0
    dense = np.zeros((adj.n, adj.n))
    dense[src, adj.indices] = w
    dense[np.arange(adj.n), np.arange(adj.n)] = w_self
    assert np.array_equal(dense, dense.T) and np.allclose(dense.sum(axis=1), 1.0)  # symmetric, doubly stochastic


def test_a_live_row_puts_the_missing_mass_on_the_device() -> None:
    assert live_metropolis_row(0, 3, {2: 1, 1: 3}) == {1: 0.25, 2: 0.25, 0: 0.5}
    assert live_metropolis_row(5, 0, {}) == {5: 1.0}


@pytest.mark.parametrize("block_bytes", [1 << 28, 1])
def test_consensus_distance_of_a_table_is_the_stacked_formula_bit_for_bit(block_bytes: int) -> None:
    """A table's rows (the tensor engine's) in place, in column blocks as narrow as ``MIN_COLS`` where the fleet
    is large: the bits of the formula over the stacked models, as the kernel's states give them."""
    table = torch.randn(300, 3 * MIN_COLS + 5, generator=torch.Generator().manual_seed(2)) * 0.1 + 0.5
    x = table.double()
    expected = float(((x - x.mean(dim=0)) ** 2).sum(dim=1).mean())
    assert consensus_distance(table, block_bytes=block_bytes).hex() == expected.hex()
    assert consensus_distance([{"w": r.clone()} for r in table]).hex() == expected.hex()


def test_clusters_from_an_assignment_in_cluster_id_order() -> None:
    assert clusters_from_assignment([1, 1, 0, 2], 4) == [[2], [0, 1], [3]]
    assert clusters_from_assignment(np.array([], dtype=np.int64), 2) == []
    rng = np.random.default_rng(0)
    a = rng.integers(0, 5, 200)
    by_hand = [[d for d, c in enumerate(a.tolist()) if c == q] for q in range(6)]
    assert clusters_from_assignment(a, 6) == [g for g in by_hand if g]


def test_the_cluster_choice_is_the_lowest_loss_ties_to_the_lowest_id() -> None:
    losses = np.array([[0.5, 0.2, 0.2], [0.1, 0.3, 0.1], [3.0, 2.0, 1.0]])
    assert choose_clusters(losses).tolist() == [1, 0, 2]
    assert [choose_cluster(row.tolist()) for row in losses] == [1, 0, 2]


def test_the_transfer_time_of_an_array_is_each_links() -> None:
    bandwidth = np.array([1.0e6, 2.5e7, 1.0e9])
    assert tx_time_s(1000, bandwidth).tolist() == [tx_time_s(1000, float(b)) for b in bandwidth]
    assert tx_time_s(1000, 1.0e6) == 8.0e-3
