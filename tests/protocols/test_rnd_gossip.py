"""Serverless RND: predictors only within h hops, verdict and label messages, gossip among compatible peers."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import p2pfl
from p2pfl.protocols.serverless.rnd_gossip import compatible_row, components_from_labels, within_hops
from tests.helpers import digits_scenario
from tests.protocols.test_rnd import FAST, H, M, P

VERDICT = 8 + H
LABEL = 8 + H


def test_alpha_zero_leaves_every_device_alone_and_sends_only_predictors_and_verdicts():
    n = 6  # ring: 2 neighbours each
    r = p2pfl.run(digits_scenario({"name": "rnd_gossip", "rounds": 2, "alpha": 0.0, **FAST}, n=n), write=False)
    assert r.bytes_total == 2 * n * (P + H) + 2 * n * VERDICT
    assert r.clusters == [[i] for i in range(n)] and r.compatible_links == 0
    assert r.n_servers == 0 and r.bytes_per_server == {}


def test_two_hops_route_predictors_and_verdicts_over_two_links():
    n = 6  # ring: devices at distance 1, 1, 2, 2 -> 6 hops per device
    r = p2pfl.run(digits_scenario({"name": "rnd_gossip", "rounds": 1, "alpha": 0.0, "hops": 2, **FAST}, n=n),
                  write=False)
    assert r.bytes_by_kind == {"rnd_predictor": n * 6 * (P + H), "rnd_verdict": n * 6 * VERDICT}
    assert r.scored_pairs == n * 4


def test_wide_band_on_a_complete_graph_gives_one_federation_and_plain_push_pull_gossip():
    n, rounds = 4, 3
    r = p2pfl.run(digits_scenario({"name": "rnd_gossip", "rounds": rounds, "alpha": 0.99, **FAST}, n=n,
                                  kind="complete"), write=False)
    assert r.clusters == [[0, 1, 2, 3]] and r.compatible_links == 6
    kinds = r.bytes_by_kind
    assert kinds["rnd_predictor"] == n * (n - 1) * (P + H)
    assert kinds["rnd_verdict"] == n * (n - 1) * VERDICT
    assert kinds["gossip_push"] == kinds["gossip_reply"] == rounds * n * (M + H)
    # every device sends its own id, then forwards each improvement to the other peers
    assert kinds["rnd_label"] % LABEL == 0 and n * (n - 1) * LABEL <= kinds["rnd_label"] <= 2 * n * (n - 1) * LABEL


@pytest.mark.slow
def test_recovers_groups_connected_on_the_ring_with_no_server():
    sc = digits_scenario({"name": "rnd_gossip", "rounds": 2, "rnd_epochs": 15, "rnd_batch_size": 16}, n=6)
    sc["data"] = {"dataset": "digits", "samples_per_client": 120,
                  "partition": {"kind": "feature_skew", "n_clusters": 2, "mode": "pattern", "rms": 0.3}}
    r = p2pfl.run(sc, write=False)
    assert r.clusters == [[0, 1, 2], [3, 4, 5]] and r.ari == 1.0
    assert set(r.bytes_by_kind) == {"rnd_predictor", "rnd_verdict", "rnd_label", "gossip_push", "gossip_reply"}


@pytest.mark.slow
def test_rnd_gossip_is_deterministic():
    sc = digits_scenario({"name": "rnd_gossip", "rounds": 2, "alpha": 0.99, "hops": 2, **FAST}, n=6)
    assert p2pfl.run(sc, write=False).summary == p2pfl.run(sc, write=False).summary


def test_pure_helpers():
    g = nx.path_graph(5)
    assert within_hops(g, 0, 1) == (1,)
    assert within_hops(g, 2, 2) == (0, 1, 3, 4)
    row = np.array([1.0, 1.25, np.nan, 0.6, 1.35])
    assert compatible_row(row, 0, 0.3).tolist() == [True, True, False, False, False]
    assert components_from_labels({0: 0, 1: 0, 2: 2, 3: 0, 4: 2}) == [[0, 1, 3], [2, 4]]


def _busy_fleet(timeout: object, dynamic: bool, hops: int) -> dict:
    """16 devices on a random geometric graph (degrees 2-8): some finish discovery long before others,
    and everyone is compatible (alpha 0.99), so exchanges start while peers still discover."""
    sc = digits_scenario({"name": "rnd_gossip", "rounds": 3, "alpha": 0.99, "hops": hops, "reply_timeout_s": timeout,
                          "discovery_timeout_s": 30.0, **FAST}, n=16, kind="random_geometric")
    sc["topology"].update(radius=0.4, seed=3, link={"latency_s": 0.005, "bandwidth_bps": 5.0e6})
    if dynamic:  # the headline's static fleet: churn with nobody offline (the event-driven discovery)
        sc["dynamics"] = {"churn": {"offline": 0.0, "cycle_s": 2.0}}
    return sc


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("hops", [1, 2])
@pytest.mark.slow
def test_auto_reply_timeout_loses_no_exchange_in_a_static_fleet(dynamic, hops):
    r = p2pfl.run(_busy_fleet("auto", dynamic, hops), write=False)
    assert r.exchanges_failed == 0
    short = p2pfl.run(_busy_fleet(1e-3, dynamic, hops), write=False)  # below one transfer: every exchange fails
    assert short.exchanges_failed == 16 * 3 and short.exchanges_without_peer == 0


def test_a_device_with_no_compatible_peer_counts_rounds_without_peer_not_failed_exchanges():
    sc = _busy_fleet("auto", True, 1)
    sc["protocol"]["alpha"] = 1e-9  # nobody is compatible with anybody: every device its own federation
    r = p2pfl.run(sc, write=False)
    assert r.exchanges_without_peer == 16 * 3 and r.exchanges_failed == 0
