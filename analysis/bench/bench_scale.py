"""The kernel at scale: gossip, DSGD and FedAvg on random geometric fleets, one fresh process per row.

    python analysis/bench/bench_scale.py [--protocols gossip dsgd fedavg] [--sizes 10000 100000] [--rounds 10]
                                   [--huge 1000000] [--huge-rounds 2] [--executor batched] [--timeout 3600]
                                   [--engine events] [--dynamics N] [--heap N] [--budget N] [--quick]

Scale table: ``scenarios/bench/scale.yaml`` (gossip), ``scale_dsgd.yaml``, ``scale_fedavg.yaml`` and
``scale_ifca.yaml`` (IFCA: two cluster models on two true clusters; ``--protocols ... ifca``) (MLP with
64 hidden units on 16 synthetic samples per device) at each N, radius 1.6 sqrt(ln N / (pi N)). Each row is one
``p2pfl run`` in a fresh process (``p2pfl.metrics.measured``): wall seconds (start-up and set-up included),
build and run seconds (``timing.json``), peak PSS of the process tree, the time per device-round outside
training, ``(run_wall_s - train_wall_s) / (N rounds)``, SimPy events per device-round (``timing.json``'s
``sim_events``; absent before it was recorded), and peak PSS per device. ``--engine tensor``: the rows under
``engine: tensor`` (``p2pfl.tensor``; the executor does not apply there).

``--dynamics N``: gossip at N devices, 5 rounds, inline, with each kind of dynamics (a reply timeout set, as
dynamics require): none, an empty churn block, 30% churn, link failures, random-waypoint mobility.

``--heap N``: the headline gossip fleet (``scenarios/headline/gossip.yaml``) at N devices with ``malloc_trim``
once per fleet round (``p2pfl.sim.heap``, the default), glibc's mmap threshold pinned at 64 KiB, and glibc's
default; the three ``summary.json`` must be the same bits (the table says whether they are).

``--budget N``: memory per device of gossip at N devices after one round (inline executor): what the
process's resident memory grew by (a fresh process), and in a second one under ``tracemalloc`` the Python
objects by the part of the code that made them (the file of the allocating frame); beside them the model's
own bytes and a torch generator's state (one per device); the rest is tensor storage and allocator slack.
With ``--engine tensor``: the bytes of each array the tensor engine holds the fleet in, and what resident
memory a device adds (the slope between N and 2N devices, after the run and at the peak).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any, Optional

from p2pfl.metrics.measured import emit, machine_line, measure, result_of, rss_bytes, run_command, run_env
from p2pfl.metrics.tables import markdown_table

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = {"gossip": "scale.yaml", "dsgd": "scale_dsgd.yaml", "fedavg": "scale_fedavg.yaml", "ifca": "scale_ifca.yaml"}
DYNAMICS: dict[str, Optional[dict[str, Any]]] = {
    "none": None,
    "empty churn block": {"churn": {"offline": 0.0, "cycle_s": 1.0}},
    "churn 30%": {"churn": {"offline": 0.3, "cycle_s": 0.1}},
    "link failures": {"link_failures": {"mean_up_s": 0.2, "mean_down_s": 0.02}},
    "mobility": {"mobility": {"speed": [0.01, 0.05], "update_s": 0.005}},
}
#: ``python -m p2pfl`` without the kernel's malloc_trim (``p2pfl.sim.heap.TRIM``).
NO_TRIM = ["-c", "import sys, p2pfl.sim.heap as h; h.TRIM = False; from p2pfl.cli import main; sys.exit(main())"]


def radius(n: int) -> float:
    return 1.6 * math.sqrt(math.log(n) / (math.pi * n))


def run(scenario: Path, sets: list[str], out: Path, timeout_s: float, trim: bool = True,
        env: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """One ``p2pfl run`` in a fresh process: its figures, or ``failed`` saying why."""
    cmd = run_command(scenario, sets, out, entry=("-m", "p2pfl") if trim else NO_TRIM)
    print(f"running {scenario.name} {' '.join(sets)} ...", file=sys.stderr, flush=True)
    m = measure(cmd, timeout_s=timeout_s, cwd=ROOT, env=run_env(env or {}))
    row: dict[str, Any] = {"wall_s": m.wall_s, "peak_pss_gb": m.peak_pss_mib / 1024,
                           "peak_rss_gb": m.peak_rss_mib / 1024}
    if m.failure:
        return {**row, "failed": m.failure}
    timing = json.loads((out / "timing.json").read_text())
    summary = (out / "summary.json").read_bytes()
    row.update(build_s=timing["build_wall_s"], run_s=timing["run_wall_s"], train_s=timing["train_wall_s"],
               events=timing["events"], sim_events=timing.get("sim_events"),
               dropped=json.loads(summary)["messages_dropped"],
               summary_sha=hashlib.sha256(summary).hexdigest())
    print(f"  wall {m.wall_s:.1f} s, peak PSS {row['peak_pss_gb']:.2f} GB", file=sys.stderr, flush=True)
    return row


def scale_rows(args: argparse.Namespace, tmp: Path) -> list[list[str]]:
    sizes = [(n, args.rounds) for n in args.sizes] + ([(args.huge, args.huge_rounds)] if args.huge else [])
    rows = []
    for protocol in args.protocols:
        for n, rounds in sizes:
            sets = [f"topology.n={n}", f"topology.radius={radius(n):.6f}", f"protocol.rounds={rounds}",
                    f"protocol.eval_every={rounds}", f"executor={args.executor}", f"engine={args.engine}"]
            r = run(ROOT / "scenarios" / "bench" / SCENARIO[protocol], sets, tmp / f"{protocol}-{n}", args.timeout)
            how = "tensor engine" if args.engine == "tensor" else args.executor
            head = [protocol, f"{n:,}", str(rounds), how, f"{r['wall_s']:.1f}"]
            if "failed" in r:
                rows.append([*head, r["failed"], "", f"{r['peak_pss_gb']:.2f}", "", "", ""])
                continue
            dr = n * rounds
            events = "" if r["sim_events"] is None else f"{r['sim_events'] / dr:.1f}"
            rows.append([*head, f"{r['build_s']:.1f}", f"{r['run_s']:.1f}", f"{r['peak_pss_gb']:.2f}",
                         f"{(r['run_s'] - r['train_s']) / dr * 1e3:.3f}", events,
                         f"{r['peak_pss_gb'] * 1e6 / n:.1f}"])
    return rows


def dynamics_rows(n: int, timeout_s: float, tmp: Path) -> list[list[str]]:
    rows = []
    for i, (name, dyn) in enumerate(DYNAMICS.items()):
        sets = [f"topology.n={n}", f"topology.radius={radius(n):.6f}", "protocol.rounds=5", "protocol.eval_every=5",
                "executor=inline", "protocol.reply_timeout_s=0.05"] + ([f"dynamics={json.dumps(dyn)}"] if dyn else [])
        r = run(ROOT / "scenarios" / "bench" / "scale.yaml", sets, tmp / f"dyn{i}", timeout_s)
        if "failed" in r:
            rows.append([name, r["failed"], "", "", "", "", ""])
            continue
        per = (r["run_s"] - r["train_s"]) / (5 * n) * 1e3
        rows.append([name, f"{r['wall_s']:.1f}", f"{r['run_s']:.1f}", f"{per:.3f}",
                     f"{r['events']:,}", f"{r['dropped']:,}", f"{r['peak_pss_gb']:.2f}"])
    return rows


def heap_rows(n: int, timeout_s: float, tmp: Path) -> tuple[list[list[str]], bool]:
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        raise SystemExit("unset MALLOC_MMAP_THRESHOLD_ first: the baseline is glibc's default")
    sets = [f"topology.n={n}", f"topology.radius={1.1 * math.sqrt(7 / (math.pi * (n - 1))):.4f}",
            "topology.allow_disconnected=true"]
    scenario = ROOT / "scenarios" / "headline" / "gossip.yaml"
    runs = {"malloc_trim each fleet round (the default)": run(scenario, sets, tmp / "heap0", timeout_s),
            "MALLOC_MMAP_THRESHOLD_=65536": run(scenario, sets, tmp / "heap1", timeout_s, False,
                                                {"MALLOC_MMAP_THRESHOLD_": "65536"}),
            "glibc default": run(scenario, sets, tmp / "heap2", timeout_s, False)}
    rows = [[k, r.get("failed", f"{r['wall_s']:.1f}"), f"{r['peak_rss_gb']:.2f}"] for k, r in runs.items()]
    return rows, len({r.get("summary_sha") for r in runs.values()}) == 1


#: Where a Python allocation's file belongs, first match wins (``--budget``).
PARTS = [("models: nn.Module objects", ("learning/", "torch/nn/", "torch/_tensor", "torch/__init__")),
         ("topology: networkx graph and links", ("networkx/", "topology/")),
         ("data shards", ("data/",)),
         ("network: messages, inboxes, SimPy", ("sim/network", "simpy/")),
         ("kernel: contexts, profiles, seeds", ("sim/", "seeding")),
         ("recorder", ("metrics/",)),
         ("protocol state", ("protocols/",))]


def budget_child(n: int, trace: bool) -> None:
    """Run gossip at ``n`` devices for one round; emit the resident memory it grew by and (``trace``, under
    tracemalloc, whose own records take memory too) the Python objects' bytes by part."""
    import torch

    from p2pfl.api import resolve
    from p2pfl.sim.kernel import Simulation

    def scenario(n: int) -> Any:
        return resolve(ROOT / "scenarios" / "bench" / "scale.yaml", overrides=[
            f"topology.n={n}", f"topology.radius={radius(n):.6f}", "protocol.rounds=1", "protocol.eval_every=1",
            "executor=inline"])

    sc = scenario(n)
    Simulation(scenario(16)).run()  # modules a run imports on first use (scipy.spatial, ...) load before measuring
    before = rss_bytes()
    if trace:
        tracemalloc.start()
        start = tracemalloc.take_snapshot()
    sim = Simulation(sc)
    sim.run()
    grown = rss_bytes() - before
    parts: dict[str, int] = {}
    for stat in tracemalloc.take_snapshot().compare_to(start, "filename") if trace else []:
        name = stat.traceback[0].filename
        part = next((p for p, keys in PARTS if any(k in name for k in keys)), "other Python objects")
        parts[part] = parts.get(part, 0) + stat.size_diff
    model = sim.new_model()
    model_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    gen_bytes = torch.Generator().get_state().numel()  # one torch generator's state, per device
    emit({"n": n, "model": model_bytes, "parts": parts, "generators": gen_bytes, "rss": grown})


