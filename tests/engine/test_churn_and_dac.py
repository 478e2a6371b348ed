"""DAC cosine and churn on the tensor engine against the event kernel (issue 67), at 12-24 devices.

- DAC cosine (static): the kernel's algorithm, synchronous: every device's accuracy, the federations and their
  ARI, the bytes of every device, the FLOPs; simulated time no earlier than the kernel's (rounds as barriers).
- A ``dynamics:`` block without churn (the headline's static cells): DSGD and DAC as the kernel runs them under
  dynamics (a DSGD message carries its live degree; deadlines; ``models_missing``; the ``dynamics`` block).
- Churn (``offline: 0.3``): a device trains in exactly the rounds it is online at the round's start (the kernel's
  draws, replayed), every message is counted once (sent, received or dropped offline), and the fleet's accuracy is
  the kernel's within 0.1 (the semantics differ: docs/engines.md, "What the tensor engine runs"). FedAvg's rounds
  are its server's in both engines: under churn every device's accuracy, bytes and drops are the kernel's.
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
from p2pfl.maths.churn import ChurnReplay
from p2pfl.maths.messages import message_size
from p2pfl.sim.dynamics.draws import dynamics_seed
from p2pfl.tensor.simulation import TensorSimulation, check

BASE = "scenarios/bench/scale.yaml"  # MLP on 16 synthetic samples a device
NO_GOSSIP = ["protocol.mode", "protocol.exchange"]
CHURN = "dynamics={churn: {offline: 0.3, cycle_s: 0.05}}"
STATIC_DYNAMICS = "dynamics={churn: {offline: 0.0, cycle_s: 0.05}}"


@pytest.fixture(autouse=True)
def no_full_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's collector settings change no result (``few_collections``, tested in tests/sim)."""
    monkeypatch.setattr("p2pfl.sim.kernel.few_collections", contextlib.nullcontext)


def sets(protocol: str, n: int, rounds: int, *extra: str) -> tuple[list[str], list[str]]:
    radius = 1.6 * math.sqrt(math.log(n) / (math.pi * n))
    out = [f"topology.n={n}", f"topology.radius={radius}", f"protocol.rounds={rounds}", "protocol.eval_every=1",
           "executor=inline", "data.partition={kind: parameter_shift, n_clusters: 3, n_features: 10}"]
    if protocol == "gossip":
        return [*out, "protocol.reply_timeout_s=auto", *extra], []
    if protocol == "dac":
        out += ["protocol.name=dac", "protocol.top_k=1", "protocol.round_timeout_s=0.05"]
    elif protocol == "fedavg":
        out += ["protocol.name=fedavg", "protocol.round_timeout_s=0.2", "protocol.client_fraction=0.5",
                "topology.servers=[{attach: all, egress_bps: 1.0e9}]"]
    else:
        out += [f"protocol.name={protocol}", "protocol.round_timeout_s=0.05"]
    return [*out, *extra], NO_GOSSIP


@cache
def summary(protocol: str, engine: str, n: int, rounds: int, *extra: str) -> dict[str, Any]:
    over, unset = sets(protocol, n, rounds, *extra)
    return api.run(BASE, overrides=[*over, f"engine={engine}"], unset=unset, write=False).summary


def test_dac_cosine_is_the_kernels_dac() -> None:
    ev, te = summary("dac", "events", 24, 6), summary("dac", "tensor", 24, 6)
    for key in ("accuracy_per_node", "clusters", "ari", "n_federations", "misclassification_rate", "bytes_per_node",
                "bytes_received_per_node", "messages_total", "bytes_by_kind", "compute_flops_per_node",
                "clustering_flops"):
        assert te[key] == ev[key], key
    assert te["ari"] > 0.2 and te["n_federations"] > 1  # the federations are not trivial
    assert set(te) - {"engine"} == set(ev)
    assert ev["sim_time_s"] * (1 - 1e-12) <= te["sim_time_s"] <= 1.05 * ev["sim_time_s"]


@pytest.mark.parametrize("protocol", ["dsgd", "dac"])
def test_a_dynamics_block_without_churn_runs_as_the_kernels(protocol: str) -> None:
    ev, te = summary(protocol, "events", 16, 3, STATIC_DYNAMICS), summary(protocol, "tensor", 16, 3, STATIC_DYNAMICS)
    for key in ("accuracy_per_node", "bytes_per_node", "bytes_received_per_node", "messages_total", "bytes_by_kind",
                "compute_flops_per_node", "models_missing", "messages_dropped", "dynamics"):
        assert te[key] == ev[key], key
    assert set(te) - {"engine"} == set(ev) and te["models_missing"] == 0
    if protocol == "dsgd":  # the live degree travels with every model
        sc = api.resolve(BASE, overrides=[*sets("dsgd", 16, 3)[0], "engine=tensor"], unset=NO_GOSSIP)
        size = message_size("dsgd", "dsgd_model", TensorSimulation(sc).program.fleet.state_bytes, dynamic=True)
        assert te["bytes_by_kind"]["dsgd_model"] == te["messages_total"] * size
    else:
        assert [e["value"] for e in te["logs"]["ari"]] == [e["value"] for e in ev["logs"]["ari"]]


