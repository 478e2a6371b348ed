"""Figures of the novelty matrix (RND clustered-FL paper, Fig. 2)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["novelty_heatmap"]


def novelty_heatmap(
    U: np.ndarray,
    out_path: str | Path,
    true_labels: Sequence[int] | np.ndarray | None = None,
    title: str | None = None,
) -> Path:
    """Save a heatmap of ``U[i, i] - U[i, j]`` (rows i = data owner, cols j = predictor), as in Fig. 2.

    With ``true_labels`` the devices are ordered by true cluster (stable, so
    ids stay ascending inside a cluster) and cluster boundaries are drawn.
    Unscored (``nan``) pairs are shown in grey. Uses the Agg backend and no
    pyplot state; returns the written path.
    """
    arr = np.array(U, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] == 0:
        raise ValueError(f"The 'U' parameter must be a non-empty square matrix; got shape {arr.shape} instead")
    n = arr.shape[0]
    order = np.arange(n)
    bounds: list[int] = []
    if true_labels is not None:
        labels = np.asarray(true_labels)
        if labels.shape != (n,):
            raise ValueError(f"The 'true_labels' parameter must have length {n}; got shape {labels.shape} instead")
        order = np.argsort(labels, kind="stable")
        sorted_labels = labels[order]
        bounds = [k for k in range(1, n) if sorted_labels[k] != sorted_labels[k - 1]]
    D = np.diag(arr)[:, None] - arr
    D = D[np.ix_(order, order)]
    masked = np.ma.masked_invalid(D)

    fig = Figure(figsize=(5.2, 4.4), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    lim = float(np.nanmax(np.abs(D))) if np.isfinite(D).any() else 1.0
    lim = lim if lim > 0 else 1.0
    cmap = _cmap()
    im = ax.imshow(masked, cmap=cmap, vmin=-lim, vmax=lim, interpolation="nearest")
    for b in bounds:
        ax.axhline(b - 0.5, color="black", linewidth=1.2)
        ax.axvline(b - 0.5, color="black", linewidth=1.2)
    ticks = np.arange(n)
    ax.set_xticks(ticks, [str(int(v)) for v in order], fontsize=7 if n <= 30 else 5)
    ax.set_yticks(ticks, [str(int(v)) for v in order], fontsize=7 if n <= 30 else 5)
    ax.set_xlabel("predictor j")
    ax.set_ylabel("data of device i")
    ax.set_title(title if title is not None else r"$u_{ii} - u_{ij}$")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


def _cmap():
    from matplotlib import colormaps

    return colormaps["RdBu"].with_extremes(bad="0.8")
