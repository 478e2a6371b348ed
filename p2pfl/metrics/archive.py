"""A study's results small enough to commit: each complete cell's run directory without its event stream.

    <archive>/<cell id>/   cell.json, scenario.yaml, summary.json, timing.json, manifest.json
                           (and positions.npz where the run wrote one); no events.jsonl

``p2pfl sweep STUDY --archive DIR`` copies every cell into ``DIR`` as it completes, and before it
runs copies the cells ``DIR`` holds into ``--out`` (a fresh clone resumes a study from the committed
archive: those cells are checked against the study like any complete cell, and skipped). Every
report reads an archived cell as it reads a run directory; what needs the event stream (bytes over
time, ``p2pfl.metrics.runs.bytes_curve``) is absent for it, as for any run without the file.
A cell is copied whole or not at all (a temporary sibling, then a rename).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from p2pfl.errors import UserError
from p2pfl.metrics.rundir import discard_run_dir, start_run_dir

__all__ = ["KEPT", "archive_cell", "restore_cells"]

#: the run-directory files an archive keeps (the event stream is left out: about 10x the rest)
KEPT = ("cell.json", "scenario.yaml", "summary.json", "timing.json", "manifest.json", "positions.npz")


def _copy(src: Path, dest: Path) -> None:
    """Copy ``src``'s kept files to ``dest`` (which must not exist) through a run directory's temporary sibling."""
    tmp = start_run_dir(dest)
    try:
        for name in KEPT:
            if (src / name).is_file():
                shutil.copyfile(src / name, tmp / name)
        os.rename(tmp, dest)
    except BaseException:
        discard_run_dir(tmp)
        raise


def archive_cell(run_dir: str | Path, archive: str | Path) -> bool:
    """Copy complete run directory ``run_dir`` into ``archive`` under its own name; False if it is there already.

    A cell already archived is left as it is when its summary is the same, and refused otherwise.
    """
    src, root = Path(run_dir), Path(archive)
    if not (src / "summary.json").is_file():
        raise UserError(f"{src}: not a complete run directory (no summary.json); nothing to archive")
    dest = root / src.name
    if dest.exists():
        if (dest / "summary.json").read_bytes() != (src / "summary.json").read_bytes():
            raise UserError(f"{dest}: archived with another summary.json than {src}; remove one of them "
                            "(or choose another --archive)")
        return False
    try:
        root.mkdir(parents=True, exist_ok=True)
        _copy(src, dest)
    except OSError as err:
        raise UserError(f"--archive {root}: cannot write there ({err.strerror or err}); choose another "
                        "--archive") from None
    return True


def restore_cells(archive: str | Path, out: str | Path, ids: Iterable[str]) -> list[str]:
    """Copy the cells of ``ids`` that ``archive`` holds (complete) and ``out`` lacks into ``out``; their ids."""
    root, dest = Path(archive), Path(out)
    restored = []
    for cid in ids:
        src = root / cid
        if (src / "summary.json").is_file() and not os.path.lexists(dest / cid):
            _copy(src, dest / cid)
            restored.append(cid)
    return restored
