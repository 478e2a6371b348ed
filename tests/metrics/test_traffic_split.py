"""summary.json's traffic split (WAN vs device-device, a server's egress and ingress) and round latency."""

from __future__ import annotations

import statistics

import pytest

from p2pfl.api import resolve
from p2pfl.sim.kernel import Simulation
from tests.helpers import digits_scenario


def _run(protocol: dict, servers: bool) -> tuple[dict, list[dict]]:
    sim = Simulation(resolve(digits_scenario(protocol, n=4, servers=servers)))
    return sim.run(), sim.recorder.events


def test_a_server_protocol_sends_everything_over_the_wan_and_its_ingress_is_the_devices_uploads() -> None:
    s, events = _run({"name": "fedavg", "rounds": 3}, servers=True)
    assert s["bytes_wan"] == s["bytes_total"] > 0 and s["bytes_device_to_device"] == 0
    assert s["bytes_per_server"]["server"] == s["bytes_total"] - sum(s["bytes_per_node"])
    # no message was dropped: the server received every byte the devices sent
    assert s["messages_dropped"] == 0
    assert s["bytes_received_per_server"]["server"] == sum(s["bytes_per_node"])
    ends = [e["t"] for e in events if e["kind"] == "round" and e["node"] == 4]
    spans = [b - a for a, b in zip([0.0, *ends], ends)]
    lat = s["round_latency_s"]
    assert lat["rounds_of"] == "server" and lat["n"] == 3
    assert lat["p50"] == statistics.median(spans) and lat["max"] == max(spans)


def test_a_serverless_protocol_has_no_wan_and_times_every_devices_rounds() -> None:
    s, events = _run({"name": "gossip", "rounds": 3}, servers=False)
    assert s["bytes_wan"] == 0 and s["bytes_device_to_device"] == s["bytes_total"] > 0
    assert s["bytes_per_server"] == {} and s["bytes_received_per_server"] == {}
    lat = s["round_latency_s"]
    assert lat["rounds_of"] == "device" and lat["n"] == 3 * 4
    spans = []
    for node in range(4):
        ends = [e["t"] for e in events if e["kind"] == "round" and e["node"] == node]
        spans += [b - a for a, b in zip([0.0, *ends], ends)]
    assert lat["max"] == max(spans) and lat["p50"] == pytest.approx(statistics.median(spans), rel=1e-12)
