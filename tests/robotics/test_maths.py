"""FedDRMan maths: subspace distillation, SRB, CUA and the GMM likelihood (no MuJoCo needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from p2pfl.robotics.aggregation import (
    compatibility_partition,
    match_clusters,
    partition_score,
    rebalance_update,
    spectral_rebalance,
    update_similarity,
)
from p2pfl.robotics.distill import action_distillation, subspace_distillation, subspace_projector
from p2pfl.robotics.gmm import GMM, GMMHead, gmm_nll


def _feats(seed: int, d: int = 12, n: int = 40) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(d, n, generator=g, dtype=torch.float64)


# --- subspace distillation (Eq. 5-6) --------------------------------------------------------
def test_subspace_loss_is_zero_for_identical_features():
    f = _feats(0)
    assert float(subspace_distillation(f, f.clone(), rank=4)) == pytest.approx(0.0, abs=1e-18)


def test_subspace_loss_is_positive_for_different_features():
    assert float(subspace_distillation(_feats(0), _feats(1), rank=4)) > 1.0


def test_subspace_loss_is_invariant_to_a_rotation_of_the_feature_basis():
    fg, fk = _feats(0), _feats(1)
    q, _ = torch.linalg.qr(torch.randn(12, 12, generator=torch.Generator().manual_seed(7), dtype=torch.float64))
    base = subspace_distillation(fg, fk, rank=5)
    rotated = subspace_distillation(q @ fg, q @ fk, rank=5)
    assert float(rotated) == pytest.approx(float(base), rel=1e-9)
    # a coordinate-wise loss would change: the test distinguishes subspace from feature matching
    assert float(((q @ fg - fk) ** 2).sum()) != pytest.approx(float(((fg - fk) ** 2).sum()), rel=1e-3)


def test_subspace_loss_matches_eq6_directly():
    fg, fk, r = _feats(2), _feats(3), 3
    ug = torch.linalg.svd(fg, full_matrices=False)[0][:, :r]
    uk = torch.linalg.svd(fk, full_matrices=False)[0][:, :r]
    pg, pk = ug @ ug.T, uk @ uk.T
    want = (torch.linalg.norm(pg @ fg - pk @ fk) ** 2 + torch.linalg.norm(pg @ fk - pk @ fg) ** 2) / fg.shape[1]
    assert float(subspace_distillation(fg, fk, rank=r)) == pytest.approx(float(want), rel=1e-10)


def test_projector_is_a_rank_r_orthogonal_projector_and_noise_is_seeded():
    p = subspace_projector(_feats(4), 3)
    assert torch.allclose(p @ p, p, atol=1e-10) and torch.allclose(p, p.T) and round(float(torch.trace(p))) == 3
    a = subspace_projector(_feats(4), 3, 0.01, torch.Generator().manual_seed(1))
    b = subspace_projector(_feats(4), 3, 0.01, torch.Generator().manual_seed(1))
    assert torch.equal(a, b)


def test_subspace_loss_gradient_flows_to_the_student_only():
    fg = _feats(5).float().requires_grad_(True)
    fk = _feats(6).float().requires_grad_(True)
    subspace_distillation(fg, fk, rank=3, noise_std=0.01, generator=torch.Generator().manual_seed(0)).backward()
    assert fg.grad is None and fk.grad is not None and torch.isfinite(fk.grad).all()


# --- spectral rebalancing (Eq. 13-14) -------------------------------------------------------
def _matrix_with_spectrum(sigmas, seed=0):
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(8, 8, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))
    s = torch.tensor(sigmas, dtype=torch.float64)
    return u[:, :6] @ torch.diag(s) @ v.T, u[:, :6], v


def test_srb_lifts_exactly_the_singular_values_below_the_threshold():
    sig = [8.0, 4.0, 2.0, 1.0, 0.5, 0.25]  # cumulative shares .510 .764 .892 .955 .987 1
    m, u, v = _matrix_with_spectrum(sig)
    out = spectral_rebalance(m, beta=0.9)  # c* = 4 (share .955 >= .9), sigma_c* = 1.0
    s_new = torch.linalg.svdvals(out)
    assert torch.allclose(s_new, torch.tensor([8.0, 4.0, 2.0, 1.0, 1.0, 1.0], dtype=torch.float64), atol=1e-10)


def test_srb_leaves_singular_vectors_unchanged():
    m, u, v = _matrix_with_spectrum([8.0, 4.0, 2.0, 1.0, 0.5, 0.25], seed=3)
    out = spectral_rebalance(m, beta=0.9)
    # U^T out V is diagonal: the same singular vectors, new values
    core = u.T @ out @ v
    assert torch.allclose(core - torch.diag(torch.diagonal(core)), torch.zeros(6, 6, dtype=torch.float64), atol=1e-10)
    assert torch.allclose(torch.diagonal(core), torch.tensor([8, 4, 2, 1, 1, 1], dtype=torch.float64), atol=1e-10)


def test_srb_with_beta_one_keeps_the_matrix_and_beta_zero_flattens_to_the_top():
    m, _, _ = _matrix_with_spectrum([3.0, 2.0, 1.0, 0.5, 0.4, 0.1], seed=1)
    assert torch.allclose(spectral_rebalance(m, 1.0), m, atol=1e-10)
    assert torch.allclose(torch.linalg.svdvals(spectral_rebalance(m, 0.0)), torch.full((6,), 3.0, dtype=torch.float64))


def test_rebalance_update_touches_only_eligible_blocks():
    m, _, _ = _matrix_with_spectrum([3.0, 2.0, 1.0, 0.5, 0.4, 0.1])
    delta = {"w": m, "b": torch.ones(6, dtype=torch.float64), "conv": torch.ones(2, 2, 3, 3)}
    out = rebalance_update(delta, 0.5, lambda k, v: v.ndim == 2)
    assert not torch.allclose(out["w"], m) and torch.equal(out["b"], delta["b"]) and torch.equal(out["conv"], delta["conv"])
    with pytest.raises(ValueError, match="beta must be in"):
        spectral_rebalance(m, 1.5)


# --- compatible update aggregation (Eq. 10-11) ----------------------------------------------
def _planted_updates(groups: list[list[int]], dim: int = 50, noise: float = 0.3, seed: int = 0):
    rng = np.random.default_rng(seed)
    init = {"temporal.w": torch.zeros(dim, dtype=torch.float64), "other": torch.zeros(3, dtype=torch.float64)}
    n = sum(len(g) for g in groups)
    states = [None] * n
    for g in groups:
        direction = rng.standard_normal(dim)
        for k in g:
            v = direction + noise * rng.standard_normal(dim)
            states[k] = {"temporal.w": torch.tensor(v), "other": torch.tensor(rng.standard_normal(3))}
    return states, init


@pytest.mark.parametrize("planted", [[[0, 2], [1, 3]], [[0, 1, 4], [2, 3, 5]], [[0, 3], [1, 4], [2, 5]], [[0], [1, 2, 3]]])
def test_cua_finds_the_planted_partition(planted):
    states, init = _planted_updates(planted, seed=len(planted))
    sim = update_similarity(states, init, ["temporal.w"])
    found = compatibility_partition(sim, len(planted))
    assert sorted(map(sorted, found)) == sorted(map(sorted, planted))


def test_cua_does_not_split_off_a_singleton_when_all_updates_are_alike():
    # within-suite 0.90, across suites 0.85 (accumulated updates share a common component)
    sim = np.full((4, 4), 0.85)
    sim[0, 1] = sim[1, 0] = sim[2, 3] = sim[3, 2] = 0.90
    np.fill_diagonal(sim, 1.0)
    assert compatibility_partition(sim, 2) == [[0, 1], [2, 3]]
    assert partition_score(sim, [[0, 1], [2, 3]]) == pytest.approx(0.05)
    assert partition_score(sim, [[0, 1, 2], [3]]) == pytest.approx((0.90 + 0.85 + 0.85) / 3 - (0.85 + 0.85 + 0.90) / 3)


def test_cua_local_search_beyond_exhaustive_range_finds_planted_partition():
    planted = [list(range(0, 12, 3)), list(range(1, 12, 3)), list(range(2, 12, 3))]
    states, init = _planted_updates(planted, seed=9)
    sim = update_similarity(states, init, ["temporal.w"])
    found = compatibility_partition(sim, 3, rng=np.random.default_rng(0))
    assert sorted(map(sorted, found)) == sorted(map(sorted, planted))


def test_update_similarity_uses_only_omega_and_partition_score_prefers_truth():
    states, init = _planted_updates([[0, 1], [2, 3]])
    s = update_similarity(states, init, ["temporal.w"])
    assert s.shape == (4, 4) and np.allclose(np.diag(s), 1.0)
    assert partition_score(s, [[0, 1], [2, 3]]) > partition_score(s, [[0, 2], [1, 3]])
    s_other = update_similarity(states, init, ["other"])
    assert not np.allclose(s, s_other)


def test_match_clusters_keeps_persistent_ids():
    assert match_clusters([[0, 1], [2, 3]], {0: 1, 1: 1, 2: 0, 3: 0}, 2) == [1, 0]
    assert sorted(match_clusters([[0], [1]], {}, 2)) == [0, 1]


# --- GMM likelihood (Eq. 4) and action distillation (Eq. 7) ---------------------------------
def test_gmm_nll_matches_a_direct_computation():
    g = torch.Generator().manual_seed(0)
    b, m, a = 3, 5, 4
    logits = torch.randn(b, m, generator=g, dtype=torch.float64)
    means = torch.randn(b, m, a, generator=g, dtype=torch.float64)
    stds = torch.rand(b, m, a, generator=g, dtype=torch.float64) + 0.2
    act = torch.randn(b, a, generator=g, dtype=torch.float64)
    total = 0.0
    for i in range(b):
        w = np.exp(logits[i].numpy()) / np.exp(logits[i].numpy()).sum()
        p = 0.0
        for k in range(m):
            dens = 1.0
            for j in range(a):
                mu, sd, x = float(means[i, k, j]), float(stds[i, k, j]), float(act[i, j])
                dens *= math.exp(-0.5 * ((x - mu) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
            p += w[k] * dens
        total += -math.log(p)
    assert float(gmm_nll(GMM(logits, means, stds), act)) == pytest.approx(total / b, rel=1e-10)


def test_gmm_head_shapes_and_action_distillation_zero_against_itself():
    head = GMMHead(8, 4, modes=5)
    gmm = head(torch.randn(6, 8))
    assert gmm.means.shape == (6, 5, 4) and gmm.stds.min() > 0 and gmm.mode().shape == (6, 4)
    with torch.no_grad():
        assert float(action_distillation(gmm, gmm, torch.Generator().manual_seed(0))) == pytest.approx(0.0, abs=1e-6)
        h = torch.randn(1, 8).repeat(4000, 1)  # a Monte-Carlo KL estimate: positive with many samples
        kl = action_distillation(head(h), GMMHead(8, 4, modes=5)(h), torch.Generator().manual_seed(0))
    assert float(kl) > 0
