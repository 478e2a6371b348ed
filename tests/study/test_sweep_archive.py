"""``p2pfl sweep --archive``: complete cells kept without their event streams, a fresh --out resumed from them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

import p2pfl
from p2pfl.cli import main
from p2pfl.errors import UserError
from p2pfl.metrics.runs import load_runs
from p2pfl.study.archive import KEPT, archive_cell
from p2pfl.study.spec import load_study
from tests.helpers import digits_scenario


def _study(tmp_path: Path, seeds: list[int]) -> Path:
    base = digits_scenario({"name": "gossip", "rounds": 2, "mode": "sync", "exchange": "push_pull"}, n=4)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    path = tmp_path / "arch.yaml"
    path.write_text(yaml.safe_dump({"name": "arch", "base": "base.yaml", "seeds": seeds}, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(study of seeds 0 and 1, its --out, its --archive) after one clean sweep with --archive, shared by the module
    (tests read them, or copy them before changing anything)."""
    root = tmp_path_factory.mktemp("arch")
    study = _study(root, [0, 1])
    first = p2pfl.sweep(study, jobs=1, out=root / "a", archive=root / "archive")
    assert sorted(first.ran) == ["seed0", "seed1"]
    return study, root / "a", root / "archive"


@pytest.mark.slow
@pytest.mark.sweep
def test_cells_are_archived_without_events_and_a_fresh_out_resumes_from_them(swept, tmp_path):
    _, out, archived = swept
    for cid in ("seed0", "seed1"):
        kept = sorted(p.name for p in (archived / cid).iterdir())
        assert kept == sorted(n for n in KEPT if (out / cid / n).is_file())
        assert "events.jsonl" not in kept and (out / cid / "events.jsonl").is_file()
        assert (archived / cid / "summary.json").read_bytes() == (out / cid / "summary.json").read_bytes()

    # a fresh clone: an empty --out, the archive committed; one seed more in the study
    archive = tmp_path / "archive"
    shutil.copytree(archived, archive)
    study = _study(tmp_path, [0, 1, 2])
    dry = p2pfl.sweep(study, out=tmp_path / "b", archive=archive, dry_run=True)
    assert sorted(dry.skipped) == ["seed0", "seed1"] and not (tmp_path / "b").exists()
    for cid in ("seed2", "seed9"):  # kept scoring results of a cell a session cut off, and of another study's
        (archive / ".evaluations" / cid).mkdir(parents=True)
        (archive / ".evaluations" / cid / "x.json").write_text("{}")
    second = p2pfl.sweep(study, jobs=1, out=tmp_path / "b", archive=archive)
    assert second.ran == ("seed2",) and sorted(second.skipped) == ["seed0", "seed1"]
    assert sorted(p.name for p in archive.iterdir()) == [".evaluations", "seed0", "seed1", "seed2"]
    # once archived, a cell's kept results go; another's stay
    assert [p.name for p in (archive / ".evaluations").iterdir()] == ["seed9"]

    # each archived cell is the cell a clean run writes (seeds 0, 1: the clean sweep; seed 2: `p2pfl run` of the
    # study's cell, as byte-identical to a sweep's cell in test_sweep), and loads as a run
    cell = load_study(study).cells[2]
    assert cell.id == "seed2"
    p2pfl.run(cell.scenario, out=tmp_path / "clean2")
    assert (archive / "seed2" / "summary.json").read_bytes() == (tmp_path / "clean2" / "summary.json").read_bytes()
    for cid in ("seed0", "seed1"):
        assert (archive / cid / "summary.json").read_bytes() == (out / cid / "summary.json").read_bytes()
    df = load_runs(archive)
    assert len(df) == 3 and df["accuracy_mean"].notna().all()


@pytest.mark.slow
@pytest.mark.sweep
def test_cells_complete_before_the_archive_existed_are_archived_too(swept, tmp_path):
    study, out, _ = swept
    shutil.copytree(out, tmp_path / "a")
    again = p2pfl.sweep(study, jobs=1, out=tmp_path / "a", archive=tmp_path / "archive")
    assert again.ran == () and sorted(again.skipped) == ["seed0", "seed1"]  # nothing run: no worker started
    for cid in ("seed0", "seed1"):
        assert (tmp_path / "archive" / cid / "summary.json").read_bytes() == (out / cid / "summary.json").read_bytes()


@pytest.mark.slow
@pytest.mark.sweep
def test_an_archived_cell_with_another_summary_is_refused(swept, tmp_path):
    run = swept[1] / "seed0"
    archive = tmp_path / "archive"
    assert archive_cell(run, archive) is True
    assert archive_cell(run, archive) is False  # the same cell: nothing to do
    summary = archive / "seed0" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "seed": 99}))
    with pytest.raises(UserError, match=r"seed0: archived with another summary.json than .*remove one of them"):
        archive_cell(run, archive)
    with pytest.raises(UserError, match=r"\(no summary.json\); nothing to archive"):
        archive_cell(tmp_path, archive)


