"""Index splitters (p2pfl.data.splitters): disjointness, sizes, label support, determinism."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pfl.data.splitters import (
    apportion,
    assign_clusters,
    dirichlet_partition,
    group_partition,
    iid_partition,
    local_test_partition,
    quantity_sizes,
    quantity_skew_partition,
)
from p2pfl.errors import DataError

FAST = settings(max_examples=15, deadline=None)


def _labels(n: int, classes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, classes, size=n)


def _assert_disjoint(parts: list[np.ndarray]) -> None:
    allidx = np.concatenate(parts)
    assert np.unique(allidx).size == allidx.size


@FAST
@given(seed=st.integers(0, 2**32 - 1), n_samples=st.integers(20, 500), n_devices=st.integers(1, 20))
def test_iid_partition_deals_everything_disjointly(seed, n_samples, n_devices):
    if n_devices > n_samples:
        return
    parts = iid_partition(n_samples, n_devices, rng=np.random.default_rng(seed))
    _assert_disjoint(parts)
    sizes = [p.size for p in parts]
    assert sum(sizes) == n_samples and max(sizes) - min(sizes) <= 1
    assert all(np.all(np.diff(p) > 0) for p in parts)  # sorted


@FAST
@given(seed=st.integers(0, 2**32 - 1), per=st.integers(1, 30), n_devices=st.integers(1, 10))
def test_iid_partition_fixed_sizes(seed, per, n_devices):
    parts = iid_partition(400, n_devices, rng=np.random.default_rng(seed), samples_per_device=per)
    assert [p.size for p in parts] == [per] * n_devices
    _assert_disjoint(parts)


def test_iid_partition_too_many_samples_is_a_data_error():
    with pytest.raises(DataError, match="need 110 training samples; the pool has 100"):
        iid_partition(100, 11, rng=np.random.default_rng(0), samples_per_device=10)


@FAST
@given(seed=st.integers(0, 2**32 - 1), n_devices=st.integers(2, 15), alpha=st.floats(0.05, 10))
def test_dirichlet_all_data_disjoint_and_complete(seed, n_devices, alpha):
    labels = _labels(600, 10, seed)
    parts = dirichlet_partition(labels, n_devices, alpha, rng=np.random.default_rng(seed), min_samples=2)
    _assert_disjoint(parts)
    assert sum(p.size for p in parts) == labels.size
    assert min(p.size for p in parts) >= 2


@FAST
@given(seed=st.integers(0, 2**32 - 1), n_devices=st.integers(1, 12), per=st.integers(1, 50), alpha=st.floats(0.05, 5))
def test_dirichlet_fixed_sizes_exact(seed, n_devices, per, alpha):
    labels = _labels(600, 10, seed)
    parts = dirichlet_partition(labels, n_devices, alpha, rng=np.random.default_rng(seed), samples_per_device=per)
    assert [p.size for p in parts] == [per] * n_devices
    _assert_disjoint(parts)


def test_dirichlet_small_alpha_concentrates_labels():
    labels = _labels(5000, 10, 1)
    skewed = dirichlet_partition(labels, 20, 0.05, rng=np.random.default_rng(0))
    flat = dirichlet_partition(labels, 20, 1000.0, rng=np.random.default_rng(0))

    def top_share(parts):
        return np.mean([np.bincount(labels[p], minlength=10).max() / p.size for p in parts])

    assert top_share(skewed) > 0.6
    assert top_share(flat) < 0.2


def test_dirichlet_same_rng_seed_same_result_and_different_seed_differs():
    labels = _labels(500, 10, 3)
    a = dirichlet_partition(labels, 7, 0.5, rng=np.random.default_rng(11))
    b = dirichlet_partition(labels, 7, 0.5, rng=np.random.default_rng(11))
    c = dirichlet_partition(labels, 7, 0.5, rng=np.random.default_rng(12))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_dirichlet_impossible_min_samples_raises():
    with pytest.raises(DataError, match="min_samples=50 x 10 devices exceeds the 100"):
        dirichlet_partition(_labels(100, 10, 0), 10, 0.5, rng=np.random.default_rng(0), min_samples=50)
    with pytest.raises(DataError, match="alpha must be > 0; got 0"):
        dirichlet_partition(_labels(100, 10, 0), 10, 0, rng=np.random.default_rng(0))


@FAST
@given(seed=st.integers(0, 2**32 - 1), n_devices=st.integers(1, 30), beta=st.floats(0.05, 5), min_samples=st.integers(1, 5),
       dist=st.sampled_from(["dirichlet", "power_law"]))
def test_quantity_sizes_sum_and_minimum(seed, n_devices, beta, min_samples, dist):
    sizes = quantity_sizes(1000, n_devices, rng=np.random.default_rng(seed), distribution=dist, beta=beta,
                           exponent=1.5, min_samples=min_samples)
    assert sizes.sum() == 1000 and sizes.min() >= min_samples and sizes.size == n_devices
    parts = quantity_skew_partition(1000, sizes, rng=np.random.default_rng(seed))
    assert [p.size for p in parts] == sizes.tolist()
    _assert_disjoint(parts)


def test_power_law_sizes_follow_ranks():
    sizes = quantity_sizes(10_000, 4, rng=np.random.default_rng(0), distribution="power_law", exponent=1.0, min_samples=0)
    # shares 1, 1/2, 1/3, 1/4 of 25/12 -> 4800, 2400, 1600, 1200 in some device order
    assert sorted(sizes.tolist(), reverse=True) == [4800, 2400, 1600, 1200]


def test_apportion_largest_remainder():
    assert apportion(10, np.array([1, 1, 1])).tolist() == [4, 3, 3]
    assert apportion(7, np.array([0.5, 0.25, 0.25])).tolist() == [3, 2, 2]  # 3.5, 1.75, 1.75


@pytest.mark.parametrize("n,k,mode,expected", [
    (6, 2, "blocks", [0, 0, 0, 1, 1, 1]),
    (6, 2, "round_robin", [0, 1, 0, 1, 0, 1]),
    (7, 3, "blocks", [0, 0, 0, 1, 1, 2, 2]),
])
def test_assign_clusters(n, k, mode, expected):
    assert assign_clusters(n, k, mode).tolist() == expected


def test_assign_clusters_more_clusters_than_devices():
    with pytest.raises(DataError, match=r"n_clusters must be in 1\.\.n_devices=3; got 4"):
        assign_clusters(3, 4)


@FAST
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 5), per=st.one_of(st.none(), st.integers(1, 20)))
def test_group_partition_respects_class_groups(seed, m, per):
    labels = _labels(1000, 10, seed)
    groups = [(0, 1, 2, 3), (4, 5, 6), (7, 8, 9)]
    device_group = np.repeat(np.arange(3), m)
    parts = group_partition(labels, device_group, groups, rng=np.random.default_rng(seed), samples_per_device=per)
    _assert_disjoint(parts)
    for d, part in enumerate(parts):
        assert set(labels[part].tolist()) <= set(groups[device_group[d]])
        if per is not None:
            assert part.size == per
    if per is None:  # everything dealt
        assert sum(p.size for p in parts) == labels.size


def test_group_partition_overlapping_groups_rejected():
    with pytest.raises(DataError, match=r"classes \[2\] are in two groups"):
        group_partition(_labels(50, 5, 0), [0, 1], [(0, 1, 2), (2, 3)], rng=np.random.default_rng(0))


def test_overlap_draws_fixed_sizes_beyond_the_pool_without_repeats_on_a_device() -> None:
    parts = iid_partition(50, 30, rng=np.random.default_rng(1), samples_per_device=20, overlap=True)
    assert len(parts) == 30 and all(len(p) == 20 == len(set(p.tolist())) for p in parts)
    assert all(np.all(np.diff(p) > 0) and p.min() >= 0 and p.max() < 50 for p in parts)
    assert len({tuple(p) for p in parts}) == 30  # independent draws
    again = iid_partition(50, 30, rng=np.random.default_rng(1), samples_per_device=20, overlap=True)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    with pytest.raises(DataError, match=r"need 600 training samples; the pool has 50; .* or set data.overlap: true"):
        iid_partition(50, 30, rng=np.random.default_rng(1), samples_per_device=20)
    with pytest.raises(DataError, match="a device draws 60 samples but the pool has 50"):
        iid_partition(50, 3, rng=np.random.default_rng(1), samples_per_device=60, overlap=True)


def test_group_partition_overlap_keeps_each_device_in_its_groups_classes() -> None:
    labels = _labels(300, 4, 0)
    groups = [[0, 1], [2, 3]]
    device_group = [0] * 20 + [1] * 20
    parts = group_partition(labels, device_group, groups, rng=np.random.default_rng(2), samples_per_device=50,
                            overlap=True)
    for i, p in enumerate(parts):
        assert len(p) == 50 == len(set(p.tolist()))
        assert set(labels[p].tolist()) <= set(groups[device_group[i]])
    assert sum(len(p) for p in parts) > (labels < 2).sum()  # more than the pool: samples are shared
    with pytest.raises(DataError, match=r"a device draws 400 samples but cluster 0 \(classes \[0, 1\]\) has 137"):
        group_partition(labels, device_group, groups, rng=np.random.default_rng(2), samples_per_device=400, overlap=True)


@FAST
@given(seed=st.integers(0, 2**32 - 1), n_devices=st.integers(1, 12), frac=st.floats(0.05, 0.5))
def test_local_test_sets_follow_train_labels_and_are_disjoint_when_pool_allows(seed, n_devices, frac):
    rng = np.random.default_rng(seed)
    train_labels = [rng.choice([0, 3, 7], size=int(rng.integers(5, 40))) for _ in range(n_devices)]
    test_pool = np.repeat(np.arange(10), 200)  # big enough for every demand here
    parts = local_test_partition(train_labels, test_pool, frac, rng=np.random.default_rng(seed))
    _assert_disjoint(parts)
    for tl, part in zip(train_labels, parts):
        assert part.size == max(1, int(np.floor(tl.size * frac / (1 - frac) + 0.5)))
        assert set(test_pool[part].tolist()) <= set(tl.tolist())


def test_local_test_sets_proportional_and_wrap_without_repeats():
    train = [np.array([0] * 30 + [1] * 10)] * 5  # 40 train samples, f=0.2 -> 10 test samples each
    pool = np.array([0] * 12 + [1] * 3)
    parts = local_test_partition(train, pool, 0.2, rng=np.random.default_rng(0))
    for p in parts:
        assert p.size == 10
        assert np.bincount(pool[p], minlength=2).tolist() == [8, 2]  # 10 * 30/40 = 7.5 -> 8 (largest remainder, tie to lower class)
        assert np.unique(p).size == p.size  # no repeat within a device
    # 5 devices x 8 class-0 samples = 40 over a pool of 12: every class-0 sample used 3 or 4 times
    uses = np.bincount(np.concatenate(parts), minlength=15)[:12]
    assert uses.min() >= 3 and uses.max() <= 4
