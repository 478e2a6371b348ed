"""Random draws of the dynamics: which devices or links are affected, and up/down periods."""

from __future__ import annotations

import math

import numpy as np

from p2pfl.sim.dynamics.schema import _Durations

__all__ = ["draw_period", "affected"]


def draw_period(rng: np.random.Generator, law: _Durations, mean: float) -> float:
    """One up or down period with the given mean: exponential, or Weibull with ``law.shape``."""
    if law.dist == "exponential":
        return float(rng.exponential(mean))
    scale = mean / math.gamma(1.0 + 1.0 / law.shape)
    return float(scale * rng.weibull(law.shape))


def affected(rng: np.random.Generator, items: int, fraction: float) -> list[int]:
    """``round(fraction * items)`` indices drawn without replacement, sorted."""
    k = round(fraction * items)
    if k >= items:
        return list(range(items))
    return sorted(int(i) for i in rng.choice(items, size=k, replace=False))
