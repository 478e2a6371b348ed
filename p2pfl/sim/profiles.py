"""Device profiles: FLOP rate and access-link bandwidth, fixed or drawn per device.

A heterogeneous fleet is a distribution in YAML, e.g.::

    devices:
      flops_per_s: {dist: lognormal, median: 2.0e9, sigma: 0.5}
      uplink_bps: {dist: choice, values: [1.0e7, 1.0e8], p: [0.7, 0.3]}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field, model_validator

from p2pfl.validation import Strict

__all__ = ["DeviceProfile", "DeviceProfilesSpec", "draw_profiles"]


class Uniform(Strict):
    dist: Literal["uniform"]
    low: float = Field(gt=0)
    high: float = Field(gt=0)

    @model_validator(mode="after")
    def _order(self) -> Uniform:
        if self.high < self.low:
            raise ValueError(f"high must be >= low; got low={self.low}, high={self.high}")
        return self

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, size=n)


class LogNormal(Strict):
    dist: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(ge=0, le=10)  # exp(10 z) already spans tens of orders of magnitude; more overflows

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.median * np.exp(self.sigma * rng.standard_normal(n))


class Choice(Strict):
    dist: Literal["choice"]
    values: list[float] = Field(min_length=1)
    p: list[float] | None = None

    @model_validator(mode="after")
    def _check(self) -> Choice:
        if any(v <= 0 for v in self.values):
            raise ValueError("values must all be > 0")
        if self.p is not None:
            if len(self.p) != len(self.values):
                raise ValueError(f"p must have one entry per value; got {len(self.p)} for {len(self.values)} values")
            if abs(sum(self.p) - 1.0) > 1e-9 or min(self.p) < 0:
                raise ValueError(f"p must be non-negative and sum to 1; got {self.p}")
        return self

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=float), size=n, p=self.p)


Distribution = Annotated[Union[Uniform, LogNormal, Choice], Field(discriminator="dist")]
Quantity = Union[Annotated[float, Field(gt=0)], Distribution]


class DeviceProfilesSpec(Strict):
    """YAML ``devices:`` block. Defaults: 1 GFLOP/s, 100 Mbit/s up and down, always available."""

    flops_per_s: Quantity = 1.0e9
    uplink_bps: Quantity = 1.0e8
    downlink_bps: Quantity = 1.0e8


@dataclass(frozen=True)
class DeviceProfile:
    """One device's capabilities."""

    flops_per_s: float
    uplink_bps: float
    downlink_bps: float


def _draw(q: object, rng: np.random.Generator, n: int) -> np.ndarray:
    if isinstance(q, (int, float)):
        return np.full(n, float(q))
    return q.draw(rng, n)  # type: ignore[attr-defined]


def draw_profiles(spec: DeviceProfilesSpec, n: int, rng: np.random.Generator) -> list[DeviceProfile]:
    """One profile per device; each field drawn in a fixed order from ``rng``."""
    f = _draw(spec.flops_per_s, rng, n)
    up = _draw(spec.uplink_bps, rng, n)
    down = _draw(spec.downlink_bps, rng, n)
    return [DeviceProfile(float(a), float(b), float(c)) for a, b, c in zip(f, up, down)]


SERVER_PROFILE = DeviceProfile(flops_per_s=math.inf, uplink_bps=math.inf, downlink_bps=math.inf)
