"""DSGD: Metropolis-Hastings weights, exact bytes, and synchronous rounds whatever the device speeds."""

from __future__ import annotations

import networkx as nx
import pytest
import torch

import p2pfl
from p2pfl.protocols.serverless.dsgd import metropolis_mix, metropolis_weights
from tests.helpers import digits_scenario
from tests.protocols.test_rnd import H, M


def test_metropolis_weights_are_symmetric_and_doubly_stochastic():
    g = nx.star_graph(3)  # hub 0 (degree 3), leaves degree 1
    assert metropolis_weights(g, 0) == {1: 0.25, 2: 0.25, 3: 0.25, 0: 0.25}
    assert metropolis_weights(g, 1) == {0: 0.25, 1: 0.75}
    g = nx.barabasi_albert_graph(12, 2, seed=1)
    W = torch.zeros(12, 12, dtype=torch.float64)
    for i in g:
        for j, w in metropolis_weights(g, i).items():
            W[i, j] = w
    assert torch.allclose(W, W.T)
    assert torch.allclose(W.sum(1), torch.ones(12, dtype=torch.float64))


def test_mix_preserves_the_mean_over_the_fleet():
    g = nx.cycle_graph(5)
    states = {i: {"w": torch.tensor([float(i), float(i * i)])} for i in g}
    mixed = [metropolis_mix({j: states[j] for j in metropolis_weights(g, i)}, metropolis_weights(g, i)) for i in g]
    assert torch.allclose(torch.stack([m["w"] for m in mixed]).mean(0), torch.tensor([2.0, 6.0]))
    with pytest.raises(ValueError, match="different nodes"):
        metropolis_mix({0: states[0]}, {1: 1.0})


@pytest.mark.parametrize("kind,n,edges", [("ring", 6, 6), ("complete", 4, 6)])
@pytest.mark.slow
def test_dsgd_sends_one_model_per_edge_direction_per_round(kind, n, edges):
    rounds = 2
    r = p2pfl.run(digits_scenario({"name": "dsgd", "rounds": rounds}, n=n, kind=kind), write=False)
    assert r.bytes_total == rounds * 2 * edges * (M + H)
    assert r.messages_total == rounds * 2 * edges


@pytest.mark.slow
def test_rounds_stay_synchronous_when_devices_run_at_different_speeds():
    """Fast devices send round r+1 before slow ones finish round r; buffering keeps the maths identical.

    Ring of 8 with speeds drawn slow, fast, slow, fast, slow, fast, fast, fast (seed 0): devices 6 and 7
    finish round r and push round r+1 to neighbours still waiting for a slow device's round r.
    """
    base = digits_scenario({"name": "dsgd", "rounds": 4}, n=8)
    mixed = digits_scenario({"name": "dsgd", "rounds": 4}, n=8,
                            devices={"flops_per_s": {"dist": "choice", "values": [1.0e5, 1.0e9]}})
    a, b = p2pfl.run(base, write=False), p2pfl.run(mixed, write=False)
    assert a.accuracy_per_node == b.accuracy_per_node
    assert b.sim_time_s > 10 * a.sim_time_s


@pytest.mark.slow
def test_dsgd_is_deterministic():
    sc = digits_scenario({"name": "dsgd", "rounds": 2}, n=5)
    assert p2pfl.run(sc, write=False).summary == p2pfl.run(sc, write=False).summary
