"""Device profiles: FLOP rate, access-link bandwidth and energy constants, fixed or drawn per device.

A heterogeneous fleet is a distribution in YAML, e.g.::

    devices:
      flops_per_s: {dist: lognormal, median: 2.0e9, sigma: 0.5}
      uplink_bps: {dist: choice, values: [1.0e7, 1.0e8], p: [0.7, 0.3]}
      send_j_per_bit: 4.3839e-7        # LTE instead of WiFi (Huang et al. 2012)

The energy constants (joules per bit sent, per bit received, per FLOP) feed the energy account
(``p2pfl.metrics.energy``). Their defaults are order-of-magnitude figures from published
measurements, meant to be overridden for the hardware being modelled:

- Radio: Huang et al., "A Close Examination of Performance and Power Characteristics of 4G LTE
  Networks", MobiSys 2012, fit radio power as ``alpha_u * uplink Mbps + alpha_d * downlink Mbps
  + beta``. Their WiFi coefficients, alpha_u = 283.17 mW/Mbps and alpha_d = 137.01 mW/Mbps, are
  2.8317e-7 J per bit sent and 1.3701e-7 J per bit received (LTE: 438.39 and 51.97 mW/Mbps,
  i.e. 4.3839e-7 and 5.197e-8 J/bit). Only the throughput terms are charged: the base power beta
  and the radio's tail energy depend on time and the radio's state machine, not on bits.
- Compute: Horowitz, "Computing's Energy Problem (and what we can do about it)", ISSCC 2014, 45 nm:
  a 32-bit float add costs 0.9 pJ and a multiply 3.7 pJ, but a general-purpose core spends about
  70 pJ per instruction on fetch, decode and register files, and a DRAM access 1.3-2.6 nJ per
  64 bits. 1e-10 J (100 pJ) per FLOP is that overhead's order of magnitude on a mobile CPU; SIMD
  lowers it, memory traffic raises it. At the default 1 GFLOP/s it is 0.1 W while computing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field, model_validator

from p2pfl.validation import Strict

__all__ = ["DeviceProfile", "DeviceProfilesSpec", "draw_profiles", "profile_columns"]


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
#: an energy constant: zero leaves that part out of the account
Energy = Union[Annotated[float, Field(ge=0)], Distribution]


class DeviceProfilesSpec(Strict):
    """YAML ``devices:`` block. Defaults: 1 GFLOP/s, 100 Mbit/s up and down, always available; the
    energy constants' defaults and their sources are in the module docstring."""

    flops_per_s: Quantity = 1.0e9
    uplink_bps: Quantity = 1.0e8
    downlink_bps: Quantity = 1.0e8
    send_j_per_bit: Energy = Field(2.8317e-7, description="J per bit transmitted (WiFi, Huang et al. 2012)")
    receive_j_per_bit: Energy = Field(1.3701e-7, description="J per bit received (WiFi, Huang et al. 2012)")
    j_per_flop: Energy = Field(1.0e-10, description="J per FLOP (order of magnitude, Horowitz 2014)")


@dataclass(frozen=True)
class DeviceProfile:
    """One device's capabilities and energy constants."""

    flops_per_s: float
    uplink_bps: float
    downlink_bps: float
    send_j_per_bit: float
    receive_j_per_bit: float
    j_per_flop: float


def _draw(q: object, rng: np.random.Generator, n: int) -> np.ndarray:
    if isinstance(q, (int, float)):
        return np.full(n, float(q))
    return q.draw(rng, n)  # type: ignore[attr-defined]


def draw_profiles(spec: DeviceProfilesSpec, n: int, rng: np.random.Generator) -> list[DeviceProfile]:
    """One profile per device; each field drawn in a fixed order from ``rng`` (a fixed number draws
    nothing, and the energy constants come last, so they never change the other fields' draws)."""
    columns = profile_columns(spec, n, rng)
    return [DeviceProfile(*(float(c[i]) for c in columns)) for i in range(n)]


def profile_columns(spec: DeviceProfilesSpec, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``draw_profiles``'s draws as six arrays (``DeviceProfile``'s fields in order), no object a device."""
    return [_draw(q, rng, n) for q in (spec.flops_per_s, spec.uplink_bps, spec.downlink_bps,
                                       spec.send_j_per_bit, spec.receive_j_per_bit, spec.j_per_flop)]


#: servers are not devices: unlimited, and outside the energy account
SERVER_PROFILE = DeviceProfile(flops_per_s=math.inf, uplink_bps=math.inf, downlink_bps=math.inf,
                               send_j_per_bit=0.0, receive_j_per_bit=0.0, j_per_flop=0.0)
