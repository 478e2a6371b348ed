"""Random geometric graph: devices scattered in the unit square, linked when close.

Models a neighbourhood of devices that can talk to whoever is within radio range. Placement
``strips`` keeps the same positions but numbers the devices from left to right, so a contiguous
block of ids (how the data partitions assign true groups, ``blocks``) is a vertical strip: the
groups live together in space. ``scattered`` (ids in drawing order) mixes them everywhere. Both
draw the same graph up to the numbering, so a comparison of the two changes only where groups sit.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from p2pfl.errors import TopologyError
from p2pfl.topology._common import fresh_graph, retry_connected

__all__ = ["random_geometric", "random_geometric_pairs", "geometric_pairs", "pair_components"]


def random_geometric(n: int, radius: float, *, seed: int, tries: int = 100, connected: bool = True,
                     placement: str = "scattered") -> nx.Graph:
    """n devices placed uniformly in [0, 1)^2, linked when their distance is <= radius.

    Each node has attribute ``pos`` = (x, y). With ``connected`` the positions
    are redrawn up to ``tries`` times until the graph is connected. ``placement``:
    ``scattered`` (ids in drawing order) or ``strips`` (ids by increasing x).
    """
    xy, close = random_geometric_pairs(n, radius, seed=seed, tries=tries, connected=connected, placement=placement)
    g = fresh_graph(n, ((int(u), int(v)) for u, v in close))
    nx.set_node_attributes(g, {i: (float(x), float(y)) for i, (x, y) in enumerate(xy)}, "pos")
    return g


def random_geometric_pairs(n: int, radius: float, *, seed: int, tries: int = 100, connected: bool = True,
                           placement: str = "scattered") -> tuple[np.ndarray, np.ndarray]:
    """The draw :func:`random_geometric` keeps, as arrays: positions ``(n, 2)`` and the pairs within ``radius``
    (``geometric_pairs``), redrawn up to ``tries`` times until they connect the devices (``connected``). Both
    engines draw their graph here: the event kernel makes it a networkx graph, the tensor engine CSR arrays."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TopologyError(f"random_geometric needs n to be an integer >= 1; got n={n!r}")
    if not radius > 0:
        raise TopologyError(f"random_geometric needs radius > 0; got radius={radius!r}")
    if placement not in ("scattered", "strips"):
        raise TopologyError(f"random_geometric placement must be 'scattered' or 'strips'; got {placement!r}")
    return retry_connected(lambda s: geometric_pairs(n, radius, s, placement), name="random_geometric", seed=seed,
                           tries=tries, connected=connected, components=lambda draw: pair_components(n, draw[1]))


def pair_components(n: int, pairs: np.ndarray) -> int:
    """Connected components of the graph on ``n`` nodes with the undirected ``pairs`` ``(k, 2)``."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    ones = np.ones(len(pairs), dtype=np.int8)
    graph = coo_matrix((ones, (pairs[:, 0], pairs[:, 1])), shape=(n, n)) if len(pairs) else coo_matrix((n, n))
    count, _ = connected_components(graph, directed=False)
    return int(count)


def geometric_pairs(n: int, radius: float, draw_seed: int, placement: str = "scattered") -> tuple[np.ndarray, np.ndarray]:
    """One draw: positions ``(n, 2)`` from ``draw_seed`` and the pairs ``(u, v)``, u < v, within ``radius``,
    sorted (the edges of ``random_geometric``'s graph; ``p2pfl.tensor.graph`` builds its arrays from them)."""
    from scipy.spatial import cKDTree  # here, not at the top: scipy.spatial costs a fresh process 0.5 s

    xy = np.random.default_rng(draw_seed).random((n, 2))
    if placement == "strips":
        xy = xy[np.argsort(xy[:, 0], kind="stable")]
    # A k-d tree finds the pairs within range in O(n log n) (a dense distance matrix is O(n^2)).
    close = cKDTree(xy).query_pairs(radius, output_type="ndarray")
    close = close[np.lexsort((close[:, 1], close[:, 0]))] if len(close) else close
    return xy, close
