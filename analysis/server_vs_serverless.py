"""Server vs serverless clustered FL on one fleet: rnd, rnd_gossip, ifca, dac (both), gossip, fedavg, local, oracle.

Same devices, data and seed for every protocol; a neighbourhood device graph (random geometric, radius
chosen for a mean degree of about 7, redrawn until connected) for N = 12, 48, 192; server protocols get
the same device graph plus one server attached to every device. Two partitions with 4 true clusters:
``feature_skew`` (pattern mode, RMS 0.5) and ``label_shift`` (disjoint class groups).

Reduced budget (so that the whole script runs in about 25 minutes on 2 shared cores): Fashion-MNIST,
100 training samples per device, an MLP (hidden 32), 8 rounds of 1 local epoch, RND predictors
40 epochs of batch 16 (about 280 Adam steps). Each protocol is a scenario file in ``scenarios/server_vs_serverless/``
(``extends: base.yaml``, the common fleet); this script loads it with ``p2pfl.config.load`` and overrides for
N (topology n and radius), seed, partition and rounds.

Writes ``analysis/results/server_vs_serverless.md`` (table) and PNG plots next to it:
``svs_accuracy_vs_time_N{N}.png`` and ``svs_bytes_vs_n.png`` (log-log, with N^2 and N x degree guides).

Every run goes through the public API (``p2pfl.run`` with an output directory) and its figures are read
back from the run directory only: ``summary.json`` (scores, bytes, curve), ``events.jsonl`` (clustering
compute), ``timing.json`` (wall time) and ``scenario.yaml`` (the resolved topology, rebuilt with
``p2pfl.topology.build_topology`` for the mean degree). Run directories go to a temporary folder unless
``--runs-dir`` names one to keep them (it must not hold runs of the same names).

    python analysis/server_vs_serverless.py [--sizes 12 48 192] [--protocols ...] [--rounds 8]
                                            [--runs-dir DIR] [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import p2pfl
from p2pfl.api import resolve
from p2pfl.config import load
from p2pfl.config.scenario import Scenario
from p2pfl.metrics.report import run_score, time_to_fraction
from p2pfl.metrics.summary import LOWER_IS_BETTER, metric_label
from p2pfl.registry import BUILTIN
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


def overrides(label: str, n: int, partition: str, seed: int, rounds: int) -> list[str]:
    """The ``--set`` values that turn a protocol's scenario file into one run of the comparison."""
    return [f"name=svs_{label}_{partition}_n{n}", f"protocol.rounds={rounds}",
            f"data.partition={json.dumps(PARTITIONS[partition])}",
            f"topology.n={n}", f"topology.radius={radius_for(n)}", f"topology.seed={seed}"]


def scenario(label: str, n: int, partition: str, seed: int, rounds: int) -> Scenario:
    """The validated scenario of one run: the protocol's file with the run's overrides."""
    return load(SCEN / PROTOCOL_FILES[label][1], overrides=overrides(label, n, partition, seed, rounds), seed=seed)


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


def run_one(sc: Scenario, runs_dir: Path) -> dict[str, Any]:
    out = runs_dir / f"{sc.name}-seed{sc.seed}"
    p2pfl.run(sc, out=out)
    return read_run(out)


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[12, 48, 192])
    ap.add_argument("--protocols", nargs="+", default=list(PROTOCOL_FILES))
    ap.add_argument("--partitions", nargs="+", default=list(PARTITIONS))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs-dir", type=Path, default=None, help="keep the run directories here (default: a temp folder)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder for the table and plots")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="svs-runs-") as tmp:
        return _main(args, args.runs_dir or Path(tmp))


def _main(args: argparse.Namespace, runs_dir: Path) -> int:
    global RESULTS
    RESULTS = args.results
    t_start = time.perf_counter()
    results: list[dict[str, Any]] = []
    skipped: list[str] = []
    for n in args.sizes:
        for part in args.partitions:
            for label in args.protocols:
                name = PROTOCOL_FILES[label][0]
                if name not in BUILTIN:
                    note = f"{label}: protocol {name!r} is not registered yet; skipped"
                    print("NOTE:", note, flush=True)
                    skipped.append(note)
                    continue
                try:
                    r = run_one(scenario(label, n, part, args.seed, args.rounds), runs_dir)
                except Exception as err:  # report and go on: one failing protocol must not hide the others
                    note = f"{label} N={n} {part}: {type(err).__name__}: {err}"
                    print("NOTE:", note, flush=True)
                    skipped.append(note)
                    continue
                r.update(label=label, n=n, part=part)
                results.append(r)
                print(f"N={n:4d} {part:12s} {label:13s} {r['metric']} {score(r, 'mean'):.3f} "
                      f"(worst {score(r, 'worst'):.3f}) "
                      f"ARI {r.get('ari', float('nan')):.2f} bytes {fmt_bytes(r['bytes_total'])} "
                      f"wall {r['wall']:.1f}s", flush=True)
                write_report(results, skipped, args, time.perf_counter() - t_start, quiet=True)  # partial
        plot_accuracy(results)
        plot_bytes(results)
    total_s = time.perf_counter() - t_start
    write_report(results, skipped, args, total_s)
    plot_accuracy(results)
    plot_bytes(results)
    return 0


