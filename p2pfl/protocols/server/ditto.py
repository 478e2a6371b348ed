"""Ditto (Li et al., "Ditto: Fair and Robust Federated Learning Through Personalization", ICML 2021, Alg. 1).

As the Conditional-PCA paper runs it (App. K-B): the global model w is trained
by FedAvg; every device also keeps a persistent personal model v. In each
round a device (1) updates v for ``personal_epochs`` epochs of plain SGD on
its task loss plus lambda/2 ||v - w||^2 toward the global model it received,
and (2) runs FedAvg's local update of w and uploads it. Only w travels, so
the bytes are FedAvg's; the compute is FedAvg's plus the personal epochs.
The personal models are what is evaluated (by their devices).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import Field
from torch import nn

from p2pfl.learning.aggregate import clone_state
from p2pfl.learning.state import live_state, load_state_
from p2pfl.learning.train import Penalty
from p2pfl.protocols.base import Process
from p2pfl.protocols.server.fedavg import FedAvgBase, FedAvgParams
from p2pfl.protocols.server.fedprox import proximal_penalty

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext, ServerContext
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["Ditto", "DittoParams"]


class DittoParams(FedAvgParams):
    lam: float = Field(1.0, ge=0, description="lambda of the proximal term toward the global model")
    personal_epochs: int = Field(5, ge=1)
    personal_lr: Optional[float] = Field(None, ge=0, description="null: training.lr")
    personal_momentum: float = Field(0.0, ge=0, lt=1, description="plain SGD, as in the paper")


class Ditto(FedAvgBase[DittoParams]):
    """FedAvg global model plus a persistent, proximally regularized personal model per device."""

    name = "ditto"
    Params = DittoParams
    summary = "Ditto: FedAvg global model + personal models with lambda/2 ||v - w||^2 (evaluated)"

    def __init__(self, params: DittoParams, run: RunInfo) -> None:
        super().__init__(params, run)
        self.personal: dict[int, nn.Module] = {}

    def local_update(self, ctx: DeviceContext, model: nn.Module, r: int, penalty: Optional[Penalty] = None) -> Process:
        p = self.params
        personal = self.personal.get(ctx.id)
        if personal is None:
            personal = self.personal[ctx.id] = self.make_model(ctx)
            load_state_(personal, live_state(model))  # v starts at the first global model
        prox = proximal_penalty(clone_state(dict(model.named_parameters())), p.lam)
        yield from ctx.train(personal, epochs=p.personal_epochs, lr=p.personal_lr, momentum=p.personal_momentum,
                             penalty=prox)
        if self.should_eval(r):
            ctx.evaluate(personal, r)
        return (yield from super().local_update(ctx, model, r, penalty=penalty))

    def evaluate_global(self, ctx: ServerContext, model: nn.Module, r: int) -> None:
        """The devices evaluate their personal models; the global model is not scored."""
