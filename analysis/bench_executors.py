"""Executor benchmark: what each executor costs on workload W against a bare PyTorch loop, and per model family.

    python analysis/bench_executors.py [--quick] [--only w|families] [--w-rows WORDS] [--family-jobs 40]
                                       [--timeout 1800] [--csv PATH]

Workload W (``scenarios/bench/workload_w.yaml``: FedAvg, real Fashion-MNIST, 20 devices x 1,000
IID samples, cnn28, SGD lr 0.01 momentum 0.9, batch 64, 1 local epoch, 10 rounds): a bare PyTorch loop
that trains the way Flower clients do (a DataLoader per device, a fresh SGD per job, then FedAvg of the
state dicts) on the very shards p2pfl builds, beside p2pfl with each executor. ``x floor`` is a run's
seconds over the floor = (bare loop, 1 thread, run seconds) / 2, the training alone spread perfectly over 2
cores; ``x measured floor`` is over the run seconds of 2 bare loops running at once, each on half the
devices (what 2 cores really give this training). Training throughput per model family: samples per second
of 40 jobs submitted together, per executor. Large-N runs: ``analysis/bench_scale.py``.

Every configuration runs in its own fresh subprocess (this script with ``--child``), so its wall time
includes interpreter start, imports and set-up, and its memory is its own: peak memory is the largest sum of
PSS (proportional set size: a page shared by k processes, such as torch's libraries or the shards in
shared memory, counts 1/k in each) over the subprocess and all its descendants, sampled every 0.5 s; a sum
of RSS would count torch's libraries once per worker (``p2pfl.metrics.measured``). A configuration that
times out or fails becomes a row saying so. ``--quick`` (W on 2 devices x 200 samples for 2 rounds) checks that the script works in about a minute or two; its figures are not the benchmark.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from p2pfl.metrics import measured

ROOT = Path(__file__).resolve().parents[1]
W_SCENARIO = ROOT / "scenarios" / "bench" / "workload_w.yaml"
QUICK_W = ["topology.n=2", "data.samples_per_client=200", "protocol.rounds=2", "protocol.eval_every=2"]
BATCHED_MODULE = "p2pfl.executors.batched"
FLOOR_CORES = 2

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


def p2pfl_run(scenario: str | dict[str, Any], overrides: list[str]) -> dict[str, Any]:
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


FAMILIES = ("mlp", "cnn28", "rnd_predictor", "robot_policy")


def _family_jobs(family: str, k: int) -> tuple[list[Any], int]:
    """``k`` independent training jobs of one model family, as its protocols submit them; samples per job."""
    import torch

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
    import torch

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
    import torch

    from p2pfl.api import resolve
    from p2pfl.learning.models import build_model
    from p2pfl.seeding import child_seed
    from p2pfl.sim.world import build_any_federation

    torch.set_num_threads(threads)
    sc = resolve(scenario, overrides=overrides)
    assert sc.topology.n is not None, "workload W names its device count"
    fed = build_any_federation(sc.data, sc.topology.n, sc.seed)
    t0 = time.perf_counter()
    model = build_model(sc.model, fed.input_shape, fed.num_classes, seed=child_seed(sc.seed, "init"))
    k, m = part
    loaders = [_loader(s.train_x, s.train_y, sc.training.batch_size, sc.seed * 100_003 + i)
               for i, s in enumerate(fed.shards) if i % m == k]
    for _ in range(sc.protocol.rounds):
        states = [_train_copy(model, loader, sc.training.lr, sc.training.momentum) for loader in loaders]
        model.load_state_dict(_average(states))
    acc = _mean_test_accuracy(model, [(s.test_x, s.test_y) for s in fed.shards])
    return {"run_s": time.perf_counter() - t0, "accuracy": acc}


def _loader(x: Any, y: Any, batch_size: int, seed: int) -> Any:
    """A shuffling DataLoader over one device's samples, with its own seeded generator."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    gen = torch.Generator().manual_seed(seed)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True, generator=gen)


def _train_copy(model: Any, loader: Any, lr: float, momentum: float) -> dict[str, Any]:
    """One local epoch on a copy of ``model`` with a fresh SGD; returns the copy's state dict."""
    import copy

    import torch
    from torch.nn import functional as F

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
    import torch

    return {k: torch.stack([s[k].float() for s in states]).mean(dim=0).to(states[0][k].dtype) for k in states[0]}


def _mean_test_accuracy(model: Any, tests: Sequence[tuple[Any, Any]]) -> float:
    """Mean over devices of the model's accuracy on each device's local test shard (p2pfl's accuracy_mean)."""
    from p2pfl.learning.train import evaluate_accuracy

    return sum(evaluate_accuracy(model, x, y) for x, y in tests) / len(tests)


