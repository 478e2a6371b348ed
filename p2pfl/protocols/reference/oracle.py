"""Oracle (Conditional-PCA paper, Sec. IV / App. B-A): one model per ground-truth cluster.

The upper reference for clustering methods, the only protocol that reads
``ctx.true_cluster``. Two modes:

- ``mode: pooled`` (the paper's Oracle: "trains one separate model per
  ground-truth cluster, pooling data within each cluster"): each cluster's first
  device acts as the cluster's data centre and trains one model on the pooled
  training data of the cluster's devices (``rounds`` x ``training.epochs`` epochs,
  charged to it; 0 bytes, as for Centralized and pooled Conditional); every
  device is scored with its cluster's model. ``held_out_per_cluster`` leaves
  devices out of the pooled data (``pooled.py``).
- ``mode: federated`` (default; the federated counterpart, to compare with
  federated methods): each device announces its true cluster once (an 8-byte
  ``join``), then the server runs FedAvg separately within every cluster: each
  device receives its cluster's model, trains it and uploads it; the server
  averages per cluster, weighted by samples. Bytes are FedAvg's plus the joins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import Field

from p2pfl.learning.aggregate import clone_state, weighted_average
from p2pfl.learning.state import live_state, load_state_
from p2pfl.protocols.base import Process
from p2pfl.protocols.reference.pooled import HELD_OUT_HELP, held_out_devices, pooled_xy
from p2pfl.protocols.server.fedavg import FedAvgBase, FedAvgParams, select_clients

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from p2pfl.sim.context import DeviceContext, ServerContext
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["Oracle", "OracleParams"]


class OracleParams(FedAvgParams):
    mode: Literal["federated", "pooled"] = Field(
        "federated", description="federated: FedAvg within each cluster via the server; pooled: the paper's "
                                 "Oracle, one model per cluster trained on the cluster's pooled data")
    held_out_per_cluster: int = Field(0, ge=0, description=f"mode pooled only: {HELD_OUT_HELP}")


class Oracle(FedAvgBase[OracleParams]):
    """One model per true cluster: FedAvg within the cluster through one server, or pooled training."""

    name = "oracle"
    Params = OracleParams
    needs_server = True
    serverless_option = True
    summary = "reference: one model per ground-truth cluster, FedAvg within it or pooled (knows the clusters)"
    tensor_program = "p2pfl.protocols.reference.oracle_tensor:OracleRounds"
    current_models = True

    def __init__(self, params: OracleParams, run: RunInfo) -> None:
        super().__init__(params, run)
        self.held_out = held_out_devices(run, params.held_out_per_cluster, pooled=params.mode == "pooled")
        self.groups: dict[int, list[int]] = {}
        #: each true cluster's model (the server's, or the cluster's data centre's in mode pooled)
        self.cluster_models: dict[int, nn.Module] = {}

    def current_model(self, device: int) -> Optional[nn.Module]:
        """Its cluster's model, as the last round left it (every device is scored with it)."""
        return self.cluster_models.get(self.run.true_clusters[device])

    def requires_server(self) -> bool:
        return self.params.mode == "federated"

    def deadline_fields(self) -> tuple[str, ...]:
        return super().deadline_fields() if self.params.mode == "federated" else ()

    def progress_total(self) -> int:
        if self.params.mode == "pooled":
            return self.params.rounds * len(set(self.run.true_clusters))
        return super().progress_total()

    def server(self, ctx: ServerContext) -> Process:
        if self.params.mode == "pooled":
            return
        p = self.params
        # the common initial model per cluster, made before the joins come (the same bits): a device's model then
        models = self.cluster_models = {c: self.make_model(ctx)
                                        for c in sorted({self.run.true_clusters[d] for d in ctx.devices})}
        got = yield from ctx.collect("join", 0, ctx.devices,
                                     until=ctx.deadline(p.round_timeout_s or 0.0) if self.dynamic else None)
        cluster_of = {d: int(m.payload["cluster"]) for d, m in got.items()}
        # under dynamics some joins were dropped: the reference knows the clusters anyway
        cluster_of.update({d: self.run.true_clusters[d] for d in ctx.devices if d not in cluster_of})
        for d in sorted(cluster_of):
            self.groups.setdefault(cluster_of[d], []).append(d)
        self.groups = dict(sorted(self.groups.items()))
        models = self.cluster_models = {c: models[c] if c in models else self.make_model(ctx)
                                        for c in self.groups}
        for r in range(1, p.rounds + 1):
            selected = select_clients(ctx.live_neighbors, p.client_fraction, ctx.rng)
            states = {c: clone_state(live_state(m)) for c, m in models.items()}
            for d in selected:
                ctx.send(d, "model", {"state": states[cluster_of[d]]}, round=r)
            got = yield from ctx.collect("update", r, selected, until=ctx.deadline(p.round_timeout_s))
            self.updates_missing += len(selected) - len(got)
            updates = {d: (m.payload["state"], float(m.payload["n_samples"])) for d, m in got.items()}
            for c, members in self.groups.items():
                ups = [updates[d] for d in members if d in updates]
                if ups:
                    load_state_(models[c], weighted_average(ups))
            if self.should_eval(r):
                for d in ctx.devices:
                    ctx.evaluate_device(d, models[cluster_of[d]], r)
            ctx.round_done(r)

    def device(self, ctx: DeviceContext) -> Process:
        if self.params.mode == "pooled":
            yield from self.pooled_device(ctx)
            return
        if not ctx.servers:
            return
        yield ctx.send(ctx.servers[0], "join", {"cluster": ctx.true_cluster})
        yield from super().device(ctx)

    def pooled_device(self, ctx: DeviceContext) -> Process:
        """The cluster's first training device, as its data centre, trains on the cluster's pooled data."""
        clusters = self.run.true_clusters
        members = [d for d in self.run.device_ids if clusters[d] == ctx.true_cluster]
        trainers = [d for d in members if d not in self.held_out]
        if ctx.id != trainers[0]:
            return
        self.groups[ctx.true_cluster] = members
        x, y = pooled_xy(ctx.pooled_shards(), trainers)
        model = self.cluster_models[ctx.true_cluster] = ctx.new_model()
        for r in range(1, self.params.rounds + 1):
            yield from ctx.train(model, x=x, y=y)
            if self.should_eval(r):
                for d in members:
                    ctx.evaluate_device(d, model, r)
            ctx.round_done(r)

    def clusters(self) -> Optional[list[list[int]]]:
        return [members for _, members in sorted(self.groups.items())] or None

    def result(self) -> dict[str, Any]:
        return {"held_out": list(self.held_out)} if self.groups and self.held_out else {}
