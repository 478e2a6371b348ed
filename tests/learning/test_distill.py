"""Distillation losses (FedDRMan Eq. 5-7): p2pfl.learning.distill."""

from __future__ import annotations

import pytest
import torch

from p2pfl.learning.distill import action_distillation, subspace_distillation, subspace_projector


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
    want = torch.linalg.norm(pg @ fg - pk @ fk) ** 2 + torch.linalg.norm(pg @ fk - pk @ fg) ** 2
    assert float(subspace_distillation(fg, fk, rank=r)) == pytest.approx(float(want), rel=1e-10)


def test_subspace_loss_has_eq6_scale_a_sum_over_the_n_columns_not_a_mean():
    """Eq. 6 has no 1/N: on a hand-worked d=2, N=2, r=1 case the loss is the plain sum of squares, N times
    the per-column mean our first form returned."""
    fg = torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=torch.float64)  # top left singular vector e1: P_g = diag(1, 0)
    fk = torch.tensor([[0.0, 1.0], [3.0, 0.0]], dtype=torch.float64)  # top left singular vector e2: P_k = diag(0, 1)
    # P_g F_g = [[2, 0], [0, 0]], P_k F_k = [[0, 0], [3, 0]]: ||.||^2 = 4 + 9 = 13
    # P_g F_k = [[0, 1], [0, 0]], P_k F_g = [[0, 0], [0, 1]]: ||.||^2 = 1 + 1 = 2
    loss = float(subspace_distillation(fg, fk, rank=1))
    assert loss == pytest.approx(15.0, rel=1e-12)
    assert loss == pytest.approx(fg.shape[1] * 15.0 / 2, rel=1e-12)  # N = 2 times the old per-column value
    fg, fk = _feats(2, d=64, n=32), _feats(3, d=64, n=32)  # the policy's shape: 64-d features, batch 32
    ug = torch.linalg.svd(fg, full_matrices=False)[0][:, :16]
    uk = torch.linalg.svd(fk, full_matrices=False)[0][:, :16]
    pg, pk = ug @ ug.T, uk @ uk.T
    old = (((pg @ fg - pk @ fk) ** 2).sum() + ((pg @ fk - pk @ fg) ** 2).sum()) / 32
    assert float(subspace_distillation(fg, fk, rank=16)) == pytest.approx(32 * float(old), rel=1e-10)


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


# --- action distillation (Eq. 7) on any distribution with sample / log_prob -----------------
class _Gaussian:
    """A batch of unit-variance 1-D Gaussians (not a GMM: the loss only needs sample and log_prob)."""

    def __init__(self, mean: torch.Tensor) -> None:
        self.mean = mean

    def sample(self, generator=None) -> torch.Tensor:
        return self.mean + torch.randn(self.mean.shape, generator=generator, dtype=self.mean.dtype)

    def log_prob(self, a: torch.Tensor) -> torch.Tensor:
        return torch.distributions.Normal(self.mean, 1.0).log_prob(a)


def test_action_distillation_estimates_the_kl_of_any_policy_distribution():
    teacher = _Gaussian(torch.zeros(20_000, dtype=torch.float64))
    student = _Gaussian(torch.ones(20_000, dtype=torch.float64))
    kl = action_distillation(teacher, student, torch.Generator().manual_seed(0))
    assert float(kl) == pytest.approx(0.5, abs=0.03)  # KL(N(0,1) || N(1,1)) = 1/2
    assert float(action_distillation(teacher, teacher, torch.Generator().manual_seed(0))) == pytest.approx(0.0, abs=1e-12)
