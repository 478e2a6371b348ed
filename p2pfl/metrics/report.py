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

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from p2pfl.errors import UserError
from p2pfl.metrics.runs import Score, load_curves, load_runs, run_score, time_to_fraction
from p2pfl.metrics.summary import LOWER_IS_BETTER, metric_label

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Score", "run_score", "time_to_fraction", "QUANTITIES", "ci95", "band", "bands", "group_stats",
           "group_labels", "report_table", "write_csv", "build_figure", "report_figure", "write_report"]

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
    """A short name per group for the table: the legend's (``group_labels``: what differs between the groups)."""
    return {g: label.rsplit(" (n=", 1)[0] for g, label in _labels(runs, groups).items()}


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


_MISSING = object()  # a leaf a group's scenario does not have
_VALUE_WIDTH = 32  # a label's value longer than this is cut (a list of servers, say)
_BARE = ("study", "variant", "name", "protocol.name")  # label parts that are their value alone


def _leaf_value(v: Any) -> Any:
    """A column cell as a comparable leaf: JSON text (a grid value, a list) parsed back, a missing value marked."""
    if _missing(v):
        return _MISSING
    if isinstance(v, str) and v[:1] in "[{":
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _leaves(value: Any, path: str) -> dict[str, Any]:
    """A value's scalar leaves by dotted path (a list is one leaf)."""
    if isinstance(value, dict):
        return {k: v for key, sub in value.items() for k, v in _leaves(sub, f"{path}.{key}").items()}
    return {path: value}


def _fmt_value(v: Any) -> str:
    if isinstance(v, bool):
        text = "true" if v else "false"
    elif isinstance(v, float):
        text = f"{v:g}"
    elif isinstance(v, (list, dict)):
        text = json.dumps(v, separators=(",", ":"))
    else:
        text = str(v)
    return text if len(text) <= _VALUE_WIDTH else text[:_VALUE_WIDTH - 1] + "…"


def _leaf_names(paths: list[str]) -> dict[str, str]:
    """A short name per dotted path: its last part (a ``kind`` or ``name`` names its block: ``partition``,
    ``model``), the last two where the leaf sits in a sub-block (``churn.offline``), longer where two would read
    the same."""
    def parts(p: str) -> list[str]:
        ps = p.split(".")
        return ps[:-1] if ps[-1] in ("kind", "name") and len(ps) > 1 else ps

    width = {p: 2 if len(parts(p)) >= 3 else 1 for p in paths}
    while True:
        names = {p: ".".join(parts(p)[-width[p]:]) for p in paths}
        clash = [p for p in paths if list(names.values()).count(names[p]) > 1 and width[p] < len(parts(p))]
        if not clash:
            return names
        for p in clash:
            width[p] += 1


def _classes(columns: list[dict[str, Any]], groups: Sequence[str]) -> int:
    """How many classes the groups fall into by their values in ``columns`` (each group -> value)."""
    return len({tuple(json.dumps(c[g], sort_keys=True, default=str) for c in columns) for g in groups})


def _telling(candidates: dict[str, dict[str, Any]], groups: Sequence[str], kept: Sequence[str] = ()) -> list[str]:
    """``kept`` and, in order, each candidate that tells more groups apart than those before it."""
    out = list(kept)
    for path in candidates:
        if path not in out and _classes([candidates[q] for q in [*out, path]], groups) > \
                _classes([candidates[q] for q in out], groups):
            out.append(path)
    return out


def _differing(axis: dict[str, dict[str, Any]], groups: Sequence[str]) -> dict[str, dict[str, Any]]:
    return {p: vals for p, vals in axis.items() if _classes([vals], groups) > 1}


