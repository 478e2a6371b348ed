"""Local training only: no communication at all (the papers' lower bound)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from p2pfl.protocols.base import Process, Protocol, ProtocolParams

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from p2pfl.sim.context import DeviceContext
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["Local"]


class Local(Protocol[ProtocolParams]):
    """Each device trains its own model for ``rounds`` x ``training.epochs`` epochs."""

    model_rows = True

    name = "local"
    Params = ProtocolParams
    summary = "local training only, no communication (lower bound)"
    tensor_program = "p2pfl.protocols.reference.local_tensor:LocalRounds"
    supports_dynamics = True
    current_models = True

    def __init__(self, params: ProtocolParams, run: RunInfo) -> None:
        super().__init__(params, run)
        self.models: dict[int, nn.Module] = {}  # each device's model

    def current_model(self, device: int) -> Optional[nn.Module]:
        return self.models.get(device)

    def device(self, ctx: DeviceContext) -> Process:
        model = ctx.new_model()
        self.models[ctx.id] = model
        for r in range(1, self.params.rounds + 1):
            yield from ctx.train(model)
            if self.should_eval(r):
                ctx.evaluate(model, r)
            ctx.round_done(r)
