"""Kernel benchmark: message throughput of a large gossip run, and where the quickstart's wall time goes.

    python analysis/bench_kernel.py [--devices 10000] [--rounds 2] [--repeat 1]

Prints two tables. The large run uses a tiny logistic-regression task (MCDC synthetic
data, 8 samples per device, an MLP with 4 hidden units) on a random geometric
neighbourhood, so the figure measures the simulator, not PyTorch.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import p2pfl

ROOT = Path(__file__).resolve().parents[1]


def large_gossip(n: int, rounds: int) -> dict:
    radius = 1.6 * math.sqrt(math.log(n) / (math.pi * n))  # comfortably above the connectivity threshold
    scenario = {
        "name": f"bench_gossip_{n}",
        "seed": 0,
        "topology": {"kind": "random_geometric", "n": n, "radius": radius},
        "data": {"dataset": "synthetic_logistic", "samples_per_client": 8,
                 "partition": {"kind": "parameter_shift", "n_clusters": 1, "n_features": 10}},
        "model": {"name": "mlp", "hidden": 4},
        "training": {"epochs": 1, "batch_size": 8, "lr": 0.05, "momentum": 0.0},
        "protocol": {"name": "gossip", "rounds": rounds},
    }
    t0 = time.perf_counter()
    r = p2pfl.run(scenario, write=False)
    wall = time.perf_counter() - t0
    return {"devices": n, "rounds": rounds, "messages": r.messages_total, "events": r.timing["events"],
            "wall_s": wall, "train_wall_s": r.timing["train_wall_s"], "build_wall_s": r.timing["build_wall_s"],
            "msgs_per_s": r.messages_total / wall, "events_per_s": r.timing["events"] / wall}


def quickstart() -> dict:
    r = p2pfl.run(ROOT / "scenarios" / "quickstart.yaml", write=False)
    t = r.timing
    return {"wall_s": t["wall_s"], "train_wall_s": t["train_wall_s"], "eval_wall_s": t["eval_wall_s"],
            "build_wall_s": t["build_wall_s"], "outside_training": 1.0 - t["train_wall_s"] / t["wall_s"],
            "accuracy_mean": r.accuracy_mean}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="repeat each measurement and report medians")
    args = ap.parse_args()

    big = [large_gossip(args.devices, args.rounds) for _ in range(args.repeat)]
    qs = [quickstart() for _ in range(args.repeat)]
    med = lambda rows, k: statistics.median(r[k] for r in rows)

    print(f"\nGossip kernel throughput ({args.devices} devices, {args.rounds} rounds, median of {args.repeat})")
    print("| devices | messages | events | wall s | build s | train s | messages / wall s | events / wall s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {big[0]['devices']} | {big[0]['messages']} | {big[0]['events']} | {med(big, 'wall_s'):.2f} | "
          f"{med(big, 'build_wall_s'):.2f} | {med(big, 'train_wall_s'):.2f} | {med(big, 'msgs_per_s'):.0f} | "
          f"{med(big, 'events_per_s'):.0f} |")
    print(f"\nQuickstart wall time (median of {args.repeat})")
    print("| wall s | build s | train s | eval s | share outside training | accuracy |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(f"| {med(qs, 'wall_s'):.2f} | {med(qs, 'build_wall_s'):.2f} | {med(qs, 'train_wall_s'):.2f} | "
          f"{med(qs, 'eval_wall_s'):.3f} | {100 * med(qs, 'outside_training'):.1f}% | {med(qs, 'accuracy_mean'):.4f} |")


if __name__ == "__main__":
    main()
