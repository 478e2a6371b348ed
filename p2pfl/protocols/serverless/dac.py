"""DAC: decentralized adaptive clustering (Listo Zec et al., FL-IJCAI 2022), two algorithms.

The YAML name is ``dac``; its ``variant`` field picks the class that runs
(:meth:`DAC.implementation`): ``cosine`` -> :class:`DACCosine`, ``original`` ->
:class:`DACOriginal`. ``DAC`` (the registry's target) is ``DACCosine``.

``variant: cosine`` -- the Conditional paper's practical variant (App. K-C):
"cosine-similarity-based neighbor discovery in model parameter space,
deterministic top-k neighbor selection, and uniform weight averaging".
Synchronous rounds: train locally; send the model to every candidate peer;
wait for all candidates' round-r models (the device's neighbours are the
devices whose models it has received); keep the ``top_k`` with the highest
cosine similarity of flattened parameters to its own (ties: lower id); set
its model to the uniform average of itself and those k.

``variant: original`` -- DAC as published: each device keeps a similarity
vector s_i (0 = unknown) and samples ``n_sampled`` peers without replacement
from the prior p_i = softmax(tau_r * s_i) over its candidates; it requests
their models (a 64-byte header), each reply carries the peer's current model,
its sample count and its similarity vector (N float64, read by the two-hop
update); s_ij = 1 / loss of j's model on i's training data; for every
candidate k that i has never sampled but some sampled j knows (s_jk > 0),
s_ik takes s_jk from the sampled j that i finds most similar (two-hop
update); the model becomes the sample-weighted average of itself and the
sampled models. ``tau_schedule: linear`` anneals tau_r = tau * r / rounds
(explore first, exploit later); ``constant`` keeps tau.

Round order (both variants): local training first, then exchange and
aggregation, so similarities are measured on locally trained models (with a
common initialisation every model is identical before the first training).

Candidates: ``candidates: neighbors`` (default) = the device's topology
neighbours; ``candidates: all`` = every other device, reached by routed
sends (every hop charged).

Reported federations (``clusters``, ``ari``): DAC has soft, per-device
collaborations, not federations; for scoring we report the connected
components of the last round's "i aggregated j" graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional, cast

import numpy as np
import torch
from pydantic import Field
from torch import nn

from p2pfl.learning.aggregate import State, clone_state, state_to_vector, weighted_average
from p2pfl.learning.flat import FlatState
from p2pfl.learning.stacked import average_losses
from p2pfl.learning.state import live_state, load_state_
from p2pfl.protocols.base import Process, Protocol, ProtocolParams
from p2pfl.protocols.serverless.neighbour_averaging import NeighbourAveraging

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext
    from p2pfl.sim.network import Message
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["DAC", "DACCosine", "DACOriginal", "DACParams", "cosine_top_k", "cosine_similarities", "COSINE_ATOL",
           "dac_prior", "two_hop_update", "tau_at", "selection_components"]


class DACParams(ProtocolParams):
    variant: Literal["cosine", "original"] = "cosine"
    candidates: Literal["neighbors", "all"] = "neighbors"
    top_k: int = Field(2, ge=1, description="cosine: peers averaged per round")
    n_sampled: int = Field(3, ge=1, description="original: peers sampled per round")
    tau: float = Field(30.0, gt=0, description="original: softmax temperature (inverse) on similarities")
    tau_schedule: Literal["constant", "linear"] = "constant"
    round_timeout_s: Optional[float] = Field(None, gt=0, description="stop waiting for peers' models after this "
                                                                     "long (required under dynamics)")


# --------------------------------------------------------------------------- pure decisions


def cosine_top_k(own: State, received: dict[int, State], k: int) -> list[int]:
    """Ids of the ``k`` received models most cosine-similar to ``own`` in parameter space (ties: lower id)."""
    ids = sorted(received)
    if not ids:
        return []
    cos = cosine_similarities(own, [received[j] for j in ids])
    return sorted(j for _, j in sorted(zip((-c for c in cos), ids))[:k])


#: Largest gap allowed between ``cosine_similarities`` and one float64 dot product per pair (the
#: matrix-vector product may order its float reductions differently; only the ranking is used).
COSINE_ATOL = 1e-12


def cosine_similarities(own: State, others: list[State]) -> list[float]:
    """Cosine similarity (float64) of each of ``others`` to ``own`` in parameter space, in one
    matrix-vector product (within ``COSINE_ATOL`` of one dot product per pair, tested)."""
    a = state_to_vector(own)
    if all(isinstance(s, FlatState) for s in others):  # stacked first, converted once
        b = torch.stack([cast(FlatState, s).vector for s in others]).to(torch.float64)
    else:
        b = torch.stack([state_to_vector(s) for s in others])
    return (torch.mv(b, a) / (torch.linalg.vector_norm(b, dim=1) * a.norm()).clamp_min(1e-300)).tolist()


def tau_at(tau: float, schedule: str, r: int, rounds: int) -> float:
    """Temperature of round ``r``: constant, or linearly annealed tau * r / rounds."""
    return tau if schedule == "constant" else tau * r / rounds


def dac_prior(sims: np.ndarray, candidates: tuple[int, ...], tau: float) -> np.ndarray:
    """Sampling probabilities over ``candidates``: softmax(tau * s) (unknown similarity = 0)."""
    z = tau * sims[list(candidates)]
    z = z - z.max()
    p = np.maximum(np.exp(z), 1e-12)  # no candidate underflows to 0: sampling without replacement stays possible
    return p / p.sum()


def two_hop_update(sims: np.ndarray, sampled_ever: np.ndarray, me: int, candidates: tuple[int, ...],
                   replies: dict[int, np.ndarray]) -> np.ndarray:
    """DAC's two-hop step: a never-sampled candidate k known to a sampled j gets s_jk from the most similar j."""
    out = sims.copy()
    ranked = sorted(replies, key=lambda j: (-sims[j], j))  # most similar sampled peer first
    for k in candidates:
        if k == me or sampled_ever[k]:
            continue
        for j in ranked:
            if replies[j][k] > 0:
                out[k] = replies[j][k]
                break
    return out


