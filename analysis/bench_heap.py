"""Heap benchmark: peak resident memory and wall time of one run with glibc's default malloc, with its
mmap threshold pinned (``MALLOC_MMAP_THRESHOLD_=65536``) and with ``malloc_trim`` once per fleet round
(``p2pfl.sim.heap``, the default), each in a fresh process.

    python analysis/bench_heap.py [--devices 2000] [--scenario scenarios/headline/gossip.yaml]

A run allocates and frees model-sized buffers (101.8 kB for the headline MLP) by the hundreds of
thousands. glibc serves blocks under its mmap threshold (128 KiB at first, raised each time a larger
mapped block is freed) from heap arenas, which fragment and keep the freed memory; pinned at 64 KiB,
every such buffer is mapped on its own and unmapped when freed: less memory, more system calls and
page faults. ``malloc_trim(0)`` instead hands the arenas' free pages back now and then. The results are
the same bits (the table checks it). The scenario's random geometric
radius is rescaled to the headline's mean degree (about 7) at ``--devices``.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PINNED = {"MALLOC_MMAP_THRESHOLD_": "65536"}
#: ``python -m p2pfl`` without the kernel's malloc_trim (``p2pfl.sim.heap.TRIM``).
NO_TRIM = ["-c", "import sys, p2pfl.sim.heap as h; h.TRIM = False; from p2pfl.cli import main; sys.exit(main())"]


def one(env: dict[str, str], trim: bool, scenario: str, n: int, out: Path) -> tuple[float, float, str]:
    """(peak RSS in GB, wall s, sha256 of summary.json) of one ``p2pfl run`` in a child process."""
    radius = 1.1 * math.sqrt(7 / (math.pi * (n - 1)))
    cmd = [sys.executable, *(["-m", "p2pfl"] if trim else NO_TRIM), "run", scenario, "--quiet", "--out", str(out),
           "--set", f"topology.n={n}", "--set", f"topology.radius={radius:.4f}",
           "--set", "topology.allow_disconnected=true"]
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **env})
    _, status, usage = os.wait4(child.pid, 0)  # this child's own peak (ru_maxrss, KiB)
    wall = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {child.returncode})")
    peak = usage.ru_maxrss
    return peak * 1024 / 1e9, wall, hashlib.sha256((out / "summary.json").read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=2000)
    ap.add_argument("--scenario", default="scenarios/headline/gossip.yaml")
    a = ap.parse_args()
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        raise SystemExit("unset MALLOC_MMAP_THRESHOLD_ first: the baseline is glibc's default")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [(label, *one(env, trim, a.scenario, a.devices, Path(tmp) / str(i)))
                for i, (label, env, trim) in enumerate((("malloc_trim each fleet round (the default)", {}, True),
                                                        ("MALLOC_MMAP_THRESHOLD_=65536", PINNED, False),
                                                        ("glibc default", {}, False)))]
    same = len({row[3] for row in rows}) == 1
    print(f"\n{a.scenario}, {a.devices} devices (summary.json identical: {same})")
    print("| malloc | peak RSS GB | wall s |")
    print("|---|---:|---:|")
    for label, gb, wall, _ in rows:
        print(f"| {label} | {gb:.2f} | {wall:.1f} |")


if __name__ == "__main__":
    main()
