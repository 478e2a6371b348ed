"""Gaussian mixture action head (LIBERO / robomimic GMM policy) and its likelihood.

A head outputs, per sample, mixture logits ``(B, M)``, component means ``(B, M, A)`` and
standard deviations ``(B, M, A)`` (diagonal). Behaviour cloning minimises the negative
log-likelihood of the expert action (FedDRMan Eq. 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["GMM", "GMMHead", "gmm_log_prob", "gmm_nll"]


@dataclass(frozen=True)
class GMM:
    """A batch of diagonal Gaussian mixtures."""

    logits: torch.Tensor  # (B, M)
    means: torch.Tensor  # (B, M, A)
    stds: torch.Tensor  # (B, M, A)

    def log_prob(self, a: torch.Tensor) -> torch.Tensor:
        """log pi(a), shape (B,)."""
        return gmm_log_prob(self.logits, self.means, self.stds, a)

    def sample(self, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """One action per sample: draw a component by its weight, then a Gaussian sample."""
        probs = F.softmax(self.logits, dim=-1)
        k = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        idx = k[:, None, None].expand(-1, 1, self.means.shape[-1])
        mu = self.means.gather(1, idx).squeeze(1)
        sd = self.stds.gather(1, idx).squeeze(1)
        eps = torch.randn(mu.shape, generator=generator, dtype=mu.dtype, device=mu.device)
        return mu + sd * eps

    def mode(self) -> torch.Tensor:
        """Mean of the most likely component (deterministic evaluation, as LIBERO's low-noise eval)."""
        k = self.logits.argmax(dim=-1)
        return self.means[torch.arange(k.shape[0]), k]


def gmm_log_prob(logits: torch.Tensor, means: torch.Tensor, stds: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """log sum_m w_m N(a; mu_m, diag(std_m^2)) with w = softmax(logits); shape (B,)."""
    z = (a[:, None, :] - means) / stds
    comp = -0.5 * (z**2).sum(-1) - torch.log(stds).sum(-1) - 0.5 * a.shape[-1] * math.log(2 * math.pi)
    return torch.logsumexp(F.log_softmax(logits, dim=-1) + comp, dim=-1)


def gmm_nll(gmm: GMM, a: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of actions ``a`` (B, A) under ``gmm`` (Eq. 4)."""
    return -gmm.log_prob(a).mean()


class GMMHead(nn.Module):
    """Linear -> ReLU -> (logits, tanh means, softplus stds + min_std), M modes over A dims."""

    def __init__(self, d_in: int, action_dim: int, modes: int = 5, hidden: int = 128, min_std: float = 1e-3) -> None:
        super().__init__()
        self.modes, self.action_dim, self.min_std = modes, action_dim, min_std
        self.trunk = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU())
        self.out = nn.Linear(hidden, modes * (2 * action_dim + 1))

    def forward(self, h: torch.Tensor) -> GMM:
        o = self.out(self.trunk(h))
        m, a = self.modes, self.action_dim
        logits = o[:, :m]
        means = torch.tanh(o[:, m : m + m * a]).reshape(-1, m, a)
        stds = F.softplus(o[:, m + m * a :]).reshape(-1, m, a) + self.min_std
        return GMM(logits, means, stds)
