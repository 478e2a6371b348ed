"""IFCA: K-fold download, cluster id in the upload, E-step compute, assignment and ARI, determinism."""

from __future__ import annotations

import pytest

import p2pfl
from p2pfl.learning.models import ModelSpec, build_model
from p2pfl.learning.state import load_state_
from p2pfl.learning.train import average_loss
from p2pfl.protocols.server import ifca as ifca_module
from p2pfl.protocols.server.ifca import choose_cluster, clusters_from_assignment, is_balanced
from p2pfl.sim.cost import HEADER_BYTES, SCALAR_BYTES, payload_bytes
from tests.helpers import digits_scenario

MODEL = payload_bytes(dict(build_model(ModelSpec(name="mlp", hidden=16), (1, 8, 8), 10, seed=0).state_dict()))


def _scenario(k=2, n=6, rounds=2, **kw):
    sc = digits_scenario({"name": "ifca", "rounds": rounds, "n_clusters": k, **kw}, n=n, servers=True)
    sc["data"]["partition"] = {"kind": "label_permutation", "n_clusters": 2}
    return sc


@pytest.mark.parametrize("k,n,rounds", [(2, 6, 2), (3, 4, 3)])
@pytest.mark.slow
def test_ifca_downloads_k_models_per_device_per_round(k, n, rounds):
    result = p2pfl.run(_scenario(k, n, rounds), write=False)
    down = k * MODEL + HEADER_BYTES
    up = MODEL + 2 * SCALAR_BYTES + HEADER_BYTES  # state, n_samples, cluster id
    assert result.summary["bytes_by_kind"] == {"models": rounds * n * down, "update": rounds * n * up}
    assert result.bytes_per_server["server"] == rounds * n * down
    assert result.messages_total == 2 * n * rounds


def test_ifca_charges_k_forward_passes_for_the_estep():
    k, n, rounds = 3, 4, 2
    result = p2pfl.run(_scenario(k, n, rounds), write=False)
    fwd = 2 * 64 * 16 + 16 + 16 + 2 * 16 * 10 + 10
    assert result.compute_flops_total == rounds * n * (k * fwd * 40 + 3 * fwd * 40)


def test_ifca_logs_assignment_and_ari_each_round():
    result = p2pfl.run(_scenario(2, 6, 3), write=False)
    logs = result.summary["logs"]
    assert [e["round"] for e in logs["assignment"]] == [1, 2, 3]
    assert all(len(e["value"]) == 6 for e in logs["assignment"])
    clusters = result.summary["clusters"]
    assert sorted(d for c in clusters for d in c) == list(range(6))
    assert result.summary["ari"] == logs["ari"][-1]["value"]
    assert -1.0 <= result.summary["ari"] <= 1.0


@pytest.mark.slow
def test_balanced_init_probes_the_devices_and_is_off_by_default():
    plain = p2pfl.run(_scenario(2, 6, 1), write=False)
    assert "probe" not in plain.summary["bytes_by_kind"]
    bal = p2pfl.run(_scenario(2, 6, 1, balanced_init=True, init_tries=3), write=False)
    tries = len(bal.summary["logs"]["ifca_init_balanced"])
    assert 1 <= tries <= 3
    assert bal.summary["bytes_by_kind"]["probe"] == tries * 6 * (2 * MODEL + HEADER_BYTES)
    assert bal.summary["bytes_by_kind"]["probe_reply"] == tries * 6 * (SCALAR_BYTES + HEADER_BYTES)


def test_decisions():
    assert choose_cluster([0.5, 0.2, 0.2]) == 1
    assert clusters_from_assignment([1, 1, 0, 2], 4) == [[2], [0, 1], [3]]
    assert is_balanced([0, 0, 1, 1], 2) and not is_balanced([0, 0, 0, 1, 1, 1, 1, 1, 1], 3)


@pytest.mark.slow
def test_same_seed_same_summary():
    sc = _scenario(2, 6, 2)
    assert p2pfl.run(sc, write=False).summary == p2pfl.run(sc, write=False).summary


@pytest.mark.slow
def test_stacked_estep_changes_nothing_against_the_per_model_loop(monkeypatch):
    def loop(model, states, x, y):  # the E-step as it was: each cluster model loaded and scored in turn
        out = []
        for s in states:
            load_state_(model, s)
            out.append(average_loss(model, x, y))
        return out

    sc = _scenario(3, 6, 3)
    stacked = p2pfl.run(sc, write=False).summary
    monkeypatch.setattr(ifca_module, "average_losses", loop)
    assert p2pfl.run(sc, write=False).summary == stacked
