"""A sweep's ``--budget``: cells start only when their variant's median cell time ends within it; the time left."""

from __future__ import annotations

import json
import shutil
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


@pytest.mark.parametrize("text, seconds", [("2h30m", 9000.0), ("90m", 5400.0), ("45s", 45.0), ("5400", 5400.0),
                                           ("1.5h", 5400.0), (" 2H ", 7200.0)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2h30", "soon", "0", "0m", "-5", "1d"])
def test_a_bad_duration_is_one_line_naming_the_flag(text):
    with pytest.raises(UserError, match=r"^--budget: expected a duration") as err:
        parse_duration(text)
    assert "\n" not in str(err.value)


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


@pytest.mark.sweep
@pytest.mark.slow
def test_a_variant_too_long_for_the_budget_waits_and_a_shorter_one_runs(tmp_path, capsys):
    study, out = _study(tmp_path), tmp_path / "out"
    first = sweep(study, jobs=1, out=out)
    assert len(first.ran) == 4
    ids = {v: sorted(c for c in first.ran if c.startswith(v + "__")) for v in ("gossip", "fedavg")}
    summaries = {c: (out / c / "summary.json").read_bytes() for c in first.ran}
    for variant, wall in (("gossip", 1e6), ("fedavg", 0.1)):  # the complete cells' measured times
        kept, again = ids[variant]
        (out / kept / "timing.json").write_text(json.dumps({"wall_s": wall}))
        shutil.rmtree(out / again)
    assert main(["sweep", str(study), "--jobs", "1", "--out", str(out), "--budget", "1h"]) == 0
    printed = capsys.readouterr().out
    assert f"done {ids['fedavg'][1]}" in printed and ids["gossip"][1] not in printed
    assert printed.rstrip().endswith("1 cell(s) not started: none fits in what is left of --budget at its variant's "
                                     "median cell time; run the same command again to resume")
    assert "3 of 4 cells complete" in printed
    rest = sweep(study, jobs=1, out=out)  # no budget: the one left runs
    assert rest.ran == (ids["gossip"][1],) and rest.deferred == ()
    assert {c: (out / c / "summary.json").read_bytes() for c in first.ran} == summaries
    dry = sweep(study, out=out, dry_run=True)  # the complete cells' times, for the dry run's time table
    assert set(dry.walls) == set(first.ran) and dry.walls[ids["gossip"][0]] == 1e6


def test_a_dry_run_says_per_variant_what_the_cells_to_run_would_take(tmp_path, capsys):
    from p2pfl.study.display import describe, fmt_s
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
    assert fmt_s(59.0) == "59.0 s" and fmt_s(61.0) == "1 min 01 s" and fmt_s(3 * 3600 + 120) == "3 h 02 min"
    assert "time (" not in describe(SweepResult(study, tmp_path, (), (), {}, 0.0, dry_run=True))  # nothing timed
