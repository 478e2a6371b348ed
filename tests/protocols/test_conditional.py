"""Conditional: exact bytes (log = FedAvg's pattern, z-score adds 2l floats each way per client), pooled = 0 bytes,
statistics charged as compute, gossip transport, determinism."""

from __future__ import annotations

import json

import numpy as np
import pytest

import p2pfl
from p2pfl.conditioning import conditioned_model, pca_flops
from p2pfl.learning.models import ModelSpec
from p2pfl.sim.cost import HEADER_BYTES, SCALAR_BYTES, payload_bytes
from tests.helpers import digits_scenario

L = 8


def _cond_model_bytes(hidden: int = 16) -> int:
    model = conditioned_model(ModelSpec(name="mlp", hidden=hidden), (1, 8, 8), 10, L, seed=0)
    return payload_bytes(dict(model.state_dict()))


def _scenario(n=4, servers=True, **protocol):
    sc = digits_scenario({"name": "conditional", "rounds": 2, "components": L, **protocol}, n=n, servers=servers)
    sc["data"]["partition"] = {"kind": "label_shift", "n_clusters": 2}
    return sc


def test_conditioned_model_is_fedavg_model_plus_l_columns():
    assert _cond_model_bytes() == ((64 + L) * 16 + 16 + 16 * 10 + 10) * 4


@pytest.mark.parametrize("n,rounds", [(4, 2), (6, 3)])
@pytest.mark.slow
def test_log_normalization_costs_exactly_fedavgs_bytes(n, rounds):
    result = p2pfl.run(_scenario(n=n, normalization="log", rounds=rounds), write=False)
    model = _cond_model_bytes()
    assert result.bytes_total == rounds * n * (2 * (model + HEADER_BYTES) + SCALAR_BYTES)
    assert result.messages_total == 2 * n * rounds
    assert set(result.summary["bytes_by_kind"]) == {"model", "update"}


@pytest.mark.slow
def test_zscore_adds_2l_floats_up_and_down_per_client():
    n = 4
    log = p2pfl.run(_scenario(n=n, normalization="log"), write=False)
    z = p2pfl.run(_scenario(n=n, normalization="zscore"), write=False)
    per_msg = 2 * L * 4 + HEADER_BYTES
    assert z.bytes_total - log.bytes_total == n * 2 * per_msg
    assert z.summary["bytes_by_kind"]["moments"] == n * per_msg
    assert z.summary["bytes_by_kind"]["moments_reply"] == n * per_msg
    assert z.messages_total == log.messages_total + 2 * n


@pytest.mark.slow
def test_statistics_are_charged_as_compute_once_per_device():
    n = 4
    log = p2pfl.run(_scenario(n=n, normalization="log"), write=False)
    fedavg = p2pfl.run(digits_scenario({"name": "fedavg", "rounds": 2}, n=n, servers=True,
                                       data={"dataset": "digits", "partition": {"kind": "label_shift", "n_clusters": 2},
                                             "samples_per_client": 40}), write=False)
    fwd_extra = 2 * L * 16  # the l extra inputs of the first FC layer
    train_extra = 3 * fwd_extra * 40 * 2 * n  # 40 samples, 2 rounds, n devices
    stats = n * pca_flops(40, 64 + 10, L)
    assert log.compute_flops_total == fedavg.compute_flops_total + train_extra + stats


def test_pooled_mode_sends_nothing_and_trains_on_device_zero():
    result = p2pfl.run(_scenario(n=4, servers=False, mode="pooled"), write=False)
    assert result.bytes_total == 0 and result.messages_total == 0
    per_node = result.summary["compute_flops_per_node"]
    fwd = (2 * (64 + L) * 16 + 16) + 16 + (2 * 16 * 10 + 10)
    stats = pca_flops(40, 64 + 10, L)
    assert per_node[1:] == [stats] * 3  # the others only computed their statistics
    assert per_node[0] == stats + 3 * fwd * (4 * 40) * 2  # device 0 also trained 2 passes over the pooled 160
    assert result.summary["logs"]["pooled_upload_bytes"][0]["value"] > 4 * 40 * 64 * 4
    assert all(a is not None for a in result.accuracy_per_node)


