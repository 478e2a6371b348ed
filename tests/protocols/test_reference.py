"""Oracle (FedAvg per true cluster) and Centralized (pooled, no network): bytes, ARI, compute, determinism."""

from __future__ import annotations

import p2pfl
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


def test_oracle_with_one_cluster_is_fedavg():
    oracle = p2pfl.run(_sc({"name": "oracle"}), write=False)
    fedavg = p2pfl.run(_sc({"name": "fedavg"}), write=False)
    assert oracle.accuracy_per_node == fedavg.accuracy_per_node


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


def test_same_seed_same_summary():
    for sc in (_sc({"name": "oracle"}, partition={"kind": "label_shift", "n_clusters": 2}),
               _sc({"name": "centralized"}, servers=False)):
        assert p2pfl.run(sc, write=False).summary == p2pfl.run(sc, write=False).summary
