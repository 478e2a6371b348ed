"""RunInfo: the small, read-only description of a run that a protocol receives.

A protocol never sees the Simulation. What it may know before any message
arrives is here: node ids, the device graph and which devices each server
serves, the task's public facts (input shape, classes, the scenario's model and
training settings), and per-purpose seeds. Data sizes and anything else a node
learns about another node come through messages it received and paid for.
The true clusters are here for the ``oracle`` reference only (the kernel scores what the other
protocols report, ``ctx.report_clusters``); ``held_out`` derives the pooled references' held-out
devices from them, a choice of the experiment's design like the partition itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import networkx as nx
import torch

from p2pfl.errors import ConfigError
from p2pfl.seeding import child_seed

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from p2pfl.learning.models import ModelSpec
    from p2pfl.learning.train import TrainingSpec

__all__ = ["RunInfo", "ServerInfo"]


@dataclass(frozen=True)
class ServerInfo:
    """One server node: its id, YAML name and the devices attached to it."""

    id: int
    name: str
    attached: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class RunInfo:
    """What every node of a run may know up front (frozen; the graph is a frozen copy)."""

    seed: int
    n_devices: int
    servers: tuple[ServerInfo, ...]
    graph: nx.Graph
    input_shape: tuple[int, ...]
    num_classes: int
    task: str
    dataset: str
    model: ModelSpec
    training: TrainingSpec
    torch_device: torch.device
    model_hint: Any = None
    true_clusters: tuple[int, ...] = field(default=(), repr=False)

    @property
    def device_ids(self) -> range:
        """Device ids: 0 .. n_devices - 1."""
        return range(self.n_devices)

    @property
    def server_ids(self) -> tuple[int, ...]:
        """Server node ids (they follow the devices)."""
        return tuple(s.id for s in self.servers)

    def seed_for(self, purpose: str, *ids: int) -> int:
        """A seed of its own for ``purpose`` and ``ids`` (e.g. ``"ifca.init", draw, k``), from the run's seed."""
        return child_seed(self.seed, purpose, *ids)

    def held_out(self, per_cluster: int) -> tuple[int, ...]:
        """The last ``per_cluster`` device ids of every true cluster, sorted: the devices a pooled reference
        scores but does not train on (``held_out_per_cluster``); refused when a cluster would be left empty."""
        if per_cluster == 0:
            return ()
        members: dict[int, list[int]] = {}
        for device, cluster in enumerate(self.true_clusters):
            members.setdefault(cluster, []).append(device)
        out: list[int] = []
        for cluster, devices in sorted(members.items()):
            if len(devices) <= per_cluster:
                raise ConfigError(f"field 'protocol.held_out_per_cluster': cluster {cluster} has {len(devices)} "
                                  f"devices, so holding out {per_cluster} leaves none to train; lower it below "
                                  f"{len(devices)}")
            out.extend(devices[-per_cluster:])
        return tuple(sorted(out))

    def build_model(self, seed: int) -> nn.Module:
        """The scenario's model with weights drawn from ``seed``, on the run's torch device."""
        from p2pfl.learning.models import build_model

        model = build_model(self.model, self.input_shape, self.num_classes, seed=seed, hint=self.model_hint)
        return model.to(self.torch_device)
