"""Draw a Topology to a PNG: devices as circles, servers as red squares above them."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from p2pfl.topology.build import Topology

__all__ = ["draw_topology"]


def _device_positions(topo: Topology) -> dict[int, np.ndarray]:
    """Node ``pos`` attributes when every device has one, else a spring layout seeded with 0."""
    g = topo.graph
    if g.number_of_nodes() and all("pos" in d for _, d in g.nodes(data=True)):
        return {i: np.asarray(d["pos"], dtype=float) for i, d in g.nodes(data=True)}
    return {i: np.asarray(p, dtype=float) for i, p in nx.spring_layout(g, seed=0).items()}


def draw_topology(topo: Topology, out: str | Path, title: str | None = None) -> Path:
    """Write a PNG of ``topo`` to ``out`` (parent folders are created) and return its path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pos = _device_positions(topo)
    xy = np.array([pos[i] for i in sorted(pos)]) if pos else np.zeros((0, 2))
    lo = xy.min(axis=0) if len(xy) else np.zeros(2)
    hi = xy.max(axis=0) if len(xy) else np.ones(2)
    span = max(float((hi - lo).max()), 1e-9)

    fig = Figure(figsize=(6, 6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()

    links = [(pos[u], pos[v]) for u, v in topo.graph.edges()]
    ax.add_collection(LineCollection(links, colors="0.5", linewidths=1.0, label="link", zorder=1))

    servers = topo.servers
    if servers:
        xs = np.linspace(lo[0], hi[0], len(servers) + 2)[1:-1]
        y = hi[1] + 0.3 * span
        server_xy = {s.name: np.array([x, y]) for s, x in zip(servers, xs)}
        spokes = [(server_xy[s.name], pos[d]) for s in servers for d in s.attached]
        ax.add_collection(
            LineCollection(spokes, colors="tab:red", linewidths=0.5, linestyles="dashed", alpha=0.6,
                           label="server link", zorder=0)
        )
        sxy = np.array(list(server_xy.values()))
        ax.scatter(sxy[:, 0], sxy[:, 1], marker="s", s=160, c="tab:red", edgecolors="black", label="server", zorder=3)
        for name, (x, y_) in server_xy.items():
            ax.annotate(name, (x, y_), xytext=(0, 10), textcoords="offset points", ha="center", fontsize=8)

    ax.scatter(xy[:, 0], xy[:, 1], marker="o", s=120, c="tab:blue", edgecolors="black", label="device", zorder=2)
    if topo.n_devices <= 64:
        for i, (x, y_) in enumerate(xy):
            ax.annotate(str(i), (x, y_), ha="center", va="center", fontsize=6, color="white", zorder=4)

    ax.autoscale_view()
    ax.margins(0.08)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4, fontsize=8, frameon=False)
    ax.set_title(title if title is not None else f"{topo.n_devices} devices, {topo.graph.number_of_edges()} links")
    fig.savefig(out, format="png", dpi=100)
    return out
