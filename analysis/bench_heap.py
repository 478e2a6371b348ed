"""Heap benchmark: peak resident memory and wall time of one run with glibc's default malloc and with its
mmap threshold pinned (``MALLOC_MMAP_THRESHOLD_=65536``), each in a fresh process.

    python analysis/bench_heap.py [--devices 2000] [--scenario scenarios/headline/gossip.yaml]

A run allocates and frees model-sized buffers (101.8 kB for the headline MLP) by the hundreds of
thousands. glibc serves blocks under its mmap threshold (128 KiB at first, raised each time a larger
mapped block is freed) from heap arenas, which fragment and keep the freed memory; pinned at 64 KiB,
every such buffer is mapped on its own and unmapped when freed: less memory, more system calls and
page faults. The results are the same bits (the table checks it). The scenario's random geometric
radius is rescaled to the headline's mean degree (about 7) at ``--devices``.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PINNED = {"MALLOC_MMAP_THRESHOLD_": "65536"}


def one(env: dict[str, str], scenario: str, n: int, out: Path) -> tuple[float, float, str]:
    """(peak RSS in GB, wall s, sha256 of summary.json) of one ``p2pfl run`` in a child process."""
    radius = 1.1 * math.sqrt(7 / (math.pi * (n - 1)))
    cmd = [sys.executable, "-m", "p2pfl", "run", scenario, "--quiet", "--out", str(out), "--set", f"topology.n={n}",
           "--set", f"topology.radius={radius:.4f}", "--set", "topology.allow_disconnected=true"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, **env})
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB, the largest child so far
    if peak <= before:
        raise SystemExit("this run's peak did not exceed the one before: ru_maxrss keeps only the largest child, "
                         "so its peak is unknown; run each setting in its own benchmark")
    return peak * 1024 / 1e9, wall, hashlib.sha256((out / "summary.json").read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=2000)
    ap.add_argument("--scenario", default="scenarios/headline/gossip.yaml")
    a = ap.parse_args()
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        raise SystemExit("unset MALLOC_MMAP_THRESHOLD_ first: the baseline is glibc's default")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [(label, *one(env, a.scenario, a.devices, Path(tmp) / str(i)))
                for i, (label, env) in enumerate((("MALLOC_MMAP_THRESHOLD_=65536", PINNED),
                                                  ("glibc default (the baseline)", {})))]
    print(f"\n{a.scenario}, {a.devices} devices (summary.json identical: {rows[0][3] == rows[1][3]})")
    print("| malloc | peak RSS GB | wall s |")
    print("|---|---:|---:|")
    for label, gb, wall, _ in rows:
        print(f"| {label} | {gb:.2f} | {wall:.1f} |")


if __name__ == "__main__":
    main()
