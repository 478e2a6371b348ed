"""The network: links with latency, bandwidth and loss; one serialized uplink per node.

A message of S bytes from u to v starts when u's uplink is free, occupies it
for 8S/B seconds and arrives L seconds later, where L is the link latency and
B = min(link bandwidth, u's uplink, v's downlink) (SimPy's ``latency.py`` Cable).
Lost messages still occupy the uplink and count as sent; the drop is recorded.

A node's uplink carries ``egress_slots`` transfers at once (default one). With a serialized ingress
(``ingress_slots`` names the node) the receiver's downlink is a resource too: a transfer starts once
the sender has an uplink slot and then the receiver a downlink slot, and holds both for its 8S/B
seconds (the sender waits with its uplink held, as a NIC with one queue would), so a server with one
ingress slot receives N uploads one after another. Slots are taken uplink first, then downlink, and a
downlink slot is only held while transmitting, so no two transfers wait on each other in a cycle.

Every message ends in exactly one way: delivered, dropped with a reason, or still in flight when
the run ends (``in_flight``). Reasons: ``loss`` (the link's loss draw), and under dynamics
(``p2pfl.sim.dynamics``) ``link_down`` (the link is down, out of radio range, or went down while
the message was on it), ``partition`` (the hop crosses a partition, or did while in flight) and
``offline`` (the receiver, or the relay, is offline when the message arrives). A hop over a link
that is down when its turn on the uplink comes is dropped without being transmitted (no bytes);
a sender that is offline holds its messages until it is back. A transmission under way when its
sender goes offline is finished (its bytes are spent).

In a static fleet whose downlinks are not serialized, a node's uplink is a FIFO queue whose every
transfer's length is known when it is queued, so its start is computed, not waited for: each hop is two
timed events (the uplink released, the message arrived) instead of two processes, a resource request
and release and their timeouts (about 10 events). The times are the same floats; the order of events
at one simulated time follows the rule every run keeps: the earlier scheduled first (SimPy's queue).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import simpy

from p2pfl.sim.cost import message_bytes, tx_time_s

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.dynamics import Fleet
    from p2pfl.topology import Link

__all__ = ["Message", "Network"]


def _void(_: Any) -> None:
    """Drop a value (an event's callback returns nothing)."""


@dataclass
class Message:
    """What travels: who, what kind, the payload and its exact size on the wire."""

    src: int
    dst: int
    kind: str
    payload: Any
    size_bytes: int
    round: int = 0
    sent_t: float = 0.0
    seq: int = field(default=0)


class Network:
    """Links between node ids, per-node uplink resources and per-(node, kind) inboxes.

    ``on_event(what, msg, u, v, **fields)`` is told of every hop transmitted (``send``), every
    delivery (``deliver``) and every drop (``drop``, with ``reason`` and ``transmitted``).
    """

    def __init__(
        self,
        env: simpy.Environment,
        links: dict[tuple[int, int], Link],
        uplink_bps: dict[int, float],
        downlink_bps: dict[int, float],
        loss_rng: Callable[[int], np.random.Generator],
        on_event: Callable[..., None],
        no_relay: frozenset[int] = frozenset(),
        fleet: Optional[Fleet] = None,
        egress_slots: Optional[dict[int, int]] = None,
        ingress_slots: Optional[dict[int, int]] = None,
        computed: Optional[bool] = None,
    ) -> None:
        """``computed``: each uplink a computed queue (default: in a static fleet with parallel downlinks, the
        only case where it can be) or SimPy resources (False; the same times, more events: for tests)."""
        self.env = env
        self._links = links
        self._up = uplink_bps
        self._down = downlink_bps
        self._loss_rng = loss_rng  # a node's stream, made when it first sends over a lossy link
        self._loss_rngs: dict[int, np.random.Generator] = {}
        self._on_event = on_event
        slots = egress_slots or {}
        #: serialized ingress: the nodes whose downlink is a resource (a node not listed receives in parallel)
        self._downlinks = {n: simpy.Resource(env, capacity=k) for n, k in (ingress_slots or {}).items()}
        #: static fleet, parallel downlinks: each uplink is its slots' free-at times (a heap), not a resource
        self._computed = fleet is None and not self._downlinks if computed is None else computed
        if self._computed and (fleet is not None or self._downlinks):
            raise ValueError("a computed uplink queue needs a static fleet with parallel downlinks")
        self._uplinks = {} if self._computed else {
            n: simpy.Resource(env, capacity=slots.get(n, 1)) for n in uplink_bps}
        self._free_at: dict[int, list[float]] = {n: [0.0] * slots.get(n, 1) for n in uplink_bps} \
            if self._computed else {}
        self._inboxes: dict[tuple[int, str], simpy.Store] = {}
        self._seq = 0
        self._adj: dict[int, list[int]] | None = None
        self._no_relay = frozenset(no_relay)  # endpoints only (servers): never a hop inside a route
        self.fleet = fleet
        #: Messages sent and not yet delivered or dropped, by sequence number.
        self.in_flight: dict[int, Message] = {}

    def _loss_stream(self, u: int) -> np.random.Generator:
        rng = self._loss_rngs.get(u)
        if rng is None:
            rng = self._loss_rngs[u] = self._loss_rng(u)
        return rng

    @property
    def messages_created(self) -> int:
        """Messages handed to ``send`` so far."""
        return self._seq

    def link(self, u: int, v: int) -> Link:
        """The link between ``u`` and ``v``; ValueError if they are not adjacent."""
        try:
            return self._links[(u, v) if (u, v) in self._links else (v, u)]
        except KeyError:
            raise ValueError(f"node {u} has no link to node {v}") from None

    def bandwidth_bps(self, u: int, v: int) -> float:
        """Effective bandwidth of a u->v transfer: the slowest of link, sender uplink, receiver downlink."""
        return min(self.link(u, v).bandwidth_bps, self._up[u], self._down[v])

    def transfer_s(self, src: int, dst: int, size_bytes: int, routed: bool = False) -> float:
        """Seconds a message of ``size_bytes`` takes from ``src`` to ``dst`` with every uplink free: 8S/B + L
        per hop of the route it would take now (the link model a device knows: its links' speed, the RTT)."""
        fleet = self.fleet
        path = None
        if routed and fleet is not None:
            path, _ = self._live_route(src, dst)
        if path is None:
            path = self.route(src, dst) if routed else [src, dst]
        total = 0.0
        for u, v in itertools.pairwise(path):
            link, bandwidth = self._hop(u, v)
            total += tx_time_s(size_bytes, bandwidth) + link.latency_s
        return total

    def _hop(self, u: int, v: int) -> tuple[Link, float]:
        """The link u-v as it is now (the fleet's under dynamics) and a transfer's bandwidth over it: the
        slowest of the link, u's uplink and v's downlink."""
        link = self.link(u, v) if self.fleet is None else self.fleet.link(u, v)
        return link, min(link.bandwidth_bps, self._up[u], self._down[v])

    def inbox(self, node: int, kind: str) -> simpy.Store:
        key = (node, kind)
        if key not in self._inboxes:
            self._inboxes[key] = simpy.Store(self.env)
        return self._inboxes[key]

    def send(self, src: int, dst: int, kind: str, payload: Any, round: int = 0, routed: bool = False) -> simpy.Event:
        """Start a transfer; the returned event fires when the sender's uplink is released.

        ``kind`` and ``round`` travel in the fixed header (see ``cost.HEADER_BYTES``).
        With ``routed`` a message to a non-neighbour is relayed hop by hop along a
        shortest path (store and forward): every hop costs its own uplink time,
        latency, loss draw and bytes. Under dynamics the path is a shortest one over the
        live links when the message leaves.
        """
        if src == dst:
            raise ValueError(f"node {src} cannot send to itself")
        fleet = self.fleet
        if not routed and (fleet is None or fleet.pos is None):
            self.link(src, dst)  # raises for a non-neighbour (under mobility any two devices may meet)
        path = None if routed and fleet is not None else self.route(src, dst) if routed else [src, dst]
        self._seq += 1
        msg = Message(src, dst, kind, payload, message_bytes(payload), round=round, seq=self._seq)
        self.in_flight[msg.seq] = msg
        if self._computed:
            assert path is not None
            return self._computed_hop(msg, path, 0)
        return self.env.process(self._transmit(msg, path, 0))

    # --- a static fleet with parallel downlinks: every hop computed ---------------------------------

    def _at(self, t: float, event: simpy.Event) -> simpy.Event:
        """``event`` fired at the simulated time ``t`` exactly (a Timeout's ``now + delay`` may round away from
        the time the resource path reaches by adding up the same durations)."""
        env = self.env
        event._ok, event._value = True, None
        heapq.heappush(env._queue, (t, simpy.core.NORMAL, next(env._eid), event))
        return event

    def _computed_hop(self, msg: Message, path: list[int], hop: int) -> simpy.Event:
        """Hop ``hop``: queued on the sender's uplink now; the returned event fires when it is sent."""
        u, v = path[hop], path[hop + 1]
        link, bandwidth = self._hop(u, v)
        free = self._free_at[u]
        start = max(self.env.now, heapq.heappop(free))
        end = start + tx_time_s(msg.size_bytes, bandwidth)
        heapq.heappush(free, end)
        if hop == 0:
            msg.sent_t = start
        sent = self._at(end, simpy.Event(self.env))
        sent.callbacks.append(lambda _: self._computed_sent(msg, path, hop, link, start))
        return sent

    def _computed_sent(self, msg: Message, path: list[int], hop: int, link: Link, start: float) -> None:
        u, v = path[hop], path[hop + 1]
        lost = link.loss > 0 and self._loss_stream(u).random() < link.loss
        self._on_event("send", msg, u, v, t_start=start)
        if lost:
            self._drop(msg, u, v, "loss")
            return
        arrived = self._at(self.env.now + link.latency_s, simpy.Event(self.env))
        if hop + 2 == len(path):
            arrived.callbacks.append(lambda _: self._deliver(msg, u, v))
        else:
            arrived.callbacks.append(lambda _: _void(self._computed_hop(msg, path, hop + 1)))

    def route(self, src: int, dst: int) -> list[int]:
        """A shortest path src -> dst in hops (deterministic: BFS over sorted neighbours).

        Nodes in ``no_relay`` (the servers) may be the source or the destination
        but never an intermediate hop, so device-to-device routes stay on the
        device graph even when a server is attached to every device.
        """
        if src == dst:
            raise ValueError(f"node {src} cannot send to itself")
        path = self._bfs(src, dst, self._static_adj)
        if path is None:
            raise ValueError(f"no route from node {src} to node {dst}")
        return path

    def _static_adj(self, u: int) -> Iterable[int]:
        if self._adj is None:
            adj: dict[int, list[int]] = {}
            for a, b in self._links:
                adj.setdefault(a, []).append(b)
                adj.setdefault(b, []).append(a)
            self._adj = {a: sorted(bs) for a, bs in adj.items()}
        return self._adj.get(u, ())

    def _bfs(self, src: int, dst: int, neighbours: Callable[[int], Iterable[int]]) -> Optional[list[int]]:
        """Shortest hop path src -> dst over ``neighbours`` (sorted ids: deterministic), or None."""
        parent = {src: src}
        frontier = [src]
        while frontier and dst not in parent:
            nxt = []
            for u in frontier:
                if u != src and u in self._no_relay:
                    continue
                for v in neighbours(u):
                    if v not in parent:
                        parent[v] = u
                        nxt.append(v)
            frontier = nxt
        if dst not in parent:
            return None
        path = [dst]
        while path[-1] != src:
            path.append(parent[path[-1]])
        return path[::-1]

    def _transmit(self, msg: Message, path: Optional[list[int]], hop: int):
        """Hop ``hop`` of ``path``: wait for the uplink, transmit, then propagate (``_propagate``).

        Under dynamics (same events, so an empty ``dynamics:`` block changes nothing) the sender
        first waits to be online, a routed message's path (``None``) is found over the live links
        when it leaves, and the fleet may drop the hop before, after or during transmission.
        """
        fleet = self.fleet
        if fleet is not None:
            if path is None:
                yield from fleet.wait_online(msg.src)
                path, no_route = self._live_route(msg.src, msg.dst)
                if path is None:
                    self._drop(msg, msg.src, msg.dst, no_route, transmitted=False)
                    return
            else:
                yield from fleet.wait_online(path[hop])
        assert path is not None
        u, v = path[hop], path[hop + 1]
        with self._uplinks[u].request() as slot:
            yield slot
            downlink = self._downlinks.get(v)
            if downlink is None:
                sent = yield from self._transfer(msg, u, v, hop)
            else:
                with downlink.request() as inbound:
                    yield inbound
                    sent = yield from self._transfer(msg, u, v, hop)
        if sent is None:
            return
        link, since, start = sent
        why: Optional[str] = None
        if fleet is not None:
            why = fleet.blocked(u, v, since)
            why = None if why == "offline" else why  # decided on arrival
        lost = why is None and link.loss > 0 and self._loss_stream(u).random() < link.loss
        self._on_event("send", msg, u, v, t_start=start)
        if why is not None or lost:
            self._drop(msg, u, v, why or "loss")
        else:
            self.env.process(self._propagate(msg, path, hop, link.latency_s, since))

    def _transfer(self, msg: Message, u: int, v: int, hop: int):
        """One hop's transmission, its slots held: (link, link generation, start time), or None when the
        fleet drops it before it starts."""
        fleet = self.fleet
        since = None
        if fleet is not None:
            cut = fleet.blocked(u, v)
            if cut is not None and cut != "offline":  # a sender cannot tell that the receiver is off
                self._drop(msg, u, v, cut, transmitted=False)
                return None
            since = fleet.generation(u, v)
        link, bandwidth = self._hop(u, v)
        start = self.env.now
        if hop == 0:
            msg.sent_t = start
        yield self.env.timeout(tx_time_s(msg.size_bytes, bandwidth))
        return link, since, start

    def _propagate(self, msg: Message, path: list[int], hop: int, latency_s: float,
                   since: Optional[tuple[int, int]] = None):
        yield self.env.timeout(latency_s)
        if self.fleet is not None:
            cut = self.fleet.blocked(path[hop], path[hop + 1], since)
            if cut is not None:
                self._drop(msg, path[hop], path[hop + 1], cut)
                return
        if hop + 2 == len(path):
            self._deliver(msg, path[hop], path[hop + 1])
        else:
            self.env.process(self._transmit(msg, path, hop + 1))

    def _deliver(self, msg: Message, u: int, v: int) -> None:
        del self.in_flight[msg.seq]
        self._on_event("deliver", msg, u, v)
        self.inbox(msg.dst, msg.kind).put(msg)

    def _drop(self, msg: Message, u: int, v: int, reason: str, transmitted: bool = True) -> None:
        del self.in_flight[msg.seq]
        self._on_event("drop", msg, u, v, reason=reason, transmitted=transmitted)

    # --- under dynamics: the live fleet decides every hop ------------------------------------

    def _live_route(self, src: int, dst: int) -> tuple[Optional[list[int]], str]:
        """A shortest path over the live links now, or (None, why there is none)."""
        fleet = self.fleet
        assert fleet is not None
        if not fleet.is_online(dst):
            return None, "offline"
        path = self._bfs(src, dst, fleet.live_hops)
        if path is not None:
            return path, ""
        static = self._bfs(src, dst, self._static_adj)
        if fleet.group is not None and (static is None or any(
                max(a, b) < fleet.n_devices and fleet.group[a] != fleet.group[b] for a, b in itertools.pairwise(static))):
            return None, "partition"
        return None, "link_down"
