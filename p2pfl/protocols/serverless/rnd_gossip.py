"""Decentralized RND clustering plus gossip within federations (RND clustered-FL paper, Sec. V, last paragraph).

The paper's closing remark: "a decentralized implementation can restrict
predictor exchange and evaluation to local neighborhoods ... each device only
evaluates the predictors of nearby peers". No server anywhere:

1. Every device trains its RND predictor (same shared target and predictor
   init from the scenario seed as ``rnd``; only predictors travel).
2. It sends the predictor to every device within ``hops`` hops of the
   topology (routed, each hop charged) and scores its own and the received
   predictors on its training inputs: its row of the novelty matrix, ``nan``
   for devices out of reach.
3. Directed compatibility, ``|s_ij - s_ii| <= alpha s_ii`` (the same band as
   ``p2pfl.clustering.compatible``). Device i sends its verdict on j (8 bytes)
   to each j in reach, so both ends learn whether the link is *mutually*
   compatible.
4. Federations: asynchronous min-label propagation over mutually compatible
   links (``p2pfl.clustering.label_propagation_clusters`` is the synchronous
   equivalent). A device starts with its own id, sends it (8 bytes) to its
   compatible peers, and whenever a smaller label arrives adopts it and sends
   it on. Messages stop by themselves once every device holds the minimum id
   of its component; training does not wait for it (the labels only name the
   federations, the compatible links already fix who trains with whom).
5. Training: ``gossip`` (push-pull, sync or async) whose peers are the
   device's mutually compatible peers, routed when they are not adjacent.
   A device with no compatible peer trains alone.

What the rule can and cannot do: federations are the connected components of
the mutually compatible links within ``hops``; two members of a true group
that are not linked through same-group devices within that reach end up in
different federations (with ``hops: 1`` on a random geometric graph this is
common when the groups are scattered in space).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np
from pydantic import Field
from torch import nn

from p2pfl.clustering import clustering_scores, compatibility_clusters
from p2pfl.clustering.novelty import RNDProbe, heatmap_png, npy_bytes
from p2pfl.protocols.base import Process
from p2pfl.protocols.serverless.gossip import Gossip, GossipParams

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext
    from p2pfl.sim.network import Message
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["RNDGossip", "RNDGossipParams", "within_hops", "compatible_row", "components_from_labels"]


class RNDGossipParams(GossipParams):
    alpha: float = Field(0.3, ge=0, lt=1, description="compatibility band: |s_ij - s_ii| <= alpha s_ii")
    hops: int = Field(1, ge=1, description="predictors travel to devices within this many hops")
    rnd_epochs: int = Field(10, ge=1)
    rnd_batch_size: int = Field(128, ge=1)
    rnd_lr: float = Field(1e-3, gt=0)


# --------------------------------------------------------------------------- pure decisions


def within_hops(graph: nx.Graph, node: int, hops: int) -> tuple[int, ...]:
    """Devices at hop distance 1..``hops`` from ``node`` (sorted)."""
    dist = nx.single_source_shortest_path_length(graph, node, cutoff=hops)
    return tuple(sorted(int(v) for v, d in dist.items() if d >= 1))


def compatible_row(row: np.ndarray, own: int, alpha: float) -> np.ndarray:
    """Device ``own``'s verdicts: ``(1 - alpha) s_ii <= s_ij <= (1 + alpha) s_ii``; nan is never compatible."""
    s_ii = row[own]
    with np.errstate(invalid="ignore"):
        ok = ((1.0 - alpha) * s_ii <= row) & (row <= (1.0 + alpha) * s_ii)
    ok[own] = True
    return ok


def components_from_labels(labels: dict[int, int]) -> list[list[int]]:
    """Federations from final labels: devices with the same label, by smallest member."""
    groups: dict[int, list[int]] = {}
    for d in sorted(labels):
        groups.setdefault(labels[d], []).append(d)
    return sorted((sorted(g) for g in groups.values()), key=lambda f: f[0])


# --------------------------------------------------------------------------- protocol


