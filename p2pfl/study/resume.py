"""The folder a sweep writes into: one sweep at a time, which cells are complete, what a stopped sweep left.

    <out>/<cell id>/          a complete cell: its run directory (summary.json written last, by a rename)
    <out>/.<cell id>.tmp-*    a cell a stopped sweep was writing: removed before the next one runs
    <out>/.<cell id>.progress how far a running cell has got (p2pfl.study.running): removed as it ends
    <out>/.sweep.lock         held while a sweep writes into <out>

A complete cell is skipped by the next sweep when it is still the cell the study resolves to (the
same scenario, the same ``cell.json``), and refused otherwise: a rerun never mixes two versions of a
study in one folder. A file a scenario names (a topology, a churn trace, a trajectory) is resolved to an
absolute path when the scenario loads, so a cell run from another checkout names it elsewhere: it is the
same input when it holds the same bytes or, where the old path is gone, when the file has the same name.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from p2pfl.errors import UserError
from p2pfl.study.spec import Cell, Study

__all__ = ["LOCK_NAME", "locked", "no_interrupt", "remove_temps", "complete_cells", "strangers"]

LOCK_NAME = ".sweep.lock"
#: scenario fields that name a file (resolved to absolute paths at load)
FILE_FIELDS = (("topology", "path"), ("dynamics", "churn", "trace"), ("dynamics", "mobility", "trajectory"))


@contextlib.contextmanager
def no_interrupt() -> Iterator[None]:
    """Ctrl-C ignored while cleaning up (main thread only: elsewhere signals cannot be changed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
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


def remove_temps(out: Path, study: Study) -> int:
    """Remove the temporary siblings (``.<cell id>.tmp-*``) a stopped sweep left; how many. Its cells' progress
    files (``.<cell id>.progress``, ``p2pfl.study.running``) go too, uncounted."""
    if not out.is_dir():
        return 0
    prefixes = tuple(f".{c.id}.tmp-" for c in study.cells)
    reports = {f".{c.id}.progress{tail}" for c in study.cells for tail in ("", ".tmp")}
    removed = 0
    with no_interrupt():
        for entry in os.scandir(out):
            if entry.name.startswith(prefixes) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed += 1
            elif entry.name in reports and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
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
    new = _resolved(cell.scenario)
    return bool(_same_files(_resolved(old), new) == new and old_cell == json.loads(json.dumps(cell.record(study))))


def _same_file(old: str, new: str) -> bool:
    """Does the file field ``old`` (a complete cell's) name the same input as ``new`` (the study's now)?"""
    if old == new:
        return True
    try:
        return Path(old).read_bytes() == Path(new).read_bytes()
    except FileNotFoundError:  # the old checkout is gone: the same file name
        return not Path(old).exists() and Path(old).name == Path(new).name
    except OSError:
        return False


def _same_files(old: Any, new: Any) -> Any:
    """``old`` with each file field that names the same input as ``new``'s (``_same_file``) set to ``new``'s."""
    for field in FILE_FIELDS:
        a, b = old, new
        for key in field[:-1]:
            a, b = (a or {}).get(key), (b or {}).get(key)
        last = field[-1]
        if isinstance(a, dict) and isinstance(b, dict) and isinstance(a.get(last), str) \
                and isinstance(b.get(last), str) and _same_file(a[last], b[last]):
            a[last] = b[last]
    return old


def _resolved(scenario: Any) -> Any:
    """A scenario's resolved fields as plain YAML values (tuples as lists)."""
    return yaml.safe_load(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))


def complete_cells(study: Study, out: Path) -> list[str]:
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


def strangers(study: Study, out: Path) -> int:
    """Folders in ``out`` that are not cells of the study (left by another version of it)."""
    if not out.is_dir():
        return 0
    ids = {c.id for c in study.cells}
    return sum(1 for e in os.scandir(out) if e.is_dir() and not e.name.startswith(".") and e.name not in ids)
