"""Heap benchmark: peak resident memory of one run with glibc's mmap threshold pinned (p2pfl.heap, as
shipped) and with glibc's default, each in a fresh process.

    python analysis/bench_heap.py [--devices 2000] [--scenario scenarios/headline/gossip.yaml]

The scenario's random geometric radius is rescaled to the headline's mean degree (about 7) at
``--devices``. Prints a table: peak RSS, wall seconds, and whether the two runs' summaries are identical.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# One run in this (fresh) process; "default" turns the pin into a no-op before the simulation is built.
RUN = """
import sys
import p2pfl.sim.kernel as kernel
if sys.argv[1] == "default":
    kernel.pin_mmap_threshold = lambda: False
from p2pfl.cli import main
raise SystemExit(main(["run", *sys.argv[2:]]))
"""


def one(mode: str, scenario: str, n: int, out: Path) -> tuple[float, float, str]:
    """(peak RSS in GB, wall s, sha256 of summary.json) of one run in a child process."""
    radius = 1.1 * math.sqrt(7 / (math.pi * (n - 1)))
    cmd = [sys.executable, "-c", RUN, mode, scenario, "--quiet", "--out", str(out), "--set", f"topology.n={n}",
           "--set", f"topology.radius={radius:.4f}", "--set", "topology.allow_disconnected=true"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB, the largest child so far
    if peak <= before:
        raise SystemExit("run the default (larger) one last: ru_maxrss keeps the largest child")
    return peak * 1024 / 1e9, wall, hashlib.sha256((out / "summary.json").read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=2000)
    ap.add_argument("--scenario", default="scenarios/headline/gossip.yaml")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [(mode, *one(mode, a.scenario, a.devices, Path(tmp) / mode)) for mode in ("pinned", "default")]
    same = rows[0][3] == rows[1][3]
    print(f"\n{a.scenario}, {a.devices} devices (summary.json identical: {same})")
    print("| glibc mmap threshold | peak RSS GB | wall s |")
    print("|---|---:|---:|")
    for mode, gb, wall, _ in rows:
        label = "pinned at 64 KiB (p2pfl.heap)" if mode == "pinned" else "glibc default (dynamic, from 128 KiB)"
        print(f"| {label} | {gb:.2f} | {wall:.1f} |")


if __name__ == "__main__":
    main()
