"""Does an archive still hold what the code makes? Re-run a seeded sample of its cells and compare.

    p2pfl archive verify DIR [--sample K] [--seed S] [--jobs N] [--cells ID ...] [--study FILE] [--write]

A study resumes across commits, so one archive (``p2pfl.study.archive``) can hold cells of several revisions
of the code (each cell's ``manifest.json`` names the one that made it). ``verify_archive`` picks a sample of
the archived cells (a pure function of their ids and the seed: the ``K`` cells whose ``sha256(seed, id)``
ranks lowest; every cell when ``K`` reaches their number), re-runs each from its archived ``scenario.yaml``
(the resolved scenario, its seed included) at the current code into a temporary folder, through the sweep's
own run path (``p2pfl.study.runner``: the scenario's torch threads, the worker's share of the cores), and
compares the new ``summary.json`` with the archived one byte for byte. Where they differ it names the keys,
old -> new. A study may declare a tolerance (``verify: {rtol: 1e-6, atol: 0}`` in its file, read with
``--study FILE``): a number then matches when ``|new - old| <= atol + rtol * |old|``, and a cell whose
differences all do so is "within tolerance"; without one, only byte-identical cells pass.

A scenario file an archived cell names by an absolute path of another checkout (``topology.path``, a churn
trace, a trajectory) that is gone here is looked up under this checkout by its trailing path
(``topologies/x.txt``), as a resumed sweep accepts the same file name (``p2pfl.study.resume``).

    <archive>/VERIFIED.json   the last verification (``--write``): the code revision it ran at, whether the
                              package had uncommitted changes, the date, the sample seed and size, and each
                              sampled cell's revision and result; written atomically

:func:`provenance` reads an archive's revisions and its ``VERIFIED.json`` for a report, and
:func:`provenance_line` says both in one markdown line.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TextIO, Union

from p2pfl.errors import UserError
from p2pfl.study.running import ProgressFile

if TYPE_CHECKING:
    from p2pfl.config.scenario import Scenario

__all__ = ["VERIFIED_NAME", "KEYS_ADDED", "Tolerance", "Difference", "CellResult", "Verification", "Provenance", "archived_cells",
           "sample_cells", "choose_cells", "made_at", "compare_summaries", "study_tolerance", "tolerance_for",
           "verify_archive", "format_verification", "write_verified", "provenance", "provenance_line", "provenance_lines"]

#: the file ``--write`` records the verification in, in the archive's folder
VERIFIED_NAME = "VERIFIED.json"
#: results of a compared cell; "fails": it could not be re-run at the current code (its error is kept)
IDENTICAL, WITHIN, DIFFERS, FAILS = "identical", "within tolerance", "differs", "fails"
#: every value the archive holds is the same; the current code writes keys the archive lacks (a summary that grew)
KEYS_ADDED = "same values, keys added"
#: seconds between two progress lines of a running cell
PROGRESS_EVERY_S = 60.0
#: the most keys listed per differing cell under the table
MAX_KEYS_SHOWN = 12

_ABSENT = object()


# ------------------------------------------------------------------------------------------------ the cells


def archived_cells(archive: str | Path) -> list[str]:
    """The ids of the complete cells in ``archive`` (folders with a summary.json), sorted; one-line UserError
    when ``archive`` is not a folder of cells."""
    root = Path(archive)
    if not root.exists():
        raise UserError(f"{root}: no such folder; give an archive of cells (e.g. analysis/cells/<study>)")
    if not root.is_dir():
        raise UserError(f"{root}: not a folder; give an archive of cells (e.g. analysis/cells/<study>)")
    if (root / "summary.json").is_file():
        raise UserError(f"{root}: is one cell, not an archive of cells; give its folder: {root.parent} "
                        f"--cells {root.name}")
    ids = sorted(e.name for e in os.scandir(root)
                 if not e.name.startswith(".") and e.is_dir() and os.path.isfile(os.path.join(e.path, "summary.json")))
    if not ids:
        raise UserError(f"{root}: holds no archived cells (no <cell id>/summary.json); give an archive made by "
                        "p2pfl sweep --archive (e.g. analysis/cells/<study>)")
    return ids


def _rank(seed: int, cell: str) -> bytes:
    return hashlib.sha256(f"{seed}\0{cell}".encode()).digest()


def sample_cells(ids: Sequence[str], k: Optional[int], seed: int = 0) -> list[str]:
    """``k`` of ``ids`` chosen by ``seed`` (all of them when ``k`` is None or reaches their number), sorted.

    The ``k`` ids whose ``sha256(f"{seed}\\0{id}")`` is lowest: a pure function of the ids and the seed (the same
    on every machine and Python), and one more cell in the archive changes the sample by at most one cell."""
    unique = sorted(set(ids))
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise UserError(f"--sample: expected a whole number >= 1; got {k!r}; use e.g. --sample 8")
    if k is None or k >= len(unique):
        return unique
    return sorted(sorted(unique, key=lambda c: _rank(seed, c))[:k])


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def made_at(cell_dir: Path) -> Optional[str]:
    """The git revision recorded in a cell's manifest.json (None where it records none)."""
    m = _read_json(cell_dir / "manifest.json")
    rev = m.get("git_revision") if isinstance(m, dict) else None
    return rev if isinstance(rev, str) and rev else None


