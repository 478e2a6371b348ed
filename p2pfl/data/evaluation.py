"""How a federation scores a model for a device: the answer of ``Federation.evaluation``.

The federation decides, the kernel runs it (``Simulation.evaluate_on``). Two ways:

- :class:`TestSetEvaluation`: the model's ``metric`` (accuracy or RMSE) on the device's local test
  set, as one evaluation job.
- :class:`JobEvaluation`: a job of the federation's own whose result the federation turns into the
  score (robotics: closed-loop rollouts on the device's suite). The job runs once per ``key``: devices
  scored with the same model reuse its result (``cached``), and only the first pays its compute, which
  is charged to that device under ``what`` once the result says how much it was. Each scoring is also
  logged under ``log`` with ``fields``, the result's own fields filled in when it is done. A job whose
  ``kept`` says how its result is written (:class:`KeptResult`) is read from the run's evaluation folder when
  an earlier run of the scenario left it there (``p2pfl.sim.evaluations``), instead of run again.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

import torch

__all__ = ["Evaluation", "JobEvaluation", "JobReport", "KeptResult", "TestSetEvaluation"]


@dataclass(frozen=True, eq=False)
class TestSetEvaluation:
    """Score on a local test set: inputs ``x`` (a tensor, or ``p2pfl.data.PoolRows``: rows of a pool that
    several devices share, gathered when the score is computed), targets ``y``, in ``metric``."""

    __test__ = False  # not a pytest class, whatever its name

    x: Any  # torch.Tensor | PoolRows (p2pfl.data.shards, which imports this module)
    y: torch.Tensor
    metric: Literal["accuracy", "rmse"]


@dataclass(frozen=True)
class JobReport:
    """What a :class:`JobEvaluation`'s result scores: the score, the FLOPs to charge (0 when ``cached``)
    and the log's fields known only now."""

    score: float
    flops: int
    fields: Mapping[str, Any]


@dataclass(frozen=True, eq=False)
class KeptResult:
    """How a scoring job's result is kept between runs: ``digest`` (40 hex digits) names the job by all that
    decides its result (weights, tasks, episodes, seeds...), ``encode`` gives it as a JSON object and ``decode``
    reads that back to an equal result (raising ``ValueError`` on anything else)."""

    digest: str
    encode: Callable[[Any], dict[str, Any]]
    decode: Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True, eq=False)
class JobEvaluation:
    """Score by a job: ``fn(*args)`` runs in an executor (picklable), at most ``flops`` FLOPs (its size
    for the executor's load balance); ``report(result, cached)`` scores its result; ``kept``: how the result
    is kept between runs (None: never).

    ``parts``, where given, replace ``fn(*args)``: each ``(fn, args)`` is a job of its own (``flops`` shared
    among them), so one scoring can use several cores, and ``combine(outcomes)`` (in the parts' order) is the
    result. The parts must give the result the one job would: a score cannot depend on the core count."""

    key: Hashable
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    flops: int
    report: Callable[[Any, bool], JobReport]
    what: str
    log: str
    fields: Mapping[str, Any]
    kept: Optional[KeptResult] = None
    parts: tuple[tuple[Callable[..., Any], tuple[Any, ...]], ...] = ()
    combine: Optional[Callable[[list[Any]], Any]] = None

    def __post_init__(self) -> None:
        if self.parts and self.combine is None:
            raise ValueError("JobEvaluation: parts need combine")


Evaluation = Union[TestSetEvaluation, JobEvaluation]
