"""The fleet's data as stacked tensors: ``x[i]`` is device i's training inputs, ``test_x[i]`` its test inputs.

Devices whose shards hold rows of a shared pool (a transform's images, ``p2pfl.data.PoolRows``) keep them as
row numbers into one pool (:class:`Inputs`), as the event kernel's shards do.

Synthetic tasks (``synthetic_linear``, ``synthetic_logistic``) are the fleet's arrays of
``p2pfl.data.synthetic.synthetic_fleet`` as they are: the one draw whose rows are the event kernel's shards,
without a shard object a device. Every other dataset is built by ``p2pfl.data`` and its shards stacked, which
needs every device to hold as many samples as every other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from p2pfl.data.datasets import dataset_info
from p2pfl.data.schema import DataSpec, ParameterShiftPartition
from p2pfl.data.shards import Federation, PoolRows, as_tensor
from p2pfl.data.synthetic import synthetic_fleet
from p2pfl.errors import ConfigError
from p2pfl.sim.world import build_any_federation

__all__ = ["FleetData", "Inputs", "fleet_data"]


@dataclass(frozen=True)
class Inputs:
    """Every device's inputs: ``pool[rows[i]]`` for device i, or ``pool[i]`` without ``rows``. Devices under one
    transform draw rows of one pool (``p2pfl.data.PoolRows``), which the fleet keeps once, not a copy each."""

    pool: torch.Tensor  # (N, S, *input_shape), or (M, *input_shape) with rows
    rows: Optional[torch.Tensor] = None  # (N, S) int64 into pool

    def __getitem__(self, devices: torch.Tensor) -> torch.Tensor:
        """The inputs of ``devices``: ``(len(devices), S, *input_shape)``."""
        return self.pool[devices] if self.rows is None else self.pool[self.rows[devices]]

    @property
    def shape(self) -> tuple[int, ...]:
        if self.rows is None:
            return tuple(self.pool.shape)
        return (*self.rows.shape, *self.pool.shape[1:])

    @property
    def nbytes(self) -> int:
        held = self.pool.numel() * self.pool.element_size()
        return held + (0 if self.rows is None else self.rows.numel() * self.rows.element_size())


@dataclass(frozen=True)
class FleetData:
    """Every device's shard as rows of four tensors, with the task's facts."""

    x: Inputs  # (N, S, *input_shape) float32
    y: torch.Tensor  # (N, S) int64 labels, or float32 targets (regression)
    test_x: Inputs
    test_y: torch.Tensor
    true_clusters: np.ndarray
    dataset: str
    num_classes: int
    input_shape: tuple[int, ...]
    task: str
    partition: str

    @property
    def metric(self) -> str:
        return "rmse" if self.task == "regression" else "accuracy"

    @property
    def samples(self) -> int:
        """Training samples per device (the same for every device)."""
        return int(self.x.shape[1])

    def stats(self) -> dict[str, object]:
        """The summary's ``partition`` block, the sizes and groups of the kernel's (no per-device class lists)."""
        n = int(self.x.shape[0])
        return {"dataset": self.dataset, "partition": self.partition, "num_classes": self.num_classes, "input_shape": list(self.input_shape),
                "samples_per_device": self.samples, "test_samples_per_device": int(self.test_x.shape[1]),
                "n_devices": n, "n_clusters": len(np.unique(self.true_clusters))}


def fleet_data(spec: DataSpec, n: int, seed: int) -> FleetData:
    """The data of ``n`` devices under run seed ``seed``."""
    if dataset_info(spec.dataset).synthetic:
        return _synthetic(spec, n, seed)
    fed = build_any_federation(spec, n, seed)
    if type(fed).evaluation is not Federation.evaluation:
        raise ConfigError(f"data: {spec.dataset!r} scores a device by jobs of its own, not on a test set of samples; "
                          "engine: tensor scores test sets only; set engine: events")
    sizes = {(int(s.train_y.shape[0]), int(s.test_y.shape[0])) for s in fed.shards}
    if len(sizes) != 1:
        raise ConfigError(f"engine: tensor needs every device to hold as many samples as every other; here they "
                          f"hold {len(sizes)} different (train, test) sizes; set data.samples_per_client and "
                          "data.test_samples_per_client, or use engine: events")
    return FleetData(x=_inputs([s.held("train_x") for s in fed.shards]), y=torch.stack([s.train_y for s in fed.shards]),
                     test_x=_inputs([s.held("test_x") for s in fed.shards]),
                     test_y=torch.stack([s.test_y for s in fed.shards]),
                     true_clusters=np.asarray(fed.true_clusters, dtype=np.int64), dataset=fed.dataset,
                     num_classes=fed.num_classes, input_shape=tuple(fed.input_shape), task=fed.task,
                     partition=fed.partition)


def _inputs(held: list[torch.Tensor | PoolRows]) -> Inputs:
    """The devices' inputs as held by their shards: stacked copies, or one pool and row numbers where any
    device's are rows of a shared pool (each distinct pool, and each device's own tensor, laid end to end)."""
    if not any(isinstance(h, PoolRows) for h in held):
        return Inputs(torch.stack([as_tensor(h) for h in held]))
    parts: list[torch.Tensor] = []
    start: dict[int, int] = {}  # id(pool) -> its first row in the joined pool
    rows = []
    size = 0
    for h in held:
        pool, local = (h.pool, h.rows) if isinstance(h, PoolRows) else (h, torch.arange(h.shape[0]))
        if id(pool) not in start or not isinstance(h, PoolRows):
            start[id(pool)] = size
            parts.append(pool)
            size += int(pool.shape[0])
        rows.append(local + start[id(pool)])
    return Inputs(torch.cat(parts), torch.stack(rows))


def _synthetic(spec: DataSpec, n: int, seed: int) -> FleetData:
    """The synthetic task's fleet arrays (``synthetic_fleet``: the kernel's shards are their rows)."""
    p = spec.partition_as(ParameterShiftPartition)
    f = synthetic_fleet(spec, n, seed=seed)
    return FleetData(x=Inputs(torch.from_numpy(f.x)), y=torch.from_numpy(f.y), test_x=Inputs(torch.from_numpy(f.test_x)),
                     test_y=torch.from_numpy(f.test_y), true_clusters=f.clusters, dataset=spec.dataset,
                     num_classes=2 if f.logistic else 0, input_shape=(p.n_features,),
                     task="classification" if f.logistic else "regression", partition=p.kind)
