"""``p2pfl sweep``: parallel, resumable after kill -9, byte-identical to --jobs 1 and to ``p2pfl run``; failures, Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import p2pfl
from p2pfl.cli import main
from p2pfl.errors import UserError
from p2pfl.study.runner import oversubscribed
from p2pfl.study.spec import load_study
from tests.helpers import digits_scenario, interruptible

ROOT = Path(__file__).resolve().parents[2]
FEDAVG = {"unset": ["protocol.mode", "protocol.exchange"],
          "set": {"protocol.name": "fedavg", "topology.servers": [{"attach": "all"}]}}


def _write_study(tmp_path: Path, name: str = "gvf", **fields) -> Path:
    base = digits_scenario({"name": "gossip", "rounds": 2, "mode": "sync", "exchange": "push_pull"}, n=5)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    study = {"name": name, "base": "base.yaml", "variants": {"gossip": {}, "fedavg": FEDAVG},
             "grid": {"training.lr": [0.02, 0.05]}, "seeds": {"start": 0, "stop": 3}, **fields}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def _sweep(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "p2pfl", "sweep", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=interruptible)


def _complete(out: Path) -> set[str]:
    if not out.is_dir():
        return set()
    return {e.name for e in os.scandir(out) if not e.name.startswith(".") and (Path(e.path) / "summary.json").is_file()}


def _wait_for_a_complete_cell(proc: subprocess.Popen, out: Path, timeout: float = 300) -> None:
    """Poll until a cell of the sweep is complete (`timeout`: a guard against a hung sweep, not a delay)."""
    end = time.monotonic() + timeout
    while not _complete(out):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "no cell completed in time"
        time.sleep(0.005)


def _cells(study: Path, rounds: tuple[int, ...] = (2, 40), seeds: tuple[int, ...] = (0,)) -> dict[str, dict]:
    """The expected cell.json of every cell of a ``_write_study(..., grid={"protocol.rounds": rounds})`` study, by id."""
    out = {}
    for variant in ("gossip", "fedavg"):
        for r in rounds:
            for seed in seeds:
                cid = f"{variant}__protocol.rounds={r}__seed{seed}"
                out[cid] = {"study": study.stem, "cell": cid, "variant": variant, "grid": {"protocol.rounds": r},
                            "seed": seed}
    return out


@pytest.mark.e2e
@pytest.mark.sweep
@pytest.mark.slow
def test_kill_9_mid_sweep_then_rerun_gives_the_bytes_of_p2pfl_run(tmp_path, capsys):
    # 4 cells in submission order: gossip 2 rounds, gossip 40, fedavg 2, fedavg 40. The kill comes as the first
    # cell is complete; the 40-round cells (about a second each on a quiet machine) are then still to finish.
    study = _write_study(tmp_path, grid={"protocol.rounds": [2, 40]}, seeds=[0])
    out = tmp_path / "out"
    expected = _cells(study)
    proc = _sweep(str(study), "--jobs", "2", "--out", str(out))
    try:
        _wait_for_a_complete_cell(proc, out)
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers, mid-way
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    before = _complete(out)
    assert 1 <= len(before) < 4, f"the kill came after every cell was done: {sorted(before)}"
    inodes = {c: (out / c / "summary.json").stat().st_ino for c in before}
    planted = out / f".{sorted(set(expected) - before)[0]}.tmp-planted"  # what a kill during a write leaves
    planted.mkdir()
    (planted / "summary.json").write_text("{")

    capsys.readouterr()
    assert main(["sweep", str(study), "--jobs", "1", "--out", str(out)]) == 0  # the rerun, in-process, one worker
    stdout = capsys.readouterr().out
    resumed = re.search(rf"resuming: {len(before)} already complete, (\d+) half-written run director(y|ies) removed; "
                        rf"running {4 - len(before)} with 1 worker", stdout)
    assert resumed and int(resumed[1]) >= 1, stdout  # the planted one, and any the kill left
    assert f"4 of 4 cells complete in {out} ({4 - len(before)} run now, {len(before)} already complete" in stdout
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([*expected, ".sweep.lock"]), names  # exactly the 4 cells: no temp leftovers
    assert {c: (out / c / "summary.json").stat().st_ino for c in before} == inodes  # completed cells untouched
    for cid, record in expected.items():
        assert json.loads((out / cid / "cell.json").read_text()) == record

    assert "] done fedavg__protocol.rounds=40__seed0 (" in stdout  # plain lines when stdout is not a terminal
    # cells from 2 workers (before the kill) and from 1 (after) are the bytes `p2pfl run` writes for each cell
    for cid in expected:
        assert main(["run", str(out / cid / "scenario.yaml"), "--out", str(tmp_path / cid), "--quiet"]) == 0
        for f in ("summary.json", "events.jsonl", "scenario.yaml"):
            assert (out / cid / f).read_bytes() == (tmp_path / cid / f).read_bytes(), (cid, f)


@pytest.mark.sweep
@pytest.mark.slow
def test_a_failing_cell_is_reported_and_the_others_complete_then_a_changed_study_is_refused(tmp_path, capsys):
    study = _write_study(tmp_path, name="fails", grid={}, seeds=[0],
                         variants={"gossip": {}, "fedavg": {"unset": FEDAVG["unset"], "set": {"protocol.name": "fedavg"}}})
    out = tmp_path / "out"
    assert main(["sweep", str(study), "--jobs", "1", "--out", str(out)]) == 1
    stderr = capsys.readouterr().err
    assert "cell fedavg__seed0 failed: protocol 'fedavg' needs a server" in stderr
    assert "1 of 2 cells failed (fedavg__seed0)" in stderr.splitlines()[-1]
    assert "Traceback" not in stderr
    assert _complete(out) == {"gossip__seed0"} and sorted(p.name for p in out.iterdir()) == [".sweep.lock", "gossip__seed0"]

    study.write_text(study.read_text().replace("seeds:", "set: {training.lr: 0.3}\nseeds:"))
    assert main(["sweep", str(study), "--out", str(out)]) == 2  # the refusal comes before any work


@pytest.fixture(scope="module")
def one_cell(tmp_path_factory) -> tuple[Path, Path]:
    """(study, out) of a one-cell study swept once for the module; a test copies it before changing anything."""
    root = tmp_path_factory.mktemp("one")
    study = _write_study(root, name="one", grid={}, seeds=[0], variants={})
    result = p2pfl.sweep(study, jobs=1, out=root / "out")
    assert result.ok and result.ran == ("seed0",) and (root / "out" / "seed0" / "cell.json").is_file()
    return study, root / "out"


def _copy_of(one_cell: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    import shutil

    study, out = one_cell
    shutil.copy(study.parent / "base.yaml", tmp_path / "base.yaml")
    shutil.copy(study, tmp_path / study.name)
    shutil.copytree(out, tmp_path / "out")
    return tmp_path / study.name, tmp_path / "out"


@pytest.mark.slow
@pytest.mark.sweep
def test_changed_study_bad_study_and_bad_jobs_exit_2_with_one_line(one_cell, tmp_path, capsys):
    study, out = _copy_of(one_cell, tmp_path)
    assert p2pfl.sweep(study, jobs=1, out=out).skipped == ("seed0",)  # nothing left to run: no worker started
    study.write_text(study.read_text().replace("seeds:", "set: {protocol.rounds: 1}\nseeds:"))
    capsys.readouterr()
    assert main(["sweep", str(study), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "seed0: this complete cell differs from what" in err and "(the study changed)" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: base.yaml\nseeds: []\n")
    assert main(["sweep", str(bad)]) == 2
    assert "bad.yaml: field 'seeds'" in capsys.readouterr().err
    assert main(["sweep", str(study), "--jobs", "0", "--out", str(tmp_path / "o2")]) == 2
    assert "--jobs: expected a whole number >= 1 or 'ray'; got 0" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()


@pytest.mark.slow
@pytest.mark.sweep
def test_a_field_added_to_the_schema_since_a_run_does_not_orphan_it(one_cell, tmp_path):
    """Resume reads a run's scenario.yaml through the current schema: a field the file does not state
    (added since, so at its default) matches; a value the file states must still match."""
    study, out = _copy_of(one_cell, tmp_path)
    path = out / "seed0" / "scenario.yaml"
    written = yaml.safe_load(path.read_text())
    assert written["training"].pop("weight_decay") == 0.0  # as if the run predated the field (default 0.0)
    path.write_text(yaml.safe_dump(written, sort_keys=False))
    assert p2pfl.sweep(study, jobs=1, out=out).skipped == ("seed0",)
    written["training"]["weight_decay"] = 0.5  # a stated value that no longer resolves the same
    path.write_text(yaml.safe_dump(written, sort_keys=False))
    with pytest.raises(UserError, match="this complete cell differs from what"):
        p2pfl.sweep(study, jobs=1, out=out)


def test_dry_run_lists_and_validates_the_cells_and_writes_nothing(tmp_path, capsys):
    study = _write_study(tmp_path, seeds=[0])
    assert main(["sweep", str(study), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"study gvf ({study}): 4 cells -> {tmp_path / 'out'}"
    assert lines[4].split() == ["fedavg__training.lr=0.02__seed0", "--unset", "protocol.mode", "--unset",
                                "protocol.exchange", "--set", "protocol.name=fedavg", "--set",
                                "topology.servers=[{attach:", "all}]", "--set", "training.lr=0.02", "--seed", "0"]
    assert lines[-1].startswith("dry run: every cell is valid; 4 to run")
    assert not (tmp_path / "out").exists()
    failing = _write_study(tmp_path, name="nosrv", seeds=[0],
                           variants={"fedavg": {"unset": FEDAVG["unset"], "set": {"protocol.name": "fedavg"}}})
    assert main(["sweep", str(failing), "--dry-run"]) == 1  # fedavg without a server fails when built
    assert "cell fedavg__training.lr=0.02__seed0 would fail: protocol 'fedavg' needs a server" in capsys.readouterr().out
    assert not Path("runs/nosrv").exists()


def test_a_dry_run_reports_its_building_progress_on_stderr(tmp_path, capsys):
    """Building every cell of a big study takes minutes: periodic lines say how far it got (every_s=0: each cell
    but the last)."""
    from p2pfl.study.runner import _build_all

    cells = load_study(_write_study(tmp_path)).cells
    assert _build_all(cells[:3], progress=True, every_s=0.0) == {}
    err = capsys.readouterr().err.splitlines()
    assert [ln.split(" (")[0] for ln in err] == ["dry run: building 3 cells", "dry run: built 1 of 3 cells",
                                                  "dry run: built 2 of 3 cells"]
    assert all(ln.endswith(" left)") for ln in err[1:])
    assert _build_all(cells[:3]) == {} and capsys.readouterr().err == ""  # the API stays silent


def test_time_left_counts_each_waiting_cell_at_its_variants_median_complete_cells_included(tmp_path, capsys):
    import json

    from p2pfl.study.display import Display
    from p2pfl.study.times import CellTimes

    study = load_study(_write_study(tmp_path))
    gossip = [c for c in study.cells if c.variant == "gossip"]
    fedavg = [c for c in study.cells if c.variant == "fedavg"]
    for cell, wall in zip(gossip[:3], (10.0, 30.0, 20.0)):  # complete cells: their timing.json counts
        (tmp_path / cell.id).mkdir()
        (tmp_path / cell.id / "timing.json").write_text(json.dumps({"wall_s": wall}))
    display = Display(True)
    times = CellTimes.of(tmp_path, [(c.id, c.variant) for c in gossip[:3]])
    display.start(study, tmp_path, 3, gossip[3:] + fedavg, workers=2, removed=0, times=times)
    times.add("gossip", 40.0)  # as the sweep does when a cell ends, then the display
    display.done(gossip[3], 40.0)  # gossip: median of 10, 30, 20, 40 = 25; fedavg untimed: the median of all;
    # (2 x 25 + 6 x 25) / 2 workers = 100 s
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.endswith("(40.0 s; about 1 min 40 s left, 6 cells of variants not timed yet at the median cell)")
    times.add("fedavg", 100.0)
    display.done(fedavg[0], 100.0)  # fedavg now timed: 2 gossip x 25 + 5 fedavg x 100, over 2 workers
    assert capsys.readouterr().out.splitlines()[-1].endswith("(100.0 s; about 4 min 35 s left)")


@pytest.mark.e2e
@pytest.mark.sweep
@pytest.mark.slow
def test_ctrl_c_exits_130_keeps_complete_cells_and_leaves_no_temp_directory(tmp_path):
    # one worker; cells in order: 2 rounds (seeds 0, 1), then 100,000 rounds (seeds 0, 1), which run until stopped:
    # the Ctrl-C, sent once a 2-round cell is complete, always finds a cell running
    study = _write_study(tmp_path, variants={}, grid={"protocol.rounds": [2, 100_000]}, seeds=[0, 1])
    out = tmp_path / "out"
    proc = _sweep(str(study), "--jobs", "1", "--out", str(out))
    try:
        _wait_for_a_complete_cell(proc, out)
        proc.send_signal(signal.SIGINT)  # the sweep process only: it stops its workers
        _, stderr = proc.communicate(timeout=300)  # a guard: it stops within seconds
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, stderr
    done = _complete(out)
    assert done and done <= {"protocol.rounds=2__seed0", "protocol.rounds=2__seed1"}
    assert stderr.strip().splitlines() == [f"p2pfl: interrupted; {len(done)} of 4 cells complete in {out}; "
                                           "run the same command again to resume"]
    assert sorted(p.name for p in out.iterdir()) == sorted([*done, ".sweep.lock"])


def test_python_api_export_and_extra_files(tmp_path):
    import p2pfl.study.runner
    from p2pfl import study as wing

    # plain functions: importing the wing's modules does not turn p2pfl.sweep into a module
    assert p2pfl.sweep is wing.sweep is p2pfl.study.runner.sweep and p2pfl.SweepResult is wing.SweepResult
    study = {"name": "api", "base": digits_scenario({"name": "local", "rounds": 1}, n=4), "seeds": [0, 1]}
    result = p2pfl.sweep(study, out=tmp_path / "o", dry_run=True)
    assert result.dry_run and result.ok and [c.id for c in result.study.cells] == ["seed0", "seed1"]
    assert not (tmp_path / "o").exists()
    with pytest.raises(UserError, match=r"extra_files: file name 'summary\.json' is not allowed"):
        p2pfl.run(study["base"], out=tmp_path / "r", extra_files={"summary.json": b"{}"})
    assert not (tmp_path / "r").exists()
    r = p2pfl.run(study["base"], out=tmp_path / "r", extra_files={"cell.json": b'{"a": 1}\n'})
    assert (r.out / "cell.json").read_bytes() == b'{"a": 1}\n'


def test_each_worker_passes_its_share_of_the_cores_to_its_runs(tmp_path, monkeypatch, inline_pool):
    """No environment variable: ``_execute`` gives each cell ``cores // workers`` and the cell's run gets it."""
    import p2pfl.api
    from p2pfl.study import runner
    from p2pfl.study.display import Display

    study = load_study(_write_study(tmp_path, seeds=[0]))
    cells = study.cells
    ran, failed, deferred = runner._execute(study, cells, tmp_path / "out", 2, 5, Display(False), [],
                                            lambda c, w: None, archive=tmp_path / "arch")
    assert [share for _, share, _ in inline_pool] == [2, 2, 2, 2] and len(ran) == 4 and failed == {} and deferred == []
    # each cell keeps its scoring results (robot rollouts) in the archive until it is archived
    assert [e for *_, e in inline_pool] == [str(tmp_path / "arch" / ".evaluations" / c.id) for c in cells]
    given: dict[str, object] = {}
    monkeypatch.setattr(p2pfl.api, "run", lambda scenario, **kw: given.update(kw))
    runner._run_cell(cells[0].scenario, str(tmp_path / "c"), b"{}", ["p2pfl"], 3)
    assert given["cores"] == 3


def test_the_core_count_is_not_read_from_the_environment(monkeypatch):
    from p2pfl.executors.spec import available_cores

    monkeypatch.delenv("P2PFL_CORES", raising=False)
    cores = available_cores()
    monkeypatch.setenv("P2PFL_CORES", str(cores + 7))  # what sweeps once set for their workers: ignored now
    assert available_cores() == cores


def test_oversubscription_warning():
    assert oversubscribed(2, 1, 2) is None
    assert oversubscribed(4, 2, 4) == ("warning: 4 cells at once x 2 torch thread(s) each = 8 threads on 4 cores; "
                                       "the results are the same, but slower; use --jobs 2")


def test_one_sweep_at_a_time_writes_into_a_folder(tmp_path, capsys):
    import fcntl

    study = _write_study(tmp_path, name="lock", grid={}, seeds=[0], variants={})
    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".sweep.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running sweep holds it
        assert main(["sweep", str(study), "--out", str(out)]) == 2
    assert "another sweep is writing there" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [".sweep.lock"]