class RNDGossip(Gossip[RNDGossipParams]):
    """Serverless RND: h-hop predictor exchange, mutual compatibility, label propagation, federated gossip."""

    name = "rnd_gossip"
    Params = RNDGossipParams
    summary = "serverless RND clustering within h hops + label propagation + gossip among compatible peers"
    routed = True

    def __init__(self, params: RNDGossipParams, run: RunInfo) -> None:
        super().__init__(params, run)
        self.probe = RNDProbe(run, epochs=params.rnd_epochs, batch_size=params.rnd_batch_size, lr=params.rnd_lr)
        n = run.n_devices
        #: Row i: device i's novelty scores s_ij of the predictors it held (nan: out of reach).
        self.rows = np.full((n, n), np.nan)
        self.peers: dict[int, tuple[int, ...]] = {}
        self.labels: dict[int, int] = {}
        self.label_settled_t = 0.0

    def device(self, ctx: DeviceContext) -> Process:
        yield from self.discover(ctx)
        yield from super().device(ctx)

    def discover(self, ctx: DeviceContext) -> Process:
        """Steps 1-4: predictor within reach, row, verdicts, then label propagation in the background."""
        n, me = self.run.n_devices, ctx.id
        reach = within_hops(self.run.graph, me, self.params.hops)
        predictor: nn.Module = yield from self.probe.train(ctx, 1)
        state = predictor.state_dict()
        for j in reach:
            yield ctx.send(j, "rnd_predictor", {"state": state}, round=1, routed=True)
        held = {me: predictor}
        while len(held) < len(reach) + 1:
            msg: Message = yield ctx.recv("rnd_predictor")
            held[msg.src] = self.probe.predictor_from(msg.payload["state"])
        row: np.ndarray = yield from self.probe.score(ctx, held, n)
        self.rows[me] = row
        verdict = compatible_row(row, me, self.params.alpha)
        for j in reach:
            yield ctx.send(j, "rnd_verdict", {"compatible": bool(verdict[j])}, round=1, routed=True)
        theirs: dict[int, bool] = {}
        while len(theirs) < len(reach):
            msg = yield ctx.recv("rnd_verdict")
            theirs[msg.src] = bool(msg.payload["compatible"])
        self.peers[me] = tuple(j for j in reach if verdict[j] and theirs[j])
        self.labels[me] = me
        ctx.spawn(self.propagate_labels(ctx))

    def propagate_labels(self, ctx: DeviceContext) -> Process:
        """Asynchronous min-label propagation over mutually compatible peers."""
        me = ctx.id
        for j in self.peers[me]:
            ctx.send(j, "rnd_label", {"label": me}, round=1, routed=True)
        while True:
            msg: Message = yield ctx.recv("rnd_label")
            label = int(msg.payload["label"])
            if label < self.labels[me]:
                self.labels[me] = label
                self.label_settled_t = max(self.label_settled_t, ctx.now)
                for j in self.peers[me]:
                    if j != msg.src:
                        ctx.send(j, "rnd_label", {"label": label}, round=1, routed=True)

    # ---- gossip restricted to compatible peers (Gossip's push-pull, routed) ----------

    def candidate_peers(self, ctx: DeviceContext) -> tuple[int, ...]:
        """The device's mutually compatible peers (reached over routes when not adjacent)."""
        return tuple(self.peers[ctx.id])

    # ---- outputs ----------------------------------------------------------------------

    def result(self) -> dict[str, Any]:
        if len(self.labels) < self.run.n_devices:
            return {}
        clusters = components_from_labels(self.labels)
        scored = ~np.isnan(self.rows)
        out = clustering_scores(self.run.true_clusters, clusters)
        out.update({
            "label_settled_t": self.label_settled_t,
            "clustering_flops": self.probe.flops,
            "scored_pairs": int(scored.sum() - self.run.n_devices),
            "compatible_links": sum(len(p) for p in self.peers.values()) // 2,
            # What the centralized rule would give on the same (partial) matrix, for comparison.
            "clusters_centralized_rule": compatibility_clusters(self.rows, self.params.alpha),
        })
        return out

    def artifacts(self) -> dict[str, bytes]:
        if np.isnan(np.diag(self.rows)).any():
            return {}
        return {"novelty.npy": npy_bytes(self.rows),
                "novelty_heatmap.png": heatmap_png(self.rows, self.run.true_clusters,
                                                   rf"RND gossip ({self.params.hops} hop): $u_{{ii}} - u_{{ij}}$")}
