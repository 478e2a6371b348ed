"""Which of FedKD-A's distillation terms cost our FedKD its success (FedDRMan Table I, object suite).

Our FedKD scores below Local in Table I (``analysis/results/feddrman.md``). This runs the Table I object
federation (5 clients, Dirichlet 0.5 over tasks) with FedKD once per set of distillation terms
(``protocol.distill_terms``): all of them (FedKD-A as we adapted it), only the two action distillations
(FedDRMan's Eq. 7 estimator), only the hidden-state loss, none (the pair then trains by behaviour cloning
alone: the mentor as Local's policy, the mentee as FedAvg's narrower, SVD-compressed model). It scores
the shared mentee (what Table I scores) or each device's private mentor (``--score``). Everything else
is the Table I scenario at a shorter budget (``--rounds``, ``--episodes`` per task at each evaluation).

Beside the success rate the table gives the scored policies' held-out behaviour-cloning loss (GMM NLL
on each device's test demos, ``bc_test_loss``) at the last evaluation, mean over devices and seeds.

    python analysis/experiments/fedkd_ablation.py [--seeds 0] [--rounds 10] [--episodes 10] [--score mentor,mentee] [--out F]
    # -> analysis/results/fedkd_ablation.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import p2pfl
from p2pfl.metrics.tables import markdown_table

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "robotics" / "object_feddrman.yaml"
OUT = ROOT / "analysis" / "results" / "fedkd_ablation.md"
TERMS = ("all", "action", "hidden", "none")


def run_one(score: str, terms: str, seed: int, rounds: int, episodes: int) -> dict:
    """One run's success curve (round -> mean success, %) and its last held-out BC loss (mean over devices)."""
    r = p2pfl.run(SCENARIO, seed=seed, write=False, cores=1, unset=["protocol.n_clusters", "protocol.beta"],
                  overrides=["protocol.name=fedkd", f"protocol.evaluate={score}", f"protocol.distill_terms={terms}",
                             f"protocol.rounds={rounds}", f"data.partition.eval_episodes={episodes}"])
    curve = {p["round"]: 100 * p["success_mean"] for p in r.success_curve}
    rollouts = r.logs["rollout_success"]
    last = [e for e in rollouts if e["round"] == rounds and e.get("bc_test_loss") is not None]
    return {"curve": curve, "bc": statistics.fmean(e["bc_test_loss"] for e in last) if last else None,
            "devices": r.n_devices, "tasks": len(rollouts[0]["per_task"])}


def reading(score: str, runs: dict[tuple[str, str], list[dict]], last: int) -> list[str]:
    """One sentence from the numbers: each ablation's last success beside behaviour cloning alone's."""
    mean = {t: statistics.fmean(r["curve"][last] for r in rs) for (sc, t), rs in runs.items() if sc == score}
    if "none" not in mean or len(mean) < 2:
        return []
    others = "; ".join(f"{t} {v:.1f}%" for t, v in mean.items() if t != "none")
    who = ("the private mentors (each the policy Local trains, plus the distillation terms)" if score == "mentor"
           else "the shared mentee (FedAvg's average of the narrower policy, plus the distillation terms)")
    verb = "succeed" if score == "mentor" else "succeeds"
    return [f"At round {last}, {who} trained by behaviour cloning alone (none) {verb} {mean['none']:.1f}% of the "
            f"time; with distillation: {others}.", ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0", help="comma-separated root seeds (default 0)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--episodes", type=int, default=10, help="rollouts per task at each evaluation")
    ap.add_argument("--terms", default=",".join(TERMS), help=f"comma-separated, of {', '.join(TERMS)}")
    ap.add_argument("--score", default="mentor", help="comma-separated, of mentor, mentee (default mentor)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"the report (default {OUT.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    terms = args.terms.split(",")
    scores = args.score.split(",")
    if bad := [t for t in terms if t not in TERMS]:
        print(f"--terms: {bad[0]!r} is not one of {', '.join(TERMS)}", file=sys.stderr)
        return 2
    if bad := [s for s in scores if s not in ("mentor", "mentee")]:
        print(f"--score: {bad[0]!r} is not mentor or mentee", file=sys.stderr)
        return 2
    runs: dict[tuple[str, str], list[dict]] = {}
    total, t0 = len(scores) * len(terms) * len(seeds), time.perf_counter()
    for sc in scores:
        for t in terms:
            for s in seeds:
                runs.setdefault((sc, t), []).append(run_one(sc, t, s, args.rounds, args.episodes))
                done = sum(len(v) for v in runs.values())
                print(f"[{done}/{total}] {sc} scored, distill_terms={t}, seed {s}: {runs[sc, t][-1]['curve']} "
                      f"({time.perf_counter() - t0:.0f} s so far)", flush=True)
    first = next(iter(runs.values()))[0]
    evals = sorted(first["curve"])
    rows = []
    for (sc, t), rs in runs.items():
        per_round = [statistics.fmean(r["curve"][k] for r in rs) for k in evals]
        bcs = [r["bc"] for r in rs if r["bc"] is not None]
        last = " / ".join(f"{r['curve'][evals[-1]]:.1f}" for r in rs)
        rows.append([sc, t, *(f"{v:.1f}" for v in per_round), last, f"{statistics.fmean(bcs):.2f}" if bcs else None])
    header = ["scored", "distill_terms", *(f"success % at round {k}" for k in evals), "last, per seed",
              "held-out BC NLL, last"]
    out = "" if args.out == OUT else f" --out {args.out}"
    md = ["# FedKD distillation-term ablation (Table I object)", "",
          f"Generated by `python analysis/experiments/fedkd_ablation.py{out} --seeds {args.seeds} --rounds {args.rounds} "
          f"--episodes {args.episodes} --terms {args.terms} --score {args.score}`; {args.episodes} rollouts per task ({first['tasks']} tasks) per device at each evaluation, "
          f"{first['devices']} devices, seeds {', '.join(map(str, seeds))}. Success: mean over devices (and seeds).", "",
          *markdown_table(rows, header, na="-"), "", *(line for sc in scores for line in reading(sc, runs, evals[-1])), ""]
    args.out.write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
