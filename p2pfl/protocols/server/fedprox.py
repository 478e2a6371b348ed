"""FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020, Sec. 3).

FedAvg whose local objective adds the proximal term mu/2 ||w - w_global||^2,
keeping local models near the global model under heterogeneity. Everything
else (messages, bytes, aggregation) is FedAvg's: the variant overrides
``local_update`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
from pydantic import Field
from torch import nn

from p2pfl.learning.aggregate import clone_state
from p2pfl.learning.train import Penalty
from p2pfl.protocols.base import Process
from p2pfl.protocols.server.fedavg import FedAvgBase, FedAvgParams

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext

__all__ = ["FedProx", "FedProxParams", "ProximalPenalty", "proximal_penalty"]


class FedProxParams(FedAvgParams):
    mu: float = Field(0.01, ge=0, description="proximal coefficient")


@dataclass(frozen=True)
class ProximalPenalty:
    """penalty(model) = coefficient/2 * sum over parameters ||p - anchor[p]||^2 (an object, so a
    training job carrying it can run in another process)."""

    anchor: dict[str, torch.Tensor]
    coefficient: float

    def __call__(self, model: nn.Module) -> torch.Tensor:
        terms = [((p - self.anchor[name]) ** 2).sum() for name, p in model.named_parameters() if p.requires_grad]
        return 0.5 * self.coefficient * torch.stack(terms).sum()


def proximal_penalty(anchor: Mapping[str, torch.Tensor], coefficient: float) -> Penalty:
    """The proximal term toward ``anchor`` (detached)."""
    return ProximalPenalty({k: v.detach() for k, v in anchor.items()}, coefficient)


class FedProx(FedAvgBase[FedProxParams]):
    """FedAvg with a proximal term toward the round's global model."""

    name = "fedprox"
    Params = FedProxParams
    current_models = True  # FedAvgBase's: the server's global model (the penalty changes local training only)
    summary = "FedAvg with a proximal term mu/2 ||w - w_global||^2 in local training"

    def local_update(self, ctx: DeviceContext, model: nn.Module, r: int, penalty: Optional[Penalty] = None) -> Process:
        prox = proximal_penalty(clone_state(dict(model.named_parameters())), self.params.mu)
        return (yield from super().local_update(ctx, model, r, penalty=prox))
