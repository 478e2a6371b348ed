"""A device's local data (:class:`Shard`) and a whole federation (:class:`Federation`).

The leaf of ``p2pfl.data``'s build path: ``p2pfl.data.partitions`` and
``p2pfl.data.synthetic`` build these, ``p2pfl.data.federation`` assembles them
(``build_federation``).  Importing nothing else of ``p2pfl.data`` but the leaf
``p2pfl.data.evaluation`` keeps the package free of import circles.

A federation also says how its devices are scored (``metric``, ``evaluation``): on their local
test sets here; a plug-in's federation may score otherwise (robotics: rollouts).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Optional

import numpy as np
import torch
from torch import nn

from p2pfl.data.evaluation import Evaluation, TestSetEvaluation

__all__ = ["Shard", "PoolRows", "Samples", "as_tensor", "Federation"]


@dataclass(frozen=True, eq=False)
class PoolRows:
    """Rows of a tensor that several shards share: ``pool[rows]``, gathered when read.

    A federation whose devices draw from one pool under one transform (the same rotation, pattern or
    none) holds the transformed samples once and each device's as row numbers
    (``p2pfl.data.federation``, every transform's samples of a split in one pool): with ``overlap`` at
    N = 10^4 devices of 100 images, 4 rotations of Fashion-MNIST (0.9 GB) instead of 10^6 copies (6.3 GB). ``rows`` of shape ``(k, n)`` are k
    devices' rows at once (a stacked group of jobs): ``x[sel]`` gathers ``pool[rows[sel]]``, one batch.
    """

    pool: torch.Tensor
    rows: torch.Tensor  # int64 (n,), or (k, n)

    def take(self) -> torch.Tensor:
        """The rows as a tensor of their own (contiguous; the same values every time)."""
        return self.pool.index_select(0, self.rows.reshape(-1)).view(self.shape)

    def __getitem__(self, sel: Any) -> torch.Tensor:
        """``take()[sel]`` without gathering the rows ``sel`` leaves out (``index_select``: a row copy each, where
        advanced indexing of the pool was slower)."""
        rows = self.rows[sel]
        return self.pool.index_select(0, rows.reshape(-1)).view(*rows.shape, *self.pool.shape[1:])

    @property
    def shape(self) -> tuple[int, ...]:
        return (*self.rows.shape, *self.pool.shape[1:])

    @property
    def dtype(self) -> torch.dtype:
        return self.pool.dtype


Samples = torch.Tensor | PoolRows


def as_tensor(x: Samples) -> torch.Tensor:
    """``x`` as a tensor: gathered where it is :class:`PoolRows`."""
    return x.take() if isinstance(x, PoolRows) else x


_FIELDS = ("train_x", "train_y", "test_x", "test_y", "true_cluster", "train_index", "test_index", "source")


def _slot(name: str) -> str:
    """Where field ``name`` is held: the inputs behind their properties, the rest as they are."""
    return f"_{name}" if name in ("train_x", "test_x") else name


class Shard:
    """One device's local data (read-only).

    Images are float32 ``(n, C, H, W)`` in [0, 1]; vectors float32 ``(n, D)``.
    Labels are int64 ``(n,)`` (float32 for regression tasks).  ``train_index``
    / ``test_index`` are the rows of the source pool's train / test split
    the samples came from, ``source`` that pool's dataset name. ``train_x`` and ``test_x`` may be
    given as :class:`PoolRows`: each read then gathers a fresh tensor of the same values.
    """

    __slots__ = ("_test_x", "_train_x", "source", "test_index", "test_y", "train_index", "train_y", "true_cluster")
    _train_x: Samples
    train_y: torch.Tensor
    _test_x: Samples
    test_y: torch.Tensor
    true_cluster: int
    train_index: np.ndarray
    test_index: np.ndarray
    source: str

    def __init__(self, train_x: Samples, train_y: torch.Tensor, test_x: Samples, test_y: torch.Tensor,
                 true_cluster: int, train_index: np.ndarray | None = None, test_index: np.ndarray | None = None,
                 source: str = "") -> None:
        empty = np.empty(0, np.int64)
        values = (train_x, train_y, test_x, test_y, true_cluster,
                  empty if train_index is None else train_index, empty if test_index is None else test_index, source)
        for name, value in zip(_FIELDS, values):
            object.__setattr__(self, _slot(name), value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Shard is read-only: cannot assign {name!r}")

    @property
    def train_x(self) -> torch.Tensor:
        return as_tensor(self._train_x)

    @property
    def test_x(self) -> torch.Tensor:
        return as_tensor(self._test_x)

    def held(self, name: str) -> Any:
        """Field ``name`` as held: ``train_x`` / ``test_x`` a tensor or :class:`PoolRows` (memory accounting)."""
        return getattr(self, _slot(name))

    def rebind(self, name: str, tensor: torch.Tensor) -> None:
        """Hold field ``name``'s values in ``tensor`` instead (executors that share shards with workers lay
        them end to end: ``p2pfl.executors.base.pool_shards``); the values must be the same."""
        object.__setattr__(self, _slot(name), tensor)

    def replace(self, **changes: Any) -> Shard:
        """A copy with ``changes`` (field name -> value)."""
        values = {f: self.held(f) for f in _FIELDS} | changes
        return Shard(**values)

    def __repr__(self) -> str:
        return (f"Shard(train={tuple(self._train_x.shape)}, test={tuple(self._test_x.shape)}, "
                f"cluster={self.true_cluster}, source={self.source!r})")


@dataclass(frozen=True, eq=False)
class Federation:
    """All devices' shards plus the task's facts; index in ``shards`` = device id."""

    dataset: str
    shards: tuple[Shard, ...]
    num_classes: int
    input_shape: tuple[int, ...]
    true_clusters: tuple[int, ...]
    partition: str = "iid"
    task: str = "classification"  # or "regression" (synthetic_linear; num_classes 0)
    #: Whether scoring renders with OpenGL (no forked workers then: a GL context does not survive a fork).
    renders: ClassVar[bool] = False

    @property
    def n_devices(self) -> int:
        return len(self.shards)

    @property
    def metric(self) -> str:
        """The score every evaluation reports: RMSE for regression, else accuracy."""
        return "rmse" if self.task == "regression" else "accuracy"

    @property
    def model_hint(self) -> Any:
        """What the data tells its model beyond the input shape (None here; see ``build_model``'s ``hint``)."""
        return None

    def evaluation(self, device: int, model: nn.Module, forward_flops: int) -> Evaluation:
        """How ``model`` is scored for ``device``: on its local test set in the federation's metric.
        ``forward_flops``: the model's forward FLOPs per sample (for jobs that size themselves)."""
        shard = self.shards[device]
        return TestSetEvaluation(shard.held("test_x"), shard.test_y, "rmse" if self.metric == "rmse" else "accuracy")

    def validation_set(self) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """Held-out samples (x, y) for choosing among a run's models (a checkpoint): never trained on and never
        scored; None where the data hold none (here)."""
        return None

    def score_fields(self, curve: list[dict[str, Any]]) -> dict[str, Any]:
        """Summary fields of the federation's own, read from the score curve (``<metric>_curve``: the mean
        device score per evaluated round); placed beside ``<metric>_mean``. None here."""
        return {}

    @property
    def n_clusters(self) -> int:
        return len(set(self.true_clusters))

    def to(self, device: torch.device | str) -> Federation:
        """This federation with every shard's tensors on ``device`` (no copy where they already are)."""
        pools: dict[int, torch.Tensor] = {}  # a shared pool moves once

        def move(x: Samples) -> Samples:
            if isinstance(x, PoolRows):
                pool = pools.get(id(x.pool))
                if pool is None:
                    pool = pools[id(x.pool)] = x.pool.to(device)
                return x if pool is x.pool else PoolRows(pool, x.rows.to(device))
            return x.to(device)

        moved = tuple(s.replace(train_x=move(s.held("train_x")), train_y=s.train_y.to(device),
                                test_x=move(s.held("test_x")), test_y=s.test_y.to(device)) for s in self.shards)
        return replace(self, shards=moved)

    def stats(self) -> dict[str, Any]:
        """JSON-ready summary of sizes, label sets and clusters per device."""
        def classes(y: torch.Tensor) -> list[int]:
            return [] if self.task == "regression" else sorted(int(c) for c in torch.unique(y).tolist())

        return {
            "dataset": self.dataset,
            "partition": self.partition,
            "num_classes": self.num_classes,
            "input_shape": list(self.input_shape),
            "samples_per_device": [int(s.train_y.shape[0]) for s in self.shards],
            "test_samples_per_device": [int(s.test_y.shape[0]) for s in self.shards],
            "classes_per_device": [classes(s.train_y) for s in self.shards],
            "true_cluster_per_device": [int(c) for c in self.true_clusters],
            "n_clusters": self.n_clusters,
            "sources_per_device": [s.source for s in self.shards],
        }
