"""build_federation: the kernel's contract and every partition kind, on digits."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pfl.data import DATASETS, PARTITIONS, DataSpec, Federation, build_federation
from p2pfl.data import semantic as sem
from p2pfl.data.datasets import load_dataset
from p2pfl.data.shards import PoolRows
from p2pfl.data.transforms import noise_levels, rotate, simplex_patterns, smoothed_patterns
from p2pfl.errors import ConfigError
from p2pfl.seeding import stream, torch_generator

FAST = settings(max_examples=15, deadline=None)
DIGITS = load_dataset("digits")


def build(partition: dict | None = None, n: int = 6, seed: int = 0, **kw) -> Federation:
    spec = DataSpec(partition=partition or {"kind": "iid"}, **kw)
    return build_federation(spec, n, seed=seed)


def pool_x(idx: np.ndarray, split: str = "train") -> torch.Tensor:
    x = DIGITS.train_x if split == "train" else DIGITS.test_x
    return torch.from_numpy(x[idx].astype(np.float32)) / 16.0


def pool_y(idx: np.ndarray, split: str = "train") -> np.ndarray:
    return (DIGITS.train_y if split == "train" else DIGITS.test_y)[idx]


def assert_disjoint(parts) -> None:
    allidx = np.concatenate(parts)
    assert np.unique(allidx).size == allidx.size


# ---------------------------------------------------------------- contract
def test_contract_digits_iid():
    fed = build(n=10, seed=1)
    assert fed.dataset == "digits" and fed.num_classes == 10 and fed.input_shape == (1, 8, 8)
    assert fed.true_clusters == (0,) * 10 and len(fed.shards) == 10
    s = fed.shards[0]
    assert s.train_x.dtype == torch.float32 and s.train_y.dtype == torch.int64
    assert s.train_x.shape == (144, 1, 8, 8) and s.test_x.shape == (36, 1, 8, 8)
    assert float(s.train_x.min()) >= 0.0 and float(s.train_x.max()) == 1.0
    stats = fed.stats()
    json.dumps(stats)
    assert sum(stats["samples_per_device"]) == len(DIGITS.train_y) == 1438
    assert stats["test_samples_per_device"] == [36] * 10  # 144 * 0.2 / 0.8
    assert stats["classes_per_device"][0] == list(range(10))
    assert stats["true_cluster_per_device"] == [0] * 10 and stats["n_clusters"] == 1
    assert torch.equal(s.train_x, pool_x(s.train_index))
    assert np.array_equal(s.train_y.numpy(), pool_y(s.train_index))


def test_registries_list_every_name():
    assert {"digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "synthetic_linear", "synthetic_logistic"} <= set(DATASETS)
    assert set(PARTITIONS) == {"iid", "dirichlet", "quantity_skew", "label_shift", "covariate_subclass", "rotation",
                               "semantic_concept", "label_permutation", "cross_dataset", "combined", "feature_skew",
                               "parameter_shift"}


KINDS = [
    {"kind": "iid"},
    {"kind": "dirichlet", "alpha": 0.5},
    {"kind": "quantity_skew"},
    {"kind": "label_shift", "n_clusters": 2},
    {"kind": "covariate_subclass", "n_clusters": 2},
    {"kind": "rotation", "angles": [0, 90]},
    {"kind": "semantic_concept"},
    {"kind": "label_permutation", "n_clusters": 2},
    {"kind": "combined", "covariate_clusters": 2},
    {"kind": "feature_skew", "n_clusters": 2, "mode": "pattern"},
    {"kind": "feature_skew", "n_clusters": 2, "mode": "noise"},
]


@FAST
@given(seed=st.integers(0, 2**31 - 1), m=st.integers(1, 4), part=st.sampled_from(KINDS))
def test_shards_disjoint_and_tests_follow_train_labels(seed, m, part):
    n = 4 * m  # divisible by every K used above
    fed = build(part, n=n, seed=seed, test_fraction=0.1)
    assert_disjoint([s.train_index for s in fed.shards])
    # Test sets are disjoint across devices while a class's pool suffices; past it the dealing wraps
    # around (by design: local_test_partition), so check each class whose demand fits its pool
    # (rounding each device's share up can push a class's demand just past the 36 digits per class).
    test_idx = np.concatenate([s.test_index for s in fed.shards])
    labels = pool_y(test_idx, "test")
    avail = np.bincount(DIGITS.test_y, minlength=10)
    for c in range(10):
        demanded = test_idx[labels == c]
        if demanded.size <= avail[c]:
            assert np.unique(demanded).size == demanded.size
    for s in fed.shards:
        assert np.unique(s.test_index).size == s.test_index.size  # never a repeat within a device
    for s in fed.shards:
        assert s.train_x.shape[0] == s.train_index.size == s.train_y.shape[0] > 0
        assert s.test_x.shape[0] == s.test_index.size > 0
        # test labels (original classes) lie within the device's training classes
        assert set(pool_y(s.test_index, "test").tolist()) <= set(pool_y(s.train_index).tolist())
        assert s.test_x.shape[1:] == s.train_x.shape[1:] == fed.input_shape
        assert float(s.train_x.min()) >= 0 and float(s.train_x.max()) <= 1


@FAST
@given(seed=st.integers(0, 2**31 - 1), part=st.sampled_from(KINDS))
def test_same_seed_identical_different_seed_differs(seed, part):
    a, b, c = (build(part, n=4, seed=s) for s in (seed, seed, seed + 1))
    for x, y in zip(a.shards, b.shards):
        assert torch.equal(x.train_x, y.train_x) and torch.equal(x.train_y, y.train_y)
        assert torch.equal(x.test_x, y.test_x) and torch.equal(x.test_y, y.test_y)
    assert any(not np.array_equal(x.train_index, y.train_index) for x, y in zip(a.shards, c.shards))


def test_samples_per_client_exact_sizes():
    fed = build({"kind": "label_shift", "n_clusters": 2}, n=6, samples_per_client=50)
    assert fed.stats()["samples_per_device"] == [50] * 6
    assert fed.stats()["test_samples_per_device"] == [13] * 6  # round(50 * 0.25 = 12.5) -> 13


def test_test_samples_per_client_fixes_every_local_test_set():
    fed = build({"kind": "label_shift", "n_clusters": 2}, n=6, samples_per_client=20, test_samples_per_client=30,
                overlap=True)
    assert fed.stats()["test_samples_per_device"] == [30] * 6
    for s in fed.shards:  # still the device's own classes, no sample twice on a device
        assert set(s.test_y.tolist()) <= set(s.train_y.tolist()) and np.unique(s.test_index).size == 30


def test_test_samples_per_client_rejected_for_robot_suites():
    with pytest.raises(ValueError, match="test_samples_per_client does not apply to robot_suites"):
        DataSpec(dataset="robotics", partition={"kind": "robot_suites"}, test_samples_per_client=5)


def test_dirichlet_fixed_size_and_quantity_skew_totals():
    fed = build({"kind": "dirichlet", "alpha": 0.1}, n=8, samples_per_client=40)
    assert fed.stats()["samples_per_device"] == [40] * 8
    q = build({"kind": "quantity_skew", "distribution": "power_law", "exponent": 1.0}, n=4)
    assert sorted(q.stats()["samples_per_device"], reverse=True) == [689, 345, 231, 173]
    # 1 (min_samples) + largest-remainder of 1434 x (1, 1/2, 1/3, 1/4) / (25/12) = 688.32, 344.16, 229.44, 172.08


# ---------------------------------------------------------------- E1 label shift
@pytest.mark.parametrize("k", [2, 3, 5, 10])
def test_label_shift_cluster_label_sets(k):
    fed = build({"kind": "label_shift", "n_clusters": k}, n=2 * k)
    groups = [tuple(int(c) for c in g) for g in np.array_split(np.arange(10), k)]
    for c in range(k):
        devs = [s for s in fed.shards if s.true_cluster == c]
        assert len(devs) == 2 and fed.true_clusters[2 * c] == c  # blocks
        assert set().union(*(set(s.train_y.tolist()) for s in devs)) == set(groups[c])
        assert all(set(s.test_y.tolist()) <= set(groups[c]) for s in devs)


def test_label_shift_overlapping_groups_are_cyclic_windows():
    assert sem.label_shift_groups("fashion_mnist", 10, 4, classes_per_cluster=5) == [
        (0, 1, 2, 3, 4), (2, 3, 4, 5, 6), (5, 6, 7, 8, 9), (0, 1, 7, 8, 9)]
    fed = build({"kind": "label_shift", "n_clusters": 4, "classes_per_cluster": 5}, n=8, samples_per_client=60,
                overlap=True)
    for s in fed.shards:
        group = sem.label_shift_groups("digits", 10, 4, classes_per_cluster=5)[s.true_cluster]
        assert set(s.train_y.tolist()) == set(group) and set(s.test_y.tolist()) <= set(group)
    with pytest.raises(ValueError, match="classes_per_cluster=11 needs a dataset of at least that many classes"):
        DataSpec(dataset="digits", partition={"kind": "label_shift", "n_clusters": 2, "classes_per_cluster": 11})
    with pytest.raises(ValueError, match="shares classes between groups, which needs overlap: true"):
        DataSpec(dataset="digits", partition={"kind": "label_shift", "n_clusters": 4, "classes_per_cluster": 5})


def test_label_shift_round_robin_assignment():
    fed = build({"kind": "label_shift", "n_clusters": 2, "assignment": "round_robin"}, n=4)
    assert fed.true_clusters == (0, 1, 0, 1)
    assert set(fed.shards[1].train_y.tolist()) == {5, 6, 7, 8, 9}


# ---------------------------------------------------------------- E2a subclass covariate shift
@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_covariate_subclass_digits(k):
    fed = build({"kind": "covariate_subclass", "n_clusters": k}, n=k)
    assert fed.num_classes == 2
    for s in fed.shards:
        seen = set(pool_y(s.train_index).tolist())
        assert seen == {d for d in range(10) if d % 5 % k == s.true_cluster}  # subclass k::K of 0-4 and of 5-9
        assert np.array_equal(s.train_y.numpy(), (pool_y(s.train_index) >= 5).astype(np.int64))
        assert set(pool_y(s.test_index, "test").tolist()) <= seen


def test_covariate_subclass_cifar10_paper_example():
    supers = sem.SUPERCLASSES["cifar10"]
    groups = sem.subclass_groups(supers, 2)
    assert 9 in groups[0] and 5 in groups[0]  # trucks and dogs
    assert 1 in groups[1] and 3 in groups[1]  # cars and cats
    assert sorted(groups[0] + groups[1]) == list(range(10))
    to_super = sem.superclass_map(supers, 10)
    assert to_super.tolist() == [0, 0, 1, 1, 1, 1, 1, 1, 0, 0]  # vehicle 0, animal 1


# ---------------------------------------------------------------- E2b rotation
@pytest.mark.parametrize("angles", [[0, 180], [0, 120, 240], [0, 90, 180, 270], [0, 10, 180, 350]])
@pytest.mark.slow
def test_rotation_train_and_test_rotated_by_cluster_angle(angles):
    fed = build({"kind": "rotation", "angles": angles}, n=len(angles))
    for s in fed.shards:
        a = angles[s.true_cluster]
        assert torch.equal(s.train_x, rotate(pool_x(s.train_index), a))
        assert torch.equal(s.test_x, rotate(pool_x(s.test_index, "test"), a))
    assert torch.equal(fed.shards[0].train_x, pool_x(fed.shards[0].train_index))  # 0 degrees: untouched



@pytest.mark.parametrize("angles", [[0, 90, 180, 270], [0, 10, 180, 350]])
def test_devices_of_one_rotation_share_its_rows_and_read_their_own_samples(angles):
    n = 8 * len(angles)  # 8 devices a cluster drawing 60 images each with overlap: more than digits' pool holds
    fed = build({"kind": "rotation", "angles": angles}, n=n, samples_per_client=60, overlap=True)
    for split, index in (("train", "train_index"), ("test", "test_index")):
        held = [s.held(f"{split}_x") for s in fed.shards]
        assert all(isinstance(h, PoolRows) and h.pool is held[0].pool for h in held)  # one pool a split
        cluster_rows = [np.unique(np.concatenate([getattr(s, index) for s in fed.shards if s.true_cluster == c]))
                        for c in range(len(angles))]
        assert held[0].pool.shape[0] == sum(r.size for r in cluster_rows)  # each image a rotation drew, held once
        for c, a in enumerate(angles):
            for s in (s for s in fed.shards if s.true_cluster == c):
                x = getattr(s, f"{split}_x")
                assert torch.equal(x, rotate(pool_x(getattr(s, index), split), a)) and x.is_contiguous()
    drawn = sum(int(s.train_y.shape[0]) for s in fed.shards)
    assert fed.shards[0].held("train_x").pool.shape[0] < drawn


def test_a_group_of_jobs_on_one_pool_gathers_each_batch_from_it():
    fed = build({"kind": "rotation", "angles": [0, 90]}, n=6, samples_per_client=20, overlap=True)
    held = [s.held("train_x") for s in fed.shards]
    stacked = PoolRows(held[0].pool, torch.stack([h.rows for h in held]))
    expected = torch.stack([s.train_x for s in fed.shards])
    assert stacked.shape == tuple(expected.shape) and torch.equal(stacked.take(), expected)
    rows, idx = torch.arange(6).unsqueeze(1), torch.tensor([[3, 1]] * 3 + [[0, 19]] * 3)
    assert torch.equal(stacked[rows, idx], expected[rows, idx])



def test_moving_a_federation_keeps_shared_rows_shared():
    fed = build({"kind": "label_permutation", "n_clusters": 2}, n=8, samples_per_client=60, overlap=True)
    moved = fed.to("cpu")
    pools = {id(s.held("train_x").pool) for s in moved.shards}
    assert pools == {id(s.held("train_x").pool) for s in fed.shards} and len(pools) == 1  # one pool, not copied
    assert all(torch.equal(a.train_x, b.train_x) and torch.equal(a.test_y, b.test_y) for a, b in zip(fed.shards, moved.shards))


def test_a_transform_that_draws_per_device_keeps_each_shard_its_own_tensor():
    fed = build({"kind": "feature_skew", "n_clusters": 2, "mode": "noise", "noise_std": 0.3}, n=6, samples_per_client=40,
                overlap=True)
    assert all(isinstance(s.held("train_x"), torch.Tensor) and isinstance(s.held("test_x"), torch.Tensor)
               for s in fed.shards)


def test_a_shard_is_read_only():
    shard = build({"kind": "iid"}, n=2).shards[0]
    with pytest.raises(AttributeError, match="Shard is read-only: cannot assign 'train_x'"):
        shard.train_x = torch.zeros(1)  # type: ignore[misc]


def test_rotate_quarter_turns_agree_with_interpolated_rotation_and_direction():
    x = torch.zeros(1, 1, 3, 3)
    x[0, 0, 0, 2] = 1.0  # top-right pixel
    r = rotate(x, 90)  # counter-clockwise: top-right -> top-left
    assert r[0, 0, 0, 0] == 1.0 and r.sum() == 1.0
    from torchvision.transforms.functional import rotate as tv_rotate

    img = pool_x(np.arange(5))
    assert torch.allclose(rotate(img, 90), tv_rotate(img, 90.0), atol=1e-6)
    assert torch.equal(rotate(rotate(img, 180), 180), img)


# ---------------------------------------------------------------- E3a / E3b concept shift
def test_semantic_concept_digits_labels_follow_definitions():
    fed = build({"kind": "semantic_concept"}, n=4)
    assert fed.num_classes == 2 and fed.true_clusters == (0, 0, 1, 1)
    for s in fed.shards:
        for idx, y, split in ((s.train_index, s.train_y, "train"), (s.test_index, s.test_y, "test")):
            d = pool_y(idx, split)
            want = d % 2 if s.true_cluster == 0 else (d >= 5).astype(np.int64)  # odd/even vs below5/above5
            assert np.array_equal(y.numpy(), want)


FMNIST_NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _by_name(names, groups):
    out = [-1] * len(names)
    for label, members in enumerate(groups):
        for m in members:
            out[names.index(m)] = label
    return out


def test_semantic_mappings_match_written_definitions():
    (n0, m0), (n1, m1) = sem.SEMANTIC_MAPPINGS["fashion_mnist"]
    assert n0 == "formal_casual" and list(m0) == _by_name(FMNIST_NAMES, [
        ["T-shirt/top", "Pullover", "Sandal", "Sneaker"], ["Trouser", "Dress", "Coat", "Shirt", "Bag", "Ankle boot"]])
    assert n1 == "seasonal" and list(m1) == _by_name(FMNIST_NAMES, [
        ["T-shirt/top", "Dress", "Sandal", "Shirt", "Sneaker", "Bag"], ["Trouser", "Pullover", "Coat", "Ankle boot"]])
    (c0, s0), (c1, s1) = sem.SEMANTIC_MAPPINGS["cifar10"]
    assert c0 == "semantic" and list(s0) == _by_name(CIFAR10_NAMES, [
        ["airplane", "automobile", "ship", "truck"], ["cat", "dog", "horse"], ["bird", "deer", "frog"]])
    assert c1 == "size" and list(s1) == _by_name(CIFAR10_NAMES, [
        ["airplane", "ship", "truck"], ["automobile", "deer", "horse"], ["bird", "cat", "dog", "frog"]])
    (_, d0), (_, d1) = sem.SEMANTIC_MAPPINGS["mnist"]
    assert list(d0) == [d % 2 for d in range(10)] and list(d1) == [int(d >= 5) for d in range(10)]
    assert sem.CIFAR10_VEHICLES_ANIMALS == ((0, 1, 8, 9), (2, 3, 4, 5, 6, 7))


@FAST
@given(seed=st.integers(0, 2**31 - 1), k=st.integers(2, 5))
def test_label_permutation_labels_are_the_cluster_permutation(seed, k):
    fed = build({"kind": "label_permutation", "n_clusters": k}, n=k, seed=seed)
    perms = sem.label_permutations(10, k, seed=seed)
    assert np.array_equal(perms[0], np.arange(10))
    assert len({tuple(p) for p in perms}) == k and all(sorted(p) == list(range(10)) for p in perms)
    for s in fed.shards:
        p = perms[s.true_cluster]
        assert np.array_equal(s.train_y.numpy(), p[pool_y(s.train_index)])
        assert np.array_equal(s.test_y.numpy(), p[pool_y(s.test_index, "test")])


def test_label_permutation_without_identity_first():
    perms = sem.label_permutations(10, 3, seed=5, identity_first=False)
    assert np.array_equal(perms[0], stream(5, "data.permutation", 0).permutation(10))


# ---------------------------------------------------------------- E4b combined
def test_combined_concept_times_covariate():
    fed = build({"kind": "combined", "covariate_clusters": 2}, n=8)
    assert fed.true_clusters == (0, 0, 1, 1, 2, 2, 3, 3) and fed.num_classes == 2
    maps = sem.semantic_label_maps("digits")
    groups = sem.subclass_groups(sem.SUPERCLASSES["digits"], 2)
    for s in fed.shards:
        g, c = divmod(s.true_cluster, 2)
        orig = pool_y(s.train_index)
        assert set(orig.tolist()) == set(groups[c])
        assert np.array_equal(s.train_y.numpy(), maps[g][orig])


# ---------------------------------------------------------------- feature skew (RND paper)
def test_feature_skew_pattern_exact_and_simplex_properties():
    k = 4
    fed = build({"kind": "feature_skew", "n_clusters": k, "mode": "pattern", "rms": 0.2}, n=8, seed=3)
    pats = simplex_patterns(k, (1, 8, 8), 0.2, rng=stream(3, "data.pattern"))
    flat = pats.reshape(k, -1).double()
    assert torch.allclose(flat.sum(0), torch.zeros(64, dtype=torch.float64), atol=1e-6)
    assert torch.allclose(flat.pow(2).mean(1).sqrt(), torch.full((k,), 0.2, dtype=torch.float64), atol=1e-6)
    d = torch.cdist(flat, flat)
    off = d[~torch.eye(k, dtype=torch.bool)]
    assert torch.allclose(off, off[0].expand_as(off), atol=1e-6)  # equidistant
    for s in fed.shards:
        assert torch.equal(s.train_x, (pool_x(s.train_index) + pats[s.true_cluster]).clamp(0, 1))
        assert torch.equal(s.test_x, (pool_x(s.test_index, "test") + pats[s.true_cluster]).clamp(0, 1))
        assert np.array_equal(s.train_y.numpy(), pool_y(s.train_index))  # labels untouched


def _hand_smoothed_patterns(k: int, shape: tuple[int, int, int], rms: float, box: int, seed: int) -> np.ndarray:
    """The RND authors' smoothed equidistant patterns, written out by hand in float64 (loops for the box)."""
    c, h, w = shape
    d, r = c * h * w, box // 2
    draws = torch.randn(d, k - 1, generator=torch_generator(seed, "data.pattern"), dtype=torch.float32)
    basis = draws.double().numpy()
    for col in range(k - 1):
        padded = np.pad(basis[:, col].reshape(c, h, w), ((0, 0), (r, r), (r, r)))  # zeros, counted in the mean
        boxed = np.array([[[padded[ch, y : y + box, x : x + box].sum() / box**2 for x in range(w)] for y in range(h)]
                          for ch in range(c)]).ravel()
        basis[:, col] = boxed - boxed.mean()
    q, _ = np.linalg.qr(basis)
    helmert = np.zeros((k, k - 1))
    for j in range(k - 1):
        helmert[: j + 1, j] = 1 / np.sqrt((j + 1) * (j + 2))
        helmert[j + 1, j] = -(j + 1) / np.sqrt((j + 1) * (j + 2))
    v = helmert @ q.T
    return v * rms * np.sqrt(d) / np.linalg.norm(v, axis=1, keepdims=True)


