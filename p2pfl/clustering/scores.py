"""How well discovered federations match the true clusters.

``misclassification_rate`` is the RND clustered-FL paper's objective
(Sec. III, problem statement): the best matching of federations to clusters
over label permutations, counting misassigned devices. ``adjusted_rand_index``
is the usual chance-corrected pair-counting score (sklearn).
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score

__all__ = ["labels_from_clusters", "adjusted_rand_index", "misclassification_rate", "merged_groups",
           "clustering_scores"]


def labels_from_clusters(clusters: Sequence[Sequence[int]], n: int) -> np.ndarray:
    """Label vector of length ``n``: ``labels[v] = q`` when node ``v`` is in ``clusters[q]``.

    ``clusters`` must be a partition of ``0..n-1``: every id exactly once.
    """
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 0:
        raise ValueError(f"The 'n' parameter must be an int >= 0; got {n!r} instead")
    labels = np.full(int(n), -1, dtype=np.int64)
    for q, members in enumerate(clusters):
        for v in members:
            if isinstance(v, bool) or not isinstance(v, Integral) or not 0 <= v < n:
                raise ValueError(f"Cluster members must be node ids in [0, {n}); got {v!r} in cluster {q}")
            if labels[v] != -1:
                raise ValueError(f"Node {v} appears in more than one place (clusters {labels[v]} and {q})")
            labels[v] = q
    missing = np.flatnonzero(labels == -1)
    if missing.size:
        raise ValueError(f"The clusters must cover every node 0..{n - 1}; missing {missing.tolist()}")
    return labels


def _true(true_labels: Sequence[int] | np.ndarray) -> np.ndarray:
    arr = np.asarray(true_labels)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"The 'true_labels' parameter must be a non-empty 1-D array; got shape {arr.shape} instead")
    return arr


def adjusted_rand_index(true_labels: Sequence[int] | np.ndarray, clusters: Sequence[Sequence[int]]) -> float:
    """ARI between the true cluster of each device and its federation (1.0 = identical partitions)."""
    truth = _true(true_labels)
    return float(adjusted_rand_score(truth, labels_from_clusters(clusters, truth.size)))


def misclassification_rate(true_labels: Sequence[int] | np.ndarray, clusters: Sequence[Sequence[int]]) -> float:
    """Fraction of devices outside their matched federation, under the best matching.

    ``min_pi (N - sum_q |F_pi(q) & C_q|) / N``: federations and true clusters
    are matched one-to-one (Hungarian algorithm on the contingency matrix,
    padded with empty federations or clusters when the counts differ); each
    device not in the federation matched to its cluster counts once. The
    paper's sum of symmetric differences counts such a device twice (missing
    from its cluster's federation, extra in another), so this equals that sum
    divided by ``2N``.
    """
    truth = _true(true_labels)
    pred = labels_from_clusters(clusters, truth.size)
    _, t = np.unique(truth, return_inverse=True)
    k, f = int(t.max()) + 1, len(clusters)
    size = max(k, f)
    contingency = np.zeros((size, size), dtype=np.int64)  # zero rows/cols pad the smaller side
    np.add.at(contingency, (t, pred), 1)
    rows, cols = linear_sum_assignment(contingency, maximize=True)
    matched = int(contingency[rows, cols].sum())
    return (truth.size - matched) / truth.size


def merged_groups(true_labels: Sequence[int] | np.ndarray, clusters: Sequence[Sequence[int]]) -> int:
    """How many true clusters share their home federation with another true cluster (0: no two groups merged).

    A true cluster's home is the federation holding most of its devices (ties: the lowest federation index); groups
    with the same home were merged into one federation, as IFCA does when two of its K models end up serving
    the same group (issue 70: ARI about 0.71 with 4 groups, 2 of them merged)."""
    truth = _true(true_labels)
    pred = labels_from_clusters(clusters, truth.size)
    _, t = np.unique(truth, return_inverse=True)
    contingency = np.zeros((int(t.max()) + 1, max(1, len(clusters))), dtype=np.int64)
    np.add.at(contingency, (t, pred), 1)
    home = contingency.argmax(axis=1)
    shared = np.bincount(home, minlength=contingency.shape[1])[home] > 1
    return int(shared.sum())


def clustering_scores(true_clusters: tuple[int, ...], clusters: list[list[int]]) -> dict[str, Any]:
    """ARI, misclassification rate and count of federations against the ground truth (scoring only)."""
    return {
        "clusters": clusters,
        "ari": adjusted_rand_index(list(true_clusters), clusters),
        "misclassification_rate": misclassification_rate(list(true_clusters), clusters),
        "n_federations": len(clusters),
    }
