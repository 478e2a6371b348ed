"""Index splitters: pure functions from labels (or sizes) to per-device index arrays.

The building blocks of the partition kinds in ``p2pfl.data.partitions`` (and of
local test sets, ``local_test_partition``).

Each public function checks its arguments and raises ``DataError`` with the
rule and the value; a private ``_`` twin does the work on valid input (the
scikit-learn ``kmeans_plusplus`` / ``_kmeans_plusplus`` split).  Every
function takes an explicit ``rng`` (numpy Generator) and returns sorted int64
index arrays into the pool, one per device, pairwise disjoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from p2pfl.errors import DataError

__all__ = [
    "assign_clusters",
    "iid_partition",
    "dirichlet_partition",
    "quantity_sizes",
    "quantity_skew_partition",
    "group_partition",
    "local_test_partition",
    "apportion",
]


def _group_by_owner(owner: np.ndarray, index: np.ndarray, n_devices: int) -> list[np.ndarray]:
    """Split ``index`` by ``owner`` (device id) into sorted int64 arrays."""
    order = np.lexsort((index, owner))
    owner, index = owner[order], index[order]
    cuts = np.searchsorted(owner, np.arange(1, n_devices))
    return [a.astype(np.int64, copy=False) for a in np.split(index, cuts)]


def apportion(total: int, weights: np.ndarray) -> np.ndarray:
    """Largest-remainder rounding: non-negative ints proportional to ``weights`` summing to ``total``.

    Ties go to the lower position, so the result is deterministic.
    """
    w = np.asarray(weights, dtype=np.float64)
    quota = w / w.sum() * total
    base = np.floor(quota).astype(np.int64)
    rest = int(total - base.sum())
    if rest > 0:
        order = np.argsort(-(quota - base), kind="stable")
        base[order[:rest]] += 1
    return base


# ---------------------------------------------------------------- clusters
def assign_clusters(n_devices: int, n_clusters: int, mode: str = "blocks") -> np.ndarray:
    """Ground-truth cluster of each device, as an int64 array of length ``n_devices``.

    ``blocks``: contiguous blocks, device i -> floor(i * K / n) (sizes differ by
    at most one; with n = K * m, devices c*m .. c*m+m-1 form cluster c).
    ``round_robin``: device i -> i % K.
    """
    if n_clusters < 1 or n_clusters > n_devices:
        raise DataError(f"n_clusters must be in 1..n_devices={n_devices}; got {n_clusters}")
    i = np.arange(n_devices, dtype=np.int64)
    if mode == "blocks":
        return (i * n_clusters) // n_devices
    if mode == "round_robin":
        return i % n_clusters
    raise DataError(f"cluster assignment must be 'blocks' or 'round_robin'; got {mode!r}")


# ---------------------------------------------------------------- iid
def iid_partition(
    n_samples: int, n_devices: int, *, rng: np.random.Generator, samples_per_device: int | None = None,
    overlap: bool = False,
) -> list[np.ndarray]:
    """Uniform random split of ``range(n_samples)``.

    With ``samples_per_device`` every device gets exactly that many samples;
    otherwise all samples are dealt and sizes differ by at most one. With
    ``overlap`` each device draws its ``samples_per_device`` independently
    (without replacement on the device, so a sample may sit on several devices).
    """
    if n_devices < 1:
        raise DataError(f"n_devices must be >= 1; got {n_devices}")
    if overlap:
        return _overlapping(np.arange(n_samples, dtype=np.int64), n_devices, samples_per_device, rng, "the pool")
    need = n_devices if samples_per_device is None else n_devices * samples_per_device
    if need > n_samples:
        raise DataError(
            f"{n_devices} devices x {samples_per_device or 1} samples need {need} training samples; "
            f"the pool has {n_samples}; lower samples_per_client or the number of devices, or set data.overlap: true"
        )
    return _iid_split(n_samples, n_devices, rng, samples_per_device)


def _overlapping(members: np.ndarray, n_devices: int, per: int | None, rng: np.random.Generator,
                 what: str) -> list[np.ndarray]:
    """Each of ``n_devices`` devices draws ``per`` of ``members`` without replacement, independently."""
    if per is None:
        raise DataError("data.overlap needs data.samples_per_client (how many samples each device draws)")
    if per > members.size:
        raise DataError(f"a device draws {per} samples but {what} has {members.size}; lower samples_per_client")
    return [np.sort(members[rng.choice(members.size, per, replace=False)]) for _ in range(n_devices)]


def _iid_split(n_samples: int, n_devices: int, rng: np.random.Generator, per: int | None) -> list[np.ndarray]:
    perm = rng.permutation(n_samples)
    if per is not None:
        perm = perm[: n_devices * per]
    return [np.sort(p).astype(np.int64) for p in np.array_split(perm, n_devices)]


# ---------------------------------------------------------------- dirichlet label skew
def dirichlet_partition(
    labels: np.ndarray,
    n_devices: int,
    alpha: float,
    *,
    rng: np.random.Generator,
    min_samples: int = 1,
    samples_per_device: int | None = None,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Label-skewed split: class proportions drawn from Dirichlet(alpha).

    Without ``samples_per_device`` (all data dealt; Hsu et al. 2019 / NIID-Bench):
    for each class c, q_c ~ Dir(alpha * 1_n) and the class-c samples are cut at
    the cumulative fractions of q_c; the whole draw is repeated (same stream)
    until every device holds at least ``min_samples`` samples.

    With ``samples_per_device`` = s (fixed sizes): device i in order draws
    p_i ~ Dir(alpha * 1_C) and takes s samples distributed Multinomial(s, p_i),
    restricted to classes that still have samples; a shortfall is redrawn over
    the classes left, so later devices lean toward leftover classes.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise DataError(f"labels must be a non-empty 1-d array; got shape {labels.shape}")
    if not alpha > 0:
        raise DataError(f"dirichlet alpha must be > 0; got {alpha}")
    if n_devices < 1:
        raise DataError(f"n_devices must be >= 1; got {n_devices}")
    if samples_per_device is not None:
        if n_devices * samples_per_device > labels.size:
            raise DataError(
                f"{n_devices} devices x {samples_per_device} samples need {n_devices * samples_per_device} "
                f"training samples; the pool has {labels.size}; lower samples_per_client"
            )
        return _dirichlet_fixed(labels, n_devices, alpha, rng, samples_per_device)
    if n_devices * min_samples > labels.size:
        raise DataError(f"min_samples={min_samples} x {n_devices} devices exceeds the {labels.size} training samples")
    return _dirichlet_split(labels, n_devices, alpha, rng, min_samples, max_tries)


def _dirichlet_split(
    labels: np.ndarray, n: int, alpha: float, rng: np.random.Generator, min_samples: int, max_tries: int
) -> list[np.ndarray]:
    classes = np.unique(labels)
    by_class = [np.flatnonzero(labels == c) for c in classes]
    for _ in range(max_tries):
        owners, idx = [], []
        for members in by_class:
            members = rng.permutation(members)
            q = rng.dirichlet(np.full(n, alpha))
            cuts = (np.cumsum(q)[:-1] * members.size).astype(np.int64)
            counts = np.diff(np.concatenate(([0], cuts, [members.size])))
            owners.append(np.repeat(np.arange(n), counts))
            idx.append(members)
        owner = np.concatenate(owners)
        if np.bincount(owner, minlength=n).min() >= min_samples:
            return _group_by_owner(owner, np.concatenate(idx), n)
    raise DataError(
        f"dirichlet alpha={alpha} left a device with fewer than {min_samples} samples in {max_tries} draws; "
        "raise alpha, lower min_samples or use fewer devices"
    )


def _dirichlet_fixed(labels: np.ndarray, n: int, alpha: float, rng: np.random.Generator, per: int) -> list[np.ndarray]:
    classes, inverse = np.unique(labels, return_inverse=True)
    remaining = np.bincount(inverse, minlength=classes.size).astype(np.int64)
    counts = np.zeros((n, classes.size), dtype=np.int64)
    for i in range(n):
        p = rng.dirichlet(np.full(classes.size, alpha))
        want = per
        while want > 0:
            avail = remaining - counts[i]
            w = p * (avail > 0)
            if w.sum() <= 0:
                w = (avail > 0).astype(np.float64)
            draw = np.minimum(rng.multinomial(want, w / w.sum()), avail)
            counts[i] += draw
            want -= int(draw.sum())
        remaining -= counts[i]
    owners, idx = [], []
    for c in range(classes.size):
        members = rng.permutation(np.flatnonzero(inverse == c))[: counts[:, c].sum()]
        owners.append(np.repeat(np.arange(n), counts[:, c]))
        idx.append(members)
    return _group_by_owner(np.concatenate(owners), np.concatenate(idx), n)


# ---------------------------------------------------------------- quantity skew
def quantity_sizes(
    total: int,
    n_devices: int,
    *,
    rng: np.random.Generator,
    distribution: str = "dirichlet",
    beta: float = 0.5,
    exponent: float = 1.0,
    min_samples: int = 1,
) -> np.ndarray:
    """Device sizes summing exactly to ``total``, each >= ``min_samples``.

    ``dirichlet``: shares q ~ Dir(beta * 1_n).  ``power_law``: the device of rank
    r (ranks are a random permutation of devices) gets share ~ (r + 1) ** -exponent.
    The ``total - n * min_samples`` samples beyond the minimum are apportioned
    to the shares by largest remainder.
    """
    if n_devices < 1 or min_samples < 0:
        raise DataError(f"n_devices must be >= 1 and min_samples >= 0; got {n_devices}, {min_samples}")
    if n_devices * min_samples > total:
        raise DataError(f"min_samples={min_samples} x {n_devices} devices exceeds the {total} samples")
    shares: np.ndarray
    if distribution == "dirichlet":
        if not beta > 0:
            raise DataError(f"quantity_skew beta must be > 0; got {beta}")
        shares = rng.dirichlet(np.full(n_devices, beta))
    elif distribution == "power_law":
        if not exponent >= 0:
            raise DataError(f"quantity_skew exponent must be >= 0; got {exponent}")
        ranks = rng.permutation(n_devices)
        shares = (ranks + 1.0) ** -exponent
    else:
        raise DataError(f"quantity_skew distribution must be 'dirichlet' or 'power_law'; got {distribution!r}")
    return min_samples + apportion(total - n_devices * min_samples, shares)


def quantity_skew_partition(n_samples: int, sizes: Sequence[int] | np.ndarray, *,
                            rng: np.random.Generator) -> list[np.ndarray]:
    """Random split of ``range(n_samples)`` into pieces of the given ``sizes`` (labels iid)."""
    size = np.asarray(sizes, dtype=np.int64)
    if size.min(initial=0) < 0 or size.sum() > n_samples:
        raise DataError(f"sizes must be >= 0 and sum to at most {n_samples}; got sum {int(size.sum())}")
    perm = rng.permutation(n_samples)[: size.sum()]
    return [np.sort(p).astype(np.int64) for p in np.split(perm, np.cumsum(size)[:-1])]


# ---------------------------------------------------------------- class groups (cluster partitions)
def group_partition(
    labels: np.ndarray,
    device_group: Sequence[int] | np.ndarray,
    group_classes: Sequence[Sequence[int]],
    *,
    rng: np.random.Generator,
    samples_per_device: int | None = None,
    overlap: bool = False,
) -> list[np.ndarray]:
    """Split each group's samples (those whose label is in its class set) among its devices.

    ``device_group[i]`` is the group of device i; ``group_classes[g]`` the
    classes group g draws from (disjoint class sets, unless ``overlap``).  Within
    a group the samples are shuffled and dealt in device-id order: exactly
    ``samples_per_device`` each, or all of them with sizes differing by at most one.
    With ``overlap`` each device draws its ``samples_per_device`` from its group's
    samples independently, in device-id order.
    """
    labels = np.asarray(labels)
    groups = np.asarray(device_group, dtype=np.int64)
    n_groups = len(group_classes)
    seen: set[int] = set()
    for cls in group_classes:
        if seen & set(cls) and not overlap:
            raise DataError(f"class groups must be disjoint; classes {sorted(seen & set(cls))} are in two groups "
                            "(groups that share classes need data.overlap: true)")
        seen |= set(cls)
    if groups.min(initial=0) < 0 or groups.max(initial=0) >= n_groups:
        raise DataError(f"device groups must lie in 0..{n_groups - 1}")
    if overlap:
        out: list[np.ndarray] = [np.empty(0, np.int64)] * groups.size
        for g, cls in enumerate(group_classes):
            devices = np.flatnonzero(groups == g)
            members = np.flatnonzero(np.isin(labels, cls))
            for i, idx in zip(devices, _overlapping(members, devices.size, samples_per_device, rng,
                                                    f"cluster {g} (classes {list(cls)})")):
                out[i] = idx
        return out
    for g, cls in enumerate(group_classes):
        m = int((groups == g).sum())
        have = int(np.isin(labels, cls).sum())
        need = m * (samples_per_device or 1)
        if m and need > have:
            raise DataError(
                f"cluster {g} (classes {list(cls)}) has {have} training samples but its {m} devices need {need}; "
                "lower samples_per_client or the number of devices, or set data.overlap: true"
            )
    return _group_split(labels, groups, group_classes, rng, samples_per_device)


def _group_split(labels, device_group, group_classes, rng, per) -> list[np.ndarray]:
    n = device_group.size
    out: list[np.ndarray] = [np.empty(0, np.int64)] * n
    for g, cls in enumerate(group_classes):
        devices = np.flatnonzero(device_group == g)
        if devices.size == 0:
            continue
        members = rng.permutation(np.flatnonzero(np.isin(labels, cls)))
        if per is not None:
            members = members[: devices.size * per]
        for d, part in zip(devices, np.array_split(members, devices.size)):
            out[d] = np.sort(part).astype(np.int64)
    return out


# ---------------------------------------------------------------- local test sets
def local_test_partition(
    train_labels: Sequence[np.ndarray],
    test_labels: np.ndarray,
    fraction: float,
    *,
    rng: np.random.Generator,
    size: int | None = None,
) -> list[np.ndarray]:
    """Local test sets that follow each device's training label distribution.

    Device i with n_i training samples gets t_i = max(1, round(n_i * f / (1 - f)))
    test samples (so test is a fraction f of its local data), or ``size`` of them
    when it is given (and n_i > 0), apportioned over
    classes in proportion to its training counts (largest remainder) and capped
    at the class's pool size.  Test samples of class c are dealt from one seeded
    shuffle of the class-c pool in device-id order: disjoint across devices
    while the pool suffices; beyond that the dealing wraps around the shuffle,
    so overlap is spread evenly and no sample repeats within a device.
    """
    if not 0 < fraction < 1:
        raise DataError(f"test_fraction must be in (0, 1); got {fraction}")
    if size is not None and size < 1:
        raise DataError(f"test_samples_per_client must be >= 1; got {size}")
    test_labels = np.asarray(test_labels)
    return _test_split([np.asarray(t) for t in train_labels], test_labels, fraction, rng, size)


def _test_split(train_labels, test_labels, fraction, rng, size=None) -> list[np.ndarray]:
    n = len(train_labels)
    n_classes = int(max([test_labels.max(initial=-1)] + [t.max(initial=-1) for t in train_labels])) + 1
    counts = np.stack([np.bincount(t, minlength=n_classes) for t in train_labels]) if n else np.zeros((0, n_classes), np.int64)
    avail = np.bincount(test_labels, minlength=n_classes)
    sizes = counts.sum(1)
    per = np.maximum(1, np.floor(sizes * fraction / (1 - fraction) + 0.5)) if size is None else np.full(n, size)
    want = np.where(sizes > 0, per, 0).astype(np.int64)
    take = np.zeros_like(counts)
    for i in range(n):
        if want[i]:
            take[i] = apportion(int(want[i]), counts[i])
    take = np.minimum(take, avail[None, :])
    owners, idx = [], []
    for c in range(n_classes):
        total = int(take[:, c].sum())
        if total == 0:
            continue
        pool_c = rng.permutation(np.flatnonzero(test_labels == c))
        idx.append(pool_c[np.arange(total) % pool_c.size])
        owners.append(np.repeat(np.arange(n), take[:, c]))
    if not idx:
        return [np.empty(0, np.int64) for _ in range(n)]
    return _group_by_owner(np.concatenate(owners), np.concatenate(idx), n)
