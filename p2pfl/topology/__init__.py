"""Device topologies: networkx graph builders from YAML, server attachment, and drawing.

>>> spec = TopologySpec(kind="ring", n=8)
>>> build_topology(spec, seed=0).graph.number_of_edges()
8
"""

from p2pfl.topology.build import BUILDERS, Link, ServerNode, Topology, build_topology, load_topology_file
from p2pfl.topology.draw import draw_topology
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
