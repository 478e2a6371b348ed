"""Compare runs grouped across seeds: markdown tables, a CSV of group statistics, curves with 95% intervals.

Reads only the outputs contract (``summary.json``, ``events.jsonl``, ``scenario.yaml``, and
``cell.json`` of a sweep), through ``p2pfl.metrics.runs.load_runs``: one code path for the
report and for notebooks. From the CLI: ``p2pfl report DIR [DIR ...] [--md F] [--csv F] [--out x.png]``,
each DIR a run directory or a folder of them.

Runs are grouped across seeds (``runs.py``: by study, variant and grid from ``cell.json``, else by
scenario, protocol, dataset and the scenario without its seed). Per group: ``n``, the seeds, and
for the score and the cost figures the mean, the standard deviation (ddof 1) and a t-based 95%
interval, mean ± t(0.975, n-1)·sd/√n (none when n = 1).

The report is metric-aware and never mixes metrics: groups scored by different metrics
(``accuracy``, ``rmse``, ``success``) get separate tables, separate CSV columns (``accuracy_mean``
vs ``rmse_mean``; a row fills its own metric's) and separate rows of plot panels; groups of one
metric on different datasets are flagged under their table.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from p2pfl.errors import UserError
from p2pfl.metrics.runs import Score, load_curves, load_runs, run_score, time_to_fraction
from p2pfl.metrics.summary import LOWER_IS_BETTER, metric_label

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Score", "run_score", "time_to_fraction", "QUANTITIES", "ci95", "band", "bands", "group_stats", "report_table",
           "write_csv", "build_figure", "report_figure", "write_report"]

#: load_runs column -> CSV stem (``{m}``: the group's metric) -> markdown header (``{label}``: the metric's)
QUANTITIES: tuple[tuple[str, str, str], ...] = (
    ("score", "{m}", "{label} mean"),
    ("score_worst", "{m}_worst", "{label} worst device"),
    ("ari", "ari", "ARI"),
    ("bytes_total", "bytes_total", "bytes total"),
    ("messages_total", "messages_total", "messages"),
    ("compute_flops_total", "compute_flops_total", "compute FLOPs"),
    ("sim_time_s", "sim_time_s", "sim time s"),
    ("t90_s", "t90_s", "t(90% final) s"),
)
_FORMATS = {"score": ".4f", "score_worst": ".4f", "ari": ".3f", "bytes_total": ",.0f", "messages_total": ",.0f",
            "compute_flops_total": ".3e", "sim_time_s": ".2f", "t90_s": ".2f"}
_KEYS = ("study", "variant")  # then grid.*, then _DESCRIBE
_LEGEND_INSIDE = 8  # groups of one metric a legend inside the score-vs-time panel holds
_DESCRIBE = (("scenario", "scenario"), ("partition.dataset", "dataset"), ("partition.partition", "partition"),
             ("n_devices", "n_devices"), ("protocol", "protocol"), ("metric", "metric"))


def ci95(values: Sequence[float]) -> tuple[float, float, float, float]:
    """(mean, sd, low, high) of ``values``: sd with ddof 1, t-based 95% interval; nan where n < 2 (mean: n < 1)."""
    n = len(values)
    if n == 0:
        return (math.nan,) * 4
    mean = float(statistics.mean(values))  # exact (fractions): three equal values have sd 0
    if n < 2:
        return mean, math.nan, math.nan, math.nan
    from scipy.stats import t

    sd = float(statistics.stdev(values))
    half = float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half


def band(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high) of ``ci95`` for a plotted band: low = high = mean where there is no interval (one value),
    all NaN for none."""
    mean, _, low, high = ci95(values)
    return (mean, mean, mean) if math.isnan(low) else (mean, low, high)


def bands(groups: Sequence[Sequence[float]]) -> tuple[list[float], list[float], list[float]]:
    """``band`` of each group of values (one per point of a plotted line): the means, the lows and the highs."""
    found = [band(values) for values in groups]
    return [b[0] for b in found], [b[1] for b in found], [b[2] for b in found]


def _values(col: Any) -> list[float]:
    return [float(v) for v in col if v is not None and not (isinstance(v, float) and math.isnan(v))]


