"""FedDRMan's Tables I-III from the run directories of the studies in ``scenarios/studies/feddrman/``.

    for f in scenarios/studies/feddrman/*.yaml; do
      p2pfl sweep $f --jobs 2 --out runs/feddrman/$(basename $f .yaml); done
    python analysis/feddrman_report.py runs/feddrman        # -> analysis/results/feddrman.md

Each run's per-suite rollout success per evaluated round comes from its ``summary.json`` logs
(``rollout_success``), its CUA groups per round from ``cua_groups``; the table (I, II, III) from the
study's name and the row label from the variant. The tables, curves and co-clustering columns are
written by ``reproduce_feddrman.write_report`` (mean over seeds, per-seed values in brackets).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "analysis"))

from reproduce_feddrman import per_suite_curve, write_report  # noqa: E402

TABLES = {"feddrman_table1": "I", "feddrman_table1_feddrman": "I", "feddrman_table2": "II",
          "feddrman_table2_feddrman": "II", "feddrman_table3": "III"}


def rows_from_runs(root: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One report row per run directory, and the budget read from the runs' scenarios."""
    import p2pfl

    runs = p2pfl.load_runs(root)
    rows, budget = [], {}
    for _, r in runs.iterrows():
        if r["study"] not in TABLES:
            continue
        path = Path(r["path"])
        summary = json.loads((path / "summary.json").read_text())
        scenario = yaml.safe_load((path / "scenario.yaml").read_text())
        part = scenario["data"]["partition"]
        budget = {"rounds": scenario["protocol"]["rounds"], "eval_every": scenario["protocol"]["eval_every"],
                  "episodes": part["eval_episodes"], "horizon": part["horizon"], "demos": part["demos_per_task"],
                  "epochs": scenario["training"]["epochs"]}
        curve = per_suite_curve(summary)
        timing = json.loads((path / "timing.json").read_text())
        rows.append({"table": TABLES[r["study"]], "label": r["variant"], "seed": int(r["seed"]),
                     "suites": list(part["suites"]), "final": {s: c[max(c)] for s, c in curve.items()},
                     "best": {s: max(c.values()) for s, c in curve.items()}, "curve": curve,
                     "cua_groups": [[e["round"], e["value"]] for e in summary["logs"].get("cua_groups", [])],
                     "wall_s": timing["wall_s"], "bytes_total": summary["bytes_total"]})
    if not rows:
        raise SystemExit(f"{root}: no runs of the FedDRMan studies (scenarios/studies/feddrman/) found")
    return rows, budget


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="folder holding the studies' run folders (runs/feddrman)")
    args = ap.parse_args(argv)
    rows, budget = rows_from_runs(args.root)
    write_report(rows, budget, "default", sum(r["wall_s"] for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
