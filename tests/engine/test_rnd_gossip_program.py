"""rnd_gossip (``hops: 1``, static) on the tensor engine against the event kernel (issue 67, item 2), 16-24 devices.

Discovery is the kernel's: each device's novelty row (the stacked fit: within ``STACK_ATOL`` of the kernel's
one-by-one fit in the weights, measured 1.3e-5 absolute / 1.8e-8 relative in the scores at 16 devices), the
mutually compatible peers, the federations and their ARI, the discovery bytes of every device (predictors,
verdicts, the labels' replay), the FLOPs of every device and ``label_settled_t``. The gossip among the peers is
the gossip program's (one fleet stream, not the kernel's per-device streams): its byte totals are the kernel's,
each device's accuracy agrees in distribution (mean within 0.1), the simulated time within 5% (rounds as
barriers). The federations agree where the kernel's label propagation settles before its run ends (it stops
with the last device's last round; docs/engines.md).
"""

from __future__ import annotations

import contextlib
import math
from functools import cache
from typing import Any

import numpy as np
import pytest

from p2pfl import api
from p2pfl.errors import ConfigError
from p2pfl.protocols.serverless.rnd_gossip_tensor import label_replay, mutual_peers
from p2pfl.sim.kernel import Simulation
from p2pfl.tensor.simulation import TensorSimulation, check

BASE = "scenarios/bench/scale.yaml"  # MLP on 16 synthetic samples a device; RND's vector target and predictor
DISCOVERY = ("rnd_predictor", "rnd_verdict", "rnd_label")
#: the novelty scores: the stacked fit's difference from the one-by-one fit, in the scores (relative)
SCORE_RTOL = 1e-6


@pytest.fixture(autouse=True)
def no_full_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's collector settings change no result (``few_collections``, tested in tests/sim)."""
    monkeypatch.setattr("p2pfl.sim.kernel.few_collections", contextlib.nullcontext)


def scenario(n: int, *extra: str) -> Any:
    radius = 1.6 * math.sqrt(math.log(n) / (math.pi * n))
    return api.resolve(BASE, overrides=[
        f"topology.n={n}", f"topology.radius={radius}", "protocol.rounds=3", "protocol.eval_every=1",
        "executor=inline", "data.partition={kind: parameter_shift, n_clusters: 3, n_features: 10}",
        "protocol.name=rnd_gossip", *extra])


@cache
def both(n: int, *extra: str) -> tuple[Simulation, dict[str, Any], TensorSimulation, dict[str, Any]]:
    sc = scenario(n, *extra)
    kernel = Simulation(sc)
    ev = kernel.run()
    tensor = TensorSimulation(sc.model_copy(update={"engine": "tensor"}))
    return kernel, ev, tensor, tensor.run()


def discovery_bytes(kernel: Simulation) -> tuple[np.ndarray, np.ndarray]:
    n = kernel.run_info.n_devices
    sent, received = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for e in kernel.recorder.events:
        if e["kind"] == "send" and e["msg"] in DISCOVERY:
            sent[e["src"]] += e["bytes"]
            received[e["dst"]] += e["bytes"]
    return sent, received


CASES = [(16, ("protocol.alpha=0.05",)),
         pytest.param(24, ("protocol.criterion=gap", "protocol.gap=1.0", "protocol.predictor_init=per_device"),
                      marks=pytest.mark.slow)]


@pytest.mark.parametrize(("n", "extra"), CASES)
def test_rnd_gossip_is_the_kernels_discovery_and_gossip(n: int, extra: tuple[str, ...]) -> None:
    kernel, ev, tensor, te = both(n, *extra)
    kp, tp = kernel.protocol, tensor.program
    # the novelty rows: the same pairs scored, the scores within the stacked fit's tolerance
    rows = tp.novelty_matrix()
    assert np.array_equal(np.isnan(kp.rows), np.isnan(rows))
    np.testing.assert_allclose(rows, kp.rows, rtol=SCORE_RTOL, atol=0)
    # the peers each device trains with, the federations
    for i in range(n):
        assert tuple(kp.peers[i]) == tuple(tp.peer_indices[tp.peer_indptr[i]:tp.peer_indptr[i + 1]].tolist()), i
    for key in ("clusters", "ari", "n_federations", "misclassification_rate", "clusters_centralized_rule",
                "compatible_links", "scored_pairs", "exchanges_without_peer", "exchanges_failed", "bytes_by_kind",
                "messages_total", "bytes_total", "compute_flops_per_node", "clustering_flops"):
        assert te[key] == ev[key], key
    assert 1 < te["n_federations"] < n  # the federations are not trivial
    assert te["clusters"] == tp.components()  # the labels settled: the components of the mutual links
    assert te["label_settled_t"] == pytest.approx(ev["label_settled_t"], rel=1e-12)
    # each device's discovery bytes (the gossip's per device follow its own peer draws)
    sent, received = discovery_bytes(kernel)
    assert tp.discovery is not None
    assert np.array_equal(tp.discovery.sent, sent) and np.array_equal(tp.discovery.received, received)
    assert np.array_equal(tp.discovery.flops, np.array(ev["compute_flops_per_node"]) - 3 * tensor.job_flops)
    assert set(te) - {"engine"} == set(ev)
    assert abs(te["accuracy_mean"] - ev["accuracy_mean"]) <= 0.1
    assert ev["sim_time_s"] * (1 - 1e-12) <= te["sim_time_s"] <= 1.05 * ev["sim_time_s"]


def test_mutual_peers_keep_the_links_both_ends_accept() -> None:
    # a path 0-1-2 and the link 1-3: 1 accepts everyone, 0 and 3 accept 1, 2 does not
    indptr, indices = np.array([0, 1, 4, 5, 6]), np.array([1, 0, 2, 3, 1, 1])
    verdict = np.array([True, True, True, True, False, True])
    ptr, peers = mutual_peers(indptr, indices, verdict)
    assert ptr.tolist() == [0, 1, 3, 3, 4] and peers.tolist() == [1, 0, 3, 1]


def test_the_label_replay_settles_to_the_components_minimum() -> None:
    # a path 0-1-2-3 whose devices finish discovery in reverse order: the labels are 0 everywhere
    indptr, indices = np.array([0, 1, 3, 5, 6]), np.array([1, 0, 2, 1, 3, 2])
    labels, sent, received, settled = label_replay(indptr, indices, np.array([3.0, 2.0, 1.0, 0.0]),
                                                   np.full(6, 0.01), 0.1)
    assert labels.tolist() == [0, 0, 0, 0] and sent.sum() == received.sum() and settled > 3.0


@pytest.mark.parametrize(("extra", "field"), [
    ("protocol.hops=2", "protocol.hops"),
    ("dynamics={churn: {offline: 0.0, cycle_s: 0.05}}", "dynamics"),
    ("protocol.mode=async", "protocol.mode"),
])
def test_what_the_rnd_gossip_program_cannot_run_is_named(extra: str, field: str) -> None:
    sc = scenario(12, extra, "protocol.reply_timeout_s=0.05", "engine=tensor")
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        check(sc)