@pytest.mark.parametrize("protocol", ["gossip", "dsgd", "dac"])
def test_churn_applies_at_round_barriers_from_the_kernels_draws(protocol: str) -> None:
    n, rounds = 16, 4
    over, unset = sets(protocol, n, rounds, CHURN)
    sc = api.resolve(BASE, overrides=[*over, "engine=tensor"], unset=unset)
    sim = TensorSimulation(sc)
    te = sim.run()
    assert sc.dynamics is not None
    replay = ChurnReplay(sc.dynamics.churn, n, dynamics_seed(sc.seed, sc.dynamics.seed))
    ends = [p["t"] for p in te["accuracy_curve"]]
    jobs = sum(replay.online_at(t).astype(np.int64) for t in [0.0, *ends[:-1]])  # online at each round's start
    assert te["compute_flops_per_node"] == [int(j) * sim.job_flops for j in jobs]
    assert 0 < jobs.sum() < n * rounds  # some rounds were skipped, some trained
    replay.online_at(te["sim_time_s"])
    assert te["dynamics"]["availability_per_node"] == replay.availability().tolist()
    # every message sent is received or dropped at an offline receiver, its bytes counted once each way
    assert sum(te["bytes_per_node"]) == sum(te["bytes_received_per_node"]) + te["bytes_dropped_by_reason"]["offline"]
    assert te["messages_dropped"] == te["messages_dropped_by_reason"]["offline"] > 0
    ev = summary(protocol, "events", n, rounds, CHURN)
    assert set(te) - {"engine"} == set(ev)
    assert abs(te["accuracy_mean"] - ev["accuracy_mean"]) <= 0.1
    missing = "exchanges_failed" if protocol == "gossip" else "models_missing"
    assert te[missing] > 0 and ev[missing] > 0


def test_fedavg_under_churn_is_the_kernels_fedavg() -> None:
    """FedAvg's rounds are the server's in both engines: the same live devices drawn from, the same models lost
    to offline devices, the same updates in time; every device's accuracy, bytes and drops are the kernel's."""
    churn = "dynamics={churn: {offline: 0.5, cycle_s: 0.05}}"
    ev, te = summary("fedavg", "events", 16, 4, churn), summary("fedavg", "tensor", 16, 4, churn)
    for key in ("accuracy_per_node", "bytes_per_node", "bytes_received_per_node", "bytes_per_server",
                "messages_total", "messages_dropped_by_reason", "bytes_dropped_by_reason", "compute_flops_per_node",
                "updates_missing", "dynamics"):
        assert te[key] == ev[key], key
    assert te["messages_dropped"] > 0 and te["updates_missing"] > 0
    assert te["sim_time_s"] == pytest.approx(ev["sim_time_s"], rel=1e-12)


@pytest.mark.parametrize(("extra", "field"), [
    ("dynamics={link_failures: {mean_up_s: 4, mean_down_s: 1}}", "dynamics.link_failures"),
    ("dynamics={events: [{at: 1.0, event: 'off', devices: [1]}]}", "dynamics.events"),
    ("dynamics={stragglers: [{fraction: 0.5, multiplier: 0.5}]}", "dynamics.stragglers"),
    ("dynamics={churn: {offline: 0.2, cycle_s: 1.0}, interrupted_training: lost}", "dynamics.interrupted_training"),
    ("protocol.variant=original", "protocol.variant"),
    ("protocol.candidates=all", "protocol.candidates"),
    ("protocol.round_timeout_s=null", "protocol.round_timeout_s"),
])
def test_what_dac_and_churn_cannot_run_is_named(extra: str, field: str) -> None:
    over, unset = sets("dac", 12, 2, CHURN if extra.startswith("protocol") else "")
    sc = api.resolve(BASE, overrides=[*[o for o in over if o], extra, "engine=tensor"], unset=unset)
    with pytest.raises(ConfigError, match=f"^{field}: .*set engine: events$"):
        check(sc)


def test_a_program_without_churn_is_refused_under_churn() -> None:
    over = [f"topology.n={12}", "topology.radius=0.6", "protocol.name=ifca", "protocol.n_clusters=2",
            "topology.servers=[{attach: all}]", CHURN, "engine=tensor"]
    sc = api.resolve(BASE, overrides=over, unset=NO_GOSSIP)
    with pytest.raises(ConfigError, match=r"^dynamics\.churn: IFCARounds runs on a static fleet"):
        check(sc)
