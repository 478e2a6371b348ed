"""The mean loss of several models of one architecture on one data set, in one stacked pass.

IFCA's E-step scores each of the K cluster models on a device's training data
(Ghosh et al. 2020, Alg. 2) and original DAC scores each sampled peer's model
(s_ij = 1 / loss; Listo Zec et al. 2022, the method section). For a chain of linear layers
and element-wise activations (the ``mlp``) the models' weights are stacked and
each layer runs once for all of them as a batched matmul (``torch.baddbmm``)
instead of once per model; every other model is scored one state at a time
(``torch.func.functional_call``: the model given is left as it is).

The stacked pass computes what the loop of ``average_loss`` computes, each
model's loss summed per batch by the same ``task_loss``; only the matmul
kernel differs (a batched one), which may order its float reductions
differently. Tolerance (tested): each loss within ``STACKED_LOSS_RTOL`` of the
loop's, relative. Measured on an AMD EPYC core (torch 2.14, CPU) the two agree bit
for bit, and so do the N = 1,000 headline runs of IFCA and DAC before and after.
Its cost is the K models' matmuls (compute-bound for the ``mlp``); what it saves is
the per-model overhead (loading, module calls) and DAC's probe model per peer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

import torch
from torch import nn
from torch.func import functional_call

from p2pfl.learning.models import MLP
from p2pfl.learning.train import task_loss

__all__ = ["average_losses", "STACKED_LOSS_RTOL"]

#: Largest relative gap allowed between a stacked loss and ``average_loss`` of the same model.
STACKED_LOSS_RTOL = 1e-5

_ELEMENTWISE = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.Identity)


@torch.no_grad()
def average_losses(model: nn.Module, states: Sequence[Mapping[str, torch.Tensor]], x: torch.Tensor,
                   y: torch.Tensor, batch_size: int = 1024) -> list[float]:
    """``[average_loss(model with state s, x, y) for s in states]``; ``model`` only lends its architecture.

    Models are scored in eval mode, as ``average_loss`` scores them; 0.0 each on an empty set.
    """
    n = int(x.shape[0])
    if n == 0 or not states:
        return [0.0] * len(states)
    chain = _linear_chain(model)
    totals = [0.0] * len(states)
    for start in range(0, n, batch_size):
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]
        outs = _stacked_forward(chain, states, xb) if chain is not None else _forward_each(model, states, xb)
        for i, out in enumerate(outs):
            totals[i] += float(task_loss(out, yb, reduction="sum"))
    return [t / n for t in totals]


def _linear_chain(model: nn.Module) -> Optional[list[tuple[str, nn.Module]]]:
    """``(state-dict prefix, layer)`` of an ``MLP`` or ``nn.Sequential`` of linear layers and element-wise
    activations (flattening only before the first linear layer), in order; None for any other model."""
    if type(model) is MLP:
        seq, prefix = model.net, "net."
    elif type(model) is nn.Sequential:
        seq, prefix = model, ""
    else:
        return None
    layers = [(f"{prefix}{name}.", layer) for name, layer in seq.named_children()]
    seen_linear = False
    for _, layer in layers:
        if isinstance(layer, nn.Linear):
            seen_linear = True
        elif not (isinstance(layer, _ELEMENTWISE) or (isinstance(layer, nn.Flatten) and not seen_linear)):
            return None
    return layers if seen_linear else None


def _stacked_forward(chain: list[tuple[str, nn.Module]], states: Sequence[Mapping[str, torch.Tensor]],
                     x: torch.Tensor) -> torch.Tensor:
    """Outputs ``(K, batch, out)`` of the chain under each of the K states (layer by layer, stacked)."""
    h: Optional[torch.Tensor] = None  # (K, batch, features) after the first linear layer
    for prefix, layer in chain:
        if isinstance(layer, nn.Linear):
            w = torch.stack([s[prefix + "weight"] for s in states]).transpose(1, 2)
            inp = x.expand(len(states), *x.shape) if h is None else h
            if layer.bias is None:
                h = torch.bmm(inp, w)
            else:
                h = torch.baddbmm(torch.stack([s[prefix + "bias"] for s in states]).unsqueeze(1), inp, w)
        elif h is None:
            x = layer(x)  # flattening or an activation of the input: the same for every model
        else:
            h = layer(h)
    assert h is not None  # _linear_chain holds a linear layer
    return h


def _forward_each(model: nn.Module, states: Sequence[Mapping[str, torch.Tensor]], x: torch.Tensor) -> list[torch.Tensor]:
    """Outputs of ``model`` under each state in turn, in eval mode (the model's own mode is restored)."""
    was_training = model.training
    model.eval()
    try:
        return [functional_call(model, dict(s), (x,)) for s in states]
    finally:
        model.train(was_training)