# ------------------------------------------------------------------------------------------- the comparison


@dataclass(frozen=True)
class Tolerance:
    """Numbers match when ``|new - old| <= atol + rtol * |old|``."""

    rtol: float = 0.0
    atol: float = 0.0

    def close(self, old: float, new: float) -> bool:
        return abs(new - old) <= self.atol + self.rtol * abs(old)

    def text(self) -> str:
        return f"rtol {self.rtol:g}, atol {self.atol:g}"


@dataclass(frozen=True)
class Difference:
    """One value of summary.json that changed: its dotted path (``energy.total_j``, ``accuracy_per_node[3]``),
    the old and new values (``_ABSENT`` where the key is missing) and whether it is within the tolerance."""

    path: str
    old: Any
    new: Any
    within: bool = False

    @property
    def key(self) -> str:
        """The path without list positions: what a table names (``accuracy_per_node``)."""
        return re.sub(r"\[\d+\]", "", self.path) or self.path


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _walk(old: Any, new: Any, path: str, tol: Optional[Tolerance], out: list[Difference]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(k for k in new if k not in old)]:
            _walk(old.get(key, _ABSENT), new.get(key, _ABSENT), f"{path}.{key}" if path else str(key), tol, out)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            _walk(a, b, f"{path}[{i}]", tol, out)
    elif _number(old) and _number(new):
        if old != new or type(old) is not type(new):
            within = tol is not None and math.isfinite(old) and math.isfinite(new) and tol.close(old, new)
            out.append(Difference(path, old, new, within))
    elif type(old) is not type(new) or old != new:
        out.append(Difference(path or "(summary)", old, new))


def compare_summaries(old: bytes, new: bytes, tolerance: Optional[Tolerance] = None) -> tuple[str, list[Difference]]:
    """(result, differences) of two summary.json files: ``identical`` (the same bytes), ``same values, keys added``
    (every archived value unchanged, only keys the archive lacks are new), ``within tolerance`` (every difference a
    number within ``tolerance``, or a new key) or ``differs``."""
    if old == new:
        return IDENTICAL, []
    try:
        a, b = json.loads(old), json.loads(new)
    except ValueError:
        return DIFFERS, [Difference("(summary.json)", "as archived", "not JSON on one side")]
    diffs: list[Difference] = []
    _walk(a, b, "", tolerance, diffs)
    if not diffs:  # the same values written otherwise (key order, spacing)
        diffs.append(Difference("(formatting)", "as archived", "the same values written otherwise"))
    if all(d.old is _ABSENT for d in diffs):
        return KEYS_ADDED, diffs
    return (WITHIN if all(d.within or d.old is _ABSENT for d in diffs) else DIFFERS), diffs


