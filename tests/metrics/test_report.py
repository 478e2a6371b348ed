"""`p2pfl report`: the table and figure are built from run directories alone."""

from __future__ import annotations

import matplotlib.image as mpimg

import p2pfl
from p2pfl.cli import main
from p2pfl.metrics.report import bytes_at, load_run, time_to_fraction
from tests.helpers import digits_scenario


def test_time_to_fraction_reads_the_accuracy_curve():
    s = {"accuracy_mean": 0.8, "accuracy_curve": [{"t": 1.0, "accuracy_mean": 0.5},
                                                  {"t": 2.0, "accuracy_mean": 0.75},
                                                  {"t": 3.0, "accuracy_mean": 0.8}]}
    assert time_to_fraction(s, 0.9) == 2.0  # 0.75 >= 0.72
    assert time_to_fraction(s, 1.0) == 3.0
    assert time_to_fraction({"accuracy_mean": None, "accuracy_curve": []}) is None


def test_report_compares_runs_with_exact_figures(tmp_path, capsys):
    g = p2pfl.run(digits_scenario({"name": "gossip", "rounds": 2, "eval_every": 1}, n=4), out=tmp_path / "g")
    loc = p2pfl.run(digits_scenario({"name": "local", "rounds": 2, "eval_every": 1}, n=4), out=tmp_path / "l")
    run = load_run(tmp_path / "g")
    assert bytes_at(run, float("inf")) == g.bytes_total
    assert bytes_at(run, -1.0) == 0
    out = tmp_path / "cmp.png"
    assert main(["report", str(tmp_path / "g"), str(tmp_path / "l"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("| g ") or line.startswith("| l ")]
    assert len(rows) == 2
    assert f"| {g.bytes_total:,} |" in rows[0] and "| gossip |" in rows[0]
    assert "| 0 |" in rows[1] and f"{loc.accuracy_mean:.4f}" in rows[1]
    assert mpimg.imread(out).shape[1] > 500


def test_report_on_a_non_run_directory_is_a_user_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err
