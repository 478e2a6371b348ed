"""A user protocol living outside the p2pfl package: push-only gossip with a fanout.

Each round a device trains, pushes its model to ``fanout`` random neighbours,
then averages (sample-weighted, by the counts its peers announced) its model
with every model that reached it this round. Run it from YAML by naming it
``module:Class`` (``protocol: {name: "fanout_gossip:FanoutGossip", ...}``) with
this folder on PYTHONPATH; see ``scenario.yaml`` beside this file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from p2pfl.learning.aggregate import clone_state, weighted_average
from p2pfl.learning.state import live_state, load_state_
from p2pfl.protocols import Process, Protocol, ProtocolParams

if TYPE_CHECKING:
    from p2pfl.sim.context import DeviceContext


class FanoutParams(ProtocolParams):
    """YAML fields: ``name``, ``rounds``, ``eval_every`` (shared) and this protocol's own."""

    fanout: int = Field(2, ge=1, description="neighbours each device pushes its model to per round")
    wait_s: float = Field(2.0, gt=0, description="how long a device collects incoming models per round")


class FanoutGossip(Protocol[FanoutParams]):
    """Push gossip with a fanout, averaging whatever arrived within ``wait_s``."""

    name = "fanout_gossip"
    Params = FanoutParams
    summary = "example user protocol: push gossip with a fanout"

    def device(self, ctx: DeviceContext) -> Process:
        p = self.params
        model = ctx.new_model()
        for r in range(1, p.rounds + 1):
            yield from ctx.train(model)
            mine = clone_state(live_state(model))
            k = min(p.fanout, len(ctx.neighbors))
            for j in sorted(int(j) for j in ctx.rng.choice(ctx.neighbors, size=k, replace=False)):
                yield ctx.send(j, "model", {"state": mine, "n_samples": ctx.n_samples}, round=r)
            # this round's models from the neighbours that pushed one within wait_s (a late one is dropped)
            got = yield from ctx.collect("model", r, ctx.neighbors, until=ctx.now + p.wait_s)
            received = [(m.payload["state"], float(m.payload["n_samples"])) for m in got.values()]
            load_state_(model, weighted_average([(mine, float(ctx.n_samples)), *received]))
            if self.should_eval(r):
                ctx.evaluate(model, r)
            ctx.round_done(r)
