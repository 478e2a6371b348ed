"""What a sweep did (``SweepResult``), and how a sweep stopped by Ctrl-C ends (``SweepInterrupted``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from p2pfl.study.spec import Study

__all__ = ["SweepResult", "SweepInterrupted"]


@dataclass(frozen=True)
class SweepResult:
    """What a sweep did: cells run now, cells already complete, cells that failed (id -> one-line error), and
    cells not started because none fitted in the sweep's budget (``deferred``).

    For a dry run nothing ran, ``failed`` holds the cells that would fail when built and ``walls`` the measured
    seconds of the complete cells (id -> ``timing.json``'s ``wall_s``), for the time the rest would take.
    """

    study: Study
    out: Path
    ran: tuple[str, ...]
    skipped: tuple[str, ...]
    failed: Mapping[str, str]
    wall_s: float
    dry_run: bool = False
    deferred: tuple[str, ...] = ()
    walls: Mapping[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed

    def run_dir(self, cell: str) -> Path:
        return self.out / cell


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: complete cells are kept, no half-written directory is left."""