def _short(v: Any, width: int = 40) -> str:
    if v is _ABSENT:
        return "(absent)"
    text = repr(v) if isinstance(v, float) else json.dumps(v, separators=(",", ":")) if not isinstance(v, str) else v
    return text if len(text) <= width else text[: width - 3] + "..."


def _grouped(diffs: Sequence[Difference]) -> dict[str, list[Difference]]:
    """The differences by key (list positions left out): keys whose values changed first, then keys the new
    summary lacks, then keys it adds (a figure added to the summary since the cell was made)."""
    groups: dict[str, list[Difference]] = {}
    for d in diffs:
        groups.setdefault(d.key, []).append(d)
    return dict(sorted(groups.items(), key=lambda kv: _kind(kv[1])))


def _kind(items: Sequence[Difference]) -> int:
    """0: values changed; 1: keys removed; 2: keys added."""
    if all(d.old is _ABSENT for d in items):
        return 2
    return 1 if all(d.new is _ABSENT for d in items) else 0


def difference_lines(diffs: Sequence[Difference], limit: int = MAX_KEYS_SHOWN) -> list[str]:
    """One line per key that differs (``key: old -> new``; a list's items counted, the first shown), at most
    ``limit`` lines and one that counts the rest."""
    lines = []
    groups = _grouped(diffs)
    for key, items in list(groups.items())[:limit]:
        mark = "  (within tolerance)" if all(d.within for d in items) else ""
        first = items[0]
        if len(items) == 1 and first.path == key:
            lines.append(f"{key}: {_short(first.old)} -> {_short(first.new)}{mark}")
        else:
            where = first.path[len(key):] if first.path.startswith(key) else first.path
            n = f"{len(items)} items differ" if len(items) > 1 else "1 item differs"
            lines.append(f"{key}: {n}, e.g. {where} {_short(first.old)} -> "
                         f"{_short(first.new)}{mark}")
    if len(groups) > limit:
        lines.append(f"... and {len(groups) - limit} more key(s)")
    return lines


# --------------------------------------------------------------------------------------------- the tolerance


def study_tolerance(study_file: str | Path) -> tuple[str, Optional[Tolerance]]:
    """(the study's name, its declared ``verify`` tolerance or None) from a study file, read without expanding
    its cells."""
    from p2pfl.study.spec import STUDY_NEEDS, StudySpec
    from p2pfl.validation import parse_model, read_yaml, require_mapping

    path = Path(study_file)
    data = require_mapping(read_yaml(path), path, "study", STUDY_NEEDS)
    spec = parse_model(StudySpec, data, str(path))
    tol = None if spec.verify is None else Tolerance(spec.verify.rtol, spec.verify.atol)
    return spec.name or path.stem, tol


def tolerance_for(archive: str | Path, study_file: str | Path) -> Optional[Tolerance]:
    """The tolerance ``study_file`` declares for the cells of ``archive`` (None: byte for byte); one-line
    UserError when the file is not the study of those cells (their cell.json names another)."""
    name, tol = study_tolerance(study_file)
    root = Path(archive)
    records = [_read_json(root / c / "cell.json") for c in archived_cells(root)]
    studies = {str(r.get("study")) for r in records if isinstance(r, dict) and r.get("study") is not None}
    if studies and name not in studies:
        raise UserError(f"--study {study_file}: study {name!r}, but the cells of {root} are of "
                        f"{', '.join(sorted(studies))}; give that study's file")
    return tol


# ------------------------------------------------------------------------------------------------ re-running


