"""Compare run directories: a markdown table and score-vs-time / score-vs-bytes plots.

Reads only the outputs contract (``summary.json``, ``events.jsonl``), so it works
on any run, from the CLI (``p2pfl report RUN [RUN ...] --out x.png``) or Python.

The report is metric-aware: a run's ``metric`` (``accuracy``, ``rmse`` or
``success``, see ``p2pfl.metrics.summary``) names its table columns and plot
axes, runs scored by different metrics are drawn on separate panels (never on
one axis), and the ``dataset``, ``seed`` and ``metric`` columns show when runs
are not comparable. Run directories written before summaries were
metric-aware are read too: there a regression run kept its RMSE curve under
``accuracy_curve``/``accuracy_mean`` (with ``metric: rmse`` and ``rmse_mean``),
and a robot run (partition ``robot_suites``) stored rollout success rates as
``accuracy_*``.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from p2pfl.errors import UserError
from p2pfl.metrics.summary import LOWER_IS_BETTER, metric_label

__all__ = ["RunRecord", "Score", "load_run", "run_score", "time_to_fraction", "bytes_at", "report_table",
           "build_figure", "report_figure"]


@dataclass(frozen=True)
class RunRecord:
    """What a report needs from one run directory."""

    path: Path
    summary: dict[str, Any]
    send_times: list[float]  # completion time of every transmission, sorted
    send_cum_bytes: list[int]  # bytes sent up to and including each of those


@dataclass(frozen=True)
class Score:
    """A run's score, whatever its metric: final mean and worst device, and the mean per evaluated round."""

    metric: str
    mean: Optional[float]
    worst: Optional[float]
    curve: list[tuple[float, float]]  # (simulated time, mean device score) per evaluated round

    @property
    def label(self) -> str:
        return metric_label(self.metric)

    @property
    def lower_is_better(self) -> bool:
        return self.metric in LOWER_IS_BETTER


def _is_robot(summary: dict[str, Any]) -> bool:
    part = summary.get("partition") or {}
    return part.get("partition") == "robot_suites" or part.get("dataset") == "robotics"


def run_score(summary: dict[str, Any]) -> Score:
    """The score fields of a summary (current format, or the older one that called every score accuracy)."""
    metric = summary.get("metric") or "accuracy"
    if f"{metric}_curve" in summary:  # current format: every field named by the metric
        if metric == "accuracy" and "success_curve" not in summary and _is_robot(summary):
            metric = "success"  # old robot run: rollout success rates stored as accuracy_*
            src = "accuracy"
        else:
            src = metric
        return Score(metric, summary.get(f"{src}_mean"), summary.get(f"{src}_worst"),
                     [(p["t"], p[f"{src}_mean"]) for p in summary[f"{src}_curve"]])
    # older format: the curve was always accuracy_curve / accuracy_mean, whatever it held
    curve = [(p["t"], p["accuracy_mean"]) for p in summary.get("accuracy_curve") or []]
    return Score(metric, summary.get(f"{metric}_mean"), summary.get(f"{metric}_worst"), curve)


def load_run(path: str | Path) -> RunRecord:
    """Read ``summary.json`` and the send events of ``events.jsonl``."""
    path = Path(path)
    summary_file = path / "summary.json"
    if not summary_file.is_file():
        raise UserError(f"{path}: not a run directory (no summary.json); pass the folder written by 'p2pfl run'")
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    times, cum, total = [], [], 0
    events = path / "events.jsonl"
    if events.is_file():
        with open(events, encoding="utf-8") as fh:
            for line in fh:
                e = json.loads(line)
                if e["kind"] in ("send", "drop"):
                    total += e["bytes"]
                    times.append(e["t"])
                    cum.append(total)
    return RunRecord(path, summary, times, cum)


def bytes_at(run: RunRecord, t: float) -> int:
    """Bytes the whole fleet had sent by simulated time ``t``."""
    i = bisect_right(run.send_times, t)
    return run.send_cum_bytes[i - 1] if i else 0


def time_to_fraction(summary: dict[str, Any], fraction: float = 0.9) -> Optional[float]:
    """Simulated time at which the mean device score first got within ``fraction`` of its final value.

    "Within" is a ratio of the score to the final one, read in the metric's direction: for a
    higher-is-better metric (accuracy, success) the first curve point with ``score >= fraction x final``;
    for a lower-is-better one (RMSE) the first with ``final / score >= fraction``, i.e.
    ``score <= final / fraction`` (0.9: at most about 11% above the final RMSE). ``final`` is the
    summary's ``<metric>_mean``. None when the run has no curve or no final score (or, for RMSE,
    never got that close).
    """
    score = run_score(summary)
    final = score.mean
    if not score.curve or final is None:
        return None
    for t, value in score.curve:
        if score.lower_is_better:
            if value * fraction <= final:
                return t
        elif value >= fraction * final:
            return t
    return None


