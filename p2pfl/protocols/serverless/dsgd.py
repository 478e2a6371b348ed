"""Decentralized SGD with Metropolis-Hastings mixing (Lian et al., NeurIPS 2017; Xiao & Boyd 2004 weights).

The Conditional paper's related work (Sec. II, "Decentralized SGD [12]").
Synchronous rounds: every device trains locally, sends its model to all its
topology neighbours, waits for all neighbours' round-r models (messages of a
later round that arrive early are kept for that round), then mixes

    x_i <- w_ii x_i + sum_{j in N(i)} w_ij x_j,
    w_ij = 1 / (1 + max(d_i, d_j)),   w_ii = 1 - sum_j w_ij,

a symmetric, doubly stochastic matrix, so the fleet's mean model is preserved
by the mixing step. Each device needs its neighbours' degrees, which the
topology gives once at start (no per-round bytes). The loop (train, send,
gather, mix) is :class:`~p2pfl.protocols.serverless.neighbour_averaging.NeighbourAveraging`;
the mix is :func:`p2pfl.learning.aggregate.weighted_sum` over the sorted ids.

Under dynamics (our extension; the paper assumes a fixed graph): each round a device sends to its
*live* neighbours, with its live degree d_i (8 bytes more), and waits until ``round_timeout_s``;
the weights are Metropolis-Hastings over the live degrees, w_ij = 1 / (1 + max(d_i, d_j)) for
the neighbours whose model arrived, and the weight of those that did not goes to the device itself
(w_ii = 1 - sum of the arrived w_ij). When both ends of a link get each other's model, or neither
does, the matrix stays symmetric and doubly stochastic, so mixing still preserves the fleet's mean
(a link failing while only one direction is in flight breaks that symmetry for that round).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional

import networkx as nx
import numpy as np
from pydantic import Field

from p2pfl.learning.aggregate import State, weighted_sum
from p2pfl.maths.mixing import metropolis_edge_weights, metropolis_self_weights
from p2pfl.protocols.base import ProtocolParams
from p2pfl.protocols.serverless.neighbour_averaging import NeighbourAveraging

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["DSGD", "DSGDParams", "metropolis_weights", "metropolis_mix", "live_metropolis_row"]


class DSGDParams(ProtocolParams):
    init: Literal["common", "independent"] = Field("common", description="initial weights shared or per device")
    round_timeout_s: Optional[float] = Field(None, gt=0, description="stop waiting for neighbours' models "
                                                                     "after this long (required under dynamics)")


def metropolis_weights(graph: nx.Graph, node: int) -> dict[int, float]:
    """Row ``node`` of the Metropolis-Hastings matrix: {j: w_ij} for neighbours and {node: w_ii}."""
    return live_metropolis_row(int(node), graph.degree(node), {int(j): graph.degree(j) for j in graph.neighbors(node)})


def live_metropolis_row(node: int, degree: int, arrived: dict[int, int]) -> dict[int, float]:
    """The row under dynamics: w_ij = 1 / (1 + max(d_i, d_j)) over the arrived neighbours j (their
    degrees in ``arrived``), the rest of the row's mass on ``node`` itself (``p2pfl.maths.mixing``)."""
    ids = sorted(arrived)
    weights = metropolis_edge_weights(np.full(len(ids), degree), np.array([arrived[j] for j in ids], dtype=np.int64))
    return with_self_weight(node, dict(zip(ids, weights.tolist())))


def with_self_weight(node: int, row: dict[int, float]) -> dict[int, float]:
    """``row`` ({j: w_ij}, in id order) with ``node``'s own weight, the rest of the row's mass."""
    weights = np.fromiter(row.values(), dtype=np.float64, count=len(row))
    return {**row, node: float(metropolis_self_weights(np.zeros(len(row), dtype=np.int64), weights, 1)[0])}


def metropolis_mix(states: dict[int, State], weights: dict[int, float]) -> State:
    """x_i <- sum_j w_ij x_j: ``weighted_sum`` over the nodes in id order (the row already sums to one)."""
    if set(states) != set(weights):
        raise ValueError(f"states and weights name different nodes: {sorted(states)} vs {sorted(weights)}")
    return weighted_sum([(states[j], weights[j]) for j in sorted(states)])


class DSGD(NeighbourAveraging[DSGDParams]):
    """Synchronous decentralized SGD (Lian et al. 2017, D-PSGD) with Metropolis-Hastings weights
    (Xiao & Boyd 2004): train, send to every neighbour, mix (module docstring)."""

    model_rows = True

    name = "dsgd"
    Params = DSGDParams
    summary = "decentralized SGD: train, exchange with all neighbours, Metropolis-Hastings mixing (synchronous)"
    tensor_program = "p2pfl.protocols.serverless.dsgd_tensor:DSGDRounds"
    message_kind = "dsgd_model"
    current_models = True  # NeighbourAveraging's: each device's live model

    def __init__(self, params: DSGDParams, run: RunInfo) -> None:
        super().__init__(params, run)
        #: Each device's row of the mixing matrix, from the topology known at start.
        self.weights = {i: metropolis_weights(run.graph, i) for i in run.device_ids}
        self._degree: dict[int, int] = {}  # under dynamics: each device's live degree this round

    def payload(self, ctx: DeviceContext, mine: State, peers: tuple[int, ...]) -> dict[str, Any]:
        if not self.dynamic:
            return {"state": mine}
        self._degree[ctx.id] = len(peers)
        return {"state": mine, "degree": len(peers)}

    def mix(self, ctx: DeviceContext, mine: State, received: dict[int, State],
            payloads: dict[int, dict[str, Any]]) -> State:
        if self.dynamic:
            row = live_metropolis_row(ctx.id, self._degree[ctx.id], {j: int(p["degree"]) for j, p in payloads.items()})
        else:
            row = self.weights[ctx.id]
            if len(received) + 1 < len(row):  # a round timeout passed: the missing weight stays with the device
                row = with_self_weight(ctx.id, {j: w for j, w in row.items() if j in received})
        return metropolis_mix({**received, ctx.id: mine}, row)
