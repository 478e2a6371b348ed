"""`p2pfl report` over seeds: groups, mean/sd/95% CI recomputed from the summary files, metrics kept apart."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from scipy import stats

import p2pfl
from p2pfl.cli import main
from p2pfl.metrics.report import band, build_figure, ci95, group_labels, group_stats, report_table
from tests.metrics.run_tree import CELLS, summary, write_cell

#: summary field -> CSV stem ({m}: the run's metric)
FIELDS = {"{m}_mean": "{m}", "{m}_worst": "{m}_worst", "bytes_total": "bytes_total",
          "messages_total": "messages_total", "sim_time_s": "sim_time_s", "compute_flops_total": "compute_flops_total"}
LEAD = ["group", "study", "variant", "scenario", "dataset", "partition", "n_devices", "protocol", "metric", "n",
        "seeds", "paths", "scenario_hashes"]


def _expected(values: list[float]) -> tuple[float, float, float, float]:
    """mean, sd (ddof 1), t-based 95% interval, recomputed with numpy/scipy."""
    v = np.asarray(values, dtype=float)
    mean = float(v.mean())
    if len(v) < 2:
        return mean, math.nan, math.nan, math.nan
    sd = float(v.std(ddof=1))
    half = float(stats.t.ppf(0.975, len(v) - 1)) * sd / math.sqrt(len(v))
    return mean, sd, mean - half, mean + half


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12)


def _check_group(row: dict, get) -> None:
    """Every statistic of a group row (``get(name)`` reads a column) equals the recomputation from its runs."""
    runs = [summary(Path(p)) for p in str(get("paths")).split(";")]
    m = runs[0]["metric"]
    assert {s["metric"] for s in runs} == {m} == {get("metric")}
    assert int(get("n")) == len(runs)
    assert str(get("seeds")) == ";".join(str(s) for s in sorted(s["seed"] for s in runs))
    for field, stem in FIELDS.items():
        expected = _expected([s[field.format(m=m)] for s in runs])
        got = [float(get(f"{stem.format(m=m)}_{k}")) for k in ("mean", "sd", "ci95_low", "ci95_high")]
        assert all(_close(g, e) for g, e in zip(got, expected)), (row, field, got, expected)


def _tables(text: str) -> list[tuple[list[str], list[dict[str, str]]]]:
    """Each markdown table in ``text``: (header, rows as dicts)."""
    out, current = [], None
    for line in text.splitlines():
        if line.startswith("|---"):
            continue
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if current is None:
                current = (cells, [])
                out.append(current)
            else:
                current[1].append(dict(zip(current[0], cells)))
        else:
            current = None
    return out


@pytest.mark.slow
def test_group_statistics_equal_a_recomputation_from_the_summaries(tree):
    g = group_stats(p2pfl.load_runs(tree / "plain", tree / "reg"))
    assert sorted(frozenset(Path(p).name for p in r.split(";")) for r in g["paths"]) == sorted([
        frozenset({"gossip-lr-s1", "gossip-lr-s2"}), frozenset({"gossip-s1", "gossip-s2", "gossip-s3"}),
        frozenset({"local-s1"}), frozenset({"reg-s1", "reg-s2"})], key=sorted)
    for _, row in g.iterrows():
        _check_group(row.to_dict(), row.get)
    three = g[g["n"] == 3].iloc[0]
    assert three["seeds"] == "1;2;3" and three["protocol"] == "gossip" and three["dataset"] == "digits"
    assert three["partition"] == summary(tree / "plain" / "gossip-s1")["partition"]["partition"]


def test_a_group_of_one_run_has_no_interval(tree, capsys):
    assert main(["report", str(tree / "plain" / "local-s1")]) == 0
    [(_, rows)] = _tables(capsys.readouterr().out)
    s = summary(tree / "plain" / "local-s1")
    assert len(rows) == 1
    row = rows[0]
    # nothing tells it apart from another group: named by its scenario and protocol
    assert (row["group"], row["n"], row["seeds"], row["metric"]) == (f"{s['scenario']} (local)", "1", str(s["seed"]),
                                                                     "accuracy")
    assert row["accuracy mean"] == f"{s['accuracy_mean']:.4f}"
    assert row["accuracy sd"] == row["accuracy 95% CI"] == "—"
    assert row["bytes total"] == f"{s['bytes_total']:,}" == "0"
    g = group_stats(p2pfl.load_runs(tree / "plain" / "local-s1"))
    assert g["n"].tolist() == [1] and math.isnan(g["accuracy_sd"][0]) and math.isnan(g["accuracy_ci95_low"][0])


@pytest.mark.slow
def test_report_writes_markdown_csv_and_png(tree, tmp_path, capsys):
    md, table, png = tmp_path / "r.md", tmp_path / "r.csv", tmp_path / "r.png"
    assert main(["report", str(tree / "plain"), str(tree / "reg"), "--md", str(md), "--csv", str(table),
                 "--out", str(png)]) == 0
    out = capsys.readouterr().out
    assert md.read_text(encoding="utf-8").strip() in out
    assert f"wrote {table}" in out and f"wrote {png}" in out
    with open(table, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = list(reader.fieldnames or [])
        rows = list(reader)
    assert header[:len(LEAD)] == LEAD
    stats_cols = [f"{stem}_{k}" for stem in ("accuracy", "accuracy_worst", "rmse", "rmse_worst", "bytes_total",
                                             "messages_total", "compute_flops_total", "sim_time_s", "t90_s")
                  for k in ("mean", "sd", "ci95_low", "ci95_high")]
    assert header[len(LEAD):] == stats_cols
    assert len(rows) == 4
    for row in rows:
        _check_group(row, lambda k, row=row: row[k] if row[k] != "" else "nan")
        other = "rmse" if row["metric"] == "accuracy" else "accuracy"
        assert row[f"{other}_mean"] == ""  # a row fills only its own metric's columns
    assert mpimg.imread(png).shape[1] > 500


def test_two_metrics_are_kept_apart(tree, capsys):
    assert main(["report", str(tree / "plain"), str(tree / "reg")]) == 0
    text = capsys.readouterr().out
    tables = _tables(text)
    assert len(tables) == 2
    (acc_head, acc_rows), (rmse_head, rmse_rows) = tables
    assert "accuracy mean" in acc_head and not [h for h in acc_head if "RMSE" in h]
    assert "RMSE mean" in rmse_head and not [h for h in rmse_head if "accuracy" in h]
    assert {r["metric"] for r in acc_rows} == {"accuracy"} and {r["metric"] for r in rmse_rows} == {"rmse"}
    assert [r["dataset"] for r in rmse_rows] == ["synthetic_linear"]
    assert "### accuracy" in text and "### RMSE" in text
    reg = [summary(tree / "reg" / f"reg-s{s}") for s in (1, 2)]
    assert rmse_rows[0]["RMSE mean"] == f"{np.mean([s['rmse_mean'] for s in reg]):.4f}"
    fig = build_figure(p2pfl.load_runs(tree / "plain", tree / "reg"), p2pfl.load_curves(tree / "plain", tree / "reg"))
    assert [ax.get_ylabel() for ax in fig.axes] == ["mean device accuracy"] * 2 + \
        ["mean device RMSE (lower is better)"] * 2
    # one line per group, never a mixed axis; local sent nothing: off the log bytes axis, named under the figure
    assert [len(ax.get_lines()) for ax in fig.axes] == [3, 2, 1, 1]
    assert [t.get_text() for t in fig.texts] == [
        "Left out: accuracy vs bytes, groups that sent nothing: local, lr=0.05 (n=1)."]


def test_different_datasets_of_one_metric_are_flagged(tree, capsys):
    assert main(["report", str(tree / "plain"), str(tree / "other")]) == 0
    text = capsys.readouterr().out
    [(_, rows)] = _tables(text)
    assert {r["dataset"] for r in rows} == {"digits", "synthetic_logistic"}
    assert "different datasets (digits, synthetic_logistic)" in text
    assert main(["report", str(tree / "plain")]) == 0
    assert "different datasets" not in capsys.readouterr().out


def test_study_cells_are_grouped_by_variant_and_grid(tree, capsys):
    assert main(["report", str(tree / "study")]) == 0
    [(head, rows)] = _tables(capsys.readouterr().out)
    assert head[:4] == ["group", "study", "variant", "grid.training.lr"]
    got = sorted((r["variant"], r["grid.training.lr"], r["n"], r["seeds"]) for r in rows)
    expected: dict[tuple, list[int]] = {}
    for _, _, variant, grid, seed in CELLS:
        expected.setdefault((variant, str(grid["training.lr"])), []).append(seed)
    assert got == sorted((v, lr, str(len(s)), ", ".join(map(str, sorted(s)))) for (v, lr), s in expected.items())
    assert {r["study"] for r in rows} == {"lrs"}
    runs = p2pfl.load_runs(tree / "study")
    for _, row in group_stats(runs).iterrows():
        _check_group(row.to_dict(), row.get)
    fig = build_figure(runs, p2pfl.load_curves(tree / "study"))
    labels = sorted(t.get_text() for t in fig.axes[0].get_legend().get_texts())
    assert labels == sorted(f"{v}, lr={lr} (n={len(s)})" for (v, lr), s in expected.items())
    assert not [lab for lab in labels if any(cell in lab for cell, *_ in CELLS)]  # not folder names


def test_figure_draws_per_round_means_with_shaded_intervals(tree):
    plain = tree / "plain"
    runs, curves = p2pfl.load_runs(plain), p2pfl.load_curves(plain)
    fig = build_figure(runs, curves)
    ax_t, ax_b = fig.axes
    names = ["gossip-s1", "gossip-s2", "gossip-s3"]
    pts = [summary(plain / n)["accuracy_curve"] for n in names]
    label = next(t.get_text() for t in ax_t.get_legend().get_texts() if "(n=3)" in t.get_text())
    line = next(ln for ln in ax_t.get_lines() if ln.get_label() == label)
    assert np.allclose(line.get_xdata(), np.mean([[p["t"] for p in c] for c in pts], axis=0))
    assert np.allclose(line.get_ydata(), np.mean([[p["accuracy_mean"] for p in c] for c in pts], axis=0))
    by_round = curves[curves["path"].isin([str(plain / n) for n in names])].groupby("round")["bytes"].mean()
    line_b = next(ln for ln in ax_b.get_lines() if ln.get_label() == label)
    assert np.allclose(line_b.get_xdata(), by_round.to_numpy())
    n_multi = int((group_stats(runs)["n"] > 1).sum())
    assert n_multi == 2
    assert len([c for c in ax_t.collections if isinstance(c, PolyCollection)]) == n_multi  # no band for n = 1


def test_mixed_scenarios_and_repeated_seeds_in_a_group_are_noted(tree, tmp_path):
    plain = tree / "plain"
    write_cell(plain / "gossip-s1", tmp_path / "bad" / "a", study="s", cell="a", variant="v", grid={"k": 1}, seed=1)
    write_cell(plain / "gossip-lr-s2", tmp_path / "bad" / "b", study="s", cell="b", variant="v", grid={"k": 1}, seed=2)
    write_cell(plain / "gossip-s1", tmp_path / "bad" / "c", study="s", cell="c", variant="v", grid={"k": 1}, seed=1)
    text = report_table(p2pfl.load_runs(tmp_path / "bad"))
    assert "mixes runs whose scenarios differ beyond the seed" in text
    assert "repeats a seed (1, 1, 2)" in text
    clean = report_table(p2pfl.load_runs(tree / "study"))
    assert "mixes runs" not in clean and "repeats a seed" not in clean


# --- archived cells (p2pfl sweep --archive): no event stream -------------------------------------


def _archive(tree, root: Path) -> Path:
    """The tree's study runs as a sweep names its cells (``cell_id``), archived as ``--archive`` keeps them."""
    from p2pfl.study.archive import archive_cell
    from p2pfl.study.spec import cell_id

    for _, src, variant, grid, seed in CELLS:
        cid = cell_id(variant, grid, seed)
        write_cell(tree / "plain" / src, root / "cells" / cid, study="lrs", cell=cid, variant=variant, grid=grid,
                   seed=seed)
        assert archive_cell(root / "cells" / cid, root / "archive")
    assert not list((root / "archive").glob("*/events.jsonl"))
    return root / "archive"


