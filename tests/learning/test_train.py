"""Local training: our SGD step equals torch.optim.SGD; FLOP counts of the paper's CNN; aggregation maths."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from p2pfl.learning.aggregate import weighted_average
from p2pfl.learning.models import CNN28, ModelSpec, build_model
from p2pfl.learning.train import TrainingSpec, train_local
from p2pfl.sim.cost import forward_flops_per_sample, train_flops


@pytest.mark.parametrize("momentum,wd", [(0.0, 0.0), (0.9, 0.0), (0.9, 1e-3)])
@pytest.mark.slow
def test_sgd_matches_torch_optim_sgd(momentum, wd):
    x = torch.rand(50, 1, 8, 8)
    y = torch.randint(0, 10, (50,))
    spec = TrainingSpec(epochs=2, batch_size=8, lr=0.1, momentum=momentum, weight_decay=wd)
    ours = build_model(ModelSpec(name="mlp", hidden=16), (1, 8, 8), 10, seed=1)
    ref = build_model(ModelSpec(name="mlp", hidden=16), (1, 8, 8), 10, seed=1)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    result = train_local(ours, x, y, spec, generator=g1)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=momentum, weight_decay=wd)
    for _ in range(2):
        order = torch.randperm(50, generator=g2)
        for s in range(0, 50, 8):
            idx = order[s : s + 8]
            opt.zero_grad()
            F.cross_entropy(ref(x[idx]), y[idx]).backward()
            opt.step()
    for a, b in zip(ours.state_dict().values(), ref.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6)
    assert result.samples == 100


def test_cnn28_is_the_papers_architecture_and_flops_are_counted_per_layer():
    m = CNN28(10)
    shapes = [tuple(p.shape) for p in m.parameters()]
    assert shapes == [(32, 1, 3, 3), (32,), (64, 32, 3, 3), (64,), (128, 3136), (128,), (10, 128), (10,)]
    conv1 = (2 * 1 * 9 + 1) * 32 * 28 * 28
    relu1 = 32 * 28 * 28
    pool1 = 4 * 32 * 14 * 14
    conv2 = (2 * 32 * 9 + 1) * 64 * 14 * 14
    relu2 = 64 * 14 * 14
    pool2 = 4 * 64 * 7 * 7
    fc1 = (2 * 3136 + 1) * 128
    relu3 = 128
    fc2 = (2 * 128 + 1) * 10
    expected = conv1 + relu1 + pool1 + conv2 + relu2 + pool2 + fc1 + relu3 + fc2
    assert forward_flops_per_sample(m, (1, 28, 28)) == expected
    assert train_flops(expected, 10) == 3 * expected * 10


def test_weighted_average_weights_by_samples_and_checks_inputs():
    a = {"w": torch.tensor([0.0, 3.0])}
    b = {"w": torch.tensor([4.0, 3.0])}
    out = weighted_average([(a, 1.0), (b, 3.0)])
    assert torch.equal(out["w"], torch.tensor([3.0, 3.0]))
    with pytest.raises(ValueError, match="at least one"):
        weighted_average([])
    with pytest.raises(ValueError, match="different keys"):
        weighted_average([(a, 1.0), ({"v": torch.zeros(2)}, 1.0)])
