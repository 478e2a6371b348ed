"""Conditional: exact bytes (log = FedAvg's pattern, z-score adds 2l floats each way per client), pooled = 0 bytes,
statistics charged as compute, gossip transport, determinism."""

from __future__ import annotations

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
def test_log_normalization_costs_exactly_fedavgs_bytes(n, rounds):
    result = p2pfl.run(_scenario(n=n, normalization="log", rounds=rounds), write=False)
    model = _cond_model_bytes()
    assert result.bytes_total == rounds * n * (2 * (model + HEADER_BYTES) + SCALAR_BYTES)
    assert result.messages_total == 2 * n * rounds
    assert set(result.summary["bytes_by_kind"]) == {"model", "update"}


def test_zscore_adds_2l_floats_up_and_down_per_client():
    n, rounds = 4, 2
    log = p2pfl.run(_scenario(n=n, normalization="log"), write=False)
    z = p2pfl.run(_scenario(n=n, normalization="zscore"), write=False)
    per_msg = 2 * L * 4 + HEADER_BYTES
    assert z.bytes_total - log.bytes_total == n * 2 * per_msg
    assert z.summary["bytes_by_kind"]["moments"] == n * per_msg
    assert z.summary["bytes_by_kind"]["moments_reply"] == n * per_msg
    assert z.messages_total == log.messages_total + 2 * n


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
def test_same_seed_same_summary(protocol):
    sc = _scenario(n=4, servers="transport" not in protocol and "mode" not in protocol, **protocol)
    assert p2pfl.run(sc, write=False).summary == p2pfl.run(sc, write=False).summary
