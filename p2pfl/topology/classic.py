"""Classic device graphs: ring, line, grid, torus, complete, star, k-regular.

All builders return a fresh ``nx.Graph`` with devices labelled 0..n-1. They
share the signature ``builder(..., *, seed)`` so one dispatcher can call any
of them; only ``k_regular`` is random and uses the seed.
"""

from __future__ import annotations

import networkx as nx

from p2pfl.errors import TopologyError
from p2pfl.topology._common import fresh_graph, retry_connected

__all__ = ["ring", "line", "grid", "torus", "complete", "star", "k_regular"]


def _check_at_least(name: str, value: int, minimum: int, kind: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TopologyError(f"{kind} needs {name} to be an integer >= {minimum}; got {name}={value!r}")


def ring(n: int, *, seed: int | None = None) -> nx.Graph:
    """Cycle 0-1-...-(n-1)-0: n edges. ``seed`` is unused (deterministic)."""
    _check_at_least("n", n, 3, "ring")
    return fresh_graph(n, ((i, (i + 1) % n) for i in range(n)))


def line(n: int, *, seed: int | None = None) -> nx.Graph:
    """Path 0-1-...-(n-1): n-1 edges. ``seed`` is unused (deterministic)."""
    _check_at_least("n", n, 1, "line")
    return fresh_graph(n, ((i, i + 1) for i in range(n - 1)))


def _grid_edges(rows: int, cols: int, periodic: bool) -> list[tuple[int, int]]:
    edges = []
    for r in range(rows):
        for c in range(cols):
            here = r * cols + c
            if c + 1 < cols or periodic:
                edges.append((here, r * cols + (c + 1) % cols))
            if r + 1 < rows or periodic:
                edges.append((here, ((r + 1) % rows) * cols + c))
    return edges


def grid(rows: int, cols: int, *, seed: int | None = None) -> nx.Graph:
    """rows x cols lattice, device ``r * cols + c`` at row r, column c: 2rc - r - c edges."""
    _check_at_least("rows", rows, 1, "grid")
    _check_at_least("cols", cols, 1, "grid")
    return fresh_graph(rows * cols, _grid_edges(rows, cols, periodic=False))


def torus(rows: int, cols: int, *, seed: int | None = None) -> nx.Graph:
    """rows x cols lattice with wrap-around in both directions: 2rc edges (needs rows, cols >= 3)."""
    _check_at_least("rows", rows, 3, "torus")
    _check_at_least("cols", cols, 3, "torus")
    return fresh_graph(rows * cols, _grid_edges(rows, cols, periodic=True))


def complete(n: int, *, seed: int | None = None) -> nx.Graph:
    """Every pair of devices linked: n(n-1)/2 edges."""
    _check_at_least("n", n, 1, "complete")
    return fresh_graph(n, ((i, j) for i in range(n) for j in range(i + 1, n)))


def star(n: int, *, seed: int | None = None) -> nx.Graph:
    """Device 0 linked to every other device: n-1 edges."""
    _check_at_least("n", n, 1, "star")
    return fresh_graph(n, ((0, i) for i in range(1, n)))


def k_regular(n: int, k: int, *, seed: int, tries: int = 100, connected: bool = True) -> nx.Graph:
    """Uniformly random k-regular graph on n devices (every degree is k).

    Needs 0 <= k < n and n * k even. With ``connected`` it redraws up to
    ``tries`` times until the graph is connected.
    """
    _check_at_least("n", n, 1, "k_regular")
    _check_at_least("k", k, 0, "k_regular")
    if k >= n:
        raise TopologyError(f"k must be < n; got k={k}, n={n}")
    if (n * k) % 2:
        raise TopologyError(f"n * k must be even; got n={n}, k={k}")

    def make(s: int) -> nx.Graph:
        g = nx.random_regular_graph(k, n, seed=s)
        return fresh_graph(n, sorted(tuple(sorted(e)) for e in g.edges()))

    return retry_connected(make, name="k_regular", seed=seed, tries=tries, connected=connected)
