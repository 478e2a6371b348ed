"""The scenario: one validated, frozen description of a run.

YAML layout (every block but ``topology``, ``data`` and ``protocol`` has defaults)::

    name: quickstart
    seed: 0
    topology: topologies/neighbourhood16.yaml   # a file, or an inline mapping
    data: {dataset: digits, partition: {kind: iid}}
    model: {name: auto}
    training: {epochs: 1, batch_size: 32, lr: 0.05, momentum: 0.9}
    devices: {flops_per_s: 1.0e9}
    protocol: {name: gossip, rounds: 30}
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, SerializeAsAny, field_validator, model_validator

from p2pfl.data import DataSpec
from p2pfl.executors.spec import ExecutorSpec
from p2pfl.learning.models import ModelSpec
from p2pfl.learning.train import TrainingSpec
from p2pfl.protocols.base import ProtocolParams
from p2pfl.sim.dynamics.schema import DynamicsSpec
from p2pfl.sim.grid import EvaluationSpec
from p2pfl.sim.profiles import DeviceProfilesSpec
from p2pfl.topology import TopologySpec
from p2pfl.validation import Strict

__all__ = ["Scenario"]


class Scenario(Strict):
    """A fully resolved scenario: the topology is inlined and the protocol params are validated."""

    name: str = "scenario"
    description: str = ""
    seed: int = Field(0, ge=0)
    topology: TopologySpec
    data: DataSpec = DataSpec()
    model: ModelSpec = ModelSpec()
    training: TrainingSpec = TrainingSpec()
    devices: DeviceProfilesSpec = DeviceProfilesSpec()
    protocol: SerializeAsAny[ProtocolParams]
    executor: ExecutorSpec = ExecutorSpec()
    torch_device: str = "cpu"
    threads: int = Field(1, ge=1, description="torch intra-op threads for the real compute")
    engine: Literal["events", "tensor"] = Field(
        "events", description="events: SimPy processes and messages per device (every protocol, dynamics); "
                              "tensor: the fleet as tensors, rounds as array programs (gossip, dsgd, fedavg, ifca, "
                              "oracle, local on a static lossless fleet; 10^6 devices on one machine; p2pfl.tensor)")
    events: Literal["all", "no_messages"] = Field(
        "all", description="what events.jsonl holds: every event, or all but each message hop's send, deliver "
                           "and drop (counted all the same: the summary is unchanged; for fleets of 10^5 devices "
                           "and more, where those lines are most of the file and of the kernel's time)")
    dynamics: Optional[DynamicsSpec] = Field(None, description="churn, link failures, partitions, mobility, "
                                                                "stragglers (absent: a static fleet)")
    evaluation: Optional[EvaluationSpec] = Field(
        None, description="every_s: also score every device's current model on a simulated-time grid from t = 0 "
                          "(engine: events; p2pfl.sim.grid), so <metric>_over_time has points from the start")
    save_models: Literal["none", "final"] = Field(
        "none", description="final: models.npz in the run directory, each device's model as last scored "
                            "(equal states once; p2pfl.learning.saved), to score them again without training")

    @model_validator(mode="after")
    def _dynamics_fit_topology(self) -> Scenario:
        if self.save_models != "none" and self.engine != "events":
            raise ValueError(f"save_models: {self.save_models} needs engine: events (the tensor engine keeps "
                             "no model per device); remove save_models or use engine: events")
        if self.evaluation is not None and self.engine != "events":
            raise ValueError("evaluation.every_s needs engine: events (the tensor engine scores at its rounds only); "
                             "remove evaluation or use engine: events")
        dyn = self.dynamics
        if dyn is not None and dyn.mobility is not None and self.topology.kind != "random_geometric":
            raise ValueError(f"dynamics.mobility needs topology kind random_geometric (devices with positions "
                             f"and a radius); got kind {self.topology.kind}")
        return self

    @field_validator("torch_device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v not in ("cpu", "cuda", "auto") and not (v.startswith("cuda:") and v[5:].isdigit()):
            raise ValueError("must be 'cpu', 'cuda', 'cuda:N' or 'auto'")
        return v
