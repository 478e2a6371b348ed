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

Restarts (``restarts`` = r > 1; the paper's experiments, as its abstract puts it: IFCA "can succeed even if we
relax the requirements on initialization with random initialization and multiple restarts"): r independent random
initialisations of the K models, each run for ``rounds`` rounds, one after another in simulated time (round
numbers go on: restart i holds rounds i R + 1 .. (i + 1) R). Running them side by side would save nothing: a
round is bound by the server's serialized uplink (N x K models), which r parallel restarts would share. Every
restart's bytes, FLOPs and time are charged. The run keeps the restart with the lowest **training loss**: the
mean, over the devices whose last update of the restart arrived, of the E-step loss of the cluster model each
chose in the restart's last round (the models that round broadcast, scored on the device's whole training
shard before it trains: the objective IFCA minimises in the paper's problem formulation, each device's loss at
its best cluster model).
Each device sends that loss with the restart's last update (8 bytes more, charged); the server learns nothing
else. Ties and restarts without a report go to the earliest. Evaluation follows each restart's own models, except
the run's last evaluation, which scores the kept restart's final models with its assignment; the summary's
``clusters``/``ari`` are the kept restart's. ``ifca_restarts`` (the summary) lists each restart's loss, devices
reporting and the kept one; the kernel scores each restart's final clusters against the truth
(``restart_scores``: ARI, groups merged; ``Protocol.restart_clusters``). With r = 1 nothing of this happens
and the run is today's IFCA, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
from pydantic import Field
from torch import nn

from p2pfl.learning.aggregate import State, clone_state, weighted_average
from p2pfl.learning.stacked import average_losses
from p2pfl.learning.state import live_state, load_state_
from p2pfl.maths.clusters import choose_cluster, clusters_from_assignment
from p2pfl.protocols.base import Process, Protocol, ProtocolParams

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext, ServerContext
    from p2pfl.sim.deferred import DeferredState
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["IFCA", "IFCAParams", "choose_cluster", "clusters_from_assignment", "is_balanced", "kept_restart"]


class IFCAParams(ProtocolParams):
    n_clusters: int = Field(2, ge=1, description="K cluster models")
    balanced_init: bool = False
    init_tries: int = Field(10, ge=1)
    round_timeout_s: Optional[float] = Field(None, gt=0, description="stop waiting for updates after this long")
    restarts: int = Field(1, ge=1, description="r random initialisations of the K models, run one after another "
                                               "for `rounds` rounds each; the lowest training loss is kept")


