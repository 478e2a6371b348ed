"""summary.json and events.jsonl name the score by the run's metric: an RMSE is never called accuracy."""

from __future__ import annotations

import json

import pytest

import p2pfl
from p2pfl.progress import print_summary
from tests.helpers import digits_scenario
from tests.metrics.tiny_runs import regression_scenario


def _read(path):
    summary = json.loads((path / "summary.json").read_text(encoding="utf-8"))
    with open(path / "events.jsonl", encoding="utf-8") as fh:
        events = [json.loads(line) for line in fh]
    return summary, events


def _scores_only(curve):
    """A curve without its bytes fields (tested in test_event_stream)."""
    return [{k: v for k, v in point.items() if not k.startswith("bytes_")} for point in curve]


def _curve_from_events(evals, metric):
    """Mean score per round at the time of that round's last evaluation, recomputed from the events."""
    rounds = sorted({e["round"] for e in evals})
    out = []
    for r in rounds:
        es = [e for e in evals if e["round"] == r]
        out.append({"round": r, "t": max(e["t"] for e in es), f"{metric}_mean": sum(e[metric] for e in es) / len(es)})
    return out


def test_a_regression_run_is_scored_by_rmse(tmp_path):
    result = p2pfl.run(regression_scenario(), out=tmp_path / "reg")
    s, events = _read(tmp_path / "reg")
    assert s["metric"] == "rmse"
    assert s["partition"]["dataset"] == "synthetic_linear"
    assert not [k for k in s if k.startswith("accuracy")]
    for key in ("rmse_mean", "rmse_worst", "rmse_per_node", "rmse_curve"):
        assert key in s
    evals = [e for e in events if e["kind"] == "eval"]
    assert evals and all("rmse" in e and "accuracy" not in e for e in evals)
    last = {}
    for e in evals:
        last[e["node"]] = e["rmse"]
    per_node = [last.get(i) for i in range(s["n_devices"])]
    assert s["rmse_per_node"] == per_node
    assert s["rmse_mean"] == sum(per_node) / len(per_node)
    assert s["rmse_worst"] == max(per_node)  # lower is better: the worst device has the highest RMSE
    assert _scores_only(s["rmse_curve"]) == _curve_from_events(evals, "rmse")
    assert [p["round"] for p in s["rmse_curve"]] == list(range(1, s["rounds"] + 1))
    assert result.rmse_mean == s["rmse_mean"] and result.metric == "rmse"


def test_a_classification_run_keeps_accuracy_fields(tmp_path):
    result = p2pfl.run(digits_scenario({"name": "gossip", "rounds": 2, "eval_every": 1}, n=4), out=tmp_path / "cls")
    s, events = _read(tmp_path / "cls")
    assert s["metric"] == "accuracy"
    assert not [k for k in s if k.startswith("rmse") or k.startswith("success")]
    evals = [e for e in events if e["kind"] == "eval"]
    assert evals and all("accuracy" in e and "rmse" not in e for e in evals)
    last = {}
    for e in evals:
        last[e["node"]] = e["accuracy"]
    per_node = [last.get(i) for i in range(s["n_devices"])]
    assert s["accuracy_per_node"] == per_node
    assert s["accuracy_mean"] == sum(per_node) / len(per_node)
    assert s["accuracy_worst"] == min(per_node)
    assert _scores_only(s["accuracy_curve"]) == _curve_from_events(evals, "accuracy")
    assert result.accuracy_mean == s["accuracy_mean"]


@pytest.mark.slow
def test_the_end_of_run_table_names_the_metric(tmp_path, capsys):
    reg = p2pfl.run(regression_scenario(), out=tmp_path / "reg")
    print_summary(reg)
    text = capsys.readouterr().out
    assert "RMSE mean (lower is better)" in text and "RMSE worst device" in text
    assert f"{reg.summary['rmse_mean']:.4f}" in text and f"{reg.summary['rmse_worst']:.4f}" in text
    assert "accuracy" not in text.lower()
    cls = p2pfl.run(digits_scenario({"name": "gossip", "rounds": 1}, n=4), out=tmp_path / "cls")
    print_summary(cls)
    text = capsys.readouterr().out
    assert "accuracy mean" in text and f"{cls.summary['accuracy_mean']:.4f}" in text


def test_the_score_over_time_is_each_devices_latest_score_with_the_bytes_by_then() -> None:
    from p2pfl.metrics.summary import score_over_time

    # device 1 is late (churn): its first score comes at t = 9, after device 0 has scored twice
    evals = [{"t": 1.0, "node": 0, "accuracy": 0.5}, {"t": 2.0, "node": 0, "accuracy": 0.7},
             {"t": 9.0, "node": 1, "accuracy": 0.2}, {"t": 10.0, "node": 0, "accuracy": 0.9}]
    traffic = [(100, 0), (300, 0), (700, 50), (900, 50)]
    pts = score_over_time(evals, "accuracy", traffic, n_devices=2, points=3)  # times 1, 5.5 and 10
    assert pts == [
        {"t": 1.0, "accuracy_mean": 0.5, "devices_scored": 1, "bytes_per_device": 50.0, "bytes_servers": 0},
        {"t": 2.0, "accuracy_mean": 0.7, "devices_scored": 1, "bytes_per_device": 150.0, "bytes_servers": 0},
        {"t": 10.0, "accuracy_mean": (0.9 + 0.2) / 2, "devices_scored": 2, "bytes_per_device": 450.0,
         "bytes_servers": 50},
    ]
    evals[1]["accuracy"] = None  # a diverged model: no mean while it is a device's latest
    assert score_over_time(evals, "accuracy", traffic, n_devices=2, points=3)[1]["accuracy_mean"] is None
    assert score_over_time([], "accuracy", [], n_devices=2) == []
