"""A device's local data (:class:`Shard`) and a whole federation (:class:`Federation`).

The leaf of ``p2pfl.data``'s build path: ``p2pfl.data.partitions`` and
``p2pfl.data.synthetic`` build these, ``p2pfl.data.federation`` assembles them
(``build_federation``).  Importing nothing else of ``p2pfl.data`` but the leaf
``p2pfl.data.evaluation`` keeps the package free of import circles.

A federation also says how its devices are scored (``metric``, ``evaluation``): on their local
test sets here; a plug-in's federation may score otherwise (robotics: rollouts).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from p2pfl.data.evaluation import Evaluation, TestSetEvaluation

__all__ = ["Shard", "Federation"]


@dataclass(frozen=True, eq=False)
class Shard:
    """One device's local data.

    Images are float32 ``(n, C, H, W)`` in [0, 1]; vectors float32 ``(n, D)``.
    Labels are int64 ``(n,)`` (float32 for regression tasks).  ``train_index``
    / ``test_index`` are the rows of the source pool's train / test split
    the samples came from, ``source`` that pool's dataset name.
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    true_cluster: int
    train_index: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64), repr=False)
    test_index: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64), repr=False)
    source: str = ""

    def __repr__(self) -> str:
        return (f"Shard(train={tuple(self.train_x.shape)}, test={tuple(self.test_x.shape)}, "
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
        return TestSetEvaluation(shard.test_x, shard.test_y, "rmse" if self.metric == "rmse" else "accuracy")

    def score_fields(self, curve: list[dict[str, Any]]) -> dict[str, Any]:
        """Summary fields of the federation's own, read from the score curve (``<metric>_curve``: the mean
        device score per evaluated round); placed beside ``<metric>_mean``. None here."""
        return {}

    @property
    def n_clusters(self) -> int:
        return len(set(self.true_clusters))

    def to(self, device: torch.device | str) -> Federation:
        """This federation with every shard's tensors on ``device`` (no copy where they already are)."""
        moved = tuple(replace(s, train_x=s.train_x.to(device), train_y=s.train_y.to(device),
                              test_x=s.test_x.to(device), test_y=s.test_y.to(device)) for s in self.shards)
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