def group_labels(runs: pd.DataFrame) -> dict[str, str]:
    """A short name per group (``runs["group"]``), from what differs between the groups only.

    Sweep cells: the study (several studies), the variant, and per grid key the fewest leaves of its value that
    tell its values apart, those every group has first (``ifca_1g, churn.offline=0.3``: a partition every group
    shares is left out, and so are a churn block's fields that change with its offline fraction). Runs outside a
    study: every scenario field that differs and all of them have (``exchange=push, rounds=20``; the protocol by
    its name alone: ``gossip``), a field some lack only where it still tells them apart, and when the scenarios have
    different names, the name and only what still tells them apart; then, for single runs, the seed where their
    seeds differ (``seed 3``). A group nothing tells apart is named by its variant or study, else
    ``scenario (protocol)``.
    """
    first = runs.drop_duplicates("group").set_index("group", drop=False)
    seeds = {g: sorted({int(s) for s in sub["seed"] if not _missing(s)}) if "seed" in sub else []
             for g, sub in runs.groupby("group", sort=False)}
    in_study = first["study"].notna()
    labels: dict[str, str] = {}
    # each metric's groups apart (they never share an axis or a table), sweep cells apart from other runs
    for (_, study), rows in first.groupby([first["metric"], in_study], sort=False):
        groups = list(rows.index)
        if not groups:
            continue
        shown: dict[str, dict[str, Any]] = {}  # dotted path -> group -> value; study, variant, name: the value alone
        if study:
            shown.update(_differing({"study": dict(rows["study"])}, groups))
            shown.update(_differing({"variant": {g: _leaf_value(v) for g, v in rows["variant"].items()}}, groups))
            for col in (c for c in rows.columns if c.startswith("grid.")):
                found = {g: _leaves(_leaf_value(v), col[len("grid."):]) for g, v in rows[col].items()}
                axis = {p: {g: found[g].get(p, _MISSING) for g in groups}
                        for p in dict.fromkeys(p for leaves in found.values() for p in leaves)}
                differ = _differing(axis, groups)
                everyone = sorted(differ, key=lambda p: any(v is _MISSING for v in differ[p].values()))
                shown.update({p: differ[p] for p in _telling({p: differ[p] for p in everyone}, groups)})
        else:
            differ = _differing({c[len("scenario."):]: {g: _leaf_value(v) for g, v in rows[c].items()}
                                 for c in rows.columns if c.startswith("scenario.") and c != "scenario.seed"}, groups)
            everyone = [p for p, vals in differ.items() if not any(v is _MISSING for v in vals.values())]
            # every field all of them have; one some lack (a protocol's own) only where it still tells them apart; and
            # for different scenario files, their names and only what still tells them apart
            kept = ["name"] if "name" in differ else everyone
            shown = {p: differ[p] for p in _telling({p: differ[p] for p in sorted(differ, key=everyone.__contains__,
                                                                                   reverse=True)}, groups, kept)}
        shown = {p: shown[p] for p in sorted(shown, key=lambda p: p not in _BARE)}  # the bare values first
        names = _leaf_names([p for p in shown if p not in _BARE])
        # single runs outside a study: their seeds where they differ (groups of several runs: n says how many)
        seeded = not study and all(len(seeds[g]) == 1 for g in groups) and len({tuple(seeds[g]) for g in groups}) > 1
        for g, row in rows.iterrows():
            parts = [_fmt_value(vals[g]) if p in _BARE else f"{names[p]}={_fmt_value(vals[g])}"
                     for p, vals in shown.items() if vals[g] is not _MISSING]
            if seeded:
                parts.append(f"seed {seeds[g][0]}")
            if not parts and study:
                parts = [str(row["variant"] if not _missing(row["variant"]) else row["study"])]
            labels[g] = ", ".join(parts) or f"{row['scenario']} ({row['protocol']})"
    return labels


def _labels(runs: pd.DataFrame, groups: pd.DataFrame) -> dict[str, str]:
    """Legend label per group: ``group_labels`` (the dataset added where a metric's groups use several and the label
    does not say it; a short hash where two groups would read the same), then ``(n=<runs>)``."""
    names = group_labels(runs)
    datasets = groups.groupby("metric")["dataset"].nunique()
    labels: dict[str, str] = {}
    for _, g in groups.iterrows():
        label = names[g["group"]]
        if datasets[g["metric"]] > 1 and str(g["dataset"]) not in label:
            label += f", {g['dataset']}"
        labels[g["group"]] = label
    seen: dict[tuple[str, str], int] = {}
    for _, g in groups.iterrows():
        seen[(g["metric"], labels[g["group"]])] = seen.get((g["metric"], labels[g["group"]]), 0) + 1
    for _, g in groups.iterrows():  # same label for two groups of one metric: tell them apart
        if seen[(g["metric"], labels[g["group"]])] > 1 and g["scenario_hashes"]:
            labels[g["group"]] += f" [{str(g['scenario_hashes'])[:6]}]"
    return {k: f"{v} (n={n})" for (k, v), n in zip(labels.items(), groups["n"])}


def _num(col: Any) -> Any:
    """A column as floats (None: NaN)."""
    import pandas as pd

    return pd.to_numeric(col, errors="coerce").astype(float)


def _curve_rows(merged: pd.DataFrame, groups: pd.DataFrame, metric: str) -> dict[str, list[tuple]]:
    """Group -> per evaluated round (mean t, mean bytes or nan, mean score, 95% CI low, high), over its runs.

    Bytes: what the fleet had sent by the evaluation, from ``events.jsonl``; without it (an archived cell), from
    the curve point's traffic, ``bytes_per_device x n_devices + bytes_servers`` (the same number: tested)."""
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
            if not b and "n_devices" in at:  # no event stream (an archived cell): the traffic the curve points carry
                devices = _num(at["bytes_per_device"]) * _num(at["n_devices"])
                b = _values(devices + _num(at["bytes_servers"]).fillna(0.0))
            rows.append((math.fsum(at["t"]) / len(at), math.fsum(b) / len(b) if b else math.nan, mean, lo, hi))
        out[group] = rows
    return out


