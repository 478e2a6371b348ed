"""What a sweep shows: progress over cells (a rich bar on a terminal, one line per cell otherwise), the time
left, the closing line, and the dry run's listing. Silent for the Python API, which gets a ``SweepResult``."""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from p2pfl.study.result import SweepResult
from p2pfl.study.running import CellStatus
from p2pfl.study.spec import Cell, Study
from p2pfl.study.times import CellTimes

__all__ = ["Display", "describe", "fmt_duration"]

#: Seconds between two looks at the running cells' progress files for the rich bar's per-cell rows.
POLL_S = 2.0
#: Seconds between two plain "running" lines (no terminal: a log).
RUNNING_EVERY_S = 60.0


def fmt_duration(seconds: float) -> str:
    """A wall-clock duration for people (tables of simulated seconds use ``p2pfl.metrics.tables.fmt_s``):
    ``12.3 s`` under a minute, ``4 min 05 s`` from one, ``6 h 38 min`` from an hour."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


class Display:
    """Progress over cells: a rich bar on a terminal, one line per cell otherwise; silent for the API."""

    def __init__(self, enabled: bool, running_every_s: float = RUNNING_EVERY_S) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None
        self.cell_rows: dict[str, Any] = {}  # the rich bar's row of each running cell
        self.total = self.finished = 0
        self.workers = 1
        self.times = CellTimes()
        self.waiting: dict[Optional[str], int] = {}
        self.running_every_s = running_every_s
        self.last_running = time.monotonic()

    @property
    def poll_s(self) -> Optional[float]:
        """How often the sweep looks at its running cells for :meth:`running` (their rows under the bar every
        ``POLL_S``, a log's lines no more often than they are written); None: it need not."""
        if not self.enabled:
            return None
        return POLL_S if self.bar is not None else self.running_every_s

    def running(self, statuses: Sequence[tuple[Cell, Optional[CellStatus]]]) -> None:
        """How far each running cell has got: a row each under the rich bar, else a line each every
        ``running_every_s`` seconds (``status`` None: it has reported nothing yet)."""
        if not self.enabled:
            return
        if self.bar is not None:
            for cell, status in statuses:
                if status is None:
                    continue
                label = f"  {_short(cell.id)}: {status.where()}"
                if cell.id not in self.cell_rows:
                    self.cell_rows[cell.id] = self.bar.add_task(label, total=None)
                self.bar.update(self.cell_rows[cell.id], description=label, total=status.total, completed=status.done)
            return
        if time.monotonic() - self.last_running < self.running_every_s:
            return
        self.last_running = time.monotonic()
        for cell, status in statuses:
            print(f"  running {cell.id}: {_running_text(status)}", flush=True)

    def _ended(self, cell: Cell) -> None:
        row = self.cell_rows.pop(cell.id, None)
        if row is not None and self.bar is not None:
            self.bar.remove_task(row)

    def start(self, study: Study, out: Path, complete: int, pending: Sequence[Cell], workers: int, removed: int,
              times: CellTimes, where: str = "") -> None:
        """The time left of ``pending`` cells is read from ``times`` (the sweep's, added to as cells end)."""
        self.total, self.finished, self.workers, self.times = len(study.cells), complete, workers, times
        for c in pending:
            self.waiting[c.variant] = self.waiting.get(c.variant, 0) + 1
        if not self.enabled:
            return
        head = f"sweep {study.name}: {self.total} cells in {out}"
        if complete or removed:
            head += f"; resuming: {complete} already complete"
        if removed:
            head += f", {removed} half-written run director{'ies' if removed != 1 else 'y'} removed"
        todo = (f"running {len(pending)} {where or f'with {workers} worker' + ('s' if workers != 1 else '')}"
                if pending else "nothing to run")
        print(f"{head}; {todo}", flush=True)
        if pending and sys.stdout.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TimeRemainingColumn(), console=Console(), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(study.name, total=self.total, completed=complete)

    def _eta(self) -> str:
        """Time left: each waiting cell at its variant's median cell time, a variant not timed yet at the median
        of all (``CellTimes``), over the workers."""
        left = self.times.left(self.waiting, self.workers)
        if left is None:
            return ""
        untimed = self.times.untimed(self.waiting)
        guess = f", {untimed} cells of variants not timed yet at the median cell" if untimed else ""
        return f"; about {fmt_duration(left)} left{guess}"

    def done(self, cell: Cell, wall_s: float) -> None:
        self._ended(cell)
        self.finished += 1
        self.waiting[cell.variant] = self.waiting.get(cell.variant, 1) - 1
        if self.bar is not None:
            self.bar.advance(self.task)
        elif self.enabled:
            print(f"[{self.finished}/{self.total}] done {cell.id} ({wall_s:.1f} s{self._eta()})", flush=True)

    def failed(self, cell: Cell, message: str, detail: str = "") -> None:
        self._ended(cell)
        self.finished += 1
        self.waiting[cell.variant] = self.waiting.get(cell.variant, 1) - 1
        if self.bar is not None:
            self.bar.advance(self.task)
        if self.enabled:
            self.error(f"p2pfl: [{self.finished}/{self.total}] cell {cell.id} failed: {message}")
            if detail:
                self.error(detail.rstrip())

    def error(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text, style="red", markup=False, highlight=False, soft_wrap=True)
        else:
            print(text, file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        if self.enabled:
            self.error(f"p2pfl: {text}")
        else:
            warnings.warn(text, stacklevel=3)  # the caller of sweep()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def finish(self, result: SweepResult) -> None:
        if not self.enabled:
            return
        n = len(result.study.cells)
        complete = n - len(result.failed)
        parts = [f"{len(result.ran)} run now"]
        if result.failed:
            parts.append(f"{len(result.failed)} failed")
        if result.skipped:
            parts.append(f"{len(result.skipped)} already complete")
        if result.deferred:
            parts.append(f"{len(result.deferred)} not started")
        complete -= len(result.deferred)
        print(f"sweep {result.study.name}: {complete} of {n} cells complete in {result.out} "
              f"({', '.join(parts)}; {fmt_duration(result.wall_s)})", flush=True)
        if result.deferred:
            print(f"p2pfl: {len(result.deferred)} cell(s) not started: none fits in what is left of --budget at its "
                  "variant's median cell time; run the same command again to resume", flush=True)
        if result.failed:
            ids = ", ".join(list(result.failed)[:3]) + (", ..." if len(result.failed) > 3 else "")
            print(f"p2pfl: {len(result.failed)} of {n} cells failed ({ids}); fix the cause and run the same "
                  "command again to run them (complete cells are kept)", file=sys.stderr, flush=True)


def _short(cell_id: str, width: int = 60) -> str:
    """A cell id for a bar's row: its start (the variant) and end (the last grid value, the seed) kept."""
    if len(cell_id) <= width:
        return cell_id
    half = (width - 3) // 2
    return f"{cell_id[:half]}...{cell_id[-half:]}"


def _running_text(status: Optional[CellStatus]) -> str:
    """``round 37/130 (28%), 42 min 10 s in; about 1 h 48 min left at its pace so far``."""
    if status is None:
        return "no progress reported yet"
    text = f"{status.where()}, {fmt_duration(status.elapsed_s)} in"
    left = status.left_s()
    return text if left is None else f"{text}; about {fmt_duration(left)} left at its pace so far"


def _time_table(result: SweepResult) -> list[str]:
    """Per variant: cells complete and to run, the median cell time, and what the cells to run would take on one
    worker (each at its variant's median, a variant not timed yet at its planned time or else the median of all:
    ``CellTimes``)."""
    times = CellTimes(planned=result.study.planned_times())
    for c in result.study.cells:
        if c.id in result.walls:
            times.add(c.variant, result.walls[c.id])
    if not times.walls and not times.planned:
        return []
    done = set(result.skipped)
    variants = list(dict.fromkeys(c.variant for c in result.study.cells))
    cells = {v: [c for c in result.study.cells if c.variant == v] for v in variants}
    todo = {v: sum(c.id not in done for c in cells[v]) for v in variants}
    rows = []
    for v in variants:
        guess = times.guess(v)
        how = "" if v in times.walls else " (planned)" if v in times.planned else " (median of all)"
        median = "unknown" if guess is None else fmt_duration(guess) + how
        left = "unknown" if guess is None else fmt_duration(todo[v] * guess)
        rows.append(f"  {v or '(no variant)'}: {len(cells[v]) - todo[v]} complete, {todo[v]} to run, median cell "
                    f"{median}, {left} to run on one worker")
    total = times.left(todo, 1)
    return ["time (complete cells' timing.json):", *rows,
            f"  all: {fmt_duration(total) if total is not None else 'unknown'} of cells to run on one worker"]


def describe(result: SweepResult) -> str:
    """The dry run's listing: one line per cell (its id, its own edits of the base), then what would fail."""
    study = result.study
    done = set(result.skipped)
    width = max(len(c.id) for c in study.cells)
    lines = [f"study {study.name} ({study.source}): {len(study.cells)} cells -> {result.out}",
             f"base {study.base} {' '.join(study.common_edits())}".rstrip()]
    for c in study.cells:
        mark = "  (complete)" if c.id in done else "  (would fail)" if c.id in result.failed else ""
        lines.append(f"  {c.id:<{width}}  {' '.join(c.flags)}{mark}")
    lines += [f"cell {cid} would fail: {msg}" for cid, msg in result.failed.items()]
    lines += _time_table(result)
    left = len(study.cells) - len(done)
    verdict = (f"{len(result.failed)} of {left} cells to run would fail" if result.failed
               else "every cell is valid")
    lines.append(f"dry run: {verdict}; {left} to run, {len(done)} already complete; nothing written")
    return "\n".join(lines)
