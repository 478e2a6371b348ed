"""Reading a run's score curve: the score at a budget of traffic or of simulated time, and when it reached a target.

    at_traffic(curve, budget)     the score at the last evaluation whose traffic was at most ``budget``
    at_time(curve, t)             the score at the last evaluation at or before simulated time ``t``
    first_reaching(curve, target) (time, traffic) of the first evaluation at or above ``target``
    pareto(points)                the names no other beats on (score up, cost down) at once

A curve is a run's evaluations in order, each a point ``(round, t, value, traffic)`` as ``load_curves``
gives them (``round``, ``t``, ``value``, and the traffic by then: ``bytes``, or per device). A budget is
compared with a relative tolerance, so a budget read from the same run's figures includes its own point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

__all__ = ["Point", "at_traffic", "at_time", "first_reaching", "pareto"]

#: (round, simulated time, score, traffic by then)
Point = tuple[int, float, float, float]


def at_traffic(curve: Sequence[Point], budget: float) -> Optional[float]:
    """Score at the last evaluation whose traffic was at most ``budget`` (None: none was)."""
    ok = [value for _, _, value, b in curve if b <= budget * (1 + 1e-9)]
    return ok[-1] if ok else None


def at_time(curve: Sequence[Point], t: float) -> Optional[float]:
    """Score at the last evaluation at or before simulated time ``t`` (None: none was)."""
    ok = [value for _, tt, value, _ in curve if tt <= t * (1 + 1e-12)]
    return ok[-1] if ok else None


def first_reaching(curve: Sequence[Point], target: float) -> Optional[tuple[float, float]]:
    """(simulated time, traffic) of the first evaluation at or above ``target``; None if never."""
    return next(((t, b) for _, t, value, b in curve if value >= target), None)


def pareto(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """Names no other name beats on (score up, cost down) at once: name -> (score, cost), in the input order."""
    return [a for a, (acc, b) in points.items() if not any(
        acc2 >= acc and b2 <= b and (acc2, b2) != (acc, b) for a2, (acc2, b2) in points.items() if a2 != a)]