def build_figure(runs: pd.DataFrame, curves: pd.DataFrame) -> Any:
    """A matplotlib Figure: per metric a row of two panels, score vs simulated time and vs bytes.

    Each group is one line: per evaluated round, the mean over its runs of the score, of the time
    and of the bytes sent by then, with the score's t-based 95% interval shaded (runs aligned by
    round; no band where a round has one run). Metrics never share an axis.

    A panel without data is left out, with a note under the figure: the bytes panel when no run has the
    bytes it had sent by each evaluation (neither ``events.jsonl`` nor curve points that carry
    ``bytes_per_device``: runs written before the points had it), a metric's row when none of its runs
    has a score curve. Raises UserError when nothing at all can be drawn.
    """
    from matplotlib.figure import Figure

    groups = group_stats(runs)
    labels = _labels(runs, groups)
    merged = curves.merge(runs[["path", "group", *(["n_devices"] if "n_devices" in runs else [])]], on="path")
    metrics = list(dict.fromkeys(groups["metric"]))
    per_metric = {m: _curve_rows(merged, groups, m) for m in metrics}
    drawn = [m for m in metrics if per_metric[m]]
    if not drawn:
        raise UserError("nothing to plot: no run has a score curve (summary.json '<metric>_curve' is empty); "
                        "leave out --out, or evaluate during the run (protocol.eval_every)")
    # a group that sent nothing (Local) has no place on a log axis: named under the figure instead
    silent = {m: [g for g, rows in per_metric[m].items() if all(not _missing(r[1]) and r[1] <= 0 for r in rows)]
              for m in drawn}
    with_bytes = {m: any(not _missing(r[1]) for g, rows in per_metric[m].items() if g not in silent[m] for r in rows)
                  for m in drawn}
    cols = 2 if any(with_bytes.values()) else 1
    fig = Figure(figsize=(11 if cols == 2 else 6, 4.2 * len(drawn) + 0.3))
    grid = fig.subplots(len(drawn), cols, squeeze=False)
    outside = []
    for metric, row in zip(drawn, grid):
        ax_t = row[0]
        ax_b = row[1] if with_bytes[metric] else None
        if cols == 2 and ax_b is None:
            fig.delaxes(row[1])
        colors = _colors(len(per_metric[metric]))  # a group's colour is the same in both panels
        at_one = False
        for color, (group, rows) in zip(colors, per_metric[metric].items()):
            ts, bs, ys, los, his = (list(x) for x in zip(*rows))
            at_one = at_one or (group not in silent[metric] and any(not _missing(x) and x < 1.0 for x in bs))
            bs = [x if _missing(x) else max(x, 1.0) for x in bs]  # an evaluation before the first send: at 1
            for ax, xs in ((ax_t, ts), (ax_b, bs)):
                if ax is None or all(_missing(x) for x in xs) or (ax is ax_b and group in silent[metric]):
                    continue  # this group's runs have no traffic record, or sent nothing
                ax.plot(xs, ys, marker="o", ms=3, color=color, label=labels[group])
                if not all(_missing(v) for v in los):
                    ax.fill_between(xs, los, his, color=color, alpha=0.2, linewidth=0)
        ax_t.set_xlabel("simulated time (s), mean over seeds")
        if ax_b is not None:
            ax_b.set_xlabel("bytes sent by the fleet (log; mean over seeds"
                            + ("; none yet: drawn at 1)" if at_one else ")"))
            ax_b.set_xscale("log")
        ylabel = f"mean device {metric_label(metric)}" + (" (lower is better)" if metric in LOWER_IS_BETTER else "")
        for ax in (ax_t, ax_b):
            if ax is not None:
                ax.set_ylabel(ylabel)
                ax.grid(alpha=0.3)
        if len(per_metric[metric]) <= _LEGEND_INSIDE:
            ax_t.legend(fontsize=7, title="shaded: 95% CI over seeds", title_fontsize=7)
        else:  # many groups: beside the row's last panel, outside the axes (the saved image widens to hold it)
            handles = ax_t.get_legend_handles_labels()  # every group: the time panel's (the bytes panel may lack some)
            legend = (ax_b or ax_t).legend(*handles, fontsize=6, title="shaded: 95% CI over seeds", title_fontsize=7,
                                           loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
            legend.set_in_layout(False)  # the panels keep their size; in the saved image's box again below
            outside.append(legend)
    notes = [f"{metric_label(m)}: no run has a score curve" for m in metrics if m not in drawn]
    notes += [f"{metric_label(m)} vs bytes: no run has the bytes it sent by each evaluation (no events.jsonl, and "
              "curve points without bytes_per_device: written before they carried it)"
              for m in drawn if not with_bytes[m] and len(silent[m]) < len(per_metric[m])]
    notes += [f"{metric_label(m)} vs bytes, groups that sent nothing: " + "; ".join(labels[g] for g in silent[m])
              for m in drawn if silent[m]]
    if notes:
        fig.text(0.01, 0.005, "Left out: " + "; ".join(notes) + ".", fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.03 if notes else 0, 1, 1))
    for legend in outside:
        legend.set_in_layout(True)
    return fig


def _colors(n: int) -> list[Any]:
    """``n`` distinct line colours: matplotlib's default ten, tab20 beyond them, then cycling."""
    from matplotlib import colormaps

    if n <= 10:
        return [f"C{i}" for i in range(n)]
    return [colormaps["tab20"](i % 20) for i in range(n)]


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
