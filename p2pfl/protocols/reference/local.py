"""Local training only: no communication at all (the papers' lower bound)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from p2pfl.protocols.base import Process, Protocol, ProtocolParams

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext

__all__ = ["Local"]


class Local(Protocol[ProtocolParams]):
    """Each device trains its own model for ``rounds`` x ``training.epochs`` epochs."""

    model_rows = True

    name = "local"
    Params = ProtocolParams
    summary = "local training only, no communication (lower bound)"
    tensor_program = "p2pfl.protocols.reference.local_tensor:LocalRounds"
    supports_dynamics = True

    def device(self, ctx: DeviceContext) -> Process:
        model = ctx.new_model()
        for r in range(1, self.params.rounds + 1):
            yield from ctx.train(model)
            if self.should_eval(r):
                ctx.evaluate(model, r)
            ctx.round_done(r)
