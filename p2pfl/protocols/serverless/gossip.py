"""Gossip learning: local SGD plus randomized pairwise model averaging.

Randomized gossip (Boyd et al., "Randomized gossip algorithms", 2006), used as
the Conditional paper's gossip baseline (Sec. II, Appendix K-C): after local
training, a device picks a neighbour uniformly at random and the two average
their models.

- ``mode: sync``: every device runs ``rounds`` rounds of train-then-exchange
  (round-structured, no global barrier: a fast device may be ahead).
- ``mode: async``: each device wakes on its own seeded Poisson clock (rate
  ``wake_rate_hz``) and then trains and exchanges; ``rounds`` wakes per device.
- ``exchange: push_pull``: i sends x_i to j; j answers with its current x_j and
  moves to (x_j + x_i)/2; i moves to (its current model + x_j)/2. Each update
  is a convex combination, so models never leave the hull of the fleet's models.
  When exchanges do not overlap in time the fleet's mean model is preserved
  exactly. (Applying i's update as x_i += (x_j - x_i_sent)/2 would preserve the
  mean even under overlap, but when two devices pick each other in the same
  round it swaps their models instead of averaging them.) ``exchange: push``:
  j averages, i keeps x_i.
- Local training runs on a copy and its delta is added at the end of the
  modelled compute time, so a neighbour asking mid-training sees the model as
  it was, plus any averaging that happened meanwhile.

Consensus distance (mean over devices of ||x_i - mean(x)||^2) is logged each
time all devices have finished a round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional, TypeVar, Union

import numpy as np
from pydantic import Field, PositiveFloat
from torch import nn

from p2pfl.learning.aggregate import sub
from p2pfl.learning.state import add_delta_, live_state
from p2pfl.maths.consensus import consensus_distance
from p2pfl.protocols.base import Process, Protocol, ProtocolParams

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext
    from p2pfl.sim.network import Message
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["Gossip", "GossipParams", "select_peer"]


class GossipParams(ProtocolParams):
    mode: Literal["sync", "async"] = Field("sync", description="rounds of train-then-exchange, or Poisson clocks")
    exchange: Literal["push_pull", "push"] = Field("push_pull", description="pairwise averaging, or push only")
    wake_rate_hz: float = Field(1.0, gt=0, description="async: Poisson wake-up rate per device")
    init: Literal["common", "independent"] = Field("common", description="initial weights shared or per device")
    reply_timeout_s: Optional[Union[PositiveFloat, Literal["auto"]]] = Field(
        None, description="give up waiting for a pull reply (lossy links, dynamics); 'auto': from the link model "
                          "(Gossip.reply_timeout)")


def select_peer(neighbors: tuple[int, ...], rng: np.random.Generator) -> Optional[int]:
    """A neighbour drawn uniformly at random, or None for an isolated device."""
    if not neighbors:
        return None
    return int(neighbors[int(rng.integers(len(neighbors)))])


GP = TypeVar("GP", bound=GossipParams)


class Gossip(Protocol[GP]):
    """Serverless gossip averaging over the topology (Boyd et al. 2006; Conditional paper App. K-C).

    Generic in its params so variants with more fields (``rnd_gossip``) type-check;
    ``Gossip(GossipParams(...), run)`` is a plain gossip.
    """

    model_rows = True

    name = "gossip"
    Params = GossipParams
    #: Relay pushes and replies over shortest paths (for candidate peers that are not neighbours).
    routed: ClassVar[bool] = False
    summary = "serverless randomized gossip: pairwise push-pull (or push) averaging, sync or async"
    tensor_program = "p2pfl.protocols.serverless.gossip_tensor:GossipRounds"
    supports_dynamics = True
    current_models = True

    def __init__(self, params: GP, run: RunInfo) -> None:
        super().__init__(params, run)
        self.models: dict[int, nn.Module] = {}
        self._finished: dict[int, int] = {}
        #: Exchanges that got no reply in time, and rounds that found no (live, compatible) peer to try
        #: (reported under dynamics)
        self.exchanges_failed = 0
        self.exchanges_without_peer = 0
        #: the topology's largest degree (``reply_timeout_s: auto``)
        self._max_degree = max((d for _, d in run.graph.degree), default=0) if params.reply_timeout_s == "auto" else 0

    def deadline_fields(self) -> tuple[str, ...]:
        return ("reply_timeout_s",) if self.params.exchange == "push_pull" else ()

    def device(self, ctx: DeviceContext) -> Process:
        yield from self.rounds(ctx, self.start(ctx))

    def start(self, ctx: DeviceContext) -> nn.Module:
        """The device's model, with its responder answering pushes from now on."""
        model = ctx.new_model(independent=self.params.init == "independent")
        self.models[ctx.id] = model
        if ctx.id == self.run.n_devices - 1:
            self._log_consensus(ctx, 0)
        ctx.spawn(self.responder(ctx, model))
        return model

    def rounds(self, ctx: DeviceContext, model: nn.Module) -> Process:
        """Train, exchange with one peer, evaluate: ``rounds`` times."""
        p = self.params
        for r in range(1, p.rounds + 1):
            if p.mode == "async":
                yield ctx.sleep(float(ctx.rng.exponential(1.0 / p.wake_rate_hz)))
            yield from self.local_step(ctx, model)
            yield from self.exchange(ctx, model, r)
            if self.should_eval(r):
                ctx.evaluate(model, r)
            ctx.round_done(r)
            self._finished[r] = self._finished.get(r, 0) + 1
            if self._finished[r] == self.run.n_devices:
                self._log_consensus(ctx, r)
            self.round_finished(ctx, r)

    def round_finished(self, ctx: DeviceContext, r: int) -> None:
        """Called when a device ends round ``r`` (variants log fleet-wide figures)."""

    def local_step(self, ctx: DeviceContext, model: nn.Module) -> Process:
        """Train from the model as it is now; add the change to the live model when the compute time is over."""
        yield from ctx.train(model, delta=True)

    def candidate_peers(self, ctx: DeviceContext) -> tuple[int, ...]:
        """Whom this device may gossip with: its live neighbours (the topology's, for a static fleet;
        variants restrict or extend this)."""
        return ctx.live_neighbors

    def exchange(self, ctx: DeviceContext, model: nn.Module, r: int) -> Process:
        """Initiate one exchange with a random candidate peer."""
        peer = select_peer(self.candidate_peers(ctx), ctx.rng)
        if peer is None:
            self.exchanges_without_peer += 1
            return
        push = {"state": live_state(model)}
        timeout = self.reply_timeout(ctx, peer, push)
        yield ctx.send(peer, "gossip_push", push, round=r, routed=self.routed)  # a snapshot
        if self.params.exchange == "push":
            return
        while True:
            reply: Optional[Message] = yield ctx.recv("gossip_reply", timeout=timeout)
            if reply is None:
                self.exchanges_failed += 1
                return  # lost or too late: keep our model
            if reply.src == peer and reply.round == r:
                break
        mine = live_state(model)  # may have moved since the push (pushes answered meanwhile)
        add_delta_(model, sub(reply.payload["state"], mine), 0.5)

    def reply_timeout(self, ctx: DeviceContext, peer: int, push: dict[str, Any]) -> Optional[float]:
        """How long to wait for ``peer``'s reply: ``reply_timeout_s``, or with ``auto`` (2 + D) round trips
        of the model over the route with every uplink free (``ctx.transfer_s``), D the topology's largest
        degree: ahead of our reply the peer's uplink may hold its own push and a reply to each of its
        neighbours, so in a static lossless fleet no reply comes later (tested: no failed exchange)."""
        t = self.params.reply_timeout_s
        if t != "auto":
            return t
        return (2 + self._max_degree) * 2 * ctx.transfer_s(peer, push, routed=self.routed)

    def responder(self, ctx: DeviceContext, model: nn.Module) -> Process:
        """Answer every push: reply with our model (push-pull), then move halfway."""
        while True:  # no local holds a push while the next is awaited (a model copy per device)
            self.answer(ctx, model, (yield ctx.recv("gossip_push")))

    def answer(self, ctx: DeviceContext, model: nn.Module, msg: Message) -> None:
        """Reply to one push with our model (push-pull), then move halfway to the pushed one."""
        mine = live_state(model)
        if self.params.exchange == "push_pull":  # the reply is a snapshot, taken before we move
            ctx.send(msg.src, "gossip_reply", {"state": mine}, round=msg.round, routed=self.routed)
        add_delta_(model, sub(msg.payload["state"], mine), 0.5)

    def current_model(self, device: int) -> Optional[nn.Module]:
        """The device's live model (trained, averaged as it goes)."""
        return self.models.get(device)

    def result(self) -> dict[str, Any]:
        return self.exchange_counts() if self.dynamic else {}

    def exchange_counts(self) -> dict[str, int]:
        """``exchanges_failed`` (no reply in time) and ``exchanges_without_peer`` (no peer to try)."""
        return {"exchanges_failed": self.exchanges_failed, "exchanges_without_peer": self.exchanges_without_peer}

    def _log_consensus(self, ctx: DeviceContext, r: int) -> None:
        states = [live_state(self.models[i]) for i in sorted(self.models)]
        ctx.log("consensus_distance", consensus_distance(states), round=r)
