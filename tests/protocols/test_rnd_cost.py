"""RND discovery's modelled cost: each device embeds its data with the target once per run, and the
clustering FLOPs equal ``n (F_t + events 3 E F_p + k F_p)`` summed over devices (docs/cost-model.md, "Discovery")."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest
from torch import nn

import p2pfl
from p2pfl.clustering.rnd import make_predictor, make_target
from p2pfl.sim.cost import forward_flops_per_sample
from tests.helpers import digits_scenario

SHAPE = (1, 8, 8)
F_P = forward_flops_per_sample(make_predictor(SHAPE, seed=0), SHAPE)
F_T = forward_flops_per_sample(make_target(SHAPE, seed=0), SHAPE)
EPOCHS = 2
novelty_module = importlib.import_module("p2pfl.clustering.novelty")  # the package re-exports a function of that name


def _run_counting(monkeypatch: pytest.MonkeyPatch, sc: dict[str, Any]) -> tuple[Any, list[int], Any]:
    """Run ``sc``; return the result, the sample count of every target forward, and the RND probe."""
    forwards: list[int] = []
    probes: list[Any] = []

    def counted_target(shape: Any, *, seed: int) -> nn.Module:
        t = make_target(shape, seed=seed)
        t.register_forward_hook(lambda m, args, out: forwards.append(int(args[0].shape[0])))
        return t

    class Probe(novelty_module.RNDProbe):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            probes.append(self)

    monkeypatch.setattr(novelty_module, "make_target", counted_target)
    for mod in ("p2pfl.protocols.server.rnd", "p2pfl.protocols.serverless.rnd_gossip"):
        monkeypatch.setattr(f"{mod}.RNDProbe", Probe)
    r = p2pfl.run(sc, write=False)
    (probe,) = probes
    return r, forwards, probe


def _expected_flops(probe: Any, scored: np.ndarray, events: int) -> int:
    """sum over devices i of n_i (F_t + events 3 E F_p + k_i F_p), k_i = predictors device i scored."""
    return sum(int(fx.shape[0]) * (F_T + events * 3 * EPOCHS * F_P + int(scored[i]) * F_P)
               for i, fx in sorted(probe._fx.items()))


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.slow
def test_rnd_gossip_embeds_each_device_once_and_charges_the_formula(monkeypatch, dynamic):
    n = 6  # ring, 2 hops: each device scores its own predictor and those of the 4 devices within reach
    sc = digits_scenario({"name": "rnd_gossip", "rounds": 1, "hops": 2, "rnd_epochs": EPOCHS, "rnd_batch_size": 16,
                          "reply_timeout_s": 5.0}, n=n)
    if dynamic:  # the event-driven discovery: each received predictor is scored as its own job
        sc["dynamics"] = {"churn": {"offline": 0.0, "cycle_s": 2.0}}
    r, forwards, probe = _run_counting(monkeypatch, sc)
    assert sorted(probe._fx) == list(range(n))
    assert sorted(forwards) == sorted(int(fx.shape[0]) for fx in probe._fx.values())  # one forward per device
    assert r.scored_pairs == n * 4
    assert r.clustering_flops == probe.flops == _expected_flops(probe, np.full(n, 5), events=1)


def test_server_rnd_embeds_once_across_clustering_events(monkeypatch):
    n = 4
    sc = digits_scenario({"name": "rnd", "rounds": 4, "exchange": "relay", "recluster_every": 2,
                          "rnd_epochs": EPOCHS, "rnd_batch_size": 16}, n=n, servers=True)
    r, forwards, probe = _run_counting(monkeypatch, sc)
    assert sorted(forwards) == sorted(int(fx.shape[0]) for fx in probe._fx.values()) and len(forwards) == n
    assert [e["round"] for e in r.clustering_events] == [1, 3]
    assert r.clustering_flops == _expected_flops(probe, np.full(n, 2 * n), events=2)  # n predictors per event


@pytest.mark.parametrize("exchange", ["relay", "direct"])
@pytest.mark.slow
def test_predictors_travel_shared_not_copied_per_message(monkeypatch, exchange):
    held: dict[int, set[int]] = {}  # owner -> ids of the weight tensors the devices scored it with

    class Probe(novelty_module.RNDProbe):
        def score(self, ctx: Any, predictors: dict[int, Any], n: int) -> Any:
            for j, state in predictors.items():
                held.setdefault(j, set()).add(id(state["0.weight"]))
            return (yield from super().score(ctx, predictors, n))

    monkeypatch.setattr("p2pfl.protocols.server.rnd.RNDProbe", Probe)
    n = 4
    r = p2pfl.run(digits_scenario({"name": "rnd", "rounds": 1, "exchange": exchange, "rnd_epochs": 1},
                                  n=n, kind="complete", servers=True), write=False)
    assert sorted(held) == list(range(n)) and all(len(ids) == 1 for ids in held.values())  # one copy per owner
    assert r.bytes_by_kind["rnd_predictor"] > 0  # and every forward still counted
