"""A running cell's progress: the worker's file (rewritten at most every interval), the sweep's lines about it."""

from __future__ import annotations

import json
from concurrent.futures import Future
from pathlib import Path
from typing import Optional

import pytest
import yaml

from p2pfl.study.display import Display
from p2pfl.study.running import CellStatus, ProgressFile, progress_path, read_status
from tests.helpers import digits_scenario


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_file_says_the_setup_step_then_the_rounds_rewritten_at_most_every_interval(tmp_path):
    clock, path = Clock(), tmp_path / ".c.progress"
    report = ProgressFile(path, rounds=4, interval=5.0, clock=clock)
    assert read_status(path) is None  # nothing reported yet
    clock.t = 102.0
    report.setup("loading digits and partitioning it (iid)")
    assert read_status(path) == CellStatus(step="loading digits and partitioning it (iid)", rounds=4, elapsed_s=2.0)
    assert read_status(path).where() == "setup: loading digits and partitioning it (iid)"
    clock.t = 103.0
    report.start(8)  # 8 node rounds: 2 devices x 4 rounds
    assert read_status(path) == CellStatus(total=8, rounds=4, elapsed_s=3.0)
    assert read_status(path).where() == "round 0/4 (0%)" and read_status(path).left_s() is None
    for _ in range(3):
        clock.t += 1.0  # 104, 105, 106: under 5 s since the last rewrite
        report.advance()
    assert read_status(path).done == 0
    clock.t = 108.0
    report.advance()  # 5 s since the start's rewrite: rewritten, 4 of 8
    status = read_status(path)
    assert status == CellStatus(done=4, total=8, rounds=4, elapsed_s=8.0, simulating_s=5.0, first_round_s=1.0)
    assert status.where() == "round 2/4 (50%)"
    assert status.left_s() == pytest.approx(16 / 3)  # 4 more at 4 / 3 s each: 3 rounds in the 4 s after the first
    for _ in range(4):
        clock.t += 0.5
        report.advance()  # the last one is written whatever the interval
    assert read_status(path) == CellStatus(done=8, total=8, rounds=4, elapsed_s=10.0, simulating_s=7.0,
                                           first_round_s=1.0)
    assert read_status(path).where() == "round 4/4 (100%)" and read_status(path).left_s() == 0.0
    assert CellStatus(done=3, total=40).where() == "3/40 node rounds (8%)"  # no round count: node rounds


def test_a_file_not_rewritten_for_a_while_reads_as_still_running_when_read_with_the_time(tmp_path):
    import os

    clock, path = Clock(), tmp_path / ".c.progress"
    report = ProgressFile(path, rounds=4, interval=4.0, clock=clock)
    clock.t = 102.0
    report.setup("partitioning")
    os.utime(path, (5000.0, 5000.0))  # written at wall time 5,000
    assert read_status(path, 5000.0 + 60.0) == CellStatus(step="partitioning", rounds=4, elapsed_s=62.0)
    clock.t = 103.0
    report.start(8)
    for _ in range(4):
        clock.t += 2.0  # 105, 107 (rewritten), 109, 111 (rewritten): 4 of 8 at 2 s each
        report.advance()
    os.utime(path, (6000.0, 6000.0))
    assert read_status(path) == CellStatus(done=4, total=8, rounds=4, elapsed_s=11.0, simulating_s=8.0,
                                           first_round_s=2.0)
    late = read_status(path, 6000.0 + 600.0)  # no node round for 10 minutes
    assert late == CellStatus(done=4, total=8, rounds=4, elapsed_s=611.0, simulating_s=608.0, first_round_s=2.0)
    assert late.left_s() == 808.0  # 4 more at 202 s each: 3 rounds in the 606 s after the first, silence included
    assert read_status(path, 6000.0 - 30.0).elapsed_s == 11.0  # a clock behind the file's adds nothing


def test_the_time_left_is_at_the_pace_of_the_rounds_not_of_a_discovery_before_them():
    discovered = CellStatus(done=10, total=20, rounds=2, simulating_s=3609.0, first_round_s=3600.0)
    assert discovered.left_s() == 10.0  # 9 rounds in the 9 s after the first; the hour before is not a pace
    assert CellStatus(done=1, total=20, simulating_s=3600.0, first_round_s=3600.0).left_s() == 19 * 3600.0
    assert CellStatus(done=0, total=20, simulating_s=3600.0).left_s() is None


@pytest.mark.parametrize("content", ["", "{", "[]", '{"step": ""}', "x" * 5000])
def test_what_is_not_a_status_file_reads_as_none(tmp_path, content):
    path = tmp_path / ".c.progress"
    path.write_text(content)
    assert read_status(path) is None


