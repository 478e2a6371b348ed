"""RND with a server: exact bytes (only predictors travel), server never relays routed sends,
federations recovered on feature-skewed digits, re-clustering, artifacts, determinism."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest
import torch

import p2pfl
from p2pfl.clustering import compatibility_clusters, compatibility_graph, label_propagation_clusters, make_predictor
from p2pfl.clustering.novelty import RNDProbe
from p2pfl.config import load_dict
from p2pfl.errors import ConfigError, UserError
from p2pfl.learning.models import ModelSpec, build_model
from p2pfl.protocols.server.rnd import clustering_rounds, federation_index, regroup_weights
from p2pfl.sim.cost import HEADER_BYTES, SCALAR_BYTES, payload_bytes
from p2pfl.sim.kernel import Simulation
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


# --------------------------------------------------------------------------- predictor_init (issue 69)


def _init_scenario(name: str, init: str | None, n: int = 4) -> dict:
    protocol = {"name": name, "rounds": 1, **FAST, **({} if init is None else {"predictor_init": init})}
    return digits_scenario(protocol, n=n, kind="complete", servers=name == "rnd")


def _run_capturing(monkeypatch: pytest.MonkeyPatch, sc: dict) -> tuple[Any, dict[int, dict], Any]:
    """Run ``sc``; return the result, each device's initial predictor state (as ``RNDProbe.train`` built it),
    and the probe."""
    initial: dict[int, dict] = {}
    probes: list[RNDProbe] = []

    class Probe(RNDProbe):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            probes.append(self)

        def new_predictor(self, device: int) -> torch.nn.Module:
            net = super().new_predictor(device)
            initial[device] = {k: v.clone() for k, v in net.state_dict().items()}
            return net

    for mod in ("p2pfl.protocols.server.rnd", "p2pfl.protocols.serverless.rnd_gossip"):
        monkeypatch.setattr(f"{mod}.RNDProbe", Probe)
    r = p2pfl.run(sc, write=False)
    (probe,) = probes
    return r, initial, probe


@pytest.mark.parametrize("name", ["rnd", "rnd_gossip"])
def test_per_device_init_gives_every_device_its_own_initial_predictor_and_shared_one_for_all(monkeypatch, name):
    n = 3
    runs = {init: _run_capturing(monkeypatch, _init_scenario(name, init, n)) for init in ("per_device", "shared")}
    (r_own, own, probe_own), (r_shared, shared, probe_shared) = runs["per_device"], runs["shared"]
    assert sorted(own) == sorted(shared) == list(range(n))
    for i in range(n):  # per_device: device i's own, from the seed and its id
        assert all(torch.equal(own[i][k], v) for k, v in make_predictor((1, 8, 8), seed=0, node=i).state_dict().items())
        for j in range(i):
            assert not any(torch.equal(own[i][k], own[j][k]) for k in own[i] if k.endswith("weight"))
    common = make_predictor((1, 8, 8), seed=0).state_dict()
    assert all(torch.equal(shared[i][k], v) for i in range(n) for k, v in common.items())  # shared: as before
    # the frozen target and the scoring template are the same in both; only the starting points differ
    for a, b in ((probe_own.target, probe_shared.target), (probe_own._template, probe_shared._template)):
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert probe_own.predictor_init == "per_device" and probe_shared.predictor_init == "shared"
    # discovery's traffic and compute do not depend on it (training's may: other federations)
    assert r_own.bytes_by_kind["rnd_predictor"] == r_shared.bytes_by_kind["rnd_predictor"] > 0
    assert r_own.clustering_flops == r_shared.clustering_flops


def test_shared_is_the_default_predictor_init(monkeypatch):
    r_default, default, _ = _run_capturing(monkeypatch, _init_scenario("rnd", None))
    r_shared, shared, _ = _run_capturing(monkeypatch, _init_scenario("rnd", "shared"))
    assert all(torch.equal(default[i][k], shared[i][k]) for i in shared for k in shared[i])
    assert r_default.summary == r_shared.summary  # archived results (no predictor_init field) stay as they were


@pytest.mark.parametrize("name", ["rnd", "rnd_gossip"])
@pytest.mark.slow
def test_per_device_runs_write_byte_identical_summaries(tmp_path, name):
    sc = _init_scenario(name, "per_device")
    for out in ("a", "b"):
        p2pfl.run(sc, out=tmp_path / out)
    assert (tmp_path / "a" / "summary.json").read_bytes() == (tmp_path / "b" / "summary.json").read_bytes()
    assert (tmp_path / "a" / "novelty.npy").read_bytes() == (tmp_path / "b" / "novelty.npy").read_bytes()
    U = np.load(tmp_path / "a" / "novelty.npy")
    p2pfl.run(_init_scenario(name, "shared"), out=tmp_path / "shared")
    assert not np.array_equal(U, np.load(tmp_path / "shared" / "novelty.npy"))  # the init reached the scores


@pytest.mark.parametrize("name", ["rnd", "rnd_gossip"])
def test_an_unknown_predictor_init_is_rejected_with_its_field(name):
    with pytest.raises(ConfigError, match=r"field 'protocol\.predictor_init': Input should be 'shared' or "
                                          r"'per_device'; got 'own'"):
        load_dict(_init_scenario(name, "own"))
    with pytest.raises(ValueError, match="'predictor_init' parameter must be one of"):
        RNDProbe(Simulation(load_dict(_init_scenario(name, "shared"))).run_info, epochs=1, batch_size=8,
                 lr=1e-3, predictor_init="own")  # type: ignore[arg-type]