def test_report_on_archived_cells_draws_bytes_from_the_curve_points_and_names_each_group(tree, tmp_path, capsys):
    archive = _archive(tree, tmp_path)
    png, md = tmp_path / "a.png", tmp_path / "a.md"
    assert main(["report", str(archive), "--out", str(png), "--md", str(md)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and f"wrote {png}" in out
    assert mpimg.imread(png).shape[1] > 300
    [(_, rows)] = _tables(md.read_text(encoding="utf-8"))
    # one name per group, the legend's: what differs between the groups, never the list of its runs
    assert sorted(r["group"] for r in rows) == ["gossip, lr=0.05", "gossip, lr=0.2", "local, lr=0.05"]
    runs = p2pfl.load_runs(archive)
    fig = build_figure(runs, p2pfl.load_curves(archive))
    _, ax_b = fig.axes  # no events.jsonl: the bytes come from the summary's curve points
    assert ax_b.get_xlabel() == "bytes sent by the fleet (log; mean over seeds)" and len(ax_b.get_lines()) == 2
    assert [t.get_text() for t in fig.texts] == [
        "Left out: accuracy vs bytes, groups that sent nothing: local, lr=0.05 (n=1)."]
    # the same bytes as the event stream of the runs the cells were copied from, evaluation by evaluation
    plain = tree / "plain"
    line = next(ln for ln in ax_b.get_lines() if ln.get_label() == "gossip, lr=0.05 (n=2)")
    by_round = p2pfl.load_curves(plain / "gossip-s1", plain / "gossip-s2").groupby("round")["bytes"].mean()
    assert by_round.notna().all() and np.allclose(line.get_xdata(), by_round.to_numpy(), rtol=0, atol=1e-6)


def _without_point_bytes(archive: Path) -> Path:
    """The archive's summaries as a run written before the curve points carried the traffic."""
    import json

    for s in archive.glob("*/summary.json"):
        data = json.loads(s.read_text(encoding="utf-8"))
        data["accuracy_curve"] = [{k: v for k, v in p.items() if k not in ("bytes_per_device", "bytes_servers")}
                                  for p in data["accuracy_curve"]]
        s.write_text(json.dumps(data), encoding="utf-8")
    return archive


def test_cells_without_any_traffic_record_beside_full_runs_keep_the_bytes_panel_of_the_runs_that_have_it(tree,
                                                                                                         tmp_path):
    archive = _without_point_bytes(_archive(tree, tmp_path))
    fig = build_figure(p2pfl.load_runs(archive), p2pfl.load_curves(archive))
    [ax] = fig.axes  # score vs time only: no run has the bytes it sent by each evaluation
    assert ax.get_xlabel() == "simulated time (s), mean over seeds" and len(ax.get_lines()) == 3
    assert [t.get_text() for t in fig.texts] == [
        "Left out: accuracy vs bytes: no run has the bytes it sent by each evaluation (no events.jsonl, and curve "
        "points without bytes_per_device: written before they carried it)."]
    dirs = (archive, tree / "plain")
    fig = build_figure(p2pfl.load_runs(*dirs), p2pfl.load_curves(*dirs))
    ax_t, ax_b = fig.axes
    assert ax_b.get_xscale() == "log"
    assert len(ax_t.get_lines()) == 3 + 3 and len(ax_b.get_lines()) == 2  # plain's gossip groups (local sent nothing)
    # a group's colour is the same in both panels, and the legend (beside the panels or not) names every group
    colours = {ln.get_label(): ln.get_color() for ln in ax_t.get_lines()}
    assert all(colours[ln.get_label()] == ln.get_color() for ln in ax_b.get_lines())
    assert len(ax_t.get_legend().get_texts()) == 6
    mixed = (archive, tree / "reg")  # accuracy without bytes, RMSE with: one row of one panel, one of two
    fig = build_figure(p2pfl.load_runs(*mixed), p2pfl.load_curves(*mixed))
    assert [ax.get_ylabel() for ax in fig.axes] == ["mean device accuracy"] + ["mean device RMSE (lower is better)"] * 2
    assert fig.texts[0].get_text().startswith("Left out: accuracy vs bytes: no run has the bytes")


def test_runs_without_any_score_curve_are_refused_for_a_figure_before_anything_is_written(tree, tmp_path, capsys):
    import json

    run = tmp_path / "runs" / "flat"
    write_cell(tree / "plain" / "local-s1", run, study="s", cell="seed1", variant=None, grid={}, seed=1)
    data = summary(run)
    data["accuracy_curve"] = []
    (run / "summary.json").write_text(json.dumps(data), encoding="utf-8")
    md, png = tmp_path / "r.md", tmp_path / "r.png"
    assert main(["report", str(tmp_path / "runs"), "--md", str(md), "--out", str(png)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("p2pfl: error: nothing to plot: no run has a score curve") and err.count("\n") == 1
    assert not md.exists() and not png.exists()
    assert main(["report", str(tmp_path / "runs")]) == 0  # the table alone: fine
    [(_, [row])] = _tables(capsys.readouterr().out)
    assert row["group"] == "s"  # a study without variants or grid: the group is the study


def test_band_is_the_interval_or_the_mean_alone() -> None:
    values = [0.5, 0.7, 0.6]
    mean, _, low, high = ci95(values)
    assert band(values) == (mean, low, high) and low < mean < high
    assert band([0.5]) == (0.5, 0.5, 0.5)  # one seed: no interval, the band is its line
    assert all(math.isnan(x) for x in band([]))


# --- labels: what differs between the groups, in short form --------------------------------------------------------

STATIC = {"churn": {"offline": 0.0, "cycle_s": 1000.0}}
CHURN = {"churn": {"offline": 0.3, "cycle_s": 1000.0, "dist": "weibull", "shape": 1.5}}
ROTATION = {"kind": "rotation", "angles": [0, 90, 180, 270]}


def _confirm_like(tree, root: Path, studies: tuple[str, ...] = ("confirm",)) -> Path:
    """Cells laid out as headline_n1000_confirm's: variants x a partition every group shares x two dynamics."""
    from p2pfl.study.spec import cell_id

    for study in studies:
        for variant, src in (("ifca_1g", "gossip-s1"), ("local", "local-s1")):
            for dynamics in (STATIC, CHURN):
                for seed in (3, 4):
                    grid = {"data.partition": ROTATION, "dynamics": dynamics}
                    cid = cell_id(variant, grid, seed)
                    write_cell(tree / "plain" / src, root / study / cid, study=study, cell=cid, variant=variant,
                               grid=grid, seed=seed)
    return root


def test_a_study_s_groups_are_named_by_the_fields_that_differ_between_them_only(tree, tmp_path):
    root = _confirm_like(tree, tmp_path)
    runs = p2pfl.load_runs(root)
    # the partition every group shares is left out; of the churn block, the field every group has tells them apart
    assert sorted(group_labels(runs).values()) == ["ifca_1g, churn.offline=0", "ifca_1g, churn.offline=0.3",
                                                   "local, churn.offline=0", "local, churn.offline=0.3"]
    fig = build_figure(runs, p2pfl.load_curves(root))
    assert sorted(t.get_text() for t in fig.axes[0].get_legend().get_texts()) == [
        "ifca_1g, churn.offline=0 (n=2)", "ifca_1g, churn.offline=0.3 (n=2)", "local, churn.offline=0 (n=2)",
        "local, churn.offline=0.3 (n=2)"]
    [(_, rows)] = _tables(report_table(runs))
    assert sorted(r["group"] for r in rows) == sorted(group_labels(runs).values())  # the table names them alike
    two = _confirm_like(tree, tmp_path / "two", ("confirm", "explore"))
    assert "explore, local, churn.offline=0.3" in group_labels(p2pfl.load_runs(two)).values()  # several studies


def test_runs_outside_a_study_are_named_by_what_differs_not_by_a_hash(tree):
    plain = tree / "plain"
    labels = group_labels(p2pfl.load_runs(plain / "gossip-s1", plain / "gossip-lr-s2"))
    assert sorted(labels.values()) == ["lr=0.05, seed 1", "lr=0.2, seed 2"]
    # the protocol by its name; the fields only gossip has (exchange, mode, ...) do not tell them apart further
    assert sorted(group_labels(p2pfl.load_runs(plain / "gossip-s1", plain / "local-s1")).values()) == ["gossip", "local"]
    assert sorted(group_labels(p2pfl.load_runs(plain)).values()) == ["gossip, lr=0.05", "gossip, lr=0.2",
                                                                       "local, lr=0.05"]  # groups of runs: no seed
    assert list(group_labels(p2pfl.load_runs(plain / "local-s1")).values()) == ["tiny (local)"]  # nothing differs


@pytest.mark.slow
def test_report_over_the_archived_confirmatory_headline_study_reads_at_a_glance(tmp_path, capsys):
    """``p2pfl report analysis/cells/headline/n1000_confirm --out``, as a user runs it: short legend labels and the
    accuracy vs bytes panel from the summaries' curve points (archived cells keep no events.jsonl)."""
    import json

    archive = Path(__file__).resolve().parents[2] / "analysis" / "cells" / "headline" / "n1000_confirm"
    png = tmp_path / "confirm.png"
    assert main(["report", str(archive), "--out", str(png)]) == 0
    assert f"wrote {png}" in capsys.readouterr().out and mpimg.imread(png).shape[1] > 1000
    runs, curves = p2pfl.load_runs(archive), p2pfl.load_curves(archive)
    fig = build_figure(runs, curves)
    ax_t, ax_b = fig.axes
    arms = ("ifca", "ifca_1g", "local", "oracle", "rnd_gossip_h1")
    assert sorted(t.get_text() for t in ax_b.get_legend().get_texts()) == sorted(
        f"{arm}, churn.offline={x} (n=5)" for arm in arms for x in ("0", "0.3"))
    assert len(ax_t.get_lines()) == 10 and len(ax_b.get_lines()) == 8  # local sends nothing: named under the figure
    assert [t.get_text() for t in fig.texts] == ["Left out: accuracy vs bytes, groups that sent nothing: "
                                                 "local, churn.offline=0 (n=5); local, churn.offline=0.3 (n=5)."]
    line = next(ln for ln in ax_b.get_lines() if ln.get_label() == "ifca, churn.offline=0 (n=5)")
    cells = sorted(archive.glob("ifca__*offline-0.0*"))
    points = [json.loads((c / "summary.json").read_text())["accuracy_curve"] for c in cells]
    fleet = np.mean([[p["bytes_per_device"] * 1000 + p["bytes_servers"] for p in pts] for pts in points], axis=0)
    assert len(cells) == 5 and np.allclose(line.get_xdata(), fleet, rtol=1e-12)
