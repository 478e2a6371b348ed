"""Gossip as a tensor program (``engine: tensor``; the protocol: ``gossip.py`` beside this file).

Boyd et al. 2006's randomized gossip with N ticks a round, ``mode: sync``, ``exchange: push_pull``: each device
trains, then picks a neighbour uniformly at random, and the round's exchanges run one after another in a random
order, each moving both ends halfway to the other's current model. The event kernel runs the exchanges in the
order its messages arrive, and an exchange that overlaps another averages with a model sent before that one
moved (a push-pull reply); here each is atomic, so the fleet's mean model is kept in every round (up to
rounding). Peers and order come from one fleet stream (``stream(seed, "engine.peers")``), not the kernel's
per-device streams, so runs agree in distribution, not exchange by exchange
(``scenarios/studies/engine_check.yaml``).
"""

from __future__ import annotations

from typing import Optional

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

    def __init__(self, params: GossipParams, fleet: Fleet) -> None:
        super().__init__(params, fleet)
        self.rng = stream(fleet.seed, "engine.peers")

    @classmethod
    def unsupported(cls, scenario: ScenarioView) -> Optional[str]:
        p = scenario.protocol
        if p.mode != "sync" or p.exchange != "push_pull":
            return "protocol.mode: gossip runs with mode: sync and exchange: push_pull only"
        return super().unsupported(scenario)

    def round(self, r: int) -> Round:
        f, adj, n = self.fleet, self.fleet.adjacency, self.fleet.n
        self.train_all()
        deg = adj.degree
        src = np.flatnonzero(deg > 0)
        pick = adj.indptr[src] + np.minimum((self.rng.random(len(src)) * deg[src]).astype(np.int64), deg[src] - 1)
        dst = adj.indices[pick].astype(np.int64)
        self._mix(src, dst)
        size = message_size("gossip", "gossip_push", f.state_bytes)  # a reply is as big
        # time: each device pushes when its training ends; its replies leave after its push, in arrival order
        c = f.compute_s()
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
        return Round(end, sent, received, 2 * k, {"gossip_push": k * size, "gossip_reply": k * size},
                     np.arange(n))

    def _mix(self, src: np.ndarray, dst: np.ndarray) -> None:
        """The round's exchanges one after another in a random order (Boyd et al.'s ticks): each moves both
        ends halfway to the other's current model, as ``add_delta_(x, sub(y, x), 0.5)`` does. Run in layers:
        an exchange goes once every earlier one sharing an end has gone, so a layer's pairs are disjoint and
        the result is the sequential one's, bit for bit (tested)."""
        x, n = self.rows, self.fleet.n
        order = self.rng.permutation(len(src))
        a, b = src[order], dst[order]
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
                x[ia] = xa + (xb - xa) * 0.5
                x[ib] = xb + (xa - xb) * 0.5