# --- the parent: subprocesses, their memory, the tables -------------------------------------------------


@dataclass
class Outcome:
    """One configuration's result as the parent saw it."""

    status: str  # "ok", "timeout", "n/a (not built)" or "failed: <last stderr line>"
    wall_s: float
    peak_pss_mib: float
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def run_child(spec: dict[str, Any], timeout: float) -> Outcome:
    """Run ``spec`` in a fresh interpreter (its own session), measuring its tree's memory."""
    m = measured.measure([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)], timeout_s=timeout,
                cwd=ROOT)
    data = measured.result_of(m)
    if m.failure or data is None:
        return Outcome("timeout" if m.timed_out else f"failed: {m.failure or 'no result'}", m.wall_s, m.peak_pss_mib)
    if "na" in data:
        return Outcome(f"n/a ({data['na']})", m.wall_s, m.peak_pss_mib)
    return Outcome("ok", m.wall_s, m.peak_pss_mib, data)


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Config:
    """One row to measure: its label and the child's spec."""

    label: str
    spec: dict[str, Any]


def w_configs(overrides: list[str]) -> list[Config]:
    """The workload-W rows, in table order."""
    path = str(W_SCENARIO)

    def bare(threads: int) -> Config:
        return Config(f"bare PyTorch loop, threads={threads}",
                      {"kind": "bare", "scenario": path, "overrides": overrides, "threads": threads})

    def sim(label: str, extra: list[str], needs: Optional[str] = None) -> Config:
        return Config(label, {"kind": "p2pfl", "scenario": path, "overrides": overrides + extra, "needs_module": needs})

    halves = Config(f"{FLOOR_CORES} bare loops at once, each 1/{FLOOR_CORES} of the devices, threads=1",
                    {"kind": "bare", "scenario": path, "overrides": overrides, "threads": 1, "parts": FLOOR_CORES})
    return [bare(1), bare(2), halves,
            sim("p2pfl inline, threads=1", ["executor=inline", "threads=1"]),
            sim("p2pfl inline, threads=2", ["executor=inline", "threads=2"]),
            sim("p2pfl process, 2 workers, threads=1", ["executor={kind: process, workers: 2}", "threads=1"]),
            sim("p2pfl batched", ["executor=batched"], BATCHED_MODULE),
            sim("p2pfl auto (default)", [])]


def family_rows(k: int, timeout: float) -> list[dict[str, Any]]:
    """Samples/s per model family and executor (``k`` jobs at once)."""
    rows = []
    for family in FAMILIES:
        for ex in ("inline", "process", "batched"):
            o = measure(f"{family} x {k} jobs, {ex}", {"kind": "family", "family": family, "executor": ex, "jobs": k},
                        timeout)
            rows.append({"table": "families", "family": family, "executor": ex, "status": o.status,
                         "samples_per_s": o.data.get("samples_per_s")})
    return rows


def print_families(rows: list[dict[str, Any]], k: int) -> None:
    print(f"\nTraining throughput per model family ({k} jobs submitted together, then awaited; 1 thread per job)\n")
    print("| family | inline samples/s | process (2 workers) samples/s | batched samples/s |")
    print("|---|---:|---:|---:|")
    for family in FAMILIES:
        cells = []
        for ex in ("inline", "process", "batched"):
            r = next(r for r in rows if r["family"] == family and r["executor"] == ex)
            cells.append(fmt(r["samples_per_s"], 0) if r["status"] == "ok" else _cell(r["status"]))
        print(f"| {family} | {' | '.join(cells)} |")
    print("\nmlp: 64 inputs, 64 hidden, 40 samples per job, batch 16; cnn28: 200 samples, batch 64; rnd_predictor: "
          "the RND predictor's own fit (Adam), 200 images x 2 epochs; robot_policy: FedDRMan's policy, its GMM loss, "
          "AdamW, 64 samples. batched stacks only jobs with the task loss and SGD (the others run as inline).")