def test_feature_skew_smoothed_pattern_is_the_authors_construction():
    k, rms, seed = 4, 0.15, 5
    fed = build({"kind": "feature_skew", "n_clusters": k, "mode": "smoothed_pattern", "rms": rms, "smooth": 7},
                n=8, seed=seed)
    pats = smoothed_patterns(k, (1, 8, 8), rms, smooth=7, generator=torch_generator(seed, "data.pattern"))
    assert pats.dtype == torch.float32 and pats.shape == (k, 1, 8, 8)
    hand = _hand_smoothed_patterns(k, (1, 8, 8), rms, 7, seed)
    assert np.allclose(pats.reshape(k, -1).double().numpy(), hand, rtol=0, atol=1e-6)
    flat = pats.reshape(k, -1).double()
    assert torch.allclose(flat.pow(2).mean(1).sqrt(), torch.full((k,), rms, dtype=torch.float64), rtol=0, atol=1e-7)
    d = torch.cdist(flat, flat)[~torch.eye(k, dtype=torch.bool)]
    assert torch.allclose(d, torch.full_like(d, rms * 8 * (2 * k / (k - 1)) ** 0.5), rtol=1e-6, atol=0)
    assert torch.allclose(flat.sum(0), torch.zeros(64, dtype=torch.float64), atol=1e-6)  # the rows sum to zero
    assert torch.allclose(flat.mean(1), torch.zeros(k, dtype=torch.float64), atol=1e-7)  # each pattern centred
    unsmoothed = simplex_patterns(k, (1, 8, 8), rms, rng=stream(seed, "data.pattern"))
    neighbour = [float((p[..., 1:, :] * p[..., :-1, :]).mean() / p.pow(2).mean()) for p in (pats, unsmoothed)]
    assert neighbour[0] > 0.5 > abs(neighbour[1])  # smoothed: neighbouring pixels shift together
    for s in fed.shards:
        assert torch.equal(s.train_x, (pool_x(s.train_index) + pats[s.true_cluster]).clamp(0, 1))
        assert torch.equal(s.test_x, (pool_x(s.test_index, "test") + pats[s.true_cluster]).clamp(0, 1))
        assert np.array_equal(s.train_y.numpy(), pool_y(s.train_index))
    # the authors' edge cases: one group or rms 0 gives zeros; an even box (capped at the image) is one less
    assert not smoothed_patterns(1, (1, 8, 8), rms, generator=torch_generator(0, "x")).any()
    assert not smoothed_patterns(3, (1, 8, 8), 0.0, generator=torch_generator(0, "x")).any()
    capped = smoothed_patterns(k, (1, 6, 6), rms, smooth=9, generator=torch_generator(seed, "data.pattern"))
    assert torch.equal(capped, smoothed_patterns(k, (1, 6, 6), rms, smooth=5,
                                                 generator=torch_generator(seed, "data.pattern")))


