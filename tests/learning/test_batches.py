"""Each device's batch orders (``p2pfl.learning.batches``): the tensor engine's, drawn for the whole fleet at
once, are the ones the kernel's device generator gives its jobs one epoch at a time."""

from __future__ import annotations

import torch

from p2pfl.learning.batches import batch_order, batch_orders, node_generator


def test_the_fleets_orders_are_each_device_generators_in_turn() -> None:
    fleet = batch_orders(seed=7, devices=5, samples=12, draws=3, dtype=torch.uint8)
    assert fleet.shape == (5, 3, 12) and fleet.dtype == torch.uint8
    for i in range(5):
        g = node_generator(7, i)
        assert torch.equal(fleet[i].long(), torch.stack([batch_order(g, 12) for _ in range(3)])), i
    assert not torch.equal(fleet[0], fleet[1])  # each device its own orders: the comparison is not vacuous
    assert sorted(fleet[2, 1].tolist()) == list(range(12))