def _statistics(run_dir):
    rows = json.loads((run_dir / "statistics.json").read_text())
    return (np.array([rows[str(i)]["raw"] for i in range(len(rows))]),
            np.array([rows[str(i)]["normalized"] for i in range(len(rows))]))


@pytest.mark.slow
def test_no_statistics_is_the_same_training_with_s_zero_and_no_messages_beyond_fedavgs(tmp_path):
    n = 4
    log = p2pfl.run(_scenario(n=n, normalization="log"), write=False)
    none = p2pfl.run(_scenario(n=n, normalization="none"), out=tmp_path / "none")
    assert none.bytes_total == log.bytes_total and none.compute_flops_total == log.compute_flops_total
    _, normalized = _statistics(tmp_path / "none")
    assert normalized.shape == (n, L) and not normalized.any()


def test_pooled_held_out_devices_are_zscored_with_the_training_devices_moments(tmp_path):
    n = 6
    result = p2pfl.run(_scenario(n=n, servers=False, mode="pooled", held_out_per_cluster=1), out=tmp_path / "r")
    assert result.summary["held_out"] == [2, 5]
    raw, normalized = _statistics(tmp_path / "r")
    fit = raw[[0, 1, 3, 4]]
    mean, std = fit.mean(axis=0), fit.std(axis=0)
    expected = np.where(std > 1e-12, (raw - mean) / np.where(std > 1e-12, std, 1.0), 0.0)
    np.testing.assert_allclose(normalized, expected, rtol=1e-9, atol=1e-9)
    per_node = result.summary["compute_flops_per_node"]
    fwd = (2 * (64 + L) * 16 + 16) + 16 + (2 * 16 * 10 + 10)
    assert per_node[0] - per_node[1] == 3 * fwd * (4 * 40) * 2  # device 0 trained on the 4 training devices only
    assert all(a is not None for a in result.accuracy_per_node)


def test_held_out_needs_the_pooled_mode():
    with pytest.raises(p2pfl.errors.UserError, match=r"field 'protocol.held_out_per_cluster' .* protocol.mode: pooled"):
        p2pfl.run(_scenario(n=4, held_out_per_cluster=1), write=False)


@pytest.mark.slow
def test_gossip_transport_uses_gossip_exchange_on_the_conditioned_model():
    n, rounds = 6, 2
    result = p2pfl.run(_scenario(n=n, servers=False, transport="gossip", normalization="log"), write=False)
    model = _cond_model_bytes()
    assert result.messages_total == 2 * n * rounds
    assert result.bytes_total == 2 * n * rounds * (model + HEADER_BYTES)
    z = p2pfl.run(_scenario(n=n, servers=False, transport="gossip", normalization="zscore", moment_rounds=3), write=False)
    assert z.summary["bytes_by_kind"]["moment_push"] == n * 3 * (2 * L * 4 + HEADER_BYTES)


def test_server_transport_without_server_is_a_clear_error():
    with pytest.raises(p2pfl.errors.UserError, match="needs a server"):
        p2pfl.run(_scenario(servers=False), write=False)


@pytest.mark.slow
def test_conditioning_beats_fedavg_on_label_shift():
    """E1 on digits, 4 clusters of 2 devices: the conditioned model separates the clusters' class groups."""
    sc = _scenario(n=8, rounds=15, normalization="zscore")
    sc["data"]["partition"] = {"kind": "label_shift", "n_clusters": 4}
    sc["protocol"]["components"] = 32
    cond = p2pfl.run(sc, write=False)
    fed = p2pfl.run({**sc, "protocol": {"name": "fedavg", "rounds": 15}}, write=False)
    assert cond.accuracy_mean > fed.accuracy_mean + 0.05


