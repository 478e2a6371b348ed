"""Build the executor a scenario asks for; ``auto`` picks by the run's modelled training work."""

from __future__ import annotations

import multiprocessing as mp
from typing import TYPE_CHECKING, Optional

import torch
from torch import nn

from p2pfl.errors import ConfigError
from p2pfl.executors.spec import ExecutorSpec, available_cores

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.executors.base import Executor

__all__ = ["make_executor", "resolve_kind", "stacks_well", "AUTO_PROCESS_MIN_S", "REAL_FLOPS_PER_S"]

#: Training FLOPs per second one core sustains here (cnn28 and mlp on this project's machines; an estimate
#: for ``auto`` only, never for results).
REAL_FLOPS_PER_S = 3e9
#: ``auto`` starts workers when the run's training would take at least this long on one core: starting
#: them (importing torch in each) costs a few seconds.
AUTO_PROCESS_MIN_S = 20.0


def resolve_kind(spec: ExecutorSpec, *, threads: int, torch_device: torch.device, train_flops: float,
                 model: nn.Module, cores: Optional[int] = None) -> str:
    """The executor kind ``spec`` means for this run (``auto`` resolved, by what is measured fastest).

    ``auto``: ``batched`` for models of linear layers and activations only (measured 3-5x
    inline for an MLP with 20-1,000 devices; convolutions ran slower stacked, 0.7x);
    otherwise ``process`` on every core when the training would take at least
    ``AUTO_PROCESS_MIN_S`` on one core, else ``inline``. ``cores``: the cores this run may use
    (a sweep's share for its cell); None: every core this process may use (``available_cores``).
    """
    if spec.kind != "auto":
        if spec.kind in ("process", "ray") and torch_device.type != "cpu":
            raise ConfigError(f"field 'executor': kind {spec.kind!r} runs jobs on CPU workers but torch_device is "
                              f"{str(torch_device)!r}; use executor: inline or torch_device: cpu")
        return spec.kind
    if torch_device.type != "cpu":
        return "inline"
    if stacks_well(model):
        return "batched"
    if _cores(cores) < 2 * threads:
        return "inline"
    return "process" if train_flops / REAL_FLOPS_PER_S >= AUTO_PROCESS_MIN_S else "inline"


def _cores(cores: Optional[int]) -> int:
    """``cores`` as given, or every core this process may use."""
    return available_cores() if cores is None else cores


#: Modules a model may consist of for ``auto`` to stack it (a stacked linear layer is one batched matmul).
_STACKS_WELL = (nn.Linear, nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.Flatten, nn.Identity, nn.Sequential)


def stacks_well(model: nn.Module) -> bool:
    """Whether ``model`` is built of linear layers and activations only (and trains with the task loss)."""
    if callable(getattr(model, "loss", None)):
        return False
    return all(isinstance(m, _STACKS_WELL) for m in model.modules() if m is not model) and any(
        isinstance(m, nn.Linear) for m in model.modules())


def start_method(threads: int, renders: bool) -> str:
    """How process workers start: ``"fork"`` (sharing the parent's memory) where that is safe, single-threaded
    jobs that do not render (an OpenGL context does not survive a fork), else ``"spawn"``."""
    return "fork" if threads == 1 and not renders and "fork" in mp.get_all_start_methods() else "spawn"


def make_executor(kind: str, spec: ExecutorSpec, *, threads: int, cores: Optional[int] = None,
                  renders: bool = False, work_flops: float = 0.0) -> Executor:
    """The executor of ``kind`` (from ``resolve_kind``) with ``spec``'s settings; ``workers`` defaults to
    ``cores`` (as for ``resolve_kind``) divided by the scenario's threads. Process workers are forked
    (sharing the parent's memory) where that is safe: single-threaded jobs that do not render (``renders``,
    the federation's ``Federation.renders``: an OpenGL context does not survive a fork); with two or more,
    this process is one of them (it would otherwise wait idle while they train).

    ``batched`` trains stacked groups in this process and sends the rest (evaluations, the protocol's
    own jobs) to a pool of ``workers`` slots when ``workers`` is set, or when the protocol's own jobs
    (``work_flops``, e.g. RND discovery) would take ``AUTO_PROCESS_MIN_S`` on one core."""
    cores = _cores(cores)
    workers = spec.workers or max(1, cores // threads)
    start = start_method(threads, renders)
    if kind == "process":
        from p2pfl.executors.process import ProcessExecutor

        return ProcessExecutor(workers, start=start, parent_share=workers >= 2)
    if kind == "ray":
        from p2pfl.executors.ray import RayExecutor

        return RayExecutor(spec.address, workers=spec.workers, threads=threads, cores=cores)
    if kind == "batched":
        from p2pfl.executors.batched import BatchedExecutor
        from p2pfl.executors.process import ProcessExecutor

        wanted = spec.workers is not None or work_flops / REAL_FLOPS_PER_S >= AUTO_PROCESS_MIN_S
        pool = ProcessExecutor(workers, start=start, parent_share=True) \
            if wanted and workers >= 2 else None
        return BatchedExecutor(pool)
    from p2pfl.executors.inline import InlineExecutor

    return InlineExecutor()
