"""Flat model state: the same bits as the per-layer state maths, one operation per model."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from p2pfl.learning.aggregate import clone_state, state_to_vector, sub, weighted_sum
from p2pfl.learning.flat import FlatState, flatten_
from p2pfl.learning.models import CNN28, CNN32, MLP
from p2pfl.learning.state import add_delta_, flatten_live_, live_state, load_state_


def _pair(seed: int) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(seed)
    plain = CNN28(10, hidden=8)
    flat = copy.deepcopy(plain)
    assert flatten_live_(flat)
    return plain, flat


def test_flattening_keeps_values_parameters_and_training():
    plain, flat = _pair(0)
    state = live_state(flat)
    assert isinstance(state, FlatState) and state.vector.numel() == sum(p.numel() for p in plain.parameters())
    for (name, a), b in zip(plain.state_dict().items(), state.values()):
        assert torch.equal(a, b), name
    # the parameters are views of the vector: a step on a parameter shows in the vector
    first = next(flat.parameters())
    with torch.no_grad():
        first.add_(1.0)
    assert torch.equal(state.vector[: first.numel()], first.reshape(-1))
    # a forward/backward through views works and gives the same gradients
    x = torch.rand(3, 1, 28, 28)
    plain(x).sum().backward()
    flat(x).sum().backward()
    assert flat.features[0].weight.grad is not None


def test_flat_state_maths_is_bit_identical_to_the_per_layer_maths():
    plain_a, flat_a = _pair(1)
    plain_b, flat_b = _pair(2)
    pa, pb = plain_a.state_dict(), plain_b.state_dict()
    fa, fb = live_state(flat_a), live_state(flat_b)
    assert isinstance(sub(fa, fb), FlatState) and isinstance(clone_state(fa), FlatState)
    assert torch.equal(state_to_vector(sub(fa, fb)), state_to_vector(sub(pa, pb)))
    mixed = weighted_sum([(fa, 0.3), (fb, 0.7)])
    assert isinstance(mixed, FlatState)
    assert torch.equal(state_to_vector(mixed), state_to_vector(weighted_sum([(pa, 0.3), (pb, 0.7)])))
    add_delta_(flat_a, sub(fb, fa), 0.5)
    add_delta_(plain_a, sub(pb, dict(pa)), 0.5)
    assert torch.equal(state_to_vector(live_state(flat_a)), state_to_vector(plain_a.state_dict()))
    load_state_(flat_a, fb)
    assert torch.equal(live_state(flat_a).vector, fb.vector)


def test_a_flat_state_refuses_entry_changes_and_a_mixed_state_stays_as_it_is():
    _, flat = _pair(3)
    state = live_state(flat)
    with pytest.raises(TypeError):
        state["features.0.weight"] = torch.zeros(1)  # read-only: an entry change would leave the vector behind
    bn = CNN32(10, hidden=8)  # BatchNorm's integer counter: not one dtype
    before = [p.data_ptr() for p in bn.parameters()]
    assert flatten_(bn) is None and [p.data_ptr() for p in bn.parameters()] == before
    assert not isinstance(live_state(bn), FlatState)


def test_a_copy_of_a_flat_model_is_independent():
    _, flat = _pair(4)
    twin = copy.deepcopy(flat)
    with torch.no_grad():
        next(twin.parameters()).add_(5.0)
    assert not torch.equal(next(twin.parameters()), next(flat.parameters()))
    assert flatten_live_(MLP(8, 2, 4))
