"""Simulated time of a fleet round, from the event kernel's link model, as array arithmetic.

A transfer u -> v takes 8 S / B + L: S its bytes, B = min(link bandwidth, u's uplink, v's downlink), L the
link's latency (``p2pfl.sim.network``). A node's uplink sends one message at a time, first come first
served: that queue is :func:`fifo`. The tensor engine runs rounds as barriers (every device starts round
r + 1 when the last message of round r has arrived), so its time is the event kernel's where the kernel's
devices wait for each other, and an upper bound where they do not (a gossiping device that is done starts
its next round at once).
"""

from __future__ import annotations

import numpy as np

__all__ = ["fifo", "tx_s"]


def tx_s(size_bytes: int, bandwidth_bps: np.ndarray) -> np.ndarray:
    """Seconds to put ``size_bytes`` on a link of each bandwidth."""
    return 8.0 * size_bytes / bandwidth_bps


def fifo(ready: np.ndarray, service: np.ndarray, queue: np.ndarray, n_queues: int) -> np.ndarray:
    """When each item leaves its queue: items of one queue served one at a time in order of ``ready`` (ties:
    in the order given), each for ``service`` seconds, the queue idle at first.

    One pass of array operations per position in the longest queue; a single queue is one cumulative
    maximum (its k-th end is S_k + max over m <= k of (ready_m - S_{m-1}), S the running service)."""
    done = np.empty(len(ready), dtype=np.float64)
    if len(ready) == 0:
        return done
    order = np.lexsort((np.arange(len(ready)), ready, queue))
    q, r, s = queue[order], ready[order], service[order]
    if n_queues == 1 or (q[0] == q[-1]):
        total = np.cumsum(s)
        done[order] = total + np.maximum.accumulate(r - (total - s))
        return done
    starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
    rank = np.arange(len(q)) - np.repeat(starts, np.diff(np.r_[starts, len(q)]))
    free = np.zeros(n_queues, dtype=np.float64)
    out = np.empty(len(q), dtype=np.float64)
    for k in range(int(rank.max()) + 1):
        at = np.flatnonzero(rank == k)
        end = np.maximum(r[at], free[q[at]]) + s[at]
        free[q[at]] = end
        out[at] = end
    done[order] = out
    return done
