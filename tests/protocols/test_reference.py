"""Oracle (FedAvg per true cluster, or pooled per cluster) and Centralized (pooled, no network): bytes, ARI,
compute, held-out devices, determinism."""

from __future__ import annotations

import pytest

import p2pfl
from p2pfl.errors import ConfigError
from p2pfl.learning.models import ModelSpec, build_model
from p2pfl.sim.cost import HEADER_BYTES, SCALAR_BYTES, payload_bytes
from tests.helpers import digits_scenario

MODEL = payload_bytes(dict(build_model(ModelSpec(name="mlp", hidden=16), (1, 8, 8), 10, seed=0).state_dict()))


def _sc(protocol, n=6, servers=True, partition=None):
    sc = digits_scenario({"rounds": 2, **protocol}, n=n, servers=servers)
    if partition:
        sc["data"]["partition"] = partition
    return sc


def test_oracle_is_fedavg_per_cluster_plus_one_join_per_device():
    part = {"kind": "label_permutation", "n_clusters": 3}
    oracle = p2pfl.run(_sc({"name": "oracle"}, partition=part), write=False)
    n, rounds = 6, 2
    assert oracle.bytes_total == rounds * n * (2 * (MODEL + HEADER_BYTES) + SCALAR_BYTES) + n * (SCALAR_BYTES + HEADER_BYTES)
    assert oracle.summary["clusters"] == [[0, 1], [2, 3], [4, 5]]
    assert oracle.summary["ari"] == 1.0


@pytest.mark.slow
def test_oracle_with_one_cluster_is_fedavg():
    oracle = p2pfl.run(_sc({"name": "oracle"}), write=False)
    fedavg = p2pfl.run(_sc({"name": "fedavg"}), write=False)
    assert oracle.accuracy_per_node == fedavg.accuracy_per_node


@pytest.mark.slow
def test_oracle_beats_fedavg_on_label_permutation():
    part = {"kind": "label_permutation", "n_clusters": 2}
    runs = []
    for name in ("oracle", "fedavg"):
        sc = _sc({"name": name, "rounds": 10}, n=4, partition=part)
        sc["data"]["samples_per_client"] = 200
        runs.append(p2pfl.run(sc, write=False))
    oracle, fedavg = runs
    assert oracle.accuracy_mean > fedavg.accuracy_mean + 0.2


def test_centralized_sends_nothing_and_device_zero_trains_on_everything():
    result = p2pfl.run(_sc({"name": "centralized"}, n=4, servers=False), write=False)
    fwd = 2 * 64 * 16 + 16 + 16 + 2 * 16 * 10 + 10
    assert result.bytes_total == 0 and result.messages_total == 0
    assert result.summary["compute_flops_per_node"] == [3 * fwd * 4 * 40 * 2, 0, 0, 0]
    assert all(a is not None for a in result.accuracy_per_node)


@pytest.mark.slow
def test_same_seed_same_summary():
    for sc in (_sc({"name": "oracle"}, partition={"kind": "label_shift", "n_clusters": 2}),
               _sc({"name": "centralized"}, servers=False)):
        assert p2pfl.run(sc, write=False).summary == p2pfl.run(sc, write=False).summary


# --- pooled references (the Conditional-PCA paper's Oracle) and held-out clients ----------------------
FWD = 2 * 64 * 16 + 16 + 16 + 2 * 16 * 10 + 10  # mlp(16) on 8x8 digits: modelled forward FLOPs per sample


def test_pooled_oracle_trains_one_model_per_cluster_on_that_clusters_pooled_data():
    part = {"kind": "label_shift", "n_clusters": 2}
    result = p2pfl.run(_sc({"name": "oracle", "mode": "pooled"}, servers=False, partition=part), write=False)
    n_train = result.summary["partition"]["samples_per_device"]
    assert result.bytes_total == 0 and result.messages_total == 0
    assert result.summary["clusters"] == [[0, 1, 2], [3, 4, 5]]
    # each cluster's first device, its data centre, is charged 2 rounds x 1 epoch over its cluster's pooled data
    flops = result.summary["compute_flops_per_node"]
    assert flops == [3 * FWD * sum(n_train[:3]) * 2, 0, 0, 3 * FWD * sum(n_train[3:]) * 2, 0, 0]
    assert all(a is not None for a in result.accuracy_per_node)


@pytest.mark.slow
def test_pooled_oracle_with_one_cluster_is_centralized():
    oracle = p2pfl.run(_sc({"name": "oracle", "mode": "pooled"}, servers=False), write=False)
    central = p2pfl.run(_sc({"name": "centralized"}, servers=False), write=False)
    assert oracle.accuracy_per_node == central.accuracy_per_node
    assert oracle.summary["compute_flops_per_node"] == central.summary["compute_flops_per_node"]


@pytest.mark.slow
def test_held_out_devices_train_nothing_and_are_scored():
    part = {"kind": "label_shift", "n_clusters": 2}
    for proto, trainers in (({"name": "centralized"}, {0: [0, 1, 3, 4]}),
                            ({"name": "oracle", "mode": "pooled"}, {0: [0, 1], 3: [3, 4]})):
        result = p2pfl.run(_sc({**proto, "held_out_per_cluster": 1}, servers=False, partition=part), write=False)
        n_train = result.summary["partition"]["samples_per_device"]
        assert result.summary["held_out"] == [2, 5]
        expected = [3 * FWD * sum(n_train[d] for d in trainers[i]) * 2 if i in trainers else 0 for i in range(6)]
        assert result.summary["compute_flops_per_node"] == expected, proto
        assert all(a is not None for a in result.accuracy_per_node)


def test_held_out_errors_name_the_field_and_the_fix():
    part = {"kind": "label_shift", "n_clusters": 2}
    with pytest.raises(ConfigError, match=r"field 'protocol.held_out_per_cluster' .* set protocol.mode: pooled"):
        p2pfl.run(_sc({"name": "oracle", "held_out_per_cluster": 1}, partition=part), write=False)
    with pytest.raises(ConfigError, match=r"cluster 0 has 3 devices, so holding out 3 leaves none to train; "
                                          r"lower it below 3"):
        p2pfl.run(_sc({"name": "centralized", "held_out_per_cluster": 3}, servers=False, partition=part), write=False)
