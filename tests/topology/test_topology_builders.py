"""Builder invariants: node/edge counts, connectivity, seeding, and argument errors."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pfl.errors import TopologyError
from p2pfl.topology.classic import complete, grid, k_regular, line, ring, star, torus
from p2pfl.topology.geometric import random_geometric
from p2pfl.topology.random_graphs import barabasi_albert, erdos_renyi, watts_strogatz


def edges(g: nx.Graph) -> list[tuple[int, int]]:
    return sorted(tuple(sorted(e)) for e in g.edges())


def assert_labelled(g: nx.Graph, n: int) -> None:
    assert list(g.nodes()) == list(range(n))
    assert nx.number_of_selfloops(g) == 0


# --- classic ---------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 4, 16])
def test_ring_has_n_edges_and_degree_two(n: int) -> None:
    g = ring(n, seed=0)
    assert_labelled(g, n)
    assert g.number_of_edges() == n
    assert {d for _, d in g.degree()} == {2}
    assert g.has_edge(n - 1, 0)


@pytest.mark.parametrize("n", [1, 2, 10])
def test_line_has_n_minus_1_edges(n: int) -> None:
    g = line(n, seed=0)
    assert_labelled(g, n)
    assert g.number_of_edges() == n - 1
    assert nx.is_connected(g)


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (1, 5), (3, 4), (4, 4)])
def test_grid_has_2rc_minus_r_minus_c_edges(rows: int, cols: int) -> None:
    g = grid(rows, cols, seed=0)
    assert_labelled(g, rows * cols)
    assert g.number_of_edges() == 2 * rows * cols - rows - cols
    assert nx.is_connected(g)


def test_grid_labels_row_major() -> None:
    g = grid(3, 4, seed=0)
    assert g.has_edge(0, 1) and g.has_edge(0, 4)
    assert not g.has_edge(3, 4)  # end of row 0 is not linked to start of row 1


@pytest.mark.parametrize(("rows", "cols"), [(3, 3), (4, 4), (3, 5)])
def test_torus_has_2rc_edges_and_degree_four(rows: int, cols: int) -> None:
    g = torus(rows, cols, seed=0)
    assert_labelled(g, rows * cols)
    assert g.number_of_edges() == 2 * rows * cols
    assert {d for _, d in g.degree()} == {4}


@pytest.mark.parametrize("n", [1, 2, 7])
def test_complete_has_n_choose_2_edges(n: int) -> None:
    g = complete(n, seed=0)
    assert_labelled(g, n)
    assert g.number_of_edges() == n * (n - 1) // 2


@pytest.mark.parametrize("n", [1, 2, 10])
def test_star_has_n_minus_1_edges_around_device_0(n: int) -> None:
    g = star(n, seed=0)
    assert_labelled(g, n)
    assert g.number_of_edges() == n - 1
    assert g.degree(0) == n - 1


@pytest.mark.parametrize(("n", "k"), [(10, 3), (16, 4), (7, 6)])
def test_k_regular_every_degree_is_k(n: int, k: int) -> None:
    g = k_regular(n, k, seed=3)
    assert_labelled(g, n)
    assert [d for _, d in g.degree()] == [k] * n
    assert g.number_of_edges() == n * k // 2
    assert nx.is_connected(g)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(4, 30), k=st.integers(3, 6), seed=st.integers(0, 2**32))
def test_k_regular_property(n: int, k: int, seed: int) -> None:
    if k >= n or (n * k) % 2:
        with pytest.raises(TopologyError):
            k_regular(n, k, seed=seed)
        return
    g = k_regular(n, k, seed=seed)
    assert [d for _, d in g.degree()] == [k] * n
    assert nx.is_connected(g)


# --- random kinds ----------------------------------------------------------


@pytest.mark.parametrize(("n", "m"), [(10, 1), (20, 2), (64, 3)])
def test_barabasi_albert_has_n_minus_m_times_m_edges(n: int, m: int) -> None:
    g = barabasi_albert(n, m, seed=1)
    assert_labelled(g, n)
    assert g.number_of_edges() == (n - m) * m
    assert nx.is_connected(g)


def test_watts_strogatz_keeps_nk_over_2_edges() -> None:
    g = watts_strogatz(32, 4, 0.2, seed=5)
    assert_labelled(g, 32)
    assert g.number_of_edges() == 32 * 4 // 2
    assert nx.is_connected(g)


def test_watts_strogatz_without_rewiring_is_ring_lattice() -> None:
    g = watts_strogatz(10, 4, 0.0, seed=5)
    assert edges(g) == sorted({tuple(sorted((i, (i + d) % 10))) for i in range(10) for d in (1, 2)})


def test_erdos_renyi_extremes() -> None:
    assert erdos_renyi(8, 1.0, seed=0).number_of_edges() == 28
    g = erdos_renyi(8, 0.0, seed=0, connected=False)
    assert_labelled(g, 8)
    assert g.number_of_edges() == 0


def test_erdos_renyi_retries_until_connected() -> None:
    # p = 0.15 on 20 devices is usually disconnected; the retries must still find a connected draw.
    assert not all(nx.is_connected(erdos_renyi(20, 0.15, seed=s, connected=False)) for s in range(10))
    for s in range(5):
        assert nx.is_connected(erdos_renyi(20, 0.15, seed=s))


def test_random_geometric_positions_in_unit_square_and_edges_within_radius() -> None:
    g = random_geometric(30, 0.3, seed=2)
    assert_labelled(g, 30)
    assert nx.is_connected(g)
    pos = nx.get_node_attributes(g, "pos")
    assert len(pos) == 30
    for x, y in pos.values():
        assert 0 <= x < 1 and 0 <= y < 1
    for u in range(30):
        for v in range(u + 1, 30):
            close = ((pos[u][0] - pos[v][0]) ** 2 + (pos[u][1] - pos[v][1]) ** 2) ** 0.5 <= 0.3
            assert g.has_edge(u, v) == close


def test_random_geometric_pinned_for_seed_0() -> None:
    # Our own numpy-only construction, so the exact draw is stable across networkx versions.
    g = random_geometric(16, 0.4, seed=0)
    assert g.number_of_edges() == 34
    assert edges(g)[:5] == [(0, 6), (0, 13), (1, 2), (1, 3), (1, 4)]
    assert g.nodes[0]["pos"] == pytest.approx((0.73756377, 0.10931013))


def test_random_geometric_strips_is_the_same_graph_numbered_left_to_right() -> None:
    from p2pfl.data.splitters import assign_clusters

    a = random_geometric(40, 0.3, seed=3)
    b = random_geometric(40, 0.3, seed=3, placement="strips")
    pa, pb = nx.get_node_attributes(a, "pos"), nx.get_node_attributes(b, "pos")
    xs = [pb[i][0] for i in range(40)]
    assert xs == sorted(xs) and sorted(pa.values()) == sorted(pb.values())
    relabel = {i: sorted(pa, key=lambda j: pa[j][0]).index(i) for i in pa}  # a's id -> b's id
    assert edges(nx.relabel_nodes(a, relabel)) == edges(b)
    # the data partitions' blocks of ids are disjoint strips: group k lies left of group k + 1
    group = assign_clusters(40, 4)
    for k in range(3):
        right = max(pb[i][0] for i in range(40) if group[i] == k)
        assert right < min(pb[i][0] for i in range(40) if group[i] == k + 1)
    with pytest.raises(TopologyError, match="placement must be 'scattered' or 'strips'"):
        random_geometric(10, 0.5, seed=0, placement="rings")


RANDOM = [
    lambda s: k_regular(12, 3, seed=s),
    lambda s: erdos_renyi(12, 0.4, seed=s),
    lambda s: watts_strogatz(12, 4, 0.3, seed=s),
    lambda s: barabasi_albert(12, 2, seed=s),
    lambda s: random_geometric(12, 0.5, seed=s),
]


@pytest.mark.parametrize("make", RANDOM, ids=["k_regular", "erdos_renyi", "watts_strogatz", "barabasi_albert", "random_geometric"])
def test_same_seed_same_graph_different_seed_different_graph(make) -> None:
    a, b, c = make(7), make(7), make(8)
    assert edges(a) == edges(b)
    assert dict(a.nodes(data=True)) == dict(b.nodes(data=True))
    assert edges(a) != edges(c)


def test_unreachable_connectivity_is_refused_after_tries() -> None:
    with pytest.raises(TopologyError, match=r"disconnected \(\d+ components\) in all 3 tries; set allow_disconnected: true"):
        random_geometric(20, 0.05, seed=0, tries=3)
    g = random_geometric(20, 0.05, seed=0, connected=False)
    assert g.number_of_nodes() == 20
    assert not nx.is_connected(g)


# --- argument errors -------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ring(2, seed=0), r"ring needs n to be an integer >= 3; got n=2"),
        (lambda: line(0, seed=0), r"line needs n to be an integer >= 1; got n=0"),
        (lambda: grid(0, 3, seed=0), r"grid needs rows to be an integer >= 1; got rows=0"),
        (lambda: torus(4, 2, seed=0), r"torus needs cols to be an integer >= 3; got cols=2"),
        (lambda: complete(0, seed=0), r"complete needs n"),
        (lambda: star(-1, seed=0), r"star needs n to be an integer >= 1; got n=-1"),
        (lambda: k_regular(4, 5, seed=0), r"k must be < n; got k=5, n=4"),
        (lambda: k_regular(5, 3, seed=0), r"n \* k must be even; got n=5, k=3"),
        (lambda: erdos_renyi(5, 1.5, seed=0), r"erdos_renyi needs 0 <= p <= 1; got p=1.5"),
        (lambda: watts_strogatz(10, 3, 0.1, seed=0), r"k to be an even integer >= 2; got k=3"),
        (lambda: watts_strogatz(6, 6, 0.1, seed=0), r"k must be < n; got k=6, n=6"),
        (lambda: barabasi_albert(3, 3, seed=0), r"m must be < n; got m=3, n=3"),
        (lambda: barabasi_albert(5, 0, seed=0), r"m to be an integer >= 1; got m=0"),
        (lambda: random_geometric(5, 0.0, seed=0), r"radius > 0; got radius=0.0"),
        (lambda: random_geometric(5, 0.5, seed=0, tries=0), r"tries must be >= 1; got tries=0"),
    ],
)
def test_bad_arguments_raise_topology_error_stating_the_rule(call, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        call()
