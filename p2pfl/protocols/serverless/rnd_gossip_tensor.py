"""Serverless RND with ``hops: 1`` on a static fleet as a tensor program (``engine: tensor``; the protocol:
``rnd_gossip.py`` beside this file).

Discovery (the protocol's steps 1-4, once, before round 1's training), over the fleet's rows:

1. Every device embeds its training inputs with the frozen target (``target_embedding``, a device at a time, as
   the kernel's job does) and fits its predictor: the stacked fit (``fitted_predictors``, ``STACK_LIMIT`` devices at
   a time; within ``STACK_ATOL`` of the kernel's one-by-one fit, the batched executor's own), from the shared or
   its own initial predictor (``predictor_init``) and its own shuffle stream (``("rnd.shuffle", i, 1)``).
2. Each device scores its own and its neighbours' predictors on its data (``state_novelties``, the kernel's
   function: the same bits for the same predictors): its row of the novelty matrix, ``nan`` out of reach.
3. ``compatible_row`` (band or gap) on each row, and the mutual links: a device's peers are the neighbours it
   finds compatible that find it compatible.
4. Federations: the connected components of the mutual links (what the kernel's min-label propagation settles
   to). The propagation's messages are replayed event by event with the kernel's link arithmetic (each label
   message queued on its sender's uplink, delivered after its latency, handed to the device once its discovery
   is over), which gives their count and ``label_settled_t``; the replay leaves out the gossip models sharing
   those uplinks (a label waits behind a push in the kernel), so under a slow uplink the order of arrivals, and
   with it the count, can differ.

Then ``rounds`` rounds of the gossip program's exchange (``GossipRounds.exchange``) over the peer CSR: a device
with no compatible peer trains alone (``exchanges_without_peer``, one a round). Round 1 starts each device's
training when its discovery ends, by the kernel's arithmetic: the embedding and fit jobs, its predictor to each
neighbour one after another on its uplink, every neighbour's predictor in, the scoring job, its verdicts sent and
every verdict in. Bytes of the discovery (predictors, verdicts, labels) are the kernel's messages
(``p2pfl.maths.messages``), FLOPs ``rnd_flops`` (embedding, fit, scoring of 1 + degree predictors), charged to
round 1.

Not expressed (refused by field): ``protocol.hops`` > 1 (routed predictors and relay bytes), any ``dynamics:``
block (the kernel's discovery under dynamics is event-driven and follows the neighbourhood), and the gossip
program's own limits (``mode: sync``, ``exchange: push_pull``). The novelty matrix is not written as an artifact.
"""

from __future__ import annotations

import copy
import heapq
from typing import Any, Optional

import numpy as np
import torch

from p2pfl.clustering import compatibility_clusters
from p2pfl.clustering.compatibility import compatible_row
from p2pfl.clustering.rnd import (
    STACK_LIMIT,
    fitted_predictors,
    make_predictor,
    make_target,
    predictor_state_bytes,
    rnd_flops,
    state_novelties,
    target_embedding,
)
from p2pfl.maths.dac import Selection, selection_components
from p2pfl.maths.messages import message_size
from p2pfl.protocols.serverless.gossip_tensor import GossipRounds
from p2pfl.protocols.serverless.rnd_gossip import RNDGossipParams
from p2pfl.seeding import torch_generator
from p2pfl.sim.cost import tx_time_s
from p2pfl.tensor.data import FleetData
from p2pfl.tensor.program import Fleet, Round, ScenarioView

__all__ = ["RNDGossipRounds", "mutual_peers", "label_replay", "CENTRALIZED_RULE_DEVICES"]

#: Largest fleet whose summary has ``clusters_centralized_rule`` (the centralized rule on the N x N matrix, 800 MB at
#: 10^4 devices); above, None.
CENTRALIZED_RULE_DEVICES = 10_000


