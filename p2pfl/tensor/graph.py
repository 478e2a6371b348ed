"""The fleet's graph as compressed rows (CSR): two integer arrays instead of a networkx graph.

A networkx graph holds a dict per node and per edge: about 3.9 kB a device at mean degree 24
(``analysis/results/bench_scale.md``). :class:`Adjacency` holds the same edges in ``indptr`` (int64,
n + 1) and ``indices`` (int32, both directions, each row sorted): 8 bytes a device plus 4 an edge end.

``random_geometric`` is made from the draw the event kernel makes its networkx graph from
(``p2pfl.topology.geometric.random_geometric_pairs``: the same seed, positions, pairs and connectivity retries),
without a networkx graph. Every other kind is built by ``p2pfl.topology`` and converted.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from p2pfl.topology.build import build_topology, graph_seed
from p2pfl.topology.geometric import random_geometric_pairs
from p2pfl.topology.schema import TopologySpec

__all__ = ["Adjacency", "adjacency"]


@dataclass(frozen=True)
class Adjacency:
    """Neighbours of device i: ``indices[indptr[i]:indptr[i + 1]]``, sorted."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def n(self) -> int:
        return len(self.indptr) - 1

    @property
    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    @property
    def sources(self) -> np.ndarray:
        """The row (device) of each entry of ``indices``."""
        return np.repeat(np.arange(self.n, dtype=np.int64), self.degree)

    def neighbors(self, i: int) -> tuple[int, ...]:
        return tuple(int(j) for j in self.indices[self.indptr[i] : self.indptr[i + 1]])

    @classmethod
    def from_pairs(cls, n: int, pairs: np.ndarray) -> Adjacency:
        """From undirected pairs ``(k, 2)`` (each once, no self-loops)."""
        u = np.concatenate([pairs[:, 0], pairs[:, 1]]).astype(np.int64)
        v = np.concatenate([pairs[:, 1], pairs[:, 0]]).astype(np.int64)
        order = np.lexsort((v, u))
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(u, minlength=n), out=indptr[1:])
        return cls(indptr, v[order].astype(np.int32))

    @classmethod
    def from_graph(cls, graph: nx.Graph) -> Adjacency:
        pairs = np.asarray([(int(a), int(b)) for a, b in graph.edges()], dtype=np.int64).reshape(-1, 2)
        return cls.from_pairs(graph.number_of_nodes(), pairs)


def adjacency(spec: TopologySpec, seed: int) -> Adjacency:
    """The devices' graph of ``spec`` under run seed ``seed``: the edges ``build_topology`` draws."""
    if spec.kind != "random_geometric":
        return Adjacency.from_graph(build_topology(spec, seed=seed).graph)
    assert spec.n is not None and spec.radius is not None  # the schema requires them for this kind
    _, pairs = random_geometric_pairs(spec.n, spec.radius, seed=graph_seed(spec, seed), tries=spec.tries,
                                      connected=not spec.allow_disconnected, placement=spec.placement)
    return Adjacency.from_pairs(spec.n, pairs)
