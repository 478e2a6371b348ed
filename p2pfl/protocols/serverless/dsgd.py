"""Decentralized SGD with Metropolis-Hastings mixing (Lian et al., NeurIPS 2017; Xiao & Boyd 2004 weights).

The Conditional paper's related work (Sec. II, "Decentralized SGD [12]").
Synchronous rounds: every device trains locally, sends its model to all its
topology neighbours, waits for all neighbours' round-r models (messages of a
later round that arrive early are kept for that round), then mixes

    x_i <- w_ii x_i + sum_{j in N(i)} w_ij x_j,
    w_ij = 1 / (1 + max(d_i, d_j)),   w_ii = 1 - sum_j w_ij,

a symmetric, doubly stochastic matrix, so the fleet's mean model is preserved
by the mixing step. Each device needs its neighbours' degrees, which the
topology gives once at start (no per-round bytes).
"""

from __future__ import annotations

from typing import Any, Generator

import networkx as nx
import torch

from p2pfl.learning.aggregate import State, clone_state
from p2pfl.learning.state import live_state, load_state_
from p2pfl.protocols.base import Protocol, ProtocolParams
from p2pfl.sim.context import DeviceContext

__all__ = ["DSGD", "metropolis_weights", "mix", "gather_round"]


def metropolis_weights(graph: nx.Graph, node: int) -> dict[int, float]:
    """Row ``node`` of the Metropolis-Hastings matrix: {j: w_ij} for neighbours and {node: w_ii}."""
    d_i = graph.degree(node)
    row = {int(j): 1.0 / (1.0 + max(d_i, graph.degree(j))) for j in sorted(graph.neighbors(node))}
    row[int(node)] = 1.0 - sum(row.values())
    return row


def mix(states: dict[int, State], weights: dict[int, float]) -> State:
    """sum_j w_j x_j over the states (float64 accumulation; integer buffers kept from the first)."""
    if set(states) != set(weights):
        raise ValueError(f"states and weights name different nodes: {sorted(states)} vs {sorted(weights)}")
    ids = sorted(states)
    out: State = {}
    for k, ref in states[ids[0]].items():
        if not torch.is_floating_point(ref):
            out[k] = ref.clone()
            continue
        acc = torch.zeros_like(ref, dtype=torch.float64)
        for j in ids:
            acc += states[j][k].to(torch.float64) * weights[j]
        out[k] = acc.to(ref.dtype)
    return out


def gather_round(ctx: DeviceContext, kind: str, r: int, sources: tuple[int, ...],
                 pending: dict[int, dict[int, Any]]) -> Generator:
    """Receive one ``kind`` message of round ``r`` from each of ``sources``; keep later rounds in ``pending``.

    Returns ``{src: message}``. Messages for earlier rounds cannot arrive in a
    synchronous protocol; they would be a bug and raise.
    """
    got = pending.pop(r, {})
    want = set(sources)
    while not want <= set(got):
        msg = yield ctx.recv(kind)
        if msg.round == r:
            got[msg.src] = msg
        elif msg.round > r:
            pending.setdefault(msg.round, {})[msg.src] = msg
        else:
            raise RuntimeError(f"device {ctx.id} got a round-{msg.round} {kind!r} message in round {r}")
    return got


class DSGD(Protocol):
    """Synchronous decentralized SGD: train, send to every neighbour, Metropolis-Hastings mix."""

    name = "dsgd"
    Params = ProtocolParams
    summary = "decentralized SGD: train, exchange with all neighbours, Metropolis-Hastings mixing (synchronous)"

    def __init__(self, params: ProtocolParams, sim) -> None:
        super().__init__(params, sim)
        self.models: dict[int, torch.nn.Module] = {}

    def device(self, ctx: DeviceContext) -> Generator:
        model = ctx.new_model()
        self.models[ctx.id] = model
        weights = metropolis_weights(self.sim.topology.graph, ctx.id)
        pending: dict[int, dict[int, Any]] = {}
        for r in range(1, self.params.rounds + 1):
            yield from ctx.train(model)
            mine = clone_state(live_state(model))
            for j in ctx.neighbors:
                yield ctx.send(j, "dsgd_model", {"state": mine}, round=r)
            got = yield from gather_round(ctx, "dsgd_model", r, ctx.neighbors, pending)
            states = {j: m.payload["state"] for j, m in got.items()}
            states[ctx.id] = mine
            load_state_(model, mix(states, weights))
            if self.should_eval(r):
                ctx.evaluate(model, r)
            ctx.round_done(r)
