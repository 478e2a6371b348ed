"""The server's "collect round r" step, shared by every server protocol.

A server that sent round ``r``'s model(s) waits for its devices' replies: it
keeps messages of round ``r`` only (a late reply of an earlier round is
stale and dropped), stops when every expected sender has answered, or when
``timeout_s`` of simulated time has passed (lost or late replies are then
skipped). Replies are returned in arrival order, keyed by sender id.
"""

from __future__ import annotations

from collections.abc import Collection, Generator
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import ServerContext
    from p2pfl.sim.network import Message

__all__ = ["collect_round"]


def collect_round(ctx: ServerContext, kind: str, r: int, senders: Collection[int],
                  timeout_s: Optional[float] = None, from_first: bool = False) -> Generator[Any, Any, dict[int, Message]]:
    """Round ``r``'s ``kind`` messages from ``senders``: ``{src: message}`` in arrival order.

    ``from_first``: the ``timeout_s`` starts when the first message arrives (for phases whose
    length the server cannot know, e.g. devices training a predictor before they answer).
    """
    expected = set(senders)
    got: dict[int, Message] = {}
    deadline = None if timeout_s is None or from_first else ctx.now + timeout_s
    while not expected <= got.keys():
        msg = yield ctx.recv(kind, timeout=None if deadline is None else max(deadline - ctx.now, 0.0))
        if msg is None:
            break
        if msg.round == r and msg.src in expected:
            got[msg.src] = msg
            if deadline is None and timeout_s is not None:
                deadline = ctx.now + timeout_s
    return got