def test_a_real_cell_reports_every_round_by_its_end_and_its_results_do_not_change(tmp_path):
    from p2pfl.api import resolve
    from p2pfl.study.runner import _run_cell

    sc = resolve(digits_scenario({"name": "gossip", "rounds": 3, "mode": "sync", "exchange": "push_pull"}, n=4))
    path = tmp_path / ".c.progress"
    _run_cell(sc, str(tmp_path / "c"), b"{}", [], 1, None, str(path))
    status = read_status(path)
    assert status.where() == "round 3/3 (100%)" and status.done == status.total == 12 and status.elapsed_s > 0
    _run_cell(sc, str(tmp_path / "quiet"), b"{}", [], 1, None, None)  # the same cell, reporting nothing
    assert (tmp_path / "c" / "summary.json").read_bytes() == (tmp_path / "quiet" / "summary.json").read_bytes()


def test_the_sweep_says_how_far_its_running_cells_are_and_removes_their_files(tmp_path, monkeypatch, capsys):
    from p2pfl.study import runner
    from p2pfl.study.spec import load_study

    base = digits_scenario({"name": "gossip", "rounds": 2, "mode": "sync", "exchange": "push_pull"}, n=5)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "s", "base": "base.yaml", "seeds": [0, 1]}))
    study = load_study(tmp_path / "s.yaml")
    out = tmp_path / "out"
    out.mkdir()
    handed: list[Optional[str]] = []
    futures: list[Future[float]] = []

    class Pool:  # a worker that has reported round 1 of 2 and is still running
        def __init__(self, **_: object) -> None:
            pass

        def submit(self, fn, scenario, cell_out, data, argv, share, evaluations, progress=None) -> Future[float]:
            handed.append(progress)
            clock = Clock()
            report = ProgressFile(Path(progress), rounds=2, interval=0.0, clock=clock)
            report.start(10)
            for _ in range(5):
                clock.t += 6.0
                report.advance()
            futures.append(Future())
            return futures[-1]

        def shutdown(self, **_: object) -> None:
            pass

    polls: list[float] = []

    def wait(pending, timeout, return_when):  # the first look finds nothing done; then every cell ends
        polls.append(timeout)
        if len(polls) == 1:
            return set(), set(pending)
        for f in pending:
            f.set_result(1.0)
        return set(pending), set()

    monkeypatch.setattr(runner, "ProcessPoolExecutor", Pool)
    monkeypatch.setattr(runner, "wait", wait)
    display = Display(True, running_every_s=0.0)
    ran, failed, _ = runner._execute(study, study.cells, out, 2, 2, display, [], lambda c, w: None)
    assert sorted(ran) == [c.id for c in study.cells] and failed == {}
    assert handed == [str(progress_path(out, c.id)) for c in study.cells] and polls[0] == display.poll_s == 0.0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"  running {c.id}: round 1/2 (50%), 30.0 s in; about 30.0 s left at its pace so far"
                     for c in study.cells]
    assert sorted(p.name for p in out.iterdir()) == []  # each cell's file went as it ended


def test_a_stopped_sweeps_progress_files_are_removed_uncounted(tmp_path):
    from p2pfl.study.resume import remove_temps
    from p2pfl.study.spec import load_study

    base = digits_scenario({"name": "local", "rounds": 1}, n=3)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "s", "base": "base.yaml", "seeds": [0]}))
    study = load_study(tmp_path / "s.yaml")
    out = tmp_path / "out"
    (out / f".{study.cells[0].id}.tmp-x").mkdir(parents=True)
    progress_path(out, study.cells[0].id).write_text(json.dumps({}))
    (out / "notes.txt").write_text("mine")
    assert remove_temps(out, study) == 1 and [p.name for p in out.iterdir()] == ["notes.txt"]


def test_under_the_bar_each_running_cell_has_a_row_until_it_ends():
    from p2pfl.study.display import _short
    from p2pfl.study.spec import Cell

    class Bar:
        def __init__(self) -> None:
            self.rows: dict[int, dict] = {}

        def add_task(self, description, total):
            self.rows[len(self.rows)] = {"description": description, "total": total}
            return len(self.rows) - 1

        def update(self, row, **fields):
            self.rows[row].update(fields)

        def remove_task(self, row):
            del self.rows[row]

        def advance(self, task):
            pass

    long_id = "rnd_gossip_h1__data.partition=kind-rotation-angles-0-9-0cc28917__dynamics=churn-d93136d7__seed0"
    cell = Cell(long_id, "rnd_gossip_h1", {}, 0, (), (), (), None)  # type: ignore[arg-type]
    display = Display(True)
    display.bar = Bar()
    display.running([(cell, None)])  # nothing reported yet: no row
    assert display.bar.rows == {}
    display.running([(cell, CellStatus(done=5, total=20, rounds=4))])
    display.running([(cell, CellStatus(done=10, total=20, rounds=4))])
    label = f"  {_short(long_id)}: round 2/4 (50%)"
    assert display.bar.rows == {0: {"description": label, "total": 20, "completed": 10}}
    assert _short(long_id) == long_id[:28] + "..." + long_id[-28:] and _short("seed0") == "seed0"
    display.done(cell, 1.0)
    assert display.bar.rows == {}
