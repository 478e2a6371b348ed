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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import networkx as nx

from p2pfl.learning.aggregate import State, weighted_sum
from p2pfl.protocols.base import ProtocolParams
from p2pfl.protocols.serverless.neighbour_averaging import NeighbourAveraging

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["DSGD", "metropolis_weights", "metropolis_mix"]


def metropolis_weights(graph: nx.Graph, node: int) -> dict[int, float]:
    """Row ``node`` of the Metropolis-Hastings matrix: {j: w_ij} for neighbours and {node: w_ii}."""
    d_i = graph.degree(node)
    row = {int(j): 1.0 / (1.0 + max(d_i, graph.degree(j))) for j in sorted(graph.neighbors(node))}
    row[int(node)] = 1.0 - sum(row.values())
    return row


def metropolis_mix(states: dict[int, State], weights: dict[int, float]) -> State:
    """x_i <- sum_j w_ij x_j: ``weighted_sum`` over the nodes in id order (the row already sums to one)."""
    if set(states) != set(weights):
        raise ValueError(f"states and weights name different nodes: {sorted(states)} vs {sorted(weights)}")
    return weighted_sum([(states[j], weights[j]) for j in sorted(states)])


class DSGD(NeighbourAveraging[ProtocolParams]):
    """Synchronous decentralized SGD (Lian et al. 2017, D-PSGD) with Metropolis-Hastings weights
    (Xiao & Boyd 2004): train, send to every neighbour, mix (module docstring)."""

    name = "dsgd"
    Params = ProtocolParams
    summary = "decentralized SGD: train, exchange with all neighbours, Metropolis-Hastings mixing (synchronous)"
    message_kind = "dsgd_model"

    def __init__(self, params: ProtocolParams, run: RunInfo) -> None:
        super().__init__(params, run)
        #: Each device's row of the mixing matrix, from the topology known at start.
        self.weights = {i: metropolis_weights(run.graph, i) for i in run.device_ids}

    def mix(self, ctx: DeviceContext, mine: State, received: dict[int, State]) -> State:
        return metropolis_mix({**received, ctx.id: mine}, self.weights[ctx.id])
