"""FedAvg (McMahan et al., 2017): sample-size weighted averaging through one server.

Round r: the server picks a fraction of its devices (its own seeded RNG),
sends them the global model, each trains locally and uploads its model with
its sample count (8 bytes), the server averages the uploads weighted by
samples. With ``round_timeout_s`` the server stops waiting after that long
and averages what arrived (lost or late updates are skipped).

Under dynamics (``round_timeout_s`` required) the server picks among the devices reachable now
(online, link up: devices check in), and a device that was away takes the newest model waiting
for it, rejoining at the server's current round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Optional, TypeVar

import numpy as np
from pydantic import Field
from torch import nn

from p2pfl.learning.aggregate import State, clone_state, weighted_average
from p2pfl.learning.state import load_state_
from p2pfl.learning.train import Penalty
from p2pfl.protocols.base import Process, Protocol, ProtocolParams

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext, NodeContext, ServerContext
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["FedAvg", "FedAvgBase", "FedAvgParams", "select_clients"]


class FedAvgParams(ProtocolParams):
    client_fraction: float = Field(1.0, gt=0, le=1)
    round_timeout_s: Optional[float] = Field(None, gt=0)


F = TypeVar("F", bound=FedAvgParams)


def select_clients(devices: tuple[int, ...], fraction: float, rng: np.random.Generator) -> list[int]:
    """max(1, round(fraction * n)) devices drawn without replacement, in id order; none (and no draw)
    when there is none to draw from (under dynamics, nobody reachable now)."""
    if not devices:
        return []
    if fraction >= 1.0:
        return list(devices)
    k = max(1, round(fraction * len(devices)))
    return sorted(int(d) for d in rng.choice(np.asarray(devices), size=k, replace=False))


class FedAvgBase(Protocol[F], Generic[F]):
    """Server-side FedAvg over the devices attached to the (single) server; variants subclass this."""

    needs_server = True
    supports_dynamics = True

    def __init__(self, params: F, run: RunInfo) -> None:
        super().__init__(params, run)
        #: Selected devices whose update did not arrive by the deadline (reported under dynamics).
        self.updates_missing = 0
        #: each server's global model (by server id), as its rounds change it
        self.global_models: dict[int, nn.Module] = {}
        self._server_of = {d: s.id for s in reversed(run.servers) for d in s.attached}  # a device's first server

    def deadline_fields(self) -> tuple[str, ...]:
        return ("round_timeout_s",)

    def server(self, ctx: ServerContext) -> Process:
        p = self.params
        model = self.make_model(ctx)
        self.global_models[ctx.id] = model
        for r in range(1, p.rounds + 1):
            selected = select_clients(ctx.live_neighbors, p.client_fraction, ctx.rng)
            payload = self.model_payload(clone_state(model.state_dict()))
            for d in selected:
                ctx.send(d, "model", payload, round=r)
            updates = yield from self.collect(ctx, r, selected)
            if updates:
                load_state_(model, self.aggregate(updates))
            if self.should_eval(r):
                self.evaluate_global(ctx, model, r)
            ctx.round_done(r)

    def current_model(self, device: int) -> Optional[nn.Module]:
        """The global model ``evaluate_global`` scores every device with: its server's (the first it is attached to;
        the first server's for a device attached to none), as the server's last round left it."""
        servers = self.run.servers
        return self.global_models.get(self._server_of.get(device, servers[0].id)) if servers else None

    def model_payload(self, state: State) -> dict[str, Any]:
        """What the server's round message carries (variants add fields)."""
        return {"state": state}

    def receive_model(self, ctx: DeviceContext, model: nn.Module, payload: dict[str, Any]) -> None:
        """A device takes the server's round message (variants read more of it)."""
        load_state_(model, payload["state"])

    def make_model(self, ctx: NodeContext) -> nn.Module:
        """The model a node holds (variants change the architecture here)."""
        return ctx.new_model()

    def evaluate_global(self, ctx: ServerContext, model: nn.Module, r: int) -> None:
        """Score the global model on every device's local test set."""
        for d in self.run.device_ids:
            ctx.evaluate_device(d, model, r)

    def collect(self, ctx: ServerContext, r: int, selected: list[int]) -> Process:
        """This round's ``(state, n_samples)`` uploads in arrival order (until all came or the round timeout)."""
        got = yield from ctx.collect("update", r, selected, until=ctx.deadline(self.params.round_timeout_s))
        self.updates_missing += len(selected) - len(got)
        return [(m.payload["state"], float(m.payload["n_samples"])) for m in got.values()]

    def aggregate(self, updates: list[tuple[State, float]]) -> State:
        """Sample-weighted average of the uploaded states."""
        return weighted_average(updates)

    def device(self, ctx: DeviceContext) -> Process:
        if not ctx.servers:
            return  # not attached to the server: not part of this federation
        model = self.make_model(ctx)
        server = ctx.servers[0]
        while True:
            msg = ctx.newest((yield ctx.recv("model")), "model")
            self.receive_model(ctx, model, msg.payload)
            state = yield from self.trained_state(ctx, model, msg.round)
            yield ctx.send(server, "update", {"state": state, "n_samples": ctx.n_samples}, round=msg.round)

    def trained_state(self, ctx: DeviceContext, model: nn.Module, r: int) -> Process:
        """Round ``r``'s local update (``local_update``) and the state the upload carries: the model's, or,
        where the scenario defers uploads and a variant does not change the update, the job's outcome read
        when the server takes it (``ctx.deferred_train``: the model is loaded anew before it is read again)."""
        if ctx.defers_uploads and type(self).local_update is FedAvgBase.local_update:
            return (yield from ctx.deferred_train(model))
        yield from self.local_update(ctx, model, r)
        return model.state_dict()

    def result(self) -> dict[str, Any]:
        return {"updates_missing": self.updates_missing} if self.dynamic else {}

    def local_update(self, ctx: DeviceContext, model: nn.Module, r: int, penalty: Optional[Penalty] = None) -> Process:
        """Device step of round ``r``: local training from the global model (variants add a penalty)."""
        return (yield from ctx.train(model, penalty=penalty))


class FedAvg(FedAvgBase[FedAvgParams]):
    """FedAvg (McMahan et al., 2017, Algorithm 1) through one server."""

    model_rows = True
    current_models = True  # FedAvgBase's: the server's global model

    name = "fedavg"
    Params = FedAvgParams
    summary = "FedAvg through a server, sample-size weighted, optional client fraction"
    tensor_program = "p2pfl.protocols.server.fedavg_tensor:FedAvgRounds"
