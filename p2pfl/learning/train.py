"""Local training and evaluation: real PyTorch on a device's shard.

Shuffling uses the device's own ``torch.Generator`` so runs are reproducible
and independent of the order in which devices are simulated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Optional

import torch
from pydantic import Field
from torch import nn
from torch.nn import functional as F

from p2pfl.learning.batches import batch_order
from p2pfl.validation import Strict

__all__ = ["TrainingSpec", "TrainResult", "train_local", "task_loss", "sgd_step", "evaluate_accuracy", "evaluate_rmse",
           "average_loss"]

#: Extra loss term ``penalty(model) -> scalar tensor`` added to cross-entropy (e.g. a proximal term).
Penalty = Callable[[nn.Module], torch.Tensor]
#: A whole batch loss ``loss(model, x, y) -> scalar tensor`` replacing the task loss (e.g. distillation).
BatchLoss = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
#: AdamW's first and second moments (one per parameter) and its step count (a one-element list).
AdamState = tuple[list[torch.Tensor], list[torch.Tensor], list[int]]


class TrainingSpec(Strict):
    """YAML ``training:`` block (paper defaults: SGD lr 0.01, momentum 0.9, batch 64)."""

    epochs: int = Field(1, ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(0.01, ge=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    optimizer: Literal["sgd", "adamw"] = "sgd"  # adamw: fresh torch AdamW per local job (FedDRMan's setting)
    grad_clip: Optional[float] = Field(None, gt=0, description="clip the gradient norm to this value")


@dataclass(frozen=True)
class TrainResult:
    """What one local training job did."""

    samples: int  # samples processed (epochs x shard size)
    loss: float  # mean training loss over all batches


def train_local(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    spec: TrainingSpec,
    *,
    generator: torch.Generator,
    epochs: Optional[int] = None,
    lr: Optional[float] = None,
    momentum: Optional[float] = None,
    penalty: Optional[Penalty] = None,
    loss_fn: Optional[BatchLoss] = None,
) -> TrainResult:
    """Minibatch SGD (momentum) on ``(x, y)`` for ``epochs`` epochs; momentum starts from zero each call.

    The batch loss is ``loss_fn(model, x, y)`` when given, else ``model.loss(x, y)`` when the model
    defines one (e.g. a GMM policy's negative log-likelihood), else cross-entropy / squared error.
    """
    epochs = spec.epochs if epochs is None else epochs
    lr = spec.lr if lr is None else lr
    momentum = spec.momentum if momentum is None else momentum
    n = x.shape[0]
    if n == 0 or epochs == 0:
        return TrainResult(samples=0, loss=0.0)
    params = [p for p in model.parameters() if p.requires_grad]
    momentum_buf: list[Optional[torch.Tensor]] = [None] * len(params)
    adam_state: AdamState | None = (([torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params], [0])
                                    if spec.optimizer == "adamw" else None)
    own_loss = getattr(model, "loss", None)
    model.train()
    total, batches = 0.0, 0
    for _ in range(epochs):
        order = batch_order(generator, n)
        for start in range(0, n, spec.batch_size):
            idx = order[start : start + spec.batch_size]
            for p in params:
                p.grad = None
            if loss_fn is not None:
                loss = loss_fn(model, x[idx], y[idx])
            elif callable(own_loss):
                loss = own_loss(x[idx], y[idx])
            else:
                loss = task_loss(model(x[idx]), y[idx])
            if penalty is not None:
                loss = loss + penalty(model)
            loss.backward()
            if spec.grad_clip is not None:
                _clip_grad_norm(params, spec.grad_clip)
            if adam_state is not None:
                _adamw_step(params, adam_state, lr, spec.weight_decay)
            else:
                sgd_step(params, [p.grad for p in params], momentum_buf, lr, momentum, spec.weight_decay)
            total += float(loss.detach())
            batches += 1
    return TrainResult(samples=n * epochs, loss=total / max(batches, 1))


def task_loss(out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy for class labels (int64); squared error for real targets (regression)."""
    if torch.is_floating_point(y):
        return F.mse_loss(out.reshape(-1), y, reduction=reduction)
    return F.cross_entropy(out, y, reduction=reduction)


@torch.no_grad()
def sgd_step(params: Sequence[torch.Tensor], grads: Sequence[Optional[torch.Tensor]],
             bufs: list[Optional[torch.Tensor]], lr: float, momentum: float, weight_decay: float) -> None:
    """One step of SGD with heavy-ball momentum, as ``torch.optim.SGD`` (dampening 0, no Nesterov).

    ``grads[i]`` is ``params[i]``'s gradient (None: not stepped). Written out because constructing a fresh
    torch optimizer per local job costs more than the step itself for the small models of large simulated fleets.
    """
    for i, (p, g) in enumerate(zip(params, grads, strict=True)):
        if g is None:
            continue
        if weight_decay:
            g = g.add(p, alpha=weight_decay)
        if momentum:
            buf = bufs[i]
            if buf is None:
                buf = bufs[i] = g.detach().clone()
            else:
                buf.mul_(momentum).add_(g)
            g = buf
        p.add_(g, alpha=-lr)


@torch.no_grad()
def _clip_grad_norm(params: Sequence[torch.Tensor], max_norm: float) -> None:
    """Scale gradients so their global L2 norm is at most ``max_norm`` (as torch's clip_grad_norm_)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    squares = [(g.double() ** 2).sum() for g in grads]
    total = squares[0]
    for s in squares[1:]:  # left to right, as sum() adds them
        total = total + s
    norm = torch.sqrt(total)
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / (float(norm) + 1e-6))


@torch.no_grad()
def _adamw_step(params: Sequence[torch.Tensor], state: AdamState, lr: float, weight_decay: float,
                betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
    """One AdamW step (decoupled weight decay, bias-corrected moments), as ``torch.optim.AdamW``.

    Written out like ``sgd_step``; torch.optim's lazy imports also crash after an OSMesa (MuJoCo)
    GL context exists in the process.
    """
    m_bufs, v_bufs, step = state
    step[0] += 1
    b1, b2 = betas
    c1, c2 = 1 - b1 ** step[0], 1 - b2 ** step[0]
    for p, m, v in zip(params, m_bufs, v_bufs):
        if p.grad is None:
            continue
        if weight_decay:
            p.mul_(1 - lr * weight_decay)
        m.mul_(b1).add_(p.grad, alpha=1 - b1)
        v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
        p.addcdiv_(m / c1, (v / c2).sqrt_().add_(eps), value=-lr)


@torch.no_grad()
def _mean_over_batches(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int,
                       per_batch_sum: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> float:
    """(1/n) sum over batches of ``per_batch_sum(model(x_b), y_b)``, in eval mode; 0.0 on an empty set."""
    if x.shape[0] == 0:
        return 0.0
    model.eval()
    total = 0.0
    for start in range(0, x.shape[0], batch_size):
        total += float(per_batch_sum(model(x[start : start + batch_size]), y[start : start + batch_size]))
    return total / x.shape[0]


def evaluate_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024) -> float:
    """Top-1 accuracy of ``model`` on ``(x, y)``; 0.0 on an empty set."""
    return _mean_over_batches(model, x, y, batch_size, lambda out, yb: (out.argmax(dim=1) == yb).sum())


def evaluate_rmse(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024) -> float:
    """Root mean squared error of a regression model on ``(x, y)``."""
    return _mean_over_batches(model, x, y, batch_size, lambda out, yb: ((out.reshape(-1) - yb) ** 2).sum()) ** 0.5


def average_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024) -> float:
    """Mean task loss (cross-entropy or squared error) of ``model`` on ``(x, y)`` (IFCA/DAC score models by it)."""
    return _mean_over_batches(model, x, y, batch_size, lambda out, yb: task_loss(out, yb, reduction="sum"))
