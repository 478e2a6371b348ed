"""IFCA (Ghosh et al., "An Efficient Framework for Clustered Federated Learning", NeurIPS 2020, Alg. 2).

As the Conditional-PCA paper runs it (App. K-A): the server keeps K cluster
models and broadcasts all K to every device each round (one message, K x
model bytes). A device scores each on its training data (E-step; charged as K
forward passes over its samples), picks the one with the lowest loss, trains
it and uploads it with its cluster id (8 bytes) and sample count. The server
averages each cluster's uploads weighted by samples; a cluster nobody chose
keeps its model. Cluster models start from independent random inits; with
``balanced_init`` (the reference code's initializer, off by default as in the
paper) the server probes the devices' choices (K models down, an 8-byte id up)
and redraws the inits, up to ``init_tries`` times, until every cluster gets at
least ceil(n / 2K) devices.

Each round's assignment is logged and reported as the round's clusters (the kernel logs
their adjusted Rand index against the true clusters); the summary's ``clusters`` and ``ari``
are the final assignment's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
from pydantic import Field
from torch import nn

from p2pfl.learning.aggregate import State, clone_state, weighted_average
from p2pfl.learning.stacked import average_losses
from p2pfl.learning.state import live_state, load_state_
from p2pfl.protocols.base import Process, Protocol, ProtocolParams

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext, ServerContext
    from p2pfl.sim.deferred import DeferredState
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["IFCA", "IFCAParams", "choose_cluster", "clusters_from_assignment", "is_balanced"]


class IFCAParams(ProtocolParams):
    n_clusters: int = Field(2, ge=1, description="K cluster models")
    balanced_init: bool = False
    init_tries: int = Field(10, ge=1)
    round_timeout_s: Optional[float] = Field(None, gt=0, description="stop waiting for updates after this long")


def choose_cluster(losses: list[float]) -> int:
    """E-step: the cluster whose model has the lowest training loss (ties: the lowest id)."""
    return int(np.argmin(np.asarray(losses, dtype=np.float64)))


def clusters_from_assignment(assignment: list[int], k: int) -> list[list[int]]:
    """Non-empty clusters as lists of device ids, in cluster-id order."""
    groups = [[d for d, c in enumerate(assignment) if c == q] for q in range(k)]
    return [g for g in groups if g]


def is_balanced(assignment: list[int], k: int) -> bool:
    """Every cluster holds at least ceil(n / 2K) devices."""
    need = math.ceil(len(assignment) / (2 * k))
    counts = np.bincount(np.asarray(assignment, dtype=np.int64), minlength=k)
    return bool(counts.min() >= need)


class IFCA(Protocol[IFCAParams]):
    """Iterative federated clustering through one server."""

    name = "ifca"
    Params = IFCAParams
    needs_server = True
    supports_dynamics = True
    summary = "IFCA: K cluster models broadcast, devices pick the lowest-loss one (K x download)"

    def __init__(self, params: IFCAParams, run: RunInfo) -> None:
        super().__init__(params, run)
        self.assignment: list[int] = []
        self.updates_missing = 0

    def deadline_fields(self) -> tuple[str, ...]:
        return ("round_timeout_s",)

    def init_models(self, draw: int) -> list[nn.Module]:
        """K independently initialised cluster models (draw ``draw`` of the init stream)."""
        return [self.run.build_model(self.run.seed_for("ifca.init", draw, k)) for k in range(self.params.n_clusters)]

    def server(self, ctx: ServerContext) -> Process:
        """Alg. 2, the server: broadcast the K models, average each cluster's uploads (M-step)."""
        p = self.params
        models = self.init_models(0)
        if p.balanced_init:
            models = yield from self.balanced_init(ctx, models)
        for r in range(1, p.rounds + 1):
            broadcast = {"states": [clone_state(live_state(m)) for m in models]}  # fresh, never changed: shared
            selected = ctx.live_neighbors
            for d in selected:
                ctx.send(d, "models", broadcast, round=r, share=True)
            got = yield from ctx.collect("update", r, selected, until=ctx.deadline(p.round_timeout_s))
            self.updates_missing += len(selected) - len(got)
            updates = {d: (m.payload["state"], float(m.payload["n_samples"]), int(m.payload["cluster"]))
                       for d, m in got.items()}
            for k in range(p.n_clusters):
                members = [(s, w) for s, w, c in updates.values() if c == k]
                if members:
                    load_state_(models[k], weighted_average(members))
            # a device whose update did not arrive keeps its previous cluster (initially 0)
            previous = self.assignment or [0] * len(ctx.devices)
            self.assignment = [updates[d][2] if d in updates else previous[i] for i, d in enumerate(ctx.devices)]
            ctx.log("assignment", list(self.assignment), round=r)
            ctx.report_clusters(clusters_from_assignment(self.assignment, p.n_clusters), round=r)
            if self.should_eval(r):
                for d, c in zip(ctx.devices, self.assignment):
                    ctx.evaluate_device(d, models[c], r)
            ctx.round_done(r)

    def balanced_init(self, ctx: ServerContext, models: list[nn.Module]) -> Process:
        """The reference code's initializer: redraw the K inits until every cluster gets at least
        ceil(n / 2K) devices' picks (under dynamics, of the picks that came by the round timeout)."""
        p = self.params
        for draw in range(p.init_tries):
            probe = {"states": [clone_state(live_state(m)) for m in models]}  # fresh, never changed: shared
            for d in ctx.devices:
                ctx.send(d, "probe", probe, share=True)
            got = yield from ctx.collect("probe_reply", 0, ctx.devices,
                                         until=ctx.deadline(p.round_timeout_s) if self.dynamic else None)
            picks = {d: int(m.payload["cluster"]) for d, m in got.items()}
            balanced = is_balanced([picks[d] for d in sorted(picks)], p.n_clusters)
            ctx.log("ifca_init_balanced", balanced, draw=draw)
            if balanced or draw == p.init_tries - 1:
                break
            models = self.init_models(draw + 1)
        return models

    def device(self, ctx: DeviceContext) -> Process:
        if not ctx.servers:
            return
        server = ctx.servers[0]
        work = ctx.new_model()
        if self.params.balanced_init:
            ctx.spawn(self.answer_probes(ctx, server))
        while True:
            msg = ctx.newest((yield ctx.recv("models")), "models")
            k = yield from self.estep(ctx, work, msg.payload["states"])
            load_state_(work, msg.payload["states"][k])
            state: DeferredState | State
            if ctx.defers_uploads:  # the outcome read when the server takes it (``work`` is loaded anew first)
                state = yield from ctx.deferred_train(work)
            else:
                yield from ctx.train(work)
                state = live_state(work)
            yield ctx.send(server, "update", {"state": state, "n_samples": ctx.n_samples, "cluster": k},
                           round=msg.round)

    def estep(self, ctx: DeviceContext, work: nn.Module, states: list[State]) -> Process:
        """Training loss of each cluster model (K forward passes over the shard, charged; run as one
        stacked pass, ``p2pfl.learning.stacked``); the argmin."""
        losses = average_losses(work, states, ctx.shard.train_x, ctx.shard.train_y)
        yield from ctx.compute(len(states) * ctx.forward_flops(work) * ctx.n_samples, "ifca_estep")
        return choose_cluster(losses)

    def answer_probes(self, ctx: DeviceContext, server: int) -> Process:
        work = ctx.new_model()
        while True:
            msg = yield ctx.recv("probe")
            k = yield from self.estep(ctx, work, msg.payload["states"])
            ctx.send(server, "probe_reply", {"cluster": k})

    def clusters(self) -> Optional[list[list[int]]]:
        return clusters_from_assignment(self.assignment, self.params.n_clusters) if self.assignment else None

    def result(self) -> dict[str, Any]:
        return {"updates_missing": self.updates_missing} if self.assignment and self.dynamic else {}
