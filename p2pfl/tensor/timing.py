"""Simulated time of a fleet round, from the event kernel's link model, as array arithmetic.

A transfer u -> v takes 8 S / B + L: S its bytes, B = min(link bandwidth, u's uplink, v's downlink), L the
link's latency (``p2pfl.sim.network``; 8 S / B is ``p2pfl.sim.cost.tx_time_s``, over arrays here). A node's
uplink sends one message at a time, first come first served: that queue is :func:`fifo`. The tensor engine
runs rounds as barriers (every device starts round r + 1 when the last message of round r has arrived), so its
time is the event kernel's where the kernel's devices wait for each other, and an upper bound where they do not
(a gossiping device that is done starts its next round at once).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["fifo", "SHORT", "neighbour_sends"]

#: Queues up to this long are served together (a pass per position); longer ones one at a time.
SHORT = 64


def fifo(ready: np.ndarray, service: np.ndarray, queue: np.ndarray, n_queues: int) -> np.ndarray:
    """When each item leaves its queue: items of one queue served one at a time in order of ``ready`` (ties:
    in the order given), each for ``service`` seconds, the queue idle at first.

    A queue's k-th end is S_k + max over m <= k of (ready_m - S_{m-1}), S its running service: one cumulative
    maximum a queue. Short queues (gossip's replies) go together, one pass of array operations per position
    in the longest; long ones (a server's) one queue at a time."""
    done = np.empty(len(ready), dtype=np.float64)
    if len(ready) == 0:
        return done
    order = np.lexsort((np.arange(len(ready)), ready, queue))
    q, r, s = queue[order], ready[order], service[order]
    starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
    ends = np.r_[starts[1:], len(q)]
    out = np.empty(len(q), dtype=np.float64)
    if int((ends - starts).max()) > SHORT:
        for a, b in zip(starts, ends):
            total = np.cumsum(s[a:b])
            out[a:b] = total + np.maximum.accumulate(r[a:b] - (total - s[a:b]))
    else:
        rank = np.arange(len(q)) - np.repeat(starts, ends - starts)
        free = np.zeros(n_queues, dtype=np.float64)
        for k in range(int(rank.max()) + 1):
            at = np.flatnonzero(rank == k)
            end = np.maximum(r[at], free[q[at]]) + s[at]
            free[q[at]] = end
            out[at] = end
    done[order] = out
    return done


def neighbour_sends(fleet: Any, adj: Any, size: int) -> float:
    """Every device sends ``size`` bytes to each neighbour of ``adj`` after its training (``fleet.compute_s()``),
    one after another in id order on its uplink: the round's end, the last arrival or the last training, whichever
    is later. DSGD's and DAC cosine's static rounds."""
    from p2pfl.sim.cost import tx_time_s

    src, dst = adj.sources, adj.indices.astype(np.int64)
    c = fleet.compute_s()
    tx = tx_time_s(size, np.minimum(np.minimum(fleet.link.bandwidth_bps, fleet.uplink_bps[src]), fleet.downlink_bps[dst]))
    run = np.cumsum(tx)  # each uplink sends to its neighbours in id order, one after another
    before = np.repeat(np.r_[0.0, run][adj.indptr[:-1]], adj.degree)
    arrive = c[src] + (run - before) + fleet.link.latency_s
    return float(max(arrive.max(initial=0.0), c.max(initial=0.0)))
