"""The cnn32 backbone (Conditional-PCA paper, Sec. III-B, Eq. 3) and the cross-trained encoder (App. B-C):
shapes, exact FLOPs, BN buffers under FedAvg, embeddings, frozen checkpoints, training, CLI."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from p2pfl.cli import main
from p2pfl.conditioning import conditioned_model
from p2pfl.conditioning.encoder import (
    SmallResNetEncoder,
    _new_encoder,
    embed,
    load_encoder,
    save_encoder,
    train_encoder,
)
from p2pfl.data.datasets import load_dataset
from p2pfl.errors import ConfigError
from p2pfl.learning.aggregate import weighted_average
from p2pfl.learning.models import CNN32, ModelSpec, build_model
from p2pfl.sim.cost import forward_flops_per_sample
from tests.fixtures import data_formats as fmt


@pytest.fixture(scope="module")
def c100(tmp_path_factory):
    root = tmp_path_factory.mktemp("c100")
    fmt.write_cifar100(root, per_class=2, n_test_per_class=1)
    return str(root)


@pytest.fixture(scope="module")
def trained(c100):
    return train_encoder("cifar100", c100, epochs=1, batch_size=16, seed=0)


def test_cnn32_is_auto_for_rgb32_with_eq3_shapes():
    model = build_model(ModelSpec(), (3, 32, 32), 10, seed=0)
    assert isinstance(model, CNN32)
    convs = [m for m in model.features if isinstance(m, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.padding) for c in convs] == [
        (3, 32, (3, 3), (1, 1)), (32, 32, (3, 3), (1, 1)), (32, 64, (3, 3), (1, 1)), (64, 64, (3, 3), (1, 1))]
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.features) == 4
    assert model.features(torch.zeros(2, 3, 32, 32)).shape == (2, 4096)
    assert [(m.in_features, m.out_features) for m in model.classifier if isinstance(m, torch.nn.Linear)] == [(4096, 256), (256, 10)]
    with pytest.raises(ConfigError, match="needs 32x32"):
        build_model(ModelSpec(name="cnn32"), (1, 28, 28), 10, seed=0)


def test_cnn32_exact_forward_flops():
    def conv(c_in, c_out, hw):
        return (2 * c_in * 9 + 1) * c_out * hw * hw + 3 * c_out * hw * hw  # conv + BN (2/elt) + ReLU

    expected = (conv(3, 32, 32) + conv(32, 32, 32) + 4 * 32 * 16 * 16 + conv(32, 64, 16) + conv(64, 64, 16)
                + 4 * 64 * 8 * 8 + (2 * 4096 + 1) * 256 + 256 + (2 * 256 + 1) * 10)
    assert forward_flops_per_sample(build_model(ModelSpec(name="cnn32"), (3, 32, 32), 10, seed=0), (3, 32, 32)) == expected
    cond = conditioned_model(ModelSpec(name="cnn32"), (3, 32, 32), 10, 8, seed=0)
    assert cond.head[0].in_features == 4096 + 8  # Eq. 3: [f_4096 || s]
    assert forward_flops_per_sample(cond, (3, 32, 32)) == expected + 2 * 8 * 256


@pytest.mark.slow
def test_cnn32_bn_buffers_under_fedavg():
    a, b = (build_model(ModelSpec(name="cnn32"), (3, 32, 32), 10, seed=s) for s in (0, 1))
    for m, steps in ((a, 1), (b, 3)):
        m.train()
        for _ in range(steps):
            m(torch.rand(4, 3, 32, 32))
    avg = weighted_average([(a.state_dict(), 1.0), (b.state_dict(), 3.0)])
    key = "features.1.running_mean"
    assert torch.allclose(avg[key], 0.25 * a.state_dict()[key] + 0.75 * b.state_dict()[key])
    assert avg["features.1.num_batches_tracked"].dtype == torch.int64
    assert int(avg["features.1.num_batches_tracked"]) == 1  # integer buffers: the first state's
    a.load_state_dict(avg)


@pytest.mark.slow
def test_encoder_embeddings_and_frozen_roundtrip(trained, tmp_path):
    x = torch.rand(5, 3, 32, 32)
    assert embed(trained, x, batch_size=2).shape == (5, 128)
    path = save_encoder(trained, tmp_path / "enc.pt")
    loaded = load_encoder(path)
    assert not loaded.training and not any(p.requires_grad for p in loaded.parameters())
    assert loaded.meta["dataset"] == "cifar100" and loaded.meta["embedding_dim"] == 128
    ref = trained.state_dict()
    assert ref.keys() == loaded.state_dict().keys()
    assert all(torch.equal(ref[k], v) for k, v in loaded.state_dict().items())
    assert torch.equal(embed(loaded, x), embed(trained.eval(), x))


def test_load_encoder_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.pt not found; make one with 'p2pfl encoder train"):
        load_encoder(tmp_path / "nope.pt")
    bad = tmp_path / "bad.pt"
    bad.write_text("not a checkpoint")
    with pytest.raises(ConfigError, match=r"bad\.pt is not a p2pfl encoder checkpoint"):
        load_encoder(bad)
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, other)
    with pytest.raises(ConfigError, match=r"other\.pt is not a p2pfl encoder checkpoint"):
        load_encoder(other)


@pytest.mark.slow
def test_one_epoch_reduces_training_loss(c100, trained):
    pool = load_dataset("cifar100", c100)
    x = torch.from_numpy(pool.train_x.astype(np.float32) / 255.0)
    y = torch.from_numpy(pool.train_y)

    def loss(model: SmallResNetEncoder) -> float:
        model.train()  # batch statistics: the same normalisation as during training
        with torch.no_grad():
            return float(F.cross_entropy(model.classify(x), y))

    assert loss(trained) < loss(_new_encoder(100, seed=0)) - 0.05
    trained.eval()
    again = train_encoder("cifar100", c100, epochs=1, batch_size=16, seed=0, limit=50)
    assert again.meta["samples"] == 50


def test_cli_encoder_train_writes_checkpoint(c100, tmp_path, capsys):
    out = tmp_path / "enc.pt"
    assert main(["encoder", "train", "--dataset", "cifar100", "--root", c100, "--epochs", "1", "--limit", "40",
                 "--device", "cpu", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "final training accuracy" in printed
    assert load_encoder(out).meta["samples"] == 40
    assert main(["encoder", "train", "--dataset", "cifar100", "--root", str(tmp_path / "none"), "--out", str(out)]) == 2
