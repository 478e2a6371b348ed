"""Centralized's ``checkpoint: best_val_nll``: of the models after each round, the one with the lowest loss on the
data's validation samples is scored at the last round; the training is the same as ``checkpoint: last``."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import p2pfl
from p2pfl.data.shards import Federation
from p2pfl.errors import ConfigError, UserError
from tests.helpers import digits_scenario

MODEL = "tests.protocols.test_centralized_checkpoint:loss_mlp"


class _LossMLP(nn.Module):
    """An MLP for 8x8 digits with a ``loss`` (cross-entropy): what the validation pass reads."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self(x), y)


def loss_mlp(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return _LossMLP()


def _shifted_validation(self: Federation) -> tuple[torch.Tensor, torch.Tensor]:
    """Device 0's test samples with every label moved to the next class: the better a model learns the digits, the
    worse its loss here, so the lowest comes before the last round."""
    s = self.shards[0]
    return s.test_x, (s.test_y + 1) % 10


def _sc(checkpoint: str | None, rounds: int) -> dict:
    proto = {"name": "centralized", "rounds": rounds, "eval_every": 1}
    if checkpoint is not None:
        proto["checkpoint"] = checkpoint
    sc = digits_scenario(proto, n=3)
    sc["model"] = {"name": MODEL}
    return sc


def test_best_val_nll_scores_the_checkpoint_with_the_lowest_validation_loss(monkeypatch) -> None:
    monkeypatch.setattr(Federation, "validation_set", _shifted_validation)
    best = p2pfl.run(_sc("best_val_nll", 5), write=False)
    last = p2pfl.run(_sc(None, 5), write=False)
    losses = {e["round"]: e["value"] for e in best.summary["logs"]["val_nll"]}
    assert sorted(losses) == [1, 2, 3, 4, 5]
    chosen = min(losses, key=lambda r: (losses[r], r))
    assert chosen < 5  # the shifted labels make the first rounds' models the best
    assert best.summary["checkpoint_round"] == chosen and best.summary["checkpoint_val_nll"] == losses[chosen]
    assert [e["value"] for e in best.summary["logs"]["checkpoint"]] == [chosen]
    assert "checkpoint_round" not in last.summary and "val_nll" not in last.summary["logs"]
    curve_best, curve_last = ([(p["round"], p["accuracy_mean"]) for p in r.summary["accuracy_curve"]] for r in (best, last))
    assert curve_best[:4] == curve_last[:4]  # the same training: the same models scored until the last round
    assert curve_best[4] == (5, curve_last[chosen - 1][1])  # the last round scores the checkpoint
    assert best.summary["accuracy_per_node"] != last.summary["accuracy_per_node"]  # not the last model
    # each round's validation pass is charged to the data centre: a forward per validation sample
    fwd = 2 * 64 * 16 + 16 + 16 + 2 * 16 * 10 + 10
    n_val = best.summary["partition"]["test_samples_per_device"][0]
    flops, flops_last = best.summary["compute_flops_per_node"], last.summary["compute_flops_per_node"]
    assert flops[0] - flops_last[0] == 5 * fwd * n_val and flops[1:] == flops_last[1:] == [0, 0]


def test_best_val_nll_needs_validation_samples_and_a_loss(monkeypatch) -> None:
    with pytest.raises(ConfigError, match=r"protocol.checkpoint: best_val_nll needs held-out validation samples, "
                                          r"and the data hold none; set data.partition.val_demos_per_task"):
        p2pfl.run(_sc("best_val_nll", 1), write=False)
    monkeypatch.setattr(Federation, "validation_set", _shifted_validation)
    sc = _sc("best_val_nll", 1)
    sc["model"] = {"name": "mlp", "hidden": 16}
    with pytest.raises(ConfigError, match=r"needs a model with a loss\(x, y\) method"):
        p2pfl.run(sc, write=False)
    sc = _sc("best_val_nll", 1)
    sc["protocol"]["checkpoint"] = "best"
    with pytest.raises(UserError, match=r"field 'protocol.checkpoint': Input should be 'last' or 'best_val_nll'"):
        p2pfl.run(sc, write=False)
