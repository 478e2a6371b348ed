"""The conditioned model (Conditional-PCA paper, Sec. III-B, Eq. 2).

The statistics vector s is concatenated after the feature extractor and before
the fully-connected layers: CNN28 -> [f_3136 || s_l] -> FC(hidden) -> ReLU ->
FC(C); CNN32 (Eq. 3) -> [f_4096 || s_l] -> FC(256) -> ReLU -> FC(C); for the MLP (8x8 or vector inputs) s is concatenated to the flattened
input of the first FC layer. s is a non-persistent buffer: it is not in the
state dict, so it is never sent, averaged or loaded; each device sets its own.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from p2pfl.learning.models import CNN28, CNN32, MLP, ModelSpec, build_model

__all__ = ["ConditionedModel", "conditioned_model"]


class ConditionedModel(nn.Module):
    """features(x) || s -> head; ``stats`` holds this device's s (not in the state dict)."""

    stats: torch.Tensor  # a buffer (register_buffer), declared for the type checker

    def __init__(self, features: nn.Module, head: nn.Sequential, stats_dim: int) -> None:
        super().__init__()
        self.features = features
        self.head = head
        self.register_buffer("stats", torch.zeros(stats_dim), persistent=False)

    def set_statistics(self, s: np.ndarray | torch.Tensor) -> None:
        """Condition on ``s`` (shape ``(stats_dim,)``)."""
        s = torch.as_tensor(s, dtype=self.stats.dtype, device=self.stats.device)
        if s.shape != self.stats.shape:
            raise ValueError(f"statistics must have shape {tuple(self.stats.shape)}; got {tuple(s.shape)}")
        self.stats.copy_(s)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_with(x, self.stats.expand(x.shape[0], -1))

    def forward_with(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """Forward with per-sample statistics ``s`` ``(batch, stats_dim)`` (pooled training)."""
        return self.head(torch.cat([self.features(x), s], dim=1))


def conditioned_model(spec: ModelSpec, input_shape: tuple[int, ...], num_classes: int, stats_dim: int, *,
                      seed: int) -> ConditionedModel:
    """The scenario's model with s injected before its FC layers; the same seed gives the same weights."""
    base = build_model(spec, input_shape, num_classes, seed=seed)
    features: nn.Module
    if isinstance(base, (CNN28, CNN32)):
        features, first, rest = base.features, base.classifier[0], list(base.classifier[1:])
    elif isinstance(base, MLP):
        features, first, rest = base.net[0], base.net[1], list(base.net[2:])
    else:  # pragma: no cover - every zoo model is handled above
        raise TypeError(f"cannot condition a {type(base).__name__}")
    if not isinstance(first, nn.Linear):  # pragma: no cover - the zoo's heads start with a Linear layer
        raise TypeError(f"cannot condition {type(base).__name__}: its head starts with {type(first).__name__}")
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed + 1)
        first = nn.Linear(first.in_features + stats_dim, first.out_features)
    return ConditionedModel(features, nn.Sequential(first, *rest), stats_dim)
