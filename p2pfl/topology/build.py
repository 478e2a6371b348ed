"""Turn a TopologySpec into a Topology: the device graph, its links, and its servers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import networkx as nx

from p2pfl.errors import ConfigError, TopologyError
from p2pfl.limits import MAX_DEVICES
from p2pfl.seeding import stream
from p2pfl.topology import classic, files, geometric, random_graphs
from p2pfl.topology.schema import LinkSpec, TopologySpec
from p2pfl.validation import parse_model, read_yaml, require_mapping

__all__ = ["Link", "ServerNode", "Topology", "BUILDERS", "build_topology", "graph_seed", "link_of", "load_topology_file"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Link:
    """A built link: one-way latency (s), bandwidth (bit/s), and message loss probability."""

    latency_s: float
    bandwidth_bps: float
    loss: float


@dataclass(frozen=True)
class ServerNode:
    """A server and the devices it talks to, all over the same kind of link; its own send and receive
    capacity (bit/s, None: see ``ServerSpec``)."""

    name: str
    attached: tuple[int, ...]
    link: Link
    egress_bps: float | None = None
    ingress_bps: float | None = None


@dataclass(frozen=True)
class Topology:
    """Devices 0..n-1 on ``graph`` (every edge has attribute ``link``) plus optional servers."""

    graph: nx.Graph
    servers: tuple[ServerNode, ...]

    @property
    def n_devices(self) -> int:
        return self.graph.number_of_nodes()


#: Kind name -> one-line description (shown by ``p2pfl list topologies``).
BUILDERS: dict[str, str] = {
    "ring": "cycle of n devices (params: n)",
    "line": "path of n devices (params: n)",
    "grid": "rows x cols lattice (params: rows, cols)",
    "torus": "rows x cols lattice with wrap-around (params: rows, cols; both >= 3)",
    "complete": "every pair of n devices linked (params: n)",
    "star": "device 0 linked to all others (params: n)",
    "k_regular": "random graph where every device has k neighbours (params: n, k)",
    "erdos_renyi": "each possible edge present with probability p (params: n, p)",
    "watts_strogatz": "small world: ring of k neighbours, rewired with probability p (params: n, k, p)",
    "barabasi_albert": "scale free: each device attaches to m others preferentially (params: n, m)",
    "random_geometric": "devices in the unit square linked within radius (params: n, radius)",
    "edge_list": "edges read from a text file of 'u v' lines (params: path)",
    "graphml": "graph read from a GraphML file (params: path)",
}


def _given(spec: TopologySpec, name: str, value: _T | None) -> _T:
    """A parameter ``spec.kind`` needs; the schema guarantees it (``KIND_PARAMS``), so None is a bug."""
    if value is None:
        raise ConfigError(f"kind '{spec.kind}' needs '{name}'")
    return value


def _generate(spec: TopologySpec, seed: int, base_dir: str | Path | None) -> nx.Graph:
    """Call the builder for ``spec.kind`` with the parameters it takes."""
    tries, connected = spec.tries, not spec.allow_disconnected

    def n() -> int:
        return _given(spec, "n", spec.n)

    def rows_cols() -> tuple[int, int]:
        return _given(spec, "rows", spec.rows), _given(spec, "cols", spec.cols)

    def k() -> int:
        return _given(spec, "k", spec.k)

    def p() -> float:
        return _given(spec, "p", spec.p)

    def path() -> str:
        return _given(spec, "path", spec.with_base_dir(base_dir or ".").path)

    calls: dict[str, Callable[[], nx.Graph]] = {
        "ring": lambda: classic.ring(n(), seed=seed),
        "line": lambda: classic.line(n(), seed=seed),
        "grid": lambda: classic.grid(*rows_cols(), seed=seed),
        "torus": lambda: classic.torus(*rows_cols(), seed=seed),
        "complete": lambda: classic.complete(n(), seed=seed),
        "star": lambda: classic.star(n(), seed=seed),
        "k_regular": lambda: classic.k_regular(n(), k(), seed=seed, tries=tries, connected=connected),
        "erdos_renyi": lambda: random_graphs.erdos_renyi(n(), p(), seed=seed, tries=tries, connected=connected),
        "watts_strogatz": lambda: random_graphs.watts_strogatz(n(), k(), p(), seed=seed, tries=tries,
                                                               connected=connected),
        "barabasi_albert": lambda: random_graphs.barabasi_albert(n(), _given(spec, "m", spec.m), seed=seed,
                                                                 tries=tries, connected=connected),
        "random_geometric": lambda: geometric.random_geometric(n(), _given(spec, "radius", spec.radius), seed=seed,
                                                               tries=tries, connected=connected,
                                                               placement=spec.placement),
        "edge_list": lambda: files.edge_list(path()),
        "graphml": lambda: files.graphml(path()),
    }
    return calls[spec.kind]()


def link_of(spec: LinkSpec) -> Link:
    """The built link of a ``link:`` block."""
    return Link(latency_s=spec.latency_s, bandwidth_bps=spec.bandwidth_bps, loss=spec.loss)


def _apply_links(graph: nx.Graph, spec: TopologySpec) -> None:
    default = link_of(spec.link)
    nx.set_edge_attributes(graph, default, "link")
    seen: dict[frozenset[int], int] = {}
    for i, o in enumerate(spec.edges):
        if not graph.has_edge(o.u, o.v):
            raise ConfigError(
                f"edges[{i}]: ({o.u}, {o.v}) is not an edge of the topology; "
                "override only existing edges (check u and v)"
            )
        key = frozenset((o.u, o.v))
        if key in seen:
            raise ConfigError(f"edges[{i}]: ({o.u}, {o.v}) is already overridden by edges[{seen[key]}]; merge them")
        seen[key] = i
        graph.edges[o.u, o.v]["link"] = Link(
            latency_s=default.latency_s if o.latency_s is None else o.latency_s,
            bandwidth_bps=default.bandwidth_bps if o.bandwidth_bps is None else o.bandwidth_bps,
            loss=default.loss if o.loss is None else o.loss,
        )


def _servers(spec: TopologySpec, n: int) -> tuple[ServerNode, ...]:
    servers = []
    for i, s in enumerate(spec.servers):
        attached = range(n) if s.attach == "all" else s.attach
        for device in attached:
            if not 0 <= device < n:
                raise ConfigError(
                    f"servers[{i}].attach: device {device} does not exist; device ids are 0..{n - 1}"
                )
        servers.append(ServerNode(name=s.name, attached=tuple(sorted(set(attached))), link=link_of(s.link),
                                  egress_bps=s.egress_bps, ingress_bps=s.ingress_bps))
    return tuple(servers)


def graph_seed(spec: TopologySpec, seed: int) -> int:
    """The seed a random kind draws its graph from: of ``stream(seed, "topology")``, or of ``spec.seed`` when set."""
    root = seed if spec.seed is None else spec.seed
    return int(stream(root, "topology").integers(2**63))


def build_topology(spec: TopologySpec, *, seed: int, base_dir: str | Path | None = None) -> Topology:
    """Build the devices' graph, links and servers for ``spec``; same spec and seed give the same topology.

    Random kinds draw the graph from ``stream(seed, "topology")`` (or from ``spec.seed`` when set).

    ``base_dir`` resolves a relative ``path`` of file kinds (default: the working directory).
    Raises TopologyError if the graph cannot be built or is disconnected without
    ``allow_disconnected``, and ConfigError for overrides or servers naming missing devices.
    """
    graph = _generate(spec, graph_seed(spec, seed), base_dir)
    if graph.number_of_nodes() > MAX_DEVICES:  # file kinds: the spec could not tell before reading the file
        raise TopologyError(f"{spec.path}: {graph.number_of_nodes():,} devices; at most {MAX_DEVICES:,} "
                            "(p2pfl.limits.MAX_DEVICES); use a smaller graph")
    if not spec.allow_disconnected and not nx.is_connected(graph):
        parts = nx.number_connected_components(graph)
        raise TopologyError(
            f"{spec.kind} topology is disconnected ({parts} components); "
            "set allow_disconnected: true or change the parameters"
        )
    _apply_links(graph, spec)
    return Topology(graph=graph, servers=_servers(spec, graph.number_of_nodes()))


def load_topology_file(path: str | Path) -> TopologySpec:
    """Read and validate a topology YAML file; a relative ``path`` inside it is resolved against its folder."""
    path = Path(path)
    data = require_mapping(read_yaml(path), path, "topology", "'kind' and its parameters, e.g. kind: ring and n: 16")
    spec = parse_model(TopologySpec, data, path)
    return spec.with_base_dir(path.parent)
