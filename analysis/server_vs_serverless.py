"""Server vs serverless clustered FL on one fleet: the report over the study's run directories.

    p2pfl sweep scenarios/studies/server_vs_serverless.yaml --jobs 2 --out runs/server_vs_serverless
    python analysis/server_vs_serverless.py runs/server_vs_serverless [--results DIR]

The study runs every protocol file of ``scenarios/server_vs_serverless/`` (each ``extends: base.yaml``,
the common fleet: Fashion-MNIST, 100 training samples per device, an MLP of hidden 32, 8 rounds, RND
predictors of 40 epochs) on a neighbourhood graph (random geometric, radius ``radius_for(N)`` for a mean
degree of about 7, drawn from the run's seed) of N = 12, 48, 192 devices, with two partitions of 4 true
clusters (``feature_skew`` pattern RMS 0.5, ``label_shift``), over seeds; server protocols add one
server attached to every device.

This script reads the run directories only: ``summary.json`` (scores, bytes, curve), ``events.jsonl``
(clustering compute), ``timing.json`` (wall time), ``scenario.yaml`` (the resolved graph, for the mean
degree) and ``cell.json`` (protocol label, N, partition, seed). It writes
``analysis/results/server_vs_serverless.md`` (means over seeds with 95% t-intervals) and PNG plots next to
it: ``svs_accuracy_vs_time_N{N}.png`` (mean curve over seeds) and ``svs_bytes_vs_n.png`` (log-log, with
N^2 and N x degree guides).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from p2pfl.api import resolve
from p2pfl.metrics.report import ci95, run_score, time_to_fraction
from p2pfl.metrics.runs import find_runs
from p2pfl.metrics.summary import LOWER_IS_BETTER, metric_label
from p2pfl.topology import build_topology

ROOT = Path(__file__).resolve().parents[1]
SCEN = ROOT / "scenarios/server_vs_serverless"
RESULTS = ROOT / "analysis/results"  # --results changes it
CLUSTER_COMPUTE = {"rnd_train", "rnd_score", "ifca_estep", "dac_similarity"}

#: label -> (registry name, scenario file: base.yaml plus the protocol's parameters and servers)
PROTOCOL_FILES = {
    "rnd": ("rnd", "rnd.yaml"),
    "rnd_gossip": ("rnd_gossip", "rnd_gossip.yaml"),
    "ifca": ("ifca", "ifca.yaml"),
    "dac_cosine": ("dac", "dac_cosine.yaml"),
    "dac_original": ("dac", "dac_original.yaml"),
    "gossip": ("gossip", "gossip.yaml"),
    "fedavg": ("fedavg", "fedavg.yaml"),
    "local": ("local", "local.yaml"),
    "oracle": ("oracle", "oracle.yaml"),
}
PARTITIONS = {
    "feature_skew": {"kind": "feature_skew", "n_clusters": 4, "mode": "pattern", "rms": 0.5},
    "label_shift": {"kind": "label_shift", "n_clusters": 4},
}


def radius_for(n: int, degree: float = 7.0) -> float:
    """Radius giving about ``degree`` neighbours in the unit square (1.1 x the interior estimate)."""
    return round(min(1.0, 1.1 * math.sqrt(degree / (math.pi * max(n - 1, 1)))), 3)


def read_run(out: Path) -> dict[str, Any]:
    """One result row from a run directory: summary.json plus clustering FLOPs, wall time and mean degree."""
    s = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    cl_flops = 0
    with open(out / "events.jsonl", encoding="utf-8") as fh:
        for line in fh:
            e = json.loads(line)
            if e["kind"] == "compute" and e["what"] in CLUSTER_COMPUTE:
                cl_flops += e["flops"]
    wall = json.loads((out / "timing.json").read_text(encoding="utf-8"))["wall_s"]
    resolved = resolve(out / "scenario.yaml")  # fully resolved: the same graph as the run's
    graph = build_topology(resolved.topology, seed=resolved.seed).graph
    degree = 2 * graph.number_of_edges() / graph.number_of_nodes()
    return {**s, "clustering_compute_flops": cl_flops, "wall": wall, "mean_degree": degree, "run_dir": str(out)}


def partition_name(value: Any) -> str:
    """The PARTITIONS key of a cell's ``data.partition`` grid value."""
    for name, spec in PARTITIONS.items():
        if value == spec:
            return name
    raise SystemExit(f"a run's data.partition {value!r} is none of {sorted(PARTITIONS)}; is it this study's run?")


