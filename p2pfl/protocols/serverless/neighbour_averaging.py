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
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from torch import nn

from p2pfl.learning.aggregate import State, clone_state
from p2pfl.learning.state import live_state, load_state_
from p2pfl.protocols.base import P, Process, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext
    from p2pfl.sim.network import Message
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["NeighbourAveraging"]


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
        #: Peers' round models that did not arrive by the deadline (reported under dynamics).
        self.models_missing = 0

    supports_dynamics = True
    current_models = True

    def current_model(self, device: int) -> Optional[nn.Module]:
        """The device's live model (its last round's mix, or as its training left it)."""
        return self.models.get(device)

    def peers(self, ctx: DeviceContext) -> tuple[int, ...]:
        """Whom this device sends its model to and waits for this round: its live neighbours by default
        (the topology's, for a static fleet)."""
        return ctx.live_neighbors

    def deadline_fields(self) -> tuple[str, ...]:
        return ("round_timeout_s",)

    def initial_model(self, ctx: DeviceContext) -> nn.Module:
        """The device's model at start: the common initial weights (or its own with ``init: independent``)."""
        return ctx.new_model(independent=getattr(self.params, "init", "common") == "independent")

    def payload(self, ctx: DeviceContext, mine: State, peers: tuple[int, ...]) -> dict[str, Any]:
        """What a round's model message carries (subclasses add fields)."""
        return {"state": mine}

    def routed(self) -> bool:
        """Relay the model messages over shortest paths (peers that are not neighbours)?"""
        return False

    @abstractmethod
    def mix(self, ctx: DeviceContext, mine: State, received: dict[int, State],
            payloads: dict[int, dict[str, Any]]) -> State:
        """The device's new model from its own (``mine``) and its peers' round models (``received``;
        ``payloads`` are their whole messages' payloads, see ``payload``)."""

    def device(self, ctx: DeviceContext) -> Process:
        model = self.initial_model(ctx)
        self.models[ctx.id] = model
        routed = self.routed()
        timeout_s = getattr(self.params, "round_timeout_s", None)
        pending: dict[int, dict[int, Message]] = {}
        for r in range(1, self.params.rounds + 1):
            yield from ctx.train(model)
            mine = clone_state(live_state(model))
            peers = self.peers(ctx)
            payload = self.payload(ctx, mine, peers)  # a fresh snapshot, never changed: one copy for all peers
            for j in peers:
                yield ctx.send(j, self.message_kind, payload, round=r, routed=routed, share=True)
            got = yield from ctx.collect(self.message_kind, r, peers, until=ctx.deadline(timeout_s), keep_later=pending)
            self.models_missing += len(peers) - len(got)
            received = {j: m.payload["state"] for j, m in got.items()}
            load_state_(model, self.mix(ctx, mine, received, {j: m.payload for j, m in got.items()}))
            del mine, payload, got, received  # the round's models: not kept while the next round trains
            if self.should_eval(r):
                ctx.evaluate(model, r)
            ctx.round_done(r)
            self.round_finished(ctx, r)

    def round_finished(self, ctx: DeviceContext, r: int) -> None:
        """Called when a device ends round ``r`` (subclasses log fleet-wide figures)."""

    def result(self) -> dict[str, Any]:
        return {"models_missing": self.models_missing} if self.dynamic else {}
