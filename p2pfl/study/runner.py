"""Run a study (``p2pfl.study.spec``): every cell an ordinary run directory, in parallel, resumable.

    <out>/<cell id>/       the cell's run directory (outputs contract) plus cell.json:
                           {"study", "cell", "variant", "grid", "seed"}
    <out>/.sweep.lock      held while a sweep writes into <out> (``p2pfl.study.resume``)

Cells run in worker processes (``spawn``), ``jobs`` at a time, or as Ray tasks
(``p2pfl.study.ray_runner``); each cell sets its own torch threads (the scenario's ``threads``),
so a cell's outputs do not depend on ``jobs``. Each worker is given its share of the cores
(the cores this process may use over the workers) and passes it to every run it makes
(``p2pfl.run(..., cores=)``), so a cell's ``executor: auto`` does not start workers of its own on
cores other cells use. A run directory is written whole or not at all (a temporary sibling, then
a rename), so a sweep stopped in any way is resumed by running it again: complete cells are
skipped, the temporary siblings a killed sweep left (``.<cell id>.tmp-*``) are removed, the rest
run. A complete cell whose scenario is not what the study now resolves to is refused.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from p2pfl.errors import UserError
from p2pfl.executors.spec import available_cores
from p2pfl.study.archive import archive_cell, evaluations_of, restore_cells
from p2pfl.study.display import Display, fmt_duration
from p2pfl.study.result import SweepInterrupted, SweepResult
from p2pfl.study.resume import complete_cells, locked, no_interrupt, remove_temps, strangers
from p2pfl.study.running import ProgressFile, progress_path, read_status
from p2pfl.study.spec import Cell, Study, load_study
from p2pfl.study.times import Budget, CellTimes, wall_s_of

if TYPE_CHECKING:
    from p2pfl.config.scenario import Scenario

__all__ = ["sweep", "oversubscribed"]


# ---------------------------------------------------------------------------------------------- the workers


def _worker_init(parent: int) -> None:
    """Ctrl-C is the parent's to handle; a worker whose parent died (kill -9) exits.

    A worker ends without the interpreter's teardown (about a second with torch loaded):
    its run directories are written and closed by then, and its streams flushed.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    atexit.register(os._exit, 0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="p2pfl-parent-watch", daemon=True).start()