def _fmt(x: Any, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def _dataset(summary: dict[str, Any]) -> str:
    return str((summary.get("partition") or {}).get("dataset", "n/a"))


def report_table(runs: Sequence[RunRecord]) -> str:
    """A markdown table of the headline figures of each run.

    The score columns are named by the runs' metric (``RMSE mean``, ``accuracy mean``, ...) when
    they share one, else ``score mean`` with the ``metric`` column naming each row's. A note under
    the table says when runs differ in dataset or metric (their scores are not comparable).
    """
    scores = [run_score(r.summary) for r in runs]
    metrics = list(dict.fromkeys(s.metric for s in scores))
    name = metric_label(metrics[0]) if len(metrics) == 1 else "score"
    cols = ["run", "dataset", "seed", "protocol", "metric", "devices", f"{name} mean", f"{name} worst device", "ARI",
            "bytes total", "bytes / device", "messages", "compute FLOPs", "sim time s", "t(90% final) s"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r, sc in zip(runs, scores):
        s = r.summary
        n = max(s.get("n_devices", 1), 1)
        lines.append(
            f"| {r.path.name} | {_dataset(s)} | {s.get('seed', 'n/a')} | {s['protocol']} | {sc.metric} | "
            f"{s.get('n_devices')} | {_fmt(sc.mean, '.4f')} | {_fmt(sc.worst, '.4f')} | {_fmt(s.get('ari'), '.3f')} | "
            f"{s['bytes_total']:,} | {s['bytes_total'] / n:,.0f} | {s['messages_total']:,} | "
            f"{s['compute_flops_total']:.3e} | {s['sim_time_s']:.2f} | {_fmt(time_to_fraction(s), '.2f')} |")
    notes = []
    datasets = list(dict.fromkeys(_dataset(r.summary) for r in runs))
    if len(datasets) > 1:
        notes.append(f"different datasets ({', '.join(datasets)})")
    if len(metrics) > 1:
        notes.append(f"different metrics ({', '.join(metrics)}; plotted on separate panels)")
    if notes:
        lines += ["", "Note: these runs use " + " and ".join(notes) + "; their scores are not comparable."]
    lower = [m for m in metrics if m in LOWER_IS_BETTER]
    if lower:
        lines += ["", f"{', '.join(metric_label(m) for m in lower)}: lower is better (the worst device is the "
                      "highest; t(90% final) = first time the mean is at most final / 0.9)."]
    return "\n".join(lines)


def build_figure(runs: Sequence[RunRecord]) -> Any:
    """A matplotlib Figure with, per metric, two panels: mean device score vs simulated time and vs bytes.

    Runs scored by different metrics get separate rows of panels (in order of first appearance),
    never one axis; the y axis is named by the metric.
    """
    from matplotlib.figure import Figure

    by_metric: dict[str, list[tuple[RunRecord, Score]]] = {}
    for r in runs:
        sc = run_score(r.summary)
        by_metric.setdefault(sc.metric, []).append((r, sc))
    several_datasets = len({_dataset(r.summary) for r in runs}) > 1
    fig = Figure(figsize=(11, 4.2 * len(by_metric)))
    axes = fig.subplots(len(by_metric), 2, squeeze=False)
    for (metric, group), (ax_t, ax_b) in zip(by_metric.items(), axes):
        for r, sc in group:
            if not sc.curve:
                continue
            label = f"{r.path.name} ({r.summary['protocol']}"
            label += f", {_dataset(r.summary)})" if several_datasets else ")"
            ts = [t for t, _ in sc.curve]
            ys = [v for _, v in sc.curve]
            ax_t.plot(ts, ys, marker="o", ms=3, label=label)
            ax_b.plot([max(bytes_at(r, t), 1) for t in ts], ys, marker="o", ms=3, label=label)
        ax_t.set_xlabel("simulated time (s)")
        ax_b.set_xlabel("bytes sent by the fleet (log; a run that sent none is drawn at 1)")
        ax_b.set_xscale("log")
        ylabel = f"mean device {metric_label(metric)}" + (" (lower is better)" if metric in LOWER_IS_BETTER else "")
        for ax in (ax_t, ax_b):
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
        ax_t.legend(fontsize=7)
    fig.tight_layout()
    return fig


def report_figure(runs: Sequence[RunRecord], out: str | Path) -> Path:
    """Write ``build_figure(runs)`` to the PNG ``out``."""
    fig = build_figure(runs)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    return out
