"""Real run directories for the report and loader tests (``tree``: built once per session by ``build_tree``).

    plain/gossip-s{1,2,3}   gossip on digits, lr 0.05, seeds 1-3        (one group of 3)
    plain/gossip-lr-s{1,2}  the same with lr 0.2                        (another group: not a seed replicate)
    plain/local-s1          local on digits                             (a group of 1)
    plain/.gossip-s9.tmp-x  a copy of gossip-s1 in a temp dir           (never read)
    reg/reg-s{1,2}          fedavg regression on synthetic_linear       (metric rmse)
    other/logistic-s1       gossip on synthetic_logistic                (accuracy, another dataset)
    study/<cell>/           copies of plain/ runs with a hand-written cell.json (study "lrs":
                            variants gossip and local x grid training.lr x seeds)
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import p2pfl
from tests.helpers import digits_scenario
from tests.metrics.tiny_runs import regression_scenario


def _digits(protocol: str, lr: float = 0.05, **extra: Any) -> dict[str, Any]:
    return digits_scenario({"name": protocol, "rounds": 3, "eval_every": 1}, n=4,
                           training={"epochs": 1, "batch_size": 16, "lr": lr, "momentum": 0.9}, **extra)


#: study cells: (cell id, source run under plain/, variant, grid, seed)
CELLS = (
    ("gossip-lr0.05-s1", "gossip-s1", "gossip", {"training.lr": 0.05}, 1),
    ("gossip-lr0.05-s2", "gossip-s2", "gossip", {"training.lr": 0.05}, 2),
    ("gossip-lr0.2-s1", "gossip-lr-s1", "gossip", {"training.lr": 0.2}, 1),
    ("gossip-lr0.2-s2", "gossip-lr-s2", "gossip", {"training.lr": 0.2}, 2),
    ("local-lr0.05-s1", "local-s1", "local", {"training.lr": 0.05}, 1),
)


@dataclass(frozen=True)
class Tree:
    root: Path

    def __truediv__(self, other: str) -> Path:
        return self.root / other


def write_cell(src: Path, dst: Path, *, study: str, cell: str, variant: Any, grid: dict[str, Any], seed: int) -> Path:
    """Copy a real run directory and add a sweep's cell.json (the summary numbers stay the run's own)."""
    shutil.copytree(src, dst)
    (dst / "cell.json").write_text(json.dumps({"study": study, "cell": cell, "variant": variant, "grid": grid,
                                               "seed": seed}), encoding="utf-8")
    return dst


def build_tree(root: Path) -> Tree:
    """Run the runs listed in the module docstring under ``root``."""
    plain = root / "plain"
    for s in (1, 2, 3):
        p2pfl.run(_digits("gossip"), seed=s, out=plain / f"gossip-s{s}")
    for s in (1, 2):
        p2pfl.run(_digits("gossip", lr=0.2), seed=s, out=plain / f"gossip-lr-s{s}")
        p2pfl.run(regression_scenario(), seed=s, out=root / "reg" / f"reg-s{s}")
    p2pfl.run(_digits("local"), seed=1, out=plain / "local-s1")
    p2pfl.run(_digits("gossip", data={"dataset": "synthetic_logistic", "samples_per_client": 40,
                                      "partition": {"kind": "parameter_shift", "n_clusters": 2, "n_features": 5}}),
              seed=1, out=root / "other" / "logistic-s1")
    shutil.copytree(plain / "gossip-s1", plain / ".gossip-s9.tmp-x")
    for cell, src, variant, grid, seed in CELLS:
        write_cell(plain / src, root / "study" / cell, study="lrs", cell=cell, variant=variant, grid=grid, seed=seed)
    return Tree(root)


def summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
