"""A round of neighbour averaging's messages over arrays, under dynamics: the exchange DSGD and DAC cosine share
(``p2pfl.protocols.serverless.neighbour_averaging``: train, send the model to every live peer, gather the peers'
round models until a deadline).

Each device online at the round's start (``RoundProgram.online``) trains, sends its model to each of its
neighbours online then, in id order over its uplink (the kernel's sends, ``p2pfl.sim.network``), and waits for
its peers' models until ``round_timeout_s`` after its last send has left. A message whose receiver is offline
when it arrives is dropped (``offline``: its bytes sent, not received), as the kernel's network drops it; one
that arrives after the receiver's deadline is delivered but too late for the round (the kernel's
``models_missing``). A device's round ends when every peer's model came, or at its deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from p2pfl.sim.cost import tx_time_s
from p2pfl.tensor.program import Fleet

__all__ = ["NeighbourRound", "neighbour_round"]


@dataclass(frozen=True)
class NeighbourRound:
    """The messages of one round: ``src[m] -> dst[m]`` (grouped by receiver, senders ascending), which came in time
    (``got``), each device's live degree, the round's length and its bytes and drops."""

    src: np.ndarray
    dst: np.ndarray
    got: np.ndarray  # delivered and by the receiver's deadline
    degree: np.ndarray  # each device's live peers (0 offline)
    duration_s: float
    sent: np.ndarray  # bytes sent by each device
    received: np.ndarray
    dropped: int  # messages dropped at an offline receiver
    missing: int  # peers' models that did not come by the deadline (dropped or late)

    def received_by(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The models that came, as CSR by receiver: (indptr, senders ascending)."""
        dst, src = self.dst[self.got], self.src[self.got]
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
        return indptr, src


def neighbour_round(fleet: Fleet, online: np.ndarray, size: int, timeout_s: Optional[float], now: float) -> NeighbourRound:
    """The round that starts at ``now`` with ``online`` devices, each message ``size`` bytes (module docstring)."""
    adj, n = fleet.adjacency, fleet.n
    src_all, dst_all = adj.sources, adj.indices.astype(np.int64)
    live = online[src_all] & online[dst_all]
    src, dst = src_all[live], dst_all[live]  # by sender, receivers ascending: each uplink's order
    degree = np.bincount(src, minlength=n)
    c = fleet.compute_s()
    tx = tx_time_s(size, np.minimum(np.minimum(fleet.link.bandwidth_bps, fleet.uplink_bps[src]),
                                    fleet.downlink_bps[dst]))
    run = np.cumsum(tx)
    ptr = np.r_[0, np.cumsum(degree)]
    before = np.repeat(np.r_[0.0, run][ptr[:-1]], degree)
    left = c[src] + (run - before)  # when the message has left its sender's uplink
    arrive = left + fleet.link.latency_s
    sends_done = c.copy()
    np.maximum.at(sends_done, src, left)
    churn = fleet.churn
    delivered = churn.states(dst, now + arrive) if churn is not None else np.ones(len(dst), dtype=bool)
    deadline = sends_done + (np.inf if timeout_s is None else timeout_s)
    got = delivered & (arrive <= deadline[dst])
    # a device's round ends once every peer's model came, else at its deadline
    last = sends_done.copy()
    np.maximum.at(last, dst, arrive)
    short = np.bincount(dst[~got], minlength=n) > 0
    finish = np.where(short, deadline, last)
    duration = float(finish[online].max(initial=0.0))
    sent = np.bincount(src, minlength=n).astype(np.int64) * size
    received = np.bincount(dst[delivered], minlength=n).astype(np.int64) * size
    order = np.lexsort((src, dst))  # by receiver, senders ascending
    return NeighbourRound(src[order], dst[order], got[order], degree, duration, sent, received,
                          int((~delivered).sum()), int((~got).sum()))
