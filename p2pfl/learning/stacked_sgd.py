"""Minibatch SGD of k models of one architecture at once: the loop of ``train_local`` over stacked weights.

The batched executor trains a group of pending jobs with it, the tensor engine a chunk of the fleet's
rows. Each model keeps its own batch order (``orders(epoch)``: a ``(k, n)`` permutation per model), its
own momentum and its own loss; the step is ``train_local``'s element-wise SGD update on the stacked
leaves, so only the batched matmul's float reductions differ from k separate runs (tolerance:
``p2pfl.executors.batched.ATOL`` / ``RTOL``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, Protocol

import torch

from p2pfl.learning.train import sgd_step

__all__ = ["Batches", "stacked_sgd"]


class Batches(Protocol):
    """``(k, n, ...)`` inputs that give each model's batch as ``x[rows, idx]``: a tensor, or rows of a pool
    gathered per batch (``p2pfl.data.PoolRows``)."""

    @property
    def shape(self) -> Any: ...

    def __getitem__(self, sel: Any) -> torch.Tensor: ...


def stacked_sgd(loss_of: Callable[[dict[str, torch.Tensor], torch.Tensor, torch.Tensor], torch.Tensor],
                parameters: Mapping[str, torch.Tensor], x: Batches, y: torch.Tensor,
                orders: Callable[[int], torch.Tensor], *, epochs: int, batch_size: int, lr: float, momentum: float,
                weight_decay: float, flat: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, int]:
    """Train ``parameters`` (tensors with a leading model dimension k) in place.

    ``loss_of(params, xb, yb)`` is the ``(k,)`` mean batch loss of each model on its own batch; ``x``/``y`` are
    ``(k, n, ...)`` (``x`` a tensor or other :class:`Batches`). The gradient is taken at detached copies of
    ``parameters``, so nothing flows back through a view. With ``flat`` (a contiguous ``(k, P)`` tensor that ``parameters`` are views of) the step is one
    operation on ``flat``: each gradient is copied into its view's place in one ``(k, P)`` buffer, allocated
    once. Under ``vmap`` a Linear weight's gradient comes back transposed (strides ``(out * in, 1, out)``):
    that copy is its one transposing read; a ``torch.cat`` of reshaped gradients made two copies, and a step
    per view on transposed momentum buffers was slower still. Returns each model's summed batch losses
    (float64) and the batch count.
    """
    k, n = int(x.shape[0]), int(x.shape[1])
    rows = torch.arange(k).unsqueeze(1)
    names = list(parameters)
    if flat is None:
        leaves, grad_buf, slots = [parameters[name] for name in names], None, []
    else:
        base = flat.untyped_storage().data_ptr()
        if not flat.is_contiguous() or any(t.untyped_storage().data_ptr() != base for t in parameters.values()):
            raise ValueError("stacked_sgd: flat must be a contiguous (k, P) tensor and parameters views of it")
        grad_buf = torch.empty_like(flat)
        # each parameter's place in the buffer: its view's strides, at its offset within flat
        slots = [grad_buf.as_strided(t.shape, t.stride(), t.storage_offset() - flat.storage_offset())
                 for t in parameters.values()]
        leaves = [flat]
    momentum_buf: list[Optional[torch.Tensor]] = [None] * len(leaves)
    totals = torch.zeros(k, dtype=torch.float64)
    batches = 0
    for epoch in range(epochs):
        order = orders(epoch)
        for start in range(0, n, batch_size):
            idx = order[:, start : start + batch_size]
            params = {name: parameters[name].detach().requires_grad_() for name in names}
            losses = loss_of(params, x[rows, idx], y[rows, idx])
            grads: Sequence[torch.Tensor] = torch.autograd.grad(losses.sum(), list(params.values()))
            if grad_buf is not None:
                for slot, g in zip(slots, grads, strict=True):
                    slot.copy_(g)
                grads = [grad_buf]
            sgd_step(leaves, grads, momentum_buf, lr, momentum, weight_decay)  # train_local's step, stacked
            totals += losses.detach().double()
            batches += 1
    return totals, batches
