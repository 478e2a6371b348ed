"""A user model living outside the p2pfl package, named in YAML as ``example_models:two_layer``."""

from __future__ import annotations

import math

from torch import nn


def two_layer(input_shape: tuple[int, ...], num_classes: int, width: int = 32) -> nn.Module:
    """Flatten, one hidden layer of ``width`` tanh units, a linear classifier."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), width), nn.Tanh(),
                         nn.Linear(width, num_classes))