def tensor_budget_child(n: int) -> None:
    """Run gossip at ``n`` devices for one round under ``engine: tensor``; emit what resident memory grew by
    (after the run and at its peak) and the bytes of each array the fleet is held in."""
    import resource

    import numpy as np

    from p2pfl.api import resolve
    from p2pfl.tensor.simulation import TensorSimulation

    def scenario(n: int) -> Any:
        return resolve(ROOT / "scenarios" / "bench" / "scale.yaml", overrides=[
            f"topology.n={n}", f"topology.radius={radius(n):.6f}", "protocol.rounds=1", "protocol.eval_every=1",
            "engine=tensor"])

    TensorSimulation(scenario(16)).run()  # modules loaded on first use load before measuring
    before, peak_before = rss_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    sim = TensorSimulation(scenario(n))
    sim.run()
    grown = rss_bytes() - before
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak_before
    fleet, data, adj = sim.program.fleet, sim.data, sim.adjacency
    rows = sim.program.rows
    assert rows is not None
    arrays = {
        "data: training and test samples (tensors)": data.x.nbytes + data.test_x.nbytes + sum(
            t.numel() * t.element_size() for t in (data.y, data.test_y)),
        "batch orders of every job (small integers)": fleet.trainer.orders.numel() * fleet.trainer.orders.element_size(),
        "graph: CSR arrays": adj.indptr.nbytes + adj.indices.nbytes,
        "profiles: arrays; jobs done": sum(a.nbytes for a in (fleet.flops_per_s, fleet.uplink_bps, fleet.downlink_bps,
                                                              fleet.trainer.jobs_done, data.true_clusters)),
    }
    floats = [v for v in vars(sim.energy).values() if isinstance(v, tuple)]
    arrays["energy constants (Python floats)"] = sum(len(t) * (8 + 24) for t in floats)
    lists = [v for v in sim._summary.values() if isinstance(v, list) and len(v) == n]
    arrays["summary: per-device lists (Python)"] = sum(len(v) * 8 + sum(0 if x is None or isinstance(x, bool) else 24
                                                                         for x in v[:1]) * len(v) for v in lists)
    emit({"n": n, "model": rows[0].numel() * rows.element_size(), "arrays": arrays, "rss": grown, "peak": peak,
          "numpy": np.__version__})


