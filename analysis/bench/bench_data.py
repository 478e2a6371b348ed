"""Data benchmark: load real Fashion-MNIST and partition it for 100 devices, in a fresh process.

    python analysis/bench/bench_data.py [--devices 100] [--partition dirichlet]

Prints a table: wall seconds to parse the IDX files (numpy, no per-image loops) and to partition,
for the first (cold) and a second (in-memory cache) call. Target: first call under 5 s.
"""

from __future__ import annotations

import argparse
import time

from p2pfl.data import DataSpec, build_federation
from p2pfl.metrics.tables import markdown_table

PARTITIONS = {
    "iid": {"kind": "iid"},
    "dirichlet": {"kind": "dirichlet", "alpha": 0.5},
    "label_shift": {"kind": "label_shift", "n_clusters": 5},
    "rotation": {"kind": "rotation", "angles": [0, 90, 180, 270]},
    "feature_skew": {"kind": "feature_skew", "n_clusters": 4, "mode": "pattern", "rms": 0.3},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=100)
    ap.add_argument("--partition", choices=sorted(PARTITIONS), default="dirichlet")
    args = ap.parse_args()
    spec = DataSpec(dataset="fashion_mnist", partition=PARTITIONS[args.partition])
    rows = []
    for call in ("first (parse + partition)", "second (cached pool)"):
        t0 = time.perf_counter()
        fed = build_federation(spec, args.devices, seed=0)
        rows.append((call, f"{time.perf_counter() - t0:.2f}", sum(s.train_y.shape[0] for s in fed.shards)))
    print(f"\nFashion-MNIST, {args.partition}, {args.devices} devices")
    print("\n".join(markdown_table(rows, ["call", "wall s", "training samples dealt"], align="lrr")))


if __name__ == "__main__":
    main()
