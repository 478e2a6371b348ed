"""Helpers shared by the builder modules: canonical labelling and connectivity retries."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

import networkx as nx
import numpy as np

from p2pfl.errors import TopologyError

__all__ = ["fresh_graph", "relabelled", "retry_connected", "check_tries"]

G = TypeVar("G")


def fresh_graph(n: int, edges: Iterable[tuple[int, int]]) -> nx.Graph:
    """A new simple graph with nodes 0..n-1 (in order) and ``edges``."""
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    return g


def relabelled(g: nx.Graph, order: list[Hashable]) -> nx.Graph:
    """Copy of ``g`` with node ``order[i]`` renamed to ``i``; edge attributes are dropped."""
    index = {node: i for i, node in enumerate(order)}
    return fresh_graph(len(order), sorted(_pair(index[u], index[v]) for u, v in g.edges()))


def _pair(a: int, b: int) -> tuple[int, int]:
    """The edge (a, b) with its smaller end first."""
    return (a, b) if a <= b else (b, a)


def check_tries(tries: int) -> None:
    if tries < 1:
        raise TopologyError(f"tries must be >= 1; got tries={tries}")


def retry_connected(make: Callable[[int], G], *, name: str, seed: int, tries: int, connected: bool,
                    components: Callable[[G], int] = nx.number_connected_components) -> G:
    """Call ``make(int_seed)`` with a new derived seed until the graph is connected.

    With ``connected=False`` the first graph is returned. ``components`` counts a graph's connected components
    (a networkx graph's by default; the tensor engine passes arrays of pairs and counts theirs). Raises
    TopologyError if no connected graph is found in ``tries`` attempts.
    """
    check_tries(tries)
    rng = np.random.default_rng(seed)
    for _ in range(tries if connected else 1):
        g = make(int(rng.integers(2**32)))
        if not connected or (parts := components(g)) == 1:
            return g
    raise TopologyError(
        f"{name} graph is disconnected ({parts} components) in all {tries} tries; "
        "set allow_disconnected: true or change the parameters"
    )
