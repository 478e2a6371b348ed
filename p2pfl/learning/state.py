"""In-place updates of a live model from state-dict deltas."""

from __future__ import annotations

from typing import Mapping

import torch
from torch import nn

__all__ = ["add_delta_", "load_state_"]


@torch.no_grad()
def add_delta_(model: nn.Module, delta: Mapping[str, torch.Tensor], scale: float = 1.0) -> None:
    """model <- model + scale * delta, for every floating-point entry of the state."""
    for name, value in model.state_dict().items():
        if torch.is_floating_point(value):
            value.add_(delta[name].to(value.dtype), alpha=scale)


@torch.no_grad()
def load_state_(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Copy ``state`` into ``model`` in place (keeps parameter objects, unlike a rebind)."""
    for name, value in model.state_dict().items():
        value.copy_(state[name])