def load_rows(root: Path) -> list[dict[str, Any]]:
    """One row per run directory of the study under ``root``: ``read_run`` plus label, N, partition, seed."""
    rows = []
    for out in find_runs(root):
        cell = json.loads((out / "cell.json").read_text(encoding="utf-8"))
        r = read_run(out)
        r.update(label=cell["variant"], n=int(cell["grid"]["topology.n"]),
                 part=partition_name(cell["grid"]["data.partition"]), seed=int(cell["seed"]))
        rows.append(r)
    return rows


def grouped(rows: list[dict[str, Any]]) -> dict[tuple[int, str, str], list[dict[str, Any]]]:
    """Runs that differ only by seed, keyed (N, partition, label), in the study's order of protocols."""
    order = list(PROTOCOL_FILES)
    out: dict[tuple[int, str, str], list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r["n"], r["part"], order.index(r["label"]) if r["label"] in order else 99)):
        out.setdefault((r["n"], r["part"], r["label"]), []).append(r)
    return out


def score(r: dict[str, Any], field: str) -> float | None:
    """``mean`` or ``worst`` of a result row, read under the run's metric (accuracy here: Fashion-MNIST)."""
    sc = run_score(r)
    return sc.mean if field == "mean" else sc.worst


def metric_name(results: list[dict[str, Any]]) -> str:
    """Label of the rows' metric for headers and axes ("score" if they differ)."""
    metrics = {run_score(r).metric for r in results}
    return metric_label(metrics.pop()) if len(metrics) == 1 else "score"


def fmt_bytes(b: float) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= k:
            return f"{b / k:.2f} {unit}"
    return f"{b:.0f} B"


def _stat(values: list[Any], fmt: str, with_ci: bool = False) -> str:
    """Mean (± half-width of the 95% t-interval) of the values that are there; — when none are."""
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return "—"
    mean, _, lo, hi = ci95(vals)
    if with_ci and not math.isnan(lo):
        return f"{format(mean, fmt)} ± {format(hi - mean, fmt)}"
    return format(mean, fmt)


def main(argv: list[str] | None = None) -> int:
    global RESULTS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, help="the study's run folder (runs/server_vs_serverless)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder for the table and plots")
    args = ap.parse_args(argv)
    RESULTS = args.results
    rows = load_rows(args.runs)
    write_report(rows, args.runs)
    plot_accuracy(rows)
    plot_bytes(rows)
    return 0


def write_report(rows: list[dict[str, Any]], root: Path) -> None:
    seeds = sorted({r["seed"] for r in rows})
    lines = [
        "# Server vs serverless clustered FL on one fleet",
        "",
        "Regenerate:",
        "",
        "```bash",
        "p2pfl sweep scenarios/studies/server_vs_serverless.yaml --jobs 2 --out runs/server_vs_serverless",
        f"python analysis/server_vs_serverless.py {root}",
        "```",
        "",
        f"Seeds {seeds}: every figure is a mean over seeds (± the half-width of its 95% t-interval for the scores). "
        "Reduced budget: Fashion-MNIST, 100 training samples per device (25 local test samples), MLP hidden 32, "
        "8 rounds x 1 local epoch (SGD lr 0.05, momentum 0.9, batch 32), 4 true clusters (assignment: blocks). "
        "Device graph: random geometric, radius 1.1 sqrt(7 / (pi (N-1))) (mean degree column), drawn from the "
        "run's seed, the same graph for every protocol at a seed; server protocols add one server attached to every "
        "device. IFCA is given K = 4; DAC cosine top_k 2, DAC original n_sampled 3, both over topology neighbours; "
        "rnd exchanges predictors all-to-all over the device graph (routed), rnd_gossip within 1 hop; RND "
        "predictors 40 epochs of batch 16, alpha 0.3. Clustering compute = modelled FLOPs of rnd_train + "
        "rnd_score, ifca_estep, dac_similarity. t90 = simulated time at which the mean device score first gets "
        "within 90% of its final value (p2pfl.metrics.report.time_to_fraction).",
        "",
    ]
    name = metric_name(rows)
    lines += [f"| N | partition | protocol | seeds | {name} mean | {name} worst | ARI | federations | bytes total | "
              "bytes / device | clustering GFLOP | t90 (s) | sim time (s) | mean degree |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (n, part, label), g in grouped(rows).items():
        feds = [r.get("n_federations", len(r["clusters"]) if r.get("clusters") else None) for r in g]
        lines.append(
            f"| {n} | {part} | {label} | {len(g)} | {_stat([score(r, 'mean') for r in g], '.3f', True)} | "
            f"{_stat([score(r, 'worst') for r in g], '.3f', True)} | {_stat([r.get('ari') for r in g], '.2f', True)} | "
            f"{_stat(feds, '.1f')} | {fmt_bytes(sum(r['bytes_total'] for r in g) / len(g))} | "
            f"{fmt_bytes(sum(r['bytes_total'] / r['n'] for r in g) / len(g))} | "
            f"{_stat([r['clustering_compute_flops'] / 1e9 for r in g], '.2f')} | "
            f"{_stat([time_to_fraction(r) for r in g], '.2f')} | {_stat([r['sim_time_s'] for r in g], '.2f')} | "
            f"{_stat([r['mean_degree'] for r in g], '.1f')} |")
    lines += ["", f"Plots: `svs_accuracy_vs_time_N{{N}}.png` (mean device {name} vs simulated time, mean curve over "
              "seeds), `svs_bytes_vs_n.png` (total bytes vs N, log-log)."]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "server_vs_serverless.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'server_vs_serverless.md'}")