def run_together(spec: dict[str, Any], parts: int, timeout: float) -> Outcome:
    """``parts`` children of ``spec`` at once, child k with ``part=(k, parts)``: the slowest one's times,
    the sum of their peak memories."""
    results: list[Optional[Outcome]] = [None] * parts

    def one(k: int) -> None:
        results[k] = run_child({**spec, "part": [k, parts]}, timeout)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(parts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outs = [r for r in results if r is not None]
    bad = [o for o in outs if not o.ok]
    if bad or len(outs) != parts:
        return bad[0] if bad else Outcome("failed: a part did not report", 0.0, 0.0)
    slowest = max(outs, key=lambda o: o.data["run_s"])
    return Outcome("ok", max(o.wall_s for o in outs), sum(o.peak_pss_mib for o in outs),
                   {**slowest.data, "accuracy": None})


def measure(label: str, spec: dict[str, Any], timeout: float) -> Outcome:
    progress(f"running {label} ...")
    parts = spec.get("parts", 1)
    outcome = run_together(spec, parts, timeout) if parts > 1 else run_child(spec, timeout)
    progress(f"  {outcome.status}, wall {outcome.wall_s:.1f} s, peak PSS {outcome.peak_pss_mib:.0f} MiB")
    return outcome


# --- tables ---------------------------------------------------------------------------------------------


def fmt(value: Optional[float], digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def w_rows(configs: list[Config], timeout: float) -> list[dict[str, Any]]:
    """Measure every workload-W configuration; ``x floor`` against the bare 1-thread loop."""
    outcomes = [(c, measure(c.label, c.spec, timeout)) for c in configs]
    base = outcomes[0][1]
    floor = base.data["run_s"] / FLOOR_CORES if base.ok else None
    parted = [o for c, o in outcomes if c.spec.get("parts", 1) > 1 and o.ok]
    measured = parted[0].data["run_s"] if parted else None
    rows = []
    for config, o in outcomes:
        label = config.label
        if o.ok and config.spec.get("kind") == "p2pfl" and not any(s.startswith("executor") for s in config.spec["overrides"]):
            label += f" → {o.data['executor']}"
        rows.append({"table": "workload_w", "configuration": label, "status": o.status, "wall_s": o.wall_s,
                     "run_s": o.data.get("run_s"), "peak_pss_mib": o.peak_pss_mib,
                     "x_floor": o.data["run_s"] / floor if floor and o.ok else None,
                     "x_measured": o.data["run_s"] / measured if measured and o.ok else None,
                     "accuracy": o.data.get("accuracy")})
    return rows


def print_w(rows: list[dict[str, Any]], title: str) -> None:
    print(f"\n{title}\n")
    print("| configuration | wall s | run s | peak PSS MiB | x floor | x measured floor | accuracy |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["status"] != "ok":
            print(f"| {r['configuration']} | {_cell(r['status'])} | | | | | |")
            continue
        print(f"| {r['configuration']} | {fmt(r['wall_s'])} | {fmt(r['run_s'])} | {fmt(r['peak_pss_mib'], 0)} | "
              f"{fmt(r['x_floor'])} | {fmt(r['x_measured'])} | {fmt(r['accuracy'], 4)} |")
    print(f"\nfloor = (bare loop, threads=1, run s) / {FLOOR_CORES}: its training spread perfectly over "
          f"{FLOOR_CORES} cores; measured floor = run s of {FLOOR_CORES} bare loops at once, each training "
          f"1/{FLOOR_CORES} of the devices (what the cores really give; shared caches and memory bandwidth make it "
          "more than the floor); x = run s / that. run s: p2pfl's run_wall_s (simulation, final "
          "evaluation included); the bare loop's rounds plus its final evaluation. Accuracy: the final global "
          "model's mean over devices of its accuracy on each device's local test shard (p2pfl's accuracy_mean; "
          "the bare loop scores its averaged model the same way). Peak PSS: the whole process tree.")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    keys: list[str] = []
    for r in rows:
        keys.extend(k for k in r if k not in keys)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


# --- command line ---------------------------------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="W on 2 devices x 200 samples, 2 rounds")
    ap.add_argument("--only", choices=("w", "families"), help="run one table only")
    ap.add_argument("--w-rows", help="W rows whose label contains one of these comma-separated words "
                                     "(the bare 1-thread loop always runs: it is the baseline)")
    ap.add_argument("--family-jobs", type=int, default=40, help="jobs per model-family measurement")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per configuration")
    ap.add_argument("--csv", type=Path, help="also write every row to this CSV file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    if args.child is not None:
        child_main(json.loads(args.child))
        return
    print(measured.machine_line(ROOT, "QUICK MODE (a check of the script, not the benchmark)" if args.quick else ""))
    rows: list[dict[str, Any]] = []
    if args.only in (None, "w"):
        configs = w_configs(QUICK_W if args.quick else [])
        if args.w_rows:
            words = [w.strip() for w in args.w_rows.split(",") if w.strip()]
            configs = configs[:1] + [c for c in configs[1:] if any(w in c.label for w in words)]
        w = w_rows(configs, args.timeout)
        what = "2 devices x 200 samples, 2 rounds (quick)" if args.quick else "20 devices x 1,000 samples, 10 rounds"
        print_w(w, f"Workload W (FedAvg, Fashion-MNIST, cnn28; {what})")
        rows += w
    if args.only in (None, "families"):
        k = 4 if args.quick else args.family_jobs
        fam = family_rows(k, args.timeout)
        print_families(fam, k)
        rows += fam
    if args.csv:
        write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
