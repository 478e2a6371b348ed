"""What the dynamics machinery costs the kernel: large-N gossip, static vs each kind of dynamics.

The workload is Table 2 of ``bench_executors.py`` (sync push-pull gossip, MLP(64), synthetic logistic data,
16 samples per device, a connected random geometric neighbourhood), with ``reply_timeout_s`` set (dynamics
require it). Rows, all at the same N and rounds:

- ``static``: no ``dynamics:`` block (the baseline);
- ``empty``: ``dynamics: {churn: {offline: 0}}``: the dynamic code path with nothing changing;
- ``churn 30%``: every device up and down (exponential, mean cycle 10 rounds' worth of simulated time);
- ``links``: every link fails and recovers (mean up 20 s, down 2 s);
- ``mobility``: random waypoint for every device, radius graph recomputed every 0.05 s.

Each row runs in its own fresh subprocess (wall time includes start-up; peak memory is that process's
maximum RSS). Figures: simulated-time-independent wall seconds of the run (``run_wall_s``), the kernel's
part outside training per device-round (``(run_wall_s - train_wall_s) / (N * rounds)``), events logged,
peak RSS, and messages dropped.

    python analysis/bench_dynamics.py [--n 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

from bench_executors import gossip_scenario  # this folder is on sys.path when run as a script

CHILD = r"""
import json, resource, sys, time
from p2pfl.config import load_dict
from p2pfl.sim.kernel import Simulation
sc = json.loads(sys.argv[1])
t0 = time.perf_counter()
sim = Simulation(load_dict(sc))
s = sim.run()
t = sim.timing()
print(json.dumps({"wall_s": time.perf_counter() - t0, "run_wall_s": t["run_wall_s"], "train_wall_s": t["train_wall_s"],
                  "events": t["events"], "dropped": s["messages_dropped"], "sim_time_s": s["sim_time_s"],
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def scenario(n: int, rounds: int, dynamics: dict[str, Any] | None) -> dict[str, Any]:
    """``bench_executors``' large-N gossip on the inline executor, with the reply timeout dynamics require."""
    sc = gossip_scenario(n, rounds, "inline")
    sc["name"] = f"bench_dynamics_{n}"
    sc["protocol"]["reply_timeout_s"] = 0.05
    if dynamics is not None:
        sc["dynamics"] = dynamics
    return sc


ROWS: dict[str, dict[str, Any] | None] = {
    "static": None,
    "empty": {"churn": {"offline": 0.0, "cycle_s": 1.0}},
    "churn 30%": {"churn": {"offline": 0.3, "cycle_s": 0.1}},
    "links": {"link_failures": {"mean_up_s": 0.2, "mean_down_s": 0.02}},
    "mobility": {"mobility": {"speed": [0.01, 0.05], "update_s": 0.005}},
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"gossip, N = {args.n}, {args.rounds} rounds, inline, 1 thread; one fresh process per row\n")
    print("| dynamics | wall s | run s | kernel ms / device-round | events | dropped | sim time s | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, dyn in ROWS.items():
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(scenario(args.n, args.rounds, dyn))],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(f"| {name} | failed: {out.stderr.strip().splitlines()[-1]} |")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        per = (r["run_wall_s"] - r["train_wall_s"]) / (args.n * args.rounds) * 1e3
        print(f"| {name} | {r['wall_s']:.1f} | {r['run_wall_s']:.1f} | {per:.2f} | {r['events']:,} | {r['dropped']:,} | "
              f"{r['sim_time_s']:.3f} | {r['peak_rss_mb']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
