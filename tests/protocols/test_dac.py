"""DAC: cosine top-k (Conditional App. K-C) and original loss-based DAC -- selection maths and exact bytes."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import p2pfl
from p2pfl.learning.flat import FlatState, Layout
from p2pfl.learning.state import load_state_
from p2pfl.learning.train import average_loss
from p2pfl.protocols.serverless import dac as dac_module
from p2pfl.protocols.serverless.dac import (
    COSINE_ATOL,
    DAC,
    DACCosine,
    DACOriginal,
    DACParams,
    cosine_similarities,
    cosine_top_k,
    dac_prior,
    selection_components,
    tau_at,
    two_hop_update,
)
from p2pfl.registry import get_protocol
from tests.helpers import digits_scenario
from tests.protocols.test_rnd import H, M

SCALAR = 8


def test_cosine_top_k_keeps_the_most_aligned_models_ties_to_lower_id():
    own = {"w": torch.tensor([1.0, 0.0])}
    received = {3: {"w": torch.tensor([0.0, 1.0])}, 5: {"w": torch.tensor([2.0, 0.1])},
                7: {"w": torch.tensor([-1.0, 0.0])}, 9: {"w": torch.tensor([4.0, 0.2])}}
    assert cosine_top_k(own, received, 2) == [5, 9]
    assert cosine_top_k(own, received, 1) == [5]  # 5 and 9 tie (same direction): lower id
    assert cosine_top_k(own, received, 10) == [3, 5, 7, 9]


def test_prior_is_a_softmax_over_candidates_and_never_zero():
    sims = np.array([0.0, 1.0, 2.0, 0.0])
    p = dac_prior(sims, (1, 2), 1.0)
    assert p == pytest.approx([1 / (1 + np.e), np.e / (1 + np.e)])
    assert dac_prior(np.array([0.0, 1000.0, 0.0]), (0, 1, 2), 30.0).min() > 0
    assert tau_at(30.0, "constant", 2, 10) == 30.0 and tau_at(30.0, "linear", 2, 10) == 6.0


def test_two_hop_update_copies_the_most_similar_sampled_peers_view():
    sims = np.array([0.0, 2.0, 1.0, 0.0, 0.0])
    sampled_ever = np.array([False, True, True, False, False])
    replies = {1: np.array([0.0, 0.0, 0.0, 0.7, 0.0]), 2: np.array([0.0, 0.0, 0.0, 0.3, 0.9])}
    out = two_hop_update(sims, sampled_ever, 0, (1, 2, 3, 4), replies)
    assert out.tolist() == [0.0, 2.0, 1.0, 0.7, 0.9]  # 3 from peer 1 (more similar), 4 only known to 2


def test_selection_components():
    assert selection_components(5, {0: [1], 3: [4], 4: [3]}) == [[0, 1], [2], [3, 4]]


def test_cosine_bytes_are_one_model_per_neighbour_per_round():
    n, rounds = 6, 3
    r = p2pfl.run(digits_scenario({"name": "dac", "rounds": rounds, "top_k": 1}, n=n), write=False)
    assert r.bytes_total == rounds * n * 2 * (M + H)


def test_cosine_with_all_candidates_routes_models_over_the_ring():
    n, rounds = 6, 1  # ring of 6: 9 hops per device to reach all 5 others
    r = p2pfl.run(digits_scenario({"name": "dac", "rounds": rounds, "candidates": "all"}, n=n), write=False)
    assert r.bytes_total == rounds * n * 9 * (M + H)


@pytest.mark.parametrize("candidates,sampled", [("neighbors", 2), ("all", 3)])
@pytest.mark.slow
def test_original_bytes_are_requests_plus_model_count_and_similarity_vector(candidates, sampled):
    n, rounds = 6, 2
    sc = digits_scenario({"name": "dac", "variant": "original", "rounds": rounds, "n_sampled": 3,
                          "candidates": candidates}, n=n, kind="complete" if candidates == "all" else "ring")
    r = p2pfl.run(sc, write=False)
    per_round = n * sampled
    assert r.bytes_by_kind["dac_request"] == rounds * per_round * H
    assert r.bytes_by_kind["dac_reply"] == rounds * per_round * (M + SCALAR + 8 * n + H)
    assert r.clustering_flops > 0


@pytest.mark.parametrize("variant", ["cosine", "original"])
@pytest.mark.slow
def test_dac_is_deterministic(variant):
    sc = digits_scenario({"name": "dac", "variant": variant, "rounds": 2}, n=5, kind="complete")
    assert p2pfl.run(sc, write=False).summary == p2pfl.run(sc, write=False).summary


def test_variant_chooses_the_class_that_runs():
    assert get_protocol("dac") is DAC
    cosine, original = DACParams(name="dac"), DACParams(name="dac", variant="original")
    for cls in (DAC, DACCosine, DACOriginal):
        assert cls.implementation(cosine) is DACCosine
        assert cls.implementation(original) is DACOriginal
    assert DACCosine.name == DACOriginal.name == "dac"
    assert DACCosine.Params is DACOriginal.Params is DACParams


@pytest.mark.parametrize("variant,cls", [("cosine", DACCosine), ("original", DACOriginal)])
def test_the_simulation_runs_the_class_of_the_variant(variant, cls):
    from p2pfl.api import resolve
    from p2pfl.sim.kernel import Simulation

    sim = Simulation(resolve(digits_scenario({"name": "dac", "variant": variant, "rounds": 1}, n=4)))
    protocol = sim.protocol
    assert type(protocol) is cls and isinstance(protocol, (DACCosine, DACOriginal))
    sim.run()
    assert set(protocol.chosen) == {0, 1, 2, 3}


@pytest.mark.parametrize("flat", [False, True])
def test_cosine_similarities_equal_one_dot_product_per_pair_within_tolerance(flat):
    g = torch.Generator().manual_seed(3)
    own = {"w": torch.randn(50, 20, generator=g), "b": torch.randn(20, generator=g)}
    others = [{"w": torch.randn(50, 20, generator=g) + s * own["w"], "b": torch.randn(20, generator=g)}
              for s in (0.0, 0.5, 2.0, -1.0)]
    if flat:  # the layout of a flattened model: one vector per state
        layout = Layout(("w", "b"), ((50, 20), (20,)), (0, 1000, 1020), torch.float32)
        own, others = (FlatState(layout.pack(own), layout), [FlatState(layout.pack(o), layout) for o in others])
    a = torch.cat([own["w"].reshape(-1), own["b"]]).double()
    for c, o in zip(cosine_similarities(own, others), others):
        b = torch.cat([o["w"].reshape(-1), o["b"]]).double()
        assert abs(c - float(a @ b / (a.norm() * b.norm()))) <= COSINE_ATOL
    assert cosine_similarities(own, [own])[0] == pytest.approx(1.0, abs=COSINE_ATOL)


def _loop_losses(model, states, x, y):
    """The per-model loop the stacked scoring replaced: a fresh probe per state, ``average_loss`` on it."""
    out = []
    for s in states:
        probe = copy.deepcopy(model)
        load_state_(probe, s)
        out.append(average_loss(probe, x, y))
    return out


@pytest.mark.slow
def test_original_stacked_scoring_changes_nothing_against_the_per_model_loop(monkeypatch):
    sc = digits_scenario({"name": "dac", "variant": "original", "rounds": 3, "n_sampled": 2, "tau": 10.0}, n=6,
                         kind="complete")  # tau 10: the losses steer the sampling (reversing them changes the run)
    stacked = p2pfl.run(sc, write=False).summary
    monkeypatch.setattr(dac_module, "average_losses", _loop_losses)
    assert p2pfl.run(sc, write=False).summary == stacked