def selection_components(n: int, chosen: dict[int, list[int]]) -> list[list[int]]:
    """Connected components of the undirected graph {i -- j : i aggregated j}."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, js in chosen.items():
        for j in js:
            a, b = find(i), find(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for v in range(n):
        groups.setdefault(find(v), []).append(v)
    return sorted(groups.values(), key=lambda f: f[0])


# --------------------------------------------------------------------------- protocols


class _DACBase(Protocol[DACParams]):
    """What both DAC algorithms share: the YAML name and params, candidate peers, the reported federations."""

    name = "dac"
    Params = DACParams
    summary = "DAC: similarity-weighted decentralized collaboration (cosine top-k, or original loss-based priors)"
    #: The ``variant`` this class runs.
    variant: ClassVar[str]
    implementation_field = "variant"
    supports_dynamics = True
    cluster_fields = ("clusters", "ari", "misclassification_rate", "n_federations")

    def __init__(self, params: DACParams, run: RunInfo) -> None:
        super().__init__(params, run)
        #: Whom each device aggregated in its last round (scoring: ``selection_components``).
        self.chosen: dict[int, list[int]] = {}
        self.similarity_flops = 0
        self.replies_missing = 0
        self._finished: dict[int, int] = {}

    @classmethod
    def implementation(cls, params: ProtocolParams) -> type[Protocol[Any]]:
        """``variant: cosine`` -> :class:`DACCosine`, ``variant: original`` -> :class:`DACOriginal`."""
        variant = getattr(params, "variant", "cosine")
        if variant == cls.variant:
            return cls
        return DACOriginal if variant == "original" else DACCosine

    def candidates(self, ctx: DeviceContext) -> tuple[int, ...]:
        """Live topology neighbours (all of them for a static fleet), or every other device
        (``candidates: all``, reached by routed sends)."""
        if self.params.candidates == "all":
            return tuple(j for j in self.run.device_ids if j != ctx.id)
        return ctx.live_neighbors

    def deadline_fields(self) -> tuple[str, ...]:
        return ("round_timeout_s",)

    def report_round(self, ctx: DeviceContext, r: int) -> None:
        """Under dynamics: once every device has finished round ``r``, report the federations then
        (the kernel logs their ARI)."""
        self._finished[r] = self._finished.get(r, 0) + 1
        if self.dynamic and self._finished[r] == self.run.n_devices:
            ctx.report_clusters(self.clusters(), round=r)

    def clusters(self) -> list[list[int]]:
        return selection_components(self.run.n_devices, self.chosen)

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"clustering_flops": self.similarity_flops}
        if self.dynamic and self.variant == "original":
            out["replies_missing"] = self.replies_missing
        return out


class DACCosine(NeighbourAveraging[DACParams], _DACBase):
    """DAC as the Conditional paper runs it (App. K-C): cosine top-k neighbours, uniform averaging.

    Each round: train; send the model to every candidate; gather their round-r
    models; average uniformly with the ``top_k`` most cosine-similar (ties: lower id).
    """

    variant = "cosine"
    message_kind = "dac_model"
    tensor_program = "p2pfl.protocols.serverless.dac_tensor:DACCosineRounds"
    current_models = True  # NeighbourAveraging's: each device's live model

    def peers(self, ctx: DeviceContext) -> tuple[int, ...]:
        return self.candidates(ctx)

    def routed(self) -> bool:
        return self.params.candidates == "all"

    def mix(self, ctx: DeviceContext, mine: State, received: dict[int, State],
            payloads: dict[int, dict[str, Any]]) -> State:
        top = cosine_top_k(mine, received, self.params.top_k)
        self.chosen[ctx.id] = top
        return weighted_average([(mine, 1.0)] + [(received[j], 1.0) for j in top])

    def round_finished(self, ctx: DeviceContext, r: int) -> None:
        self.report_round(ctx, r)

    def result(self) -> dict[str, Any]:
        return {**_DACBase.result(self), **NeighbourAveraging.result(self)}


class DACOriginal(_DACBase):
    """DAC as published (Listo Zec et al., FL-IJCAI 2022, arXiv:2206.08839: the method section's algorithm).

    Softmax sampling prior over 1/loss similarities, ``n_sampled`` peers asked
    for their models, two-hop similarity update, sample-weighted averaging
    (module docstring, ``variant: original``).
    """

    variant = "original"
    current_models = True

    def __init__(self, params: DACParams, run: RunInfo) -> None:
        super().__init__(params, run)
        self.models: dict[int, nn.Module] = {}  # each device's live model

    def current_model(self, device: int) -> Optional[nn.Module]:
        """The device's live model (its last round's average, or as its training left it)."""
        return self.models.get(device)

    def device(self, ctx: DeviceContext) -> Process:
        p, n, me = self.params, self.run.n_devices, ctx.id
        model = ctx.new_model()
        self.models[me] = model
        routed = p.candidates == "all"
        sims = np.zeros(n)
        sampled_ever = np.zeros(n, dtype=bool)
        shared: dict[str, Any] = {"state": clone_state(live_state(model)), "sims": sims.copy()}
        ctx.spawn(self.serve(ctx, shared, routed))
        pending: dict[int, dict[int, Message]] = {}
        for r in range(1, p.rounds + 1):
            yield from ctx.train(model)
            shared["state"] = clone_state(live_state(model))
            peers = self.candidates(ctx)
            if not peers:
                self._finish_round(ctx, model, r)
                continue
            prior = dac_prior(sims, peers, tau_at(p.tau, p.tau_schedule, r, p.rounds))
            size = min(p.n_sampled, len(peers))
            sampled = sorted(int(j) for j in ctx.rng.choice(np.asarray(peers), size=size, replace=False, p=prior))
            for j in sampled:
                yield ctx.send(j, "dac_request", {}, round=r, routed=routed)
            got = yield from ctx.collect("dac_reply", r, sampled, until=ctx.deadline(p.round_timeout_s), keep_later=pending)
            self.replies_missing += len(sampled) - len(got)
            sampled = [j for j in sampled if j in got]  # a peer's reply lost or late: aggregate without it
            states = {j: got[j].payload["state"] for j in sampled}
            x = ctx.shard.train_x  # read when used: a shard may hold rows of a shared pool (p2pfl.data.PoolRows)
            losses = average_losses(model, [states[j] for j in sampled], x, ctx.shard.train_y)  # one stacked pass
            for j, loss in zip(sampled, losses):
                sims[j] = 1.0 / max(loss, 1e-12)
                sampled_ever[j] = True
            flops = len(sampled) * ctx.forward_flops(model) * int(x.shape[0])
            self.similarity_flops += flops
            yield from ctx.compute(flops, "dac_similarity")
            sims[:] = two_hop_update(sims, sampled_ever, me, peers, {j: got[j].payload["sims"] for j in sampled})
            shared["sims"] = sims.copy()
            mine = shared["state"]  # the model as trained this round (unchanged since)
            ups = [(mine, float(ctx.n_samples))] + [(states[j], float(got[j].payload["n_samples"])) for j in sampled]
            shared["state"] = weighted_average(ups)  # a fresh state, never changed: the next replies carry it
            load_state_(model, shared["state"])
            self.chosen[me] = sampled
            self._finish_round(ctx, model, r)

    def serve(self, ctx: DeviceContext, shared: dict[str, Any], routed: bool) -> Process:
        """Answer each model request with the current model, sample count and similarity vector."""
        while True:
            msg: Message = yield ctx.recv("dac_request")
            # shared["state"] and ["sims"] are replaced, never changed in place: one copy for every requester
            ctx.send(msg.src, "dac_reply", {"state": shared["state"], "n_samples": ctx.n_samples,
                                            "sims": shared["sims"]}, round=msg.round, routed=routed, share=True)

    def _finish_round(self, ctx: DeviceContext, model: nn.Module, r: int) -> None:
        if self.should_eval(r):
            ctx.evaluate(model, r)
        ctx.round_done(r)
        self.report_round(ctx, r)


#: The registry's target for ``dac``: ``implementation`` picks the class from ``variant``.
DAC = DACCosine
