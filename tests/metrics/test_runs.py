"""``p2pfl.load_runs`` / ``load_curves`` / ``load_nodes``: run directories as pandas tables, checked against the files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import p2pfl
from p2pfl.errors import UserError
from p2pfl.metrics.runs import find_runs, scenario_hash
from tests.metrics.run_tree import CELLS, summary

PLAIN = ["gossip-lr-s1", "gossip-lr-s2", "gossip-s1", "gossip-s2", "gossip-s3", "local-s1"]


def _names(paths) -> list[str]:
    return sorted(Path(p).name for p in paths)


def _bytes_by(run_dir: Path, t: float) -> int:
    """Fleet bytes sent by time ``t``, recomputed from events.jsonl."""
    total = 0
    with open(run_dir / "events.jsonl", encoding="utf-8") as fh:
        for line in fh:
            e = json.loads(line)
            if e["kind"] == "send" and e["t"] <= t:
                total += e["bytes"]
    return total


@pytest.mark.slow
def test_runs_are_found_at_any_depth_without_temp_dirs_or_repeats(tree):
    found = find_runs(tree / "plain", tree / "plain" / "gossip-s1", tree.root)
    n_summaries = sum(1 for p in tree.root.rglob("summary.json") if ".tmp-" not in str(p))
    assert len(found) == n_summaries == len(PLAIN) + 2 + 1 + len(CELLS)
    assert not [p for p in found if ".tmp-" in str(p)]
    assert _names(find_runs(tree / "plain")) == PLAIN
    assert find_runs(tree / "plain" / "gossip-s1") == [tree / "plain" / "gossip-s1"]


def test_a_folder_without_runs_is_a_one_line_user_error(tmp_path):
    with pytest.raises(UserError, match="not a run directory") as err:
        find_runs(tmp_path)
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="no such directory"):
        p2pfl.load_runs(tmp_path / "missing")


def test_load_runs_has_one_row_per_run_with_summary_scalars(tree):
    df = p2pfl.load_runs(tree / "plain", tree / "reg")
    assert isinstance(df, pd.DataFrame)
    assert len(df) == len(PLAIN) + 2 and df["path"].is_unique
    assert list(df.columns[:4]) == ["path", "study", "cell", "variant"]
    for col in ("scenario", "protocol", "seed", "n_devices", "metric", "accuracy_mean", "rmse_mean", "bytes_total",
                "messages_total", "sim_time_s", "compute_flops_total", "partition.dataset", "partition.partition",
                "score", "score_worst", "t90_s", "scenario_hash", "group"):
        assert col in df.columns, col
    for col in ("accuracy_per_node", "accuracy_curve", "rmse_curve", "bytes_per_node", "true_clusters", "logs"):
        assert col not in df.columns, col  # list-valued fields are not columns
    assert not [c for c in df.columns if c.startswith("grid.")]
    for col in ("seed", "n_devices", "bytes_total", "messages_total", "compute_flops_total"):
        assert pd.api.types.is_integer_dtype(df[col]), col
    for col in ("score", "sim_time_s", "accuracy_mean", "rmse_mean"):
        assert pd.api.types.is_float_dtype(df[col]), col
    assert pd.api.types.is_string_dtype(df["path"]) and pd.api.types.is_string_dtype(df["metric"])
    assert df["study"].isna().all() and df["variant"].isna().all()
    for _, row in df.iterrows():
        s = summary(Path(row["path"]))
        m = s["metric"]
        assert row["metric"] == m and row["score"] == s[f"{m}_mean"] and row["score_worst"] == s[f"{m}_worst"]
        assert (row["seed"], row["bytes_total"], row["sim_time_s"]) == (s["seed"], s["bytes_total"], s["sim_time_s"])
        assert row["partition.dataset"] == s["partition"]["dataset"]
        assert row["partition.partition"] == s["partition"]["partition"]
        for kind, b in s["bytes_by_kind"].items():
            assert row[f"bytes_by_kind.{kind}"] == b
        assert row["scenario_hash"] == scenario_hash(Path(row["path"]))


def test_only_seed_replicates_share_a_group(tree):
    df = p2pfl.load_runs(tree / "plain", tree / "reg")
    groups = {frozenset(_names(g["path"])) for _, g in df.groupby("group")}
    assert groups == {frozenset({"gossip-s1", "gossip-s2", "gossip-s3"}), frozenset({"gossip-lr-s1", "gossip-lr-s2"}),
                      frozenset({"local-s1"}), frozenset({"reg-s1", "reg-s2"})}
    by_name = {Path(p).name: h for p, h in zip(df["path"], df["scenario_hash"])}
    assert by_name["gossip-s1"] == by_name["gossip-s3"] != by_name["gossip-lr-s1"]  # lr differs, seed does not count
    assert df.groupby("group")["seed"].nunique().tolist() == df.groupby("group").size().tolist()


def test_cell_json_fields_become_columns_and_define_the_groups(tree):
    df = p2pfl.load_runs(tree / "study")
    assert len(df) == len(CELLS)
    assert "grid.training.lr" in df.columns and pd.api.types.is_float_dtype(df["grid.training.lr"])
    by_cell = df.set_index("cell")
    for cell, src, variant, grid, seed in CELLS:
        row = by_cell.loc[cell]
        assert (row["study"], row["variant"], row["seed"]) == ("lrs", variant, seed)
        assert row["grid.training.lr"] == grid["training.lr"]
        assert row["score"] == summary(tree / "plain" / src)["accuracy_mean"]  # the copied run's own numbers
    groups = {frozenset(g["cell"]) for _, g in df.groupby("group")}
    expected: dict[tuple, set[str]] = {}
    for cell, _, variant, grid, _ in CELLS:
        expected.setdefault((variant, json.dumps(grid, sort_keys=True)), set()).add(cell)
    assert groups == {frozenset(v) for v in expected.values()}


def test_a_grid_value_that_is_a_mapping_is_a_json_cell(tree, tmp_path):
    from tests.metrics.run_tree import write_cell

    part = {"kind": "iid"}
    write_cell(tree / "plain" / "gossip-s1", tmp_path / "c1", study="p", cell="c1", variant=None,
               grid={"data.partition": part}, seed=1)
    df = p2pfl.load_runs(tmp_path)
    assert df["grid.data.partition"].tolist() == [json.dumps(part, sort_keys=True)]
    assert df["variant"].isna().all()


def test_load_curves_is_the_long_form_of_the_score_curves(tree):
    c = p2pfl.load_curves(tree / "plain", tree / "reg")
    assert list(c.columns) == ["path", "metric", "round", "t", "value", "bytes", "bytes_per_device", "bytes_servers"]
    expected = 0
    for path, sub in c.groupby("path"):
        s = summary(Path(path))
        curve = s[f"{s['metric']}_curve"]
        expected += len(curve)
        assert sub["metric"].unique().tolist() == [s["metric"]]
        assert sub["round"].tolist() == [p["round"] for p in curve]
        assert sub["t"].tolist() == [p["t"] for p in curve]
        assert sub["value"].tolist() == [p[f"{s['metric']}_mean"] for p in curve]
        assert sub["bytes"].tolist() == [_bytes_by(Path(path), p["t"]) for p in curve]
        assert sub["bytes_per_device"].tolist() == [p["bytes_per_device"] for p in curve]
        assert sub["bytes_servers"].tolist() == [p["bytes_servers"] for p in curve]
    assert len(c) == expected
    assert pd.api.types.is_integer_dtype(c["round"]) and pd.api.types.is_integer_dtype(c["bytes"])
    assert (c.loc[c["path"].str.endswith("local-s1"), "bytes"] == 0).all()


def test_load_curves_over_time_is_the_long_form_of_the_fleet_over_time(tree):
    c = p2pfl.load_curves(tree / "plain", tree / "reg", over_time=True)
    assert list(c.columns) == ["path", "metric", "round", "t", "value", "bytes", "bytes_per_device", "bytes_servers"]
    expected = 0
    for path in find_runs(tree / "plain", tree / "reg"):
        s = summary(path)
        points = s.get(f"{s['metric']}_over_time") or []
        expected += len(points)
        sub = c[c["path"] == str(path)]
        assert sub["t"].tolist() == [p["t"] for p in points]
        assert sub["value"].tolist() == [p[f"{s['metric']}_mean"] for p in points]
        assert sub["bytes"].tolist() == [p["bytes_per_device"] * s["n_devices"] + p["bytes_servers"] for p in points]
    assert expected > 0 and len(c) == expected and c["round"].isna().all()


def test_load_nodes_is_the_long_form_of_the_per_device_figures(tree):
    nodes = p2pfl.load_nodes(tree / "plain", tree / "reg")
    assert list(nodes.columns) == ["path", "metric", "node", "value", "bytes_sent", "bytes_received", "compute_flops",
                                   "true_cluster", "cluster", "held_out", "samples"]
    assert not nodes["held_out"].any()
    total = 0
    for path, sub in nodes.groupby("path"):
        s = summary(Path(path))
        total += s["n_devices"]
        assert sub["node"].tolist() == list(range(s["n_devices"]))
        assert sub["value"].tolist() == s[f"{s['metric']}_per_node"]
        assert sub["bytes_sent"].tolist() == s["bytes_per_node"]
        assert sub["bytes_received"].tolist() == s["bytes_received_per_node"]
        assert sub["compute_flops"].tolist() == s["compute_flops_per_node"]
        assert sub["true_cluster"].tolist() == s["true_clusters"]
    assert len(nodes) == total


@pytest.mark.slow
def test_importing_p2pfl_does_not_import_pandas():
    code = ("import p2pfl, sys; assert callable(p2pfl.run); print('pandas' in sys.modules)\n"
            "p2pfl.load_runs; print('pandas' in sys.modules, p2pfl.load_runs.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # the loader imports pandas when it builds a table, not when it is named
    assert out.stdout.strip().splitlines() == ["False", "False p2pfl.metrics.runs"]


def test_a_diverged_model_leaves_the_run_without_a_score_and_says_where(tmp_path):
    """Gossip regression at lr 1 diverges: the run directory is still written (JSON has no NaN), the mean
    and worst are null, and the diverged devices are listed."""
    from tests.helpers import digits_scenario

    sc = digits_scenario({"name": "gossip", "rounds": 3}, n=4)
    sc["data"] = {"dataset": "synthetic_linear", "samples_per_client": 40,
                  "partition": {"kind": "parameter_shift", "n_clusters": 2, "n_features": 5}}
    sc["training"]["lr"] = 1.0
    result = p2pfl.run(sc, out=tmp_path / "run")
    s = summary(tmp_path / "run")
    assert s == result.summary
    assert s["diverged_nodes"] == [0, 1, 2, 3] and s["rmse_mean"] is None and s["rmse_worst"] is None
    assert all(s["rmse_per_node"][i] is None for i in s["diverged_nodes"])
    assert s["rmse_curve"][-1]["rmse_mean"] is None
    evals = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert any(e.get("diverged") for e in evals if e["kind"] == "eval")