def _joined(col: Any, sep: str = ",") -> Any:
    """The one value of a column within a group (several: joined, so a mix shows)."""
    vals = list(dict.fromkeys(v for v in col if not _missing(v)))
    if not vals:
        return None
    return vals[0] if len(vals) == 1 else sep.join(str(v) for v in vals)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def group_stats(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per group of ``load_runs(...)`` rows: the report's CSV (columns in README "Reports")."""
    import pandas as pd

    grid = [c for c in runs.columns if c.startswith("grid.")]
    quantities = [q for q in QUANTITIES if q[0] in runs.columns and runs[q[0]].notna().any()]
    rows = []
    for group, sub in runs.groupby("group", sort=False):
        metric = sub["metric"].iloc[0]
        seeds = [int(s) for s in sub["seed"] if not _missing(s)] if "seed" in sub else []
        row: dict[str, Any] = {"group": group}
        row.update({k: _joined(sub[k]) for k in (*_KEYS, *grid)})
        row.update({name: _joined(sub[col]) if col in sub else None for col, name in _DESCRIBE})
        row.update({"n": len(sub), "seeds": ";".join(str(s) for s in sorted(seeds)),
                    "paths": ";".join(sub["path"]), "scenario_hashes": _joined(sub["scenario_hash"], ";")})
        for col, stem, _ in quantities:
            name = stem.format(m=metric)
            mean, sd, low, high = ci95(_values(sub[col]))
            row.update({f"{name}_mean": mean, f"{name}_sd": sd, f"{name}_ci95_low": low, f"{name}_ci95_high": high})
        rows.append(row)
    df = pd.DataFrame(rows)
    stats = [c for c in df.columns if c.endswith(("_mean", "_sd", "_ci95_low", "_ci95_high"))]
    scores = [f"{stem.format(m=m)}_{s}" for m in dict.fromkeys(df["metric"]) for _, stem, _ in QUANTITIES[:2]
              for s in ("mean", "sd", "ci95_low", "ci95_high")]
    first = [c for c in df.columns if c not in stats] + [c for c in scores if c in df.columns]
    return df[first + [c for c in stats if c not in first]]


def _fmt(x: Any, spec: str) -> str:
    return "n/a" if _missing(x) else format(x, spec)


def _pm(mean: Any, sd: Any, spec: str) -> str:
    """``mean ± sd`` (just the mean when there is no sd: one run)."""
    if _missing(mean):
        return "n/a"
    return format(mean, spec) if _missing(sd) else f"{format(mean, spec)} ± {format(sd, '.1e' if 'e' in spec else spec)}"


def _group_names(runs: pd.DataFrame, groups: pd.DataFrame) -> dict[str, str]:
    """A short name per group for the table: a sweep's cell id without its seed (the study's own name for
    the group; the study's name when the cells differ only by seed), else the legend's "scenario (protocol)"."""
    names = {g: label.rsplit(" (n=", 1)[0] for g, label in _labels(groups).items()}
    if "cell" not in runs.columns:
        return names
    for group, sub in runs.groupby("group", sort=False):
        cells = [c for c in sub["cell"] if not _missing(c)]
        stems = {re.sub(r"(^|__)seed\d+$", "", str(c)) for c in cells}
        if cells and len(stems) == 1:  # one stem (a long id shortened to a digest has none: keep the label)
            stem = stems.pop()
            names[group] = stem or str(sub["study"].iloc[0])
    return names


def _table(groups: pd.DataFrame, metric: str, names: dict[str, str]) -> list[str]:
    label = metric_label(metric)
    keys = [k for k in (*_KEYS, *(c for c in groups.columns if c.startswith("grid."))) if groups[k].notna().any()]
    quantities = [q for q in QUANTITIES if f"{q[1].format(m=metric)}_mean" in groups.columns
                  and groups[f"{q[1].format(m=metric)}_mean"].notna().any()]
    head = ["group", *keys, "scenario", "dataset", "partition", "devices", "protocol", "metric", "n", "seeds",
            f"{label} mean", f"{label} sd", f"{label} 95% CI"]
    head += [h.format(label=label) for col, _, h in quantities if col != "score"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, g in groups.iterrows():
        cells = [names[g["group"]], *("—" if _missing(g[k]) else str(g[k]) for k in keys)]
        cells += [str(g[c]) if not _missing(g[c]) else "n/a"
                  for c in ("scenario", "dataset", "partition", "n_devices", "protocol", "metric")]
        cells += [str(g["n"]), g["seeds"].replace(";", ", ") or "n/a"]
        for col, stem, _ in quantities:
            name = stem.format(m=metric)
            mean, sd, lo, hi = (g[f"{name}_{s}"] for s in ("mean", "sd", "ci95_low", "ci95_high"))
            spec = _FORMATS[col]
            if col == "score":
                cells += [_fmt(mean, spec), "—" if _missing(sd) else format(sd, spec),
                          "—" if _missing(lo) else f"[{format(lo, spec)}, {format(hi, spec)}]"]
            else:
                cells.append(_pm(mean, sd, spec))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def report_table(runs: pd.DataFrame) -> str:
    """Markdown: one table per metric (groups across seeds), with notes on what is not comparable."""
    groups = group_stats(runs)
    names = _group_names(runs, groups)
    metrics = list(dict.fromkeys(groups["metric"]))
    lines: list[str] = []
    for metric in metrics:
        sub = groups[groups["metric"] == metric]
        if len(metrics) > 1:
            lines += [f"### {metric_label(metric)}", ""]
        lines += _table(sub, metric, names)
        notes = []
        datasets = list(dict.fromkeys(d for v in sub["dataset"] for d in ("n/a" if _missing(v) else str(v)).split(",")))
        if len(datasets) > 1:
            notes.append(f"Note: these groups use different datasets ({', '.join(datasets)}); "
                         "their scores are not comparable.")
        if metric in LOWER_IS_BETTER:
            notes.append(f"{metric_label(metric)}: lower is better (the worst device is the highest; "
                         "t(90% final) = first time the mean is at most final / 0.9).")
        for _, g in sub.iterrows():
            name = names[g["group"]]
            if g["scenario_hashes"] and ";" in str(g["scenario_hashes"]):
                notes.append(f"Note: group {name} mixes runs whose scenarios differ beyond the seed.")
            seeds = g["seeds"].split(";") if g["seeds"] else []
            if len(set(seeds)) < len(seeds):
                notes.append(f"Note: group {name} repeats a seed ({g['seeds'].replace(';', ', ')}): the same run twice?")
        lines += ["", *notes] if notes else []
        lines.append("")
    if len(metrics) > 1:
        lines.append(f"Runs scored by different metrics ({', '.join(metrics)}) are in separate tables and plot "
                     "rows, and in separate CSV columns; they are never averaged together.")
    lines.append("Groups: runs that differ only by seed. mean, sd (ddof 1) over a group's runs; "
                 "95% CI = mean ± t(0.975, n-1)·sd/√n (— for n = 1); other columns: mean ± sd.")
    return "\n".join(lines)


def write_csv(runs: pd.DataFrame, out: str | Path) -> Path:
    """Write ``group_stats(runs)`` to the CSV ``out`` (one row per group; empty cell = not available)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    group_stats(runs).to_csv(out, index=False)
    return out


def _labels(groups: pd.DataFrame) -> dict[str, str]:
    """Legend label per group: study/variant and grid values for sweep cells, scenario (protocol) otherwise."""
    grid = [c for c in groups.columns if c.startswith("grid.")]
    tails = [c.rsplit(".", 1)[-1] for c in grid]
    short = {c: (t if tails.count(t) == 1 else c[len("grid."):]) for c, t in zip(grid, tails)}
    several_studies = groups["study"].nunique() > 1
    datasets = groups.groupby("metric")["dataset"].nunique()
    labels: dict[str, str] = {}
    for _, g in groups.iterrows():
        if not _missing(g["study"]):
            parts = [str(g["study"])] if several_studies or _missing(g["variant"]) else []
            parts += [] if _missing(g["variant"]) else [str(g["variant"])]
            parts += [f"{short[c]}={g[c]}" for c in grid if not _missing(g[c])]
            label = ", ".join(parts)
        else:
            label = f"{g['scenario']} ({g['protocol']})"
        if datasets[g["metric"]] > 1:
            label += f", {g['dataset']}"
        labels[g["group"]] = label
    seen: dict[tuple[str, str], int] = {}
    for _, g in groups.iterrows():
        seen[(g["metric"], labels[g["group"]])] = seen.get((g["metric"], labels[g["group"]]), 0) + 1
    for _, g in groups.iterrows():  # same label for two groups of one metric: tell them apart
        if seen[(g["metric"], labels[g["group"]])] > 1 and g["scenario_hashes"]:
            labels[g["group"]] += f" [{str(g['scenario_hashes'])[:6]}]"
    return {k: f"{v} (n={n})" for (k, v), n in zip(labels.items(), groups["n"])}


def _curve_rows(merged: pd.DataFrame, groups: pd.DataFrame, metric: str) -> dict[str, list[tuple]]:
    """Group -> per evaluated round (mean t, mean bytes or nan, mean score, 95% CI low, high), over its runs."""
    out: dict[str, list[tuple]] = {}
    for group in groups.loc[groups["metric"] == metric, "group"]:
        pts = merged[merged["group"] == group]
        if pts.empty:
            continue
        key = pts["round"] if pts["round"].notna().all() else pts.groupby("path").cumcount()
        rows = []
        for _, at in pts.groupby(key, sort=True):
            mean, _sd, lo, hi = ci95(_values(at["value"]))
            b = _values(at["bytes"])
            rows.append((math.fsum(at["t"]) / len(at), max(math.fsum(b) / len(b), 1.0) if b else math.nan,
                         mean, lo, hi))
        out[group] = rows
    return out


def build_figure(runs: pd.DataFrame, curves: pd.DataFrame) -> Any:
    """A matplotlib Figure: per metric a row of two panels, score vs simulated time and vs bytes.

    Each group is one line: per evaluated round, the mean over its runs of the score, of the time
    and of the bytes sent by then, with the score's t-based 95% interval shaded (runs aligned by
    round; no band where a round has one run). Metrics never share an axis.

    A panel without data is left out, with a note under the figure: the bytes panel when no run has
    its event stream (``events.jsonl``; archived cells keep none), a metric's row when none of its
    runs has a score curve. Raises UserError when nothing at all can be drawn.
    """
    from matplotlib.figure import Figure

    groups = group_stats(runs)
    labels = _labels(groups)
    merged = curves.merge(runs[["path", "group"]], on="path")
    metrics = list(dict.fromkeys(groups["metric"]))
    per_metric = {m: _curve_rows(merged, groups, m) for m in metrics}
    drawn = [m for m in metrics if per_metric[m]]
    if not drawn:
        raise UserError("nothing to plot: no run has a score curve (summary.json '<metric>_curve' is empty); "
                        "leave out --out, or evaluate during the run (protocol.eval_every)")
    with_bytes = {m: any(not _missing(r[1]) for rows in per_metric[m].values() for r in rows) for m in drawn}
    cols = 2 if any(with_bytes.values()) else 1
    fig = Figure(figsize=(11 if cols == 2 else 6, 4.2 * len(drawn) + 0.3))
    grid = fig.subplots(len(drawn), cols, squeeze=False)
    outside = []
    for metric, row in zip(drawn, grid):
        ax_t = row[0]
        ax_b = row[1] if with_bytes[metric] else None
        if cols == 2 and ax_b is None:
            fig.delaxes(row[1])
        for group, rows in per_metric[metric].items():
            ts, bs, ys, los, his = (list(x) for x in zip(*rows))
            for ax, xs in ((ax_t, ts), (ax_b, bs)):
                if ax is None or all(_missing(x) for x in xs):  # this group's runs have no event stream
                    continue
                (line,) = ax.plot(xs, ys, marker="o", ms=3, label=labels[group])
                if not all(_missing(v) for v in los):
                    ax.fill_between(xs, los, his, color=line.get_color(), alpha=0.2, linewidth=0)
        ax_t.set_xlabel("simulated time (s), mean over seeds")
        if ax_b is not None:
            ax_b.set_xlabel("bytes sent by the fleet (log; mean over seeds; none sent: drawn at 1)")
            ax_b.set_xscale("log")
        ylabel = f"mean device {metric_label(metric)}" + (" (lower is better)" if metric in LOWER_IS_BETTER else "")
        for ax in (ax_t, ax_b):
            if ax is not None:
                ax.set_ylabel(ylabel)
                ax.grid(alpha=0.3)
        if len(per_metric[metric]) <= _LEGEND_INSIDE:
            ax_t.legend(fontsize=7, title="shaded: 95% CI over seeds", title_fontsize=7)
        else:  # many groups: beside the row's last panel, outside the axes (the saved image widens to hold it)
            legend = (ax_b or ax_t).legend(fontsize=6, title="shaded: 95% CI over seeds", title_fontsize=7,
                                           loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
            legend.set_in_layout(False)  # the panels keep their size; in the saved image's box again below
            outside.append(legend)
    notes = [f"{metric_label(m)}: no run has a score curve" for m in metrics if m not in drawn]
    notes += [f"{metric_label(m)} vs bytes: no run has its event stream (events.jsonl; archived cells keep none)"
              for m in drawn if not with_bytes[m]]
    if notes:
        fig.text(0.01, 0.005, "Left out: " + "; ".join(notes) + ".", fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.03 if notes else 0, 1, 1))
    for legend in outside:
        legend.set_in_layout(True)
    return fig


def report_figure(runs: pd.DataFrame, curves: pd.DataFrame, out: str | Path) -> Path:
    """Write ``build_figure(runs, curves)`` to the PNG ``out``."""
    return _save(build_figure(runs, curves), out)


def _save(fig: Any, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")  # a legend beside the panels included
    return out


def write_report(dirs: Sequence[str | Path], *, md: Optional[str | Path] = None, csv: Optional[str | Path] = None,
                 png: Optional[str | Path] = None) -> tuple[str, list[Path]]:
    """``p2pfl report``: the markdown text, and the files written (``md``, ``csv``, ``png`` when given)."""
    runs = load_runs(*dirs)
    text = report_table(runs)
    fig = None if png is None else build_figure(runs, load_curves(*dirs))  # refused before anything is written
    written = []
    if md is not None:
        path = Path(md)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
        written.append(path)
    if csv is not None:
        written.append(write_csv(runs, csv))
    if png is not None:
        written.append(_save(fig, png))
    return text, written
