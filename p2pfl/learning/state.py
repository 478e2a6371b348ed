"""In-place updates of a live model from state-dict deltas."""

from __future__ import annotations

import weakref
from collections.abc import Mapping

import torch
from torch import nn

__all__ = ["live_state", "add_delta_", "load_state_"]

_LIVE: weakref.WeakKeyDictionary[nn.Module, dict[str, torch.Tensor]] = weakref.WeakKeyDictionary()


def live_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()``, cached: its tensors alias the live parameters and buffers.

    Valid as long as parameters are updated in place (as everything here does);
    building a state dict anew costs more than averaging a small model.
    """
    state = _LIVE.get(model)
    if state is None:
        state = _LIVE[model] = model.state_dict()
    return state


@torch.no_grad()
def add_delta_(model: nn.Module, delta: Mapping[str, torch.Tensor], scale: float = 1.0) -> None:
    """model <- model + scale * delta, for every floating-point entry of the state."""
    for name, value in live_state(model).items():
        if torch.is_floating_point(value):
            value.add_(delta[name].to(value.dtype), alpha=scale)


@torch.no_grad()
def load_state_(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Copy ``state`` into ``model`` in place (keeps parameter objects, unlike a rebind)."""
    for name, value in live_state(model).items():
        value.copy_(state[name])
