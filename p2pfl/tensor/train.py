"""Local training and scoring of the fleet's rows, a chunk of devices at a time.

Each device trains as the event kernel trains it (``train_local``: minibatch SGD, momentum from zero each
job), its batch orders drawn from its own generator as the kernel's are (``p2pfl.learning.batches``: one
permutation an epoch, in the order of its jobs). The orders of every job a run can give a
device are drawn when the fleet is built and kept as small integers (``R x E x S`` of them a device: R jobs,
E epochs, S samples), not as 5 kB of generator state a device. A chunk of k devices trains as one stacked
model (``p2pfl.learning.stacked_sgd``, the batched executor's step), so a run's weights are within the
batched executor's tolerance of ``inline``'s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap

from p2pfl.learning.batches import batch_orders
from p2pfl.learning.flat import Layout
from p2pfl.learning.stacked_sgd import stacked_sgd
from p2pfl.learning.train import TrainingSpec, task_loss
from p2pfl.tensor.data import FleetData

__all__ = ["RowTrainer", "chunks"]


def chunks(n: int, size: int) -> Iterator[slice]:
    """``slice(a, b)`` over ``range(n)`` in pieces of at most ``size``."""
    for a in range(0, n, size):
        yield slice(a, min(a + size, n))


def _order_dtype(samples: int) -> torch.dtype:
    return torch.uint8 if samples <= 256 else torch.int16 if samples <= 2**15 else torch.int32


class RowTrainer:
    """Trains and scores rows of one architecture (``template`` lends the structure, ``layout`` the flat order)."""

    def __init__(self, template: nn.Module, layout: Layout, data: FleetData, spec: TrainingSpec, *, seed: int,
                 jobs: int, chunk: int) -> None:
        self.template = template.train()
        self.layout = layout
        self.data = data
        self.spec = spec
        self.chunk = max(1, chunk)
        n, s = int(data.x.shape[0]), data.samples
        self.epochs = spec.epochs
        self.orders = batch_orders(seed, n, s, jobs * spec.epochs, _order_dtype(s))
        self.jobs_done = np.zeros(n, dtype=np.int64)
        self.train_wall_s = 0.0  # measured seconds in ``train`` (never steers the simulation)
        self._loss = vmap(self._one_loss)

    def _one_loss(self, p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return task_loss(functional_call(self.template, p, (x,)), y)

    def _views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        k, lay = int(flat.shape[0]), self.layout
        return {name: flat[:, a:b].view(k, *shape) for name, shape, a, b in
                zip(lay.names, lay.shapes, lay.offsets, lay.offsets[1:])}

    def train(self, rows: torch.Tensor, devices: torch.Tensor) -> torch.Tensor:
        """Train ``rows`` (``(k, P)``, the models of ``devices``) in place, one job each; their mean losses."""
        t0 = time.perf_counter()
        flat = rows.detach().clone()
        first = torch.from_numpy(self.jobs_done[devices.numpy()] * self.epochs)
        totals, batches = stacked_sgd(self._loss, self._views(flat), self.data.x[devices],
                                      self.data.y[devices], lambda e: self.orders[devices, first + e].long(),
                                      epochs=self.epochs, batch_size=self.spec.batch_size, lr=self.spec.lr,
                                      momentum=self.spec.momentum, weight_decay=self.spec.weight_decay, flat=flat)
        self.jobs_done[devices.numpy()] += 1
        rows.copy_(flat)
        self.train_wall_s += time.perf_counter() - t0
        return totals / max(batches, 1)

    @torch.no_grad()
    def losses(self, models: torch.Tensor, devices: torch.Tensor) -> torch.Tensor:
        """``(len(devices), K)``: each of the K ``models``' (rows) mean task loss on each device's training data,
        in eval mode as ``average_loss`` scores it (float64)."""
        x, y = self.data.x[devices], self.data.y[devices]
        k, s = int(models.shape[0]), int(x.shape[1])
        flat_x = x.reshape(len(devices) * s, *x.shape[2:])
        flat_y = y.reshape(-1)
        out = torch.empty((len(devices), k), dtype=torch.float64)
        views = self._views(models)
        self.template.eval()
        try:
            for q in range(k):
                logits = functional_call(self.template, {name: v[q] for name, v in views.items()}, (flat_x,))
                per = task_loss(logits, flat_y, reduction="none").reshape(len(devices), -1)
                out[:, q] = per.double().sum(dim=1) / s
        finally:
            self.template.train()
        return out

    @torch.no_grad()
    def score(self, rows: torch.Tensor, devices: torch.Tensor) -> torch.Tensor:
        """Each model's score on its device's test set: accuracy, or RMSE for regression (float64)."""
        x, y = self.data.test_x[devices], self.data.test_y[devices]
        out = vmap(lambda p, xb: functional_call(self.template, p, (xb,)))(self._views(rows), x)
        if self.data.task == "regression":
            return (out.reshape(y.shape) - y).double().pow(2).mean(dim=1).sqrt()
        return (out.argmax(dim=-1) == y).double().mean(dim=1)
