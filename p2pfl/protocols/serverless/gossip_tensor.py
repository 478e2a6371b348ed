"""Gossip as a tensor program (``engine: tensor``; the protocol: ``gossip.py`` beside this file).

Boyd et al. 2006's randomized gossip with N ticks a round, ``mode: sync``, ``exchange: push_pull``: each device
trains, then picks a neighbour uniformly at random, and the round's exchanges run one after another in a random
order, each moving both ends halfway to the other's current model. The event kernel runs the exchanges in the
order its messages arrive, and an exchange that overlaps another averages with a model sent before that one
moved (a push-pull reply); here each is atomic, so the fleet's mean model is kept in every round (up to
rounding). Peers and order come from one fleet stream (``stream(seed, "engine.peers")``), not the kernel's
per-device streams, so runs agree in distribution, not exchange by exchange
(``scenarios/studies/engine_check.yaml``).

Under dynamics (``dynamics.churn`` replayed at round barriers): a device offline at a round's start skips it; the
others pick among their neighbours online then. A push whose peer is offline when it arrives is dropped
(``offline``, its bytes sent) and no one moves; a reply whose initiator is offline when it arrives is dropped, and
one that comes after ``reply_timeout_s`` (``auto``: the kernel's (2 + D) round trips) is too late: then the peer
has moved (it answered) and the initiator keeps its model. Every exchange without a reply in time counts in
``exchanges_failed``, every online device without an online neighbour in ``exchanges_without_peer``, a round.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from p2pfl.maths.messages import message_size
from p2pfl.protocols.serverless.gossip import GossipParams
from p2pfl.seeding import stream
from p2pfl.sim.cost import tx_time_s
from p2pfl.tensor.program import DeviceRounds, Fleet, Round, ScenarioView
from p2pfl.tensor.timing import fifo
from p2pfl.tensor.train import chunks

__all__ = ["GossipRounds"]


class GossipRounds(DeviceRounds):
    """Sync push-pull gossip, the round's exchanges one after another (module docstring)."""

    supports_churn = True

    def __init__(self, params: GossipParams, fleet: Fleet) -> None:
        super().__init__(params, fleet)
        self.rng = stream(fleet.seed, "engine.peers")
        self.exchanges_failed = 0
        self.exchanges_without_peer = 0

    @classmethod
    def unsupported(cls, scenario: ScenarioView) -> Optional[str]:
        p = scenario.protocol
        if p.mode != "sync" or p.exchange != "push_pull":
            return "protocol.mode: gossip runs with mode: sync and exchange: push_pull only"
        if scenario.dynamics is not None and p.reply_timeout_s is None:
            return "protocol.reply_timeout_s: required under dynamics (a dropped reply would be awaited forever)"
        return super().unsupported(scenario)

    def result(self) -> dict[str, Any]:
        if not self.fleet.dynamic:
            return {}
        return {"exchanges_failed": self.exchanges_failed, "exchanges_without_peer": self.exchanges_without_peer}

    def round(self, r: int) -> Round:
        f, adj = self.fleet, self.fleet.adjacency
        if f.dynamic:
            return self._dynamic_round()
        self.train_all()
        return self.exchange(adj.indptr, adj.indices)

    def exchange(self, indptr: np.ndarray, indices: np.ndarray, start: Optional[np.ndarray] = None) -> Round:
        """The static round's exchanges after training, each device picking among its peers in the CSR
        ``indptr``/``indices`` (the topology's neighbours; ``rnd_gossip``: its mutually compatible peers); a
        device's training starts ``start`` seconds into the round (default 0)."""
        f, n = self.fleet, self.fleet.n
        deg = np.diff(indptr)
        src = np.flatnonzero(deg > 0)
        pick = indptr[src] + np.minimum((self.rng.random(len(src)) * deg[src]).astype(np.int64), deg[src] - 1)
        dst = indices[pick].astype(np.int64)
        self._mix(src, dst)
        size = message_size("gossip", "gossip_push", f.state_bytes)  # a reply is as big
        # time: each device pushes when its training ends; its replies leave after its push, in arrival order
        c = f.compute_s() if start is None else start + f.compute_s()
        bw = np.minimum(np.minimum(f.link.bandwidth_bps, f.uplink_bps[src]), f.downlink_bps[dst])
        push_done = c[src] + tx_time_s(size, bw)
        push_free = np.zeros(n)
        push_free[src] = push_done
        arrive = push_done + f.link.latency_s
        back = np.minimum(np.minimum(f.link.bandwidth_bps, f.uplink_bps[dst]), f.downlink_bps[src])
        reply_done = fifo(np.maximum(arrive, push_free[dst]), tx_time_s(size, back), dst, n)
        end = float(max((reply_done + f.link.latency_s).max(initial=0.0), c.max(initial=0.0)))
        sent = np.zeros(n + len(self.servers), dtype=np.int64)
        received = np.zeros_like(sent)
        np.add.at(sent, src, size)
        np.add.at(sent, dst, size)
        np.add.at(received, dst, size)
        np.add.at(received, src, size)
        k = len(src)
        return Round(end, sent, received, 2 * k, {"gossip_push": k * size, "gossip_reply": k * size}, np.arange(n))

    def _dynamic_round(self) -> Round:
        """A round under dynamics (module docstring)."""
        f, adj, n = self.fleet, self.fleet.adjacency, self.fleet.n
        online = self.online()
        trained = np.flatnonzero(online)
        idle = np.zeros(n, dtype=np.int64)
        if not len(trained):
            return Round(self.idle_until_back(), idle, idle.copy(), 0, {}, trained)
        self.train_some(trained)
        live = online[adj.sources] & online[adj.indices]
        at = np.flatnonzero(live)  # the live entries of the CSR, by device, neighbours ascending
        deg = np.bincount(adj.sources[at], minlength=n)
        self.exchanges_without_peer += int((online & (deg == 0)).sum())
        ptr = np.r_[0, np.cumsum(deg)]
        src = np.flatnonzero(deg > 0)
        pick = ptr[src] + np.minimum((self.rng.random(len(src)) * deg[src]).astype(np.int64), deg[src] - 1)
        dst = adj.indices[at[pick]].astype(np.int64)
        size = message_size("gossip", "gossip_push", f.state_bytes)  # a reply is as big
        c = f.compute_s()
        bw = np.minimum(np.minimum(f.link.bandwidth_bps, f.uplink_bps[src]), f.downlink_bps[dst])
        push_done = c[src] + tx_time_s(size, bw)
        arrive = push_done + f.link.latency_s
        churn = f.churn
        assert churn is not None
        pushed = churn.states(dst, self.now + arrive)  # the peer is online when the push arrives
        push_free = np.zeros(n)
        push_free[src] = push_done
        back = np.minimum(np.minimum(f.link.bandwidth_bps, f.uplink_bps[dst]), f.downlink_bps[src])
        reply_done = np.full(len(src), np.inf)
        answer = np.flatnonzero(pushed)
        reply_done[answer] = fifo(np.maximum(arrive[answer], push_free[dst[answer]]), tx_time_s(size, back[answer]),
                                  dst[answer], n)
        reply_at = reply_done + f.link.latency_s
        replied = np.zeros(len(src), dtype=bool)
        replied[answer] = churn.states(src[answer], self.now + reply_at[answer])
        wait = self.reply_wait_s(src, dst, size)
        ok = replied & (reply_at <= push_done + wait)
        self.exchanges_failed += int((~ok).sum())
        self._mix(src[answer], dst[answer], both=ok[answer])
        finish = np.where(ok, reply_at, push_done + wait)
        end = float(max(finish.max(initial=0.0), reply_done[answer].max(initial=0.0), c[online].max(initial=0.0)))
        sent = np.zeros(n, dtype=np.int64)
        received = np.zeros(n, dtype=np.int64)
        np.add.at(sent, src, size)
        np.add.at(received, dst[answer], size)
        np.add.at(sent, dst[answer], size)
        np.add.at(received, src[replied], size)
        drops = len(src) - int(replied.sum())  # pushes to an offline peer, replies to an offline initiator
        k, m = len(src), len(answer)
        return Round(end, sent, received, k + m, {"gossip_push": k * size, "gossip_reply": m * size}, trained,
                     dropped={"offline": drops} if drops else {},
                     bytes_dropped={"offline": drops * size} if drops else {})

    def reply_wait_s(self, src: np.ndarray, dst: np.ndarray, size: int) -> np.ndarray:
        """How long each initiator waits for its reply after its push has left: ``reply_timeout_s``, or with
        ``auto`` the kernel's (2 + D) round trips of the model with every uplink free (``Gossip.reply_timeout``),
        D the topology's largest degree."""
        t = self.params.reply_timeout_s
        if t != "auto":
            return np.full(len(src), float(t))
        f = self.fleet
        bw = np.minimum(np.minimum(f.link.bandwidth_bps, f.uplink_bps[src]), f.downlink_bps[dst])
        one_way = tx_time_s(size, bw) + f.link.latency_s
        return (2 + int(f.adjacency.degree.max(initial=0))) * 2 * one_way

    def _mix(self, src: np.ndarray, dst: np.ndarray, both: Optional[np.ndarray] = None) -> None:
        """The round's exchanges one after another in a random order (Boyd et al.'s ticks): each moves both
        ends halfway to the other's current model, as ``add_delta_(x, sub(y, x), 0.5)`` does (where ``both`` is
        False, only the peer ``dst`` moves: the initiator's reply did not come). Run in layers: an exchange goes
        once every earlier one sharing an end has gone, so a layer's pairs are disjoint and the result is the
        sequential one's, bit for bit (tested)."""
        x, n = self.rows, self.fleet.n
        order = self.rng.permutation(len(src))
        a, b = src[order], dst[order]
        moves = np.ones(len(a), dtype=bool) if both is None else np.asarray(both, dtype=bool)[order]
        left = np.arange(len(a))
        while len(left):
            first = np.full(n, len(a), dtype=np.int64)  # each node's earliest exchange still to go
            np.minimum.at(first, a[left], left)
            np.minimum.at(first, b[left], left)
            now = (first[a[left]] == left) & (first[b[left]] == left)
            layer = left[now]
            left = left[~now]
            for part in chunks(len(layer), self.fleet.chunk):
                ia, ib = torch.from_numpy(a[layer[part]]), torch.from_numpy(b[layer[part]])
                xa, xb = x[ia], x[ib]
                mine = moves[layer[part]]
                if mine.all():
                    x[ia] = xa + (xb - xa) * 0.5
                elif mine.any():
                    keep = torch.from_numpy(mine)
                    x[ia[keep]] = xa[keep] + (xb[keep] - xa[keep]) * 0.5
                x[ib] = xb + (xa - xb) * 0.5
