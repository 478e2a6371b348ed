"""Random draws of the dynamics: which devices or links are affected, and up/down periods."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Optional

import numpy as np

from p2pfl.seeding import child_seed
from p2pfl.sim.dynamics.schema import _Durations

__all__ = ["draw_period", "affected", "renewal", "dynamics_seed"]


def draw_period(rng: np.random.Generator, law: _Durations, mean: float) -> float:
    """One up or down period with the given mean: exponential, or Weibull with ``law.shape``."""
    if law.dist == "exponential":
        return float(rng.exponential(mean))
    scale = mean / math.gamma(1.0 + 1.0 / law.shape)
    return float(scale * rng.weibull(law.shape))


def renewal(rng: np.random.Generator, law: _Durations) -> Iterator[tuple[bool, float]]:
    """An alternating renewal process from its stationary state: (up, length) of each period in turn, the first
    up with probability up / (up + down) (the mean times). The event kernel's churn and link failures
    (``schedule._renewal``) and the tensor engine's replay of them (``p2pfl.maths.churn``) draw from this one
    generator, so the same stream gives the same periods to both."""
    up_mean, down_mean = law.means()
    up = bool(rng.random() >= down_mean / (up_mean + down_mean))
    while True:
        yield up, draw_period(rng, law, up_mean if up else down_mean)
        up = not up


def dynamics_seed(seed: int, dynamics_seed: Optional[int]) -> int:
    """The seed of the dynamics' streams: ``dynamics.seed`` if given, else one derived from the scenario's."""
    return child_seed(dynamics_seed if dynamics_seed is not None else seed, "dynamics")


def affected(rng: np.random.Generator, items: int, fraction: float) -> list[int]:
    """``round(fraction * items)`` indices drawn without replacement, sorted."""
    k = round(fraction * items)
    if k >= items:
        return list(range(items))
    return sorted(int(i) for i in rng.choice(items, size=k, replace=False))
