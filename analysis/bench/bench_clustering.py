"""Clustering at scale: one headline cell per protocol and N, before and after, one at a time.

The headline fleet (``scenarios/headline/base.yaml``: Fashion-MNIST, 100 samples per device, MLP,
8 rounds, feature skew, groups together, static) at the radius and server deadlines of
``scenarios/studies/headline_n*.yaml``. Each row is one ``p2pfl run`` in a fresh process, run from a
source tree (``--before DIR`` is a checkout of an older commit; the after-tree is this one), with
nothing else running: wall and build seconds from its ``timing.json``, peak memory of its largest
process (``wait4``, ``p2pfl.metrics.measured``), the modelled discovery FLOPs (``clustering_flops``) and simulated time from
its ``summary.json``. A run past ``--limit-s`` is stopped and reported as such. ``--profile`` samples
each run with py-spy at 10 Hz (its processes and their workers) and writes the folded stacks beside it,
with the largest shares by function (``p2pfl.metrics.measured.top_shares``).

    python analysis/bench/bench_clustering.py --n 100 1000 --before /tmp/before --out runs/bench_clustering
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from p2pfl.metrics.measured import commit_of, measure, run_command, run_env, top_shares
from p2pfl.metrics.tables import markdown_table

ROOT = Path(__file__).resolve().parents[2]

PROTOCOLS = ("rnd_relay", "rnd_gossip_h1", "rnd_gossip_h2", "dac_cosine", "dac_original", "ifca", "gossip", "dsgd",
             "local")
#: Per N: the topology's radius (mean degree about 7) and the server deadlines of the headline studies.
SETTINGS: dict[int, list[str]] = {
    100: ["topology.radius=0.165"],
    1000: ["topology.n=1000", "topology.radius=0.0519"],
    10000: ["topology.n=10000", "topology.radius=0.0164", "topology.allow_disconnected=true"],
}
DEADLINES: dict[tuple[int, str], list[str]] = {
    (1000, "ifca"): ["protocol.round_timeout_s=150.0"],
    (10000, "ifca"): ["protocol.round_timeout_s=1500.0"],  # 4 models x 10,000 devices x 16.3 ms = 652 s a round
    # the server relays N (N - 1) predictors through its one uplink: about 2,700 s simulated at N = 1,000
    (1000, "rnd_relay"): ["protocol.round_timeout_s=40.0", "protocol.discovery_timeout_s=10000.0"],
}
#: rnd_relay scores N^2 predictor pairs: not run at N = 10,000 (10^8 pairs).
SKIP = {(10000, "rnd_relay")}


def run_cell(tree: Path, n: int, protocol: str, out: Path, limit_s: float, profile: bool = False) -> dict[str, Any]:
    """One cell in a fresh process from ``tree``; its timing, peak memory and summary."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = run_command(f"scenarios/headline/{protocol}.yaml", [*SETTINGS[n], *DEADLINES.get((n, protocol), [])], out,
                      entry=("-m", "p2pfl.cli"))
    folded = out.with_name(out.name + ".folded")
    if profile:
        cmd = ["py-spy", "record", "--rate", "10", "--subprocesses", "--format", "raw", "--output", str(folded),
               "--", *cmd]
    out.parent.mkdir(parents=True, exist_ok=True)
    m = measure(cmd, timeout_s=limit_s, cwd=tree, env=run_env({"PYTHONPATH": str(tree)}))
    row: dict[str, Any] = {"n": n, "protocol": protocol, "peak_gb": m.peak_rss_mib * 2**20 / 1e9}
    if m.failure:
        row["failed"] = m.failure
        return row
    if profile and folded.exists():
        row["profile"] = top_shares(folded)
    timing = json.loads((out / "timing.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    row.update(wall_s=timing["wall_s"], build_s=timing["build_wall_s"], sim_s=summary.get("sim_time_s"),
               discovery_gflop=(summary.get("clustering_flops") or 0) / 1e9, acc=summary.get("accuracy_mean"),
               ari=summary.get("ari"))
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of the cells run, a failed one with its reason in the wall column."""
    def cells(r: dict[str, Any]) -> list[str]:
        if "failed" in r:
            return [f"{r['n']:,}", r["protocol"], r["tree"], r["failed"], "", f"{r['peak_gb']:.2f}", "", "", "", ""]
        return [f"{r['n']:,}", r["protocol"], r["tree"], f"{r['wall_s']:.1f}", f"{r['build_s']:.1f}",
                f"{r['peak_gb']:.2f}", f"{r['discovery_gflop']:.1f}", f"{r['sim_s']:.1f}", f"{r['acc']:.3f}",
                "" if r["ari"] is None else f"{r['ari']:.2f}"]

    return "\n".join(markdown_table([cells(r) for r in rows], [
        "N", "protocol", "tree", "wall s", "build s", "peak GB", "discovery GFLOP (modelled)", "simulated s",
        "accuracy", "ARI"], align="rllrrrrrrr"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[100, 1000], choices=sorted(SETTINGS))
    ap.add_argument("--protocols", nargs="+", default=list(PROTOCOLS), choices=PROTOCOLS)
    ap.add_argument("--before", type=Path, help="a checkout of the commit before (its rows run first)")
    ap.add_argument("--skip-after", action="store_true", help="run the before-tree only")
    ap.add_argument("--limit-s", type=float, default=3600.0, help="stop a run after this long")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_clustering"))
    ap.add_argument("--profile", action="store_true", help="sample each run with py-spy (10 Hz)")
    args = ap.parse_args(argv)
    trees = ([("before", args.before)] if args.before else []) + ([] if args.skip_after else [("after", ROOT)])
    rows: list[dict[str, Any]] = []
    for n in args.n:
        for protocol in args.protocols:
            if (n, protocol) in SKIP:
                continue
            for label, tree in trees:
                out = args.out.resolve() / f"{label}-{protocol}-n{n}"
                commit = commit_of(tree) or "?"  # (before the run: a commit made meanwhile is not what ran)
                row = run_cell(tree.resolve(), n, protocol, out, args.limit_s, args.profile)
                row["tree"] = f"{label} {commit}"
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
