"""Flat model state: a model's parameters and buffers as views of one vector.

A flattened model's ``live_state`` is a :class:`FlatState`: a state dict whose
tensors are views of one contiguous vector. The state-dict maths
(``clone_state``, ``sub``, ``add_delta_``, ``load_state_``, ``weighted_sum``,
``state_to_vector``, message snapshots) then do one tensor operation instead of
one per layer, with the same element-wise arithmetic, so results are unchanged
bit for bit. That is what makes a step of a 10^4-device gossip run cheap.
Models whose state mixes dtypes (e.g. BatchNorm's integer counter) stay as they are.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

__all__ = ["FlatState", "Layout", "flatten_", "as_flat"]


@dataclass(frozen=True)
class Layout:
    """Names, shapes and offsets of the entries laid end to end in a flat vector."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]  # len(names) + 1
    dtype: torch.dtype

    def views(self, vector: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: vector[a:b].view(s) for n, s, a, b in zip(self.names, self.shapes, self.offsets, self.offsets[1:])}

    def pack(self, state: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The entries of ``state`` (same names and shapes) as one new vector in this layout."""
        return torch.cat([state[n].detach().reshape(-1).to(self.dtype) for n in self.names])


class FlatState(Mapping[str, torch.Tensor]):
    """A read-only state dict whose tensors are views of ``vector`` (laid out by ``layout``).

    The views are made on first access: most state maths never needs them.
    """

    __slots__ = ("_views", "layout", "vector")

    def __init__(self, vector: torch.Tensor, layout: Layout) -> None:
        self.vector = vector
        self.layout = layout
        self._views: Optional[dict[str, torch.Tensor]] = None

    def _entries(self) -> dict[str, torch.Tensor]:
        if self._views is None:
            self._views = self.layout.views(self.vector)
        return self._views

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._entries()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.layout.names)

    def __len__(self) -> int:
        return len(self.layout.names)

    def __repr__(self) -> str:
        return f"FlatState({len(self)} entries, {self.vector.numel()} values)"

    def clone(self) -> FlatState:
        return FlatState(self.vector.detach().clone(), self.layout)

    def __reduce__(self) -> tuple[type[FlatState], tuple[torch.Tensor, Layout]]:
        return (FlatState, (self.vector, self.layout))


#: Every layout laid out so far, each once (a fleet's models share one object).
_LAYOUTS: dict[Layout, Layout] = {}


def as_flat(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> Optional[tuple[FlatState, FlatState]]:
    """``(a, b)`` when both are flat states of one layout, else None."""
    if isinstance(a, FlatState) and isinstance(b, FlatState) and (a.layout is b.layout or a.layout == b.layout):
        return a, b
    return None


def flatten_(model: nn.Module) -> Optional[FlatState]:
    """Re-seat ``model``'s parameters and buffers as views of one vector (same values); its flat state.

    None (and the model unchanged) when its state mixes dtypes or devices, or is empty.
    """
    state = model.state_dict(keep_vars=True)
    values = list(state.values())
    if not values or len({(v.dtype, v.device) for v in values}) != 1 or not torch.is_floating_point(values[0]):
        return None
    if len({v.data_ptr() for v in values if v.numel()}) != sum(1 for v in values if v.numel()):
        return None  # tied weights: one tensor under two names
    names = tuple(state)
    shapes = tuple(tuple(v.shape) for v in values)
    offsets = [0]
    for v in values:
        offsets.append(offsets[-1] + v.numel())
    layout = Layout(names, shapes, tuple(offsets), values[0].dtype)
    layout = _LAYOUTS.setdefault(layout, layout)  # one object per layout: compared by identity, held once
    vector = layout.pack(state)
    views = layout.views(vector)
    with torch.no_grad():
        for name, view in views.items():
            owner, _, leaf = name.rpartition(".")
            module = model.get_submodule(owner)
            param = module._parameters.get(leaf)
            if param is not None:
                param.data = view  # the same Parameter object, now a view
            else:
                module._buffers[leaf] = view
    return FlatState(vector, layout)