@dataclass(frozen=True)
class CellResult:
    """One verified cell: its id, the revision that made it, its result, what differs (or why it fails), the
    notes of its re-run (a moved file) and the re-run's wall seconds."""

    cell: str
    made_at: Optional[str]
    result: str
    differences: tuple[Difference, ...] = ()
    error: Optional[str] = None
    notes: tuple[str, ...] = ()
    wall_s: Optional[float] = None

    @property
    def ok(self) -> bool:
        return self.result in (IDENTICAL, KEYS_ADDED, WITHIN)

    def text(self) -> str:
        """The table's result column: ``identical``, ``within tolerance``, ``differs: a, b``, ``fails: ...``."""
        if self.result == DIFFERS:
            groups = _grouped(self.differences)
            keys = [k for k, items in groups.items() if _kind(items) < 2]
            added = len(groups) - len(keys)
            shown = ", ".join(keys[:4]) + (f" (+{len(keys) - 4} more)" if len(keys) > 4 else "")
            new = f"{added} key{'s' if added > 1 else ''} added" if added else ""
            return f"differs: {shown}{'; ' if shown and new else ''}{new}"
        if self.result == FAILS:
            return f"fails: {_short(self.error or '', 80)}"
        return self.result

    def record(self) -> dict[str, Any]:
        """This cell in VERIFIED.json."""
        return {"cell": self.cell, "made_at": self.made_at, "result": self.result,
                "differences": difference_lines(self.differences, limit=50), "error": self.error,
                "notes": list(self.notes)}


@dataclass(frozen=True)
class Verification:
    """A verification of ``archive``: the cells it holds, the sample (``k`` asked, ``seed``), the code it ran at
    and each sampled cell's result (in id order)."""

    archive: Path
    total: int
    k: Optional[int]
    seed: int
    revision: Optional[str]
    code_modified: Optional[bool]
    tolerance: Optional[Tolerance]
    results: tuple[CellResult, ...] = field(default=())
    date: str = ""

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def counts(self) -> dict[str, int]:
        c = Counter(r.result for r in self.results)
        return {name: c[name] for name in (IDENTICAL, KEYS_ADDED, WITHIN, DIFFERS, FAILS)}

    def record(self, command: Optional[Sequence[str]] = None) -> dict[str, Any]:
        """The content of VERIFIED.json."""
        return {"verified_at": self.revision, "code_modified": self.code_modified, "date": self.date,
                "seed": self.seed, "sample": self.k, "sampled": len(self.results), "cells_total": self.total,
                "tolerance": None if self.tolerance is None else {"rtol": self.tolerance.rtol,
                                                                  "atol": self.tolerance.atol},
                "counts": self.counts(), "command": list(sys.argv if command is None else command),
                "cells": [r.record() for r in self.results]}


def code_modified() -> Optional[bool]:
    """Whether the package's files differ from the checked-out revision (uncommitted changes or new files under
    ``p2pfl/``); None outside a git checkout."""
    here = Path(__file__).resolve().parents[1]
    try:
        st = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=here, capture_output=True, text=True,
                            timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(st.stdout.strip()) if st.returncode == 0 else None


def _checkout_roots() -> list[Path]:
    return list(dict.fromkeys([Path.cwd(), Path(__file__).resolve().parents[2]]))