def write_report(results: list[dict[str, Any]], skipped: list[str], args, total_s: float, quiet: bool = False) -> None:
    cmd = (f"python analysis/server_vs_serverless.py --sizes {' '.join(map(str, args.sizes))} --rounds {args.rounds}"
           f" --seed {args.seed}")
    lines = [
        "# Server vs serverless clustered FL on one fleet",
        "",
        f"Command: `{cmd}` ({total_s / 60:.1f} min, one torch thread).",
        "",
        "Reduced budget: Fashion-MNIST, 100 training samples per device (25 local test samples), MLP hidden 32, "
        f"{args.rounds} rounds x 1 local epoch (SGD lr 0.05, momentum 0.9, batch 32), 4 true clusters "
        "(assignment: blocks). Device graph: random geometric, radius 1.1 sqrt(7 / (pi (N-1))) (mean degree "
        "column), the same graph for every protocol; server protocols add one server attached to every device. "
        "IFCA is given K = 4; DAC cosine top_k 2, DAC original n_sampled 3, both over topology neighbours; "
        "rnd exchanges predictors all-to-all over the device graph (routed), rnd_gossip within 1 hop; RND "
        "predictors 40 epochs of batch 16, alpha 0.3. "
        "Clustering compute = modelled FLOPs of rnd_train + rnd_score, ifca_estep, dac_similarity. "
        "t90 = simulated time at which the mean device score first gets within 90% of its final value "
        "(p2pfl.metrics.report.time_to_fraction; for accuracy: first reaches 0.9 x final).",
        "",
    ]
    for note in skipped:
        lines.append(f"- skipped: {note}")
    if skipped:
        lines.append("")
    name = metric_name(results)
    lines += [f"| N | partition | protocol | {name} mean | {name} worst | ARI | federations | bytes total | bytes / device "
              "| clustering GFLOP | t90 (s) | sim time (s) | mean degree |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        ari = r.get("ari")
        feds = r.get("n_federations", len(r["clusters"]) if r.get("clusters") else None)
        t90 = time_to_fraction(r)
        lines.append(
            f"| {r['n']} | {r['part']} | {r['label']} | {score(r, 'mean'):.3f} | {score(r, 'worst'):.3f} | "
            f"{'—' if ari is None else f'{ari:.2f}'} | {'—' if feds is None else feds} | "
            f"{fmt_bytes(r['bytes_total'])} | {fmt_bytes(r['bytes_total'] / r['n'])} | "
            f"{r['clustering_compute_flops'] / 1e9:.2f} | {'—' if t90 is None else f'{t90:.2f}'} | "
            f"{r['sim_time_s']:.2f} | {r['mean_degree']:.1f} |")
    lines += ["", f"Plots: `svs_accuracy_vs_time_N{{N}}.png` (mean device {name} vs simulated time), `svs_bytes_vs_n.png` "
              "(total bytes vs N, log-log)."]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "server_vs_serverless.md").write_text("\n".join(lines) + "\n")
    if not quiet:
        print("\n".join(lines))


def plot_accuracy(results: list[dict[str, Any]]) -> None:
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
            for r in rows:
                curve = run_score(r).curve
                if curve:
                    ax.plot([t for t, _ in curve], [v for _, v in curve], marker="o", markersize=3, label=r["label"])
            ax.set_xscale("log")
            ax.set_xlabel("simulated time (s, log)")
            metric = metrics.pop() if metrics else "accuracy"
            ax.set_ylabel(f"mean device {metric_label(metric)}" + (" (lower is better)" if metric in LOWER_IS_BETTER else ""))
            ax.set_title(f"N = {n}, {part}")
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
    rows = [r for r in results if r["part"] == part]
    for label in dict.fromkeys(r["label"] for r in rows):
        pts = sorted((r["n"], r["bytes_total"]) for r in rows if r["label"] == label)
        if any(b > 0 for _, b in pts):
            ax.plot([p[0] for p in pts], [max(p[1], 1) for p in pts], marker="o", label=label)
    ns = np.array(sorted({r["n"] for r in rows}), dtype=float)
    if len(ns) > 1:
        ref = [r for r in rows if r["label"] == "rnd"]
        ref_b = ref[0]["bytes_total"] / ref[0]["n"] ** 2 if ref else 1e4
        ax.plot(ns, ref_b * ns**2, "k--", linewidth=1, label="∝ N² (all-to-all)")
        g = [r for r in rows if r["label"] == "gossip"]
        g_b = g[0]["bytes_total"] / g[0]["n"] if g else 1e5
        ax.plot(ns, g_b * ns, "k:", linewidth=1, label="∝ N × degree (neighbourhood)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("devices N")
    ax.set_ylabel("bytes total (whole run)")
    ax.set_title(f"bytes vs N ({part})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "svs_bytes_vs_n.png")


if __name__ == "__main__":
    sys.exit(main())