def tensor_budget_rows(n: int, timeout_s: float) -> list[list[str]]:
    """Per device: the slope of memory between N and 2N (chunk-sized buffers, a fixed cost, drop out of it)."""
    results = []
    for size in (n, 2 * n):
        print(f"running the tensor engine's budget at N = {size} ...", file=sys.stderr, flush=True)
        m = measure([sys.executable, __file__, "--budget-child", str(size), "--engine", "tensor"],
                    timeout_s=timeout_s, cwd=ROOT)
        r = result_of(m)
        if r is None:
            return [["failed", m.failure or "no result"]]
        results.append(r)
    small, big = results
    named = {k: (big["arrays"][k] - small["arrays"][k]) / n for k in small["arrays"]}
    rss, peak = ((big[k] - small[k]) / n for k in ("rss", "peak"))
    return [["the model's parameters (a row)", f"{small['model']:,}"],
            *[[k, f"{v:,.0f}"] for k, v in sorted(named.items(), key=lambda kv: -kv[1])],
            ["the parts above, all told", f"{small['model'] + sum(named.values()):,.0f}"],
            ["resident memory a device adds, measured after the run", f"{rss:,.0f}"],
            ["peak resident memory a device adds (the round's transient buffers included)", f"{peak:,.0f}"],
            [f"fixed: resident memory grown at N = {n:,} beyond N devices' share (chunk buffers)",
             f"{(small['rss'] - n * rss) / 2**20:,.0f} MiB"]]


