"""Stacked scoring of K models (IFCA's E-step, DAC's s_ij) against the loop of ``average_loss`` it replaces.

The stacked pass may order the matmul's float reductions differently from the
per-model loop; each loss must stay within ``STACKED_LOSS_RTOL`` (relative) of
the loop's. Models that are not a chain of linear layers are scored one state
at a time with the same operations as the loop, so they must agree exactly.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import pytest
import torch
from torch import nn

from p2pfl.learning.aggregate import clone_state
from p2pfl.learning.models import MLP
from p2pfl.learning.stacked import STACKED_LOSS_RTOL, _linear_chain, average_losses
from p2pfl.learning.state import flatten_live_, live_state, load_state_
from p2pfl.learning.train import average_loss


def _loop(model: nn.Module, states: Sequence[Mapping[str, torch.Tensor]], x: torch.Tensor, y: torch.Tensor,
          batch_size: int = 1024) -> list[float]:
    """The reference: load each state into a copy of the model and call ``average_loss``."""
    probe = copy.deepcopy(model)
    out = []
    for s in states:
        load_state_(probe, s)
        out.append(average_loss(probe, x, y, batch_size))
    return out


def _states(build, k: int, flat: bool) -> tuple[nn.Module, list[Mapping[str, torch.Tensor]]]:
    """A model to lend the architecture and ``k`` states of differently seeded copies (flat or plain)."""
    models = []
    for seed in range(k + 1):
        torch.manual_seed(seed)
        m = build()
        if flat:
            flatten_live_(m)
        models.append(m)
    return models[0], [clone_state(live_state(m)) for m in models[1:]]


def _data(n: int, shape: tuple[int, ...], classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n, *shape, generator=g)
    y = torch.randn(n, generator=g) if classes == 0 else torch.randint(0, classes, (n,), generator=g)
    return x, y


CASES = {
    "mlp": (lambda: MLP(64, 10, hidden=16), (1, 8, 8), 10),
    "mlp_headline": (lambda: MLP(784, 10, hidden=32), (1, 28, 28), 10),
    "sequential_tanh": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.Tanh(), nn.Linear(8, 8),
                                              nn.ReLU(), nn.Linear(8, 3)), (3, 4), 3),
    "no_bias_regression": (lambda: nn.Sequential(nn.Linear(5, 6, bias=False), nn.ReLU(), nn.Linear(6, 1)), (5,), 0),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("k,flat,batch_size", [(1, True, 1024), (4, True, 1024), (3, False, 1024), (5, True, 32)])
def test_stacked_losses_equal_the_loop_within_tolerance(case, k, flat, batch_size):
    build, shape, classes = CASES[case]
    model, states = _states(build, k, flat)
    assert _linear_chain(model) is not None  # the stacked path is the one under test
    x, y = _data(100, shape, classes)
    stacked = average_losses(model, states, x, y, batch_size)
    loop = _loop(model, states, x, y, batch_size)
    assert len(stacked) == k and len(set(loop)) == k  # k different models, k different losses
    for s, ref in zip(stacked, loop):
        assert abs(s - ref) <= STACKED_LOSS_RTOL * abs(ref)


def test_the_model_lent_is_left_unchanged_and_in_its_mode():
    model, states = _states(lambda: MLP(64, 10, hidden=16), 3, True)
    before = clone_state(live_state(model))
    model.train()
    average_losses(model, states, *_data(20, (1, 8, 8), 10))
    assert model.training
    assert torch.equal(live_state(model)["net.1.weight"], before["net.1.weight"])


class _Conv(nn.Module):
    """Not a chain of linear layers (and with BatchNorm, whose eval mode matters): scored one state at a time."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv1d(1, 4, 3), nn.BatchNorm1d(4), nn.ReLU(), nn.Flatten(), nn.Linear(24, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def test_other_models_are_scored_one_by_one_exactly_as_the_loop_in_eval_mode():
    model, states = _states(_Conv, 3, False)
    for s in states:  # running statistics that differ from a batch's: train mode would give other losses
        s["body.1.running_mean"].add_(0.5)
    assert _linear_chain(model) is None
    x, y = _data(30, (1, 8), 3)
    model.train()
    assert average_losses(model, states, x, y) == _loop(model, states, x, y)
    assert model.training


@pytest.mark.parametrize("build", [lambda: nn.Sequential(nn.Linear(4, 4), nn.Flatten(), nn.Linear(4, 2)),
                                   lambda: nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 2)),
                                   lambda: nn.Sequential(nn.Flatten(), nn.ReLU())])
def test_only_chains_of_linear_layers_and_elementwise_activations_are_stacked(build):
    assert _linear_chain(build()) is None


def test_empty_data_or_no_states():
    model, states = _states(lambda: MLP(64, 10, hidden=16), 2, True)
    assert average_losses(model, states, torch.zeros(0, 1, 8, 8), torch.zeros(0, dtype=torch.int64)) == [0.0, 0.0]
    assert average_losses(model, [], *_data(5, (1, 8, 8), 10)) == []