def _run_cell(scenario: Scenario, out: str, cell_json: bytes, argv: list[str], cores: int,
              evaluations: Optional[str] = None, progress: Optional[str] = None) -> float:
    """Run one cell into ``out`` on ``cores`` cores (a worker's task), its scoring results kept in
    ``evaluations`` (``p2pfl.sim.evaluations``), its progress reported to the file ``progress``
    (``p2pfl.study.running``); its wall-clock seconds."""
    from p2pfl.api import run

    t0 = time.perf_counter()
    report = None if progress is None else ProgressFile(Path(progress), getattr(scenario.protocol, "rounds", None))
    run(scenario, out=out, extra_files={"cell.json": cell_json}, argv=argv, cores=cores, evaluations=evaluations,
        on_setup=None if report is None else report.setup, on_start=None if report is None else report.start,
        on_round=None if report is None else report.advance)
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
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """``workers`` spawned processes that run cells (each ignores Ctrl-C: the parent decides); on any error or
    Ctrl-C in the body they are stopped at once, and shut down when it ends. The sweep and ``archive verify`` use it."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_worker_init, initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException:  # Ctrl-C (or a broken stdout): stop the workers now
        with no_interrupt():
            _terminate(pool)
            pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _execute(study: Study, pending: Sequence[Cell], out: Path, workers: int, cores: int, display: Display,
             argv: list[str], done: Callable[[Cell, float], None], budget: Optional[Budget] = None,
             times: Optional[CellTimes] = None, archive: Optional[Path] = None
             ) -> tuple[list[str], dict[str, str], list[str]]:
    """Run ``pending`` in ``workers`` processes sharing ``cores`` cores, calling ``done`` for each cell complete;
    (ids run, {id: error}, ids not started) in completion order. A cell is handed to a worker when one is free:
    the first waiting cell that fits in ``budget`` at the cell ``times`` measured so far (``p2pfl.study.times``);
    when none fits, none starts. With an ``archive``, each cell keeps its scoring results in it until it is
    archived (``evaluations_of``)."""
    from p2pfl.metrics.rundir import dumps_json

    ran: list[str] = []
    failed: dict[str, str] = {}
    waiting = list(pending)
    measured = times if times is not None else CellTimes()
    share = max(1, cores // workers)
    futures: dict[Future[float], Cell] = {}

    def feed(pool: ProcessPoolExecutor) -> None:
        while len(futures) < workers and waiting:
            i = 0 if budget is None else budget.first_fitting([c.variant for c in waiting], measured)
            if i is None:
                return
            cell = waiting.pop(i)
            data = dumps_json(cell.record(study.name)).encode("utf-8")
            try:
                kept = None if archive is None else str(evaluations_of(archive, cell.id))
                report = str(progress_path(out, cell.id)) if display.enabled else None
                futures[pool.submit(_run_cell, cell.scenario, str(out / cell.id), data, argv, share, kept,
                                    report)] = cell
            except BrokenProcessPool:  # a worker died earlier: every cell left fails as the running ones did
                failed[cell.id] = "its worker process died (killed, or out of memory)"
                display.failed(cell, failed[cell.id])

    try:
        with worker_pool(workers) as pool:
            feed(pool)
            while futures:
                finished, _ = wait(futures, timeout=display.poll_s, return_when=FIRST_COMPLETED)
                if not finished:
                    display.running([(c, read_status(progress_path(out, c.id), time.time()))
                                     for c in futures.values()])
                for fut in finished:
                    cell = futures.pop(fut)
                    progress_path(out, cell.id).unlink(missing_ok=True)
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
                feed(pool)
    finally:  # after the workers stopped (worker_pool): their temporary folders
        remove_temps(out, study)
    return ran, failed, [c.id for c in waiting]


# ------------------------------------------------------------------------------------------------ the sweep


def _build_all(cells: Sequence[Cell], progress: bool = False, every_s: float = 5.0) -> dict[str, str]:
    """Build each cell as ``p2pfl validate`` does (topology, data, protocol; no run, no executor workers):
    {id: error} of those that fail. ``progress``: a line on stderr at most every ``every_s`` seconds (building
    a study of 1,000-device cells takes minutes)."""
    from p2pfl.engines import build_only

    failed = {}
    t0 = last = time.perf_counter()
    if progress and cells:  # a first cell can take minutes (a LIBERO cell reads its demo files)
        print(f"dry run: building {len(cells)} cells", file=sys.stderr, flush=True)
    for i, cell in enumerate(cells, 1):
        try:
            build_only(cell.scenario)
        except UserError as err:
            failed[cell.id] = _one_line(err)
        now = time.perf_counter()
        if progress and i < len(cells) and now - last >= every_s:
            last = now
            left = (now - t0) / i * (len(cells) - i)
            print(f"dry run: built {i} of {len(cells)} cells ({fmt_duration(now - t0)}; "
                  f"about {fmt_duration(left)} left)", file=sys.stderr, flush=True)
    return failed


def oversubscribed(workers: int, threads: int, cores: int) -> Optional[str]:
    """The warning when ``workers`` cells of ``threads`` torch threads each need more than ``cores`` cores."""
    if workers * threads <= cores:
        return None
    return (f"warning: {workers} cells at once x {threads} torch thread(s) each = {workers * threads} threads on "
            f"{cores} cores; the results are the same, but slower; use --jobs {max(1, cores // threads)}")


def _budget_s(budget_s: float) -> float:
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not budget_s > 0:
        raise UserError(f"--budget: expected seconds above zero; got {budget_s!r}; use e.g. --budget 2h30m")
    return float(budget_s)


def _jobs(jobs: Optional[int | str], cores: int) -> int | str:
    if jobs is None:
        return cores
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
          archive: Optional[str | Path] = None, budget_s: Optional[float] = None) -> SweepResult:
    """Run every cell of a study not yet complete in ``out`` (default ``runs/<study name>``).

    ``jobs`` worker processes (default: the cores this process may use), or ``"ray"``: every cell a
    Ray task on a local Ray or the cluster at ``ray_address`` (``p2pfl.study.ray_runner``). A bad study
    raises ``UserError`` before anything runs; a cell that fails is in ``SweepResult.failed`` and
    the others go on. ``dry_run`` validates and lists, and writes nothing. ``progress``
    prints what the CLI shows. Ctrl-C raises ``SweepInterrupted`` (complete cells kept).
    ``archive``: a folder of cells without their event streams (``p2pfl.study.archive``): the cells it
    holds are copied into ``out`` first (and so skipped), and every complete cell is copied into it.
    ``budget_s``: a wall-time limit from the start of the sweep (a session, a batch job's allocation): a cell
    starts only if its variant's median cell time (``p2pfl.study.times``; a variant not timed yet at its planned
    ``cell_time``, else at the slowest timed variant's) ends within it, so shorter cells fill the end; the cells
    not started are ``SweepResult.deferred`` and the next sweep runs them.
    Call it under ``if __name__ == "__main__":`` in a script (workers are spawned).
    """
    t0 = time.perf_counter()
    budget = None if budget_s is None else Budget(_budget_s(budget_s))
    st = study if isinstance(study, Study) else load_study(study)
    cores = available_cores()
    n_jobs = _jobs(jobs, cores)
    if budget is not None and n_jobs == "ray":
        raise UserError("--budget: not available with --jobs ray (Ray schedules the cells itself); "
                        "use --jobs N, or drop --budget")
    out_path = Path(out) if out is not None else Path("runs") / st.name
    command = list(sys.argv if argv is None else argv)
    display = Display(progress)
    if dry_run:
        complete = complete_cells(st, out_path) if out_path.is_dir() else []
        where = dict.fromkeys(complete, out_path)
        if archive is not None and Path(archive).is_dir():
            where.update({cid: Path(archive) for cid in complete_cells(st, Path(archive)) if cid not in where})
        walls = {cid: w for cid, folder in where.items() if (w := wall_s_of(folder / cid)) is not None}
        would_fail = _build_all([c for c in st.cells if c.id not in where], progress)
        return SweepResult(st, out_path, (), tuple(where), would_fail, time.perf_counter() - t0, dry_run=True,
                           walls=walls)
    with locked(out_path):
        removed = remove_temps(out_path, st)
        restored = restore_cells(archive, out_path, [c.id for c in st.cells]) if archive is not None else []
        complete = complete_cells(st, out_path)
        if archive is not None:
            for cid in complete:
                archive_cell(out_path / cid, archive)
        done = set(complete)
        pending = [c for c in st.cells if c.id not in done]
        on_ray = n_jobs == "ray"
        workers = max(1, cores if on_ray else min(int(n_jobs), len(pending)))
        by_id = {c.id: c for c in st.cells}
        times = CellTimes.of(out_path, [(cid, by_id[cid].variant) for cid in complete], st.planned_times())
        display.start(st, out_path, len(complete), pending, workers, removed, times,
                      where=f"as Ray tasks ({ray_address or os.environ.get('RAY_ADDRESS') or 'local'})" if on_ray else "")
        if restored and display.enabled:
            display.note(f"{len(restored)} complete cell(s) restored from --archive {archive}")
        if others := strangers(st, out_path):
            display.note(f"note: {out_path} holds {others} folder(s) that are not cells of this study "
                         "(left as they are)")
        threads = max((c.scenario.threads for c in pending), default=1)
        if not on_ray and workers > 1 and (warning := oversubscribed(workers, threads, cores)):
            display.note(warning)

        def finished(cell: Cell, wall_s: float) -> None:
            if archive is not None:
                archive_cell(out_path / cell.id, archive)
                shutil.rmtree(evaluations_of(archive, cell.id), ignore_errors=True)  # archived: not needed
            times.add(cell.variant, wall_s)
            display.done(cell, wall_s)

        try:
            if on_ray and pending:
                from p2pfl.study.ray_runner import run_cells_on_ray

                ran, failed = run_cells_on_ray(st, pending, out_path, command, ray_address, cores, finished,
                                               display.failed)
                deferred: list[str] = []
            else:
                ran, failed, deferred = (_execute(st, pending, out_path, workers, cores, display, command, finished,
                                                  budget, times, None if archive is None else Path(archive))
                                         if pending else ([], {}, []))
        except KeyboardInterrupt:
            display.close()
            n_done = len(complete_cells(st, out_path))
            raise SweepInterrupted(f"{n_done} of {len(st.cells)} cells complete in {out_path}; run the same "
                                   "command again to resume") from None
        finally:
            display.close()
    result = SweepResult(st, out_path, tuple(ran), tuple(complete), failed, time.perf_counter() - t0,
                         deferred=tuple(deferred))
    display.finish(result)
    return result
