"""The GMM action head's likelihood (FedDRMan Eq. 4) and action distillation between GMMs (Eq. 7).

The rest of FedDRMan's maths is tested where it lives: tests/learning/test_distill.py,
tests/learning/test_spectral.py, tests/clustering/test_cua.py (no MuJoCo needed anywhere).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from p2pfl.learning.distill import action_distillation
from p2pfl.robotics.gmm import GMM, GMMHead, gmm_nll

pytestmark = pytest.mark.robotics


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
