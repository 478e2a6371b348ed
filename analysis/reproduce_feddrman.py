"""Reproduce the structure of FedDRMan's Tables I-III on p2pfl's MuJoCo suites.

    python analysis/reproduce_feddrman.py                 # the default budget (see BUDGETS), seed 0
    python analysis/reproduce_feddrman.py --budget smoke  # a seconds-long pipeline check

Runs in parallel (one per core) write their own ``--tag``; ``--merge a.jsonl b.jsonl`` then writes
one report over all seeds; ``--resume`` keeps a tag's finished rows and runs the rest.

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
    # the committed report: paper-like 1 local epoch per round (Sec. IV-A), 20 rounds instead of 50
    "default": dict(rounds=20, eval_every=5, episodes=10, horizon=80, demos=150, epochs=1),
}
METHODS = {
    "centralized": {"name": "centralized"},
    "local": {"name": "local"},
    "fedavg": {"name": "fedavg"},
    "fedprox": {"name": "fedprox", "mu": 0.001},
    "fedkd": {"name": "fedkd"},
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


def run(table, suites, per_suite, protocol, b, seed, log, label=None) -> dict:
    t0 = time.time()
    r = p2pfl.run(scenario(suites, per_suite, protocol, b, seed), write=False)
    curve = per_suite_curve(r.summary)
    row = {"table": table, "label": label or protocol["name"], "seed": seed, "suites": suites, "protocol": protocol, "final": {s: c[max(c)] for s, c in curve.items()},
           "best": {s: max(c.values()) for s, c in curve.items()}, "curve": curve, "clusters": r.summary.get("clusters"),
           "cua_groups": [[e["round"], e["value"]] for e in r.summary["logs"].get("cua_groups", [])],
           "wall_s": round(time.time() - t0, 1), "sim_time_s": r.sim_time_s, "bytes_total": r.summary["bytes_total"]}
    log.write(json.dumps(row) + "\n")
    log.flush()
    print(f"[{table}] seed {seed} {'+'.join(suites):<22} {row['label']:<20} final {row['final']} ({row['wall_s']} s)", flush=True)
    return row


SAME_SUITE_BETA = {"object": 0.90, "goal": 0.85, "spatial": 0.90}  # Sec. IV-A


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", choices=list(BUDGETS), default="default")
    ap.add_argument("--seeds", default="0", help="comma list of seeds; every row runs once per seed")
    ap.add_argument("--skip-table2", action="store_true")
    ap.add_argument("--table1-suites", default="object,goal,spatial", help="comma list ('' skips Table I)")
    ap.add_argument("--table1-methods", default="centralized,local,fedavg,fedprox,fedkd", help="baselines besides feddrman; feddrman-r16 = FedDRMan with subspace rank 16")
    ap.add_argument("--pairs", default="object+goal,object+spatial,goal+spatial,object+goal+spatial",
                    help="Table II settings, comma list of suite+suite")
    ap.add_argument("--table2-methods", default="local,fedavg,fedprox,fedkd,feddrman-text",
                    help="baselines besides feddrman; feddrman-text = FedDRMan with the text encoder as Omega")
    ap.add_argument("--skip-feddrman", action="store_true", help="baselines only (e.g. to add a baseline to earlier runs)")
    ap.add_argument("--skip-table3", action="store_true")
    ap.add_argument("--tag", default="", help="suffix of the output files (runs in parallel must differ)")
    ap.add_argument("--resume", action="store_true", help="keep the rows already in this tag's jsonl and run only the rest")
    ap.add_argument("--merge", nargs="*", default=None, metavar="JSONL",
                    help="write one report from earlier runs' jsonl files (no new runs)")
    a = ap.parse_args()
    b = BUDGETS[a.budget]
    OUT.mkdir(parents=True, exist_ok=True)
    tag = a.budget + (f"_{a.tag}" if a.tag else "")
    if a.merge is not None:
        rows = [json.loads(line) for f in a.merge for line in Path(f).read_text().splitlines() if line.strip()]
        write_report(rows, b, tag, sum(r["wall_s"] for r in rows))
        return
    t0 = time.time()
    path = OUT / f"feddrman_runs_{tag}.jsonl"
    rows: list[dict] = []
    if a.resume and path.is_file():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    done = {(r["table"], r["label"], "+".join(r["suites"]), r["seed"]) for r in rows}
    pick = lambda names: {k: v for k, v in METHODS.items() if k in names.split(",")}

    def once(table, suites, per_suite, proto, seed, log, label=None) -> None:
        if (table, label or proto["name"], "+".join(suites), seed) not in done:
            rows.append(run(table, suites, per_suite, proto, b, seed, log, label))

    with open(path, "a" if a.resume else "w") as log:
        for seed in [int(x) for x in a.seeds.split(",")]:
            for suite in [s for s in a.table1_suites.split(",") if s]:
                ours = {"name": "feddrman", "n_clusters": 1, "beta": SAME_SUITE_BETA[suite]}
                for proto in [*pick(a.table1_methods).values(), *([] if a.skip_feddrman else [ours])]:
                    once("I", [suite], 5, proto, seed, log)
                if "feddrman-r16" in a.table1_methods.split(","):  # a rank below the batch size N = 32 (see report)
                    once("I", [suite], 5, {**ours, "rank": 16}, seed, log, label="feddrman (rank 16)")
            combos = [] if a.skip_table2 else [p.split("+") for p in a.pairs.split(",") if p]
            for suites in combos:
                ours = {"name": "feddrman", "n_clusters": len(suites), "beta": 0.85 if len(suites) == 3 else 0.9}
                for proto in [*pick(a.table2_methods).values(), *([] if a.skip_feddrman else [ours])]:
                    once("II", suites, 2, proto, seed, log)
                if "feddrman-text" in a.table2_methods.split(","):  # Omega = text encoder instead of the paper's transformer
                    once("II", suites, 2, {**ours, "omega": "text."}, seed, log, label="feddrman (Omega=text)")
            for label, sw in ([] if a.skip_table3 else ABLATION):
                once("III", ["object", "goal"], 2, {"name": "feddrman", "n_clusters": 2, "beta": 0.9, **sw}, seed, log, label=label)
    write_report(rows, b, tag, time.time() - t0)


def _cells(group: list[dict], suites: list[str]) -> list[str]:
    """'mean ± half-width of the 95% t-interval (seed values)' of the final success per suite over a group's
    seeds, in %."""
    from p2pfl.metrics.report import ci95

    out = []
    for s in suites:
        vals = [100 * r["final"][s] for r in group if s in r["final"]]
        if not vals:
            out.append("-")
        elif len(vals) == 1:
            out.append(f"{vals[0]:.1f}")
        else:
            mean, _, _, hi = ci95(vals)
            out.append(f"{mean:.1f} ± {hi - mean:.1f} ({' / '.join(f'{v:.0f}' for v in vals)})")
    return out


def co_clustering(group: list[dict], per_suite: int = 2) -> str:
    """Paper Fig. 5(a): % of (round, seed) in which same-suite / cross-suite device pairs share a CUA group."""
    same, cross = [], []
    for r in group:
        for _, groups in r.get("cua_groups", []):
            where = {d: gi for gi, g in enumerate(groups) for d in g}
            devs = sorted(where)
            for i in devs:
                for j in devs:
                    if i < j:
                        (same if i // per_suite == j // per_suite else cross).append(where[i] == where[j])
    if not same:
        return ""
    pct = lambda v: f"{100 * sum(v) / len(v):.0f}%" if v else "-"
    return f"same-suite {pct(same)}, cross-suite {pct(cross)}"


def _seeds(groups: dict) -> str:
    seeds = sorted({r["seed"] for g in groups.values() for r in g})
    return f"Seeds: {', '.join(map(str, seeds))}.\n"


def write_report(rows: list[dict], b: dict, budget: str, wall: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = sorted({r["seed"] for r in rows})
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["table"], r["label"], "+".join(r["suites"])), []).append(r)
    md = [f"# FedDRMan reproduction on p2pfl's MuJoCo suites (budget `{budget}`)", "",
          f"Budget: {b['rounds']} rounds, rollouts every {b['eval_every']} rounds, {b['episodes']} episodes per task "
          f"(4 tasks per suite), horizon {b['horizon']}, {b.get('epochs', 1)} local epoch(s) per round, {b['demos']} expert "
          f"demos per task; seeds {', '.join(map(str, seeds))} (per table below). Total run time {wall / 60:.1f} min (CPU, 1 torch thread per run). "
          "Numbers are success rates (%) at the final round: mean over seeds ± the half-width of its 95% t-interval "
          "(per-seed values in brackets).", ""]
    table1 = {k: v for k, v in groups.items() if k[0] == "I"}
    if table1:
        md += ["## Table I: same-suite task non-IID (K=5, Dirichlet alpha=0.5 over tasks)", "", _seeds(table1),
               "| method | object | goal | spatial | mean |", "|---|---|---|---|---|"]
        labels = list(dict.fromkeys(k[1] for k in table1))
        for lab in labels:
            cells, means = [], []
            for s in ["object", "goal", "spatial"]:
                g = table1.get(("I", lab, s), [])
                cells += _cells(g, [s])
                means += [100 * r["final"][s] for r in g]
            md.append(f"| {lab} | " + " | ".join(cells) + f" | {sum(means) / len(means):.1f} |" if means else "")
    table2 = {k: v for k, v in groups.items() if k[0] == "II"}
    if table2:
        md += ["", "## Table II: cross-suite (2 devices per suite; FedDRMan C = number of suites)", "", _seeds(table2),
               "| setting | method | per-suite success | mean | pairs co-clustered over rounds (truth: 100% / 0%) |", "|---|---|---|---|---|"]
        order = ["local", "fedavg", "fedprox", "fedkd", "feddrman"]
        settings = list(dict.fromkeys(k[2] for k in table2))
        key = lambda k: (settings.index(k[2]), order.index(k[1]) if k[1] in order else len(order))
        for (_, lab, setting), g in sorted(table2.items(), key=lambda kv: key(kv[0])):
            suites = g[0]["suites"]
            vals = [100 * r["final"][s] for r in g for s in suites]
            md.append(f"| {setting} | {lab} | " + ", ".join(f"{s} {c}" for s, c in zip(suites, _cells(g, suites))) +
                      f" | {sum(vals) / len(vals):.1f} | {co_clustering(g)} |")
    table3 = {k: v for k, v in groups.items() if k[0] == "III"}
    if table3:
        md += ["", "## Table III: ablation on Object-Goal cross-suite", "", _seeds(table3), "| configuration | object | goal | mean | pairs co-clustered (same / cross suite) |",
               "|---|---|---|---|---|"]
        for (_, lab, _), g in table3.items():
            vals = [100 * r["final"][s] for r in g for s in ("object", "goal")]
            md.append(f"| {lab} | " + " | ".join(_cells(g, ["object", "goal"])) + f" | {sum(vals) / len(vals):.1f} | {co_clustering(g)} |")
    for table, tg in (("I", table1), ("II", table2), ("III", table3)):
        if not tg:
            continue
        settings = list(dict.fromkeys(k[2] for k in tg))
        fig, axes = plt.subplots(1, len(settings), figsize=(4.2 * len(settings), 4), squeeze=False, sharey=True)
        colours = plt.get_cmap("tab10").colors
        labels = list(dict.fromkeys(k[1] for k in tg))
        for (_, lab, setting), g in tg.items():
            ax = axes[0][settings.index(setting)]
            for si, s in enumerate(g[0]["suites"]):
                rounds = sorted({int(k) for r in g for k in r["curve"].get(s, {})})
                mean = [100 * sum(r["curve"][s].get(str(k), r["curve"][s].get(k, 0)) for r in g) / len(g) for k in rounds]
                ax.plot(rounds, mean, marker="o", color=colours[labels.index(lab) % 10], linestyle=["-", "--", ":"][si % 3],
                        label=f"{lab}: {s}")
            ax.set_title(setting if table == "II" else f"Table {table}: {setting}", fontsize=9)
            ax.set_xlabel("round")
        for ax in axes[0]:
            ax.legend(fontsize=5)
        axes[0][0].set_ylabel("rollout success (%), mean over seeds")
        fig.suptitle(f"Table {table}: success per evaluated round (line style = suite)", fontsize=10)
        fig.tight_layout()
        fig.savefig(OUT / f"feddrman_curves_{table}_{budget}.png", dpi=120)
        plt.close(fig)
        md += ["", f"![Table {table} curves](feddrman_curves_{table}_{budget}.png)"]
    name = "feddrman.md" if budget == "default" else f"feddrman_{budget}.md"
    (OUT / name).write_text("\n".join(md) + "\n")
    print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
