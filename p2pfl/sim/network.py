"""The network: links with latency, bandwidth and loss; one serialized uplink per node.

A message of S bytes from u to v starts when u's uplink is free, occupies it
for 8S/B seconds and arrives L seconds later, where L is the link latency and
B = min(link bandwidth, u's uplink, v's downlink) (SimPy's ``latency.py`` Cable).
Lost messages still occupy the uplink and count as sent; the drop is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from p2pfl.sim.cost import message_bytes, tx_time_s

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.topology import Link

__all__ = ["Message", "Network"]


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
    """Links between node ids, per-node uplink resources and per-(node, kind) inboxes."""

    def __init__(
        self,
        env: simpy.Environment,
        links: dict[tuple[int, int], Link],
        uplink_bps: dict[int, float],
        downlink_bps: dict[int, float],
        loss_rng: Callable[[int], np.random.Generator],
        on_event: Callable[..., None],
        no_relay: frozenset[int] = frozenset(),
    ) -> None:
        self.env = env
        self._links = links
        self._up = uplink_bps
        self._down = downlink_bps
        self._loss_rng = loss_rng  # a node's stream, made when it first sends over a lossy link
        self._loss_rngs: dict[int, np.random.Generator] = {}
        self._on_event = on_event
        self._uplinks = {n: simpy.Resource(env, capacity=1) for n in uplink_bps}
        self._inboxes: dict[tuple[int, str], simpy.Store] = {}
        self._seq = 0
        self._adj: dict[int, list[int]] | None = None
        self._no_relay = frozenset(no_relay)  # endpoints only (servers): never a hop inside a route

    def _loss_stream(self, u: int) -> np.random.Generator:
        rng = self._loss_rngs.get(u)
        if rng is None:
            rng = self._loss_rngs[u] = self._loss_rng(u)
        return rng

    def link(self, u: int, v: int) -> Link:
        """The link between ``u`` and ``v``; ValueError if they are not adjacent."""
        try:
            return self._links[(u, v) if (u, v) in self._links else (v, u)]
        except KeyError:
            raise ValueError(f"node {u} has no link to node {v}") from None

    def bandwidth_bps(self, u: int, v: int) -> float:
        """Effective bandwidth of a u->v transfer: the slowest of link, sender uplink, receiver downlink."""
        return min(self.link(u, v).bandwidth_bps, self._up[u], self._down[v])

    def inbox(self, node: int, kind: str) -> simpy.Store:
        key = (node, kind)
        if key not in self._inboxes:
            self._inboxes[key] = simpy.Store(self.env)
        return self._inboxes[key]

    def send(self, src: int, dst: int, kind: str, payload: Any, round: int = 0, routed: bool = False) -> simpy.Process:
        """Start a transfer; the returned event fires when the sender's uplink is released.

        ``kind`` and ``round`` travel in the fixed header (see ``cost.HEADER_BYTES``).
        With ``routed`` a message to a non-neighbour is relayed hop by hop along a
        shortest path (store and forward): every hop costs its own uplink time,
        latency, loss draw and bytes.
        """
        path = self.route(src, dst) if routed else [src, dst]
        if not routed:
            self.link(src, dst)  # raises for a non-neighbour
        self._seq += 1
        msg = Message(src, dst, kind, payload, message_bytes(payload), round=round, seq=self._seq)
        return self.env.process(self._transmit(msg, path, 0))

    def route(self, src: int, dst: int) -> list[int]:
        """A shortest path src -> dst in hops (deterministic: BFS over sorted neighbours).

        Nodes in ``no_relay`` (the servers) may be the source or the destination
        but never an intermediate hop, so device-to-device routes stay on the
        device graph even when a server is attached to every device.
        """
        if src == dst:
            raise ValueError(f"node {src} cannot send to itself")
        if self._adj is None:
            adj: dict[int, list[int]] = {}
            for u, v in self._links:
                adj.setdefault(u, []).append(v)
                adj.setdefault(v, []).append(u)
            self._adj = {u: sorted(vs) for u, vs in adj.items()}
        parent = {src: src}
        frontier = [src]
        while frontier and dst not in parent:
            nxt = []
            for u in frontier:
                if u != src and u in self._no_relay:
                    continue
                for v in self._adj.get(u, ()):
                    if v not in parent:
                        parent[v] = u
                        nxt.append(v)
            frontier = nxt
        if dst not in parent:
            raise ValueError(f"no route from node {src} to node {dst}")
        path = [dst]
        while path[-1] != src:
            path.append(parent[path[-1]])
        return path[::-1]

    def _transmit(self, msg: Message, path: list[int], hop: int):
        u, v = path[hop], path[hop + 1]
        link = self.link(u, v)
        with self._uplinks[u].request() as slot:
            yield slot
            start = self.env.now
            if hop == 0:
                msg.sent_t = start
            yield self.env.timeout(tx_time_s(msg.size_bytes, self.bandwidth_bps(u, v)))
        lost = link.loss > 0 and self._loss_stream(u).random() < link.loss
        self._on_event("send", msg, lost, u, v, start)
        if not lost:
            self.env.process(self._propagate(msg, path, hop, link.latency_s))

    def _propagate(self, msg: Message, path: list[int], hop: int, latency_s: float):
        yield self.env.timeout(latency_s)
        if hop + 2 == len(path):
            self._on_event("deliver", msg, False, path[hop], path[hop + 1], self.env.now)
            self.inbox(msg.dst, msg.kind).put(msg)
        else:
            self.env.process(self._transmit(msg, path, hop + 1))
