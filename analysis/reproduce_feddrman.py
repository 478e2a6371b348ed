"""Reproduce the structure of FedDRMan's Tables I-III on p2pfl's MuJoCo suites.

    python analysis/reproduce_feddrman.py                 # the default budget (see BUDGETS)
    python analysis/reproduce_feddrman.py --budget smoke  # a seconds-long pipeline check

Writes analysis/results/feddrman.md (success rate per suite and method, per table) and
analysis/results/feddrman_curves_*.png (success vs round). Every run is a scenario built from
scenarios/robotics/*.yaml with overrides, so each row can be rerun with ``p2pfl run``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

torch.set_num_threads(1)

import p2pfl  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "analysis" / "results"
BUDGETS = {
    "smoke": dict(rounds=2, eval_every=1, episodes=1, horizon=10, demos=4),
    # ~10 min on 2 cores with --table1-suites goal --table1-methods centralized,fedavg --pairs goal+spatial
    "quick": dict(rounds=12, eval_every=4, episodes=5, horizon=80, demos=100, epochs=2),
    "medium": dict(rounds=20, eval_every=5, episodes=5, horizon=80, demos=150, epochs=3),
    "default": dict(rounds=20, eval_every=5, episodes=6, horizon=80, demos=150, epochs=2),
}
METHODS = {
    "centralized": {"name": "centralized"},
    "local": {"name": "local"},
    "fedavg": {"name": "fedavg"},
    "fedprox": {"name": "fedprox", "mu": 0.001},
}
ABLATION = [  # Table III rows: (label, feddrman switches)
    ("BC + CUA", dict(sub_loss=False, act_loss=False, srb=False, cua=True)),
    ("BC + act + CUA", dict(sub_loss=False, act_loss=True, srb=False, cua=True)),
    ("BC + sub + CUA", dict(sub_loss=True, act_loss=False, srb=False, cua=True)),
    ("BC + sub + act + CUA", dict(sub_loss=True, act_loss=True, srb=False, cua=True)),
    ("full (+ SRB)", dict(sub_loss=True, act_loss=True, srb=True, cua=True)),
    ("full - CUA", dict(sub_loss=True, act_loss=True, srb=True, cua=False)),
]


def scenario(suites: list[str], per_suite: int, protocol: dict, b: dict, seed: int) -> dict:
    n = len(suites) * per_suite
    return {
        "name": f"feddrman-repro-{'-'.join(suites)}-{protocol['name']}", "seed": seed,
        "topology": {"kind": "complete", "n": n, "servers": [{"name": "server", "attach": "all"}]},
        "data": {"dataset": "robotics", "test_fraction": 0.1,
                 "partition": {"kind": "robot_suites", "suites": suites, "clients_per_suite": per_suite, "reference_clients": 5,
                               "alpha": 0.5, "demos_per_task": b["demos"], "history": 1, "eval_episodes": b["episodes"],
                               "horizon": b["horizon"]}},
        "model": {"name": "robot_policy"},
        "training": {"epochs": b.get("epochs", 1), "batch_size": 32, "lr": 0.001, "optimizer": "adamw", "weight_decay": 0.0001, "grad_clip": 100},
        "devices": {"flops_per_s": 1.0e11},
        "protocol": {"rounds": b["rounds"], "eval_every": b["eval_every"], **protocol},
    }


def per_suite_curve(summary: dict) -> dict[str, dict[int, float]]:
    """suite -> round -> mean success over that suite's devices."""
    acc: dict[str, dict[int, list[float]]] = {}
    for e in summary["logs"].get("rollout_success", []):
        acc.setdefault(e["suite"], {}).setdefault(e["round"], []).append(e["value"])
    return {s: {r: sum(v) / len(v) for r, v in sorted(d.items())} for s, d in acc.items()}


