"""``p2pfl archive verify``: a seeded sample of archived cells re-run at the current code, compared byte for byte."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

import p2pfl
from p2pfl.cli import main
from p2pfl.errors import UserError
from p2pfl.metrics.rundir import dumps_json
from p2pfl.study.archive import archive_cell
from p2pfl.study.verify import (
    DIFFERS,
    FAILS,
    IDENTICAL,
    KEYS_ADDED,
    VERIFIED_NAME,
    WITHIN,
    CellResult,
    Tolerance,
    Verification,
    compare_summaries,
    load_cell_scenario,
    provenance,
    provenance_line,
    sample_cells,
    study_tolerance,
    verify_archive,
    write_verified,
)
from tests.helpers import digits_scenario

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------------ the sample


def test_the_sample_is_a_pure_function_of_the_ids_and_the_seed():
    ids = [f"v{i % 4}__seed{i}" for i in range(40)]
    a = sample_cells(ids, 5, seed=0)
    assert a == sample_cells(list(reversed(ids)), 5, seed=0) == sorted(a) and len(set(a)) == 5
    assert set(a) <= set(ids)
    others = [sample_cells(ids, 5, seed=s) for s in range(1, 6)]
    assert any(o != a for o in others)  # the seed chooses
    assert sample_cells(ids, 40, seed=3) == sample_cells(ids, 99, seed=3) == sample_cells(ids, None) == sorted(ids)
    # one cell more in the archive changes the sample by at most one cell
    assert len(set(sample_cells([*ids, "new__seed0"], 5, seed=0)) - set(a)) <= 1


def test_a_sample_size_below_one_is_refused():
    for k in (0, -1):
        with pytest.raises(UserError, match="--sample: expected a whole number >= 1"):
            sample_cells(["a"], k)


# -------------------------------------------------------------------------------------------- the comparison


def _summary(**changes: object) -> bytes:
    base = {"seed": 0, "accuracy_mean": 0.5, "accuracy_per_node": [0.25, 0.75], "messages_total": 9,
            "energy": {"total_j": 1.5}}
    base.update(changes)
    return dumps_json(base).encode()


def test_summaries_compare_byte_for_byte_and_name_the_keys_that_differ():
    assert compare_summaries(_summary(), _summary()) == (IDENTICAL, [])
    result, diffs = compare_summaries(_summary(), _summary(messages_total=10, accuracy_per_node=[0.25, 0.8]))
    assert result == DIFFERS
    assert [(d.path, d.old, d.new) for d in diffs] == [("accuracy_per_node[1]", 0.75, 0.8), ("messages_total", 9, 10)]
    result, diffs = compare_summaries(_summary(), _summary(energy={"total_j": 1.5, "idle_j": 0.0}))
    assert result == KEYS_ADDED and [d.path for d in diffs] == ["energy.idle_j"]  # every archived value the same
    assert compare_summaries(_summary(), _summary(energy={"idle_j": 0.0}))[0] == DIFFERS  # a key gone: differs
    assert compare_summaries(_summary(), _summary(accuracy_mean=0.5 + 1e-12, bytes_wan=0), Tolerance(rtol=1e-9))[0] \
        == WITHIN
    # within a tolerance, a number that moved a little passes; one that moved more does not
    tol = Tolerance(rtol=1e-9)
    assert compare_summaries(_summary(), _summary(accuracy_mean=0.5 + 1e-12), tol)[0] == WITHIN
    assert compare_summaries(_summary(), _summary(accuracy_mean=0.5 + 1e-12))[0] == DIFFERS
    assert compare_summaries(_summary(), _summary(accuracy_mean=0.51), tol)[0] == DIFFERS
    assert compare_summaries(_summary(), _summary(seed="0"), Tolerance(atol=1.0))[0] == DIFFERS  # not a number
    # the same values written otherwise are other bytes: a difference, named as such
    assert compare_summaries(_summary(), json.dumps(json.loads(_summary())).encode())[1][0].path == "(formatting)"


def test_a_cell_result_lists_changed_keys_before_the_keys_added_since():
    _, diffs = compare_summaries(_summary(), _summary(messages_total=10, bytes_wan=0, round_latency_s={}))
    assert CellResult("c", None, DIFFERS, tuple(diffs)).text() == "differs: messages_total; 2 keys added"


# ------------------------------------------------------------------------------------------------ bad input


def _fake_cell(root: Path, cid: str, rev: str | None) -> None:
    (root / cid).mkdir(parents=True)
    (root / cid / "summary.json").write_bytes(_summary())
    (root / cid / "manifest.json").write_text(json.dumps({"git_revision": rev}))


@pytest.mark.parametrize("case", ["missing", "file", "empty", "cell", "sample", "unknown_cell", "no_scenario"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case):
    archive = tmp_path / "arch"
    _fake_cell(archive, "a__seed0", "1" * 40)
    args = {"missing": [str(tmp_path / "nope")], "file": [str(archive / "a__seed0" / "summary.json")],
            "empty": [str(tmp_path)], "cell": [str(archive / "a__seed0")], "sample": [str(archive), "--sample", "0"],
            "unknown_cell": [str(archive), "--cells", "b__seed0"], "no_scenario": [str(archive)]}[case]
    if case == "empty":
        (tmp_path / "other").mkdir()
    assert main(["archive", "verify", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("p2pfl: error: ") and err.count("\n") == 1
    assert not (archive / VERIFIED_NAME).exists()


# ----------------------------------------------------------------------------------------------- provenance


def test_provenance_counts_revisions_and_reads_the_recorded_verification(tmp_path):
    archive = tmp_path / "arch"
    for i in range(5):
        _fake_cell(archive, f"c__seed{i}", "a" * 40 if i < 3 else "b" * 40)
    _fake_cell(archive, "d__seed0", None)
    (archive / ".evaluations" / "x").mkdir(parents=True)  # not a cell
    p = provenance(archive)
    assert p.cells == 6 and dict(p.revisions) == {"a" * 40: 3, "b" * 40: 2, "unknown": 1} and p.verified is None
    assert provenance_line(p) == "Cells: 6 from 3 revisions (aaaaaaaa 3, bbbbbbbb 2, unknown 1); not verified"

    results = (CellResult("c__seed0", "a" * 40, IDENTICAL), CellResult("c__seed3", "b" * 40, WITHIN),
               CellResult("d__seed0", None, DIFFERS), CellResult("c__seed1", "a" * 40, FAILS, error="boom"))
    v = Verification(archive, 6, 4, 7, "c" * 40, False, Tolerance(1e-9, 0.0), results, "2025-06-01T10:00:00Z")
    path = write_verified(v, ["p2pfl", "archive", "verify"])
    assert path == archive / VERIFIED_NAME and [p.name for p in archive.glob(".VERIFIED*")] == []
    rec = json.loads(path.read_text())
    assert rec["verified_at"] == "c" * 40 and rec["seed"] == 7 and rec["sample"] == 4 and rec["sampled"] == 4
    assert [c["result"] for c in rec["cells"]] == [IDENTICAL, WITHIN, DIFFERS, FAILS]
    assert provenance_line(archive) == (
        "Cells: 6 from 3 revisions (aaaaaaaa 3, bbbbbbbb 2, unknown 1); verified at cccccccc on 2025-06-01: "
        "1 of 4 sampled identical, 1 within tolerance (rtol 1e-09, atol 0), 1 differs, 1 fails")


def test_a_study_declares_its_tolerance(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(digits_scenario({"name": "gossip", "rounds": 1}, n=4)))
    study = tmp_path / "tol.yaml"
    study.write_text(yaml.safe_dump({"base": "base.yaml", "seeds": [0], "verify": {"rtol": 1e-9}}))
    assert study_tolerance(study) == ("tol", Tolerance(rtol=1e-9, atol=0.0))
    study.write_text(yaml.safe_dump({"name": "x", "base": "base.yaml", "seeds": [0]}))
    assert study_tolerance(study) == ("x", None)
    study.write_text(yaml.safe_dump({"base": "base.yaml", "seeds": [0], "verify": {"rtol": -1}}))
    with pytest.raises(UserError, match=r"verify\.rtol"):
        study_tolerance(study)


def test_a_file_of_another_checkout_is_looked_up_here(tmp_path):
    cell = tmp_path / "c"
    cell.mkdir()
    raw = yaml.safe_load((REPO / "analysis/cells/rnd_seeds/rnd_server__seed0/scenario.yaml").read_text())
    raw["topology"]["path"] = "/gone/checkout/topologies/neighbourhood12_groups.txt"
    (cell / "scenario.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    sc, notes = load_cell_scenario(cell)
    assert Path(sc.topology.path).resolve() == (REPO / "topologies/neighbourhood12_groups.txt").resolve()
    assert len(notes) == 1 and notes[0].startswith("topology.path: /gone/checkout/")


# ---------------------------------------------------------------------------------------------- re-running


def _cell(root: Path, seed: int) -> str:
    sc = digits_scenario({"name": "gossip", "rounds": 1, "mode": "sync", "exchange": "push_pull"}, n=4)
    cid = f"tiny__seed{seed}"
    record = {"study": "tiny", "cell": cid, "variant": None, "grid": {}, "seed": seed}
    p2pfl.run(sc, seed=seed, out=root / "runs" / cid, extra_files={"cell.json": dumps_json(record).encode()})
    archive_cell(root / "runs" / cid, root / "archive")
    return cid


@pytest.fixture(scope="module")
def archived(tmp_path_factory) -> Path:
    """An archive of two tiny cells (digits, 4 devices, 1 round), shared by the module: copy it to change it."""
    root = tmp_path_factory.mktemp("verify")
    for seed in (0, 1):
        _cell(root, seed)
    return root / "archive"


@pytest.mark.slow
def test_a_cell_rerun_at_the_current_code_is_identical(archived):
    v = verify_archive(archived, sample=1, seed=0)
    assert len(v.results) == 1 and v.total == 2 and v.ok
    r = v.results[0]
    assert r.result == IDENTICAL and r.cell in ("tiny__seed0", "tiny__seed1") and r.made_at == v.revision
    assert [x.cell for x in verify_archive(archived).results] == ["tiny__seed0", "tiny__seed1"]


@pytest.mark.slow
@pytest.mark.e2e
def test_a_tampered_summary_differs_by_its_key_and_write_records_it(archived, tmp_path, capsys):
    archive = tmp_path / "archive"
    shutil.copytree(archived, archive)
    path = archive / "tiny__seed1" / "summary.json"
    summary = json.loads(path.read_text())
    summary["messages_total"] += 1
    path.write_text(dumps_json(summary))
    assert main(["archive", "verify", str(archive), "--sample", "2", "--seed", "5", "--write"]) == 1
    out, err = capsys.readouterr()
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("tiny__") and "(" not in line}
    assert "identical" in rows["tiny__seed0"] and "differs: messages_total" in rows["tiny__seed1"]
    old = summary["messages_total"]
    assert f"  messages_total: {old} -> {old - 1}" in out
    assert "2 of 2 cells re-run at" in out and "1 identical, 1 differs (byte-exact)" in out
    assert "[2/2]" in err
    rec = json.loads((archive / VERIFIED_NAME).read_text())
    assert rec["sample"] == 2 and rec["seed"] == 5 and rec["cells_total"] == 2
    assert {c["cell"]: c["result"] for c in rec["cells"]} == {"tiny__seed0": IDENTICAL, "tiny__seed1": DIFFERS}
    assert provenance_line(archive).endswith(": 1 of 2 identical, 1 differs")

    # the study's tolerance lets a number that moved a little pass, and only that
    summary["messages_total"] -= 1
    summary["accuracy_mean"] += 1e-13
    path.write_text(dumps_json(summary))
    study = tmp_path / "tiny.yaml"
    study.write_text(yaml.safe_dump({"base": "base.yaml", "seeds": [0, 1], "verify": {"rtol": 1e-9}}))
    assert main(["archive", "verify", str(archive), "--cells", "tiny__seed1"]) == 1
    capsys.readouterr()
    assert main(["archive", "verify", str(archive), "--cells", "tiny__seed1", "--study", str(study), "--write"]) == 0
    out, _ = capsys.readouterr()
    assert "within tolerance" in out and "rtol 1e-09" in out
    assert provenance_line(archive).endswith(": 0 of 1 sampled identical, 1 within tolerance (rtol 1e-09, atol 0)")
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"base": "base.yaml", "seeds": [0]}))
    assert main(["archive", "verify", str(archive), "--study", str(other)]) == 2


@pytest.mark.slow
@pytest.mark.sweep
def test_jobs_run_cells_in_worker_processes_with_the_same_results(archived):
    v = verify_archive(archived, jobs=2)
    assert [(r.cell, r.result) for r in v.results] == [("tiny__seed0", IDENTICAL), ("tiny__seed1", IDENTICAL)]
