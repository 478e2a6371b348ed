"""Small scenario builders shared by tests."""

from __future__ import annotations

import copy
from typing import Any


def digits_scenario(protocol: dict[str, Any], *, n: int = 6, kind: str = "ring", servers: bool = False,
                    **extra: Any) -> dict[str, Any]:
    """A tiny, fast scenario on scikit-learn digits."""
    topo: dict[str, Any] = {"kind": kind, "n": n}
    if servers:
        topo["servers"] = [{"name": "server", "attach": "all", "link": {"latency_s": 0.02, "bandwidth_bps": 5.0e7}}]
    sc: dict[str, Any] = {
        "name": "tiny",
        "seed": 0,
        "topology": topo,
        "data": {"dataset": "digits", "partition": {"kind": "iid"}, "samples_per_client": 40},
        "model": {"name": "mlp", "hidden": 16},
        "training": {"epochs": 1, "batch_size": 16, "lr": 0.05, "momentum": 0.9},
        "protocol": protocol,
    }
    for key, value in extra.items():
        sc[key] = value
    return copy.deepcopy(sc)
