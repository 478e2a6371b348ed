"""A study's cells as Ray tasks (``p2pfl sweep STUDY --jobs ray``).

Each cell is one task asking for its scenario's ``threads`` CPUs. The task runs the cell into a
private temporary folder on whichever node Ray chose, and returns the run directory's files; the
sweep writes them into ``<out>/.<cell id>.tmp-ray-*`` and renames that to ``<out>/<cell id>``, so a
cell is complete or absent on the machine that runs the sweep, wherever it ran, and a rerun resumes
as with worker processes. A cell's files are those ``p2pfl run`` writes (its thread count belongs to
the scenario), so they are byte-identical to ``--jobs 1``. A cell's run is given its task's CPUs as its
cores (``p2pfl.run(..., cores=)``), so its ``executor: auto`` stays within them.

``address`` None (and no ``RAY_ADDRESS``) starts a local Ray with the sweep's cores and stops it
at the end; ``auto`` or ``ray://host:10001`` joins a running cluster, whose nodes must have ``p2pfl``
(and the study's plugins) installed in the same versions: tasks import it by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from p2pfl.errors import ConfigError, UserError

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.config.scenario import Scenario
    from p2pfl.study.spec import Cell, Study

__all__ = ["run_cells_on_ray", "run_cell_files"]


def run_cell_files(scenario: Scenario, cell_json: bytes, argv: list[str]) -> tuple[float, dict[str, bytes]]:
    """The Ray task: run one cell into a temporary folder on the task's ``threads`` CPUs; (wall seconds,
    {file name: bytes})."""
    from p2pfl.api import run

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="p2pfl-cell-") as tmp:
        out = Path(tmp) / "cell"
        run(scenario, out=out, extra_files={"cell.json": cell_json}, argv=argv, cores=scenario.threads)
        files = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}
    return time.perf_counter() - t0, files


def _write_cell(out: Path, cell_id: str, files: dict[str, bytes]) -> None:
    """The cell's files into ``out/<cell id>``, all or nothing (a temporary sibling, then a rename)."""
    tmp = out / f".{cell_id}.tmp-ray-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        for name, data in files.items():
            if Path(name).name != name or name.startswith("."):
                raise UserError(f"cell {cell_id}: a worker returned a bad file name {name!r}")
            (tmp / name).write_bytes(data)
        os.rename(tmp, out / cell_id)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def run_cells_on_ray(study: Study, pending: Sequence[Cell], out: Path, argv: list[str], address: Optional[str],
                     cores: int, done: Callable[[Cell, float], None],
                     failed: Callable[[Cell, str, str], None]) -> tuple[list[str], dict[str, str]]:
    """Run ``pending`` as Ray tasks; (ids run, {id: error}) in completion order. ``cores``: the CPUs of a
    local Ray (one started here). ``done`` and ``failed`` report each cell as it ends."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--jobs ray needs Ray; pip install 'p2pfl-sim[ray]'") from None
    from p2pfl.metrics.rundir import dumps_json

    address = address or os.environ.get("RAY_ADDRESS") or None
    started = not ray.is_initialized()
    if started:
        local: dict[str, Any] = {"num_cpus": cores, "include_dashboard": False} if address is None else {}
        ray.init(address=address, log_to_driver=False, configure_logging=False, **local)
    task = ray.remote(run_cell_files)
    refs: dict[Any, Cell] = {}
    ran: list[str] = []
    errors: dict[str, str] = {}
    out.mkdir(parents=True, exist_ok=True)
    try:
        for cell in pending:
            data = dumps_json(cell.record(study.name)).encode("utf-8")
            refs[task.options(num_cpus=cell.scenario.threads).remote(cell.scenario, data, argv)] = cell
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            cell = refs[ready[0]]
            try:
                wall, files = ray.get(ready[0])
            except ray.exceptions.RayTaskError as err:
                cause = getattr(err, "cause", None)
                message = " ".join(str(cause).split()) if isinstance(cause, UserError) else \
                    f"{type(cause).__name__ if cause else 'RayTaskError'}: {' '.join(str(cause or err).split())[:400]}"
                errors[cell.id] = message
                failed(cell, message, "" if isinstance(cause, UserError) else str(err))
                continue
            except ray.exceptions.RayError as err:  # the worker died, the node left
                errors[cell.id] = f"its Ray task was lost ({type(err).__name__})"
                failed(cell, errors[cell.id], "")
                continue
            _write_cell(out, cell.id, files)
            ran.append(cell.id)
            done(cell, wall)
    except BaseException:  # Ctrl-C: stop what still runs; complete cells stay
        for ref in refs:
            with contextlib.suppress(Exception):  # already finished or gone
                ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
    return ran, errors