def budget_rows(n: int, timeout_s: float) -> list[list[str]]:
    print(f"running the budget at N = {n} ...", file=sys.stderr, flush=True)
    runs = [measure([sys.executable, __file__, "--budget-child", str(n), *t], timeout_s=timeout_s, cwd=ROOT)
            for t in ([], ["--trace"])]
    r, traced = (result_of(m) for m in runs)
    if r is None or traced is None:
        return [["failed", next((m.failure for m in runs if m.failure), None) or "no result"]]
    per = {k: v / n for k, v in traced["parts"].items()}
    python = sum(per.values())
    return [["the model's parameters", f"{r['model']:,}"],
            *[[k, f"{v:,.0f}"] for k, v in sorted(per.items(), key=lambda kv: -kv[1])],
            ["a torch generator's state (C++, one per device)", f"{r['generators']:,}"],
            ["rest of resident memory (tensor storage, allocator)", f"{r['rss'] / n - python - r['generators']:,.0f}"],
            ["resident memory grown, all told", f"{r['rss'] / n:,.0f}"]]


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--protocols", nargs="+", default=["gossip", "dsgd", "fedavg"], choices=list(SCENARIO))
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--huge", type=int, help="also this many devices (e.g. 1000000), --huge-rounds rounds")
    ap.add_argument("--huge-rounds", type=int, default=2)
    ap.add_argument("--executor", default="batched")
    ap.add_argument("--engine", default="events", choices=["events", "tensor"])
    ap.add_argument("--dynamics", type=int, metavar="N", help="the dynamics table at N devices")
    ap.add_argument("--heap", type=int, metavar="N", help="the heap table at N devices")
    ap.add_argument("--budget", type=int, metavar="N", help="the memory budget per device at N devices")
    ap.add_argument("--budget-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per row")
    ap.add_argument("--quick", action="store_true", help="N = 200 and 2,000, 2 rounds: a check of the script")
    args = ap.parse_args(argv)
    if args.budget_child:
        if args.engine == "tensor":
            tensor_budget_child(args.budget_child)
        else:
            budget_child(args.budget_child, args.trace)
        return 0
    if args.quick:
        args.sizes, args.rounds, args.huge = [200, 2000], 2, None
    print(machine_line(ROOT, "QUICK MODE (a check of the script, not the benchmark)" if args.quick else ""))
    with tempfile.TemporaryDirectory(prefix="bench_scale-") as tmp:
        if args.sizes or args.huge:
            print("\nScale (" + ", ".join(f"{p}: scenarios/bench/{SCENARIO[p]}" for p in args.protocols) + ")\n")
            print("\n".join(markdown_table(scale_rows(args, Path(tmp)), [
                "protocol", "N", "rounds", "executor / engine", "wall s", "build s", "run s", "peak PSS GB",
                "outside training ms / device-round", "SimPy events / device-round", "peak PSS kB / device"],
                align="lrrlrrrrrrr")))
        if args.dynamics:
            print(f"\nDynamics: gossip, N = {args.dynamics}, 5 rounds, inline, 1 thread\n")
            print("\n".join(markdown_table(dynamics_rows(args.dynamics, args.timeout, Path(tmp)), [
                "dynamics", "wall s", "run s", "outside training ms / device-round", "events", "dropped",
                "peak PSS GB"], align="lrrrrrr")))
        if args.heap:
            rows, same = heap_rows(args.heap, args.timeout, Path(tmp))
            print(f"\nHeap: scenarios/headline/gossip.yaml, {args.heap} devices (summary.json identical: {same})\n")
            print("\n".join(markdown_table(rows, ["malloc", "wall s", "peak RSS GB"], align="lrr")))
        if args.budget and args.engine == "tensor":
            print(f"\nMemory per device: gossip, N = {args.budget:,} and {2 * args.budget:,}, one round, engine: tensor\n")
            print("\n".join(markdown_table(tensor_budget_rows(args.budget, args.timeout), ["part", "bytes / device"],
                                            align="lr")))
        elif args.budget:
            print(f"\nMemory per device: gossip, N = {args.budget}, after one round (inline executor)\n")
            print("\n".join(markdown_table(budget_rows(args.budget, args.timeout), ["part", "bytes / device"],
                                            align="lr")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
