"""How long a study's cells take: each variant's measured cell times, the time left, and a sweep's budget.

A cell is guessed at its variant's median cell time (complete cells' ``timing.json`` included; the median is
robust to each worker's slow first cell), a variant not timed yet at its planned time (the study's
``cell_time``) where it has one, else at the median of all cells timed, and a cell is unknown when no cell is
timed at all. ``Budget`` holds a sweep to a wall-time limit (a session, a batch job's allocation): a cell
starts only when its guess ends before the limit, a variant neither timed nor planned guessed at the slowest
timed variant's median (a guess low by a variant's length would start a cell the limit cuts off); an unknown
one starts.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from p2pfl.errors import UserError

__all__ = ["CellTimes", "Budget", "wall_s_of", "parse_duration"]


def wall_s_of(run_dir: Path) -> Optional[float]:
    """A complete cell's measured ``wall_s`` (its ``timing.json``); None where it has none."""
    try:
        wall = json.loads((run_dir / "timing.json").read_text())["wall_s"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(wall) if isinstance(wall, (int, float)) else None


@dataclass
class CellTimes:
    """Measured cell times (seconds) per variant."""

    walls: dict[Optional[str], list[float]] = field(default_factory=dict)
    planned: Mapping[Optional[str], float] = field(default_factory=dict)  # the study's cell_time per variant

    @classmethod
    def of(cls, out: Path, cells: Iterable[tuple[str, Optional[str]]],
           planned: Mapping[Optional[str], float] = {}) -> CellTimes:
        """The times of complete ``cells`` (id, variant) in ``out``, from their ``timing.json``; ``planned``:
        the study's planned cell times."""
        times = cls(planned=dict(planned))
        for cid, variant in cells:
            if (wall := wall_s_of(out / cid)) is not None:
                times.add(variant, wall)
        return times

    def add(self, variant: Optional[str], wall_s: float) -> None:
        self.walls.setdefault(variant, []).append(wall_s)

    def guess(self, variant: Optional[str]) -> Optional[float]:
        """The variant's median cell time; its planned time, or else the median of every timed cell, for a
        variant not timed yet; None when neither is known."""
        if variant in self.walls:
            return statistics.median(self.walls[variant])
        if variant in self.planned:
            return self.planned[variant]
        every = [w for ws in self.walls.values() for w in ws]
        return statistics.median(every) if every else None

    def slowest(self) -> Optional[float]:
        """The largest of the timed variants' medians; None when no cell is timed."""
        return max((statistics.median(ws) for ws in self.walls.values()), default=None)

    def left(self, waiting: Mapping[Optional[str], int], workers: int) -> Optional[float]:
        """Seconds until the ``waiting`` cells (count per variant) are done on ``workers``; None if unknown."""
        if not any(waiting.values()):
            return None
        guesses = [(k, self.guess(v)) for v, k in waiting.items()]
        if any(g is None for _, g in guesses):
            return None
        return sum(k * (g or 0.0) for k, g in guesses) / workers

    def untimed(self, waiting: Mapping[Optional[str], int]) -> int:
        """How many ``waiting`` cells belong to variants with no timed cell and no planned time."""
        return sum(k for v, k in waiting.items() if v not in self.walls and v not in self.planned)


@dataclass(frozen=True)
class Budget:
    """A sweep's wall-time limit: ``seconds`` from ``start`` (``time.monotonic``)."""

    seconds: float
    start: float = field(default_factory=time.monotonic)

    def left(self, now: Optional[float] = None) -> float:
        return self.start + self.seconds - (time.monotonic() if now is None else now)

    def fits(self, guess: Optional[float], now: Optional[float] = None) -> bool:
        """Whether a cell guessed at ``guess`` seconds ends within the budget (an unknown cell starts)."""
        return guess is None or guess <= self.left(now)

    def first_fitting(self, variants: Iterable[Optional[str]], times: CellTimes,
                      now: Optional[float] = None) -> Optional[int]:
        """The index of the first of ``variants`` (the waiting cells', in order) whose cell fits, or None; a
        variant not timed yet counts at its planned time, or else as the slowest timed one."""
        return next((i for i, v in enumerate(variants) if self.fits(
            times.guess(v) if v in times.walls or v in times.planned else times.slowest(), now)), None)


_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str, field_name: str = "--budget") -> float:
    """Seconds of ``"2h30m"``, ``"90m"``, ``"45s"`` or ``"5400"`` (seconds); a one-line error otherwise."""
    s = text.strip().lower()
    number = r"(\d+(?:\.\d+)?)"
    bare = re.fullmatch(number, s)
    parts = bare or re.fullmatch(f"(?:{number}h)?(?:{number}m)?(?:{number}s)?", s)
    if not s or parts is None or not any(parts.groups()):
        raise UserError(f"{field_name}: expected a duration such as 2h30m, 90m, 45s or 5400 (seconds); got {text!r}")
    seconds = float(s) if bare else sum(float(v) * _UNITS[u] for v, u in zip(parts.groups(), "hms") if v)
    if seconds <= 0:
        raise UserError(f"{field_name}: expected a duration above zero; got {text!r}")
    return seconds
