"""Pooled training, shared by the pooled references (Centralized, the pooled Oracle, pooled Conditional).

A pooled reference models a data centre that already holds its devices' training
data (no bytes). ``held_out_per_cluster: h`` keeps the last h devices (by id) of
every ground-truth cluster out of the pooled training set: they are still scored,
on their own test sets, so a report can compare devices whose data was trained on
with devices new to the model (a memorization check). The held-out choice is part
of the experiment's design, read from the ground truth like the partition itself;
the protocols never learn anything from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from pydantic import Field

from p2pfl.errors import ConfigError
from p2pfl.protocols.base import ProtocolParams

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.data.federation import Shard
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["HELD_OUT_HELP", "PooledParams", "held_out_devices", "pooled_xy"]

HELD_OUT_HELP = ("pooled training: the last h devices of every true cluster train nothing and are only scored "
         "(a memorization check); 0 trains on every device")


class PooledParams(ProtocolParams):
    """Centralized's params (the pooled Oracle and Conditional have the same field)."""

    held_out_per_cluster: int = Field(0, ge=0, description=HELD_OUT_HELP)


def held_out_devices(run: RunInfo, per_cluster: int, pooled: bool = True) -> tuple[int, ...]:
    """The last ``per_cluster`` device ids of every true cluster, sorted (``RunInfo.held_out``); refused when a
    cluster would be empty, or when the protocol does not train ``pooled`` (a protocol with a ``mode`` field)."""
    if per_cluster and not pooled:
        raise ConfigError("field 'protocol.held_out_per_cluster' holds devices out of pooled training; set "
                          "protocol.mode: pooled or remove it")
    return run.held_out(per_cluster)


def pooled_xy(shards: tuple[Shard, ...], devices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The training data of ``devices``, concatenated in device order."""
    return (torch.cat([shards[d].train_x for d in devices]), torch.cat([shards[d].train_y for d in devices]))
