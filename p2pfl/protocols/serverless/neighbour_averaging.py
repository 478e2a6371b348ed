"""Synchronous neighbour averaging: the loop DSGD and DAC (cosine top-k) share.

Each round a device trains locally, sends its model to its chosen peers,
gathers those peers' models of the same round (a model of a later round that
arrives early is kept for that round), and sets its model to a weighted mix of
its own and the received ones. Subclasses say whom a device talks to
(``peers``), whether messages are relayed over shortest paths (``routed``) and
how it mixes (``mix``, built on :mod:`p2pfl.learning.aggregate`).

This module holds a base class without a ``name``: it is not a protocol of its own.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, ClassVar

from torch import nn

from p2pfl.learning.aggregate import State, clone_state
from p2pfl.learning.state import live_state, load_state_
from p2pfl.protocols.base import P, Process, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext
    from p2pfl.sim.network import Message
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["NeighbourAveraging", "gather_round"]


def gather_round(ctx: DeviceContext, kind: str, r: int, sources: tuple[int, ...],
                 pending: dict[int, dict[int, Message]]) -> Generator[Any, Any, dict[int, Message]]:
    """Receive one ``kind`` message of round ``r`` from each of ``sources``; keep later rounds in ``pending``.

    Returns ``{src: message}``. Messages for earlier rounds cannot arrive in a
    synchronous protocol; they would be a bug and raise.
    """
    got = pending.pop(r, {})
    want = set(sources)
    while not want <= set(got):
        msg: Message = yield ctx.recv(kind)
        if msg.round == r:
            got[msg.src] = msg
        elif msg.round > r:
            pending.setdefault(msg.round, {})[msg.src] = msg
        else:
            raise RuntimeError(f"device {ctx.id} got a round-{msg.round} {kind!r} message in round {r}")
    return got


class NeighbourAveraging(Protocol[P]):
    """Synchronous rounds of: train, send the model to ``peers``, gather their round-r models, ``mix``.

    Subclasses set ``message_kind`` and implement ``peers`` and ``mix``;
    ``models`` holds every device's live model (for tests and analysis).
    """

    #: Kind of the model messages (``bytes_by_kind`` key).
    message_kind: ClassVar[str]

    def __init__(self, params: P, run: RunInfo) -> None:
        super().__init__(params, run)
        self.models: dict[int, nn.Module] = {}

    def peers(self, ctx: DeviceContext) -> tuple[int, ...]:
        """Whom this device sends its model to and waits for each round: its topology neighbours by default."""
        return ctx.neighbors

    def routed(self) -> bool:
        """Relay the model messages over shortest paths (peers that are not neighbours)?"""
        return False

    @abstractmethod
    def mix(self, ctx: DeviceContext, mine: State, received: dict[int, State]) -> State:
        """The device's new model from its own (``mine``) and its peers' round models (``received``)."""

    def device(self, ctx: DeviceContext) -> Process:
        model = ctx.new_model()
        self.models[ctx.id] = model
        peers = self.peers(ctx)
        routed = self.routed()
        pending: dict[int, dict[int, Message]] = {}
        for r in range(1, self.params.rounds + 1):
            yield from ctx.train(model)
            mine = clone_state(live_state(model))
            for j in peers:
                yield ctx.send(j, self.message_kind, {"state": mine}, round=r, routed=routed)
            got = yield from gather_round(ctx, self.message_kind, r, peers, pending)
            received = {j: m.payload["state"] for j, m in got.items()}
            load_state_(model, self.mix(ctx, mine, received))
            if self.should_eval(r):
                ctx.evaluate(model, r)
            ctx.round_done(r)
