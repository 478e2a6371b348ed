"""Executors run the real compute behind ``ctx.train``; the kernel charges the modelled time.

Training requested by devices is wrapped in a ``TrainJob``. ``submit`` returns
a SimPy event carrying the ``TrainResult``. The inline executor runs each job at
once, one by one. A batched or Ray executor collects the jobs submitted at the
same simulated instant and succeeds their events after running them together;
results never depend on when or where the real work ran, only simulated time
from the cost model does.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional

import simpy
import torch
from torch import nn

from p2pfl.learning.train import BatchLoss, Penalty, TrainingSpec, TrainResult, train_local

__all__ = ["TrainJob", "Executor", "InlineExecutor", "EXECUTORS"]


@dataclass
class TrainJob:
    """One device's local training request."""

    node: int
    model: nn.Module
    x: torch.Tensor
    y: torch.Tensor
    spec: TrainingSpec
    generator: torch.Generator
    epochs: Optional[int] = None
    lr: Optional[float] = None
    momentum: Optional[float] = None
    penalty: Optional[Penalty] = None
    loss: Optional[BatchLoss] = None

    def run(self) -> TrainResult:
        return train_local(self.model, self.x, self.y, self.spec, generator=self.generator, epochs=self.epochs,
                           lr=self.lr, momentum=self.momentum, penalty=self.penalty, loss_fn=self.loss)


class Executor(ABC):
    """Runs TrainJobs; ``wall_s`` accumulates measured seconds of real training."""

    def __init__(self) -> None:
        self.wall_s = 0.0

    @abstractmethod
    def submit(self, env: simpy.Environment, job: TrainJob) -> simpy.Event:
        """Return an event whose value is the job's TrainResult."""


class InlineExecutor(Executor):
    """Runs each job immediately in this process (the default)."""

    def submit(self, env: simpy.Environment, job: TrainJob) -> simpy.Event:
        t0 = time.perf_counter()
        result = job.run()
        self.wall_s += time.perf_counter() - t0
        return env.event().succeed(result)


EXECUTORS: dict[str, type[Executor]] = {"inline": InlineExecutor}