def kept_restart(losses: list[float]) -> int:
    """The restart to keep: the lowest training loss (a nan, e.g. no device reported, counts as +inf; ties: the
    earliest)."""
    values = np.asarray(losses, dtype=np.float64)
    return int(np.argmin(np.where(np.isnan(values), np.inf, values)))


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
    tensor_program = "p2pfl.protocols.server.ifca_tensor:IFCARounds"
    current_models = True

    def __init__(self, params: IFCAParams, run: RunInfo) -> None:
        super().__init__(params, run)
        self.assignment: list[int] = []
        self.updates_missing = 0
        #: per restart (restarts > 1): the mean reported training loss, how many devices reported it, its final
        #: assignment
        self.restart_losses: list[float] = []
        self.restart_reports: list[int] = []
        self.restart_assignments: list[list[int]] = []
        self.kept: Optional[int] = None
        #: what the server scores the devices with now: the cluster models and each device's cluster (a device
        #: not heard from yet: cluster 0), as the last round (or the initialisation) left them
        self.scoring: tuple[list[nn.Module], dict[int, int]] = ([], {})

    def current_model(self, device: int) -> Optional[nn.Module]:
        """The model of the device's cluster, as the server evaluates it: the current restart's cluster models (the
        kept restart's at the run's last round) and the device's latest pick."""
        models, cluster = self.scoring
        return models[cluster.get(device, 0)] if models else None

    def deadline_fields(self) -> tuple[str, ...]:
        return ("round_timeout_s",)

    def progress_total(self) -> int:
        return super().progress_total() * self.params.restarts

    def init_models(self, draw: int, restart: int = 0) -> list[nn.Module]:
        """K independently initialised cluster models (draw ``draw`` of restart ``restart``'s init stream; restart
        0 is the one-initialisation run's)."""
        k = self.params.n_clusters
        if restart == 0:
            return [self.run.build_model(self.run.seed_for("ifca.init", draw, q)) for q in range(k)]
        return [self.run.build_model(self.run.seed_for("ifca.restart", restart, draw, q)) for q in range(k)]

    def reports_loss(self, round: int) -> bool:
        """Does a device send its E-step loss with this round's update? In the last round of each restart, when
        there are several."""
        return self.params.restarts > 1 and round % self.params.rounds == 0

    def server(self, ctx: ServerContext) -> Process:
        """Alg. 2, the server: broadcast the K models, average each cluster's uploads (M-step); with restarts, the
        whole of it once per initialisation, keeping the lowest training loss."""
        kept: list[nn.Module] = []
        for restart in range(self.params.restarts):
            models = yield from self.one_run(ctx, restart, kept)
            if self.kept == restart:
                kept = models

    def one_run(self, ctx: ServerContext, restart: int, kept: list[nn.Module]) -> Generator[Any, Any, list[nn.Module]]:
        """One initialisation's ``rounds`` rounds (rounds ``restart R + 1 .. (restart + 1) R``); its final models.
        ``kept``: the best earlier restart's final models (for the run's last evaluation)."""
        p = self.params
        models = self.init_models(0, restart)
        self.scoring = (models, {})
        if p.balanced_init:
            models = yield from self.balanced_init(ctx, models, restart)
            self.scoring = (models, {})
        first = restart * p.rounds
        if restart:
            self.assignment = []  # a restart starts from nothing: a device not heard from is in cluster 0
        losses: dict[int, float] = {}
        for r in range(first + 1, first + p.rounds + 1):
            broadcast = {"states": [clone_state(live_state(m)) for m in models]}  # fresh, never changed: shared
            selected = ctx.live_neighbors
            for d in selected:
                ctx.send(d, "models", broadcast, round=r, share=True)
            got = yield from ctx.collect("update", r, selected, until=ctx.deadline(p.round_timeout_s))
            self.updates_missing += len(selected) - len(got)
            updates = {d: (m.payload["state"], float(m.payload["n_samples"]), int(m.payload["cluster"]))
                       for d, m in got.items()}
            if self.reports_loss(r):
                losses = {d: float(m.payload["loss"]) for d, m in got.items()}
            for k in range(p.n_clusters):
                members = [(s, w) for s, w, c in updates.values() if c == k]
                if members:
                    load_state_(models[k], weighted_average(members))
            # a device whose update did not arrive keeps its previous cluster (initially 0)
            previous = self.assignment or [0] * len(ctx.devices)
            self.assignment = [updates[d][2] if d in updates else previous[i] for i, d in enumerate(ctx.devices)]
            ctx.log("assignment", list(self.assignment), round=r)
            ctx.report_clusters(clusters_from_assignment(self.assignment, p.n_clusters), round=r)
            evaluated, assignment = models, self.assignment
            if self.reports_loss(r):
                evaluated, assignment = self.keep(ctx, restart, losses, models, kept)
            self.scoring = (evaluated, dict(zip(ctx.devices, assignment)))
            if self.should_eval(r - first):
                for d, c in zip(ctx.devices, assignment):
                    ctx.evaluate_device(d, evaluated[c], r)
            ctx.round_done(r)
        if p.restarts > 1 and restart == p.restarts - 1:
            assert self.kept is not None
            self.assignment = self.restart_assignments[self.kept]
        return models

    def keep(self, ctx: ServerContext, restart: int, losses: dict[int, float], models: list[nn.Module],
             kept: list[nn.Module]) -> tuple[list[nn.Module], list[int]]:
        """A restart's end: its training loss (the mean of the devices' reports; nan without any), and the kept
        restart so far. Returns what this round evaluates: the restart's own models and assignment, or at the
        run's last round the kept restart's."""
        loss = math.fsum(losses.values()) / len(losses) if losses else math.nan
        self.restart_losses.append(loss)
        self.restart_reports.append(len(losses))
        self.restart_assignments.append(list(self.assignment))
        self.kept = kept_restart(self.restart_losses)
        ctx.log("ifca_restart_loss", None if math.isnan(loss) else loss, restart=restart, devices=len(losses))
        if restart < self.params.restarts - 1 or self.kept == restart:
            return models, self.assignment
        return kept, self.restart_assignments[self.kept]

    def balanced_init(self, ctx: ServerContext, models: list[nn.Module], restart: int = 0) -> Process:
        """The reference code's initializer: redraw the K inits until every cluster gets at least
        ceil(n / 2K) devices' picks (under dynamics, of the picks that came by the round timeout)."""
        p = self.params
        for draw in range(p.init_tries):
            self.scoring = (models, {})  # the draw being probed
            probe = {"states": [clone_state(live_state(m)) for m in models]}  # fresh, never changed: shared
            for d in ctx.devices:
                ctx.send(d, "probe", probe, share=True)
            got = yield from ctx.collect("probe_reply", 0, ctx.devices,
                                         until=ctx.deadline(p.round_timeout_s) if self.dynamic else None)
            picks = {d: int(m.payload["cluster"]) for d, m in got.items()}
            balanced = is_balanced([picks[d] for d in sorted(picks)], p.n_clusters)
            ctx.log("ifca_init_balanced", balanced, draw=draw, **({"restart": restart} if p.restarts > 1 else {}))
            if balanced or draw == p.init_tries - 1:
                break
            models = self.init_models(draw + 1, restart)
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
            k, loss = yield from self.scored_estep(ctx, work, msg.payload["states"])
            load_state_(work, msg.payload["states"][k])
            state: DeferredState | State
            if ctx.defers_uploads:  # the outcome read when the server takes it (``work`` is loaded anew first)
                state = yield from ctx.deferred_train(work)
            else:
                yield from ctx.train(work)
                state = live_state(work)
            update: dict[str, Any] = {"state": state, "n_samples": ctx.n_samples, "cluster": k}
            if self.reports_loss(msg.round):
                update["loss"] = loss  # the restart's training loss, as this device measured it
            yield ctx.send(server, "update", update, round=msg.round)

    def estep(self, ctx: DeviceContext, work: nn.Module, states: list[State]) -> Process:
        """Training loss of each cluster model (K forward passes over the shard, charged; run as one
        stacked pass, ``p2pfl.learning.stacked``); the argmin."""
        k, _ = yield from self.scored_estep(ctx, work, states)
        return k

    def scored_estep(self, ctx: DeviceContext, work: nn.Module, states: list[State]
                     ) -> Generator[Any, Any, tuple[int, float]]:
        """``estep``, and the chosen model's training loss (what a device reports at a restart's end)."""
        losses = average_losses(work, states, ctx.shard.train_x, ctx.shard.train_y)
        yield from ctx.compute(len(states) * ctx.forward_flops(work) * ctx.n_samples, "ifca_estep")
        k = choose_cluster(losses)
        return k, float(losses[k])

    def answer_probes(self, ctx: DeviceContext, server: int) -> Process:
        work = ctx.new_model()
        while True:
            msg = yield ctx.recv("probe")
            k = yield from self.estep(ctx, work, msg.payload["states"])
            ctx.send(server, "probe_reply", {"cluster": k})

    def clusters(self) -> Optional[list[list[int]]]:
        return clusters_from_assignment(self.assignment, self.params.n_clusters) if self.assignment else None

    def restart_clusters(self) -> Optional[list[list[list[int]]]]:
        """Each restart's final clusters (restarts > 1), for the kernel to score."""
        if self.params.restarts == 1 or not self.restart_assignments:
            return None
        return [clusters_from_assignment(a, self.params.n_clusters) for a in self.restart_assignments]

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"updates_missing": self.updates_missing} if self.assignment and self.dynamic else {}
        if self.params.restarts > 1:
            out["ifca_restarts"] = {"loss": [None if math.isnan(v) else v for v in self.restart_losses],
                                    "devices_reporting": self.restart_reports,
                                    "kept": self.kept}
        return out
