"""A sweep's ``--budget``: cells start only when their variant's median cell time ends within it; the time left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from p2pfl.cli import main
from p2pfl.errors import UserError
from p2pfl.study import sweep
from p2pfl.study.times import Budget, CellTimes, parse_duration
from tests.helpers import digits_scenario


def test_a_cell_is_guessed_at_its_variants_median_then_at_the_median_of_all():
    times = CellTimes()
    assert times.guess("a") is None  # nothing timed: unknown
    for wall in (10.0, 30.0, 20.0):
        times.add("a", wall)
    times.add("b", 100.0)
    assert times.guess("a") == 20.0 and times.guess("b") == 100.0
    assert times.guess("c") == 25.0  # median of 10, 20, 30, 100
    assert times.left({"a": 2, "b": 1, "c": 4}, workers=2) == (2 * 20 + 100 + 4 * 25) / 2
    assert times.untimed({"a": 2, "c": 4}) == 4
    assert times.left({"a": 0}, workers=1) is None and CellTimes().left({"a": 1}, workers=1) is None


def test_the_first_waiting_cell_that_ends_within_the_budget_starts():
    times = CellTimes(walls={"long": [500.0], "short": [20.0]})
    budget = Budget(100.0, start=1000.0)
    assert budget.left(now=1030.0) == 70.0
    assert budget.first_fitting(["long", "short", "long"], times, now=1030.0) == 1
    assert budget.first_fitting(["long", "short"], times, now=1085.0) is None  # 15 s left: nothing fits
    assert budget.fits(None, now=1099.0)  # an unknown cell starts
    assert budget.first_fitting(["long", "short"], CellTimes(), now=1099.0) == 0
    # a variant not timed yet counts as the slowest timed one (500 s), not the median of all: it waits
    assert times.slowest() == 500.0 and times.guess("new") == 260.0
    assert budget.first_fitting(["new", "short"], times, now=1030.0) == 1
    assert Budget(1000.0, start=1000.0).first_fitting(["new"], times, now=1030.0) == 0


@pytest.mark.parametrize("text, seconds", [("2h30m", 9000.0), ("90m", 5400.0), ("45s", 45.0), ("5400", 5400.0),
                                           ("1.5h", 5400.0), (" 2H ", 7200.0)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2h30", "soon", "0", "0m", "-5", "1d"])
def test_a_bad_duration_is_one_line_naming_the_flag(text):
    with pytest.raises(UserError, match=r"^--budget: expected a duration") as err:
        parse_duration(text)
    assert "\n" not in str(err.value)


def test_the_command_line_refuses_a_bad_budget_and_a_budget_on_ray_with_exit_2(tmp_path, capsys):
    study = str(_study(tmp_path))
    assert main(["sweep", study, "--budget", "2h30", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip().endswith("got '2h30'")
    assert main(["sweep", study, "--budget", "1h", "--jobs", "ray", "--out", str(tmp_path / "o")]) == 2
    assert "--budget: not available with --jobs ray" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _study(tmp_path: Path) -> Path:
    base = digits_scenario({"name": "gossip", "rounds": 2, "mode": "sync", "exchange": "push_pull"}, n=5)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    fedavg = {"unset": ["protocol.mode", "protocol.exchange"],
              "set": {"protocol.name": "fedavg", "topology.servers": [{"attach": "all"}]}}
    study = {"name": "budget", "base": "base.yaml", "variants": {"gossip": {}, "fedavg": fedavg},
             "grid": {"training.lr": [0.02, 0.05]}, "seeds": [0]}
    path = tmp_path / "budget.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def test_a_variant_too_long_for_the_budget_waits_and_a_shorter_one_runs(tmp_path, inline_pool, capsys):
    from p2pfl.study import runner
    from p2pfl.study.display import Display
    from p2pfl.study.result import SweepResult
    from p2pfl.study.spec import load_study

    study = load_study(_study(tmp_path))  # in order: gossip x 2, fedavg x 2
    display = Display(False)
    times = CellTimes(walls={"gossip": [1e6], "fedavg": [0.1]})  # complete cells': gossip far past the budget
    ran, failed, deferred = runner._execute(study, study.cells, tmp_path / "out", 1, 1, display, [],
                                            lambda c, w: None, Budget(3600.0), times)
    fedavg = [c.id for c in study.cells if c.variant == "fedavg"]
    gossip = [c.id for c in study.cells if c.variant == "gossip"]
    assert [name for name, *_ in inline_pool] == ran == fedavg and failed == {} and deferred == gossip
    inline_pool.clear()
    assert runner._execute(study, study.cells, tmp_path / "out", 1, 1, display, [], lambda c, w: None)[0] == [
        c.id for c in study.cells]  # no budget: every cell, in order
    shown = Display(True)
    shown.finish(SweepResult(study, tmp_path / "out", tuple(fedavg), (), {}, 1.0, deferred=tuple(gossip)))
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("sweep budget: 2 of 4 cells complete") and "2 not started" in printed[0]
    assert printed[1] == ("p2pfl: 2 cell(s) not started: none fits in what is left of --budget at its variant's "
                          "median cell time; run the same command again to resume")


def test_a_dry_run_reads_the_complete_cells_times_from_out_and_the_archive(tmp_path, monkeypatch):
    from p2pfl.study import runner
    from p2pfl.study.spec import load_study

    study = load_study(_study(tmp_path))
    out, archive = tmp_path / "out", tmp_path / "archive"
    (a, b), rest = [c.id for c in study.cells[:2]], study.cells[2:]
    for folder, cid, wall in ((out, a, 12.0), (archive, b, 34.0)):
        (folder / cid).mkdir(parents=True)
        (folder / cid / "timing.json").write_text(json.dumps({"wall_s": wall}))
    monkeypatch.setattr(runner, "complete_cells", lambda st, folder: [a] if folder == out else [b])
    monkeypatch.setattr(runner, "_build_all", lambda cells, progress=False: {})
    dry = sweep(study, out=out, archive=archive, dry_run=True)
    assert dry.walls == {a: 12.0, b: 34.0} and dry.skipped == (a, b) and len(rest) == 2


def test_a_dry_run_says_per_variant_what_the_cells_to_run_would_take(tmp_path, capsys):
    from p2pfl.study.display import describe, fmt_duration
    from p2pfl.study.result import SweepResult
    from p2pfl.study.spec import load_study

    study = load_study(_study(tmp_path))
    gossip = [c for c in study.cells if c.variant == "gossip"]
    walls = {gossip[0].id: 4000.0}  # one gossip cell complete, timed; fedavg not timed: at the median of all
    result = SweepResult(study, tmp_path / "out", (), (gossip[0].id,), {}, 0.0, dry_run=True, walls=walls)
    lines = describe(result).splitlines()
    at = lines.index("time (complete cells' timing.json):")
    assert lines[at + 1:at + 4] == [
        "  gossip: 1 complete, 1 to run, median cell 1 h 06 min, 1 h 06 min to run on one worker",
        "  fedavg: 0 complete, 2 to run, median cell 1 h 06 min (median of all), 2 h 13 min to run on one worker",
        "  all: 3 h 20 min of cells to run on one worker"]
    assert fmt_duration(59.0) == "59.0 s" and fmt_duration(61.0) == "1 min 01 s"
    assert fmt_duration(3 * 3600 + 120) == "3 h 02 min"
    assert "time (" not in describe(SweepResult(study, tmp_path, (), (), {}, 0.0, dry_run=True))  # nothing timed


def test_a_planned_cell_time_stands_in_for_a_variant_until_a_cell_of_it_is_timed():
    times = CellTimes(walls={"short": [20.0], "long": [500.0]}, planned={"new": 9000.0, "short": 1.0})
    assert times.guess("short") == 20.0 and times.guess("new") == 9000.0 and times.guess("other") == 260.0
    assert times.untimed({"new": 3, "other": 2}) == 2
    budget = Budget(3600.0, start=0.0)
    # not timed: "new" counts at its plan (2.5 h, too long for the hour left), "other" at the slowest (500 s)
    assert budget.first_fitting(["new", "other"], times, now=0.0) == 1
    assert budget.first_fitting(["new"], CellTimes(planned={"new": 60.0}), now=0.0) == 0


def test_a_variants_cell_time_is_read_as_a_duration_and_a_bad_one_names_its_field(tmp_path, capsys):
    from p2pfl.study.display import describe
    from p2pfl.study.result import SweepResult
    from p2pfl.study.spec import load_study

    path = _study(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["variants"]["fedavg"]["cell_time"] = "2h30m"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    study = load_study(path)
    assert study.planned_times() == {"fedavg": 9000.0}
    (tmp_path / "plain").mkdir()
    assert [c.id for c in study.cells] == [c.id for c in load_study(_study(tmp_path / "plain")).cells]
    described = describe(SweepResult(study, tmp_path / "out", (), (), {}, 0.0, dry_run=True)).splitlines()
    assert "  fedavg: 0 complete, 2 to run, median cell 2 h 30 min (planned), 5 h 00 min to run on one worker" \
        in described
    raw["variants"]["fedavg"]["cell_time"] = "soon"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert main(["sweep", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cell_time" in err and "expected a duration such as 2h30m" in err and "\n" not in err
