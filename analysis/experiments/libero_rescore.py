"""Score a LIBERO study's final policies again with the gripper command as the policy gives it (not binarized).

    python analysis/experiments/libero_rescore.py analysis/cells/libero_object [--seeds 0]   # -> <that folder>/libero_rescore.json

The study runs its rollouts with the gripper command binarized to +-1, as LIBERO's own policies send it
(``data.partition.binarize_gripper``). Whether that choice changes the ranking of the methods is read here
without training again: every cell saves the models its last scores came from (``save_models: final``,
``models.npz``), and each distinct one is rolled out once more on its devices' suite, the same tasks,
episodes, horizon and seeds, with the command continuous. ``analysis/reports/libero_report.py`` puts the result
beside the binarized score: it reads ``libero_rescore.json`` from each folder it reports on, so a rescoring
stays with the cells it rescored (and is committed with an archive). A cell already in the file is skipped (a
long rescoring resumes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from p2pfl.config import load_dict
from p2pfl.executors.base import Executor, Joined
from p2pfl.executors.jobs import CallJob
from p2pfl.executors.process import ProcessExecutor
from p2pfl.learning.saved import MODELS_FILE, load_models
from p2pfl.robotics.federation import RobotFederation
from p2pfl.sim.kernel import build_only, torch_threads

RESCORE_FILE = "libero_rescore.json"  # in the folder of the cells rescored


def rescore_cell(cell: Path, executor: Executor | None = None) -> dict[str, Any]:
    """The cell's final policies rolled out with a continuous gripper command: per device its success, their
    mean (as summary.json's success_mean), and the round the policies come from. With ``executor``, a policy's
    rollouts run in parts on its workers (LIBERO: ``RobotFederation.rollout_split``, the same result)."""
    sc = load_dict(yaml.safe_load((cell / "scenario.yaml").read_text(encoding="utf-8")), source=str(cell))
    sim = build_only(sc)
    fed = sim.federation
    if not isinstance(fed, RobotFederation):
        raise SystemExit(f"{cell}: not a robot run")
    fed = dataclasses.replace(fed, binarize_gripper=False)
    saved = load_models(cell / MODELS_FILE)
    model = sim.new_model()
    done: dict[tuple[int, str], float] = {}
    per_device: list[float | None] = []
    with torch_threads(sc.threads):
        for device in range(len(saved.device_model)):
            state = saved.of(device)
            if state is None:
                per_device.append(None)
                continue
            key = (int(saved.device_model[device]), fed.device_suites[device])
            if key not in done:
                model.load_state_dict(state)
                fn, args = fed.rollout_call(model, key[1])
                parts, combine = fed.rollout_split(model, key[1])
                if executor is not None and parts:
                    jobs = [executor.submit(CallJob(device, f, a, threads=sc.threads)) for f, a in parts]
                    done[key] = Joined(jobs, combine).result().success
                else:
                    done[key] = fn(*args).success
            per_device.append(done[key])
    scored = [s for s in per_device if s is not None]
    rounds = sorted({int(r) for r in saved.device_round if r >= 0})
    return {"binarize_gripper": False, "success_mean": sum(scored) / len(scored) if scored else None,
            "success_per_node": per_device, "round": rounds[-1] if rounds else None, "policies": len(done)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cells", type=Path, help="a study's archive (or sweep output) folder")
    ap.add_argument("--seeds", type=int, nargs="*", help="only the cells of these seeds")
    ap.add_argument("--out", type=Path, help=f"the output file (default: CELLS/{RESCORE_FILE}, where the report reads it)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes a policy's rollouts run on, in parts "
                                                           "(1: one job in this process; the same results)")
    args = ap.parse_args(argv)
    if args.workers < 1:
        print("--workers: give 1 or more", file=sys.stderr)
        return 2
    if args.out is None:
        args.out = args.cells / RESCORE_FILE
    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}
    cells = sorted(d for d in args.cells.iterdir() if (d / MODELS_FILE).is_file())
    if args.seeds is not None:
        cells = [d for d in cells if json.loads((d / "cell.json").read_text())["seed"] in args.seeds]
    todo = [d for d in cells if d.name not in results]
    print(f"{len(cells)} cells with saved models, {len(todo)} to rescore", file=sys.stderr)
    executor = ProcessExecutor(args.workers) if args.workers > 1 and todo else None
    try:
        for i, cell in enumerate(todo, 1):
            rescore_one(i, len(todo), cell, executor, results, args.out)
    finally:
        if executor is not None:
            executor.close()
    return 0


def rescore_one(i: int, n: int, cell: Path, executor: Executor | None, results: dict[str, Any], out: Path) -> None:
    """Rescore ``cell`` (the i-th of n) and write every result so far to ``out`` (a long rescoring resumes)."""
    t0 = time.perf_counter()
    print(f"[{i}/{n}] {cell.name} ...", file=sys.stderr, flush=True)
    results[cell.name] = rescore_cell(cell, executor)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, out)  # each cell's result written as it completes
    print(f"[{i}/{n}] {cell.name}: success {results[cell.name]['success_mean']} ({time.perf_counter() - t0:.0f} s)",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
