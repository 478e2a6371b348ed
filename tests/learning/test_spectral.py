"""SRB, spectral rebalancing (FedDRMan Eq. 13-14): p2pfl.learning.spectral."""

from __future__ import annotations

import pytest
import torch

from p2pfl.learning.spectral import rebalance_update, spectral_rebalance


# --- spectral rebalancing (Eq. 13-14) -------------------------------------------------------
def _matrix_with_spectrum(sigmas, seed=0):
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(8, 8, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))
    s = torch.tensor(sigmas, dtype=torch.float64)
    return u[:, :6] @ torch.diag(s) @ v.T, u[:, :6], v


def test_srb_lifts_exactly_the_singular_values_below_the_threshold():
    sig = [8.0, 4.0, 2.0, 1.0, 0.5, 0.25]  # cumulative shares .510 .764 .892 .955 .987 1
    m, _, _ = _matrix_with_spectrum(sig)
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
