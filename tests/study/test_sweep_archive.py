"""``p2pfl sweep --archive``: complete cells kept without their event streams, a fresh --out resumed from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import p2pfl
from p2pfl.cli import main
from p2pfl.errors import UserError
from p2pfl.metrics.archive import KEPT, archive_cell
from p2pfl.metrics.runs import load_runs
from tests.helpers import digits_scenario


def _study(tmp_path: Path, seeds: list[int]) -> Path:
    base = digits_scenario({"name": "gossip", "rounds": 2, "mode": "sync", "exchange": "push_pull"}, n=4)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    path = tmp_path / "arch.yaml"
    path.write_text(yaml.safe_dump({"name": "arch", "base": "base.yaml", "seeds": seeds}, sort_keys=False))
    return path


def test_cells_are_archived_without_events_and_a_fresh_out_resumes_from_them(tmp_path):
    archive = tmp_path / "archive"
    first = p2pfl.sweep(_study(tmp_path, [0, 1]), jobs=1, out=tmp_path / "a", archive=archive)
    assert sorted(first.ran) == ["seed0", "seed1"]
    for cid in first.ran:
        kept = sorted(p.name for p in (archive / cid).iterdir())
        assert kept == sorted(n for n in KEPT if (tmp_path / "a" / cid / n).is_file())
        assert "events.jsonl" not in kept and (tmp_path / "a" / cid / "events.jsonl").is_file()
        assert (archive / cid / "summary.json").read_bytes() == (tmp_path / "a" / cid / "summary.json").read_bytes()

    # a fresh clone: an empty --out, the archive committed; one seed more in the study
    study = _study(tmp_path, [0, 1, 2])
    dry = p2pfl.sweep(study, out=tmp_path / "b", archive=archive, dry_run=True)
    assert sorted(dry.skipped) == ["seed0", "seed1"] and not (tmp_path / "b").exists()
    second = p2pfl.sweep(study, jobs=1, out=tmp_path / "b", archive=archive)
    assert second.ran == ("seed2",) and sorted(second.skipped) == ["seed0", "seed1"]
    assert sorted(p.name for p in archive.iterdir()) == ["seed0", "seed1", "seed2"]

    # the archived cell is the cell a clean sweep writes, and loads as a run
    assert len(p2pfl.sweep(study, jobs=1, out=tmp_path / "clean").ran) == 3
    for cid in ("seed0", "seed1", "seed2"):
        assert (archive / cid / "summary.json").read_bytes() == (tmp_path / "clean" / cid / "summary.json").read_bytes()
    df = load_runs(archive)
    assert len(df) == 3 and df["accuracy_mean"].notna().all()


def test_cells_complete_before_the_archive_existed_are_archived_too(tmp_path):
    study = _study(tmp_path, [0])
    p2pfl.sweep(study, jobs=1, out=tmp_path / "a")
    again = p2pfl.sweep(study, jobs=1, out=tmp_path / "a", archive=tmp_path / "archive")
    assert again.ran == () and (tmp_path / "archive" / "seed0" / "summary.json").is_file()


def test_an_archived_cell_with_another_summary_is_refused(tmp_path):
    study = _study(tmp_path, [0])
    p2pfl.sweep(study, jobs=1, out=tmp_path / "a")
    archive = tmp_path / "archive"
    assert archive_cell(tmp_path / "a" / "seed0", archive) is True
    assert archive_cell(tmp_path / "a" / "seed0", archive) is False  # the same cell: nothing to do
    summary = archive / "seed0" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "seed": 99}))
    with pytest.raises(UserError, match=r"seed0: archived with another summary.json than .*remove one of them"):
        archive_cell(tmp_path / "a" / "seed0", archive)
    with pytest.raises(UserError, match=r"\(no summary.json\); nothing to archive"):
        archive_cell(tmp_path, archive)


def test_cli_archive_flag(tmp_path, capsys):
    study = _study(tmp_path, [0])
    assert main(["sweep", str(study), "--jobs", "1", "--out", str(tmp_path / "a"),
                 "--archive", str(tmp_path / "k")]) == 0
    assert (tmp_path / "k" / "seed0" / "summary.json").is_file()
    assert main(["sweep", str(study), "--jobs", "1", "--out", str(tmp_path / "b"),
                 "--archive", str(tmp_path / "k")]) == 0
    err = capsys.readouterr().err
    assert "1 complete cell(s) restored from --archive" in err


def _positions(frames: int, devices: int) -> bytes:
    import io

    import numpy as np

    buf = io.BytesIO()
    pos = np.arange(frames * devices * 2, dtype=np.float32).reshape(frames, devices, 2)
    np.savez_compressed(buf, t=np.arange(frames) * 0.1, pos=pos)
    return buf.getvalue()


def test_archived_positions_are_thinned_to_evenly_spaced_frames_within_the_limit(tmp_path):
    import io

    import numpy as np

    from p2pfl.metrics.archive import thin_positions

    small = _positions(10, 5)  # 400 bytes of positions
    assert thin_positions(small, limit=400) == small
    thinned = np.load(io.BytesIO(thin_positions(_positions(1001, 5), limit=40 * 11)), allow_pickle=False)
    assert thinned["pos"].shape == (11, 5, 2) and thinned["pos"].nbytes <= 440
    assert np.allclose(thinned["t"], np.arange(0, 1001, 100) * 0.1)
    assert thinned["pos"][-1, 0, 0] == 1000 * 10  # the last frame kept, positions unchanged

    run = tmp_path / "a" / "cell"
    run.mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    (run / "positions.npz").write_bytes(_positions(200_000 // 16, 1000))  # 12,500 frames of 1,000 devices
    assert archive_cell(run, tmp_path / "archive")
    with np.load(tmp_path / "archive" / "cell" / "positions.npz", allow_pickle=False) as z:
        assert z["pos"].shape == (163, 1000, 2) and z["t"][0] == 0.0 and z["t"][-1] == 12_499 * 0.1
