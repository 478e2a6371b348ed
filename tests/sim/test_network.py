"""Exact message timing from link parameters, uplink contention, loss and sizes."""

from __future__ import annotations

import gc
import weakref
from typing import ClassVar

import numpy as np
import pytest
import torch

from p2pfl.protocols.base import Process, Protocol
from p2pfl.sim.cost import HEADER_BYTES, arrival_time_s, message_bytes, payload_bytes, tx_time_s
from p2pfl.sim.network import Network
from p2pfl.topology import Link

MB = 1_000_000


def _net(env, links, up=None, down=None, seed=0, log=None):
    nodes = sorted({n for e in links for n in e})
    up = up or {n: float("inf") for n in nodes}
    down = down or {n: float("inf") for n in nodes}
    return Network(env, links, up, down, lambda n: np.random.default_rng(seed + n), (lambda *a, **kw: log.append((*a, kw))) if log is not None else (lambda *a, **kw: None))


def _payload(nbytes: int) -> dict:
    """A payload whose message is exactly ``nbytes`` on the wire."""
    return {"x": torch.zeros(nbytes - HEADER_BYTES, dtype=torch.uint8)}


def test_one_megabyte_at_one_megabyte_per_second_plus_latency_arrives_at_1_1(env):
    # Prepare: 1 MB at 8 Mbit/s (= 1 MB/s) with 0.1 s latency.
    net = _net(env, {(0, 1): Link(latency_s=0.1, bandwidth_bps=8 * MB, loss=0.0)})
    arrived = []

    def receiver():
        msg = yield net.inbox(1, "m").get()
        arrived.append((env.now, msg.size_bytes))

    env.process(receiver())
    net.send(0, 1, "m", _payload(MB))
    env.run()
    assert arrived == [(1.1, MB)]