def mean_curve(group: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """The seeds' score curves averaged point by point (time and score), over the points all of them have."""
    curves = [run_score(r).curve for r in group]
    length = min((len(c) for c in curves), default=0)
    return [(sum(c[i][0] for c in curves) / len(curves), sum(c[i][1] for c in curves) / len(curves))
            for i in range(length)]


def plot_accuracy(results: list[dict[str, Any]]) -> None:
    groups = grouped(results)
    for n in sorted({r["n"] for r in results}):
        parts = sorted({r["part"] for r in results if r["n"] == n})
        fig = Figure(figsize=(6 * len(parts), 4.2), dpi=110)
        FigureCanvasAgg(fig)
        for k, part in enumerate(parts):
            ax = fig.add_subplot(1, len(parts), k + 1)
            rows = [r for r in results if r["n"] == n and r["part"] == part]
            metrics = {run_score(r).metric for r in rows}
            if len(metrics) > 1:
                raise ValueError(f"N = {n}, {part}: runs scored by {sorted(metrics)} cannot share one axis")
            for (gn, gpart, label), g in groups.items():
                curve = mean_curve(g) if (gn, gpart) == (n, part) else []
                if curve:
                    ax.plot([t for t, _ in curve], [v for _, v in curve], marker="o", markersize=3, label=label)
            ax.set_xscale("log")
            ax.set_xlabel("simulated time (s, log)")
            metric = metrics.pop() if metrics else "accuracy"
            ax.set_ylabel(f"mean device {metric_label(metric)}" + (" (lower is better)" if metric in LOWER_IS_BETTER else ""))
            ax.set_title(f"N = {n}, {part} (mean over seeds)")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(RESULTS / f"svs_accuracy_vs_time_N{n}.png")


def plot_bytes(results: list[dict[str, Any]]) -> None:
    if not results:
        return
    fig = Figure(figsize=(6.5, 4.6), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    part = "feature_skew" if any(r["part"] == "feature_skew" for r in results) else results[0]["part"]
    means = {(n, label): sum(r["bytes_total"] for r in g) / len(g)
             for (n, p, label), g in grouped(results).items() if p == part}
    for label in dict.fromkeys(label for _, label in means):
        pts = sorted((n, b) for (n, lab), b in means.items() if lab == label)
        if any(b > 0 for _, b in pts):
            ax.plot([p[0] for p in pts], [max(p[1], 1) for p in pts], marker="o", label=label)
    ns = np.array(sorted({n for n, _ in means}), dtype=float)
    if len(ns) > 1:
        first = int(ns[0])
        ref_b = means.get((first, "rnd"), 1e4 * first**2) / first**2
        ax.plot(ns, ref_b * ns**2, "k--", linewidth=1, label="∝ N² (all-to-all)")
        g_b = means.get((first, "gossip"), 1e5 * first) / first
        ax.plot(ns, g_b * ns, "k:", linewidth=1, label="∝ N × degree (neighbourhood)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("devices N")
    ax.set_ylabel("bytes total (whole run, mean over seeds)")
    ax.set_title(f"bytes vs N ({part})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "svs_bytes_vs_n.png")


if __name__ == "__main__":
    sys.exit(main())
