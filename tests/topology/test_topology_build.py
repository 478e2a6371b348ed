"""build_topology: links, overrides, servers, connectivity, seeding, file kinds."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from p2pfl.errors import ConfigError, TopologyError
from p2pfl.topology import (
    BUILDERS,
    Link,
    ServerNode,
    TopologySpec,
    build_topology,
)
from p2pfl.topology.schema import KIND_PARAMS


def spec(**fields) -> TopologySpec:
    return TopologySpec.model_validate(fields)


def edges(g: nx.Graph) -> list[tuple[int, int]]:
    return sorted(tuple(sorted(e)) for e in g.edges())


def test_placement_is_for_random_geometric_only() -> None:
    g = build_topology(spec(kind="random_geometric", n=20, radius=0.5, placement="strips"), seed=1)
    xs = [g.graph.nodes[i]["pos"][0] for i in range(20)]
    assert xs == sorted(xs)
    with pytest.raises(ValueError, match="'placement' is only used by kind 'random_geometric'; remove it for kind 'ring'"):
        spec(kind="ring", n=6, placement="strips")


def test_builders_describes_every_kind() -> None:
    assert set(BUILDERS) == set(KIND_PARAMS)
    assert all(isinstance(text, str) and text for text in BUILDERS.values())


@pytest.mark.parametrize(
    ("fields", "n", "m"),
    [
        ({"kind": "ring", "n": 6}, 6, 6),
        ({"kind": "line", "n": 6}, 6, 5),
        ({"kind": "grid", "rows": 2, "cols": 3}, 6, 7),
        ({"kind": "torus", "rows": 3, "cols": 4, "n": 12}, 12, 24),
        ({"kind": "complete", "n": 6}, 6, 15),
        ({"kind": "star", "n": 6}, 6, 5),
        ({"kind": "k_regular", "n": 8, "k": 3}, 8, 12),
        ({"kind": "watts_strogatz", "n": 8, "k": 2, "p": 0.2}, 8, 8),
        ({"kind": "barabasi_albert", "n": 8, "m": 2}, 8, 12),
    ],
)
def test_build_counts_devices_and_links(fields: dict, n: int, m: int) -> None:
    topo = build_topology(spec(**fields), seed=0)
    assert topo.n_devices == n
    assert topo.graph.number_of_edges() == m
    assert list(topo.graph.nodes()) == list(range(n))
    assert nx.is_connected(topo.graph)
    assert topo.servers == ()


def test_default_link_on_every_edge() -> None:
    topo = build_topology(spec(kind="ring", n=5), seed=0)
    links = [d["link"] for _, _, d in topo.graph.edges(data=True)]
    assert links == [Link(latency_s=0.01, bandwidth_bps=1e8, loss=0.0)] * 5


def test_override_changes_only_its_edge_and_keeps_unset_fields() -> None:
    s = spec(
        kind="ring", n=5,
        link={"latency_s": 0.002, "bandwidth_bps": 1e9, "loss": 0.01},
        edges=[{"u": 3, "v": 2, "latency_s": 0.5}, {"u": 0, "v": 4, "bandwidth_bps": 1e6, "loss": 0.1}],
    )
    g = build_topology(s, seed=0).graph
    assert g.edges[2, 3]["link"] == Link(latency_s=0.5, bandwidth_bps=1e9, loss=0.01)
    assert g.edges[4, 0]["link"] == Link(latency_s=0.002, bandwidth_bps=1e6, loss=0.1)
    default = Link(latency_s=0.002, bandwidth_bps=1e9, loss=0.01)
    assert [g.edges[e]["link"] for e in [(0, 1), (1, 2), (3, 4)]] == [default] * 3


def test_override_of_missing_edge_is_a_config_error() -> None:
    s = spec(kind="ring", n=5, edges=[{"u": 0, "v": 1}, {"u": 0, "v": 2, "latency_s": 1.0}])
    with pytest.raises(ConfigError, match=r"^edges\[1\]: \(0, 2\) is not an edge of the topology; "):
        build_topology(s, seed=0)


def test_duplicate_override_is_a_config_error() -> None:
    s = spec(kind="ring", n=5, edges=[{"u": 0, "v": 1}, {"u": 1, "v": 0, "loss": 0.5}])
    with pytest.raises(ConfigError, match=r"edges\[1\]: \(1, 0\) is already overridden by edges\[0\]"):
        build_topology(s, seed=0)


def test_servers_attach_all_or_listed_devices() -> None:
    s = spec(
        kind="grid", rows=2, cols=2,
        servers=[
            {"name": "fedavg", "link": {"latency_s": 0.02, "bandwidth_bps": 5e7}},
            {"name": "edge", "attach": [3, 1, 1]},
        ],
    )
    topo = build_topology(s, seed=0)
    assert topo.servers == (
        ServerNode(name="fedavg", attached=(0, 1, 2, 3), link=Link(0.02, 5e7, 0.0)),
        ServerNode(name="edge", attached=(1, 3), link=Link(0.01, 1e8, 0.0)),
    )
    assert topo.n_devices == 4  # servers are not devices


def test_server_attached_to_missing_device_is_a_config_error() -> None:
    s = spec(kind="ring", n=4, servers=[{"attach": [0, 4]}])
    with pytest.raises(ConfigError, match=r"servers\[0\]\.attach: device 4 does not exist; device ids are 0\.\.3"):
        build_topology(s, seed=0)


def test_disconnected_graph_refused_then_accepted_with_allow_disconnected() -> None:
    fields = {"kind": "random_geometric", "n": 20, "radius": 0.05, "tries": 5}
    with pytest.raises(TopologyError, match=r"components\) in all 5 tries; set allow_disconnected: true or change the parameters"):
        build_topology(spec(**fields), seed=0)
    topo = build_topology(spec(**fields, allow_disconnected=True), seed=0)
    assert topo.n_devices == 20
    assert nx.number_connected_components(topo.graph) > 1


def test_disconnected_file_graph_refused_with_component_count(tmp_path: Path) -> None:
    (tmp_path / "e.txt").write_text("0 1\n2 3\n4 5\n")
    s = spec(kind="edge_list", path="e.txt")
    with pytest.raises(TopologyError, match=r"edge_list topology is disconnected \(3 components\); set allow_disconnected: true"):
        build_topology(s, seed=0, base_dir=tmp_path)
    topo = build_topology(s.model_copy(update={"allow_disconnected": True}), seed=0, base_dir=tmp_path)
    assert topo.graph.number_of_edges() == 3


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "k_regular", "n": 12, "k": 3},
        {"kind": "erdos_renyi", "n": 12, "p": 0.4},
        {"kind": "watts_strogatz", "n": 12, "k": 4, "p": 0.3},
        {"kind": "barabasi_albert", "n": 12, "m": 2},
        {"kind": "random_geometric", "n": 12, "radius": 0.5},
    ],
    ids=lambda f: f["kind"],
)
def test_build_is_reproducible_per_seed(fields: dict) -> None:
    a, b, c = (build_topology(spec(**fields), seed=s).graph for s in (11, 11, 12))
    assert edges(a) == edges(b)
    assert dict(a.nodes(data=True)) == dict(b.nodes(data=True))
    assert edges(a) != edges(c)


def test_spec_seed_pins_the_graph_across_run_seeds() -> None:
    pinned = spec(kind="random_geometric", n=12, radius=0.5, seed=4)
    free = spec(kind="random_geometric", n=12, radius=0.5)
    assert edges(build_topology(pinned, seed=0).graph) == edges(build_topology(pinned, seed=99).graph)
    assert edges(build_topology(pinned, seed=99).graph) == edges(build_topology(free, seed=4).graph)


def test_built_graphs_are_fresh() -> None:
    s = spec(kind="ring", n=4)
    a, b = build_topology(s, seed=0), build_topology(s, seed=0)
    a.graph.remove_edge(0, 1)
    assert b.graph.has_edge(0, 1)


# --- file kinds ------------------------------------------------------------


def test_edge_list_relabels_in_sorted_label_order(tmp_path: Path) -> None:
    (tmp_path / "e.txt").write_text("# comment\n10 2\n2 7  # trailing comment\n\n7 10\n10 30\n")
    g = build_topology(spec(kind="edge_list", path=str(tmp_path / "e.txt")), seed=0).graph
    # labels 2, 7, 10, 30 -> 0, 1, 2, 3 (numeric order, not string order)
    assert list(g.nodes()) == [0, 1, 2, 3]
    assert edges(g) == [(0, 1), (0, 2), (1, 2), (2, 3)]


def test_edge_list_bad_line_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "e.txt").write_text("0 1\n1 2 3\n")
    with pytest.raises(TopologyError, match=r"e\.txt:2: expected two node labels 'u v'; got '1 2 3'"):
        build_topology(spec(kind="edge_list", path="e.txt"), seed=0, base_dir=tmp_path)


def test_edge_list_self_loop_refused(tmp_path: Path) -> None:
    (tmp_path / "e.txt").write_text("0 1\n1 1\n")
    with pytest.raises(TopologyError, match="self-loops are not allowed"):
        build_topology(spec(kind="edge_list", path="e.txt"), seed=0, base_dir=tmp_path)


def test_missing_edge_list_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"topology file not found: .*nope\.txt; check the path"):
        build_topology(spec(kind="edge_list", path="nope.txt"), seed=0, base_dir=tmp_path)


def test_graphml_relabels_natural_order_and_folds_direction(tmp_path: Path) -> None:
    g0 = nx.DiGraph()
    g0.add_edges_from([("n10", "n2"), ("n2", "n10"), ("n2", "n1"), ("n1", "n0")])
    g0.add_node("n3")
    g0.add_edge("n3", "n0")
    nx.write_graphml(g0, tmp_path / "g.graphml")
    g = build_topology(spec(kind="graphml", path="g.graphml"), seed=0, base_dir=tmp_path).graph
    # n0, n1, n2, n3, n10 -> 0..4
    assert list(g.nodes()) == [0, 1, 2, 3, 4]
    assert edges(g) == [(0, 1), (0, 3), (1, 2), (2, 4)]


def test_unreadable_graphml_is_a_topology_error(tmp_path: Path) -> None:
    (tmp_path / "g.graphml").write_text("<graphml><oops")
    with pytest.raises(TopologyError, match=r"g\.graphml: not a readable GraphML file"):
        build_topology(spec(kind="graphml", path="g.graphml"), seed=0, base_dir=tmp_path)