def test_uplink_serializes_transfers_of_one_node(env):
    # Two messages from node 0 to two neighbours: the second waits for the first to leave the uplink.
    links = {(0, 1): Link(0.05, 8 * MB, 0.0), (0, 2): Link(0.2, 8 * MB, 0.0)}
    net = _net(env, links)
    times = {}

    def receiver(node):
        yield net.inbox(node, "m").get()
        times[node] = env.now

    env.process(receiver(1))
    env.process(receiver(2))
    net.send(0, 1, "m", _payload(MB))      # tx 1.0 s -> arrives 1.05
    net.send(0, 2, "m", _payload(MB // 2))  # starts at 1.0, tx 0.5 s -> arrives 1.0 + 0.5 + 0.2
    env.run()
    assert times[1] == pytest.approx(1.05, abs=1e-12)
    assert times[2] == pytest.approx(1.7, abs=1e-12)
    assert times[2] == pytest.approx(arrival_time_s(1.0, MB // 2, 8 * MB, 0.2), abs=1e-12)


def test_different_senders_do_not_contend(env):
    links = {(0, 2): Link(0.0, 8 * MB, 0.0), (1, 2): Link(0.0, 8 * MB, 0.0)}
    net = _net(env, links)
    times = []

    def receiver():
        for _ in range(2):
            yield net.inbox(2, "m").get()
            times.append(env.now)

    env.process(receiver())
    net.send(0, 2, "m", _payload(MB))
    net.send(1, 2, "m", _payload(MB))
    env.run()
    assert times == [1.0, 1.0]


def test_effective_bandwidth_is_the_slowest_of_link_uplink_downlink(env):
    links = {(0, 1): Link(0.0, 8 * MB, 0.0)}
    net = _net(env, links, up={0: 4 * MB, 1: 8 * MB}, down={0: 8 * MB, 1: 2 * MB})
    assert net.bandwidth_bps(0, 1) == 2 * MB
    assert net.bandwidth_bps(1, 0) == 8 * MB
    done = []

    def receiver():
        yield net.inbox(1, "m").get()
        done.append(env.now)

    env.process(receiver())
    net.send(0, 1, "m", _payload(MB))
    env.run()
    assert done == [4.0]


def test_send_event_fires_when_uplink_is_free_not_on_arrival(env):
    net = _net(env, {(0, 1): Link(5.0, 8 * MB, 0.0)})
    freed = []

    def sender():
        yield net.send(0, 1, "m", _payload(MB))
        freed.append(env.now)

    env.process(sender())
    env.run()
    assert freed == [1.0]


@pytest.mark.slow
def test_loss_drops_with_seeded_probability_and_is_recorded(env):
    log: list = []
    net = _net(env, {(0, 1): Link(0.0, 8 * MB, 0.3)}, log=log)
    for _ in range(2000):
        net.send(0, 1, "m", {"v": 1.0})
    env.run()
    sends = [a for a in log if a[0] == "send"]
    drops = [a for a in log if a[0] == "drop"]
    lost = len(drops)
    delivered = len(net.inbox(1, "m").items)
    assert len(sends) == 2000  # a lost message was transmitted (bytes spent), then dropped
    assert all(a[4] == {"reason": "loss", "transmitted": True} for a in drops)
    assert lost + delivered == 2000 and not net.in_flight
    assert 0.25 < lost / 2000 < 0.35
    # Same seed, same drops.
    env2 = type(env)()
    log2: list = []
    net2 = _net(env2, {(0, 1): Link(0.0, 8 * MB, 0.3)}, log=log2)
    for _ in range(2000):
        net2.send(0, 1, "m", {"v": 1.0})
    env2.run()
    assert [a[1].seq for a in log2 if a[0] == "drop"] == [a[1].seq for a in drops]


def test_sending_to_a_non_neighbour_is_an_error(env):
    net = _net(env, {(0, 1): Link(0.0, 1.0, 0.0), (1, 2): Link(0.0, 1.0, 0.0)})
    with pytest.raises(ValueError, match="node 0 has no link to node 2"):
        net.send(0, 2, "m", None)


def test_message_size_is_exact_tensor_bytes_plus_header():
    state = {"w": torch.zeros(10, 3), "b": torch.zeros(3, dtype=torch.float64), "n": 7}
    assert payload_bytes(state) == 10 * 3 * 4 + 3 * 8 + 8
    assert message_bytes(state) == HEADER_BYTES + 120 + 24 + 8
    assert tx_time_s(1000, 8000) == 1.0


def test_routed_message_is_stored_and_forwarded_hop_by_hop(env):
    # Line 0-1-2: 1 MB at 1 MB/s per hop, latencies 0.1 and 0.2 -> arrives 1 + 0.1 + 1 + 0.2 = 2.3.
    log: list = []
    net = _net(env, {(0, 1): Link(0.1, 8 * MB, 0.0), (1, 2): Link(0.2, 8 * MB, 0.0)}, log=log)
    arrived = []

    def receiver():
        msg = yield net.inbox(2, "m").get()
        arrived.append((env.now, msg.src, msg.dst))

    env.process(receiver())
    assert net.route(0, 2) == [0, 1, 2]
    net.send(0, 2, "m", _payload(MB), routed=True)
    env.run()
    assert arrived == [(pytest.approx(2.3, abs=1e-12), 0, 2)]
    hops = [(a[2], a[3]) for a in log if a[0] == "send"]
    assert hops == [(0, 1), (1, 2)]  # bytes are charged to each relaying node


def test_route_is_a_deterministic_shortest_path(env):
    links = {(0, 1): Link(0, 1, 0), (1, 3): Link(0, 1, 0), (0, 2): Link(0, 1, 0), (2, 3): Link(0, 1, 0), (3, 4): Link(0, 1, 0)}
    net = _net(env, links)
    assert net.route(0, 4) == [0, 1, 3, 4]
    assert net.route(4, 0) == [4, 3, 1, 0]
    with pytest.raises(ValueError, match="no route"):
        _net(env, {(0, 1): Link(0, 1, 0), (2, 3): Link(0, 1, 0)}).route(0, 3)


class _Fanout(Protocol):
    """Device 0 sends one payload to devices 1 and 2, shared or snapshotted; they keep what arrived."""

    name = "fanout"
    share = False
    got: ClassVar[dict[int, dict]] = {}
    sent: ClassVar[dict] = {}

    def device(self, ctx) -> Process:
        if ctx.id == 0:
            payload = {"w": torch.ones(3)}
            type(self).sent = payload
            for j in (1, 2):
                yield ctx.send(j, "m", payload, share=self.share)
        elif ctx.id in (1, 2):
            msg = yield ctx.recv("m")
            type(self).got[ctx.id] = msg.payload


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.slow
def test_a_shared_payload_reaches_every_peer_as_one_object_and_costs_the_same_bytes(share):
    from p2pfl.config import load_dict
    from p2pfl.sim.kernel import Simulation
    from tests.helpers import digits_scenario

    sc = digits_scenario({"name": "gossip", "rounds": 1}, n=3, kind="complete")
    _Fanout.share = share
    summary = Simulation(load_dict(sc), protocol=_Fanout).run()
    got = _Fanout.got
    assert (got[1]["w"] is got[2]["w"] is _Fanout.sent["w"]) == share
    assert torch.equal(got[1]["w"], torch.ones(3)) and torch.equal(got[2]["w"], torch.ones(3))
    assert summary["bytes_total"] == 2 * (HEADER_BYTES + payload_bytes({"w": torch.ones(3)}))


def _arrivals(net, env, nodes, kind="m"):
    times: dict[int, list[float]] = {}

    def receiver(node):
        while True:
            msg = yield net.inbox(node, kind).get()
            times.setdefault(node, []).append((env.now, msg.src))

    for node in nodes:
        env.process(receiver(node))
    return times


def test_serialized_ingress_receives_one_transfer_at_a_time(env):
    # The same two uploads as test_different_senders_do_not_contend, through receiver 2's one downlink.
    links = {(0, 2): Link(0.0, 8 * MB, 0.0), (1, 2): Link(0.0, 8 * MB, 0.0)}
    net = Network(env, links, dict.fromkeys((0, 1, 2), float("inf")), dict.fromkeys((0, 1, 2), float("inf")),
                  lambda n: np.random.default_rng(n), lambda *a, **kw: None, ingress_slots={2: 1})
    times = _arrivals(net, env, [2])
    net.send(0, 2, "m", _payload(MB))
    net.send(1, 2, "m", _payload(MB // 2))
    env.run()
    assert times[2] == [(1.0, 0), (1.5, 1)]  # 1 MB in 1 s, then 0.5 MB in 0.5 s


def test_a_sender_waiting_for_a_downlink_holds_its_uplink(env):
    # 1 -> 2 takes 2's downlink first; 0 -> 2 waits for it holding 0's uplink, so 0 -> 3 waits too.
    links = {(1, 2): Link(0.0, 8 * MB, 0.0), (0, 2): Link(0.1, 8 * MB, 0.0), (0, 3): Link(0.2, 8 * MB, 0.0)}
    nodes = (0, 1, 2, 3)
    log: list = []
    net = Network(env, links, dict.fromkeys(nodes, float("inf")), dict.fromkeys(nodes, float("inf")),
                  lambda n: np.random.default_rng(n), lambda *a, **kw: log.append((a, kw)),
                  ingress_slots=dict.fromkeys(nodes, 1))
    times = _arrivals(net, env, [2, 3])
    net.send(1, 2, "m", _payload(MB))
    net.send(0, 2, "m", _payload(MB))
    net.send(0, 3, "m", _payload(MB))
    env.run()
    assert times[2] == [(1.0, 1), (2.1, 0)]  # starts at 1.0 when 2's downlink is free, +1 s, +0.1 s latency
    assert times[3] == [(3.2, 0)]  # 0's uplink is free at 2.0, +1 s, +0.2 s
    starts = sorted((kw["t_start"], a[2], a[3]) for a, kw in log if a[0] == "send")
    assert starts == [(0.0, 1, 2), (1.0, 0, 2), (2.0, 0, 3)]


@pytest.mark.parametrize(("slots", "expected"), [(1, [1.0, 2.0, 3.0, 4.0]), (3, [1.0, 1.0, 1.0, 2.0])])
def test_ingress_and_egress_slots_carry_that_many_transfers_at_once(env, slots, expected):
    # Four devices upload 1 MB to node 9 at once; then node 9 sends 1 MB back to each.
    links = {(d, 9): Link(0.0, 8 * MB, 0.0) for d in range(4)}
    nodes = (0, 1, 2, 3, 9)
    net = Network(env, links, dict.fromkeys(nodes, float("inf")), dict.fromkeys(nodes, float("inf")),
                  lambda n: np.random.default_rng(n), lambda *a, **kw: None,
                  egress_slots={9: slots}, ingress_slots={9: slots})
    up = _arrivals(net, env, [9])
    down = _arrivals(net, env, range(4), kind="back")
    for d in range(4):
        net.send(d, 9, "m", _payload(MB))

    def broadcast():
        yield env.timeout(10.0)
        for d in range(4):
            net.send(9, d, "back", _payload(MB))

    env.process(broadcast())
    env.run()
    assert [t for t, _ in up[9]] == expected
    assert sorted(t for d in range(4) for t, _ in down[d]) == [10.0 + t for t in expected]


def _traffic(computed: bool) -> list[tuple]:
    """Random sends (sizes, routes, lossy links, a 3-slot uplink) on a static 6-node ring with a chord: every
    hop's (time, what, message, u, v, fields) as the network reports it."""
    env = __import__("simpy").Environment()
    links = {(i, (i + 1) % 6): Link(0.01 * (i + 1), 8 * MB * (1 + i % 3), 0.1 * (i % 2)) for i in range(6)}
    links[(0, 3)] = Link(0.005, 80 * MB, 0.0)
    log: list = []
    net = Network(env, links, {n: float("inf") for n in range(6)}, {n: 4 * MB * 8 for n in range(6)},
                  lambda n: np.random.default_rng(n), lambda *a, **kw: log.append((env.now, a[0], a[1].seq, *a[2:], kw)),
                  egress_slots={0: 3}, computed=computed)
    rng = np.random.default_rng(7)

    def sender(node: int):
        for _ in range(40):
            yield env.timeout(float(rng.choice([0.0, 0.05, 0.013])))  # ties at 0 and on a grid
            dst = int(rng.integers(6))
            if dst == node:
                continue
            routed = (min(node, dst), max(node, dst)) not in links and (dst, node) not in links
            yield net.send(node, dst, "m", _payload(int(rng.integers(HEADER_BYTES + 1, MB))), routed=routed)

    for node in range(6):
        env.process(sender(node))
    env.run()
    assert not net.in_flight
    return log


def test_a_computed_uplink_queue_gives_the_resource_queue_s_times_and_losses_exactly():
    computed, resources = _traffic(True), _traffic(False)
    assert len(computed) == len(resources) > 300
    assert sorted(computed, key=lambda e: (e[0], e[2], e[1])) == sorted(resources, key=lambda e: (e[0], e[2], e[1]))


def test_a_computed_queue_is_refused_where_a_downlink_is_a_resource(env):
    with pytest.raises(ValueError, match="static fleet with parallel downlinks"):
        Network(env, {(0, 1): Link(0.0, 1.0, 0.0)}, {0: 1.0, 1: 1.0}, {0: 1.0, 1: 1.0}, lambda n: None,
                lambda *a, **kw: None, ingress_slots={1: 1}, computed=True)


class _ReplyFirst(Protocol):
    """Device 0 sends a tensor to device 1, which waits for it with a long timeout, drops it, then idles
    while the timer is still pending: is the tensor still held?"""

    name = "reply_first"
    alive: ClassVar[list[bool]] = []

    def device(self, ctx) -> Process:
        if ctx.id == 0:
            yield ctx.send(1, "m", {"w": torch.ones(1000)})
        elif ctx.id == 1:
            msg = yield ctx.recv("m", timeout=1000.0)
            ref = weakref.ref(msg.payload["w"])
            del msg
            yield ctx.sleep(10.0)  # the timer fires at 1000 s
            gc.collect()
            type(self).alive.append(ref() is not None)


@pytest.mark.slow
def test_a_message_that_beats_its_timeout_is_not_held_by_the_pending_timer():
    from p2pfl.config import load_dict
    from p2pfl.sim.kernel import Simulation
    from tests.helpers import digits_scenario

    sc = digits_scenario({"name": "gossip", "rounds": 1}, n=2, kind="complete")
    _ReplyFirst.alive = []
    Simulation(load_dict(sc), protocol=_ReplyFirst).run()
    assert _ReplyFirst.alive == [False]
