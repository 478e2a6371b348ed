"""Pure cost functions: transfer time, message size, and FLOPs of a model.

Units are in the names. Backward is modelled as twice the forward FLOPs
(the usual 1:2 forward/backward ratio), so one training sample costs
3 x forward FLOPs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Union, overload

import numpy as np
import torch
from torch import nn

from p2pfl.learning.flat import FlatState
from p2pfl.sim.deferred import DeferredState

__all__ = [
    "HEADER_BYTES",
    "SCALAR_BYTES",
    "tx_time_s",
    "arrival_time_s",
    "payload_bytes",
    "message_bytes",
    "forward_flops_per_sample",
    "train_flops",
    "BACKWARD_FACTOR",
]

#: Fixed per-message header: src (8) + dst (8) + kind (16) + round (8) + seq (8) + length (8) + checksum (8).
HEADER_BYTES = 64
#: A Python int/float in a payload travels as 8 bytes.
SCALAR_BYTES = 8
#: FLOPs of one backward pass relative to a forward pass.
BACKWARD_FACTOR = 2.0


@overload
def tx_time_s(size_bytes: int, bandwidth_bps: float) -> float: ...
@overload
def tx_time_s(size_bytes: int, bandwidth_bps: np.ndarray) -> np.ndarray: ...
def tx_time_s(size_bytes: int, bandwidth_bps: Union[float, np.ndarray]) -> Union[float, np.ndarray]:
    """Serialization time of ``size_bytes`` on a link of ``bandwidth_bps`` bits/s (an array: one a link; the
    event kernel's links one message at a time, the tensor engine's a round's at once)."""
    return 8.0 * size_bytes / bandwidth_bps


def arrival_time_s(start_s: float, size_bytes: int, bandwidth_bps: float, latency_s: float) -> float:
    """Arrival time of a message whose uplink becomes free at ``start_s``: start + 8S/B + L."""
    return start_s + tx_time_s(size_bytes, bandwidth_bps) + latency_s


def payload_bytes(payload: Any) -> int:
    """Exact bytes of a payload: tensor/array bytes, 8 per scalar, UTF-8 for strings."""
    if payload is None:
        return 0
    if isinstance(payload, torch.Tensor):
        return payload.numel() * payload.element_size()
    if isinstance(payload, FlatState):  # the sum over its entries, without making their views
        return payload.vector.numel() * payload.vector.element_size()
    if isinstance(payload, DeferredState):  # the state it will be, sized without reading it
        return payload.nbytes
    if isinstance(payload, np.ndarray):
        return int(payload.nbytes)
    if isinstance(payload, (bool, int, float, np.integer, np.floating)):
        return SCALAR_BYTES
    if isinstance(payload, str):
        return len(payload.encode("utf-8"))
    if isinstance(payload, Mapping):
        return sum(payload_bytes(v) for v in payload.values())
    if isinstance(payload, (list, tuple)):
        return sum(payload_bytes(v) for v in payload)
    raise TypeError(f"cannot size payload of type {type(payload).__name__}")


def message_bytes(payload: Any) -> int:
    """Bytes on the wire: payload plus the fixed header."""
    return HEADER_BYTES + payload_bytes(payload)


def _layer_flops(module: nn.Module, inp: torch.Tensor, out: torch.Tensor) -> int:
    """Forward FLOPs of one layer for one sample (multiply-add = 2 FLOPs)."""
    if isinstance(module, nn.Conv2d):
        k = module.kernel_size[0] * module.kernel_size[1]
        per_out = 2 * (module.in_channels // module.groups) * k + (1 if module.bias is not None else 0)
        return per_out * out[0].numel()
    if isinstance(module, nn.Linear):
        return (2 * module.in_features + (1 if module.bias is not None else 0)) * module.out_features
    if isinstance(module, (nn.MaxPool2d, nn.AvgPool2d)):
        ks = module.kernel_size if isinstance(module.kernel_size, tuple) else (module.kernel_size,) * 2
        return ks[0] * ks[1] * out[0].numel()
    if isinstance(module, (nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)):
        return inp[0].numel()
    if isinstance(module, (nn.ReLU, nn.LeakyReLU, nn.GELU, nn.Tanh, nn.Sigmoid)):
        return out[0].numel()
    if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)):
        return 2 * out[0].numel()
    return 0


def forward_flops_per_sample(model: nn.Module, input_shape: tuple[int, ...]) -> int:
    """Forward FLOPs for one sample, counted from conv, linear, pooling, activation and norm layers."""
    total = 0

    def hook(module: nn.Module, args: tuple, out: Any) -> None:
        nonlocal total
        if len(list(module.children())) == 0:
            total += _layer_flops(module, args[0], out)

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            device = next(model.parameters()).device
            model(torch.zeros((1, *input_shape), device=device))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return int(total)


def train_flops(forward_flops: int, samples: int) -> int:
    """FLOPs of training on ``samples`` samples (forward + backward)."""
    return int(round(forward_flops * (1.0 + BACKWARD_FACTOR) * samples))  # noqa: RUF046 (numpy scalars in)
