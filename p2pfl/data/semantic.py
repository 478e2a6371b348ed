"""Label mappings and class groupings used by the heterogeneity experiments.

Conditional-PCA paper (FLICS 2026), Sec. IV-A and Appendices C-I. The paper
names the groups but rarely lists their members; where it does not, the
members chosen here are written next to each mapping, so a reader can check
every label against its definition.

Class ids (official order):

- MNIST / digits: the digit itself, 0..9.
- Fashion-MNIST: 0 T-shirt/top, 1 Trouser, 2 Pullover, 3 Dress, 4 Coat,
  5 Sandal, 6 Shirt, 7 Sneaker, 8 Bag, 9 Ankle boot.
- CIFAR-10: 0 airplane, 1 automobile, 2 bird, 3 cat, 4 deer, 5 dog, 6 frog,
  7 horse, 8 ship, 9 truck.
- CIFAR-100: 100 fine classes in 20 official superclasses; the fine->coarse
  map is read from the dataset files (``coarse_labels``), not retyped here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from p2pfl.seeding import stream

__all__ = [
    "SEMANTIC_MAPPINGS",
    "SUPERCLASSES",
    "CIFAR10_VEHICLES_ANIMALS",
    "semantic_label_maps",
    "label_shift_groups",
    "subclass_groups",
    "superclasses",
    "superclass_map",
    "label_permutations",
]

# E3a (App. F): each dataset has two labelings of the same images; cluster k
# uses mapping k.  Arrays are indexed by the original class id.
SEMANTIC_MAPPINGS: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = {
    # MNIST: odd/even (0 = even, 1 = odd) vs below-5/above-5 (0 = 0..4, 1 = 5..9).
    "mnist": (
        ("odd_even", (0, 1, 0, 1, 0, 1, 0, 1, 0, 1)),
        ("below5_above5", (0, 0, 0, 0, 0, 1, 1, 1, 1, 1)),
    ),
    # Fashion-MNIST: formal/casual vs seasonal (summer/winter); the paper gives
    # no member lists, ours are:
    #   formal/casual: 0 = casual {T-shirt/top, Pullover, Sandal, Sneaker},
    #                  1 = formal {Trouser, Dress, Coat, Shirt, Bag, Ankle boot}
    #   seasonal:      0 = summer {T-shirt/top, Dress, Sandal, Shirt, Sneaker, Bag},
    #                  1 = winter {Trouser, Pullover, Coat, Ankle boot}
    "fashion_mnist": (
        ("formal_casual", (0, 1, 0, 1, 1, 0, 1, 0, 1, 1)),
        ("seasonal", (0, 1, 1, 0, 1, 0, 0, 0, 0, 1)),
    ),
    # CIFAR-10: semantic vs size; member lists are ours:
    #   semantic: 0 = vehicle {airplane, automobile, ship, truck},
    #             1 = domestic {cat, dog, horse}, 2 = wild {bird, deer, frog}
    #   size:     0 = large {airplane, ship, truck},
    #             1 = medium {automobile, deer, horse}, 2 = small {bird, cat, dog, frog}
    "cifar10": (
        ("semantic", (0, 0, 2, 1, 2, 1, 2, 1, 0, 0)),
        ("size", (0, 1, 2, 2, 1, 2, 2, 1, 0, 0)),
    ),
}
SEMANTIC_MAPPINGS["digits"] = SEMANTIC_MAPPINGS["mnist"]
SEMANTIC_MAPPINGS["digits28"] = SEMANTIC_MAPPINGS["mnist"]

# CIFAR-10 K=2 label shift (Sec. IV-A): "one cluster receives vehicles and the
# other animals".
CIFAR10_VEHICLES_ANIMALS: tuple[tuple[int, ...], ...] = ((0, 1, 8, 9), (2, 3, 4, 5, 6, 7))

# E2a (App. D): superclasses, each an ordered list of subclasses.  Covariate
# cluster k sees subclasses k, k+K, k+2K, ... of every superclass (round robin),
# and every cluster predicts the superclass index.  The order puts the paper's
# CIFAR-10 example first: with K=2 cluster 0 sees trucks and dogs, cluster 1
# cars and cats.  For the grey-scale sets (no definition in the paper):
#   MNIST / digits: below-5 {0..4} vs 5-and-above {5..9}             (K <= 5)
#   Fashion-MNIST: clothing {T-shirt, Trouser, Pullover, Dress, Coat, Shirt}
#                  vs shoes-and-bags {Sandal, Sneaker, Ankle boot, Bag} (K <= 4)
#   CIFAR-10: vehicle {truck, automobile, ship, airplane}
#             vs animal {dog, cat, horse, deer, bird, frog}           (K <= 4)
#   CIFAR-100: the 20 official superclasses, fine ids ascending        (K <= 5)
SUPERCLASSES: dict[str, tuple[tuple[int, ...], ...]] = {
    "mnist": ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9)),
    "fashion_mnist": ((0, 1, 2, 3, 4, 6), (5, 7, 9, 8)),
    "cifar10": ((9, 1, 8, 0), (5, 3, 7, 4, 2, 6)),
}
SUPERCLASSES["digits"] = SUPERCLASSES["mnist"]
SUPERCLASSES["digits28"] = SUPERCLASSES["mnist"]


def superclasses(dataset: str, fine_to_coarse: np.ndarray | None = None) -> tuple[tuple[int, ...], ...]:
    """The E2a superclass structure of ``dataset`` (CIFAR-100 from its coarse map)."""
    if dataset in SUPERCLASSES:
        return SUPERCLASSES[dataset]
    if fine_to_coarse is not None:
        n_coarse = int(fine_to_coarse.max()) + 1
        return tuple(tuple(int(f) for f in np.flatnonzero(fine_to_coarse == c)) for c in range(n_coarse))
    raise KeyError(dataset)


def semantic_label_maps(dataset: str) -> list[np.ndarray]:
    """E3a: one int64 label map (original class -> task label) per cluster."""
    return [np.asarray(m, dtype=np.int64) for _, m in SEMANTIC_MAPPINGS[dataset]]


def label_shift_groups(
    dataset: str, num_classes: int, n_clusters: int, fine_to_coarse: np.ndarray | None = None,
    classes_per_cluster: int | None = None,
) -> list[tuple[int, ...]]:
    """E1: disjoint class groups, one per cluster, by a deterministic mapping.

    CIFAR-10 with K=2 is vehicles vs animals (as in the paper). CIFAR-100 splits
    its 20 official superclasses into K contiguous blocks (K=20: one superclass
    per cluster). Otherwise classes 0..C-1 are split into K contiguous blocks
    whose sizes differ by at most one (K=3 on 10 classes: 0-3, 4-6, 7-9).

    ``classes_per_cluster`` c (not in the paper: label shift with less headroom between groups)
    gives cluster k the c classes floor(k C / K), ... cyclically (K=4, C=10, c=5: 0-4, 2-6,
    5-9, 7-1), so neighbouring groups share classes when c > C / K.
    """
    if classes_per_cluster is not None:
        if not 1 <= classes_per_cluster <= num_classes:
            raise ValueError(f"classes_per_cluster must be in [1, {num_classes}]; got {classes_per_cluster}")
        starts = [k * num_classes // n_clusters for k in range(n_clusters)]
        return [tuple(sorted((s + j) % num_classes for j in range(classes_per_cluster))) for s in starts]
    if dataset == "cifar10" and n_clusters == 2:
        return list(CIFAR10_VEHICLES_ANIMALS)
    if fine_to_coarse is not None:
        n_coarse = int(fine_to_coarse.max()) + 1
        blocks = np.array_split(np.arange(n_coarse), n_clusters)
        return [tuple(int(f) for f in np.flatnonzero(np.isin(fine_to_coarse, b))) for b in blocks]
    return [tuple(int(c) for c in b) for b in np.array_split(np.arange(num_classes), n_clusters)]


def subclass_groups(supers: Sequence[Sequence[int]], n_clusters: int) -> list[tuple[int, ...]]:
    """E2a: the classes covariate cluster k sees (round robin within each superclass)."""
    return [tuple(sorted(int(c) for s in supers for c in list(s)[k::n_clusters])) for k in range(n_clusters)]


def superclass_map(supers: Sequence[Sequence[int]], num_classes: int) -> np.ndarray:
    """Label map original class -> superclass index (E2a labels)."""
    out = np.full(num_classes, -1, dtype=np.int64)
    for s, members in enumerate(supers):
        out[list(members)] = s
    return out


def label_permutations(num_classes: int, n_clusters: int, *, seed: int, identity_first: bool = True) -> list[np.ndarray]:
    """E3b: one label permutation per cluster, pairwise distinct.

    Cluster 0 keeps the identity when ``identity_first``; every other cluster
    draws ``rng.permutation(C)`` from its own stream ``(seed, "data.permutation", k)``
    and redraws (same stream) while it equals an earlier cluster's permutation.
    """
    perms: list[np.ndarray] = []
    for k in range(n_clusters):
        if k == 0 and identity_first:
            perms.append(np.arange(num_classes, dtype=np.int64))
            continue
        rng = stream(seed, "data.permutation", k)
        p = rng.permutation(num_classes).astype(np.int64)
        while any(np.array_equal(p, q) for q in perms):
            p = rng.permutation(num_classes).astype(np.int64)
        perms.append(p)
    return perms
