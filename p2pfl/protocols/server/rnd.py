"""RND clustered FL with a server (RND clustered-FL paper, Sec. IV, Algorithms 1-2; Sec. V).

Clustering event (round 1, then every ``recluster_every`` rounds if set):

1. Every device trains a small RND predictor on its local inputs to imitate a
   frozen random target (paper Eq. 3). The target and the predictor's
   initial weights are pure functions of the scenario seed, so every device
   rebuilds them locally: **only trained predictors travel**. The target is
   shared; ``predictor_init`` picks the initial predictor: ``shared`` (the
   default, ours: every device's the same) or ``per_device`` (device i's own,
   from the seed and i, as the authors' code does; ``p2pfl.clustering.rnd``).
2. Every device sends its predictor to every other device:
   ``exchange: direct`` routes it device to device over the topology (every
   hop is charged; the server is never a relay), ``exchange: relay`` uploads
   it once to the server, which forwards it to each other device (the
   forwarded copy carries the owner's id, 8 bytes).
3. Device i scores every predictor (its own included) on its training inputs,
   ``s_ij = mean_x ||f_hat_j(x) - f(x)||^2``, and uploads its row (N float64).
4. The server stacks the rows into the N x N novelty matrix and forms
   federations with the compatibility criterion (``criterion``: the relative
   band ``alpha`` or the absolute one-sided ``gap``, both ours; the paper names
   the criterion without defining it), with no number of clusters given
   (``p2pfl.clustering.compatibility_clusters``).

Training: FedAvg per federation (McMahan et al.), each device receiving its
own federation's model and uploading its update with its sample count; the
server averages per federation, sample-weighted. After a re-clustering, a new
federation starts from the sample-weighted average of its members' previous
federation models.

Modelled compute of the clustering phase is charged with
``p2pfl.clustering.rnd_flops`` (the target's embedding once per device, predictor training,
scoring). Predictors travel shared, not copied per message (a trained predictor never changes):
the relay's N (N - 1) forwards would otherwise hold N^2 copies (17 GB at N = 1,000).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional

import numpy as np
from pydantic import Field, model_validator
from torch import nn

from p2pfl.clustering import compatibility_clusters
from p2pfl.clustering.novelty import PREDICTOR_INIT_DOC, PredictorInit, RNDProbe
from p2pfl.errors import ConfigError
from p2pfl.learning.aggregate import State, clone_state, weighted_average
from p2pfl.learning.state import load_state_
from p2pfl.protocols.base import Process, Protocol, ProtocolParams
from p2pfl.validation import Strict

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext, ServerContext
    from p2pfl.sim.network import Message
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["RND", "RNDParams", "CompatibilityParams", "clustering_rounds", "federation_index", "regroup_weights"]


class CompatibilityParams(Strict):
    """The compatibility test's fields, shared by ``rnd`` and ``rnd_gossip``; both criteria are ours
    (``p2pfl.clustering.compatibility``, step 1)."""

    criterion: Literal["band", "gap"] = Field(
        "band", description="compatibility test: band, |s_ij - s_ii| <= alpha s_ii; or gap, s_ij - s_ii <= gap "
                            "(one-sided, absolute, after the paper's Fig. 2); both ours")
    alpha: float = Field(0.3, ge=0, lt=1, description="compatibility band: |s_ij - s_ii| <= alpha s_ii")
    gap: Optional[float] = Field(None, ge=0, allow_inf_nan=False,
                                 description="criterion gap: the largest s_ij - s_ii of a compatible pair (novelty "
                                             "units: the sum over the 64 embedding outputs)")

    @model_validator(mode="after")
    def _gap_with_its_criterion(self) -> CompatibilityParams:
        if self.criterion == "gap" and self.gap is None:
            raise ValueError("criterion: gap needs protocol.gap (the largest s_ij - s_ii of a compatible pair); set it")
        if self.criterion == "band" and self.gap is not None:
            raise ValueError("protocol.gap applies to criterion: gap; set protocol.criterion: gap or remove gap")
        return self

    @property
    def threshold(self) -> float:
        """The criterion's threshold, as ``p2pfl.clustering.compatibility_clusters`` takes it (its ``alpha``)."""
        return self.gap if self.criterion == "gap" and self.gap is not None else self.alpha


class RNDParams(CompatibilityParams, ProtocolParams):
    exchange: Literal["direct", "relay"] = "direct"
    recluster_every: Optional[int] = Field(None, ge=1, description="repeat clustering every R rounds (null: once)")
    rnd_epochs: int = Field(10, ge=1, description="predictor training epochs (Adam)")
    rnd_batch_size: int = Field(128, ge=1)
    rnd_lr: float = Field(1e-3, gt=0)
    predictor_init: PredictorInit = Field("shared", description=PREDICTOR_INIT_DOC)
    round_timeout_s: Optional[float] = Field(None, gt=0, description="training rounds: stop waiting for updates "
                                             "after this long (a clustering event waits for every row)")
    discovery_timeout_s: Optional[float] = Field(
        None, gt=0, description="under dynamics: how long a clustering event waits for predictors and rows "
                                "(server: after the first one came; devices: after sending theirs); "
                                "default round_timeout_s")


