"""FedKD (Wu et al., 2022, "Communication-efficient federated learning via knowledge
distillation", Nat. Commun. 13:2032), adaptive mutual distillation ("FedKD-A"), adapted to
continuous-action GMM policies as FedDRMan's baseline (v) (feddrman.txt Sec. IV-A).

Each device keeps a private *mentor* (the scenario's policy, never sent) and a copy of the shared
*mentee* (a narrower policy, ``mentee_width``). Per batch both learn by behaviour cloning plus
adaptive mutual distillation: each distils the other's action distribution (KL estimated on the
other's samples, as FedDRMan's Eq. 7) and their trunk features are tied by an MSE through a
learned map W_h; the distillation terms are divided by the two task losses, so they count more
when both models already fit the data well. Only the mentee's update travels, SVD-compressed with
a growing energy threshold (``p2pfl.learning.svd_compress``); the server averages the updates by
samples, compresses the aggregate the same way and sends it back to every device.

Adaptations (FedKD was written for classification): the task loss is the GMM NLL, which can be
negative, so the adaptive weight divides by the two models' mean-action squared errors instead
(non-negative, detached); the attention-map loss is left out (our one transformer block runs over
a handful of tokens); one optimiser steps mentor, mentee and W_h together (AdamW is per-parameter,
so this equals separate optimisers up to the shared gradient-norm clip).

Under dynamics (our extension): the server offers the round to the devices online now, and a
device that missed a round's delta (offline, a dropped message) cannot apply the next one: it asks
the server for the whole current mentee (``resync``, a header) and the server's responder sends it
with the round it belongs to; the device trains from it if it is this round's, else waits for the
next round. The resync bytes are counted like any other.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Literal, cast

import torch
from pydantic import Field
from torch import nn
from torch.nn import functional as F

from p2pfl.errors import ConfigError
from p2pfl.learning.aggregate import clone_state, weighted_average
from p2pfl.learning.distill import action_distillation
from p2pfl.learning.state import load_state_
from p2pfl.learning.svd_compress import compress_update, decompress_update, energy_threshold
from p2pfl.protocols.base import Process
from p2pfl.protocols.server.fedavg import FedAvgBase, FedAvgParams, select_clients
from p2pfl.robotics.gmm import GMM, gmm_nll

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.robotics.policy import ResNetTPolicy
    from p2pfl.sim.context import DeviceContext, NodeContext, ServerContext

__all__ = ["FedKD", "FedKDParams", "MentorMentee", "DistillTerms", "mutual_distillation_loss"]

#: Which of FedKD-A's distillation terms train the pair: all of them (FedKD-A), only the two action
#: distillations, only the hidden-state loss, or none (then the pair trains by behaviour cloning alone).
DistillTerms = Literal["all", "action", "hidden", "none"]


class FedKDParams(FedAvgParams):
    mentee_width: int = Field(32, ge=4, multiple_of=4, description="token width d of the shared mentee policy")
    energy_start: float = Field(0.95, gt=0, le=1, description="SVD energy threshold T at round 0")
    energy_end: float = Field(0.98, gt=0, le=1, description="SVD energy threshold T at the last round")
    evaluate: Literal["mentee", "mentor"] = Field("mentee", description="score the shared mentee (server) or each device's mentor")
    distill_terms: DistillTerms = Field("all", description="the distillation terms that train (an ablation; 'all' is FedKD-A)")


def _mean_action(d: GMM) -> torch.Tensor:
    return (F.softmax(d.logits, -1)[..., None] * d.means).sum(1)


class MentorMentee(nn.Module):
    """A device's trainable pair: private mentor, local mentee copy, and the hidden map W_h."""

    def __init__(self, mentor: ResNetTPolicy, mentee: ResNetTPolicy) -> None:
        super().__init__()
        self.mentor, self.mentee = mentor, mentee
        self.hidden = nn.Linear(_width(mentee), _width(mentor))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Both policies act (so the kernel's FLOP counter charges both per trained sample)."""
        return torch.cat([self.mentor(x), self.mentee(x)], dim=-1)


def mutual_distillation_loss(pair: MentorMentee, x: torch.Tensor, y: torch.Tensor,
                             generator: torch.Generator | None = None, terms: DistillTerms = "all") -> torch.Tensor:
    """L_t^T + L_t^S + (L_d^T + L_d^S + L_h) / (e_T + e_S): FedKD's adaptive mutual distillation.

    ``terms`` keeps a subset of the distillation terms (``DistillTerms``); the adaptive weight is unchanged.
    """
    z_t, _ = pair.mentor.encode(x)
    z_s, _ = pair.mentee.encode(x)
    d_t, d_s = pair.mentor.head(z_t), pair.mentee.head(z_s)
    task = gmm_nll(d_t, y) + gmm_nll(d_s, y)
    if terms == "none":
        return task
    with torch.no_grad():
        e = ((_mean_action(d_t) - y) ** 2).sum(-1).mean() + ((_mean_action(d_s) - y) ** 2).sum(-1).mean()
    distil: torch.Tensor | None = None
    if terms in ("all", "action"):
        distil = action_distillation(d_s, d_t, generator) + action_distillation(d_t, d_s, generator)
    if terms in ("all", "hidden"):
        hidden = F.mse_loss(pair.hidden(z_s), z_t)
        distil = hidden if distil is None else distil + hidden
    assert distil is not None
    return task + distil / (e + 1e-3)


class FedKD(FedAvgBase[FedKDParams]):
    """Mentor/mentee mutual distillation; only the SVD-compressed mentee update is exchanged."""

    name = "fedkd"
    Params = FedKDParams
    needs_server = True
    summary = "FedKD-A: private mentor + shared mentee, adaptive mutual distillation, SVD-compressed updates"

    def make_mentee(self) -> ResNetTPolicy:
        """The shared mentee: the robot policy at ``mentee_width`` (same seeded init everywhere)."""
        from p2pfl.robotics.policy import ObsLayout, ResNetTPolicy

        layout = self.run.model_hint
        if not isinstance(layout, ObsLayout):
            raise ConfigError("protocol fedkd needs robot data (data.dataset: robotics) and model robot_policy")
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(self.run.seed_for("fedkd.mentee"))
            return ResNetTPolicy(layout, d=self.params.mentee_width)

    def threshold(self, r: int) -> float:
        return energy_threshold(r, self.params.rounds, self.params.energy_start, self.params.energy_end)

    # --- server ------------------------------------------------------------------------------
    def server(self, ctx: ServerContext) -> Process:
        p = self.params
        mentee = self.make_mentee()
        packed = None  # last round's compressed aggregate, broadcast with the next request
        current = {"round": 0, "mentee": mentee}
        if self.dynamic:
            ctx.spawn(self.resync_responder(ctx, current))
        for r in range(1, p.rounds + 1):
            current["round"] = r
            offered = ctx.live_neighbors
            selected = set(select_clients(offered, p.client_fraction, ctx.rng))
            for d in offered:
                body = {"state": clone_state(mentee.state_dict())} if packed is None else {"delta": packed}
                ctx.send(d, "model", {**body, "train": d in selected}, round=r)
            updates = yield from self.collect(ctx, r, sorted(selected))
            if updates:
                avg = weighted_average([(decompress_update(u), n) for u, n in updates])
                packed = compress_update(avg, self.threshold(r))
                _apply(mentee, decompress_update(packed))
            if p.evaluate == "mentee" and self.should_eval(r):
                self.evaluate_global(ctx, mentee, r)
            ctx.round_done(r)

    def resync_responder(self, ctx: ServerContext, current: dict) -> Process:
        """Under dynamics: send the whole current mentee, and the round it is the start of, to a device
        that missed a delta."""
        while True:
            msg = yield ctx.recv("resync")
            ctx.send(msg.src, "resync_state", {"state": clone_state(current["mentee"].state_dict())},
                     round=current["round"])

    # --- device ------------------------------------------------------------------------------
    def device(self, ctx: DeviceContext) -> Process:
        if not ctx.servers:
            return
        p = self.params
        mentor, mentee = self.make_model(ctx), self.make_mentee()
        with torch.random.fork_rng(devices=[]):  # W_h's init, seeded per device
            torch.default_generator.manual_seed(self.run.seed_for("fedkd.hidden", ctx.id))
            pair = MentorMentee(mentor, mentee)
        shared = self.make_mentee()  # this device's copy of the global mentee
        server = ctx.servers[0]
        have = 0  # the round whose mentee ``shared`` holds
        while True:
            msg = yield ctx.recv("model")
            if "state" in msg.payload:
                load_state_(shared, msg.payload["state"])
            elif msg.round == have + 1 or not self.dynamic:
                _apply(shared, decompress_update(msg.payload["delta"]))
            else:  # under dynamics: a delta was missed; ask for the whole mentee
                yield ctx.send(server, "resync", {}, round=msg.round)
                reply = yield ctx.recv("resync_state", timeout=p.round_timeout_s)
                if reply is None:
                    continue
                load_state_(shared, reply.payload["state"])
                have = reply.round
                if reply.round != msg.round:
                    continue  # the server has moved on: wait for its next round
            have = msg.round
            if not msg.payload["train"]:
                continue
            load_state_(pair.mentee, shared.state_dict())
            gen = torch.Generator()
            gen.manual_seed(int(ctx.rng.integers(2**62)))
            yield from ctx.train(pair, loss=functools.partial(_pair_loss, generator=gen, terms=p.distill_terms))
            base = shared.state_dict()
            delta = {k: v.detach() - base[k] for k, v in pair.mentee.state_dict().items()}
            packed = compress_update(delta, self.threshold(msg.round))
            ctx.log("fedkd_upload_ratio", _size(packed) / _size({k: {"dense": v} for k, v in delta.items()}), round=msg.round)
            if p.evaluate == "mentor" and self.should_eval(msg.round):
                ctx.evaluate(pair.mentor, msg.round)
            yield ctx.send(server, "update", {"state": packed, "n_samples": ctx.n_samples}, round=msg.round)

    def make_model(self, ctx: NodeContext) -> ResNetTPolicy:
        model = ctx.new_model()
        if not hasattr(model, "encode"):
            raise ConfigError("protocol fedkd needs a policy with a GMM head (model robot_policy, data robotics)")
        return cast("ResNetTPolicy", model)


def _pair_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, generator: torch.Generator,
               terms: DistillTerms = "all") -> torch.Tensor:
    """``mutual_distillation_loss`` as a batch loss of the trained pair."""
    return mutual_distillation_loss(cast(MentorMentee, model), x, y, generator, terms)


def _width(policy: ResNetTPolicy) -> int:
    """Width of a policy's features (the input of its GMM head's first layer)."""
    first = policy.head.trunk[0]
    assert isinstance(first, nn.Linear)
    return first.in_features


def _apply(model: nn.Module, delta: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for k, v in model.state_dict().items():
            v.add_(delta[k].to(v.dtype))


def _size(packed: dict) -> int:
    return sum(t.numel() for p in packed.values() for t in p.values())
