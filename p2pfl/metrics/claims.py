"""Verdicts on a paper's claims from paired differences over seeds, decided by the 95% t-interval.

A claim such as "method a beats method b" is checked on the per-seed differences a - b (the same seed:
the same data and initial weights). It holds when the whole interval lies on the claimed side, does not
hold when the whole interval lies on the other side, and is not resolved otherwise; with fewer than two
seeds it is "not run". The reports in ``analysis/`` build their claims tables from these.
"""

from __future__ import annotations

import math

from p2pfl.metrics.report import ci95

__all__ = ["interval", "paired", "fmt_ci", "fmt_diff", "at_least", "below", "combine"]


def interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high) of the 95% t-interval; low and high are NaN for one value."""
    mean, _, lo, hi = ci95(values)
    return mean, lo, hi


def paired(a: dict[int, float], b: dict[int, float]) -> list[float]:
    """a - b per seed, over the seeds both have."""
    return [a[s] - b[s] for s in sorted(set(a) & set(b))]


def fmt_ci(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    """'mean ± half-width' (or 'mean (n=1)'; '—' for none)."""
    if not values:
        return "—"
    mean, lo, hi = interval(values)
    if math.isnan(lo):
        return f"{scale * mean:.{digits}f} (n=1)"
    return f"{scale * mean:.{digits}f} ± {scale * (hi - mean):.{digits}f}"


def fmt_diff(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    """A paired difference (default: in points of a rate): 'mean [low, high]'."""
    if not values:
        return "—"
    mean, lo, hi = interval(values)
    if math.isnan(lo):
        return f"{scale * mean:+.{digits}f} (n=1)"
    return f"{scale * mean:+.{digits}f} [{scale * lo:+.{digits}f}, {scale * hi:+.{digits}f}]"


def at_least(diffs: list[float], margin: float) -> str:
    """Verdict on 'a >= b - margin' from the paired differences a - b."""
    if len(diffs) < 2:
        return "not run"
    _, lo, hi = interval(diffs)
    if lo >= -margin:
        return "holds"
    if hi < -margin:
        return "does not hold"
    return "not resolved (interval spans the margin)"


def below(diffs: list[float]) -> str:
    """Verdict on 'a < b' from the paired differences a - b."""
    if len(diffs) < 2:
        return "not run"
    _, lo, hi = interval(diffs)
    if hi < 0:
        return "holds"
    if lo >= 0:
        return "does not hold"
    return "not resolved (interval spans 0)"


def combine(verdicts: list[str]) -> str:
    """One verdict for a claim checked in several cells: holds only where it holds in every one."""
    if not verdicts or "not run" in verdicts:
        return "not run"
    if all(v == "holds" for v in verdicts):
        return "holds"
    if any(v == "does not hold" for v in verdicts):
        return "does not hold"
    return "not resolved"