@pytest.mark.parametrize("protocol", [{"normalization": "zscore"}, {"mode": "pooled"},
                                      {"transport": "gossip", "normalization": "zscore", "moment_rounds": 2}])
@pytest.mark.slow
def test_same_seed_same_summary(protocol):
    sc = _scenario(n=4, servers="transport" not in protocol and "mode" not in protocol, **protocol)
    assert p2pfl.run(sc, write=False).summary == p2pfl.run(sc, write=False).summary


# --- 32x32 RGB: the cross-trained encoder (App. B-C) -------------------------------------------------------------

@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    """A tiny CIFAR-10 root and encoders trained on tiny CIFAR-100 (allowed) and CIFAR-10 (leaks)."""
    from p2pfl.conditioning import save_encoder, train_encoder
    from tests.fixtures import data_formats as fmt

    root = tmp_path_factory.mktemp("cifar")
    fmt.write_cifar10(root, per_batch=12, n_test=12)
    fmt.write_cifar100(root, per_class=1, n_test_per_class=1)
    enc = save_encoder(train_encoder("cifar100", str(root), epochs=1, batch_size=32, seed=0, limit=64), root / "c100.pt")
    same = save_encoder(train_encoder("cifar10", str(root), epochs=0, seed=0), root / "c10.pt")
    return root, enc, same


def _cifar_scenario(root, n=3, **protocol):
    sc = digits_scenario({"name": "conditional", "rounds": 2, "components": L, "normalization": "log", **protocol},
                         n=n, servers=True)
    sc["data"] = {"dataset": "cifar10", "root": str(root), "partition": {"kind": "iid"}, "samples_per_client": 12}
    sc["model"] = {"name": "cnn32"}
    return sc


@pytest.mark.slow
def test_cifar_encoder_run_costs_fedavgs_bytes_and_charges_the_encoder(cifar, monkeypatch):
    from p2pfl.conditioning.encoder import load_encoder
    from p2pfl.sim.cost import forward_flops_per_sample

    root, enc, _ = cifar
    monkeypatch.chdir(root)  # relative paths are resolved against the working directory
    n, rounds = 3, 2
    result = p2pfl.run(_cifar_scenario(root, n=n, encoder=enc.name), write=False)
    model = payload_bytes(dict(conditioned_model(ModelSpec(name="cnn32"), (3, 32, 32), 10, L, seed=0).state_dict()))
    assert result.bytes_total == rounds * n * (2 * (model + HEADER_BYTES) + SCALAR_BYTES)
    assert set(result.summary["bytes_by_kind"]) == {"model", "update"}  # the encoder never travels
    raw = p2pfl.run(_cifar_scenario(root, n=n, encoder="identity"), write=False)
    m = 12  # training samples per device (samples_per_client)
    enc_flops = forward_flops_per_sample(load_encoder(enc), (3, 32, 32))
    assert result.compute_flops_total - raw.compute_flops_total == n * (
        enc_flops * m + pca_flops(m, 128 + 10, L) - pca_flops(m, 3072 + 10, L))


def test_cifar_needs_an_encoder_and_refuses_a_same_dataset_one(cifar):
    root, enc, same = cifar
    with pytest.raises(p2pfl.errors.ConfigError, match=r"cross-trained encoder.*p2pfl encoder train"):
        p2pfl.run(_cifar_scenario(root), write=False)
    with pytest.raises(p2pfl.errors.ConfigError, match="trained on 'cifar10', the scenario's own dataset"):
        p2pfl.run(_cifar_scenario(root, encoder=str(same)), write=False)
    with pytest.raises(p2pfl.errors.ConfigError, match="not found"):
        p2pfl.run(_cifar_scenario(root, encoder=str(root / "missing.pt")), write=False)
    with pytest.raises(p2pfl.errors.ConfigError, match="needs 3x32x32"):
        p2pfl.run(_scenario(normalization="log", encoder=str(enc)), write=False)