def run(suites, per_suite, protocol, b, seed, log) -> dict:
    t0 = time.time()
    r = p2pfl.run(scenario(suites, per_suite, protocol, b, seed), write=False)
    curve = per_suite_curve(r.summary)
    row = {"suites": suites, "protocol": protocol, "final": {s: c[max(c)] for s, c in curve.items()},
           "best": {s: max(c.values()) for s, c in curve.items()}, "curve": curve, "clusters": r.summary.get("clusters"),
           "wall_s": round(time.time() - t0, 1), "sim_time_s": r.sim_time_s, "bytes_total": r.summary["bytes_total"]}
    log.write(json.dumps(row) + "\n")
    log.flush()
    print(f"{'+'.join(suites):<22} {protocol['name']:<12} final {row['final']} ({row['wall_s']} s)", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", choices=list(BUDGETS), default="default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-table2", action="store_true")
    ap.add_argument("--table1-suites", default="object,goal,spatial", help="comma list ('' skips Table I)")
    ap.add_argument("--table1-methods", default="centralized,local,fedavg,fedprox", help="baselines besides feddrman")
    ap.add_argument("--pairs", default="object+goal,object+spatial,goal+spatial,object+goal+spatial",
                    help="Table II settings, comma list of suite+suite")
    ap.add_argument("--table2-methods", default="centralized,local,fedavg,fedprox")
    ap.add_argument("--skip-table3", action="store_true")
    ap.add_argument("--tag", default="", help="suffix of the output files (runs in parallel must differ)")
    a = ap.parse_args()
    b = BUDGETS[a.budget]
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    rows: dict[str, list[dict]] = {"I": [], "II": [], "III": []}
    pick = lambda names: {k: v for k, v in METHODS.items() if k in names.split(",")}  # noqa: E731
    tag = a.budget + (f"_{a.tag}" if a.tag else "")
    with open(OUT / f"feddrman_runs_{tag}.jsonl", "w") as log:
        for suite in [s for s in a.table1_suites.split(",") if s]:
            for name, proto in {**pick(a.table1_methods), "feddrman": {"name": "feddrman", "n_clusters": 1, "beta": 0.9}}.items():
                rows["I"].append(run([suite], 5, proto, b, a.seed, log))
        combos = [] if a.skip_table2 else [p.split("+") for p in a.pairs.split(",") if p]
        for suites in combos:
            for name, proto in {**pick(a.table2_methods), "feddrman": {"name": "feddrman", "n_clusters": len(suites),
                                                                     "beta": 0.85 if len(suites) == 3 else 0.9}}.items():
                rows["II"].append(run(suites, 2, proto, b, a.seed, log))
        for label, sw in ([] if a.skip_table3 else ABLATION):
            row = run(["object", "goal"], 2, {"name": "feddrman", "n_clusters": 2, "beta": 0.9, **sw}, b, a.seed, log)
            row["label"] = label
            rows["III"].append(row)
    write_report(rows, b, tag, time.time() - t0)


def write_report(rows, b, budget, wall) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pct = lambda v: "-" if v is None else f"{100 * v:.0f}"  # noqa: E731
    md = [f"# FedDRMan reproduction on p2pfl's MuJoCo suites (budget `{budget}`)", "",
          f"Budget: {b['rounds']} rounds, rollouts every {b['eval_every']} rounds, {b['episodes']} episodes per task, "
          f"horizon {b['horizon']}, {b.get('epochs', 1)} local epoch(s) per round, {b['demos']} expert demos per task (4 tasks per suite); one seed. "
          f"Total wall time {wall / 60:.1f} min on shared CPUs. Numbers are success rates (%) of the final "
          "evaluation (best evaluated round in brackets).", ""]
    if rows["I"]:
        md += ["## Table I: same-suite task non-IID (K=5, Dirichlet alpha=0.5)", "", "| method | object | goal | spatial |", "|---|---|---|---|"]
    by = {}
    for r in rows["I"]:
        by.setdefault(r["protocol"]["name"], {})[r["suites"][0]] = r
    for m, d in by.items():
        md.append(f"| {m} | " + " | ".join(f"{pct(d[s]['final'].get(s))} ({pct(d[s]['best'].get(s))})" if s in d else "-"
                                          for s in ["object", "goal", "spatial"]) + " |")
    if rows["II"]:
        md += ["", "## Table II: cross-suite (2 devices per suite, shards of the 5-client partitions)", "",
               "| method | setting | per suite (final / best) | clusters |", "|---|---|---|---|"]
        for r in rows["II"]:
            md.append(f"| {r['protocol']['name']} | {'-'.join(r['suites'])} | " +
                      ", ".join(f"{s} {pct(r['final'][s])}/{pct(r['best'][s])}" for s in r["suites"]) + f" | {r['clusters'] or ''} |")
    if rows["III"]:
        md += ["", "## Table III: ablation, Object-Goal cross-suite", "", "| configuration | object | goal | clusters |", "|---|---|---|---|"]
    for r in rows["III"]:
        md.append(f"| {r['label']} | {pct(r['final'].get('object'))} | {pct(r['final'].get('goal'))} | {r['clusters'] or ''} |")
    for table in ("I", "II", "III"):
        if not rows[table]:
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        for r in rows[table]:
            for s, c in r["curve"].items():
                label = r.get("label", r["protocol"]["name"]) + f" {'-'.join(r['suites'])}:{s}"
                ax.plot(list(c), [100 * v for v in c.values()], marker="o", label=label)
        ax.set_xlabel("round")
        ax.set_ylabel("success rate (%)")
        ax.set_title(f"Table {table}: success per round")
        ax.legend(fontsize=5, ncol=2)
        fig.tight_layout()
        fig.savefig(OUT / f"feddrman_curves_{table}_{budget}.png", dpi=120)
        plt.close(fig)
        md += ["", f"![Table {table} curves](feddrman_curves_{table}_{budget}.png)"]
    (OUT / f"feddrman{'' if budget == 'default' else '_' + budget}.md").write_text("\n".join(md) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
