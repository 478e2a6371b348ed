"""Jobs: the real compute behind ``ctx.train`` and ``ctx.evaluate``, as self-contained values.

A job holds everything it needs (a copy of the model, the generator's state, the
data or a reference to shared data) and nothing of the simulation, so any
executor can run it in this process, in a worker process or on a Ray node.
Running a job never changes the simulation; its outputs are applied by the
kernel at the job's completion time (see :mod:`p2pfl.executors.base`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Optional, TypeVar, Union

import torch
from torch import nn

from p2pfl.data.shards import Samples, as_tensor
from p2pfl.learning.train import (
    BatchLoss,
    Penalty,
    TrainingSpec,
    TrainResult,
    evaluate_accuracy,
    evaluate_rmse,
    train_local,
)

__all__ = ["TrainJob", "TrainOutcome", "EvalJob", "CallJob", "Job", "run_job", "Stacking", "stacks", "stacking_of"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class TrainOutcome:
    """What a training job returns: the model's new state, the generator's new state, the result."""

    state: Mapping[str, torch.Tensor]
    generator_state: torch.Tensor
    result: TrainResult


@dataclass
class TrainJob:
    """One local training run of one node (``train_local`` with the given overrides).

    ``model``, ``generator``, ``penalty`` and ``loss`` are the job's own copies; a
    penalty or loss that is shipped to a worker must be picklable (a module-level
    function, a ``functools.partial`` of one, or an object with ``__call__``).
    ``state``: a copy of the model's state at submit that the caller keeps unchanged (``ctx.train``'s
    start for ``delta=True``), so an executor that snapshots the state may take it instead of copying
    again; it is not pickled (the model travels with the job and holds the same values).
    ``x`` may be rows of a pool the device shares (``p2pfl.data.PoolRows``): a pending job then holds
    row numbers, not images, and ``inputs()`` gathers them when it trains (a job sent to a worker names
    the pool by its shared key: ``p2pfl.executors.base.pool_shards``).
    """

    node: int
    model: nn.Module
    x: Samples
    y: torch.Tensor
    spec: TrainingSpec
    generator: torch.Generator
    threads: int = 1
    flops: float = 0.0  # modelled FLOPs (executors balance their workers by it)
    epochs: Optional[int] = None
    lr: Optional[float] = None
    momentum: Optional[float] = None
    penalty: Optional[Penalty] = None
    loss: Optional[BatchLoss] = None
    state: Optional[Mapping[str, torch.Tensor]] = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "state"}

    def inputs(self) -> torch.Tensor:
        """The training inputs as a tensor (gathered from the pool's rows where ``x`` holds them)."""
        return as_tensor(self.x)

    @property
    def samples(self) -> int:
        """Samples the job will process (known before it runs: the duration is modelled from it)."""
        epochs = self.spec.epochs if self.epochs is None else self.epochs
        return int(self.x.shape[0]) * epochs

    def run(self) -> TrainOutcome:
        result = train_local(self.model, self.inputs(), self.y, self.spec, generator=self.generator, epochs=self.epochs,
                             lr=self.lr, momentum=self.momentum, penalty=self.penalty, loss_fn=self.loss)
        return TrainOutcome({k: v.detach() for k, v in self.model.state_dict().items()},
                            self.generator.get_state(), result)


@dataclass
class EvalJob:
    """Score a copy of a model on a test set: top-1 accuracy, or RMSE for regression."""

    node: int
    model: nn.Module
    x: Samples  # as TrainJob's
    y: torch.Tensor
    metric: Literal["accuracy", "rmse"]
    threads: int = 1
    flops: float = 0.0

    def run(self) -> float:
        score = evaluate_rmse if self.metric == "rmse" else evaluate_accuracy
        return score(self.model, as_tensor(self.x), self.y)


@dataclass
class CallJob:
    """``fn(*args)`` for ``ctx.work``: any other real compute of a node (e.g. an RND predictor's fit).

    ``fn`` must be a module-level function (it is shipped by name); its return value is the
    outcome. Whether changes it makes to its arguments reach the caller depends on the executor,
    so callers use the returned value only.
    """

    node: int
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    threads: int = 1
    flops: float = 0.0

    def run(self) -> Any:
        return self.fn(*self.args)


Job = Union[TrainJob, EvalJob, CallJob]


@dataclass(frozen=True)
class Stacking:
    """How the batched executor may run many calls of one ``ctx.work`` function as one job.

    Calls whose ``key(*args)`` agree may share a group of at most ``limit``. ``run([args, ...])``
    returns each call's value, within the function's stated tolerance of calling it one by one;
    with ``run=None`` the group's calls run one by one (the same bits), and grouping only saves
    shipping: a group travels to a worker as one job, with the arguments its calls share sent once.
    A grouped call's arguments are read when its group runs (when the first of the group is
    awaited), so its caller must not change them meanwhile.
    """

    run: Optional[Callable[[Sequence[tuple[Any, ...]]], list[Any]]]
    key: Callable[..., Hashable]
    limit: int


def stacks(run: Optional[Callable[[Sequence[tuple[Any, ...]]], list[Any]]], key: Callable[..., Hashable],
           limit: int) -> Callable[[F], F]:
    """Mark a ``ctx.work`` function as stackable (see :class:`Stacking`); other executors ignore the mark."""
    def mark(fn: F) -> F:
        fn.__dict__["stacking"] = Stacking(run, key, limit)
        return fn
    return mark


def stacking_of(job: Job) -> Optional[Stacking]:
    """The :class:`Stacking` of a call job's function, if it has one."""
    return getattr(job.fn, "stacking", None) if isinstance(job, CallJob) else None


def run_job(job: Job) -> Any:
    """Run ``job`` with its own intra-op thread count (the scenario's, never the worker's)."""
    if torch.get_num_threads() != job.threads:
        torch.set_num_threads(job.threads)
    return job.run()
