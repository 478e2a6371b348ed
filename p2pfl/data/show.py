"""Look at a federation: a label-histogram figure and a text table.

Used by ``p2pfl data show SCENARIO --out x.png``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from p2pfl.data.shards import Federation

__all__ = ["show_federation", "federation_table", "label_counts"]


def label_counts(fed: Federation) -> np.ndarray:
    """Training label counts, int64 ``(n_devices, num_classes)`` (classification only)."""
    k = max(fed.num_classes, 1)
    return np.stack([np.bincount(s.train_y.numpy().astype(np.int64), minlength=k)[:k] for s in fed.shards])


def show_federation(fed: Federation, out: Path | str, *, samples_per_cluster: int = 4, max_clusters: int = 8) -> Path:
    """Write a PNG: stacked per-device label histograms (a band under each bar
    gives the device's true cluster) and a row of sample images per cluster."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    clusters = sorted(set(fed.true_clusters))[:max_clusters]
    images = len(fed.input_shape) == 3
    fig = plt.figure(figsize=(max(8.0, 0.12 * fed.n_devices + 4), 7 if images else 4.5), dpi=100)
    grid = fig.add_gridspec(2 if images else 1, max(1, len(clusters) * samples_per_cluster), height_ratios=[2, 1] if images else [1])
    ax = fig.add_subplot(grid[0, :])
    x = np.arange(fed.n_devices)
    cluster_colors = matplotlib.colormaps["tab10"]
    if fed.task == "regression":
        ax.bar(x, [s.train_y.shape[0] for s in fed.shards], color="0.6")
    else:
        counts = label_counts(fed)
        class_colors = matplotlib.colormaps["tab20" if fed.num_classes > 10 else "tab10"]
        bottom = np.zeros(fed.n_devices)
        for c in range(counts.shape[1]):
            if counts[:, c].any():
                ax.bar(x, counts[:, c], bottom=bottom, width=0.9, color=class_colors(c % 20), label=f"class {c}" if counts.shape[1] <= 20 else None)
                bottom += counts[:, c]
        if counts.shape[1] <= 20:
            ax.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="label")
    band = -0.04 * max(1.0, max(s.train_y.shape[0] for s in fed.shards))
    ax.bar(x, band, width=1.0, color=[cluster_colors(c % 10) for c in fed.true_clusters])
    ax.set_xlabel("device (band below: true cluster)")
    ax.set_ylabel("training samples")
    ax.set_title(f"{fed.dataset} / {fed.partition}: {fed.n_devices} devices, {fed.n_clusters} clusters")
    if images:
        for j, c in enumerate(clusters):
            dev = fed.true_clusters.index(c)
            shard = fed.shards[dev]
            for k in range(min(samples_per_cluster, shard.train_x.shape[0])):
                a = fig.add_subplot(grid[1, j * samples_per_cluster + k])
                img = shard.train_x[k].numpy()
                a.imshow(img[0] if img.shape[0] == 1 else np.transpose(img, (1, 2, 0)), cmap="gray", vmin=0, vmax=1)
                a.set_xticks([])
                a.set_yticks([])
                a.set_title(f"c{c} y={int(shard.train_y[k])}", fontsize=7, color=cluster_colors(c % 10))
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def federation_table(fed: Federation) -> str:
    """Plain-text table: one row per device (cluster, source, sizes, labels)."""
    rows = [("device", "cluster", "source", "train", "test", "labels")]
    for i, s in enumerate(fed.shards):
        if fed.task == "regression":
            labels = "-"
        else:
            labels = ",".join(str(c) for c in sorted(set(s.train_y.tolist())))
        rows.append((str(i), str(s.true_cluster), s.source, str(s.train_y.shape[0]), str(s.test_y.shape[0]), labels))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    lines = ["  ".join(v.rjust(w) if k in (0, 1, 3, 4) else v.ljust(w) for k, (v, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    total = sum(s.train_y.shape[0] for s in fed.shards)
    lines.append(
        f"{fed.dataset} / {fed.partition}: {fed.n_devices} devices, {fed.n_clusters} clusters, "
        f"{fed.num_classes} classes, input {tuple(fed.input_shape)}, {total} training samples"
    )
    return "\n".join(lines)