def test_feature_skew_noise_levels():
    assert noise_levels(0.3, 4) == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert noise_levels([0.05, 0.5], 2) == [0.05, 0.5]
    fed = build({"kind": "feature_skew", "n_clusters": 2, "mode": "noise", "noise_std": [0.0, 0.2]}, n=2)
    clean, noisy = fed.shards
    assert torch.equal(clean.train_x, pool_x(clean.train_index))
    resid = noisy.train_x - pool_x(noisy.train_index)
    base = pool_x(noisy.train_index)
    mid = (base > 0.3) & (base < 0.7)  # far from the clamp, noise is N(0, 0.2^2)
    assert float(resid[mid].std()) == pytest.approx(0.2, rel=0.1)
    resid_test = noisy.test_x - pool_x(noisy.test_index, "test")
    base_t = pool_x(noisy.test_index, "test")
    assert float(resid_test[(base_t > 0.3) & (base_t < 0.7)].std()) == pytest.approx(0.2, rel=0.15)


# ---------------------------------------------------------------- cluster sizes
def test_clients_per_cluster_mismatch_names_both_fields():
    with pytest.raises(ConfigError, match=r"data.clients_per_cluster=5 x 2 clusters \(data.partition\) = 10 devices, but the topology has 12"):
        build({"kind": "label_shift", "n_clusters": 2}, n=12, clients_per_cluster=5)
    fed = build({"kind": "label_shift", "n_clusters": 2}, n=10, sparsity="rich")
    assert fed.true_clusters == (0,) * 5 + (1,) * 5
    with pytest.raises(ConfigError, match=r"data.sparsity=med \(clients_per_cluster=10\)"):
        build({"kind": "rotation", "angles": [0, 180]}, n=10, sparsity="med")


