"""Device topologies: networkx graph builders from YAML, server attachment, and drawing.

>>> spec = TopologySpec(kind="ring", n=8)
>>> build_topology(spec, seed=0).graph.number_of_edges()
8
"""

from typing import Any

from p2pfl.topology.build import BUILDERS, Link, ServerNode, Topology, build_topology, load_topology_file
from p2pfl.topology.schema import EdgeOverride, LinkSpec, ServerSpec, TopologySpec

__all__ = [
    "TopologySpec",
    "LinkSpec",
    "ServerSpec",
    "EdgeOverride",
    "Topology",
    "Link",
    "ServerNode",
    "build_topology",
    "load_topology_file",
    "draw_topology",
    "BUILDERS",
]


def __getattr__(name: str) -> Any:
    """``draw_topology`` on first use: drawing imports matplotlib, which a run never needs."""
    if name == "draw_topology":
        from p2pfl.topology.draw import draw_topology

        return draw_topology
    raise AttributeError(f"module 'p2pfl.topology' has no attribute {name!r}")
