"""The devices' energy account: joules for the radio (per bit sent and received) and for compute (per FLOP).

A linear model, per device i::

    radio_i   = 8 * bytes_sent_i * send_j_per_bit_i + 8 * bytes_received_i * receive_j_per_bit_i
    compute_i = flops_i * j_per_flop_i

It charges exactly what the Recorder counts. Bytes sent are every hop the device transmitted,
lost ones included (their bytes were spent; a hop dropped before it started costs nothing), as in
``bytes_per_node``. Bytes received are what arrived: messages delivered to the device
(``bytes_received_per_node``) plus those it received as a relay of a routed message
(``bytes_relayed_per_node``); a message lost on the link or arriving while the device is offline
is not received. FLOPs are ``compute_flops_per_node``, work lost to going offline included.
Servers are not devices and have no account. Idle and base power, radio tail energy and memory
traffic are not modelled.

The constants are per device (``p2pfl.sim.profiles``, the YAML ``devices:`` block). Their defaults
are order-of-magnitude figures from Huang et al., MobiSys 2012 (WiFi radio power per Mbit/s) and
Horowitz, ISSCC 2014 (energy per operation on a general-purpose core); the profiles module quotes
the numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

__all__ = ["EnergyModel", "device_energy_j", "energy_summary"]

_CONSTANTS = ("send_j_per_bit", "receive_j_per_bit", "j_per_flop")


@dataclass(frozen=True)
class EnergyModel:
    """The energy constants of each device (one entry per device, in device order)."""

    send_j_per_bit: tuple[float, ...]
    receive_j_per_bit: tuple[float, ...]
    j_per_flop: tuple[float, ...]


def _check(model: EnergyModel, n: int, counts: dict[str, Sequence[int]]) -> None:
    for name in _CONSTANTS:
        values = getattr(model, name)
        if len(values) != n:
            raise ValueError(f"{name} must have one entry per device; got {len(values)} for {n} devices")
        bad = [v for v in values if not v >= 0]  # also catches NaN
        if bad:
            raise ValueError(f"{name} must be >= 0 J; got {bad[0]!r}")
    for name, values in counts.items():
        if len(values) != n:
            raise ValueError(f"{name} must have one entry per device; got {len(values)} for {n} devices")


def device_energy_j(model: EnergyModel, *, bytes_sent: Sequence[int], bytes_received: Sequence[int],
                    flops: Sequence[int]) -> tuple[list[float], list[float]]:
    """(radio J, compute J) per device, by the formula in the module docstring.

    Every argument has one entry per device; ``bytes_received`` is all the bytes the device's radio
    received (delivered to it plus relayed by it)."""
    n = len(model.send_j_per_bit)
    _check(model, n, {"bytes_sent": bytes_sent, "bytes_received": bytes_received, "flops": flops})
    return _device_energy_j(model, bytes_sent, bytes_received, flops)


def _device_energy_j(model: EnergyModel, bytes_sent: Sequence[int], bytes_received: Sequence[int],
                     flops: Sequence[int]) -> tuple[list[float], list[float]]:
    radio = [8 * s * es + 8 * r * er
             for s, r, es, er in zip(bytes_sent, bytes_received, model.send_j_per_bit, model.receive_j_per_bit)]
    compute = [f * ef for f, ef in zip(flops, model.j_per_flop)]
    return radio, compute


def _constant(values: tuple[float, ...]) -> Union[float, dict[str, float], None]:
    """A constant as summary.json states it: the number when every device has it, else its range."""
    if not values:
        return None
    if all(v == values[0] for v in values):
        return values[0]
    return {"min": min(values), "max": max(values)}


def _mean_max(values: list[float]) -> tuple[float, float]:
    return (sum(values) / len(values), max(values)) if values else (0.0, 0.0)


def energy_summary(model: EnergyModel, *, bytes_sent: Sequence[int], bytes_received: Sequence[int],
                   bytes_relayed: Sequence[int], flops: Sequence[int]) -> dict[str, Any]:
    """summary.json's ``energy`` block: the constants (``model``), mean and max J per device of the
    radio, compute and their total (``j_per_device``), and the radio and compute J of each device."""
    n = len(model.send_j_per_bit)
    _check(model, n, {"bytes_sent": bytes_sent, "bytes_received": bytes_received, "bytes_relayed": bytes_relayed,
                      "flops": flops})
    received = [r + relayed for r, relayed in zip(bytes_received, bytes_relayed)]
    radio, compute = _device_energy_j(model, bytes_sent, received, flops)
    total = [a + b for a, b in zip(radio, compute)]
    per_device: dict[str, float] = {}
    for name, values in (("radio", radio), ("compute", compute), ("total", total)):
        per_device[f"{name}_mean"], per_device[f"{name}_max"] = _mean_max(values)
    return {
        "model": {name: _constant(getattr(model, name)) for name in _CONSTANTS},
        "j_per_device": per_device,
        "radio_j_per_node": radio,
        "compute_j_per_node": compute,
    }
