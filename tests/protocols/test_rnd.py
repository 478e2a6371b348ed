"""RND with a server: exact bytes (only predictors travel), server never relays routed sends,
federations recovered on feature-skewed digits, re-clustering, artifacts, determinism."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

import p2pfl
from p2pfl.clustering import compatibility_clusters, compatibility_graph, label_propagation_clusters, make_predictor
from p2pfl.errors import UserError
from p2pfl.learning.models import ModelSpec, build_model
from p2pfl.protocols.server.rnd import clustering_rounds, federation_index, regroup_weights
from p2pfl.sim.cost import HEADER_BYTES, SCALAR_BYTES, payload_bytes
from tests.helpers import digits_scenario

H = HEADER_BYTES
M = payload_bytes(dict(build_model(ModelSpec(name="mlp", hidden=16), (1, 8, 8), 10, seed=0).state_dict()))
P = payload_bytes(dict(make_predictor((1, 8, 8), seed=0).state_dict()))
FAST = {"rnd_epochs": 1, "rnd_batch_size": 64}


def _training_bytes(n: int, rounds: int) -> int:
    """FedAvg per federation: the server sends each device its model, each uploads model + sample count."""
    return rounds * n * (2 * (M + H) + SCALAR_BYTES)


def _rows(n: int) -> int:
    return n * (8 * n + H)


def test_sizes_used_in_the_hand_counts():
    assert M == 4840
    assert P == (1 * 2 * 9 + 2 + 2 * 4 * 9 + 4 + 64 * 64 + 64) * 4 == 17024


def test_relay_bytes_are_uploads_downloads_rows_and_fedavg():
    n, rounds = 5, 2
    r = p2pfl.run(digits_scenario({"name": "rnd", "rounds": rounds, "exchange": "relay", **FAST}, n=n, servers=True),
                  write=False)
    assert r.bytes_by_kind["rnd_upload"] == n * (P + H)
    assert r.bytes_by_kind["rnd_predictor"] == n * (n - 1) * (P + SCALAR_BYTES + H)  # forwarded copy names its owner
    assert r.bytes_by_kind["rnd_row"] == _rows(n)
    assert r.bytes_total == n * (P + H) + n * (n - 1) * (P + SCALAR_BYTES + H) + _rows(n) + _training_bytes(n, rounds)
    assert r.messages_total == n + n * (n - 1) + n + 2 * n * rounds


def test_direct_exchange_on_a_complete_graph_sends_n_times_n_minus_one_predictors():
    n, rounds = 4, 1
    r = p2pfl.run(digits_scenario({"name": "rnd", "rounds": rounds, **FAST}, n=n, kind="complete", servers=True),
                  write=False)
    assert r.bytes_total == n * (n - 1) * (P + H) + _rows(n) + _training_bytes(n, rounds)


def test_direct_exchange_is_routed_over_the_device_graph_never_through_the_server():
    # Ring of 6: hop distances from any device are 1, 1, 2, 2, 3 -> 9 predictor hops per device.
    # Through the server (attached to all) every route would be at most 2 hops (48 in all, not 54).
    n = 6
    r = p2pfl.run(digits_scenario({"name": "rnd", "rounds": 1, **FAST}, n=n, servers=True), write=False)
    assert r.bytes_by_kind["rnd_predictor"] == n * 9 * (P + H)
    assert r.bytes_per_server["server"] == n * (M + H)  # the server only sends federation models


@pytest.mark.slow
def test_recluster_every_repeats_the_clustering_phase():
    n, rounds = 4, 4
    once = p2pfl.run(digits_scenario({"name": "rnd", "rounds": rounds, "exchange": "relay", **FAST}, n=n,
                                     servers=True), write=False)
    twice = p2pfl.run(digits_scenario({"name": "rnd", "rounds": rounds, "exchange": "relay", "recluster_every": 2,
                                       **FAST}, n=n, servers=True), write=False)
    phase = n * (P + H) + n * (n - 1) * (P + SCALAR_BYTES + H) + _rows(n)
    assert twice.bytes_total - once.bytes_total == phase
    assert [e["round"] for e in twice.clustering_events] == [1, 3]
    assert twice.clustering_flops > once.clustering_flops > 0  # the embedding is paid once (test_rnd_cost.py)


def test_rnd_needs_a_server_attached_to_every_device():
    sc = digits_scenario({"name": "rnd", "rounds": 1}, n=4)
    sc["topology"]["servers"] = [{"name": "server", "attach": [0, 1]}]
    with pytest.raises(UserError, match="attached to every device"):
        p2pfl.run(sc, write=False)


def _skewed(protocol: dict, n: int = 6, **kw) -> dict:
    sc = digits_scenario(protocol, n=n, **kw)
    sc["data"] = {"dataset": "digits", "samples_per_client": 120,
                  "partition": {"kind": "feature_skew", "n_clusters": 2, "mode": "pattern", "rms": 0.3}}
    return sc


@pytest.mark.slow
def test_rnd_recovers_feature_skewed_groups_and_trains_one_model_per_federation(tmp_path):
    sc = _skewed({"name": "rnd", "rounds": 2, "rnd_epochs": 15, "rnd_batch_size": 16}, servers=True)
    r = p2pfl.run(sc, out=tmp_path / "run")
    assert r.clusters == [[0, 1, 2], [3, 4, 5]]
    assert r.ari == 1.0 and r.misclassification_rate == 0.0 and r.n_federations == 2
    U = np.load(io.BytesIO((tmp_path / "run" / "novelty.npy").read_bytes()))
    assert U.shape == (6, 6) and np.isfinite(U).all()
    same = np.equal.outer([0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1])
    ratio = U / np.diag(U)[:, None]
    assert ratio[~same].min() > ratio[same].max()  # Fig. 2 block structure
    assert (tmp_path / "run" / "novelty_heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["clusters"] == r.clusters


@pytest.mark.parametrize("name", ["rnd", "rnd_gossip"])
@pytest.mark.slow
def test_the_gap_criterion_decides_the_federations_of_both_variants(tmp_path, name):
    protocol = {"name": name, "rounds": 1, "rnd_epochs": 15, "rnd_batch_size": 16}
    kw: dict = {"servers": True} if name == "rnd" else {"kind": "complete"}
    p2pfl.run(_skewed(protocol, **kw), out=tmp_path / "band")
    U = np.load(io.BytesIO((tmp_path / "band" / "novelty.npy").read_bytes()))
    gaps = U - np.diag(U)[:, None]
    same = np.equal.outer([0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1])
    assert gaps[same].max() < gaps[~same].min()
    for i, gap in enumerate([(gaps[same].max() + gaps[~same].min()) / 2, float(gaps.max())]):
        r = p2pfl.run(_skewed({**protocol, "criterion": "gap", "gap": gap}, **kw), out=tmp_path / f"gap{i}")
        assert np.array_equal(np.load(io.BytesIO((tmp_path / f"gap{i}" / "novelty.npy").read_bytes())), U)
        expected = (compatibility_clusters(U, gap, criterion="gap") if name == "rnd" else  # rnd_gossip: no peeling
                    label_propagation_clusters(compatibility_graph(U, gap, criterion="gap"))[0])
        assert r.clusters == expected == ([[0, 1, 2], [3, 4, 5]] if i == 0 else [[0, 1, 2, 3, 4, 5]])


@pytest.mark.slow
def test_rnd_is_deterministic():
    sc = digits_scenario({"name": "rnd", "rounds": 2, "recluster_every": 1, **FAST}, n=4, servers=True)
    assert p2pfl.run(sc, write=False).summary == p2pfl.run(sc, write=False).summary


def test_pure_helpers():
    assert clustering_rounds(7, None) == [1]
    assert clustering_rounds(7, 3) == [1, 4, 7]
    assert federation_index([[0, 2], [1]], 3) == [0, 1, 0]
    with pytest.raises(ValueError, match="cover device 2"):
        federation_index([[0], [1]], 3)
    assert regroup_weights([0, 1, 3], [0, 0, 1, 1], [10, 20, 30, 40]) == {0: 30.0, 1: 40.0}
