"""The results API the analysis reports stand on: ``scenario.*`` and ``timing.*`` columns of ``load_runs``,
``load_log`` and ``log_entries``, the ``samples`` column of ``load_nodes``, ``markdown_table`` and ``report_main``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

import p2pfl
from p2pfl.errors import UserError
from p2pfl.metrics.runs import load_log, load_nodes, load_runs, log_entries, scenario_hash
from p2pfl.metrics.tables import markdown_table, report_main
from tests.metrics.run_tree import summary


def _flat(d: dict, prefix: str) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_every_scenario_and_timing_field_is_a_column(tree):
    df = load_runs(tree / "plain", tree / "study")
    for _, row in df.iterrows():
        path = Path(row["path"])
        sc = _flat(yaml.safe_load((path / "scenario.yaml").read_text(encoding="utf-8")), "scenario.")
        for key, value in sc.items():
            if isinstance(value, list):  # a list is compact JSON text, as a grid value
                assert row[key] == json.dumps(value, sort_keys=True), key
            elif value is None:
                assert pd.isna(row[key]), key
            else:
                assert row[key] == value, key
        timing = json.loads((path / "timing.json").read_text(encoding="utf-8"))
        assert {k: row[f"timing.{k}"] for k in timing} == timing
    assert pd.api.types.is_integer_dtype(df["scenario.protocol.rounds"])
    assert (df["scenario.seed"] == df["seed"]).all()
    assert list(df.columns[-5:]) == ["score", "score_worst", "t90_s", "scenario_hash", "group"]
    assert df["scenario_hash"].tolist() == [scenario_hash(p) for p in df["path"]]


def test_git_revision_is_the_manifests(tree, tmp_path):
    df = load_runs(tree / "plain")
    for _, row in df.iterrows():
        manifest = json.loads((Path(row["path"]) / "manifest.json").read_text(encoding="utf-8"))
        assert row["git_revision"] == manifest["git_revision"]
    shutil.copytree(tree / "plain" / "gossip-s1", tmp_path / "bare")
    (tmp_path / "bare" / "manifest.json").unlink()
    assert load_runs(tmp_path)["git_revision"].tolist() == [None]


def test_a_run_without_scenario_or_timing_file_has_those_columns_missing(tree, tmp_path):
    shutil.copytree(tree / "plain" / "gossip-s1", tmp_path / "bare")
    (tmp_path / "bare" / "scenario.yaml").unlink()
    (tmp_path / "bare" / "timing.json").unlink()
    shutil.copytree(tree / "plain" / "gossip-s2", tmp_path / "full")
    df = load_runs(tmp_path).set_index(pd.Index(["bare", "full"]))
    assert pd.isna(df.loc["bare", "scenario.protocol.name"]) and df.loc["full", "scenario.protocol.name"] == "gossip"
    assert pd.isna(df.loc["bare", "timing.wall_s"]) and df.loc["full", "timing.wall_s"] > 0
    assert pd.isna(df.loc["bare", "scenario_hash"])


def test_load_log_is_the_long_form_of_one_log(tree):
    log = load_log(tree / "plain", name="consensus_distance")
    assert list(log.columns[:4]) == ["path", "t", "round", "value"]
    n = 0
    for path in p2pfl.load_runs(tree / "plain")["path"]:
        entries = summary(Path(path)).get("logs", {}).get("consensus_distance", [])
        sub = log[log["path"] == path]
        assert sub[["t", "round", "value"]].to_dict("records") == [
            {k: e[k] for k in ("t", "round", "value")} for e in entries]
        n += len(entries)
    assert len(log) == n > 0


def test_log_entries_are_the_logs_rows_per_run_in_order(tree):
    log = load_log(tree / "plain", name="consensus_distance")
    entries = log_entries(tree / "plain", name="consensus_distance")
    assert list(entries) == list(dict.fromkeys(log["path"]))  # runs without the log have no key
    for path, records in entries.items():
        assert records == log[log["path"] == path].to_dict("records")
    assert log_entries(tree / "plain", name="no_such_log") == {}


def test_load_log_keeps_list_and_mapping_values_and_extra_fields(tree, tmp_path):
    run = shutil.copytree(tree / "plain" / "gossip-s1", tmp_path / "r")
    s = summary(run)
    s["logs"]["rollout_success"] = [
        {"t": 1.0, "value": 0.5, "round": 2, "suite": "object", "per_task": {"a": 1.0, "b": 0.0}},
        {"t": 1.0, "value": 0.0, "round": 2, "suite": "goal", "cached": True}]
    s["logs"]["federation_labels"] = [{"t": 0.5, "value": [0, 0, 1, 1], "round": 1}]
    (run / "summary.json").write_text(json.dumps(s), encoding="utf-8")
    log = load_log(tmp_path, name="rollout_success")
    assert list(log.columns) == ["path", "t", "round", "value", "suite", "per_task", "cached"]
    assert log["per_task"].iloc[0] == {"a": 1.0, "b": 0.0} and pd.isna(log["per_task"].iloc[1])
    assert log["suite"].tolist() == ["object", "goal"] and pd.isna(log["cached"].iloc[0])
    assert load_log(tmp_path, name="federation_labels")["value"].tolist() == [[0, 0, 1, 1]]
    empty = load_log(tmp_path, name="no_such_log")
    assert empty.empty and list(empty.columns) == ["path", "t", "round", "value"]


def test_load_nodes_gives_each_device_its_training_samples(tree):
    nodes = load_nodes(tree / "plain")
    for path, sub in nodes.groupby("path"):
        assert sub["samples"].tolist() == summary(Path(path))["partition"]["samples_per_device"]


def test_markdown_table_from_rows_and_from_a_dataframe():
    rows = [["a", 1, 0.5], ["b", None, float("nan")]]
    assert markdown_table(rows, ["name", "n", "x"]) == [
        "| name | n | x |", "|---|---|---|", "| a | 1 | 0.5 |", "| b | — | — |"]
    df = pd.DataFrame(rows, columns=["name", "n", "x"])
    assert markdown_table(df, align="lrc", na="n/a") == [
        "| name | n | x |", "|---|---:|:---:|", "| a | 1.0 | 0.5 |", "| b | n/a | n/a |"]
    assert markdown_table([], ["only"]) == ["| only |", "|---|"]
    assert markdown_table([["", "x"]], ["", "K=2"]) == ["|  | K=2 |", "|---|---|", "|  | x |"]


def test_markdown_table_refuses_what_it_cannot_write():
    with pytest.raises(ValueError, match="a row has 1 cells for a header of 2"):
        markdown_table([["a"]], ["x", "y"])
    with pytest.raises(ValueError, match="needs a header"):
        markdown_table([["a"]])
    with pytest.raises(ValueError, match="align must be made of the letters l, r and c; got 'x'"):
        markdown_table([["a"]], ["x"], align="x")


def test_report_main_passes_dirs_md_and_switches(tmp_path, capsys):
    calls = []

    def write(dirs, md, **switches):
        calls.append((dirs, md, switches))

    doc = "A report.\n\nMore words."
    assert report_main(write, doc, tmp_path / "r.md", ["a", "b"], flags={"no-statistics": "skip"}) == 0
    assert calls[-1] == ([Path("a"), Path("b")], tmp_path / "r.md", {"no_statistics": False})
    assert report_main(write, doc, "x.md", ["a", "--md", "y.md", "--no-statistics"], flags={"no-statistics": ""}) == 0
    assert calls[-1] == ([Path("a")], Path("y.md"), {"no_statistics": True})

    def fails(dirs, md):
        raise UserError("runs/x: not a run directory")

    assert report_main(fails, doc, "x.md", ["runs/x"]) == 2
    assert capsys.readouterr().err == "error: runs/x: not a run directory\n"
    with pytest.raises(SystemExit):
        report_main(write, doc, "x.md", [])  # no run directories: argparse's usage error


def test_report_main_makes_the_reports_folder_and_leaves_none_behind_on_an_error(tmp_path):
    def write(dirs, md):
        md.write_text("# report\n")
        (md.parent / "figure.png").write_bytes(b"png")

    def fails(dirs, md):
        (md.parent / "figure.png").write_bytes(b"half")
        raise UserError("runs/x: not a run directory")

    assert report_main(write, "", "x.md", ["runs", "--md", str(tmp_path / "a" / "b" / "r.md")]) == 0
    assert (tmp_path / "a" / "b" / "r.md").read_text() == "# report\n"
    assert report_main(fails, "", "x.md", ["runs", "--md", str(tmp_path / "c" / "d" / "r.md")]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # c/ (made for the report) is gone
    assert report_main(fails, "", "x.md", ["runs", "--md", str(tmp_path / "a" / "r.md")]) == 2
    assert (tmp_path / "a" / "b" / "r.md").is_file()  # a folder that was there is kept
