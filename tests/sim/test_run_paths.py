"""Kernel paths every run takes: data and models through the torch-device path; round timeouts."""

from __future__ import annotations

import itertools

import pytest
import torch

import p2pfl
from p2pfl.api import resolve
from p2pfl.data import build_federation
from p2pfl.sim.kernel import Simulation
from tests.helpers import digits_scenario


def test_a_federation_moves_every_shard_tensor_to_a_device() -> None:
    sc = resolve(digits_scenario({"name": "local", "rounds": 1}, n=3))
    fed = build_federation(sc.data, 3, seed=0)
    moved = fed.to(torch.device("meta"))  # a device without storage: proves every tensor goes through .to()
    for s in moved.shards:
        assert {t.device.type for t in (s.train_x, s.train_y, s.test_x, s.test_y)} == {"meta"}
    assert moved.true_clusters == fed.true_clusters and moved.input_shape == fed.input_shape
    assert all(s.train_x.device.type == "cpu" for s in fed.shards)  # the original is untouched


def test_the_simulation_puts_data_and_models_on_its_torch_device() -> None:
    sim = Simulation(resolve(digits_scenario({"name": "local", "rounds": 1}, n=3)))
    assert all(s.train_x.device == sim.torch_device for s in sim.federation.shards)
    model = sim.run_info.build_model(0)
    assert {p.device for p in model.parameters()} == {sim.torch_device}


def _slow_fleet(protocol: dict, timeout: float | None) -> dict:
    """Six devices, two of them 10^5 times slower: their updates come long after the others'."""
    proto = dict(protocol, rounds=2)
    if timeout is not None:
        proto["round_timeout_s"] = timeout
    return digits_scenario(proto, n=6, servers=True,
                           devices={"flops_per_s": {"dist": "choice", "values": [1.0e9, 1.0e4], "p": [0.67, 0.33]}})


@pytest.mark.parametrize("protocol", [{"name": "fedavg"}, {"name": "oracle"}, {"name": "ifca", "n_clusters": 2},
                                      {"name": "fedprox"}, {"name": "ditto"}])
@pytest.mark.slow
def test_every_server_protocol_honours_its_round_timeout(protocol: dict) -> None:
    patient = p2pfl.run(_slow_fleet(protocol, None), write=False)
    hurried = p2pfl.run(_slow_fleet(protocol, 1.0), write=False)
    slow = [i for i, f in enumerate(patient.partition["samples_per_device"]) if f] and None
    del slow
    assert hurried.sim_time_s < patient.sim_time_s / 10
    assert hurried.accuracy_mean is not None


@pytest.mark.slow
def test_oracle_honours_its_client_fraction() -> None:
    full = p2pfl.run(digits_scenario({"name": "oracle", "rounds": 3}, n=6, servers=True), write=False)
    half = p2pfl.run(digits_scenario({"name": "oracle", "rounds": 3, "client_fraction": 0.5}, n=6, servers=True),
                     write=False)
    per_update = full.bytes_by_kind["update"] // (3 * 6)
    assert full.bytes_by_kind["update"] == 3 * 6 * per_update
    assert half.bytes_by_kind["update"] == 3 * 3 * per_update


@pytest.mark.parametrize(("topology", "server", "spacing"), [
    ({}, {}, 0.0),  # parallel ingress (the default): the 4 uploads of a round start together
    ({"ingress": "serialized"}, {}, 1.0),  # one at a time through the server's downlink
    ({"ingress": "serialized"}, {"ingress_bps": 1.6e6}, 0.5),  # two at a time: pairs
])
@pytest.mark.slow
def test_server_uploads_go_through_its_ingress(topology: dict, server: dict, spacing: float) -> None:
    sc = digits_scenario({"name": "fedavg", "rounds": 1}, n=4, servers=True)
    sc["topology"].update(topology)
    # egress for 4 at once: the broadcast reaches every device together, so every upload is ready together
    sc["topology"]["servers"][0].update(server, link={"latency_s": 0.0, "bandwidth_bps": 8.0e5}, egress_bps=3.2e6)
    sim = Simulation(resolve(sc))
    sim.run()
    ups = sorted(e["t_start"] for e in sim.recorder.events if e.get("kind") == "send" and e["dst"] == 4)
    nbytes = {e["bytes"] for e in sim.recorder.events if e.get("kind") == "send" and e["dst"] == 4}
    tx = 8 * nbytes.pop() / 8.0e5  # one upload's seconds at the link's 0.8 Mbit/s
    assert not nbytes and len(ups) == 4
    steps = [round((b - a) / tx, 9) for a, b in itertools.pairwise(ups)]
    assert steps == {0.0: [0.0, 0.0, 0.0], 1.0: [1.0, 1.0, 1.0], 0.5: [0.0, 1.0, 0.0]}[spacing]


@pytest.mark.slow
def test_how_often_python_collects_garbage_changes_no_result(tmp_path, monkeypatch) -> None:
    """The kernel freezes the built world out of the cyclic collector while it runs: the same bytes as
    collecting far more often, and the caller's collector settings are back afterwards."""
    import gc

    from p2pfl.sim import kernel

    sc = digits_scenario({"name": "gossip", "rounds": 2, "exchange": "push_pull"}, n=6, executor="batched")
    before = gc.get_threshold()
    usual = p2pfl.run(sc, out=tmp_path / "usual")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    monkeypatch.setattr(kernel, "GC_GEN0", 100)  # a young collection every 100 allocations, a full one every 10^4
    p2pfl.run(sc, out=tmp_path / "often")
    assert (tmp_path / "often" / "summary.json").read_bytes() == (tmp_path / "usual" / "summary.json").read_bytes()
    assert (tmp_path / "often" / "events.jsonl").read_bytes() == (tmp_path / "usual" / "events.jsonl").read_bytes()
    assert usual.summary["accuracy_mean"] is not None