def test_more_clusters_than_devices():
    with pytest.raises(ConfigError, match="defines 4 clusters but there are only 3 devices"):
        build({"kind": "rotation", "angles": [0, 90, 180, 270]}, n=3)


# ---------------------------------------------------------------- synthetic (MCDC)
@pytest.mark.parametrize("name", ["synthetic_linear", "synthetic_logistic"])
def test_synthetic_clusters_follow_their_parameters(name):
    from p2pfl.data.synthetic import cluster_parameters

    spec = DataSpec(dataset=name, partition={"kind": "parameter_shift", "n_clusters": 3, "noise_std": 0.1}, samples_per_client=300)
    fed = build_federation(spec, 6, seed=2)
    assert fed.input_shape == (10,) and fed.true_clusters == (0, 0, 1, 1, 2, 2)
    again = build_federation(spec, 6, seed=2)
    assert all(torch.equal(a.train_x, b.train_x) and torch.equal(a.train_y, b.train_y) for a, b in zip(fed.shards, again.shards))
    for s in fed.shards:
        p = cluster_parameters(2, s.true_cluster, 10)
        x = s.train_x.double().numpy()
        assert s.train_x.shape == (300, 10) and s.test_x.shape == (75, 10)
        if name == "synthetic_linear":
            assert fed.task == "regression" and fed.num_classes == 0 and s.train_y.dtype == torch.float32
            resid = s.train_y.double().numpy() - (x @ p["w"] + p["b"])
            assert resid.std() == pytest.approx(0.1, rel=0.2)
        else:
            assert fed.num_classes == 2 and s.train_y.dtype == torch.int64
            agree = ((x - p["mu"]) @ p["w"] > 0).astype(np.int64) == s.train_y.numpy()
            assert agree.mean() > 0.95
