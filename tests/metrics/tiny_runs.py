"""A tiny regression scenario (MCDC synthetic linear data, as scenarios/conditional/mcdc_synthetic.yaml)."""

from __future__ import annotations

from typing import Any

from tests.helpers import digits_scenario


def regression_scenario(rounds: int = 3) -> dict[str, Any]:
    """FedAvg on 4 devices of ``synthetic_linear`` with a ``parameter_shift`` partition (2 clusters)."""
    return digits_scenario(
        {"name": "fedavg", "rounds": rounds, "eval_every": 1}, n=4, servers=True,
        data={"dataset": "synthetic_linear", "samples_per_client": 40,
              "partition": {"kind": "parameter_shift", "n_clusters": 2, "n_features": 5, "noise_std": 0.1}})
