"""FedProx and Ditto move exactly FedAvg's bytes; FedProx with mu=0 is FedAvg; Ditto pays the personal epochs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import p2pfl
from p2pfl.protocols.server.fedprox import proximal_penalty
from tests.helpers import digits_scenario


def _run(protocol: dict, n: int = 4, partition: dict | None = None):
    sc = digits_scenario({"rounds": 2, **protocol}, n=n, servers=True)
    if partition:
        sc["data"]["partition"] = partition
    return p2pfl.run(sc, write=False)


def test_proximal_penalty_value_and_gradient():
    lin = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 3.0]]))
    pen = proximal_penalty({"weight": torch.tensor([[0.0, 1.0]])}, 2.0)(lin)
    assert float(pen.detach()) == 5.0  # 2/2 * (1 + 4)
    pen.backward()
    assert torch.equal(lin.weight.grad, torch.tensor([[2.0, 4.0]]))


@pytest.mark.slow
def test_fedprox_bytes_equal_fedavg_and_mu_zero_is_fedavg():
    fedavg = _run({"name": "fedavg"})
    prox0 = _run({"name": "fedprox", "mu": 0.0})
    prox = _run({"name": "fedprox", "mu": 1.0})
    assert prox.bytes_total == fedavg.bytes_total and prox.messages_total == fedavg.messages_total
    assert prox0.accuracy_per_node == fedavg.accuracy_per_node
    assert prox0.summary["bytes_by_kind"] == fedavg.summary["bytes_by_kind"]
    assert prox.summary["compute_flops_total"] == fedavg.summary["compute_flops_total"]


@pytest.mark.slow
def test_fedprox_mu_pulls_local_models_to_the_global_one():
    from p2pfl.api import resolve

    # the averaged model after one round moves less from the init under a strong proximal pull
    from p2pfl.learning.aggregate import squared_distance
    from p2pfl.sim.kernel import Simulation
    init = None
    moved = []
    for mu in (0.0, 50.0):
        sc = resolve(digits_scenario({"name": "fedprox", "rounds": 1, "mu": mu}, n=4, servers=True))
        sim = Simulation(sc)
        init = sim.new_model().state_dict()
        captured = {}
        orig = sim.protocol.aggregate
        sim.protocol.aggregate = lambda updates, orig=orig, c=captured: c.setdefault("s", orig(updates))
        sim.run()
        moved.append(squared_distance(captured["s"], init))
    assert moved[1] < 0.5 * moved[0]


@pytest.mark.slow
def test_ditto_bytes_equal_fedavg_and_it_pays_the_personal_epochs():
    part = {"kind": "label_shift", "n_clusters": 2}
    fedavg = _run({"name": "fedavg"}, partition=part)
    ditto = _run({"name": "ditto", "personal_epochs": 5}, partition=part)
    assert ditto.bytes_total == fedavg.bytes_total
    assert ditto.summary["bytes_by_kind"] == fedavg.summary["bytes_by_kind"]
    assert ditto.compute_flops_total == 6 * fedavg.compute_flops_total  # 5 personal epochs + 1 global
    assert ditto.accuracy_per_node != fedavg.accuracy_per_node  # personal models are what is scored


@pytest.mark.slow
def test_ditto_personal_models_beat_the_global_model_on_label_shift():
    part = {"kind": "label_shift", "n_clusters": 4}
    fedavg = _run({"name": "fedavg", "rounds": 6}, n=8, partition=part)
    ditto = _run({"name": "ditto", "rounds": 6}, n=8, partition=part)
    assert ditto.accuracy_mean > fedavg.accuracy_mean + 0.05


@pytest.mark.slow
def test_same_seed_same_summary():
    for proto in ({"name": "fedprox", "mu": 0.5}, {"name": "ditto"}):
        assert _run(proto).summary == _run(proto).summary