# --------------------------------------------------------------------------- pure decisions


def clustering_rounds(rounds: int, every: Optional[int]) -> list[int]:
    """Rounds (1-based) that start with a clustering event: 1, then 1 + R, 1 + 2R, ..."""
    if every is None:
        return [1]
    return list(range(1, rounds + 1, every))


def federation_index(clusters: list[list[int]], n: int) -> list[int]:
    """``fed[d]`` = index of the federation that holds device ``d``."""
    fed = [-1] * n
    for q, members in enumerate(clusters):
        for d in members:
            fed[d] = q
    if -1 in fed:
        raise ValueError(f"federations do not cover device {fed.index(-1)}")
    return fed


def regroup_weights(members: list[int], old_fed: list[int], n_samples: list[int]) -> dict[int, float]:
    """Weights of the previous federation models in a new federation's start model (sample shares)."""
    w: dict[int, float] = {}
    for d in members:
        w[old_fed[d]] = w.get(old_fed[d], 0.0) + float(n_samples[d])
    return w


# --------------------------------------------------------------------------- protocol


class RND(Protocol[RNDParams]):
    """Server-side RND federation discovery, then FedAvg per federation."""

    name = "rnd"
    Params = RNDParams
    needs_server = True
    supports_dynamics = True
    cluster_fields = ("clusters", "ari", "misclassification_rate", "n_federations", "clustering_events")
    summary = "RND novelty clustering (all-to-all predictors, server builds the matrix) + FedAvg per federation"
    current_models = True

    def __init__(self, params: RNDParams, run: RunInfo) -> None:
        super().__init__(params, run)
        servers = run.servers
        if len(servers) != 1 or len(servers[0].attached) != run.n_devices:
            raise ConfigError("protocol 'rnd' needs exactly one server attached to every device "
                              "(topology 'servers: [{attach: all}]')")
        self.probe = RNDProbe(run, epochs=params.rnd_epochs, batch_size=params.rnd_batch_size, lr=params.rnd_lr,
                              predictor_init=params.predictor_init)
        self.events = clustering_rounds(params.rounds, params.recluster_every)
        #: The last clustering event's federations, and the novelty matrix they were built from.
        self.found: Optional[list[list[int]]] = None
        self.matrix: Optional[np.ndarray] = None
        self.updates_missing = 0
        #: what the server scores the devices with now: the federations' models and each device's federation
        self.scoring: tuple[list[nn.Module], list[int]] = ([], [])

    def current_model(self, device: int) -> Optional[nn.Module]:
        """The model of the device's federation on the server, as its last round (or regrouping) left it."""
        models, fed = self.scoring
        return models[fed[device]] if models else None

    def deadline_fields(self) -> tuple[str, ...]:
        return ("round_timeout_s",)

    def work_flops(self, samples: int) -> float:
        return self.probe.work_flops(samples, len(self.events))

    def _discovery_wait(self) -> Optional[float]:
        """Under dynamics, how long a clustering event waits (None: for everyone, the static protocol)."""
        return (self.params.discovery_timeout_s or self.params.round_timeout_s) if self.dynamic else None

    # ---- device -----------------------------------------------------------------------

    def device(self, ctx: DeviceContext) -> Process:
        """Algorithm 1 when a round starts a clustering event, then FedAvg's local step on the federation's
        model. Under dynamics a device takes the newest round's model, and one that missed a clustering
        event's rounds skips it (the server clusters whoever sent a row in time)."""
        model = ctx.new_model()
        server = ctx.servers[0]
        r = 1
        while r <= self.params.rounds:
            if r in self.events:
                yield from self.discover(ctx, self.events.index(r) + 1, server)
            msg = ctx.newest((yield ctx.recv("model")), "model")
            load_state_(model, msg.payload["state"])
            yield from ctx.train(model)
            yield ctx.send(server, "update", {"state": model.state_dict(), "n_samples": ctx.n_samples}, round=msg.round)
            r = msg.round + 1

    def discover(self, ctx: DeviceContext, event: int, server: int) -> Process:
        """Algorithm 1: train the predictor, share it, score all predictors, upload the row."""
        n = self.run.n_devices
        state = yield from self.probe.train(ctx, event)
        if self.params.exchange == "direct":
            for j in range(n):
                if j != ctx.id:
                    yield ctx.send(j, "rnd_predictor", {"state": state}, round=event, routed=True, share=True)
        else:
            yield ctx.send(server, "rnd_upload", {"state": state}, round=event, share=True)
        # every other device's predictor (under dynamics, those that came by the deadline)
        owner = _owner if self.params.exchange == "relay" else None  # a relayed predictor names its owner
        got = yield from ctx.collect("rnd_predictor", event, [j for j in range(n) if j != ctx.id],
                                     until=ctx.deadline(self._discovery_wait()), origin=owner)
        held = {ctx.id: state, **{owner: msg.payload["state"] for owner, msg in got.items()}}
        row = yield from self.probe.score(ctx, held, n)
        yield ctx.send(server, "rnd_row", {"row": row}, round=event)

    # ---- server -----------------------------------------------------------------------

    def server(self, ctx: ServerContext) -> Process:
        p, n = self.params, self.run.n_devices
        n_samples = [0] * n  # learned from the devices' updates (each carries its sample count)
        models: list[nn.Module] = [ctx.new_model()]
        fed = [0] * n
        self.scoring = (models, fed)
        for r in range(1, p.rounds + 1):
            if r in self.events:
                clusters = yield from self.build_federations(ctx, self.events.index(r) + 1, r)
                models, fed = self.regroup(ctx, clusters, models, fed, n_samples)
                self.scoring = (models, fed)
            states = [clone_state(m.state_dict()) for m in models]
            selected = ctx.live_neighbors
            for d in selected:
                ctx.send(d, "model", {"state": states[fed[d]]}, round=r)
            updates: list[list[tuple[State, float]]] = [[] for _ in models]
            got = yield from ctx.collect("update", r, selected, until=ctx.deadline(p.round_timeout_s))
            self.updates_missing += len(selected) - len(got)
            for d, msg in got.items():
                n_samples[d] = int(msg.payload["n_samples"])
                updates[fed[d]].append((msg.payload["state"], float(msg.payload["n_samples"])))
            for q, ups in enumerate(updates):
                if ups:
                    load_state_(models[q], weighted_average(ups))
            if self.should_eval(r):
                for d in range(n):
                    ctx.evaluate_device(d, models[fed[d]], r)
            ctx.round_done(r)

    def build_federations(self, ctx: ServerContext, event: int, r: int) -> Process:
        """Algorithm 2: (relay the predictors,) stack the rows, apply the compatibility criterion.

        Under dynamics each phase waits ``discovery_timeout_s`` from its first message, and the devices
        whose row did not come are alone until the next event."""
        n = self.run.n_devices
        wait = self._discovery_wait()
        if self.params.exchange == "relay":

            def relay(msg: Message) -> None:  # each predictor is relayed as soon as it arrives
                for j in range(n):
                    if j != msg.src:
                        ctx.send(j, "rnd_predictor", {"state": msg.payload["state"], "owner": msg.src}, round=event,
                                 share=True)

            yield from ctx.collect("rnd_upload", event, range(n), after_first=wait, each=relay)
        U = np.full((n, n), np.nan)
        rows = yield from ctx.collect("rnd_row", event, range(n), after_first=wait)
        for src, msg in rows.items():
            U[src] = msg.payload["row"]
        if self.dynamic:
            ctx.log("rnd_rows_missing", n - len(rows), round=r)
        p = self.params
        if len(rows) == n:
            clusters = compatibility_clusters(U, p.threshold, criterion=p.criterion)
        else:  # under dynamics: cluster the devices whose row came; the others are alone until the next event
            have = sorted(rows)
            sub = compatibility_clusters(U[np.ix_(have, have)], p.threshold, criterion=p.criterion) if have else []
            clusters = sorted([[have[i] for i in f] for f in sub] + [[d] for d in range(n) if d not in rows])
        self.matrix = U
        self.found = clusters
        ctx.report_clusters(clusters, round=r, log=False)  # scored by the kernel: the summary's clustering events
        ctx.log("rnd_federations", len(clusters), round=r)
        return clusters

    def regroup(self, ctx: ServerContext, clusters: list[list[int]], models: list[nn.Module], fed: list[int],
                n_samples: list[int]) -> tuple[list[nn.Module], list[int]]:
        """One model per new federation, started from its members' previous models, weighted by the sample
        counts the server has heard in their updates."""
        new_models = []
        for members in clusters:
            weights = regroup_weights(members, fed, n_samples)
            if sum(weights.values()) == 0:  # no counts heard yet (first event): weigh by members
                weights = regroup_weights(members, fed, [1] * len(fed))
            m = ctx.new_model()
            load_state_(m, weighted_average([(models[q].state_dict(), w) for q, w in sorted(weights.items())]))
            new_models.append(m)
        return new_models, federation_index(clusters, self.run.n_devices)

    # ---- outputs ----------------------------------------------------------------------

    def clusters(self) -> Optional[list[list[int]]]:
        return self.found

    def result(self) -> dict[str, Any]:
        if self.found is None:
            return {}
        return {"clustering_flops": self.probe.flops, **({"updates_missing": self.updates_missing} if self.dynamic else {})}

    def novelty(self) -> Optional[tuple[np.ndarray, str]]:
        return None if self.matrix is None else (self.matrix, r"RND (server): $u_{ii} - u_{ij}$")


def _owner(msg: Message) -> int:
    """The device a relayed predictor belongs to (the server forwards it with its owner's id)."""
    return int(msg.payload["owner"])
