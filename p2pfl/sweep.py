"""Run a study (``p2pfl.config.study``): every cell an ordinary run directory, in parallel, resumable.

    <out>/<cell id>/       the cell's run directory (outputs contract) plus cell.json:
                           {"study", "cell", "variant", "grid", "seed"}
    <out>/.sweep.lock      held while a sweep writes into <out>

Cells run in worker processes (``spawn``), ``jobs`` at a time; each cell sets its own torch
threads (the scenario's ``threads``), so a cell's outputs do not depend on ``jobs``. A run
directory is written whole or not at all (a temporary sibling, then a rename), so a sweep
stopped in any way is resumed by running it again: complete cells are skipped, the
temporary siblings a killed sweep left (``.<cell id>.tmp-*``) are removed, the rest run.
A complete cell whose scenario is not what the study now resolves to is refused.

The module is callable (``p2pfl.sweep(...)`` is ``sweep(...)`` even after ``import p2pfl.sweep``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import yaml

from p2pfl.config.study import Cell, Study, load_study
from p2pfl.errors import UserError
from p2pfl.executors.spec import CORES_ENV, available_cores
from p2pfl.metrics.archive import archive_cell, restore_cells

if TYPE_CHECKING:
    from p2pfl.config.scenario import Scenario

__all__ = ["SweepResult", "SweepInterrupted", "sweep", "describe", "oversubscribed", "LOCK_NAME"]

LOCK_NAME = ".sweep.lock"


@dataclass(frozen=True)
class SweepResult:
    """What a sweep did: cells run now, cells already complete, cells that failed (id -> one-line error).

    For a dry run nothing ran and ``failed`` holds the cells that would fail when built.
    """

    study: Study
    out: Path
    ran: tuple[str, ...]
    skipped: tuple[str, ...]
    failed: Mapping[str, str]
    wall_s: float
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return not self.failed

    def run_dir(self, cell: str) -> Path:
        return self.out / cell


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: complete cells are kept, no half-written directory is left."""


# ---------------------------------------------------------------------------------------------- the workers


