"""Device graphs read from files: plain edge lists and GraphML.

Nodes are relabelled 0..n-1 in natural sorted order of their original labels
(numbers compare numerically, so ``n2`` comes before ``n10``); only the
structure is kept, as an undirected simple graph.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from pathlib import Path
from xml.etree.ElementTree import ParseError

import networkx as nx

from p2pfl.errors import ConfigError, TopologyError
from p2pfl.topology._common import relabelled

__all__ = ["edge_list", "graphml", "natural_key"]


def natural_key(label: Hashable) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders digit runs numerically: 2 < 10 and 'n2' < 'n10'."""
    parts = re.split(r"(\d+)", str(label))
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts if p)


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"topology file not found: {path}; check the path "
            "(relative paths are resolved against the topology YAML's folder)"
        )
    return path


def _finish(g: nx.Graph, path: Path) -> nx.Graph:
    if g.number_of_nodes() == 0:
        raise TopologyError(f"{path}: the file has no nodes; add at least one edge")
    loops = list(nx.selfloop_edges(g))
    if loops:
        raise TopologyError(f"{path}: self-loops are not allowed; got edge {loops[0]!r}")
    return relabelled(g, sorted(g.nodes(), key=natural_key))


def edge_list(path: str | Path, *, seed: int | None = None) -> nx.Graph:
    """Read ``u v`` pairs, one per line; ``#`` starts a comment. ``seed`` is unused."""
    path = _existing(path)
    g = nx.Graph()
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        tokens = line.split()
        if len(tokens) != 2:
            raise TopologyError(f"{path}:{number}: expected two node labels 'u v'; got {line!r}")
        g.add_edge(*tokens)
    return _finish(g, path)


def graphml(path: str | Path, *, seed: int | None = None) -> nx.Graph:
    """Read a GraphML file (directed or multi-edges are folded into simple undirected edges)."""
    path = _existing(path)
    try:
        g = nx.read_graphml(path)
    except (ParseError, nx.NetworkXError, ValueError, KeyError) as err:
        raise TopologyError(f"{path}: not a readable GraphML file: {' '.join(str(err).split())}") from None
    return _finish(nx.Graph(g.to_undirected()), path)
