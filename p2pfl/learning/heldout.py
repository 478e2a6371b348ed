"""The mean loss of a model on held-out samples (a validation or test set), in eval mode and without gradients."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

__all__ = ["heldout_loss"]


def heldout_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 256) -> Optional[float]:
    """The mean of ``model.loss(x, y)`` over the samples (batches of ``batch``, weighted by their size), the model in
    eval mode and left in the mode it was in; None where there are no samples or the model has no ``loss``."""
    n = int(y.shape[0])
    loss = getattr(model, "loss", None)
    if n == 0 or not callable(loss):
        return None
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            total = sum(float(loss(x[a : a + batch], y[a : a + batch])) * min(batch, n - a) for a in range(0, n, batch))
    finally:
        model.train(was_training)
    return total / n