def _worker_init(parent: int, cores: int) -> None:
    """Ctrl-C is the parent's to handle; a worker whose parent died (kill -9) exits.

    ``cores``: this worker's share of the machine (``P2PFL_CORES``), so a cell's
    ``executor: auto`` does not start workers of its own on cores other cells use.

    A worker ends without the interpreter's teardown (about a second with torch loaded):
    its run directories are written and closed by then, and its streams flushed.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ[CORES_ENV] = str(cores)
    atexit.register(os._exit, 0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="p2pfl-parent-watch", daemon=True).start()


def _run_cell(scenario: Scenario, out: str, cell_json: bytes, argv: list[str]) -> float:
    """Run one cell into ``out`` (a worker's task); its wall-clock seconds."""
    from p2pfl.api import run

    t0 = time.perf_counter()
    run(scenario, out=out, extra_files={"cell.json": cell_json}, argv=argv)
    return time.perf_counter() - t0


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop the workers now (their half-written directories are removed afterwards)."""
    stop = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if stop is not None:
        stop()
        return
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(Exception):
            proc.terminate()


@contextlib.contextmanager
def _no_interrupt() -> Iterator[None]:
    """Ctrl-C ignored while cleaning up (main thread only: elsewhere signals cannot be changed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


# ------------------------------------------------------------------------------------------ the out folder


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """Create ``out`` and hold its lock file: one sweep at a time writes into a folder."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: not a folder; give a folder for the study's run directories")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise UserError(f"--out {out}: cannot write there ({err.strerror or err}); choose another --out") from None
    try:
        if sys.platform != "win32":
            import fcntl

            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise UserError(f"--out {out}: another sweep is writing there (it holds {out / LOCK_NAME}); "
                                "wait for it to finish or choose another --out") from None
        yield
    finally:
        os.close(fd)


def _remove_temps(out: Path, study: Study) -> int:
    """Remove the temporary siblings (``.<cell id>.tmp-*``) a stopped sweep left; how many."""
    if not out.is_dir():
        return 0
    prefixes = tuple(f".{c.id}.tmp-" for c in study.cells)
    removed = 0
    with _no_interrupt():
        for entry in os.scandir(out):
            if entry.name.startswith(prefixes) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed += 1
    return removed


def _same_cell(run_dir: Path, cell: Cell, study: str) -> bool:
    """Is ``run_dir`` this cell: the same resolved scenario and the same cell.json?

    The run's scenario.yaml is read through the current schema, so a field added to the schema
    since the run (absent from its file, so at its default) does not orphan it; every field the
    file states, defaults included, must still resolve to the same value.
    """
    from p2pfl.config import load_dict

    try:
        old_scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text(encoding="utf-8"))
        old_cell = json.loads((run_dir / "cell.json").read_text(encoding="utf-8"))
        old = load_dict(old_scenario, source=str(run_dir / "scenario.yaml"))
    except (OSError, ValueError, yaml.YAMLError, UserError):
        return False
    return bool(_resolved(old) == _resolved(cell.scenario) and old_cell == json.loads(json.dumps(cell.record(study))))


def _resolved(scenario: Any) -> Any:
    """A scenario's resolved fields as plain YAML values (tuples as lists)."""
    return yaml.safe_load(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))


def _complete(study: Study, out: Path) -> list[str]:
    """Ids of the cells already complete in ``out``; refuses what a rerun must not mix in."""
    done = []
    for cell in study.cells:
        d = out / cell.id
        if not os.path.lexists(d):
            continue
        if not d.is_dir() or not (d / "summary.json").is_file():
            raise UserError(f"{d}: exists but is not a complete run directory (no summary.json); remove it or "
                            "choose another --out")
        if not _same_cell(d, cell, study.name):
            raise UserError(f"{d}: this complete cell differs from what {study.source} now resolves to (the study "
                            "changed); choose another --out, or remove the folder to run the cell again")
        done.append(cell.id)
    return done


def _strangers(study: Study, out: Path) -> int:
    """Folders in ``out`` that are not cells of the study (left by another version of it)."""
    if not out.is_dir():
        return 0
    ids = {c.id for c in study.cells}
    return sum(1 for e in os.scandir(out) if e.is_dir() and not e.name.startswith(".") and e.name not in ids)


# ---------------------------------------------------------------------------------------------- the display


def _wall_s(run_dir: Path) -> Optional[float]:
    """A complete cell's measured ``wall_s`` (its ``timing.json``); None where it has none."""
    try:
        wall = json.loads((run_dir / "timing.json").read_text())["wall_s"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(wall) if isinstance(wall, (int, float)) else None


def _fmt_s(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


class _Display:
    """Progress over cells: a rich bar on a terminal, one line per cell otherwise; silent for the API."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None
        self.total = self.finished = 0
        self.workers = 1
        self.walls: dict[Optional[str], list[float]] = {}
        self.waiting: dict[Optional[str], int] = {}

    def start(self, study: Study, out: Path, complete: Sequence[Cell], pending: Sequence[Cell], workers: int,
              removed: int, where: str = "") -> None:
        """``complete`` cells' ``timing.json`` seed the time-left estimate of ``pending`` ones, per variant."""
        self.total, self.finished, self.workers = len(study.cells), len(complete), workers
        for c in complete:
            if (wall := _wall_s(out / c.id)) is not None:
                self.walls.setdefault(c.variant, []).append(wall)
        for c in pending:
            self.waiting[c.variant] = self.waiting.get(c.variant, 0) + 1
        if not self.enabled:
            return
        head = f"sweep {study.name}: {self.total} cells in {out}"
        if complete or removed:
            head += f"; resuming: {len(complete)} already complete"
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

            self.bar = Progress(TextColumn(f"[bold]{study.name}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TimeRemainingColumn(), console=Console(), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("cells", total=self.total, completed=len(complete))

    def _eta(self) -> str:
        """Time left: each waiting cell at its variant's median cell time (robust to each worker's slow first
        cell; the complete cells' included), a variant not timed yet at the median of all, over the workers."""
        every = [w for ws in self.walls.values() for w in ws]
        if not every or not any(self.waiting.values()):
            return ""
        overall = statistics.median(every)
        untimed = sum(k for v, k in self.waiting.items() if v not in self.walls)
        left = sum(k * (statistics.median(self.walls[v]) if v in self.walls else overall)
                   for v, k in self.waiting.items())
        guess = f", {untimed} cells of variants not timed yet at the median cell" if untimed else ""
        return f"; about {_fmt_s(left / self.workers)} left{guess}"

    def done(self, cell: Cell, wall_s: float) -> None:
        self.finished += 1
        self.walls.setdefault(cell.variant, []).append(wall_s)
        self.waiting[cell.variant] = self.waiting.get(cell.variant, 1) - 1
        if self.bar is not None:
            self.bar.advance(self.task)
        elif self.enabled:
            print(f"[{self.finished}/{self.total}] done {cell.id} ({wall_s:.1f} s{self._eta()})", flush=True)

    def failed(self, cell: Cell, message: str, detail: str = "") -> None:
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
        print(f"sweep {result.study.name}: {complete} of {n} cells complete in {result.out} "
              f"({', '.join(parts)}; {_fmt_s(result.wall_s)})", flush=True)
        if result.failed:
            ids = ", ".join(list(result.failed)[:3]) + (", ..." if len(result.failed) > 3 else "")
            print(f"p2pfl: {len(result.failed)} of {n} cells failed ({ids}); fix the cause and run the same "
                  "command again to run them (complete cells are kept)", file=sys.stderr, flush=True)


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
    left = len(study.cells) - len(done)
    verdict = (f"{len(result.failed)} of {left} cells to run would fail" if result.failed
               else "every cell is valid")
    lines.append(f"dry run: {verdict}; {left} to run, {len(done)} already complete; nothing written")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ the sweep


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _execute(study: Study, pending: Sequence[Cell], out: Path, workers: int, display: _Display,
             argv: list[str], done: Callable[[Cell, float], None]) -> tuple[list[str], dict[str, str]]:
    """Run ``pending`` in ``workers`` processes, calling ``done`` for each cell complete; (ids run, {id: error})
    in completion order."""
    from p2pfl.metrics.rundir import dumps_json

    ran: list[str] = []
    failed: dict[str, str] = {}
    share = max(1, available_cores() // workers)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_worker_init, initargs=(os.getpid(), share))
    try:
        futures: dict[Future[float], Cell] = {}
        for cell in pending:
            data = dumps_json(cell.record(study.name)).encode("utf-8")
            futures[pool.submit(_run_cell, cell.scenario, str(out / cell.id), data, argv)] = cell
        for fut in as_completed(futures):
            cell = futures[fut]
            try:
                wall = fut.result()
            except UserError as err:
                failed[cell.id] = _one_line(err)
                display.failed(cell, failed[cell.id])
            except BrokenProcessPool:
                failed[cell.id] = "its worker process died (killed, or out of memory)"
                display.failed(cell, failed[cell.id])
            except Exception as err:  # a bug: report it with the worker's traceback, go on with the others
                failed[cell.id] = f"{type(err).__name__}: {_one_line(err)}"
                display.failed(cell, failed[cell.id], str(err.__cause__ or ""))
            else:
                ran.append(cell.id)
                done(cell, wall)
    except BaseException:  # Ctrl-C (or a broken stdout): stop the workers now
        with _no_interrupt():
            _terminate(pool)
            pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        _remove_temps(out, study)
    return ran, failed


def _build_all(cells: Sequence[Cell], progress: bool = False, every_s: float = 5.0) -> dict[str, str]:
    """Build each cell as ``p2pfl validate`` does (topology, data, protocol; no run, no executor workers):
    {id: error} of those that fail. ``progress``: a line on stderr at most every ``every_s`` seconds (building
    a study of 1,000-device cells takes minutes)."""
    from p2pfl.sim.kernel import build_only

    failed = {}
    t0 = last = time.perf_counter()
    for i, cell in enumerate(cells, 1):
        try:
            build_only(cell.scenario)
        except UserError as err:
            failed[cell.id] = _one_line(err)
        now = time.perf_counter()
        if progress and i < len(cells) and now - last >= every_s:
            last = now
            left = (now - t0) / i * (len(cells) - i)
            print(f"dry run: built {i} of {len(cells)} cells ({_fmt_s(now - t0)}; about {_fmt_s(left)} left)",
                  file=sys.stderr, flush=True)
    return failed


def oversubscribed(workers: int, threads: int, cores: int) -> Optional[str]:
    """The warning when ``workers`` cells of ``threads`` torch threads each need more than ``cores`` cores."""
    if workers * threads <= cores:
        return None
    return (f"warning: {workers} cells at once x {threads} torch thread(s) each = {workers * threads} threads on "
            f"{cores} cores; the results are the same, but slower; use --jobs {max(1, cores // threads)}")


def _jobs(jobs: Optional[int | str]) -> int | str:
    if jobs is None:
        return available_cores()
    if jobs == "ray":
        return jobs
    if isinstance(jobs, str) and jobs.isdigit():
        jobs = int(jobs)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise UserError(f"--jobs: expected a whole number >= 1 or 'ray'; got {jobs!r}; use e.g. --jobs 2")
    return jobs


def sweep(study: str | Path | Mapping[str, Any] | Study, *, jobs: Optional[int | str] = None,
          out: Optional[str | Path] = None, dry_run: bool = False, progress: bool = False,
          argv: Optional[Sequence[str]] = None, ray_address: Optional[str] = None,
          archive: Optional[str | Path] = None) -> SweepResult:
    """Run every cell of a study not yet complete in ``out`` (default ``runs/<study name>``).

    ``jobs`` worker processes (default: the cores this process may use), or ``"ray"``: every cell a
    Ray task on a local Ray or the cluster at ``ray_address`` (``p2pfl.sweep_ray``). A bad study raises
    ``UserError`` before anything runs; a cell that fails is in ``SweepResult.failed`` and
    the others go on. ``dry_run`` validates and lists, and writes nothing. ``progress``
    prints what the CLI shows. Ctrl-C raises ``SweepInterrupted`` (complete cells kept).
    ``archive``: a folder of cells without their event streams (``p2pfl.metrics.archive``): the cells it
    holds are copied into ``out`` first (and so skipped), and every complete cell is copied into it.
    Call it under ``if __name__ == "__main__":`` in a script (workers are spawned).
    """
    t0 = time.perf_counter()
    st = study if isinstance(study, Study) else load_study(study)
    n_jobs = _jobs(jobs)
    out_path = Path(out) if out is not None else Path("runs") / st.name
    command = list(sys.argv if argv is None else argv)
    display = _Display(progress)
    if dry_run:
        complete = _complete(st, out_path) if out_path.is_dir() else []
        if archive is not None and Path(archive).is_dir():
            complete += [cid for cid in _complete(st, Path(archive)) if cid not in complete]
        done = set(complete)
        would_fail = _build_all([c for c in st.cells if c.id not in done], progress)
        return SweepResult(st, out_path, (), tuple(complete), would_fail, time.perf_counter() - t0, dry_run=True)
    with _locked(out_path):
        removed = _remove_temps(out_path, st)
        restored = restore_cells(archive, out_path, [c.id for c in st.cells]) if archive is not None else []
        complete = _complete(st, out_path)
        if archive is not None:
            for cid in complete:
                archive_cell(out_path / cid, archive)
        done = set(complete)
        pending = [c for c in st.cells if c.id not in done]
        on_ray = n_jobs == "ray"
        workers = max(1, available_cores() if on_ray else min(int(n_jobs), len(pending)))
        by_id = {c.id: c for c in st.cells}
        display.start(st, out_path, [by_id[cid] for cid in complete], pending, workers, removed,
                      where=f"as Ray tasks ({ray_address or os.environ.get('RAY_ADDRESS') or 'local'})" if on_ray else "")
        if restored and display.enabled:
            display.note(f"{len(restored)} complete cell(s) restored from --archive {archive}")
        if strangers := _strangers(st, out_path):
            display.note(f"note: {out_path} holds {strangers} folder(s) that are not cells of this study "
                         "(left as they are)")
        threads = max((c.scenario.threads for c in pending), default=1)
        if not on_ray and workers > 1 and (warning := oversubscribed(workers, threads, available_cores())):
            display.note(warning)

        def finished(cell: Cell, wall_s: float) -> None:
            if archive is not None:
                archive_cell(out_path / cell.id, archive)
            display.done(cell, wall_s)

        try:
            if on_ray and pending:
                from p2pfl.sweep_ray import run_cells_on_ray

                ran, failed = run_cells_on_ray(st, pending, out_path, command, ray_address, finished,
                                               display.failed)
            else:
                ran, failed = (_execute(st, pending, out_path, workers, display, command, finished) if pending
                               else ([], {}))
        except KeyboardInterrupt:
            display.close()
            n_done = len(_complete(st, out_path))
            raise SweepInterrupted(f"{n_done} of {len(st.cells)} cells complete in {out_path}; run the same "
                                   "command again to resume") from None
        finally:
            display.close()
    result = SweepResult(st, out_path, tuple(ran), tuple(complete), failed, time.perf_counter() - t0)
    display.finish(result)
    return result


class _CallableModule(types.ModuleType):
    """``p2pfl.sweep(...)`` works whether ``p2pfl.sweep`` names this module or the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> SweepResult:
        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
