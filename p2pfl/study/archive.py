"""A study's results small enough to commit: each complete cell's run directory without its event stream.

    <archive>/<cell id>/   cell.json, scenario.yaml, summary.json, timing.json, manifest.json
                           (and positions.npz where the run wrote one, thinned to POSITIONS_BYTES;
                           models.npz where the scenario saves its final models; novelty.npy up to
                           KEPT_MAX_BYTES, an RND run's small novelty matrix); no events.jsonl

``p2pfl sweep STUDY --archive DIR`` copies every cell into ``DIR`` as it completes, and before it
runs copies the cells ``DIR`` holds into ``--out`` (a fresh clone resumes a study from the committed
archive: those cells are checked against the study like any complete cell, and skipped). Every
report reads an archived cell as it reads a run directory; what needs the event stream (bytes over
time, ``p2pfl.metrics.runs.bytes_curve``) is absent for it, as for any run without the file.
A cell is copied whole or not at all (a temporary sibling, then a rename).

    <archive>/.evaluations/<cell id>/   the scoring results (robot rollouts) of a cell not complete yet

A cell's run keeps its scoring jobs' results there as they complete (``p2pfl.sim.evaluations``), so a cell
that a session ends before it is complete replays in the next one without its rollouts (the same bytes);
the folder is removed once the cell is archived. Commit it with the archive.

A mobility run's ``positions.npz`` grows with devices x frames (a 1,000-device run of the headline
study: about 1,200 frames, 10 x the 0.84 MB of a 100-device one); the archive keeps evenly spaced
frames, the first and the last among them, within ``POSITIONS_BYTES`` of positions. A picture drawn
from an archived cell (``p2pfl.clustering.plots.federation_frames``) shows the kept frame nearest each
moment it asks for.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from p2pfl.errors import UserError
from p2pfl.metrics.rundir import discard_run_dir, start_run_dir

__all__ = ["KEPT", "KEPT_MAX_BYTES", "POSITIONS_BYTES", "archive_cell", "restore_cells", "thin_positions", "evaluations_of"]

#: the run-directory files an archive keeps (the event stream is left out: about 10x the rest)
KEPT = ("cell.json", "scenario.yaml", "summary.json", "timing.json", "manifest.json", "positions.npz", "models.npz",
        "novelty.npy")
#: kept only up to this size: an RND run's novelty matrix of a few dozen devices (the 12 x 12 of the RND studies,
#: 1.3 kB), which a report recomputes federations from (the gap calibration); a 1,000-device one (8 MB) is left out
KEPT_MAX_BYTES = {"novelty.npy": 65_536}

#: the most bytes of (uncompressed float32) device positions an archived cell keeps: 16 frames of 10,000
#: devices, 163 of 1,000, every frame of a 100-device headline run (1,200 frames: 0.96 MB)
POSITIONS_BYTES = 1_310_720


def thin_positions(data: bytes, limit: int = POSITIONS_BYTES) -> bytes:
    """``positions.npz`` (``t``: frame times, ``pos``: frames x devices x 2) with evenly spaced frames, the
    first and the last included, whose positions fit in ``limit`` bytes; ``data`` itself when they fit."""
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        t, pos = z["t"], z["pos"]
    frames = pos.shape[0]
    fit = max(2, limit // max(1, pos[0].nbytes)) if frames else 0
    if frames <= fit:
        return data
    keep = np.unique(np.linspace(0, frames - 1, fit).round().astype(np.int64))
    buf = io.BytesIO()
    np.savez_compressed(buf, t=t[keep], pos=pos[keep])
    return buf.getvalue()


def _copy(src: Path, dest: Path) -> None:
    """Copy ``src``'s kept files to ``dest`` (which must not exist) through a run directory's temporary sibling."""
    tmp = start_run_dir(dest)
    try:
        for name in KEPT:
            if not (src / name).is_file() or (src / name).stat().st_size > KEPT_MAX_BYTES.get(name, float("inf")):
                continue
            if name == "positions.npz":
                (tmp / name).write_bytes(thin_positions((src / name).read_bytes()))
            else:
                shutil.copyfile(src / name, tmp / name)
        os.rename(tmp, dest)
    except BaseException:
        discard_run_dir(tmp)
        raise


def evaluations_of(archive: str | Path, cell_id: str) -> Path:
    """The folder in ``archive`` that keeps cell ``cell_id``'s scoring results until it is archived."""
    return Path(archive) / ".evaluations" / cell_id


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
