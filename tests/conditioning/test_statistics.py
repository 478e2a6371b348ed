"""PCA statistics (Conditional-PCA paper, Sec. III-A): exact eigenvalues, order invariance, shift sensitivity."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from p2pfl.conditioning import (
    conditioned_model,
    feature_matrix,
    log_normalize,
    pca_flops,
    pca_statistics,
    population_moments,
    zscore_normalize,
)
from p2pfl.learning.models import ModelSpec


def _numpy_eigenvalues(z: np.ndarray, l: int) -> np.ndarray:
    ev = np.sort(np.linalg.eigvalsh(np.cov(z, rowvar=False)))[::-1].clip(0)
    out = np.zeros(l)
    out[: min(l, ev.size)] = ev[:l]
    return out


@pytest.mark.parametrize("method", ["randomized", "exact"])
@pytest.mark.parametrize("n,d,l", [(60, 20, 5), (40, 12, 12), (8, 15, 10), (200, 30, 32)])
@pytest.mark.slow
def test_eigenvalues_equal_numpys(method, n, d, l, rng):
    z = rng.standard_normal((n, d)) @ np.diag(np.linspace(3.0, 0.1, d)) + rng.standard_normal(d)
    got = pca_statistics(z, l, method=method)
    want = _numpy_eigenvalues(z, l)
    assert got.shape == (l,)
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)
    if n - 1 < l:  # rank n-1 after centring: the rest are exact zeros
        assert np.all(got[n - 1:] < 1e-10)


@pytest.mark.slow
def test_statistics_are_invariant_to_sample_order(rng):
    x = torch.from_numpy(rng.random((150, 64)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, 150))
    z = feature_matrix(x, y, 10)
    perm = torch.from_numpy(rng.permutation(150))
    a = pca_statistics(z, 32)
    b = pca_statistics(feature_matrix(x[perm], y[perm], 10), 32)
    np.testing.assert_allclose(a, b, rtol=1e-9)
    assert a[0] > a[-1] > 0


def _digits():
    x, y = load_digits(return_X_y=True)
    return torch.from_numpy(x.astype(np.float32) / 16.0), torch.from_numpy(y.astype(np.int64))


def _stat(x, y, idx):
    return pca_statistics(feature_matrix(x[idx], y[idx], 10), 32)


def _gap(a, b):
    """Distance of the leading 8 log-eigenvalues (where the shifts show; the tail is sampling noise)."""
    return float(np.linalg.norm(log_normalize(a[:8]) - log_normalize(b[:8])))


@pytest.mark.parametrize("shift", ["label", "covariate", "concept"])
def test_statistics_separate_shifted_clients_from_iid_ones(shift):
    """Two iid halves of one distribution have close statistics; a shifted client is far away."""
    x, y = _digits()
    order = np.random.default_rng(0).permutation(len(y))
    a, b = order[:400], order[400:800]
    base, same = _stat(x, y, a), _stat(x, y, b)
    if shift == "label":  # classes 0-4 only vs all classes
        sub = order[800:][y[order[800:]].numpy() < 5][:400]
        other = _stat(x, y, sub)
    elif shift == "covariate":  # the same images at lower contrast
        other = pca_statistics(feature_matrix(x[b] * 0.6, y[b], 10), 32)
    else:  # concept: the same images, a different semantic grouping (odd/even vs below 5)
        coarse_a, coarse_b = y % 2, (y >= 5).long()
        base, same = (pca_statistics(feature_matrix(x[i], coarse_a[i], 2), 32) for i in (a, b))
        other = pca_statistics(feature_matrix(x[b], coarse_b[b], 2), 32)
    assert _gap(base, other) > 2 * _gap(base, same)


def test_statistics_cannot_see_label_permutations_or_pixel_permutations():
    """Permuting the one-hot columns (E3b) or the pixels (a 180-degree rotation, E2b) is an orthogonal
    change of Z's columns: the covariance spectrum is exactly the same. (A limit of the method.)"""
    x, y = _digits()
    idx = np.arange(400)
    base = _stat(x, y, idx)
    perm = torch.tensor([3, 7, 1, 9, 0, 5, 8, 2, 6, 4])
    relabeled = pca_statistics(feature_matrix(x[idx], perm[y[idx]], 10), 32, method="exact")
    rotated = pca_statistics(feature_matrix(torch.flip(x[idx].reshape(-1, 8, 8), dims=(1, 2)), y[idx], 10), 32,
                             method="exact")
    base = pca_statistics(feature_matrix(x[idx], y[idx], 10), 32, method="exact")
    np.testing.assert_allclose(relabeled, base, rtol=1e-8)
    np.testing.assert_allclose(rotated, base, rtol=1e-8)


def test_concept_shift_changes_statistics_only_through_the_labels():
    x, y = _digits()
    idx = np.arange(300)
    plain = _stat(x, y, idx)
    unlabeled = pca_statistics(x[idx].double(), 32)
    assert not np.allclose(plain, unlabeled)


def test_regression_targets_enter_as_one_column():
    z = feature_matrix(torch.ones(5, 3), torch.arange(5.0), 0)
    assert z.shape == (5, 4) and torch.equal(z[:, -1], torch.arange(5.0, dtype=torch.float64))


def test_pca_flops_is_linear_in_samples_and_features():
    assert pca_flops(2000, 794, 32) == pytest.approx(2 * pca_flops(1000, 794, 32), rel=0.03)
    assert pca_flops(1000, 1588, 32) == pytest.approx(2 * pca_flops(1000, 794, 32), rel=0.05)
    assert pca_flops(1000, 794, 32) > 2 * 1000 * 794 * 42 * 10


def test_zscore_uses_population_moments_and_log_needs_no_peers():
    s = np.array([[1.0, 5.0], [3.0, 5.0]])
    mean, std = population_moments(s.sum(0), (s**2).sum(0), 2)
    np.testing.assert_allclose(mean, [2.0, 5.0])
    np.testing.assert_allclose(std, [1.0, 0.0])
    np.testing.assert_allclose(zscore_normalize(s[0], mean, std), [-1.0, 0.0])
    np.testing.assert_allclose(log_normalize(np.array([0.0, np.e - 1.0])), [0.0, 1.0], atol=1e-12)
    with pytest.raises(ValueError, match="'count'"):
        population_moments(s.sum(0), s.sum(0), 0)
    with pytest.raises(ValueError, match="'l' parameter"):
        pca_statistics(np.ones((3, 3)), 0)


@pytest.mark.parametrize("name,shape", [("cnn28", (1, 28, 28)), ("mlp", (1, 8, 8)), ("mlp", (10,))])
def test_conditioned_model_keeps_statistics_out_of_the_state_and_uses_them(name, shape):
    model = conditioned_model(ModelSpec(name=name, hidden=16), shape, 10, 32, seed=0)
    assert "stats" not in model.state_dict()
    assert all("stats" not in k for k, _ in model.named_parameters())
    first = model.head[0]
    assert first.in_features == (3136 if name == "cnn28" else int(np.prod(shape))) + 32
    x = torch.rand(4, *shape)
    before = model(x)
    model.set_statistics(torch.ones(32))
    after = model(x)
    assert not torch.allclose(before, after)
    assert torch.allclose(after, model.forward_with(x, torch.ones(4, 32)))
    same = conditioned_model(ModelSpec(name=name, hidden=16), shape, 10, 32, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(same.state_dict().values(), model.state_dict().values()))
