"""The YAML partition kinds (``data.partition.kind``): one plan per kind, ``PLANS``.

A plan decides who gets which samples, labels and transform; the index
arithmetic it uses (iid, Dirichlet, quantity skew, class groups, cluster
assignment) is in ``p2pfl.data.splitters``, the YAML fields of each kind in
``p2pfl.data.schema``.  Conditional-PCA paper Sec. IV-A (E1-E4) and RND paper (clustered feature
skew).  Devices are assigned to clusters by ``assign_clusters`` (``blocks``
by default: contiguous device ids form a cluster).  Clusters that share a
pool of images (rotation, concept shift, feature skew) split it iid among
all devices; clusters with their own classes (label shift, subclass
covariate shift) split only their classes among their own devices.  Either
way training shards are pairwise disjoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from p2pfl.data import semantic as sem
from p2pfl.data import transforms as tf
from p2pfl.data.datasets import FALLBACKS, Pool, load_dataset
from p2pfl.data.schema import (
    CombinedPartition,
    CovariateSubclassPartition,
    CrossDatasetPartition,
    DataSpec,
    DirichletPartition,
    FeatureSkewPartition,
    LabelPermutationPartition,
    LabelShiftPartition,
    QuantitySkewPartition,
    RotationPartition,
    SemanticConceptPartition,
)
from p2pfl.data.splitters import (
    assign_clusters,
    dirichlet_partition,
    group_partition,
    iid_partition,
    quantity_sizes,
    quantity_skew_partition,
)
from p2pfl.errors import DataError
from p2pfl.seeding import stream, torch_generator

__all__ = ["PLANS", "Plan", "Transform"]

Transform = Callable[[torch.Tensor, str], torch.Tensor]  # (x, "train" | "test") -> x


@dataclass
class Plan:
    """What a partition decides before tensors are built (one entry per device).

    A transform object given to two or more devices must act on each sample alone (a rotation, a
    pattern): the federation then transforms the rows those devices draw once and shares them
    (``p2pfl.data.shards.PoolRows``). A transform that draws per batch (noise from a device's stream)
    is one object per device.
    """

    pools: dict[str, Pool]
    sources: list[str]
    clusters: np.ndarray
    train_index: list[np.ndarray]
    label_maps: list[np.ndarray | None]
    transforms: list[Transform | None]
    num_classes: int


def _pool(spec: DataSpec) -> Pool:
    return load_dataset(spec.dataset, spec.root, spec.download)


def _rng(seed: int) -> np.random.Generator:
    return stream(seed, "data.partition")


def _plan(spec: DataSpec, pool: Pool, clusters: np.ndarray, train: list[np.ndarray],
          label_maps: list[np.ndarray | None] | None = None, transforms: list[Transform | None] | None = None,
          num_classes: int | None = None) -> Plan:
    n = len(train)
    return Plan(
        pools={pool.name: pool},
        sources=[pool.name] * n,
        clusters=np.asarray(clusters, dtype=np.int64),
        train_index=train,
        label_maps=label_maps if label_maps is not None else [None] * n,
        transforms=transforms if transforms is not None else [None] * n,
        num_classes=pool.num_classes if num_classes is None else num_classes,
    )


def _iid(spec: DataSpec, pool: Pool, n: int, seed: int) -> list[np.ndarray]:
    return iid_partition(len(pool.train_y), n, rng=_rng(seed), samples_per_device=spec.samples_per_client,
                         overlap=spec.overlap)


# ---------------------------------------------------------------- one cluster
def plan_iid(spec: DataSpec, n: int, seed: int) -> Plan:
    pool = _pool(spec)
    return _plan(spec, pool, np.zeros(n), _iid(spec, pool, n, seed))


def plan_dirichlet(spec: DataSpec, n: int, seed: int) -> Plan:
    p, pool = spec.partition_as(DirichletPartition), _pool(spec)
    train = dirichlet_partition(pool.train_y, n, p.alpha, rng=_rng(seed), min_samples=p.min_samples,
                                samples_per_device=spec.samples_per_client)
    return _plan(spec, pool, np.zeros(n), train)


def plan_quantity_skew(spec: DataSpec, n: int, seed: int) -> Plan:
    """Sizes from ``quantity_sizes``; their total is the whole pool, or
    n * samples_per_client when that is set (it is then the mean size)."""
    p, pool = spec.partition_as(QuantitySkewPartition), _pool(spec)
    total = len(pool.train_y) if spec.samples_per_client is None else n * spec.samples_per_client
    if total > len(pool.train_y):
        raise DataError(f"{n} devices x samples_per_client={spec.samples_per_client} exceed the {len(pool.train_y)} "
                        "training samples; lower samples_per_client")
    rng = _rng(seed)
    sizes = quantity_sizes(total, n, rng=rng, distribution=p.distribution, beta=p.beta, exponent=p.exponent,
                           min_samples=p.min_samples)
    return _plan(spec, pool, np.zeros(n), quantity_skew_partition(len(pool.train_y), sizes, rng=rng))


# ---------------------------------------------------------------- E1 / E2a: class groups per cluster
def plan_label_shift(spec: DataSpec, n: int, seed: int) -> Plan:
    """E1: cluster k draws only from class group k; labels keep their class ids."""
    p, pool = spec.partition_as(LabelShiftPartition), _pool(spec)
    clusters = assign_clusters(n, p.n_clusters, p.assignment)
    groups = sem.label_shift_groups(spec.dataset, pool.num_classes, p.n_clusters, pool.fine_to_coarse,
                                    p.classes_per_cluster)
    train = group_partition(pool.train_y, clusters, groups, rng=_rng(seed), samples_per_device=spec.samples_per_client,
                            overlap=spec.overlap)
    return _plan(spec, pool, clusters, train)


def plan_covariate_subclass(spec: DataSpec, n: int, seed: int) -> Plan:
    """E2a: cluster k sees subclass group k; every cluster predicts the superclass."""
    p, pool = spec.partition_as(CovariateSubclassPartition), _pool(spec)
    clusters = assign_clusters(n, p.n_clusters, p.assignment)
    supers = sem.superclasses(spec.dataset, pool.fine_to_coarse)
    groups = sem.subclass_groups(supers, p.n_clusters)
    train = group_partition(pool.train_y, clusters, groups, rng=_rng(seed), samples_per_device=spec.samples_per_client,
                            overlap=spec.overlap)
    to_super = sem.superclass_map(supers, pool.num_classes)
    return _plan(spec, pool, clusters, train, label_maps=[to_super] * n, num_classes=len(supers))


# ---------------------------------------------------------------- shared pool, per-cluster labels or inputs
def plan_rotation(spec: DataSpec, n: int, seed: int) -> Plan:
    """E2b: cluster k's train and test images are rotated by angles[k] degrees."""
    p, pool = spec.partition_as(RotationPartition), _pool(spec)
    clusters = assign_clusters(n, len(p.angles), p.assignment)
    per_cluster = [_rotation(a) for a in p.angles]
    return _plan(spec, pool, clusters, _iid(spec, pool, n, seed), transforms=[per_cluster[c] for c in clusters])


def _rotation(angle: float) -> Transform:
    return lambda x, split: tf.rotate(x, angle)


def plan_semantic_concept(spec: DataSpec, n: int, seed: int) -> Plan:
    """E3a: cluster k labels by ``SEMANTIC_MAPPINGS[dataset][k]``."""
    p, pool = spec.partition_as(SemanticConceptPartition), _pool(spec)
    maps = sem.semantic_label_maps(spec.dataset)
    clusters = assign_clusters(n, len(maps), p.assignment)
    n_out = int(max(m.max() for m in maps)) + 1
    return _plan(spec, pool, clusters, _iid(spec, pool, n, seed), label_maps=[maps[c] for c in clusters], num_classes=n_out)


def plan_label_permutation(spec: DataSpec, n: int, seed: int) -> Plan:
    """E3b: cluster k's label y becomes perm_k[y] (``semantic.label_permutations``)."""
    p, pool = spec.partition_as(LabelPermutationPartition), _pool(spec)
    clusters = assign_clusters(n, p.n_clusters, p.assignment)
    perms = sem.label_permutations(pool.num_classes, p.n_clusters, seed=seed, identity_first=p.identity_first)
    return _plan(spec, pool, clusters, _iid(spec, pool, n, seed), label_maps=[perms[c] for c in clusters])


def plan_feature_skew(spec: DataSpec, n: int, seed: int) -> Plan:
    """RND paper: same label distribution everywhere; group k's inputs get
    Gaussian noise of std noise_levels[k] (fresh per sample, drawn from the
    device's own stream), the fixed simplex pattern k (``pattern``: per pixel,
    unsmoothed; ours) or the authors' smoothed pattern k (``smoothed_pattern``,
    ``tf.smoothed_patterns`` from the ``data.pattern`` torch stream), clamped to [0, 1]."""
    p, pool = spec.partition_as(FeatureSkewPartition), _pool(spec)
    clusters = assign_clusters(n, p.n_clusters, p.assignment)
    transforms: list[Transform | None]
    if p.mode == "noise":
        levels = tf.noise_levels(p.noise_std, p.n_clusters)
        transforms = [_noise(levels[c], seed, i) for i, c in enumerate(clusters)]
    else:
        if p.mode == "smoothed_pattern":
            patterns = tf.smoothed_patterns(p.n_clusters, pool.input_shape, p.rms, smooth=p.smooth,
                                            generator=torch_generator(seed, "data.pattern"))
        else:
            patterns = tf.simplex_patterns(p.n_clusters, pool.input_shape, p.rms, rng=stream(seed, "data.pattern"))
        per_cluster = [_pattern(pattern) for pattern in patterns]
        transforms = [per_cluster[c] for c in clusters]
    return _plan(spec, pool, clusters, _iid(spec, pool, n, seed), transforms=transforms)


def _noise(std: float, seed: int, device: int) -> Transform:
    return lambda x, split: tf.add_noise(x, std, rng=stream(seed, "data.noise", device, 0 if split == "train" else 1))


def _pattern(pattern: torch.Tensor) -> Transform:
    return lambda x, split: tf.add_pattern(x, pattern)


# ---------------------------------------------------------------- E4
def plan_cross_dataset(spec: DataSpec, n: int, seed: int) -> Plan:
    """E4a: cluster 0 draws from data.dataset, cluster k from others[k-1]; all
    keep their own 10-class labels.  Devices that use the same dataset split
    it iid.  With ``fallback``, MNIST without files becomes digits28."""
    p = spec.partition_as(CrossDatasetPartition)
    names = [spec.dataset] + list(p.others)
    pools: dict[str, Pool] = {}
    resolved = []
    for name in names:
        try:
            pool = load_dataset(name, spec.root if name == spec.dataset else _other_root(spec, name), spec.download)
        except DataError:
            if not (p.fallback and name in FALLBACKS):
                raise
            pool = load_dataset(FALLBACKS[name])
        pools[pool.name] = pool
        resolved.append(pool.name)
    clusters = assign_clusters(n, len(names), p.assignment)
    sources = [resolved[c] for c in clusters]
    train: list[np.ndarray] = [np.empty(0, np.int64)] * n
    rng = _rng(seed)
    for src in dict.fromkeys(resolved):
        devs = [i for i in range(n) if sources[i] == src]
        parts = iid_partition(len(pools[src].train_y), len(devs), rng=rng, samples_per_device=spec.samples_per_client)
        for i, part in zip(devs, parts):
            train[i] = part
    return Plan(pools=pools, sources=sources, clusters=clusters, train_index=train, label_maps=[None] * n,
                transforms=[None] * n, num_classes=max(pl.num_classes for pl in pools.values()))


def _other_root(spec: DataSpec, name: str) -> str | None:
    """Other datasets look in data.root too (torchvision keeps them side by side)."""
    return spec.root


def plan_combined(spec: DataSpec, n: int, seed: int) -> Plan:
    """E4b: cluster id = g * C + c: concept group g (semantic mapping g of E3a)
    and covariate cluster c (subclass group c of E2a).  The two concept groups
    share each covariate cluster's images, split disjointly among their devices."""
    p, pool = spec.partition_as(CombinedPartition), _pool(spec)
    c_count = p.covariate_clusters
    clusters = assign_clusters(n, 2 * c_count, p.assignment)
    covariate = clusters % c_count
    concept = clusters // c_count
    groups = sem.subclass_groups(sem.superclasses(spec.dataset, pool.fine_to_coarse), c_count)
    train = group_partition(pool.train_y, covariate, groups, rng=_rng(seed), samples_per_device=spec.samples_per_client,
                            overlap=spec.overlap)
    maps = sem.semantic_label_maps(spec.dataset)
    n_out = int(max(m.max() for m in maps)) + 1
    return _plan(spec, pool, clusters, train, label_maps=[maps[g] for g in concept], num_classes=n_out)


PLANS: dict[str, Callable[[DataSpec, int, int], Plan]] = {
    "iid": plan_iid,
    "dirichlet": plan_dirichlet,
    "quantity_skew": plan_quantity_skew,
    "label_shift": plan_label_shift,
    "covariate_subclass": plan_covariate_subclass,
    "rotation": plan_rotation,
    "semantic_concept": plan_semantic_concept,
    "label_permutation": plan_label_permutation,
    "cross_dataset": plan_cross_dataset,
    "combined": plan_combined,
    "feature_skew": plan_feature_skew,
}
