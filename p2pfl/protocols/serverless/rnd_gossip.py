"""Decentralized RND clustering plus gossip within federations (RND clustered-FL paper, Sec. V, last paragraph).

The paper's closing remark: "a decentralized implementation can restrict
predictor exchange and evaluation to local neighborhoods ... each device only
evaluates the predictors of nearby peers". No server anywhere:

1. Every device trains its RND predictor (same shared target, and predictor
   init by ``predictor_init``: ``shared`` or ``per_device``, from the scenario
   seed as ``rnd``; only predictors travel).
2. It sends the predictor to every device within ``hops`` hops of the
   topology (routed, each hop charged) and scores its own and the received
   predictors on its training inputs: its row of the novelty matrix, ``nan``
   for devices out of reach.
3. Directed compatibility by ``criterion`` (``p2pfl.clustering.compatible``'s:
   the band ``|s_ij - s_ii| <= alpha s_ii`` or the one-sided ``s_ij - s_ii <= gap``,
   both ours). Device i sends its verdict on j (8 bytes)
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

Under dynamics (our extension of the paper's remark): discovery is event-driven. A device sends
its predictor to the devices within ``hops`` live hops, and again to every device that later comes
within reach (mobility, a device back online, a link back up). Whoever receives a predictor it has
not scored scores it (s_ij, one novelty job), answers with its verdict, and sends its own predictor
back if it has not yet, so both ends judge each other. A device starts training once it has every
initial verdict and has scored every initial predictor, or after ``discovery_timeout_s`` (default
``reply_timeout_s``). A device that left its reach (offline, link down, partition, moved away) before
its verdict came gets the predictor
again when it is back (and answers a predictor it already scored with its verdict again). Its gossip peers are its mutually compatible peers
*within live reach now*: departed ones are forgotten (kept scored, in case they return), new ones
join once judged. No label propagation runs (labels never grow back when links go); the reported
federations are the components of the mutually compatible links in reach at the end, and the ARI
of those components is logged whenever every device has finished a round.

Why no majority peeling (step 4 of ``p2pfl.clustering.compatibility``, the server's rule): peeling
needs every member's support over its whole federation, i.e. the component's full edge set, which a
device knows only for the peers in its reach; gathering it would mean flooding every verdict through
the component. It is not needed for training either: a device gossips only with its own mutually
compatible peers, so a chain of links through a component does not average two groups into one model
(it only gives them one federation label).

What the rule can and cannot do: federations are the connected components of
the mutually compatible links within ``hops``; two members of a true group
that are not linked through same-group devices within that reach end up in
different federations (with ``hops: 1`` on a random geometric graph this is
common when the groups are scattered in space).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import networkx as nx
import numpy as np
import simpy
from pydantic import Field, model_validator

from p2pfl.clustering import compatibility_clusters
from p2pfl.clustering.compatibility import compatible_row
from p2pfl.clustering.novelty import PREDICTOR_INIT_DOC, Predictor, PredictorInit, RNDProbe
from p2pfl.protocols.base import Process
from p2pfl.protocols.server.rnd import CompatibilityParams
from p2pfl.protocols.serverless.dac import selection_components
from p2pfl.protocols.serverless.gossip import Gossip, GossipParams

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext
    from p2pfl.sim.network import Message
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["RNDGossip", "RNDGossipParams", "within_hops", "compatible_row", "components_from_labels"]


class RNDGossipParams(CompatibilityParams, GossipParams):
    hops: int = Field(1, ge=1, description="predictors travel to devices within this many hops")
    rnd_epochs: int = Field(10, ge=1)
    rnd_batch_size: int = Field(128, ge=1)
    rnd_lr: float = Field(1e-3, gt=0)
    predictor_init: PredictorInit = Field("shared", description=PREDICTOR_INIT_DOC)
    discovery_timeout_s: Optional[float] = Field(
        None, gt=0, description="under dynamics: how long a device waits for its first verdicts before it "
                                "starts training (default reply_timeout_s; scoring a predictor takes time)")

    @model_validator(mode="after")
    def _discovery_deadline(self) -> RNDGossipParams:
        if self.reply_timeout_s == "auto" and self.discovery_timeout_s is None:
            raise ValueError("reply_timeout_s: auto is a per-exchange wait, not a discovery deadline; "
                             "set protocol.discovery_timeout_s too")
        return self


# --------------------------------------------------------------------------- pure decisions


def within_hops(graph: nx.Graph, node: int, hops: int) -> tuple[int, ...]:
    """Devices at hop distance 1..``hops`` from ``node`` (sorted)."""
    dist = nx.single_source_shortest_path_length(graph, node, cutoff=hops)
    return tuple(sorted(int(v) for v, d in dist.items() if d >= 1))


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
    cluster_fields = ("clusters", "ari", "misclassification_rate", "n_federations")
    tensor_program = "p2pfl.protocols.serverless.rnd_gossip_tensor:RNDGossipRounds"
    current_models = True  # gossip's: each device's live model

    def __init__(self, params: RNDGossipParams, run: RunInfo) -> None:
        super().__init__(params, run)
        self.probe = RNDProbe(run, epochs=params.rnd_epochs, batch_size=params.rnd_batch_size, lr=params.rnd_lr,
                              predictor_init=params.predictor_init)
        n = run.n_devices
        #: Row i: device i's novelty scores s_ij of the predictors it held (nan: out of reach).
        self.rows = np.full((n, n), np.nan)
        self.peers: dict[int, tuple[int, ...]] = {}
        self.labels: dict[int, int] = {}
        self.label_settled_t = 0.0
        self._mine: dict[int, Predictor] = {}  # under dynamics: each device's predictor state
        self._sent: dict[int, set[int]] = {}  # ... whom it sent its predictor to
        self._theirs: dict[int, dict[int, bool]] = {}  # ... the verdicts it received
        self._scored: dict[int, simpy.Event] = {}  # ... fired when it scores a predictor it waits for

    def work_flops(self, samples: int) -> float:
        return self.probe.work_flops(samples, 1)

    def device(self, ctx: DeviceContext) -> Process:
        # The responder runs from the start: a peer that judged us compatible and finished its discovery
        # first may push before we finish ours (it waited out its reply timeout before, issue 33).
        model = self.start(ctx)
        if self.dynamic:
            yield from self.discover_live(ctx)
        else:
            yield from self.discover(ctx)
        yield from self.rounds(ctx, model)

    def discover(self, ctx: DeviceContext) -> Process:
        """Steps 1-4: predictor within reach, row, verdicts, then label propagation in the background."""
        n, me = self.run.n_devices, ctx.id
        reach = within_hops(self.run.graph, me, self.params.hops)
        state = yield from self.probe.train(ctx, 1)
        for j in reach:
            yield ctx.send(j, "rnd_predictor", {"state": state}, round=1, routed=True, share=True)
        got = yield from ctx.collect("rnd_predictor", 1, reach)
        held = {me: state, **{j: msg.payload["state"] for j, msg in got.items()}}
        row: np.ndarray = yield from self.probe.score(ctx, held, n)
        self.rows[me] = row
        verdict = compatible_row(row, me, self.params.threshold, criterion=self.params.criterion)
        for j in reach:
            yield ctx.send(j, "rnd_verdict", {"compatible": bool(verdict[j])}, round=1, routed=True)
        theirs = yield from ctx.collect("rnd_verdict", 1, reach)
        self.peers[me] = tuple(j for j in reach if verdict[j] and bool(theirs[j].payload["compatible"]))
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

    # ---- under dynamics: event-driven discovery that follows the neighbourhood ---------

    def discover_live(self, ctx: DeviceContext) -> Process:
        """Train the predictor, score it, offer it to the live reach, answer offers in the background."""
        me, n = ctx.id, self.run.n_devices
        state = yield from self.probe.train(ctx, 1)
        own = yield from self.probe.score(ctx, {me: state}, n)
        self.rows[me, me] = own[me]
        self._mine[me] = state
        self._sent[me] = set()
        self._theirs[me] = {}
        self.peers[me] = ()
        ctx.spawn(self.answer_predictors(ctx))
        reach = ctx.live_within(self.params.hops)
        yield from self.offer(ctx, reach)
        ctx.spawn(self.follow(ctx))
        reply = self.params.reply_timeout_s
        deadline = ctx.deadline(self.params.discovery_timeout_s or (reply if isinstance(reply, float) else 0.0))

        def record(msg: Message) -> None:  # every verdict counts, one from a device that came into reach since too
            self._theirs[me][msg.src] = bool(msg.payload["compatible"])

        # training starts at the deadline at the latest; later verdicts still count (``take_verdicts``)
        yield from ctx.collect("rnd_verdict", 1, reach, until=deadline, each=record)
        # ... and our own verdicts: a peer's verdict on us can come before we scored its predictor
        while ctx.now < deadline and np.isnan(self.rows[me, list(reach)]).any():
            self._scored[me] = ctx.signal()
            yield self._scored[me] | ctx.sleep(until=deadline)
        self._scored.pop(me, None)
        self._update_peers(ctx)
        ctx.spawn(self.take_verdicts(ctx))

    def offer(self, ctx: DeviceContext, to: tuple[int, ...]) -> Process:
        """Send our predictor to the devices in ``to`` that do not have it yet."""
        sent = self._sent[ctx.id]
        for j in to:
            if j not in sent:
                sent.add(j)
                yield ctx.send(j, "rnd_predictor", {"state": self._mine[ctx.id]}, round=1, routed=True,
                                share=True)

    def answer_predictors(self, ctx: DeviceContext) -> Process:
        """Score each new predictor, send our verdict on it, and offer ours back."""
        me, n = ctx.id, self.run.n_devices
        while True:
            msg: Message = yield ctx.recv("rnd_predictor")
            j = msg.src
            if np.isnan(self.rows[me, j]):
                row = yield from self.probe.score(ctx, {j: msg.payload["state"]}, n)
                self.rows[me, j] = row[j]
                waiting = self._scored.pop(me, None)
                if waiting is not None:
                    waiting.succeed()
            # (a predictor sent again means our verdict may have been lost: it is sent again, not rescored)
            ok = bool(compatible_row(self.rows[me], me, self.params.threshold, criterion=self.params.criterion)[j])
            ctx.send(j, "rnd_verdict", {"compatible": ok}, round=1, routed=True)
            self._update_peers(ctx)
            yield from self.offer(ctx, (j,))

    def take_verdicts(self, ctx: DeviceContext) -> Process:
        """Record what each peer decided about us."""
        while True:
            msg: Message = yield ctx.recv("rnd_verdict")
            self._theirs[ctx.id][msg.src] = bool(msg.payload["compatible"])
            self._update_peers(ctx)

    def follow(self, ctx: DeviceContext) -> Process:
        """Offer our predictor to whoever comes within reach; refresh the peers when the reach changes.

        A device we sent our predictor to that went out of reach before its verdict came may have
        lost the predictor (or the verdict): when it is back in reach we send the predictor again.
        """
        me = ctx.id
        out_of_touch: set[int] = set()
        while True:
            yield ctx.neighborhood_change()
            self._update_peers(ctx)
            reach = ctx.live_within(self.params.hops)
            waiting = self._sent[me] - self._theirs[me].keys()
            out_of_touch |= waiting - set(reach)
            again = sorted(out_of_touch & set(reach))
            out_of_touch -= set(again)
            self._sent[me] -= set(again)
            yield from self.offer(ctx, reach)

    def _update_peers(self, ctx: DeviceContext) -> None:
        """Peers = mutually compatible devices within live reach now."""
        me = ctx.id
        ok = compatible_row(self.rows[me], me, self.params.threshold, criterion=self.params.criterion)
        theirs = self._theirs[me]
        self.peers[me] = tuple(j for j in ctx.live_within(self.params.hops) if ok[j] and theirs.get(j, False))

    def live_federations(self) -> list[list[int]]:
        """Components of the mutually compatible links in reach now (scoring)."""
        return selection_components(self.run.n_devices, {i: list(p) for i, p in self.peers.items()})

    def round_finished(self, ctx: DeviceContext, r: int) -> None:
        if self.dynamic and self._finished.get(r) == self.run.n_devices:
            federations = self.live_federations()
            ctx.report_clusters(federations, round=r)  # the kernel logs their ARI
            labels = [0] * self.run.n_devices
            for f in federations:
                for d in f:
                    labels[d] = f[0]
            ctx.log("federation_labels", labels, round=r)

    # ---- gossip restricted to compatible peers (Gossip's push-pull, routed) ----------

    def candidate_peers(self, ctx: DeviceContext) -> tuple[int, ...]:
        """The device's mutually compatible peers (reached over routes when not adjacent); under
        dynamics those within live reach now."""
        if self.dynamic:
            self._update_peers(ctx)
        return tuple(self.peers[ctx.id])

    # ---- outputs ----------------------------------------------------------------------

    def clusters(self) -> Optional[list[list[int]]]:
        """Under dynamics the live federations at the end; else those of the settled labels."""
        if self.dynamic:
            return self.live_federations()
        return components_from_labels(self.labels) if len(self.labels) == self.run.n_devices else None

    def result(self) -> dict[str, Any]:
        if self.dynamic:
            scored = int((~np.isnan(self.rows)).sum() - np.isfinite(np.diag(self.rows)).sum())
            return {**self.exchange_counts(), "clustering_flops": self.probe.flops, "scored_pairs": scored}
        if len(self.labels) < self.run.n_devices:
            return {}
        return {
            "label_settled_t": self.label_settled_t,
            **self.exchange_counts(),
            "clustering_flops": self.probe.flops,
            "scored_pairs": int((~np.isnan(self.rows)).sum() - self.run.n_devices),
            "compatible_links": sum(len(p) for p in self.peers.values()) // 2,
            # What the centralized rule would give on the same (partial) matrix, for comparison.
            "clusters_centralized_rule": compatibility_clusters(self.rows, self.params.threshold,
                                                                criterion=self.params.criterion),
        }

    def novelty(self) -> Optional[tuple[np.ndarray, str]]:
        if np.isnan(np.diag(self.rows)).any():
            return None
        return self.rows, rf"RND gossip ({self.params.hops} hop): $u_{{ii}} - u_{{ij}}$"
