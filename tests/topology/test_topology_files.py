"""Topology YAML files: the shipped examples, loading errors, and schema errors."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from p2pfl.errors import ConfigError
from p2pfl.topology import LinkSpec, TopologySpec, build_topology, load_topology_file
from p2pfl.validation import parse_model

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
SHIPPED = sorted(TOPOLOGIES.glob("*.yaml"))


def test_at_least_the_documented_examples_are_shipped() -> None:
    names = {p.name for p in SHIPPED}
    expected = {
        "ring16.yaml", "torus4x4.yaml", "neighbourhood16.yaml", "neighbourhood12.yaml",
        "smallworld32.yaml", "scalefree64.yaml", "star_server10.yaml", "fedavg_server16.yaml",
        "from_edgelist.yaml",
    }
    assert expected <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
@pytest.mark.parametrize("seed", [0, 1])
def test_every_shipped_topology_loads_and_builds_connected(path: Path, seed: int) -> None:
    assert path.read_text().startswith("#"), "each file starts with a comment line"
    spec = load_topology_file(path)
    topo = build_topology(spec, seed=seed)
    assert topo.n_devices >= 2
    assert nx.is_connected(topo.graph)
    assert list(topo.graph.nodes()) == list(range(topo.n_devices))
    if spec.n_devices is not None:
        assert topo.n_devices == spec.n_devices


def test_shipped_numbers() -> None:
    def build(name: str):
        return build_topology(load_topology_file(TOPOLOGIES / name), seed=0)

    assert build("ring16.yaml").graph.number_of_edges() == 16
    assert build("torus4x4.yaml").graph.number_of_edges() == 32
    assert build("scalefree64.yaml").graph.number_of_edges() == (64 - 2) * 2
    assert build("smallworld32.yaml").graph.number_of_edges() == 64
    star = build("star_server10.yaml")
    assert star.n_devices == 10
    (server,) = star.servers
    assert server.attached == tuple(range(10))
    assert (server.link.latency_s, server.link.bandwidth_bps) == (0.02, 5e7)
    fedavg = build("fedavg_server16.yaml")
    assert fedavg.n_devices == 16 and fedavg.servers[0].attached == tuple(range(16))
    edge_list = build("from_edgelist.yaml")
    assert (edge_list.n_devices, edge_list.graph.number_of_edges()) == (7, 8)
    assert edge_list.graph.edges[2, 3]["link"].latency_s == 0.1
    assert edge_list.graph.edges[0, 1]["link"].latency_s == 0.02


def test_neighbourhood16_has_slow_links_for_any_run_seed() -> None:
    spec = load_topology_file(TOPOLOGIES / "neighbourhood16.yaml")
    assert len(spec.edges) >= 2
    for seed in (0, 7, 123):
        g = build_topology(spec, seed=seed).graph
        slow = [g.edges[o.u, o.v]["link"] for o in spec.edges]
        assert all(link.latency_s > spec.link.latency_s for link in slow)
        assert all("pos" in d for _, d in g.nodes(data=True))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_dumped_spec_with_defaults_filled_reloads_equal(path: Path) -> None:
    spec = load_topology_file(path)
    assert TopologySpec.model_validate(spec.model_dump()) == spec


def test_relative_path_resolved_against_yaml_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sub = tmp_path / "topos"
    sub.mkdir()
    (sub / "e.txt").write_text("a b\nb c\n")
    (sub / "t.yaml").write_text("# test\nkind: edge_list\npath: e.txt\n")
    monkeypatch.chdir(tmp_path)  # the working directory must not matter
    spec = load_topology_file("topos/t.yaml")
    assert Path(spec.path) == (sub / "e.txt").resolve()
    assert build_topology(spec, seed=0).graph.number_of_edges() == 2


# --- loader errors ---------------------------------------------------------


def test_missing_yaml_file_names_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^.*missing\.yaml: file not found; check the path$"):
        load_topology_file(tmp_path / "missing.yaml")


def test_yaml_syntax_error_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kind: ring\nn: [16\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: invalid YAML at line \d+, column \d+: .*; fix the syntax") as info:
        load_topology_file(path)
    assert "\n" not in str(info.value)


def test_yaml_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- ring\n")
    with pytest.raises(ConfigError, match=r"expected a mapping of topology fields .*; got list"):
        load_topology_file(path)


def test_unknown_key_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("kind: ring\nn: 8\nlink:\n  latency: 0.1\n")
    with pytest.raises(ConfigError, match=r"t\.yaml: unknown field 'link\.latency'"):
        load_topology_file(path)


def test_bad_range_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("kind: ring\nn: 8\nedges:\n  - {u: 0, v: 1, loss: 1.0}\n")
    with pytest.raises(ConfigError, match=r"field 'edges\[0\]\.loss': .*less than 1"):
        load_topology_file(path)


# --- schema rules ----------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "k_regular", "n": 8}, r"kind 'k_regular' needs 'k'"),
        ({"kind": "watts_strogatz", "n": 8, "k": 2}, r"kind 'watts_strogatz' needs 'p'"),
        ({"kind": "grid", "rows": 3}, r"kind 'grid' needs 'cols'"),
        ({"kind": "ring"}, r"kind 'ring' needs 'n'"),
        ({"kind": "edge_list"}, r"kind 'edge_list' needs 'path'"),
        ({"kind": "ring", "n": 8, "radius": 0.3}, r"'radius' is only used by kind 'random_geometric'; remove it for kind 'ring'"),
        ({"kind": "erdos_renyi", "n": 8, "p": 0.5, "k": 2}, r"'k' is only used by kinds 'k_regular', 'watts_strogatz'"),
        ({"kind": "ring", "n": 8, "tries": 5}, r"'tries' is only used by random kinds"),
        ({"kind": "grid", "rows": 2, "cols": 2, "seed": 3}, r"'seed' is only used by random kinds"),
        ({"kind": "torus", "rows": 3, "cols": 3, "n": 10}, r"needs n == rows \* cols; got n=10, rows=3, cols=3"),
        ({"kind": "edge_list", "path": "e.txt", "n": 4}, r"kind 'edge_list' takes 'n' from the file"),
        ({"kind": "ring", "n": 4, "servers": [{}, {}]}, r"server names must be unique; got 'server' twice"),
        ({"kind": "hypercube", "n": 8}, r"field 'kind'"),
        ({"kind": "ring", "n": 0}, r"field 'n': .*greater than or equal to 1"),
        ({"kind": "ring", "n": 4, "servers": [{"attach": "some"}]}, r"field 'servers\[0\]\.attach"),
    ],
)
def test_schema_errors_name_the_field(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_model(TopologySpec, data, "topo.yaml")
    assert str(info.value).startswith("topo.yaml: ")
    assert "\n" not in str(info.value)


def test_defaults() -> None:
    spec = TopologySpec(kind="ring", n=4)
    assert spec.link == LinkSpec(latency_s=0.01, bandwidth_bps=1e8, loss=0.0)
    assert (spec.tries, spec.allow_disconnected, spec.edges, spec.servers, spec.seed) == (100, False, [], [], None)
    assert TopologySpec(kind="grid", rows=2, cols=5).n_devices == 10
