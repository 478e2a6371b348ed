"""IFCA: K-fold download, cluster id in the upload, E-step compute, assignment and ARI, determinism; restarts."""

from __future__ import annotations

import math

import pytest

import p2pfl
from p2pfl import api
from p2pfl.clustering.scores import merged_groups
from p2pfl.errors import ConfigError
from p2pfl.learning.models import ModelSpec, build_model
from p2pfl.learning.state import load_state_
from p2pfl.learning.train import average_loss
from p2pfl.protocols.server import ifca as ifca_module
from p2pfl.protocols.server.ifca import choose_cluster, clusters_from_assignment, is_balanced, kept_restart
from p2pfl.sim.cost import HEADER_BYTES, SCALAR_BYTES, payload_bytes
from p2pfl.tensor.simulation import check
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


# ------------------------------------------------------------------ restarts (issue 70)
def test_kept_restart_is_the_lowest_loss_and_the_earliest_of_ties():
    assert kept_restart([0.9, 0.4, 0.7]) == 1
    assert kept_restart([0.5, 0.5, 0.2, 0.2]) == 2
    assert kept_restart([math.nan, 0.8]) == 1  # a restart nobody reported on cannot be kept
    assert kept_restart([math.nan, math.nan]) == 0


def test_merged_groups_counts_the_true_clusters_sharing_a_federation():
    truth = [0, 0, 1, 1, 2, 2, 3, 3]
    assert merged_groups(truth, [[0, 1], [2, 3], [4, 5], [6, 7]]) == 0
    assert merged_groups(truth, [[0, 1, 2, 3], [4], [5], [6, 7]]) == 2  # groups 0 and 1 merged, group 2 split
    assert merged_groups(truth, [[0, 1, 2, 3, 4, 5, 6, 7]]) == 4
    assert merged_groups(truth, [[0, 2, 4, 6], [1, 3, 5, 7]]) == 4  # every group's home is federation 0 (ties)


def test_restarts_keep_the_run_with_the_lowest_training_loss():
    rounds, n = 3, 6
    s = p2pfl.run(_scenario(2, n, rounds, restarts=3), write=False).summary
    restarts = s["ifca_restarts"]
    losses = restarts["loss"]
    assert restarts["devices_reporting"] == [n, n, n]
    assert [e["value"] for e in s["logs"]["ifca_restart_loss"]] == losses
    kept = restarts["kept"]
    assert kept == min(range(3), key=lambda i: (losses[i], i))
    assert kept != 2  # the case this seed makes: the kept run is not simply the last one
    end_of = {p["round"]: p["accuracy_mean"] for p in s["accuracy_curve"]}
    assert sorted(end_of) == [3, 6, 9]  # each restart's last round, evaluated
    assert s["accuracy_mean"] == end_of[(kept + 1) * rounds]  # the last evaluation scores the kept models
    kept_assignment = s["logs"]["assignment"][(kept + 1) * rounds - 1]["value"]
    assert s["clusters"] == clusters_from_assignment(kept_assignment, 2)
    assert s["ari"] == s["restart_scores"][kept]["ari"] != s["restart_scores"][2]["ari"]
    assert [r["ari"] for r in s["restart_scores"]] == [e["value"] for e in s["logs"]["ari"][rounds - 1::rounds]]


def test_every_restart_is_charged():
    rounds, n, k = 2, 6, 2
    one = p2pfl.run(_scenario(k, n, rounds), write=False).summary
    two = p2pfl.run(_scenario(k, n, rounds, restarts=2), write=False).summary
    loss = n * 2 * SCALAR_BYTES  # each device's loss, with its last update of each of the 2 restarts
    assert two["bytes_by_kind"] == {"models": 2 * one["bytes_by_kind"]["models"],
                                    "update": 2 * one["bytes_by_kind"]["update"] + loss}
    assert two["bytes_total"] == 2 * one["bytes_total"] + loss
    assert two["messages_total"] == 2 * one["messages_total"]
    assert two["compute_flops_total"] == 2 * one["compute_flops_total"]
    # one after another: twice the time, plus 8 bytes more at the end of each restart on a 50 Mbit/s link
    assert two["sim_time_s"] == pytest.approx(2 * one["sim_time_s"] + 2 * SCALAR_BYTES * 8 / 5.0e7, abs=1e-12)


def test_the_first_restart_is_the_one_initialisation_run():
    rounds = 2
    one = p2pfl.run(_scenario(2, 6, rounds, eval_every=1), write=False).summary
    two = p2pfl.run(_scenario(2, 6, rounds, eval_every=1, restarts=2), write=False).summary
    assert "ifca_restarts" not in one and "restart_scores" not in one and "ifca_restart_loss" not in one["logs"]
    first = [(p["round"], p["accuracy_mean"]) for p in two["accuracy_curve"][:rounds]]
    assert first == [(p["round"], p["accuracy_mean"]) for p in one["accuracy_curve"]]
    assert [(e["round"], e["value"]) for e in two["logs"]["assignment"][:rounds]] == [
        (e["round"], e["value"]) for e in one["logs"]["assignment"]]
    assert two["restart_scores"][0]["ari"] == one["ari"]


@pytest.mark.slow
def test_same_seed_same_summary_with_restarts():
    sc = {**_scenario(2, 6, 2, restarts=2, round_timeout_s=2.0), "dynamics": {"churn": {"offline": 0.3, "cycle_s": 1.0}}}
    assert p2pfl.run(sc, write=False).summary == p2pfl.run(sc, write=False).summary


def test_the_tensor_engine_refuses_restarts():
    sc = api.resolve("scenarios/headline/ifca.yaml", overrides=["engine=tensor", "protocol.restarts=2"],
                     unset=["dynamics"])
    with pytest.raises(ConfigError, match=r"^protocol\.restarts: .*set engine: events$"):
        check(sc)
