"""Aggregation maths on state dicts: pure functions, no time, no I/O (Flower's aggregate.py).

:func:`add_weighted_` is the float64 weighted sum both engines call: the event kernel's ``weighted_sum`` and
``weighted_average`` (DSGD's mix, every server's average) and the tensor engine's server averages
(``p2pfl.tensor.server``, FedAvg's), so one arithmetic gives both their bits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Union, cast

import torch

from p2pfl.learning.flat import FlatState, as_flat

__all__ = ["State", "add_weighted_", "weighted_sum", "weighted_average", "clone_state", "add_scaled", "sub",
           "squared_distance", "state_to_vector"]

#: A model state: a state dict, or a FlatState (read-only views of one vector).
State = Mapping[str, torch.Tensor]


def clone_state(state: Mapping[str, torch.Tensor]) -> State:
    """Detached copy of a state dict (what a message carries)."""
    if isinstance(state, FlatState):
        return state.clone()
    return {k: v.detach().clone() for k, v in state.items()}


def add_weighted_(acc: torch.Tensor, rows: Union[torch.Tensor, Sequence[torch.Tensor]],
                  weights: Union[float, Sequence[float]], block_bytes: int = 1 << 24) -> torch.Tensor:
    """acc += sum_k w_k x_k in float64, the terms added one after another in the order given: ((acc + w_1 x_1) +
    w_2 x_2) + ... (in place; ``acc``: float64, as many elements as each row; ``weights``: one a row, or one for all).

    Each term is ``x_k`` in float64 times ``w_k``; a block of rows (``block_bytes`` of terms) is added by a
    running sum (``cumsum``, sequential in the order of the rows, where ``torch.sum`` reduces more than 16 rows in
    another order), so a table of rows gives the bits of adding them one by one (tested)."""
    n = len(rows)
    flat = acc.view(-1) if acc.is_contiguous() else acc.reshape(-1)  # the elements in row-major order
    d = flat.numel()
    each = torch.as_tensor(weights, dtype=torch.float64)
    step = max(1, block_bytes // (8 * max(d, 1)))
    for a in range(0, n, step):
        part = rows[a : a + step]
        block = part.reshape(len(part), d) if isinstance(part, torch.Tensor) else torch.stack([r.reshape(d) for r in part])
        terms = torch.empty((len(part) + 1, d), dtype=torch.float64)
        terms[0] = flat
        w = each if each.dim() == 0 else each[a : a + len(part)].unsqueeze(1)
        torch.mul(block.to(torch.float64), w, out=terms[1:])
        flat.copy_(terms.cumsum_(0)[-1])
    if flat.data_ptr() != acc.data_ptr():
        acc.copy_(flat.view(acc.shape))
    return acc


def weighted_sum(items: Sequence[tuple[Mapping[str, torch.Tensor], float]]) -> State:
    """sum_k w_k x_k over ``[(state, weight)]``, in the order given (DSGD's mixing, FedAvg's numerator).

    Floating-point entries accumulate in float64 (:func:`add_weighted_`) and are cast back to their dtype;
    integer buffers (e.g. BatchNorm counters) are kept from the first state.
    Raises ValueError on an empty list or mismatched keys.
    """
    if not items:
        raise ValueError("weighted_sum needs at least one (state, weight) pair")
    first = items[0][0]
    weights = [w for _, w in items]
    if isinstance(first, FlatState) and all(as_flat(first, s) for s, _ in items[1:]):
        acc = torch.zeros_like(first.vector, dtype=torch.float64)  # the same sums, one vector at a time
        add_weighted_(acc, [cast(FlatState, s).vector for s, _ in items], weights)
        return FlatState(acc.to(first.layout.dtype), first.layout)
    keys = list(first.keys())
    for state, _ in items[1:]:
        if list(state.keys()) != keys:
            raise ValueError("states to combine have different keys")
    out: dict[str, torch.Tensor] = {}
    for k in keys:
        ref = items[0][0][k]
        if not torch.is_floating_point(ref):
            out[k] = ref.clone()  # integer buffers (e.g. BN counters): keep the first
            continue
        acc = torch.zeros_like(ref, dtype=torch.float64)
        add_weighted_(acc, [state[k] for state, _ in items], weights)
        out[k] = acc.to(ref.dtype)
    return out


def weighted_average(items: Sequence[tuple[Mapping[str, torch.Tensor], float]]) -> State:
    """FedAvg: sum_k w_k x_k / sum_k w_k over ``[(state, weight)]``.

    The weighted sum with weights ``w_k / total`` (each normalised before it
    multiplies, which fixes the rounding). Raises ValueError on an empty list,
    non-positive total weight or mismatched keys.
    """
    if not items:
        raise ValueError("weighted_average needs at least one (state, weight) pair")
    total = float(sum(w for _, w in items))
    if total <= 0:
        raise ValueError(f"weights must sum to a positive number; got {total}")
    return weighted_sum([(state, w / total) for state, w in items])


def sub(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> State:
    """a - b, key by key."""
    if (pair := as_flat(a, b)) is not None:
        return FlatState(pair[0].vector - pair[1].vector, pair[0].layout)
    return {k: a[k] - b[k] for k in a}


def add_scaled(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor], scale: float) -> State:
    """a + scale * b, key by key."""
    return {k: a[k] + scale * b[k] if torch.is_floating_point(a[k]) else a[k].clone() for k in a}


def state_to_vector(state: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """All floating-point entries flattened into one float64 vector."""
    if isinstance(state, FlatState):
        return state.vector.to(torch.float64)
    return torch.cat([v.reshape(-1).to(torch.float64) for v in state.values() if torch.is_floating_point(v)])


def squared_distance(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    """||a - b||^2 over floating-point entries."""
    return float(((state_to_vector(a) - state_to_vector(b)) ** 2).sum())