@pytest.mark.slow
@pytest.mark.sweep
def test_cli_archive_flag(swept, tmp_path, capsys):
    study, out, _ = swept
    shutil.copytree(out, tmp_path / "a")
    assert main(["sweep", str(study), "--jobs", "1", "--out", str(tmp_path / "a"),
                 "--archive", str(tmp_path / "k")]) == 0
    assert sorted(p.name for p in (tmp_path / "k").iterdir()) == ["seed0", "seed1"]
    assert main(["sweep", str(study), "--jobs", "1", "--out", str(tmp_path / "b"),
                 "--archive", str(tmp_path / "k")]) == 0
    err = capsys.readouterr().err
    assert "2 complete cell(s) restored from --archive" in err
    assert (tmp_path / "b" / "seed1" / "summary.json").read_bytes() == (out / "seed1" / "summary.json").read_bytes()


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

    from p2pfl.study.archive import thin_positions

    small = _positions(10, 5)  # 400 bytes of positions
    assert thin_positions(small, limit=400) == small
    thinned = np.load(io.BytesIO(thin_positions(_positions(1001, 5), limit=40 * 11)), allow_pickle=False)
    assert thinned["pos"].shape == (11, 5, 2) and thinned["pos"].nbytes <= 440
    assert np.allclose(thinned["t"], np.arange(0, 1001, 100) * 0.1)
    assert thinned["pos"][-1, 0, 0] == 1000 * 10  # the last frame kept, positions unchanged

    run = tmp_path / "a" / "cell"
    run.mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    (run / "positions.npz").write_bytes(_positions(400, 1000))  # 400 frames of 1,000 devices: 3.2 MB of positions
    assert archive_cell(run, tmp_path / "archive")
    with np.load(tmp_path / "archive" / "cell" / "positions.npz", allow_pickle=False) as z:
        # 1.25 MiB holds 163 frames of 8,000 bytes
        assert z["pos"].shape == (163, 1000, 2) and z["t"][0] == 0.0 and z["t"][-1] == pytest.approx(399 * 0.1)


def _checkout(root: Path, edges: str) -> Path:
    """A study over an edge-list file, laid out as a checkout at ``root`` (the file beside the study)."""
    root.mkdir(parents=True)
    (root / "ring.txt").write_text(edges)
    base = digits_scenario({"name": "gossip", "rounds": 1, "mode": "sync", "exchange": "push_pull"}, n=4)
    base["topology"] = {"kind": "edge_list", "path": "ring.txt"}
    (root / "base.yaml").write_text(yaml.safe_dump(base))
    (root / "s.yaml").write_text(yaml.safe_dump({"name": "files", "base": "base.yaml", "seeds": [0]}))
    return root / "s.yaml"


@pytest.mark.slow
@pytest.mark.sweep
def test_an_archive_resumes_in_another_checkout_and_refuses_a_changed_file(tmp_path):
    ring = "0 1\n1 2\n2 3\n3 0\n"
    first = _checkout(tmp_path / "one", ring)
    p2pfl.sweep(first, jobs=1, out=tmp_path / "one" / "out", archive=tmp_path / "archive")
    assert str(tmp_path / "one" / "ring.txt") in (tmp_path / "archive" / "seed0" / "scenario.yaml").read_text()

    # the same file elsewhere, the first checkout still there: the same bytes, the same cell
    second = _checkout(tmp_path / "two", ring)
    assert p2pfl.sweep(second, out=tmp_path / "two" / "out", archive=tmp_path / "archive", dry_run=True).skipped \
        == ("seed0",)
    # another graph in a file of the same name: refused while the archived path can still be read
    third = _checkout(tmp_path / "three", "0 1\n1 2\n2 3\n")
    with pytest.raises(UserError, match="this complete cell differs"):
        p2pfl.sweep(third, out=tmp_path / "three" / "out", archive=tmp_path / "archive", dry_run=True)
    # the first checkout gone (a fresh clone elsewhere): the file's name is what is left to match
    shutil.rmtree(tmp_path / "one")
    assert p2pfl.sweep(second, out=tmp_path / "two" / "out2", archive=tmp_path / "archive", dry_run=True).skipped \
        == ("seed0",)


def test_a_small_novelty_matrix_is_archived_and_a_large_one_left_out(tmp_path):
    """An RND run's novelty.npy is kept up to KEPT_MAX_BYTES (the 12 x 12 of the RND studies: the gap
    calibration reads it from the archive); a 1,000-device matrix (8 MB) is not."""
    import numpy as np

    from p2pfl.study.archive import KEPT_MAX_BYTES

    for name, n in (("small", 12), ("large", 100)):
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        (run / "summary.json").write_text("{}")
        np.save(run / "novelty.npy", np.ones((n, n)))
        assert archive_cell(run, tmp_path / "archive")
    assert (tmp_path / "runs" / "small" / "novelty.npy").stat().st_size <= KEPT_MAX_BYTES["novelty.npy"]
    assert (tmp_path / "runs" / "large" / "novelty.npy").stat().st_size > KEPT_MAX_BYTES["novelty.npy"]
    assert (tmp_path / "archive" / "small" / "novelty.npy").read_bytes() == (
        tmp_path / "runs" / "small" / "novelty.npy").read_bytes()
    assert sorted(p.name for p in (tmp_path / "archive" / "large").iterdir()) == ["summary.json"]