def mutual_peers(indptr: np.ndarray, indices: np.ndarray, verdict: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CSR of the mutually compatible links: entry ``k`` (``i -> indices[k]``) is kept where ``verdict[k]``
    (i finds j compatible) and the reverse entry's verdict hold (the CSR is symmetric, neighbours ascending)."""
    n = len(indptr) - 1
    src = np.repeat(np.arange(n), np.diff(indptr))
    dst = indices.astype(np.int64)
    key = src * n + dst
    rev = np.searchsorted(key, dst * n + src)  # the CSR is sorted by (source, neighbour)
    keep = verdict & verdict[rev]
    counts = np.bincount(src[keep], minlength=n)
    out = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out, dst[keep]


def label_replay(indptr: np.ndarray, indices: np.ndarray, ready: np.ndarray, tx_s: np.ndarray,
                 latency_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The kernel's asynchronous min-label propagation (``RNDGossip.propagate_labels``) over the peer CSR, event by
    event: device i, at ``ready[i]`` (its discovery over), sends its id to each peer; whenever a smaller label is
    handed to it (at its arrival, not before ``ready``) it adopts it and sends it to its peers but the sender. A
    message from i to its peer at CSR entry k leaves when i's uplink is free and takes ``tx_s[k]``, then
    ``latency_s``. Returns the final labels, the label messages each device sent and received, and the last time
    a label was adopted (0 if none)."""
    n = len(indptr) - 1
    labels = np.arange(n)
    sent = np.zeros(n, dtype=np.int64)
    received = np.zeros(n, dtype=np.int64)
    free = ready.astype(np.float64).copy()
    heap: list[tuple[float, int, int, int, int, int]] = []  # (time, kind: 0 start 1 hand-over, seq, dst, src, label)
    seq = 0
    for i in range(n):
        if indptr[i + 1] > indptr[i]:
            heap.append((float(ready[i]), 0, i, i, i, i))
    heapq.heapify(heap)
    seq = n
    settled = 0.0

    def send(i: int, t: float, label: int, skip: int) -> None:
        nonlocal seq
        for k in range(indptr[i], indptr[i + 1]):
            j = int(indices[k])
            if j == skip:
                continue
            start = max(t, free[i])
            free[i] = start + tx_s[k]
            sent[i] += 1
            received[j] += 1
            arrive = free[i] + latency_s
            seq += 1
            heapq.heappush(heap, (max(arrive, float(ready[j])), 1, seq, j, i, label))

    while heap:
        t, kind, _, dst, src, label = heapq.heappop(heap)
        if kind == 0:
            send(dst, t, dst, -1)
        elif label < labels[dst]:
            labels[dst] = label
            settled = max(settled, t)
            send(dst, t, label, src)
    return labels, sent, received, settled


class RNDGossipRounds(GossipRounds):
    """rnd_gossip, ``hops: 1``, static: discovery over the rows, then gossip among mutual peers (module docstring)."""

    supports_churn = False

    def __init__(self, params: RNDGossipParams, fleet: Fleet) -> None:
        super().__init__(params, fleet)
        n = fleet.n
        #: each device's score of its own predictor (s_ii), and of each neighbour's (s_ij, entry k of the
        #: topology's CSR): the kernel's ``rows`` without the N x N matrix (``novelty_matrix``)
        self.own_novelty = np.full(n, np.nan)
        self.novelty = np.full(len(fleet.adjacency.indices), np.nan)
        #: the discovery's traffic and FLOPs (``Round``: bytes per device by the kernel's messages), after round 1
        self.discovery: Optional[Round] = None
        self.peer_indptr = np.zeros(n + 1, dtype=np.int64)
        self.peer_indices = np.zeros(0, dtype=np.int64)
        self.labels = np.arange(n)
        self.label_settled_t = 0.0
        self.label_sent = np.zeros(n, dtype=np.int64)
        self.label_received = np.zeros(n, dtype=np.int64)
        self.clustering_flops = 0
        self.without_peer = 0

    @classmethod
    def unsupported(cls, scenario: ScenarioView) -> Optional[str]:
        p = scenario.protocol
        if p.hops != 1:
            return "protocol.hops: rnd_gossip runs with hops: 1 (routed predictors and their relay bytes are not expressed)"
        if scenario.dynamics is not None:
            return ("dynamics: rnd_gossip runs on a static fleet (its discovery under dynamics is event-driven and "
                    "follows the neighbourhood)")
        return super().unsupported(scenario)

    # ---- discovery ---------------------------------------------------------------------

    def discover(self) -> tuple[np.ndarray, np.ndarray]:
        """Steps 1-4: rows, verdicts, peers, labels; returns each device's discovery end (seconds) and FLOPs."""
        f, p, n = self.fleet, self.params, self.fleet.n
        adj = f.adjacency
        data = f.trainer.data
        shape = tuple(data.input_shape)
        seed = f.seed
        target = make_target(shape, seed=seed)
        template = make_predictor(shape, seed=seed).eval()
        shared = make_predictor(shape, seed=seed) if p.predictor_init == "shared" else None
        # step 1: embeddings (kept: N x samples x 64 floats) and the stacked fits, STACK_LIMIT devices at a time
        states: list[dict[str, torch.Tensor]] = []
        fx: list[torch.Tensor] = []
        for start in range(0, n, STACK_LIMIT):
            ids = range(start, min(start + STACK_LIMIT, n))
            x = [_inputs(data, i) for i in ids]
            e = [target_embedding(target, xi) for xi in x]
            calls = [(make_predictor(shape, seed=seed, node=i) if shared is None else copy.deepcopy(shared), xi, ei,
                      p.rnd_epochs, p.rnd_batch_size, p.rnd_lr, torch_generator(seed, "rnd.shuffle", i, 1))
                     for i, xi, ei in zip(ids, x, e)]
            states += [m.state_dict() for m in fitted_predictors(calls)]
            fx += e
        # steps 2-3: each device's row (its own and its neighbours' predictors, ascending ids as the kernel's
        # ``score``), its verdicts (``compatible_row`` on the row it holds), then the mutual links
        verdict = np.zeros(len(adj.indices), dtype=bool)
        for i in range(n):
            lo, hi = int(adj.indptr[i]), int(adj.indptr[i + 1])
            held = np.sort(np.r_[i, adj.indices[lo:hi]]).astype(np.int64)
            at = int(np.searchsorted(held, i))
            row = state_novelties(template, [states[j] for j in held], _inputs(data, i), fx[i])
            self.own_novelty[i] = row[at]
            self.novelty[lo:hi] = np.delete(row, at)
            verdict[lo:hi] = np.delete(compatible_row(row, at, p.threshold, criterion=p.criterion), at)
        self.peer_indptr, self.peer_indices = mutual_peers(adj.indptr, adj.indices, verdict)
        # time and FLOPs by the kernel's arithmetic
        samples = data.samples
        deg = adj.degree
        embed = rnd_flops(shape, samples, embed=True)
        fit = rnd_flops(shape, samples, epochs=p.rnd_epochs)
        score = np.array([rnd_flops(shape, samples, n_scored=int(d) + 1) for d in deg], dtype=np.float64)
        flops = embed + fit + score
        speed = f.flops_per_s
        fitted = (embed + fit) / speed
        src, dst = adj.sources, adj.indices.astype(np.int64)
        bw = np.minimum(np.minimum(f.link.bandwidth_bps, f.uplink_bps[src]), f.downlink_bps[dst])
        pred = message_size("rnd_gossip", "rnd_predictor", f.state_bytes, predictor_bytes=predictor_state_bytes(shape))
        scalar = message_size("rnd_gossip", "rnd_verdict", f.state_bytes)
        got, sent_done = _one_after_another(fitted, tx_time_s(pred, bw), src, dst, adj.indptr, n, f.link.latency_s)
        scored = np.maximum(got, sent_done) + score / speed
        got, sent_done = _one_after_another(scored, tx_time_s(scalar, bw), src, dst, adj.indptr, n, f.link.latency_s)
        ready = np.maximum(got, sent_done)
        ps = np.repeat(np.arange(n), np.diff(self.peer_indptr))
        label_bw = np.minimum(np.minimum(f.link.bandwidth_bps, f.uplink_bps[ps]), f.downlink_bps[self.peer_indices])
        self.labels, self.label_sent, self.label_received, self.label_settled_t = label_replay(
            self.peer_indptr, self.peer_indices, ready, np.asarray(tx_time_s(scalar, label_bw)), f.link.latency_s)
        self.clustering_flops = int(flops.sum())
        return ready, flops

    # ---- rounds ------------------------------------------------------------------------

    def round(self, r: int) -> Round:
        n = self.fleet.n
        start: Optional[np.ndarray] = None
        first: Optional[Round] = None
        if r == 1:
            start, flops = self.discover()
            first = self.discovery = self.discovery_traffic(flops)
        self.train_all()
        self.without_peer += int((np.diff(self.peer_indptr) == 0).sum())
        step = self.exchange(self.peer_indptr, self.peer_indices, start)
        if first is None:
            return step
        step.sent[:n] += first.sent
        step.received[:n] += first.received
        return Round(step.duration_s, step.sent, step.received, step.messages + first.messages,
                     {**first.by_kind, **step.by_kind}, step.trained, flops=first.flops)

    def discovery_traffic(self, flops: np.ndarray) -> Round:
        """The discovery's messages: a predictor and a verdict each way over every link, the label replay's."""
        f, adj = self.fleet, self.fleet.adjacency
        shape = tuple(f.trainer.data.input_shape)
        pred = message_size("rnd_gossip", "rnd_predictor", f.state_bytes, predictor_bytes=predictor_state_bytes(shape))
        scalar = message_size("rnd_gossip", "rnd_verdict", f.state_bytes)
        deg = adj.degree.astype(np.int64)
        # every label a device sends goes to a peer: received = what its peers sent it (replayed per message)
        sent = deg * (pred + scalar) + self.label_sent * scalar
        received = deg * (pred + scalar) + self.label_received * scalar
        links = int(deg.sum())
        labels = int(self.label_sent.sum())
        kinds = {"rnd_predictor": links * pred, "rnd_verdict": links * scalar}
        if labels:
            kinds["rnd_label"] = labels * scalar
        return Round(0.0, sent, received, 2 * links + labels, kinds, np.zeros(0, dtype=np.int64), flops=flops)

    # ---- outputs -----------------------------------------------------------------------

    def novelty_matrix(self) -> np.ndarray:
        """The N x N novelty matrix (nan: not scored), the kernel's ``RNDGossip.rows``."""
        adj, n = self.fleet.adjacency, self.fleet.n
        out = np.full((n, n), np.nan)
        out[adj.sources, adj.indices] = self.novelty
        out[np.arange(n), np.arange(n)] = self.own_novelty
        return out

    def clusters(self) -> list[list[int]]:
        """The federations: devices by their settled label (the components of the mutual links)."""
        groups: dict[int, list[int]] = {}
        for d in range(self.fleet.n):
            groups.setdefault(int(self.labels[d]), []).append(d)
        return sorted(groups.values(), key=lambda g: g[0])

    def components(self) -> list[list[int]]:
        """The connected components of the mutual links (``selection_components``): the labels' federations."""
        return selection_components(Selection(self.peer_indptr, self.peer_indices))

    def result(self) -> dict[str, Any]:
        p, n = self.params, self.fleet.n
        return {
            "label_settled_t": float(self.label_settled_t),
            "exchanges_failed": 0,
            "exchanges_without_peer": self.without_peer,
            "clustering_flops": self.clustering_flops,
            "scored_pairs": int(np.isfinite(self.novelty).sum()),
            "compatible_links": len(self.peer_indices) // 2,
            # the kernel's comparison on the (partial) N x N matrix: above CENTRALIZED_RULE_DEVICES, None
            "clusters_centralized_rule": None if n > CENTRALIZED_RULE_DEVICES else compatibility_clusters(
                self.novelty_matrix(), p.threshold, criterion=p.criterion),
        }


def _inputs(data: FleetData, i: int) -> torch.Tensor:
    """Device ``i``'s training inputs (the kernel's ``shard.train_x``)."""
    return data.x[torch.tensor([i])][0]


def _one_after_another(ready: np.ndarray, tx: np.ndarray, src: np.ndarray, dst: np.ndarray, indptr: np.ndarray,
                       n: int, latency_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Each device sends one message to each neighbour in id order from ``ready``, one after another on its uplink
    (``tx``: each CSR entry's seconds). Returns when each device has every neighbour's message in (``ready`` where
    it has none) and when its own last one has left."""
    run = np.cumsum(tx)
    before = np.repeat(np.r_[0.0, run][indptr[:-1]], np.diff(indptr))
    done = ready[src] + (run - before)
    got = ready.copy()
    np.maximum.at(got, dst, done + latency_s)
    last = ready.copy()
    np.maximum.at(last, src, done)
    return got, last