def _relocate(raw: dict[str, Any]) -> list[str]:
    """Point each file field of an archived scenario whose absolute path is gone (another checkout's) at the file
    of the same trailing path under this checkout; the notes saying so."""
    from p2pfl.study.resume import FILE_FIELDS

    notes = []
    for fields in FILE_FIELDS:
        node: Any = raw
        for key in fields[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        last = fields[-1]
        value = node.get(last) if isinstance(node, dict) else None
        if not isinstance(value, str) or not os.path.isabs(value) or os.path.exists(value):
            continue
        parts = Path(value).parts[1:]
        found = next((root / Path(*parts[i:]) for i in range(len(parts)) for root in _checkout_roots()
                      if (root / Path(*parts[i:])).is_file()), None)
        if found is not None:
            assert isinstance(node, dict)
            node[last] = str(found)
            notes.append(f"{'.'.join(fields)}: {value} is gone; ran with {found}")
    return notes


def load_cell_scenario(cell_dir: Path) -> tuple[Scenario, list[str]]:
    """An archived cell's scenario through the current schema (files of another checkout looked up here; see
    the module's text), and the notes saying what was looked up."""
    from p2pfl.config import load_dict
    from p2pfl.validation import read_yaml

    source = cell_dir / "scenario.yaml"
    raw = read_yaml(source)
    if not isinstance(raw, dict):
        raise UserError(f"{source}: not a scenario (no mapping of fields); the cell cannot be re-run")
    notes = _relocate(raw)
    return load_dict(raw, source=str(source)), notes


class _EchoProgress(ProgressFile):
    """A run's ``on_setup``/``on_start``/``on_round`` hooks (``setup``, ``start``, ``advance``) that print where a
    cell is on ``stream``, at most every ``every_s`` seconds, instead of writing a progress file."""

    def __init__(self, cell: str, rounds: Optional[int], stream: TextIO, every_s: float = PROGRESS_EVERY_S) -> None:
        super().__init__(Path(os.devnull), rounds, interval=0.0)
        self.cell, self.stream, self.every_s = cell, stream, every_s
        self.shown = self.clock()

    def _write(self, now: float) -> None:
        self.written = now
        if now - self.shown >= self.every_s:
            self.shown = now
            status = self.status(now)
            print(f"verify: running {self.cell}: {status.where()}, {_seconds(status.elapsed_s)} in", file=self.stream,
                  flush=True)


def _seconds(s: float) -> str:
    from p2pfl.study.display import fmt_duration

    return fmt_duration(s)


def _cell_json(cell_dir: Path) -> bytes:
    try:
        return (cell_dir / "cell.json").read_bytes()
    except OSError:
        return b"{}\n"


def _load_all(archive: Path, cells: Sequence[str], on_result: Callable[[CellResult], None],
              stream: Optional[TextIO]) -> list[tuple[str, Scenario, list[str]]]:
    """(id, scenario, notes) of each of ``cells`` whose archived scenario loads at the current code; a cell whose
    scenario does not (a field renamed or removed since) is a result: it fails."""
    from p2pfl.study.runner import _one_line

    loaded = []
    for cid in cells:
        try:
            sc, notes = load_cell_scenario(archive / cid)
        except UserError as err:
            on_result(CellResult(cid, made_at(archive / cid), FAILS, error=_one_line(err)))
            continue
        for note in notes:
            if stream is not None:
                print(f"verify: {cid}: {note}", file=stream, flush=True)
        loaded.append((cid, sc, notes))
    return loaded


def _rerun_all(archive: Path, loaded: Sequence[tuple[str, Scenario, list[str]]], tmp: Path, jobs: int, cores: int,
               tolerance: Optional[Tolerance], argv: list[str], stream: Optional[TextIO],
               on_result: Callable[[CellResult], None]) -> None:
    """Re-run the ``loaded`` cells of ``archive`` in ``tmp``, ``jobs`` at a time, calling ``on_result`` as each
    is compared."""
    from p2pfl.study.runner import _one_line, _run_cell
    from p2pfl.study.running import progress_path, read_status

    def compared(cid: str, notes: list[str], wall: float) -> CellResult:
        out = tmp / cid
        new = (out / "summary.json").read_bytes()
        shutil.rmtree(out, ignore_errors=True)  # one cell's run directory at a time (its event stream is large)
        result, diffs = compare_summaries((archive / cid / "summary.json").read_bytes(), new, tolerance)
        return CellResult(cid, made_at(archive / cid), result, tuple(diffs), notes=tuple(notes), wall_s=wall)

    def failed(cid: str, notes: list[str], err: BaseException) -> CellResult:
        shutil.rmtree(tmp / cid, ignore_errors=True)
        text = _one_line(err) if isinstance(err, UserError) else f"{type(err).__name__}: {_one_line(err)}"
        return CellResult(cid, made_at(archive / cid), FAILS, error=text, notes=tuple(notes))

    if jobs <= 1 or len(loaded) <= 1:
        from p2pfl.api import run

        for cid, sc, notes in loaded:
            echo = None if stream is None else _EchoProgress(cid, getattr(sc.protocol, "rounds", None), stream)
            t0 = time.perf_counter()
            try:
                run(sc, out=tmp / cid, extra_files={"cell.json": _cell_json(archive / cid)}, argv=argv, cores=cores,
                    on_setup=None if echo is None else echo.setup, on_start=None if echo is None else echo.start,
                    on_round=None if echo is None else echo.advance)
            except UserError as err:
                on_result(failed(cid, notes, err))
                continue
            except (KeyboardInterrupt, MemoryError):
                raise
            except Exception as err:  # a bug at the current code: this cell fails, the others go on
                on_result(failed(cid, notes, err))
                continue
            on_result(compared(cid, notes, time.perf_counter() - t0))
        return

    from p2pfl.study.runner import worker_pool

    workers = min(jobs, len(loaded))
    share = max(1, cores // workers)
    waiting = list(loaded)
    futures: dict[Future[float], tuple[str, list[str]]] = {}
    shown = time.monotonic()
    with worker_pool(workers) as pool:
        while waiting or futures:
            while waiting and len(futures) < workers:
                cid, sc, notes = waiting.pop(0)
                report = None if stream is None else str(progress_path(tmp, cid))
                try:
                    fut = pool.submit(_run_cell, sc, str(tmp / cid), _cell_json(archive / cid), argv, share, None,
                                      report)
                except BrokenProcessPool as err:
                    on_result(failed(cid, notes, err))
                    continue
                futures[fut] = (cid, notes)
            finished, _ = wait(futures, timeout=5.0, return_when=FIRST_COMPLETED)
            now = time.monotonic()
            if stream is not None and not finished and now - shown >= PROGRESS_EVERY_S:
                shown = now
                for cid, _ in futures.values():
                    status = read_status(progress_path(tmp, cid), time.time())
                    where = "starting" if status is None else f"{status.where()}, {_seconds(status.elapsed_s)} in"
                    print(f"verify: running {cid}: {where}", file=stream, flush=True)
            for fut in finished:
                cid, notes = futures.pop(fut)
                progress_path(tmp, cid).unlink(missing_ok=True)
                try:
                    wall = fut.result()
                except BrokenProcessPool:
                    on_result(failed(cid, notes, RuntimeError("its worker process died (killed, or out of memory)")))
                except Exception as err:
                    on_result(failed(cid, notes, err))
                else:
                    on_result(compared(cid, notes, wall))


def _expected_s(archive: Path, cells: Sequence[str]) -> Optional[float]:
    from p2pfl.study.times import wall_s_of

    walls = [wall_s_of(archive / c) for c in cells]
    return sum(w for w in walls if w is not None) if any(w is not None for w in walls) else None


def choose_cells(archive: str | Path, *, sample: Optional[int] = None, seed: int = 0,
                 cells: Optional[Sequence[str]] = None) -> tuple[list[str], list[str]]:
    """(every archived cell, the sample to re-run) of ``archive``: ``sample`` of ``cells`` (default: all archived
    cells) chosen by ``seed`` (:func:`sample_cells`); one-line UserError for bad input (an unknown cell, a cell
    without its scenario.yaml)."""
    root = Path(archive)
    ids = archived_cells(root)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise UserError(f"--seed: expected a whole number; got {seed!r}; use e.g. --seed 0")
    population = ids
    if cells is not None:
        if not cells:
            raise UserError("--cells: no cell ids given; name at least one, or leave --cells out")
        unknown = [c for c in cells if c not in ids]
        if unknown:
            raise UserError(f"--cells: {unknown[0]!r} is not an archived cell of {root} ({len(ids)} cells, e.g. "
                            f"{ids[0]}); give ids of folders in it")
        population = sorted(set(cells))
    chosen = sample_cells(population, sample, seed)
    for cid in chosen:
        if not (root / cid / "scenario.yaml").is_file():
            raise UserError(f"{root / cid}: no scenario.yaml, so the cell cannot be re-run; restore the file from "
                            "git, or leave the cell out with --cells")
    return ids, chosen


def verify_archive(archive: str | Path, *, sample: Optional[int] = None, seed: int = 0, jobs: int = 1,
                   cells: Optional[Sequence[str]] = None, tolerance: Optional[Tolerance] = None,
                   progress: bool = False, argv: Optional[Sequence[str]] = None,
                   stream: Optional[TextIO] = None) -> Verification:
    """Re-run a sample of ``archive``'s cells at the current code and compare their summary.json files.

    ``cells``: the ids to sample from (default: every archived cell); ``sample``: how many of them (default all),
    chosen by ``seed`` (:func:`sample_cells`); ``jobs``: cells at once (worker processes, as a sweep's; 1 runs
    them here, one after the other); ``tolerance``: the study's (:func:`study_tolerance`), else byte-exact.
    ``progress``: a line on ``stream`` (stderr) per cell, and every minute per running cell. Bad input raises a
    one-line UserError before anything runs; a cell that cannot be re-run is a result (``fails``).
    """
    from p2pfl.executors.spec import available_cores
    from p2pfl.metrics.rundir import _git_revision
    from p2pfl.study.runner import oversubscribed

    root = Path(archive)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise UserError(f"--jobs: expected a whole number >= 1; got {jobs!r}; use e.g. --jobs 2")
    ids, chosen = choose_cells(root, sample=sample, seed=seed, cells=cells)
    out = stream if stream is not None else sys.stderr
    shown = out if progress else None
    cores = available_cores()
    workers = max(1, min(jobs, len(chosen)))
    results: dict[str, CellResult] = {}

    def on_result(r: CellResult) -> None:
        results[r.cell] = r
        if shown is not None:
            took = "" if r.wall_s is None else f" ({_seconds(r.wall_s)})"
            print(f"verify: [{len(results)}/{len(chosen)}] {r.cell}: {r.text()}{took}", file=shown, flush=True)

    if shown is not None:
        expected = _expected_s(root, chosen)
        about = "" if expected is None else f"; about {_seconds(expected / workers)} at their archived wall times"
        print(f"verify: re-running {len(chosen)} of {len(ids)} cells of {root}, {workers} at a time{about}",
              file=shown, flush=True)
    loaded = _load_all(root, chosen, on_result, shown)
    threads = max((sc.threads for _, sc, _ in loaded), default=1)
    if shown is not None and workers > 1 and (warning := oversubscribed(workers, threads, cores)):
        print(f"verify: {warning}", file=shown, flush=True)
    command = list(sys.argv if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="p2pfl-verify-") as tmp:
        _rerun_all(root, loaded, Path(tmp), jobs, cores, tolerance, command, shown, on_result)
    date = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return Verification(root, len(ids), sample, seed, _git_revision(), code_modified(), tolerance,
                        tuple(results[c] for c in chosen if c in results), date)


# ----------------------------------------------------------------------------------------------- the output


def _rev(rev: Optional[str]) -> str:
    return rev[:8] if rev else "unknown"


def format_verification(v: Verification) -> str:
    """The table (cell id, revision it was made at, result), the keys that differ under it, and a summary line."""
    rows = [("cell", "made at", "result")] + [(r.cell, _rev(r.made_at), r.text()) for r in v.results]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = ["  ".join([f"{a:<{widths[0]}}", f"{b:<{widths[1]}}", c]).rstrip() for a, b, c in rows]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 6)
    for r in v.results:
        if r.result == DIFFERS or (r.result == WITHIN and r.differences):
            lines.append("")
            lines.append(f"{r.cell} ({r.result}; archived -> now):")
            lines += [f"  {x}" for x in difference_lines(r.differences)]
        elif r.result == FAILS:
            lines.append("")
            lines.append(f"{r.cell} fails: {r.error}")
    lines.append("")
    lines.append(summary_line(v))
    return "\n".join(lines)


def summary_line(v: Verification) -> str:
    """``8 of 40 cells re-run at 1a2b3c4d: 7 identical, 1 differs (byte-exact)``."""
    c = v.counts()
    parts = [f"{n} {name}" for name, n in c.items() if n or name == IDENTICAL]
    at = _rev(v.revision) + ("+modified" if v.code_modified else "")
    tol = "byte-exact" if v.tolerance is None else f"numbers within {v.tolerance.text()}"
    return f"{len(v.results)} of {v.total} cells re-run at {at}: {', '.join(parts)} ({tol})"


def write_verified(v: Verification, command: Optional[Sequence[str]] = None) -> Path:
    """Write ``v`` to ``<archive>/VERIFIED.json`` atomically (a temporary sibling, then a rename); its path."""
    from p2pfl.metrics.rundir import dumps_json

    dest = v.archive / VERIFIED_NAME
    fd, tmp = tempfile.mkstemp(prefix=f".{VERIFIED_NAME}.tmp-", dir=v.archive)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(dumps_json(v.record(command)))
        os.replace(tmp, dest)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise UserError(f"--write: cannot write {dest} ({err.strerror or err}); check the folder's "
                            "permissions") from None
        raise
    return dest


# ----------------------------------------------------------------------------------------------- provenance


@dataclass(frozen=True)
class Provenance:
    """Where an archive's cells came from: how many, the revisions that made them (revision -> cells, the most
    first; ``unknown`` where a manifest names none) and the last recorded verification (VERIFIED.json), if any."""

    archive: Path
    cells: int
    revisions: Mapping[str, int]
    verified: Optional[Mapping[str, Any]] = None


def provenance(archive: str | Path) -> Provenance:
    """The revisions of ``archive``'s cells and its recorded verification (for reports)."""
    root = Path(archive)
    ids = archived_cells(root)
    counts = Counter(made_at(root / c) or "unknown" for c in ids)
    revisions = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    verified = _read_json(root / VERIFIED_NAME)
    return Provenance(root, len(ids), revisions, verified if isinstance(verified, dict) else None)


def provenance_line(source: Union[str, Path, Provenance]) -> str:
    """One markdown line: ``Cells: 80 from 3 revisions (a1b2c3d 60, ...); verified at e5f6a7b8 on 2025-06-01:
    8 of 8 sampled identical`` (or ``; not verified``)."""
    p = source if isinstance(source, Provenance) else provenance(source)
    revs = ", ".join(f"{_rev(r) if r != 'unknown' else r} {n}" for r, n in p.revisions.items())
    text = f"Cells: {p.cells} from {len(p.revisions)} revision{'s' if len(p.revisions) != 1 else ''} ({revs})"
    v = p.verified
    if not v:
        return text + "; not verified"
    at = _rev(v.get("verified_at")) + ("+modified" if v.get("code_modified") else "")
    day = str(v.get("date") or "")[:10]
    raw = v.get("counts")
    counts: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    sampled = int(v.get("sampled") or 0)
    total = v.get("cells_total")
    what = "sampled " if isinstance(total, int) and sampled < total else ""
    parts = [f"{counts.get(IDENTICAL, 0)} of {sampled} {what}identical"]
    parts += [f"{counts[k]} {k}" for k in (KEYS_ADDED, WITHIN, DIFFERS, FAILS) if counts.get(k)]
    tol = v.get("tolerance")
    if counts.get(WITHIN) and isinstance(tol, dict) and all(_number(tol.get(k)) for k in ("rtol", "atol")):
        at_within = next(i for i, part in enumerate(parts) if part.endswith(WITHIN))
        parts[at_within] += f" ({Tolerance(tol['rtol'], tol['atol']).text()})"
    then = f" (the archive held {total} cells then)" if isinstance(total, int) and total != p.cells else ""
    return f"{text}; verified at {at}{' on ' + day if day else ''}: {', '.join(parts)}{then}"


def provenance_lines(dirs: Sequence[Union[str, Path]]) -> list[str]:
    """A report's provenance: ``provenance_line`` for every archive among ``dirs`` and their sub-folders (a folder
    of studies, e.g. analysis/cells/conditional, gives one line per study archive), each headed by its path;
    folders that hold no archived cells are skipped."""
    out = []
    for d in map(Path, dirs):
        found = [d] if any((c / "summary.json").is_file() for c in d.iterdir() if c.is_dir()) else sorted(
            c for c in d.iterdir() if c.is_dir() and any((g / "summary.json").is_file() for g in c.iterdir()
                                                             if g.is_dir()))
        out += [f"- `{_shown(a)}`: {provenance_line(a)}" for a in found]
    return out


def _shown(path: Path) -> Path:
    """``path`` as a page names it: relative to the working directory where it lies below it (the same line
    whether a report was given the archive as a relative or an absolute path)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path
