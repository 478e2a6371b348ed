"""`p2pfl report`: the table and figure are built from run directories alone, named by the runs' metric."""

from __future__ import annotations

import json

import matplotlib.image as mpimg
import pytest

import p2pfl
from p2pfl.cli import main
from p2pfl.metrics.report import build_figure, report_table, run_score, time_to_fraction
from p2pfl.metrics.runs import load_curves, load_runs
from p2pfl.metrics.summary import metric_label
from tests.helpers import digits_scenario
from tests.metrics.tiny_runs import regression_scenario


def _summary(path):
    return json.loads((path / "summary.json").read_text(encoding="utf-8"))


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    """(header cells, rows of cells) of the markdown table in ``text``."""
    lines = [line for line in text.splitlines() if line.startswith("|") and not line.startswith("|---")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return cells[0], cells[1:]


def test_time_to_fraction_reads_the_accuracy_curve():
    s = {"metric": "accuracy", "accuracy_mean": 0.8,
         "accuracy_curve": [{"t": 1.0, "accuracy_mean": 0.5}, {"t": 2.0, "accuracy_mean": 0.75},
                            {"t": 3.0, "accuracy_mean": 0.8}]}
    assert time_to_fraction(s, 0.9) == 2.0  # 0.75 >= 0.72
    assert time_to_fraction(s, 1.0) == 3.0
    assert time_to_fraction({"metric": "accuracy", "accuracy_mean": None, "accuracy_curve": []}) is None
    # a summary without ``metric`` (written before summaries were metric-aware) is accuracy
    assert time_to_fraction({k: v for k, v in s.items() if k != "metric"}, 0.9) == 2.0


def test_time_to_fraction_of_rmse_is_lower_is_better():
    s = {"metric": "rmse", "rmse_mean": 1.0,
         "rmse_curve": [{"t": 1.0, "rmse_mean": 2.0}, {"t": 2.0, "rmse_mean": 1.1}, {"t": 3.0, "rmse_mean": 1.0}]}
    assert time_to_fraction(s, 0.9) == 2.0  # 1.1 <= 1.0 / 0.9
    assert time_to_fraction(s, 0.95) == 3.0  # 1.1 > 1.0 / 0.95
    assert time_to_fraction(s, 0.4) == 1.0  # 2.0 <= 1.0 / 0.4
    # an RMSE that rises past the final value is never "within" it before the end
    worse = {"metric": "rmse", "rmse_mean": 3.0, "rmse_curve": [{"t": 1.0, "rmse_mean": 1.0}]}
    assert time_to_fraction(worse, 0.9) == 1.0


def test_old_summaries_are_read_by_their_metric():
    old_rmse = {"metric": "rmse", "accuracy_mean": None, "accuracy_worst": None, "rmse_mean": 1.0, "rmse_worst": 1.5,
                "accuracy_curve": [{"round": 1, "t": 1.0, "accuracy_mean": 2.0},
                                   {"round": 2, "t": 2.0, "accuracy_mean": 1.0}]}
    score = run_score(old_rmse)
    assert (score.metric, score.mean, score.worst, score.curve) == ("rmse", 1.0, 1.5, [(1.0, 2.0), (2.0, 1.0)])
    assert time_to_fraction(old_rmse, 0.9) == 2.0
    old_robot = {"metric": "accuracy", "accuracy_mean": 0.4, "accuracy_worst": 0.2,
                 "accuracy_curve": [{"round": 1, "t": 5.0, "accuracy_mean": 0.4}],
                 "partition": {"dataset": "robotics", "partition": "robot_suites"}}
    score = run_score(old_robot)
    assert (score.metric, score.label, score.mean, score.worst) == ("success", metric_label("success"), 0.4, 0.2)


@pytest.mark.slow
def test_report_compares_runs_with_exact_figures(tmp_path, capsys):
    g = p2pfl.run(digits_scenario({"name": "gossip", "rounds": 2, "eval_every": 1}, n=4), out=tmp_path / "g")
    loc = p2pfl.run(digits_scenario({"name": "local", "rounds": 2, "eval_every": 1}, n=4), out=tmp_path / "l")
    curves = load_curves(tmp_path / "g")
    assert curves["bytes"].iloc[-1] == g.bytes_total  # the last evaluation ends the run: every byte sent by then
    out = tmp_path / "cmp.png"
    assert main(["report", str(tmp_path / "g"), str(tmp_path / "l"), "--out", str(out)]) == 0
    head, rows = _table(capsys.readouterr().out)
    assert head[:13] == ["group", "scenario", "dataset", "partition", "devices", "protocol", "metric", "n", "seeds",
                         "accuracy mean", "accuracy sd", "accuracy 95% CI", "accuracy worst device"]
    by_group = {r[0]: dict(zip(head, r)) for r in rows}
    assert set(by_group) == {"gossip", "local"}  # a single run is a group of one, named by what differs: its protocol
    for name, res in (("g", g), ("l", loc)):
        s = _summary(tmp_path / name)
        row = by_group[s["protocol"]]
        assert row["dataset"] == s["partition"]["dataset"] == "digits"
        assert row["seeds"] == str(s["seed"]) and row["metric"] == s["metric"] == "accuracy" and row["n"] == "1"
        assert row["protocol"] == s["protocol"]
        assert row["accuracy mean"] == f"{s['accuracy_mean']:.4f}" == f"{res.accuracy_mean:.4f}"
        assert row["accuracy worst device"] == f"{min(s['accuracy_per_node']):.4f}"
        assert row["bytes total"] == f"{s['bytes_total']:,}"
        assert row["t(90% final) s"] == f"{time_to_fraction(s):.2f}"
    assert by_group["local"]["bytes total"] == "0"
    assert mpimg.imread(out).shape[1] > 500


def test_report_of_a_regression_run_says_rmse(tmp_path, capsys):
    p2pfl.run(regression_scenario(), out=tmp_path / "reg")
    s = _summary(tmp_path / "reg")
    assert main(["report", str(tmp_path / "reg")]) == 0
    text = capsys.readouterr().out
    head, rows = _table(text)
    assert head[6:13] == ["metric", "n", "seeds", "RMSE mean", "RMSE sd", "RMSE 95% CI", "RMSE worst device"]
    row = dict(zip(head, rows[0]))
    assert row["metric"] == "rmse" and row["dataset"] == "synthetic_linear"
    assert row["RMSE mean"] == f"{s['rmse_mean']:.4f}"
    assert row["RMSE worst device"] == f"{max(s['rmse_per_node']):.4f}"  # lower is better: the worst is the highest
    expected_t = next(p["t"] for p in s["rmse_curve"] if p["rmse_mean"] * 0.9 <= s["rmse_mean"])
    assert row["t(90% final) s"] == f"{expected_t:.2f}"
    assert "accuracy" not in text.lower()
    fig = build_figure(load_runs(tmp_path / "reg"), load_curves(tmp_path / "reg"))
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == ["mean device RMSE (lower is better)"] * 2
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [p["t"] for p in s["rmse_curve"]]
    assert list(line.get_ydata()) == [p["rmse_mean"] for p in s["rmse_curve"]]


@pytest.mark.slow
def test_runs_of_different_metrics_and_datasets_are_kept_apart(tmp_path, capsys):
    p2pfl.run(regression_scenario(), out=tmp_path / "reg")
    p2pfl.run(digits_scenario({"name": "gossip", "rounds": 2, "eval_every": 1}, n=4), out=tmp_path / "cls")
    assert main(["report", str(tmp_path / "reg"), str(tmp_path / "cls")]) == 0
    text = capsys.readouterr().out
    tables = text.split("### ")[1:]
    assert [t.splitlines()[0] for t in tables] == ["RMSE", "accuracy"]  # one table per metric
    (rhead, rrows), (ahead, arows) = (_table(t) for t in tables)
    reg, cls = dict(zip(rhead, rrows[0])), dict(zip(ahead, arows[0]))
    assert len(rrows) == len(arows) == 1
    assert (reg["metric"], reg["dataset"]) == ("rmse", "synthetic_linear")
    assert (cls["metric"], cls["dataset"]) == ("accuracy", "digits")
    assert reg["RMSE mean"] == f"{_summary(tmp_path / 'reg')['rmse_mean']:.4f}"
    assert cls["accuracy mean"] == f"{_summary(tmp_path / 'cls')['accuracy_mean']:.4f}"
    assert "different metrics (rmse, accuracy)" in text
    dirs = (tmp_path / "reg", tmp_path / "cls")  # panel rows in the order the runs were given
    fig = build_figure(load_runs(*dirs), load_curves(*dirs))
    assert [ax.get_ylabel() for ax in fig.axes] == ["mean device RMSE (lower is better)"] * 2 + \
        ["mean device accuracy"] * 2
    assert [len(ax.get_lines()) for ax in fig.axes] == [1, 1, 1, 1]  # one run per axis: never mixed


def test_rollout_success_is_not_called_accuracy(tmp_path):
    s = {"scenario": "r", "protocol": "fedavg", "seed": 3, "n_devices": 2, "metric": "success",
         "success_mean": 0.25, "success_worst": 0.0, "success_per_node": [0.5, 0.0],
         "success_curve": [{"round": 1, "t": 1.0, "success_mean": 0.1}, {"round": 2, "t": 2.0, "success_mean": 0.25}],
         "bytes_total": 10, "messages_total": 2, "compute_flops_total": 1, "sim_time_s": 2.0,
         "partition": {"dataset": "robotics", "partition": "robot_suites"}}
    (tmp_path / "rob").mkdir()
    (tmp_path / "rob" / "summary.json").write_text(json.dumps(s), encoding="utf-8")
    runs = load_runs(tmp_path / "rob")
    head, rows = _table(report_table(runs))
    row = dict(zip(head, rows[0]))
    assert (row["metric"], row["dataset"], row["seeds"]) == ("success", "robotics", "3")
    assert row["rollout success rate mean"] == "0.2500" and row["rollout success rate worst device"] == "0.0000"
    assert row["t(90% final) s"] == "2.00"
    # no events.jsonl beside the summary: score vs time only
    assert [ax.get_ylabel() for ax in build_figure(runs, load_curves(tmp_path / "rob")).axes] == \
        ["mean device rollout success rate"]


@pytest.mark.parametrize("metric,label", [("accuracy", "accuracy"), ("rmse", "RMSE"),
                                          ("success", "rollout success rate")])
def test_metric_labels(metric, label):
    assert metric_label(metric) == label


def test_report_on_a_non_run_directory_is_a_user_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err
