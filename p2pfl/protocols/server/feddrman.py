"""FedDRMan (Pal et al., 2026, "Federated Subspace Guided Vision-Language-Action Policy
Distillation for Non-IID Multi-Robot Manipulation"), Sec. III.

Device (Sec. III-B): the server model received this round is copied into a frozen teacher; the
student minimises  L_BC + sum_m lambda_m L_sub^m + lambda_act L_act  (Eq. 8): GMM negative
log-likelihood (Eq. 4), symmetric rank-r subspace distillation of each modality's features
(Eq. 5-6) and action-distribution distillation on teacher samples (Eq. 7).

Server (Sec. III-C): Compatible Update Aggregation groups clients by the cosine similarity of
their accumulated updates from the common initialisation on a submodule Omega (Eq. 10-11),
keeps one persistent model per group and averages complete models within it by samples
(Eq. 12); Spectral Rebalancing lifts the weak singular values of each eligible 2-D block of the
cluster update (Eq. 13-14). Every term and both server steps switch off from YAML (Table III).
The maths are pure functions: distillation losses in ``p2pfl.learning.distill``, CUA in
``p2pfl.clustering.cua``, spectral rebalancing in ``p2pfl.learning.spectral``.

Deviation: the paper's subspace rank is 48 (Sec. IV-A) with batch 32; its text features are one
per sample (N = B = 32), and with our one-step history so are the others, so a rank-48 projector
keeps every feature vector and Eq. 6 degenerates to plain feature matching. The default rank is 16
and a rank not below ``training.batch_size`` is refused.

Modalities (Sec. III-B): M = {text, agent, wrist, joint, gripper}. The wrist camera exists where the
data has it (LIBERO demos with ``data.partition.wrist: true``); the generated suites render the agent
view only, so there the wrist weight has no features to act on and is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, cast

import torch
from pydantic import Field, field_validator
from torch import nn

from p2pfl.clustering.cua import cua_partition, match_clusters, update_similarity
from p2pfl.errors import ConfigError
from p2pfl.learning.aggregate import State, clone_state, weighted_average
from p2pfl.learning.distill import action_distillation, subspace_distillation
from p2pfl.learning.spectral import rebalance_update
from p2pfl.learning.state import live_state, load_state_
from p2pfl.learning.train import BatchLoss
from p2pfl.protocols.base import Process
from p2pfl.protocols.server.fedavg import FedAvgBase, FedAvgParams, select_clients
from p2pfl.robotics.gmm import gmm_nll

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.robotics.policy import ResNetTPolicy
    from p2pfl.sim.context import DeviceContext, ServerContext
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["FedDRMan", "FedDRManParams", "aggregate_clusters"]


class FedDRManParams(FedAvgParams):
    n_clusters: int = Field(1, ge=1, description="C: 1 same-suite, 2 pairwise cross-suite, 3 three suites")
    cua: bool = Field(True, description="compatible update aggregation (off: one global model)")
    srb: bool = Field(True, description="spectral rebalancing of cluster updates")
    beta: float = Field(0.9, ge=0, le=1, description="cumulative singular-value threshold (Eq. 14)")
    sub_loss: bool = True
    act_loss: bool = True
    lambda_sub: dict[str, float] = Field(default_factory=lambda: {"text": 0.03, "agent": 0.03, "wrist": 0.03, "joint": 0.03,
                                                                  "gripper": 0.03},
                                         description="lambda_m per modality (Sec. IV-A: 0.03 for language, vision and "
                                                     "proprioception); wrist acts only where the policy has the camera")
    lambda_act: float = Field(0.005, ge=0)
    rank: int = Field(16, ge=1, description="subspace rank r_m, below training.batch_size (the paper's 48 exceeds "
                                          "the 32 text features of its batches; see the class docstring)")
    feature_noise: float = Field(0.01, ge=0, description="std of the pre-SVD perturbation")
    omega: str = Field("temporal.", description="parameter-name prefix of the clustering submodule Omega")

    @field_validator("lambda_sub")
    @classmethod
    def _modalities(cls, v: dict[str, float]) -> dict[str, float]:
        from p2pfl.robotics.policy import MODALITIES

        bad = [k for k in v if k not in MODALITIES]
        if bad:
            raise ValueError(f"lambda_sub: {bad[0]!r} is not a modality; use {', '.join(MODALITIES)}")
        if any(w < 0 for w in v.values()):
            raise ValueError("lambda_sub: weights must be >= 0")
        return v


def aggregate_clusters(cluster_states: list[State], updates: dict[int, tuple[State, float]], groups: list[list[int]],
                       cluster_ids: list[int], *, srb: bool, beta: float, eligible) -> list[State]:
    """Eq. 12-14: sample-weighted average within each group, SRB on its update, new cluster states."""
    out: list[State] = [dict(s) for s in cluster_states]
    for members, cid in zip(groups, cluster_ids):
        avg = weighted_average([updates[k] for k in members])
        base = cluster_states[cid]
        delta = {k: avg[k] - base[k] if torch.is_floating_point(base[k]) else avg[k] for k in base}
        if srb:
            delta = rebalance_update(delta, beta, lambda k, v: torch.is_floating_point(v) and eligible(k, v))
        out[cid] = {k: base[k] + delta[k] if torch.is_floating_point(base[k]) else avg[k].clone() for k in base}
    return out


class FedDRMan(FedAvgBase[FedDRManParams]):
    """Server-guided subspace/action distillation with compatible, spectrally rebalanced aggregation."""

    name = "feddrman"
    Params = FedDRManParams
    needs_server = True
    summary = "FedDRMan: subspace + action distillation, compatible update aggregation, spectral rebalancing"

    def __init__(self, params: FedDRManParams, run: RunInfo) -> None:
        super().__init__(params, run)
        batch = run.training.batch_size
        if params.sub_loss and params.rank >= batch:
            raise ConfigError(f"field 'protocol.rank': {params.rank} is not below training.batch_size {batch}; a batch "
                              f"has {batch} feature vectors per modality (text; B x history for the others), so the "
                              "rank-r projector would keep them all and the subspace loss (Eq. 6) would degenerate to "
                              f"feature matching; set protocol.rank below {batch}, e.g. {max(1, batch // 2)}")
        self.groups: list[list[int]] = []
        self.assignment: dict[int, int] = {}

    # --- server ------------------------------------------------------------------------------
    def server(self, ctx: ServerContext) -> Process:
        p = self.params
        probe = self.make_model(ctx)
        if not hasattr(probe, "encode"):
            raise ConfigError("protocol feddrman needs a policy with per-modality features (model robot_policy, data robotics)")
        init = clone_state(probe.state_dict())
        c = p.n_clusters if p.cua else 1
        clusters = [clone_state(init) for _ in range(c)]
        scratch = [self.make_model(ctx) for _ in range(c)]
        assign = {d: 0 for d in ctx.devices}
        omega = [k for k in init if k.startswith(p.omega)] or None
        eligible = getattr(probe, "srb_eligible", lambda k, v: v.ndim == 2)
        for r in range(1, p.rounds + 1):
            selected = select_clients(ctx.live_neighbors, p.client_fraction, ctx.rng)
            for d in selected:
                ctx.send(d, "model", {"state": clusters[assign[d]]}, round=r)
            got = yield from ctx.collect("update", r, selected, until=ctx.deadline(p.round_timeout_s))
            self.updates_missing += len(selected) - len(got)
            updates = {d: (m.payload["state"], float(m.payload["n_samples"])) for d, m in got.items()}
            if updates:
                ids = sorted(updates)
                k_eff = min(c, len(ids))
                if k_eff > 1:
                    sim = update_similarity([updates[i][0] for i in ids], init, omega)
                    local = cua_partition(sim, k_eff, rng=ctx.rng)
                    groups = [[ids[j] for j in g] for g in local]
                    ctx.log("cua_similarity", sim.round(4).tolist(), round=r, clients=ids)
                else:
                    groups = [ids]
                cids = match_clusters(groups, {d: assign[d] for d in ids if r > 1}, c)
                clusters = aggregate_clusters(clusters, updates, groups, cids, srb=p.srb, beta=p.beta, eligible=eligible)
                for g, cid in zip(groups, cids):
                    for d in g:
                        assign[d] = cid
                self.groups = [sorted(g) for g in groups]
                self.assignment = dict(assign)
                ctx.log("cua_groups", [sorted(g) for g in groups], round=r)
            if self.should_eval(r):
                for cid, m in enumerate(scratch):
                    load_state_(m, clusters[cid])
                for d in self.run.device_ids:
                    ctx.evaluate_device(d, scratch[assign.get(d, 0)], r)
            ctx.round_done(r)

    # --- device ------------------------------------------------------------------------------
    def device(self, ctx: DeviceContext) -> Process:
        if not ctx.servers:
            return
        model, teacher = self.make_model(ctx), cast("ResNetTPolicy", self.make_model(ctx))
        teacher.requires_grad_(False)
        teacher.eval()
        server = ctx.servers[0]
        while True:
            msg = ctx.newest((yield ctx.recv("model")), "model")
            load_state_(model, msg.payload["state"])
            load_state_(teacher, msg.payload["state"])  # Eq. 3: frozen teacher = this round's server model
            gen = torch.Generator()
            gen.manual_seed(int(ctx.rng.integers(2**62)))
            result = yield from ctx.train(model, loss=self.local_loss(teacher, gen))
            if self._uses_teacher():
                yield from ctx.compute(ctx.forward_flops(teacher) * result.samples, "distill")
            yield ctx.send(server, "update", {"state": live_state(model), "n_samples": ctx.n_samples}, round=msg.round)

    def _uses_teacher(self) -> bool:
        p = self.params
        return (p.sub_loss and any(v > 0 for v in p.lambda_sub.values())) or (p.act_loss and p.lambda_act > 0)

    def local_loss(self, teacher: ResNetTPolicy, gen: Optional[torch.Generator] = None) -> BatchLoss:
        """Eq. 8 as a batch loss ``loss(student, x, y)``."""
        return DistillationLoss(self.params, teacher if self._uses_teacher() else None, gen)

    def clusters(self) -> Optional[list[list[int]]]:
        if not self.groups:
            return None
        if sum(len(g) for g in self.groups) < self.run.n_devices:  # the last round heard from some devices only:
            by: dict[int, list[int]] = {}  # every device in the cluster it was last assigned to
            for d in self.run.device_ids:
                by.setdefault(self.assignment.get(d, 0), []).append(d)
            return sorted(by.values())
        return self.groups

    def result(self) -> dict[str, Any]:
        return {"updates_missing": self.updates_missing} if self.groups and self.dynamic else {}


@dataclass(frozen=True)
class DistillationLoss:
    """Eq. 8: the student's GMM negative log-likelihood plus the subspace (Eq. 6) and action (Eq. 7)
    distillation terms toward the frozen ``teacher`` (``None``: the NLL only).

    An object rather than a closure, so a training job carrying it can run in another process.
    """

    params: FedDRManParams
    teacher: Optional[ResNetTPolicy]
    gen: Optional[torch.Generator]

    def __call__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        p, teacher = self.params, self.teacher
        student = cast("ResNetTPolicy", model)
        z, feats = student.encode(x)
        dist = student.head(z)
        total = gmm_nll(dist, y)
        if teacher is None:
            return total
        with torch.no_grad():
            zt, feats_t = teacher.encode(x)
            dist_t = teacher.head(zt)
        if p.sub_loss:
            for m, lam in p.lambda_sub.items():
                if lam > 0 and m in feats:  # wrist only where the policy has the camera
                    total = total + lam * subspace_distillation(feats_t[m].T, feats[m].T, p.rank, p.feature_noise, self.gen)
        if p.act_loss and p.lambda_act > 0:
            total = total + p.lambda_act * action_distillation(dist_t, dist, self.gen)
        return total
