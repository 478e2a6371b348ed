"""Figures of clustering: the novelty matrix (RND clustered-FL paper, Fig. 2) and federations in space."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["novelty_heatmap", "federation_frames", "frame_moments", "HEATMAP_CELLS", "TICKED_DEVICES"]

#: Most rows / columns a novelty heatmap draws; a larger matrix is shown as means of square blocks.
HEATMAP_CELLS = 1000
#: Most devices whose ids label the heatmap's axes.
TICKED_DEVICES = 60


def novelty_heatmap(
    U: np.ndarray,
    out_path: str | Path,
    true_labels: Sequence[int] | np.ndarray | None = None,
    title: str | None = None,
) -> Path:
    """Save a heatmap of ``U[i, i] - U[i, j]`` (rows i = data owner, cols j = predictor), as in Fig. 2.

    With ``true_labels`` the devices are ordered by true cluster (stable, so
    ids stay ascending inside a cluster) and cluster boundaries are drawn.
    Unscored (``nan``) pairs are shown in grey. Above ``HEATMAP_CELLS`` devices each pixel is
    the mean of a square block of scored pairs, and above ``TICKED_DEVICES`` the axes carry no
    ids. Uses the Agg backend and no pyplot state; returns the written path.
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
    block = -(-n // HEATMAP_CELLS)  # above HEATMAP_CELLS devices a pixel is the mean of a block x block square
    if block > 1:
        D = _block_mean(D, block)
        bounds = [-(-b // block) for b in bounds]
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
    if n <= TICKED_DEVICES:
        ticks = np.arange(n)
        ax.set_xticks(ticks, [str(int(v)) for v in order], fontsize=7 if n <= 30 else 5)
        ax.set_yticks(ticks, [str(int(v)) for v in order], fontsize=7 if n <= 30 else 5)
    else:  # ten thousand tick labels took matplotlib minutes and say nothing
        ax.set_xticks([])
        ax.set_yticks([])
    what = "" if block == 1 else f" (blocks of {block}, by true group)" if true_labels is not None else f" (blocks of {block})"
    ax.set_xlabel("predictor j" + what)
    ax.set_ylabel("data of device i" + what)
    ax.set_title(title if title is not None else r"$u_{ii} - u_{ij}$")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


def _block_mean(D: np.ndarray, b: int) -> np.ndarray:
    """Means of the b x b blocks of ``D`` over its finite entries (nan where a block has none)."""
    n = D.shape[0]
    m = -(-n // b)
    padded = np.full((m * b, m * b), np.nan)
    padded[:n, :n] = D
    blocks = padded.reshape(m, b, m, b)
    finite = np.isfinite(blocks)
    count = finite.sum(axis=(1, 3))
    total = np.where(finite, blocks, 0.0).sum(axis=(1, 3))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan)


def _cmap():
    from matplotlib import colormaps

    return colormaps["RdBu"].with_extremes(bad="0.8")


def frame_moments(labels_log: Sequence[dict], at: Sequence[float] | None = None) -> list[tuple[float, dict]]:
    """(moment, ``federation_labels`` entry in force) for each panel of ``federation_frames``."""
    if at is None:
        return [(float(e["t"]), e) for e in (labels_log[0], labels_log[len(labels_log) // 2], labels_log[-1])]
    return [(float(t), next((e for e in reversed(labels_log) if e["t"] <= t), labels_log[0])) for t in at]


def federation_frames(
    positions: str | Path,
    labels_log: Sequence[dict],
    ari_log: Sequence[dict],
    radius: float,
    out_path: str | Path,
    *,
    title: str,
    marker_size: float = 60.0,
    at: Sequence[float] | None = None,
) -> Path:
    """Save the moving neighbourhood at three moments (first, middle and last ``federation_labels`` entry):
    devices at their positions of a run's ``positions.npz`` (frames ``t``, ``pos``), links within
    ``radius``, colour = federation, the ARI logged in the same round in each panel's title.

    ``at``: the moments (simulated seconds) instead, each coloured by the federations in force then (the
    latest entry logged at or before it; before the first, the first: the federation each device joins),
    for runs whose federations form late (rnd_gossip logs them once discovery ends)."""
    from scipy.spatial import cKDTree

    with np.load(positions, allow_pickle=False) as z:
        times, pos = z["t"], z["pos"]
    fig = Figure(figsize=(12, 4.2))
    FigureCanvasAgg(fig)
    moments = frame_moments(labels_log, at)
    every = sorted({v for _, e in moments for v in e["value"]})  # one colour per federation label in every panel
    for k, (moment, entry) in enumerate(moments):
        ax = fig.add_subplot(1, len(moments), k + 1)
        i = int(np.argmin(np.abs(times - moment)))
        xy = pos[i]
        for a, b in sorted(cKDTree(xy).query_pairs(radius)):
            ax.plot(*zip(xy[a], xy[b]), color="0.85", lw=0.6, zorder=1)
        uniq = sorted(set(entry["value"]))
        ax.scatter(xy[:, 0], xy[:, 1], c=[every.index(v) for v in entry["value"]], cmap="tab20", vmin=0,
                   vmax=max(1, len(every) - 1), s=marker_size,
                   edgecolors="k", zorder=2)
        ari = next((e["value"] for e in ari_log if e.get("round") == entry.get("round")), float("nan"))
        ax.set(title=f"t = {times[i]:.1f} s: {len(uniq)} federations of round {entry.get('round')}, ARI {ari:.2f}",
               xlim=(0, 1), ylim=(0, 1), aspect="equal", xticks=[], yticks=[])
        ax.title.set_fontsize(9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    return Path(out_path)

