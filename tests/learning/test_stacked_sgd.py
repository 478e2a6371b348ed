"""``stacked_sgd``: k models trained at once; views tiling one flat (k, P) tensor give the bits of separate tensors."""

from __future__ import annotations

import torch
from torch.func import functional_call, vmap

from p2pfl.learning.models import MLP
from p2pfl.learning.stacked_sgd import stacked_sgd
from p2pfl.learning.train import task_loss


def _train(flat: bool) -> torch.Tensor:
    torch.manual_seed(0)
    k, n = 3, 20
    model = MLP(6, 4, hidden=5)
    shapes = {name: p.shape for name, p in model.named_parameters()}
    start = torch.stack([torch.cat([p.detach().reshape(-1) * (1 + i) for p in model.parameters()])
                         for i in range(k)])
    x, y = torch.randn(k, n, 6), torch.randint(0, 4, (k, n))
    loss = vmap(lambda p, xb, yb: task_loss(functional_call(model, p, (xb,)), yb))
    offsets = [0]
    for s in shapes.values():
        offsets.append(offsets[-1] + s.numel())
    orders = lambda e: torch.stack([torch.randperm(n, generator=torch.Generator().manual_seed(10 * e + i))
                                    for i in range(k)])
    if flat:
        leaf = start.clone()
        views = lambda: {name: leaf[:, a:b].view(k, *s)
                         for (name, s), a, b in zip(shapes.items(), offsets, offsets[1:])}
        stacked_sgd(loss, views(), x, y, orders, epochs=2, batch_size=8, lr=0.1, momentum=0.9, weight_decay=1e-3,
                    flat=leaf)
        return leaf
    leaves = {name: start[:, a:b].reshape(k, *s).clone() for (name, s), a, b in zip(shapes.items(), offsets, offsets[1:])}
    stacked_sgd(loss, leaves, x, y, orders, epochs=2, batch_size=8, lr=0.1, momentum=0.9, weight_decay=1e-3)
    return torch.cat([t.reshape(k, -1) for t in leaves.values()], dim=1)


def test_views_of_a_flat_tensor_train_to_the_bits_of_separate_tensors_and_move():
    flat, separate = _train(flat=True), _train(flat=False)
    assert torch.equal(flat, separate)
    torch.manual_seed(0)
    assert not torch.equal(flat[0], torch.cat([p.detach().reshape(-1) for p in MLP(6, 4, hidden=5).parameters()]))


def test_parameters_that_are_not_views_of_flat_are_refused():
    import pytest

    flat = torch.zeros(2, 6)
    with pytest.raises(ValueError, match="parameters views of it"):
        stacked_sgd(lambda p, xb, yb: p["w"].sum(1), {"w": torch.zeros(2, 6)}, torch.zeros(2, 4, 1),
                    torch.zeros(2, 4), lambda e: torch.zeros(2, 4, dtype=torch.long), epochs=1, batch_size=2, lr=0.1,
                    momentum=0.0, weight_decay=0.0, flat=flat)
