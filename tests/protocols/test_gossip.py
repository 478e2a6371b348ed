"""Gossip invariants: mean preservation, geometric consensus with lr 0, push-only, async clocks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import p2pfl
from p2pfl.maths.consensus import consensus_distance
from p2pfl.protocols.serverless.gossip import select_peer
from tests.helpers import digits_scenario


def _no_learning(protocol: dict, **kw) -> dict:
    sc = digits_scenario(protocol, **kw)
    sc["training"] = {**sc["training"], "lr": 0.0}
    return sc


def test_consensus_distance_is_mean_squared_distance_to_average():
    a = {"w": torch.tensor([0.0, 0.0])}
    b = {"w": torch.tensor([2.0, 0.0])}
    assert consensus_distance([a, b]) == pytest.approx(1.0)
    assert consensus_distance([a, a]) == 0.0


def test_select_peer_is_uniform_over_neighbours(rng):
    picks = [select_peer((3, 5, 9), rng) for _ in range(3000)]
    counts = np.bincount(picks, minlength=10)[[3, 5, 9]]
    assert set(picks) == {3, 5, 9}
    assert counts.min() > 900
    assert select_peer((), rng) is None


@pytest.mark.parametrize("kind,n", [("ring", 8), ("complete", 6)])
@pytest.mark.slow
def test_gossip_with_lr_zero_drives_consensus_down_geometrically(kind, n):
    sc = _no_learning({"name": "gossip", "rounds": 12, "init": "independent"}, n=n, kind=kind)
    result = p2pfl.run(sc, write=False)
    d = [e["value"] for e in result.logs["consensus_distance"]]
    assert len(d) == 13 and d[0] > 0
    # Overall geometric decay: at least a factor 0.8 per round on average, and far below the start.
    assert d[-1] < d[0] * 0.8 ** 12
    ratios = [d[i + 1] / d[i] for i in range(len(d) - 1)]
    assert max(ratios) < 1.0


def _final_and_initial(protocol: dict, n: int = 7):
    from p2pfl.api import resolve
    from p2pfl.learning.aggregate import state_to_vector
    from p2pfl.sim.kernel import Simulation

    sim = Simulation(resolve(_no_learning(protocol, n=n, kind="ring")))
    init = torch.stack([state_to_vector(sim.new_model(i).state_dict()) for i in range(n)])
    sim.run()
    final = torch.stack([state_to_vector(sim.protocol.models[i].state_dict()) for i in range(n)])
    return final, init


def test_push_pull_preserves_the_mean_model_when_exchanges_do_not_overlap():
    # Rare Poisson wake-ups: every exchange is over long before the next one starts.
    final, init = _final_and_initial({"name": "gossip", "rounds": 6, "init": "independent", "mode": "async",
                                      "wake_rate_hz": 0.01})
    assert torch.allclose(final.mean(0), init.mean(0), atol=1e-6)
    assert float(((final - final.mean(0)) ** 2).sum(1).mean()) < float(((init - init.mean(0)) ** 2).sum(1).mean())


def test_models_stay_in_the_convex_hull_when_exchanges_overlap():
    # Synchronous rounds: pushes are answered while a device waits for its own reply.
    final, init = _final_and_initial({"name": "gossip", "rounds": 6, "init": "independent"})
    assert bool((final.min(0).values >= init.min(0).values - 1e-6).all())
    assert bool((final.max(0).values <= init.max(0).values + 1e-6).all())
    assert float((final.max(0).values - final.min(0).values).mean()) < float((init.max(0).values - init.min(0).values).mean())


@pytest.mark.slow
def test_push_only_sends_half_the_messages_of_push_pull():
    pp = p2pfl.run(digits_scenario({"name": "gossip", "rounds": 3}, n=6), write=False)
    push = p2pfl.run(digits_scenario({"name": "gossip", "rounds": 3, "exchange": "push"}, n=6), write=False)
    assert pp.messages_total == 2 * 6 * 3
    assert push.messages_total == 6 * 3
    assert push.bytes_total * 2 == pp.bytes_total


@pytest.mark.slow
def test_async_mode_wakes_on_poisson_clocks_and_is_reproducible():
    sc = digits_scenario({"name": "gossip", "rounds": 4, "mode": "async", "wake_rate_hz": 0.5}, n=6)
    a = p2pfl.run(sc, write=False)
    b = p2pfl.run(sc, write=False)
    sync = p2pfl.run(digits_scenario({"name": "gossip", "rounds": 4}, n=6), write=False)
    assert a.summary == b.summary
    assert a.sim_time_s > sync.sim_time_s + 1.0  # idle waits of mean 2 s per wake
    assert a.messages_total == 2 * 6 * 4
