"""Random device graphs: Erdős–Rényi, Watts–Strogatz small world, Barabási–Albert scale free.

Each builder turns ``seed`` into a numpy RNG once and passes a new int seed
drawn from it to the networkx generator on every try, redrawing up to
``tries`` times until the graph is connected (unless ``connected=False``).
"""

from __future__ import annotations

import networkx as nx

from p2pfl.errors import TopologyError
from p2pfl.topology._common import fresh_graph, retry_connected

__all__ = ["erdos_renyi", "watts_strogatz", "barabasi_albert"]


def _canonical(g: nx.Graph, n: int) -> nx.Graph:
    return fresh_graph(n, sorted(tuple(sorted(e)) for e in g.edges()))


def _check_n(n: int, kind: str, minimum: int = 1) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < minimum:
        raise TopologyError(f"{kind} needs n to be an integer >= {minimum}; got n={n!r}")


def _check_p(p: float, kind: str) -> None:
    if not 0 <= p <= 1:
        raise TopologyError(f"{kind} needs 0 <= p <= 1; got p={p!r}")


def erdos_renyi(n: int, p: float, *, seed: int, tries: int = 100, connected: bool = True) -> nx.Graph:
    """G(n, p): each of the n(n-1)/2 possible edges is present with probability p."""
    _check_n(n, "erdos_renyi")
    _check_p(p, "erdos_renyi")
    return retry_connected(
        lambda s: _canonical(nx.gnp_random_graph(n, p, seed=s), n),
        name="erdos_renyi", seed=seed, tries=tries, connected=connected,
    )


def watts_strogatz(n: int, k: int, p: float, *, seed: int, tries: int = 100, connected: bool = True) -> nx.Graph:
    """Small world: a ring where each device links to its k nearest neighbours, each edge rewired with probability p.

    Needs k even and 2 <= k < n; the graph has n * k / 2 edges.
    """
    _check_n(n, "watts_strogatz", minimum=3)
    _check_p(p, "watts_strogatz")
    if isinstance(k, bool) or not isinstance(k, int) or k < 2 or k % 2:
        raise TopologyError(f"watts_strogatz needs k to be an even integer >= 2; got k={k!r}")
    if k >= n:
        raise TopologyError(f"k must be < n; got k={k}, n={n}")
    return retry_connected(
        lambda s: _canonical(nx.watts_strogatz_graph(n, k, p, seed=s), n),
        name="watts_strogatz", seed=seed, tries=tries, connected=connected,
    )


def barabasi_albert(n: int, m: int, *, seed: int, tries: int = 100, connected: bool = True) -> nx.Graph:
    """Scale free: each new device links to m existing ones by preferential attachment.

    Needs 1 <= m < n; the graph has (n - m) * m edges and is always connected.
    """
    _check_n(n, "barabasi_albert", minimum=2)
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise TopologyError(f"barabasi_albert needs m to be an integer >= 1; got m={m!r}")
    if m >= n:
        raise TopologyError(f"m must be < n; got m={m}, n={n}")
    return retry_connected(
        lambda s: _canonical(nx.barabasi_albert_graph(n, m, seed=s), n),
        name="barabasi_albert", seed=seed, tries=tries, connected=connected,
    )
