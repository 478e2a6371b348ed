"""Executor benchmark: what each executor costs on workload W against a bare PyTorch loop, and per model family.

    python analysis/bench/bench_executors.py [--quick] [--only w|families] [--w-rows WORDS] [--family-jobs 40]
                                       [--timeout 1800]

Workload W (``scenarios/bench/workload_w.yaml``: FedAvg, real Fashion-MNIST, 20 devices x 1,000
IID samples, cnn28, SGD lr 0.01 momentum 0.9, batch 64, 1 local epoch, 10 rounds): a bare PyTorch loop
that trains the way Flower clients do (a DataLoader per device, a fresh SGD per job, then FedAvg of the
state dicts) on the very shards p2pfl builds, beside p2pfl with each executor. ``x floor`` is a run's
seconds over the floor = (bare loop, 1 thread, run seconds) / 2, the training alone spread perfectly over 2
cores; ``x measured floor`` is over the run seconds of 2 bare loops running at once, each on half the
devices (what 2 cores really give this training). Training throughput per model family: samples per second
of 40 jobs submitted together, per executor. Large-N runs: ``analysis/bench/bench_scale.py``.

Every configuration runs in its own fresh subprocess (this script with ``--child``), so its wall time
includes interpreter start, imports and set-up, and its memory is its own: peak memory is the largest sum of
PSS (proportional set size: a page shared by k processes, such as torch's libraries or the shards in
shared memory, counts 1/k in each) over the subprocess and all its descendants, sampled every 0.5 s; a sum
of RSS would count torch's libraries once per worker (``p2pfl.metrics.measured``). A configuration that
times out or fails becomes a row saying so. ``--quick`` (W on 2 devices x 200 samples for 2 rounds) checks that
the script works in about a minute or two; its figures are not the benchmark.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from p2pfl.metrics import measured
from p2pfl.metrics.measured import Outcome, outcome_of
from p2pfl.metrics.tables import markdown_table

ROOT = Path(__file__).resolve().parents[2]
W_SCENARIO = ROOT / "scenarios" / "bench" / "workload_w.yaml"
QUICK_W = ["topology.n=2", "data.samples_per_client=200", "protocol.rounds=2", "protocol.eval_every=2"]
BATCHED_MODULE = "p2pfl.executors.batched"
FLOOR_CORES = 2
FAMILIES = ("mlp", "cnn28", "rnd_predictor", "robot_policy")
EXECUTORS = ("inline", "process", "batched")


# --- the child: one configuration, measured inside a fresh interpreter ---------------------------------
def child_main(spec: dict[str, Any]) -> None:
    """Run one configuration and print its figures as one tagged JSON line on stdout."""
    if spec.get("needs_module") and not _importable(spec["needs_module"]):
        out: dict[str, Any] = {"na": "not built"}
    elif spec["kind"] == "family":
        out = family_throughput(spec["family"], spec["executor"], spec["jobs"])
    elif spec["kind"] == "bare":
        out = bare_loop(spec["scenario"], spec["overrides"], spec["threads"], spec.get("part", (0, 1)))
    else:
        out = p2pfl_run(spec["scenario"], spec["overrides"])
    measured.emit(out)


def _importable(module: str) -> bool:
    """False only when ``module`` itself is missing (an error inside it propagates)."""
    try:
        __import__(module)
    except ModuleNotFoundError as err:
        if err.name == module:
            return False
        raise
    return True


def p2pfl_run(scenario: str, overrides: list[str]) -> dict[str, Any]:
    """``p2pfl.run`` without a run directory; also reports which executor the kernel built."""
    import p2pfl
    import p2pfl.sim.kernel as kernel

    chosen: list[str] = []
    make = kernel.make_executor

    def spy(*args: Any, **kwargs: Any) -> Any:
        executor = make(*args, **kwargs)
        chosen.append(executor.describe())
        return executor

    kernel.make_executor = spy
    r = p2pfl.run(scenario, overrides=overrides, write=False)
    t = r.timing
    return {"run_s": t["run_wall_s"], "build_s": t["build_wall_s"], "train_s": t["train_wall_s"],
            "accuracy": r.summary.get("accuracy_mean"), "executor": chosen[0] if chosen else "?"}


def _family_jobs(family: str, k: int) -> tuple[list[Any], int]:
    """``k`` independent training jobs of one model family, as its protocols submit them; samples per job."""
    from p2pfl.clustering.rnd import fitted_predictor, make_predictor, make_target, target_embedding
    from p2pfl.executors.jobs import CallJob, TrainJob
    from p2pfl.learning.models import CNN28, MLP
    from p2pfl.learning.train import TrainingSpec

    g = torch.Generator().manual_seed(0)
    if family == "rnd_predictor":  # the RND paper's predictor fit (Adam, its own loop) on 28x28 images
        target = make_target((1, 28, 28), seed=0)
        x = torch.rand(k, 200, 1, 28, 28, generator=g)
        return [CallJob(i, fitted_predictor, (make_predictor((1, 28, 28), seed=i), x[i],
                                              target_embedding(target, x[i]), 2, 64, 1e-3,
                                              torch.Generator().manual_seed(i))) for i in range(k)], 400
    if family == "robot_policy":  # FedDRMan's policy with its own GMM loss, AdamW
        from p2pfl.robotics.policy import ObsLayout, ResNetTPolicy

        lay = ObsLayout()
        spec = TrainingSpec(batch_size=32, lr=1e-3, optimizer="adamw")
        return [TrainJob(i, ResNetTPolicy(lay), torch.rand(64, lay.width, generator=g),
                         torch.rand(64, lay.action, generator=g) * 2 - 1, spec, torch.Generator().manual_seed(i))
                for i in range(k)], 64
    make, shape, n, bs = {"mlp": (lambda: MLP(64, 10, 64), (64,), 40, 16),
                          "cnn28": (lambda: CNN28(10), (1, 28, 28), 200, 64)}[family]
    spec = TrainingSpec(batch_size=bs, lr=0.05)
    return [TrainJob(i, make(), torch.rand(n, *shape, generator=g), torch.randint(0, 10, (n,), generator=g), spec,
                     torch.Generator().manual_seed(i)) for i in range(k)], n


def family_throughput(family: str, executor: str, k: int) -> dict[str, Any]:
    """Training samples per second of ``k`` jobs of ``family`` submitted together, then awaited."""
    from p2pfl.executors.select import make_executor
    from p2pfl.executors.spec import ExecutorSpec

    torch.set_num_threads(1)
    ex = make_executor(executor, ExecutorSpec(kind=executor), threads=1)
    try:
        warm, _ = _family_jobs(family, 2)
        for f in [ex.submit(j) for j in warm]:
            f.result()  # workers started and warm (imports, first kernels), as in a run
        jobs, per_job = _family_jobs(family, k)
        t0 = time.perf_counter()
        for f in [ex.submit(j) for j in jobs]:
            f.result()
        seconds = time.perf_counter() - t0
    finally:
        ex.close()
    return {"run_s": seconds, "samples_per_s": k * per_job / seconds}


def bare_loop(scenario: str, overrides: list[str], threads: int, part: Sequence[int] = (0, 1)) -> dict[str, Any]:
    """FedAvg by hand, Flower-client style, on the scenario's own shards; ``run_s`` is the loop plus final eval.

    ``part`` ``(k, m)``: train only the devices ``i % m == k`` (m such loops at once measure what m cores
    really give: the loop's own training split m ways, no communication between the parts).
    """
    from p2pfl.api import resolve
    from p2pfl.learning.models import build_model
    from p2pfl.learning.train import evaluate_accuracy
    from p2pfl.seeding import child_seed
    from p2pfl.sim.world import build_any_federation

    torch.set_num_threads(threads)
    sc = resolve(scenario, overrides=overrides)
    assert sc.topology.n is not None, "workload W names its device count"
    fed = build_any_federation(sc.data, sc.topology.n, sc.seed)
    t0 = time.perf_counter()
    model = build_model(sc.model, fed.input_shape, fed.num_classes, seed=child_seed(sc.seed, "init"))
    k, m = part
    loaders = [DataLoader(TensorDataset(s.train_x, s.train_y), batch_size=sc.training.batch_size, shuffle=True,
                          generator=torch.Generator().manual_seed(sc.seed * 100_003 + i))
               for i, s in enumerate(fed.shards) if i % m == k]
    for _ in range(sc.protocol.rounds):
        states = [_train_copy(model, loader, sc.training.lr, sc.training.momentum) for loader in loaders]
        model.load_state_dict(_average(states))
    # the mean over devices of the accuracy on each one's local test shard (p2pfl's accuracy_mean)
    acc = sum(evaluate_accuracy(model, s.test_x, s.test_y) for s in fed.shards) / len(fed.shards)
    return {"run_s": time.perf_counter() - t0, "accuracy": acc}


def _train_copy(model: Any, loader: Any, lr: float, momentum: float) -> dict[str, Any]:
    """One local epoch on a copy of ``model`` with a fresh SGD; returns the copy's state dict."""
    local = copy.deepcopy(model)
    local.train()
    opt = torch.optim.SGD(local.parameters(), lr=lr, momentum=momentum)
    for xb, yb in loader:
        opt.zero_grad()
        F.cross_entropy(local(xb), yb).backward()
        opt.step()
    return local.state_dict()


def _average(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """FedAvg with equal weights (IID shards of equal size): the key-by-key mean."""
    return {k: torch.stack([s[k].float() for s in states]).mean(dim=0).to(states[0][k].dtype) for k in states[0]}


# --- the parent: subprocesses, their memory, the tables -------------------------------------------------
def run_child(spec: dict[str, Any], timeout: float) -> Outcome:
    """Run ``spec`` in a fresh interpreter (its own session), measuring its tree's memory."""
    return outcome_of(measured.measure([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                                       timeout_s=timeout, cwd=ROOT))


def run_together(spec: dict[str, Any], parts: int, timeout: float) -> Outcome:
    """``parts`` children of ``spec`` at once, child k with ``part=(k, parts)``: the slowest one's times,
    the sum of their peak memories."""
    with ThreadPoolExecutor(parts) as pool:
        outs = list(pool.map(lambda k: run_child({**spec, "part": [k, parts]}, timeout), range(parts)))
    bad = [o for o in outs if not o.ok]
    if bad:
        return bad[0]
    slowest = max(outs, key=lambda o: o.data["run_s"])
    return Outcome("ok", max(o.wall_s for o in outs), sum(o.peak_pss_mib for o in outs),
                   {**slowest.data, "accuracy": None})


def measure(label: str, spec: dict[str, Any], timeout: float) -> Outcome:
    """One configuration (``spec["parts"]`` children at once when given), its progress on stderr."""
    print(f"running {label} ...", file=sys.stderr, flush=True)
    parts = spec.get("parts", 1)
    outcome = run_together(spec, parts, timeout) if parts > 1 else run_child(spec, timeout)
    print(f"  {outcome.status}, wall {outcome.wall_s:.1f} s, peak PSS {outcome.peak_pss_mib:.0f} MiB", file=sys.stderr,
          flush=True)
    return outcome


def w_configs(overrides: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The workload-W rows, in table order: (label, the child's spec)."""
    base = {"scenario": str(W_SCENARIO), "overrides": overrides}

    def sim(label: str, extra: list[str], needs: Optional[str] = None) -> tuple[str, dict[str, Any]]:
        return label, {"kind": "p2pfl", **base, "overrides": overrides + extra, "needs_module": needs}

    return [*((f"bare PyTorch loop, threads={t}", {"kind": "bare", **base, "threads": t}) for t in (1, 2)),
            (f"{FLOOR_CORES} bare loops at once, each 1/{FLOOR_CORES} of the devices, threads=1",
             {"kind": "bare", **base, "threads": 1, "parts": FLOOR_CORES}),
            sim("p2pfl inline, threads=1", ["executor=inline", "threads=1"]),
            sim("p2pfl inline, threads=2", ["executor=inline", "threads=2"]),
            sim("p2pfl process, 2 workers, threads=1", ["executor={kind: process, workers: 2}", "threads=1"]),
            sim("p2pfl batched", ["executor=batched"], BATCHED_MODULE),
            sim("p2pfl auto (default)", [])]


def fmt(value: Optional[float], digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def w_table(configs: list[tuple[str, dict[str, Any]]], timeout: float) -> list[str]:
    """Measure every workload-W configuration; ``x floor`` against the bare 1-thread loop."""
    outcomes = [(label, spec, measure(label, spec, timeout)) for label, spec in configs]
    base = outcomes[0][2]
    floor = base.data["run_s"] / FLOOR_CORES if base.ok else None
    parted = [o for _, spec, o in outcomes if spec.get("parts", 1) > 1 and o.ok]
    floor_measured = parted[0].data["run_s"] if parted else None
    rows = []
    for label, spec, o in outcomes:
        if not o.ok:
            rows.append([label, _cell(o.status), "", "", "", "", ""])
            continue
        if spec["kind"] == "p2pfl" and not any(s.startswith("executor") for s in spec["overrides"]):
            label += f" → {o.data['executor']}"
        run_s = o.data["run_s"]
        rows.append([label, fmt(o.wall_s), fmt(run_s), fmt(o.peak_pss_mib, 0), fmt(run_s / floor if floor else None),
                     fmt(run_s / floor_measured if floor_measured else None), fmt(o.data.get("accuracy"), 4)])
    return markdown_table(rows, ["configuration", "wall s", "run s", "peak PSS MiB", "x floor", "x measured floor",
                                 "accuracy"], align="lrrrrrr")


def families_table(k: int, timeout: float) -> list[str]:
    """Samples/s per model family and executor (``k`` jobs at once)."""
    rows = []
    for family in FAMILIES:
        cells = [measure(f"{family} x {k} jobs, {ex}", {"kind": "family", "family": family, "executor": ex, "jobs": k},
                         timeout) for ex in EXECUTORS]
        rows.append([family, *(fmt(o.data["samples_per_s"], 0) if o.ok else _cell(o.status) for o in cells)])
    return markdown_table(rows, ["family", "inline samples/s", "process (2 workers) samples/s", "batched samples/s"],
                          align="lrrr")


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="W on 2 devices x 200 samples, 2 rounds")
    ap.add_argument("--only", choices=("w", "families"), help="run one table only")
    ap.add_argument("--w-rows", help="W rows whose label contains one of these comma-separated words "
                                     "(the bare 1-thread loop always runs: it is the baseline)")
    ap.add_argument("--family-jobs", type=int, default=40, help="jobs per model-family measurement")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per configuration")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        child_main(json.loads(args.child))
        return
    print(measured.machine_line(ROOT, "QUICK MODE (a check of the script, not the benchmark)" if args.quick else ""))
    if args.only in (None, "w"):
        configs = w_configs(QUICK_W if args.quick else [])
        if args.w_rows:
            words = [w.strip() for w in args.w_rows.split(",") if w.strip()]
            configs = configs[:1] + [c for c in configs[1:] if any(w in c[0] for w in words)]
        what = "2 devices x 200 samples, 2 rounds (quick)" if args.quick else "20 devices x 1,000 samples, 10 rounds"
        print(f"\nWorkload W (FedAvg, Fashion-MNIST, cnn28; {what})\n")
        print("\n".join(w_table(configs, args.timeout)))
        print(f"\nfloor = (bare loop, threads=1, run s) / {FLOOR_CORES}: its training spread perfectly over "
              f"{FLOOR_CORES} cores; measured floor = run s of {FLOOR_CORES} bare loops at once, each training "
              f"1/{FLOOR_CORES} of the devices (what the cores really give; shared caches and memory bandwidth make "
              "it more than the floor); x = run s / that. run s: p2pfl's run_wall_s (simulation, final "
              "evaluation included); the bare loop's rounds plus its final evaluation. Accuracy: the final global "
              "model's mean over devices of its accuracy on each device's local test shard (p2pfl's accuracy_mean; "
              "the bare loop scores its averaged model the same way). Peak PSS: the whole process tree.")
    if args.only in (None, "families"):
        k = 4 if args.quick else args.family_jobs
        print(f"\nTraining throughput per model family ({k} jobs submitted together, then awaited; 1 thread per job)\n")
        print("\n".join(families_table(k, args.timeout)))
        print("\nmlp: 64 inputs, 64 hidden, 40 samples per job, batch 16; cnn28: 200 samples, batch 64; rnd_predictor: "
              "the RND predictor's own fit (Adam), 200 images x 2 epochs; robot_policy: FedDRMan's policy, its GMM "
              "loss, AdamW, 64 samples. batched stacks only jobs with the task loss and SGD (the others run as inline).")


if __name__ == "__main__":
    main()
