"""YAML of the robot federation: ``data: {dataset: robotics, partition: {kind: robot_suites, ...}}``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from p2pfl.config.validation import Strict

__all__ = ["RobotSuitesPartition", "SUITE_NAMES"]

SUITE_NAMES = ("spatial", "object", "goal")


class RobotSuitesPartition(Strict):
    """Robot devices over task suites: Dirichlet(alpha) task skew within a suite (FedDRMan Sec. IV-1).

    Each suite's demos are split among ``reference_clients`` clients by Dirichlet(alpha) over
    tasks; the first ``clients_per_suite`` of them join the federation (the paper reuses shards
    of the 5-client partition for cross-suite runs). Device i belongs to suite i // clients_per_suite.
    """

    kind: Literal["robot_suites"]
    suites: list[str] = Field(default_factory=lambda: ["object"], min_length=1)
    clients_per_suite: int = Field(5, ge=1)
    reference_clients: int = Field(5, ge=1)
    alpha: float = Field(0.5, gt=0)
    demos_per_task: int = Field(150, ge=2, description="20 are too few to localise objects on unseen layouts")
    history: int = Field(1, ge=1, le=8, description="observation steps per sample; 1 by default: with 2, the proprio history reveals the last action and BC learns to copy it (the copycat problem: spatial 10% with 2 steps, 57.5% with 1, same training)")
    eval_episodes: int = Field(10, ge=1)
    horizon: int = Field(80, ge=1)
    source: Literal["generated", "libero"] = "generated"
    libero_tasks: dict[str, list[str]] = Field(default_factory=dict,
                                               description="libero source: suite -> demo files (relative to data.root)")

    @field_validator("suites")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"suites must be distinct; got {v}")
        return v

    @property
    def n_clusters(self) -> int:
        return len(self.suites)
