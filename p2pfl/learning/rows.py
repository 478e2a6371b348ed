"""A fleet's models as rows of one table: one ``[rows, P]`` tensor per architecture and one shared module.

Ten thousand copies of a small model cost more as Python objects than as numbers: an ``nn.Module`` of
the headline MLP (six modules, their dicts, four parameters) holds about 21 kB for 3.3 kB of weights.
A :class:`ModelTable` keeps the weights of every model of one architecture as rows of chunked
``[rows, P]`` tensors laid out like ``p2pfl.learning.flat`` lays out one model, and hands out
:class:`RowModel` s: ``nn.Module`` s with no submodules or parameters of their own, whose state is the
row (``live_state`` is a :class:`~p2pfl.learning.flat.FlatState` over it) and whose forward is the
shared module's under that state (``torch.func.functional_call``: the same operations, the same bits).
Averaging, sending and loading are row arithmetic. A job that needs a module of its own (training on a
copy, pickling to a worker) gets one materialized: the shared module's copy with the row's values
(``copy.deepcopy`` and pickling do that), so executors see a plain model. A row is never reused (a state
taken from a model, ``live_state``, may outlive it): the protocols that take rows make a model once per node.

Only models whose whole state is float parameters (no buffers) and that hold nothing else
(``is_plain``) are held this way; the kernel gives the others as modules of their own.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from p2pfl.learning.clone import clone_module, is_plain
from p2pfl.learning.flat import FlatState, Layout, flatten_

__all__ = ["ModelTable", "RowModel", "table_for"]


class ModelTable:
    """Rows of one architecture's weights (chunks of ``chunk`` rows; a row never moves)."""

    def __init__(self, template: nn.Module, layout: Layout, chunk: int) -> None:
        self.template = template  # the shared structure; its own weights are never read
        self.layout = layout
        self.chunk = max(1, chunk)
        self._chunks: list[torch.Tensor] = []
        self._next = 0
        self.repr = repr(template)

    def row(self, index: int) -> torch.Tensor:
        return self._chunks[index // self.chunk][index % self.chunk]

    def add(self, vector: torch.Tensor) -> RowModel:
        """A model whose weights are a new row holding ``vector``'s values."""
        index, self._next = self._next, self._next + 1
        if index // self.chunk == len(self._chunks):
            self._chunks.append(torch.empty((self.chunk, vector.numel()), dtype=self.layout.dtype))
        row = self.row(index)
        row.copy_(vector)
        return RowModel(self, index, FlatState(row, self.layout))

    def materialize(self, state: Mapping[str, torch.Tensor], training: bool) -> nn.Module:
        """A module of its own with ``state``'s values, laid out flat like a model of its own."""
        module = clone_module(self.template)
        flatten_(module)
        with torch.no_grad():
            module.load_state_dict(state)
        return module.train(training)


def table_for(model: nn.Module, chunk: int) -> ModelTable | None:
    """A table for models like ``model`` (its copy is the template), or None when they cannot be rows."""
    if not is_plain(model) or any(True for _ in model.buffers()):
        return None
    template = clone_module(model)
    flat = flatten_(template)
    if flat is None:
        return None
    return ModelTable(template, flat.layout, chunk)


class _Empty(OrderedDict[str, Any]):
    """An empty table of an ``nn.Module``'s (hooks, submodules, parameters) shared by every :class:`RowModel`:
    eleven empty hook tables a model are about 1.4 kB a device. A row takes no hooks, submodules or parameters."""

    def __setitem__(self, key: str, value: Any) -> None:
        raise TypeError("a fleet row model (RowModel) takes no hooks, submodules or parameters; register them on "
                        "model.materialize(), a module of its own")


#: ``nn.Module``'s per-instance tables a row model shares (all empty, all read-only)
_SHARED = {name: _Empty() for name in (
    "_parameters", "_buffers", "_modules", "_backward_pre_hooks", "_backward_hooks", "_forward_hooks",
    "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs",
    "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")}


class RowModel(nn.Module):
    """One model of a :class:`ModelTable`: its state is the table's row ``index`` (see the module docstring)."""

    def __init__(self, table: ModelTable, index: int, flat: FlatState) -> None:
        super().__init__()
        self.__dict__.update(_SHARED)
        self.table = table
        self.index = index
        self.flat = flat

    def forward(self, *args: Any) -> Any:
        template = self.table.template
        if template.training != self.training:
            template.train(self.training)
        return functional_call(template, self.views(), args)

    def views(self) -> dict[str, torch.Tensor]:
        """The row as named parameter views, made for this use and not kept: four views cached on each of
        10^4 rows cost about 2 kB a device, more than the row's own numbers."""
        return self.table.layout.views(self.flat.vector)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return OrderedDict(self.views())

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        with torch.no_grad():
            for name, value in self.views().items():
                value.copy_(state[name])
        return None

    def materialize(self) -> nn.Module:
        """A module of its own with this row's values (what a job trains or a worker receives)."""
        return self.table.materialize(self.views(), self.training)

    def __deepcopy__(self, memo: dict[int, Any]) -> nn.Module:
        return self.materialize()

    def __reduce__(self) -> Any:
        return self.materialize().__reduce__()

    def __repr__(self) -> str:
        return self.table.repr
