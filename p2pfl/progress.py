"""Progress bar while a run goes, and the short summary table at its end (rich)."""

from __future__ import annotations

import sys
from typing import Any, Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

__all__ = ["RunProgress", "print_summary"]


class RunProgress:
    """Counts node rounds; shown on stderr only when it is a terminal (or forced)."""

    def __init__(self, enabled: bool = True) -> None:
        self._progress: Optional[Progress] = None
        if enabled:
            self._progress = Progress(TextColumn("[bold]simulating"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TimeRemainingColumn(),
                                      console=Console(stderr=True), transient=True,
                                      disable=not sys.stderr.isatty())
        self._task: Any = None

    def __enter__(self) -> RunProgress:
        if self._progress is not None:
            self._progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def start(self, total: int) -> None:
        if self._progress is not None:
            self._task = self._progress.add_task("rounds", total=total)

    def advance(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return str(n)


def print_summary(result: Any) -> None:
    """A short table of the run's headline figures."""
    s = result.summary
    t = Table(title=f"{s['scenario']} · {s['protocol']} · seed {s['seed']}", show_header=False)
    t.add_column("figure", style="bold")
    t.add_column("value", justify="right")
    from p2pfl.metrics.report import run_score

    score = run_score(s)
    low = " (lower is better)" if score.lower_is_better else ""
    t.add_row("devices / servers", f"{s['n_devices']} / {s['n_servers']}")
    t.add_row("rounds", str(s["rounds"]))
    t.add_row(f"{score.label} mean{low}", "n/a" if score.mean is None else f"{score.mean:.4f}")
    t.add_row(f"{score.label} worst device", "n/a" if score.worst is None else f"{score.worst:.4f}")
    t.add_row("bytes total", _fmt_bytes(s["bytes_total"]))
    t.add_row("messages (dropped)", f"{s['messages_total']} ({s['messages_dropped']})")
    t.add_row("compute", f"{s['compute_flops_total']:.3e} FLOPs, {s['compute_sim_s_total']:.2f} device-s")
    t.add_row("simulated time", f"{s['sim_time_s']:.3f} s")
    if "ari" in s:
        t.add_row("ARI vs true clusters", f"{s['ari']:.3f}")
    t.add_row("wall time", f"{result.timing['wall_s']:.2f} s")
    if result.out is not None:
        t.add_row("run directory", str(result.out))
    Console().print(t)
