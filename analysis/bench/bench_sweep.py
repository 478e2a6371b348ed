"""Sweep benchmark: the README tour study with ``--jobs 1`` and with ``--jobs 2``, fresh output folders.

    python analysis/bench/bench_sweep.py [--study scenarios/studies/tour.yaml] [--jobs 1 2]

Runs ``p2pfl sweep`` as a user does (a new process each time, so the wall time includes
start-up, validating the study and starting the workers) and prints one markdown table:
cells, wall seconds, cells per minute, speed-up over the first row, and whether every
cell's ``summary.json`` is byte-identical to the first row's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from p2pfl.metrics.tables import markdown_table

ROOT = Path(__file__).resolve().parents[2]


def sweep(study: Path, jobs: int, out: Path) -> float:
    """Wall seconds of one ``p2pfl sweep`` into a fresh folder."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "p2pfl", "sweep", str(study), "--jobs", str(jobs), "--out", str(out)],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def summaries(out: Path) -> dict[str, bytes]:
    return {d.name: (d / "summary.json").read_bytes() for d in sorted(out.iterdir()) if not d.name.startswith(".")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default=str(ROOT / "scenarios" / "studies" / "tour.yaml"))
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_sweep-") as tmp:
        for i, jobs in enumerate(args.jobs):
            out = Path(tmp) / f"{i}-jobs{jobs}"
            wall = sweep(Path(args.study), jobs, out)
            rows.append((jobs, summaries(out), wall))
    first_summaries, first_wall = rows[0][1], rows[0][2]
    print(f"study: {Path(args.study).name}; wall time includes process start-up and validation\n")
    table = [[jobs, len(sums), f"{wall:.1f}", f"{60 * len(sums) / wall:.1f}", f"{first_wall / wall:.2f}x",
              "yes" if sums == first_summaries else "NO"] for jobs, sums, wall in rows]
    print("\n".join(markdown_table(table, ["--jobs", "cells", "wall s", "cells / min", "speed-up",
                                             "summaries identical to first row"], align="rrrrrl")))


if __name__ == "__main__":
    main()
