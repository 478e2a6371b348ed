"""In-place updates of a live model from state-dict deltas."""

from __future__ import annotations

import weakref
from collections.abc import Mapping

import torch
from torch import nn

from p2pfl.learning.flat import as_flat, flatten_
from p2pfl.learning.rows import RowModel

__all__ = ["live_state", "add_delta_", "load_state_", "flatten_live_"]

_LIVE: weakref.WeakKeyDictionary[nn.Module, Mapping[str, torch.Tensor]] = weakref.WeakKeyDictionary()


def live_state(model: nn.Module) -> Mapping[str, torch.Tensor]:
    """``model.state_dict()``, cached: its tensors alias the live parameters and buffers.

    Valid as long as parameters are updated in place (as everything here does);
    building a state dict anew costs more than averaging a small model.
    """
    if isinstance(model, RowModel):
        return model.flat
    state = _LIVE.get(model)
    if state is None:
        state = _LIVE[model] = model.state_dict()
    return state


def flatten_live_(model: nn.Module) -> bool:
    """Lay ``model``'s state in one vector (``p2pfl.learning.flat``) so its state maths is one
    operation per model; False when its state cannot be flat (mixed dtypes)."""
    flat = flatten_(model)
    if flat is not None:
        _LIVE[model] = flat
    return flat is not None


@torch.no_grad()
def add_delta_(model: nn.Module, delta: Mapping[str, torch.Tensor], scale: float = 1.0) -> None:
    """model <- model + scale * delta, for every floating-point entry of the state."""
    live = live_state(model)
    if (pair := as_flat(live, delta)) is not None:
        pair[0].vector.add_(pair[1].vector, alpha=scale)
        return
    for name, value in live.items():
        if torch.is_floating_point(value):
            value.add_(delta[name].to(value.dtype), alpha=scale)


@torch.no_grad()
def load_state_(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Copy ``state`` into ``model`` in place (keeps parameter objects, unlike a rebind)."""
    live = live_state(model)
    if (pair := as_flat(live, state)) is not None:
        pair[0].vector.copy_(pair[1].vector)
        return
    for name, value in live.items():
        value.copy_(state[name])
