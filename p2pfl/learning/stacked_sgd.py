"""Minibatch SGD of k models of one architecture at once: the loop of ``train_local`` over stacked weights.

The batched executor trains a group of pending jobs with it, the tensor engine a chunk of the fleet's
rows. Each model keeps its own batch order (``orders(epoch)``: a ``(k, n)`` permutation per model), its
own momentum and its own loss; the step is ``train_local``'s element-wise SGD update on the stacked
leaves, so only the batched matmul's float reductions differ from k separate runs (tolerance:
``p2pfl.executors.batched.ATOL`` / ``RTOL``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch

from p2pfl.learning.train import sgd_step

__all__ = ["stacked_sgd"]


def stacked_sgd(loss_of: Callable[[dict[str, torch.Tensor], torch.Tensor, torch.Tensor], torch.Tensor],
                leaves: list[torch.Tensor], parameters: Callable[[], dict[str, torch.Tensor]], x: torch.Tensor,
                y: torch.Tensor, orders: Callable[[int], torch.Tensor], *, epochs: int, batch_size: int, lr: float,
                momentum: float, weight_decay: float, flat: bool = False) -> tuple[torch.Tensor, int]:
    """Train ``leaves`` (tensors with a leading model dimension k) in place.

    ``loss_of(parameters(), xb, yb)`` is the ``(k,)`` mean batch loss of each model on its own batch;
    ``x``/``y`` are ``(k, n, ...)``. ``parameters()`` gives the leaves themselves, or with ``flat`` views that
    tile one ``(k, P)`` leaf in order. The gradient is taken at what ``parameters()`` gives (detached, so
    nothing flows back through a view) and, with ``flat``, concatenated into the leaf's: a gradient through the
    slices would fill a zeroed ``(k, P)`` tensor per view and sum them, about 40% of a step of the headline's
    MLP at k = 256, for the same values. Returns each model's summed batch losses (float64) and the batch count.
    """
    k, n = int(x.shape[0]), int(x.shape[1])
    rows = torch.arange(k).unsqueeze(1)
    momentum_buf: list[Optional[torch.Tensor]] = [None] * len(leaves)
    totals = torch.zeros(k, dtype=torch.float64)
    batches = 0
    for epoch in range(epochs):
        order = orders(epoch)
        for start in range(0, n, batch_size):
            idx = order[:, start : start + batch_size]
            params = {name: t.detach().requires_grad_() for name, t in parameters().items()}
            losses = loss_of(params, x[rows, idx], y[rows, idx])
            grads = torch.autograd.grad(losses.sum(), list(params.values()))
            if flat:
                grads = (torch.cat([g.reshape(k, -1) for g in grads], dim=1),)
            for p, g in zip(leaves, grads, strict=True):
                p.grad = g
            sgd_step(leaves, momentum_buf, lr, momentum, weight_decay)  # train_local's step, on stacked leaves
            totals += losses.detach().double()
            batches += 1
    return totals, batches
