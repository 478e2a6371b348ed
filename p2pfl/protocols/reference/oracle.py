"""Oracle (Conditional-PCA paper, App. B-A): one FedAvg federation per ground-truth cluster.

The upper reference for clustering methods: each device announces its true
cluster once (an 8-byte ``join``; this is the only protocol that reads
``ctx.true_cluster``), then the server runs FedAvg separately within every
cluster: each device receives its cluster's model, trains it and uploads it;
the server averages per cluster, weighted by samples. Bytes are FedAvg's plus
the joins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from p2pfl.clustering import adjusted_rand_index
from p2pfl.learning.aggregate import clone_state, weighted_average
from p2pfl.learning.state import live_state, load_state_
from p2pfl.protocols.base import Process
from p2pfl.protocols.server.collect import collect_round
from p2pfl.protocols.server.fedavg import FedAvgBase, FedAvgParams, select_clients

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext, ServerContext
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["Oracle"]


class Oracle(FedAvgBase[FedAvgParams]):
    """FedAvg within each true cluster, through one server (client fraction and round timeout as FedAvg's)."""

    name = "oracle"
    Params = FedAvgParams
    needs_server = True
    summary = "reference: FedAvg within each ground-truth cluster (knows the clusters)"

    def __init__(self, params: FedAvgParams, run: RunInfo) -> None:
        super().__init__(params, run)
        self.groups: dict[int, list[int]] = {}

    def server(self, ctx: ServerContext) -> Process:
        p = self.params
        cluster_of: dict[int, int] = {}
        deadline = None if not self.dynamic else ctx.now + (p.round_timeout_s or 0.0)
        while len(cluster_of) < len(ctx.devices):
            msg = yield ctx.recv("join", timeout=None if deadline is None else max(deadline - ctx.now, 0.0))
            if msg is None:  # under dynamics some joins were dropped: the reference knows the clusters anyway
                cluster_of.update({d: self.run.true_clusters[d] for d in ctx.devices if d not in cluster_of})
                break
            cluster_of[msg.src] = int(msg.payload["cluster"])
        for d in sorted(cluster_of):
            self.groups.setdefault(cluster_of[d], []).append(d)
        self.groups = dict(sorted(self.groups.items()))
        models = {c: self.make_model(ctx) for c in self.groups}
        for r in range(1, p.rounds + 1):
            selected = select_clients(ctx.live_neighbors, p.client_fraction, ctx.rng)
            states = {c: clone_state(live_state(m)) for c, m in models.items()}
            for d in selected:
                ctx.send(d, "model", {"state": states[cluster_of[d]]}, round=r)
            got = yield from collect_round(ctx, "update", r, selected, p.round_timeout_s)
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
        if not ctx.servers:
            return
        yield ctx.send(ctx.servers[0], "join", {"cluster": ctx.true_cluster})
        yield from super().device(ctx)

    def result(self) -> dict[str, Any]:
        clusters = [members for _, members in sorted(self.groups.items())]
        if not clusters:
            return {}
        return {"clusters": clusters, "ari": adjusted_rand_index(list(self.run.true_clusters), clusters)}
