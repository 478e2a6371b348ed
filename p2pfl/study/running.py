"""How far a running cell has got: its worker rewrites a small JSON file, the sweep reads it and says so.

A cell of the N = 10,000 headline study runs for hours in a worker process; without this the sweep says nothing
between its first line and the cell's end. The worker's run reports setup steps and node rounds (the hooks of
``p2pfl.run``) to a :class:`ProgressFile`, which rewrites ``<out>/.<cell id>.progress`` (atomically) at most every
``interval`` seconds, at the simulation's start and at its last round. The sweep reads it with :func:`read_status`
while it waits for its cells (``p2pfl.study.display``). The file lies outside the run directory: nothing of a
cell's results changes, and the sweep removes it when the cell ends.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional

__all__ = ["CellStatus", "ProgressFile", "progress_path", "read_status"]

#: Seconds between two rewrites of the file (the sweep polls it no more often than it shows it).
INTERVAL_S = 5.0
#: A status file larger than this is not one the sweep wrote: it is not read.
MAX_BYTES = 4096


def progress_path(out: Path, cell_id: str) -> Path:
    """Where the cell ``cell_id`` of a sweep into ``out`` reports its progress."""
    return out / f".{cell_id}.progress"


@dataclass(frozen=True)
class CellStatus:
    """A running cell as last reported: its setup step, or node rounds ``done`` of ``total`` (the protocol's
    ``rounds`` turn them into rounds), the wall seconds since the cell began and since it began simulating, and
    the simulating seconds at which its first node round ended."""

    step: str = ""
    done: int = 0
    total: Optional[int] = None
    rounds: Optional[int] = None
    elapsed_s: float = 0.0
    simulating_s: float = 0.0
    first_round_s: Optional[float] = None

    def where(self) -> str:
        """``setup: loading ...``, ``starting``, or ``round 37/130 (28%)`` (``1,200/5,000 node rounds`` without
        the protocol's round count)."""
        if self.total is None:
            return f"setup: {self.step}" if self.step else "starting"
        frac = f"{self.done / self.total:.0%}" if self.total else "100%"
        if self.rounds:
            return f"round {min(self.rounds, self.done * self.rounds // max(self.total, 1))}/{self.rounds} ({frac})"
        return f"{self.done:,}/{self.total:,} node rounds ({frac})"

    def left_s(self) -> Optional[float]:
        """Wall seconds left at the pace of the node rounds since the first one ended (what came before it, e.g. a
        clustering protocol's discovery, an hour at N = 10,000, is no round's pace); None before the first."""
        if self.total is None or self.done <= 0:
            return None
        if self.done >= 2 and self.first_round_s is not None:
            pace = (self.simulating_s - self.first_round_s) / (self.done - 1)
        else:
            pace = self.simulating_s / self.done
        return pace * max(self.total - self.done, 0)


class ProgressFile:
    """The worker's side: ``setup``, ``start`` and ``advance`` are ``p2pfl.run``'s ``on_setup``, ``on_start``
    and ``on_round``. A setup step, the start and the last round rewrite ``path``; a round rewrites it when
    ``interval`` seconds have passed since the last rewrite."""

    def __init__(self, path: Path, rounds: Optional[int], *, interval: float = INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.rounds = rounds
        self.interval = interval
        self.clock = clock
        self.t0 = self.written = clock()
        self.sim_t0: Optional[float] = None
        self.step = ""
        self.done = 0
        self.total: Optional[int] = None
        self.first_round_s: Optional[float] = None

    def setup(self, step: str) -> None:
        self.step = step
        self._write(self.clock())

    def start(self, total: int) -> None:
        self.sim_t0 = self.clock()
        self.step, self.done, self.total = "", 0, int(total)
        self._write(self.sim_t0)

    def advance(self) -> None:
        self.done += 1
        now = self.clock()
        if self.first_round_s is None and self.sim_t0 is not None:
            self.first_round_s = now - self.sim_t0
        if now - self.written >= self.interval or (self.total is not None and self.done >= self.total):
            self._write(now)

    def status(self, now: float) -> CellStatus:
        return CellStatus(self.step, self.done, self.total, self.rounds, now - self.t0,
                          0.0 if self.sim_t0 is None else now - self.sim_t0, self.first_round_s)

    def _write(self, now: float) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self.status(now))), encoding="utf-8")
        os.replace(tmp, self.path)  # the sweep reads a whole file or the one before it
        self.written = now


def read_status(path: Path, now: Optional[float] = None) -> Optional[CellStatus]:
    """The status last written to ``path``; None where there is none yet (or it is not a status file).

    With ``now`` (wall time, ``time.time()``), its times run on to ``now`` from the file's modification time:
    a phase with no node rounds (a clustering protocol's discovery, an hour at N = 10,000) rewrites nothing,
    and its cell would otherwise read as stopped where it last wrote.
    """
    try:
        st = path.stat()
        if st.st_size > MAX_BYTES:
            return None
        raw = json.loads(path.read_text(encoding="utf-8"))
        status = CellStatus(step=str(raw["step"]), done=int(raw["done"]),
                            total=None if raw["total"] is None else int(raw["total"]),
                            rounds=None if raw["rounds"] is None else int(raw["rounds"]),
                            elapsed_s=float(raw["elapsed_s"]), simulating_s=float(raw["simulating_s"]),
                            first_round_s=None if raw["first_round_s"] is None else float(raw["first_round_s"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if now is None:
        return status
    age = max(0.0, now - st.st_mtime)
    return replace(status, elapsed_s=status.elapsed_s + age,
                   simulating_s=status.simulating_s + age if status.total is not None else 0.0)
