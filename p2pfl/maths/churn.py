"""Churn replayed over arrays: the event kernel's churn draws (``p2pfl.sim.dynamics``), as a fleet's online mask at
any simulated time and each device's state at the arrival time of a message.

The kernel runs churn as SimPy processes (``schedule._renewal``): each affected device (``draws.affected`` from
``stream(seed, "churn")``) alternates up and down periods drawn from its own stream ``stream(seed, "churn", d)``
by ``draws.renewal``, started in its stationary state; or a trace file (``traces.read_churn_trace``) switches
devices at given times. :class:`ChurnReplay` draws the same periods from the same streams with the same code, and
adds them up in the same order (a switch at t + length, t the previous switch, as SimPy's ``timeout``), so its
switch times are the kernel's floats, bit for bit (tested against the kernel's ``offline``/``online`` events).

The tensor engine reads it at round barriers (``online_at(T_r)``: who is online when round r starts) and at
message arrivals (``states``: a message to a device offline when it arrives is dropped, reason ``offline``, as
the kernel's network drops it, ``p2pfl.sim.network``). Device state at a switch's own time is the state after it
(a device that starts its stationary process offline is offline at t = 0).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

import numpy as np

from p2pfl.seeding import stream
from p2pfl.sim.dynamics.draws import affected, renewal
from p2pfl.sim.dynamics.schema import ChurnSpec
from p2pfl.sim.dynamics.traces import read_churn_trace

__all__ = ["ChurnReplay"]


class ChurnReplay:
    """The churn of ``spec`` over ``n`` devices under the dynamics seed ``seed`` (``draws.dynamics_seed``).

    Time only moves forward: ``online_at(t)`` moves the replay to ``t``; ``states`` answers for times from
    there on. Switches are drawn lazily, up to the latest time asked about. ``log()``: every switch applied
    so far as ``(t, device, online)``, in time order (ties: device order).
    """

    def __init__(self, spec: Optional[ChurnSpec], n: int, seed: int) -> None:
        self.n = n
        self.now = 0.0
        self._online = np.ones(n, dtype=bool)  # the state at ``now``
        self._drawn_to = -np.inf  # switches up to this time are in the queue (or applied)
        self._queue_t = np.zeros(0)  # drawn switches after ``now``, sorted by (t, device)
        self._queue_d = np.zeros(0, dtype=np.int64)
        self._queue_up = np.zeros(0, dtype=bool)
        self._log: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._periods: dict[int, Iterator[tuple[bool, float]]] = {}
        self._next = np.full(n, np.inf)  # each renewal device's next switch not drawn yet
        self._trace: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None
        if spec is None:
            return
        if spec.trace is not None:
            self._trace = _trace_switches(read_churn_trace(spec.trace, n), n)
        elif not spec.inert:
            for d in affected(stream(seed, "churn"), n, spec.fraction):
                periods = renewal(stream(seed, "churn", d), spec)
                up, length = next(periods)
                self._online[d] = up  # the kernel switches a device that starts offline at t = 0
                self._periods[d] = periods
                self._next[d] = 0.0 + length  # SimPy: now + delay
            off = np.flatnonzero(~self._online)
            if len(off):
                self._log.append((np.zeros(len(off)), off, np.zeros(len(off), dtype=bool)))
        self._extend(0.0)
        self._apply(0.0)

    @property
    def churns(self) -> bool:
        """Does any device ever go offline?"""
        return bool(self._periods) or (self._trace is not None and len(self._trace[0]) > 0)

    def online_at(self, t: float) -> np.ndarray:
        """The fleet's online mask at time ``t`` (>= the last time asked), and the replay moved there."""
        if t < self.now:
            raise ValueError(f"the replay is at t = {self.now}; it cannot go back to {t}")
        self._extend(t)
        self._apply(t)
        self.now = t
        return self._online.copy()

    def states(self, devices: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Whether each of ``devices`` is online at the matching one of ``times`` (each >= ``now``)."""
        devices = np.asarray(devices, dtype=np.int64)
        times = np.asarray(times, dtype=np.float64)
        if len(times) == 0:
            return np.zeros(0, dtype=bool)
        if float(times.min()) < self.now:
            raise ValueError(f"states before the replay's time {self.now} are gone")
        self._extend(float(times.max()))
        out = self._online[devices].copy()
        if not len(self._queue_t):
            return out
        # merge switches and queries by (device, time), a switch before a query at the same time: each query
        # takes the latest switch of its device at or before it
        k = len(self._queue_t)
        dev = np.concatenate([self._queue_d, devices])
        tim = np.concatenate([self._queue_t, times])
        kind = np.concatenate([np.zeros(k, dtype=np.int8), np.ones(len(times), dtype=np.int8)])
        order = np.lexsort((kind, tim, dev))
        is_switch = order < k
        last = np.maximum.accumulate(np.where(is_switch, np.arange(len(order)), -1))
        query_at = np.flatnonzero(~is_switch)
        src = last[query_at]
        ok = src >= 0
        ok[ok] = dev[order[src[ok]]] == dev[order[query_at[ok]]]
        queries = order[query_at] - k
        out[queries[ok]] = self._queue_up[order[src[ok]]]
        return out

    def next_switch(self) -> float:
        """When the next switch after ``now`` happens (inf: none ever does)."""
        if len(self._queue_t):
            return float(self._queue_t[0])
        if self._trace is not None:
            tt = self._trace[0]
            k = int(np.searchsorted(tt, self._drawn_to, side="right"))
            return float(tt[k]) if k < len(tt) else np.inf
        return float(self._next.min(initial=np.inf))

    def availability(self) -> np.ndarray:
        """Each device's share of ``[0, now]`` online (the kernel fleet's ``availability`` at the run's end)."""
        if self.now <= 0:
            return np.ones(self.n)
        off = np.zeros(self.n)
        since = np.full(self.n, np.nan)  # when each device went offline, while it is
        for t, d, up in self.log():
            if not up and np.isnan(since[d]):
                since[d] = t
            elif up and not np.isnan(since[d]):
                off[d] += t - since[d]
                since[d] = np.nan
        still = ~np.isnan(since)
        off[still] += self.now - since[still]
        return 1.0 - off / self.now

    def offline_periods(self) -> np.ndarray:
        """How many times each device went offline up to ``now`` (the kernel fleet's ``offline_periods``)."""
        out = np.zeros(self.n, dtype=np.int64)
        for _, d, up in self._log:
            np.add.at(out, d[~up], 1)
        return out

    def log(self) -> list[tuple[float, int, bool]]:
        """Every switch applied so far: ``(t, device, online)``, in time order."""
        out: list[tuple[float, int, bool]] = []
        for t, d, up in self._log:
            out += [(float(a), int(b), bool(c)) for a, b, c in zip(t, d, up)]
        return out

    # ------------------------------------------------------------------ internals

    def _extend(self, t: float) -> None:
        """Draw every switch up to ``t`` into the queue."""
        if t <= self._drawn_to:
            return
        ts: list[float] = []
        ds: list[int] = []
        ups: list[bool] = []
        if self._trace is not None:
            tt, td, tu = self._trace
            a, b = np.searchsorted(tt, [self._drawn_to, t], side="right")
            ts, ds, ups = tt[a:b].tolist(), td[a:b].tolist(), tu[a:b].tolist()
        else:
            due = np.flatnonzero(self._next <= t)
            while len(due):
                for d in due.tolist():
                    at = float(self._next[d])
                    up, length = next(self._periods[d])
                    ts.append(at)
                    ds.append(d)
                    ups.append(up)
                    self._next[d] = at + length
                due = np.flatnonzero(self._next <= t)
        self._drawn_to = t
        if ts:
            qt = np.concatenate([self._queue_t, np.asarray(ts)])
            qd = np.concatenate([self._queue_d, np.asarray(ds, dtype=np.int64)])
            qu = np.concatenate([self._queue_up, np.asarray(ups, dtype=bool)])
            order = np.lexsort((qd, qt))
            self._queue_t, self._queue_d, self._queue_up = qt[order], qd[order], qu[order]

    def _apply(self, t: float) -> None:
        """Apply the queued switches up to ``t`` to the state (and the log)."""
        m = int(np.searchsorted(self._queue_t, t, side="right"))
        if m == 0:
            return
        d, up = self._queue_d[:m], self._queue_up[:m]
        self._log.append((self._queue_t[:m], d, up))
        last, at = np.unique(d[::-1], return_index=True)  # a device's last switch wins
        self._online[last] = up[::-1][at]
        self._queue_t, self._queue_d, self._queue_up = self._queue_t[m:], self._queue_d[m:], self._queue_up[m:]


def _trace_switches(rows: list[tuple[float, int, bool]], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A trace's rows (time order) as the switches that change a device's state, as the kernel's ``set_online``
    ignores a switch to the state a device is in: (times, devices, online)."""
    state = np.ones(n, dtype=bool)
    keep = []
    for k, (_, d, on) in enumerate(rows):
        if state[d] != on:
            state[d] = on
            keep.append(k)
    times = np.asarray([rows[k][0] for k in keep], dtype=np.float64)
    devices = np.asarray([rows[k][1] for k in keep], dtype=np.int64)
    ups = np.asarray([rows[k][2] for k in keep], dtype=bool)
    return times, devices, ups
