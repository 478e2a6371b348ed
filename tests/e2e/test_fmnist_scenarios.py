"""The shipped Fashion-MNIST scenarios run from YAML (reduced budget) and report every headline figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2pfl.cli import main

ROOT = Path(__file__).resolve().parents[2]
FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")

pytestmark = pytest.mark.skipif(not FMNIST.exists(), reason="apt-get install dataset-fashion-mnist")


@pytest.mark.parametrize("name,protocol", [("fmnist_gossip", "gossip"), ("fmnist_fedavg", "fedavg"),
                                           ("fmnist_local", "local")])
@pytest.mark.slow
def test_fmnist_scenario_runs_and_reports(tmp_path, name, protocol):
    out = tmp_path / name
    code = main(["run", str(ROOT / "scenarios" / f"{name}.yaml"), "--out", str(out), "--quiet",
                 "--set", "protocol.rounds=1", "--set", "data.samples_per_client=16"])
    assert code == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["protocol"] == protocol and s["n_devices"] == 16
    assert len(s["accuracy_per_node"]) == 16 and 0.0 <= s["accuracy_mean"] <= 1.0
    assert s["sim_time_s"] > 0
    # Paper CNN: 3 x forward FLOPs per sample, 16 devices x 16 samples x 1 epoch.
    assert s["compute_flops_total"] == 3 * 8_595_466 * 16 * 16
    model_bytes = 1_686_568
    if protocol == "local":
        assert s["bytes_total"] == 0 and s["messages_total"] == 0
    elif protocol == "fedavg":
        assert s["messages_total"] == 32
        assert s["bytes_total"] == 16 * (2 * (model_bytes + 64) + 8)
    else:
        assert s["messages_total"] <= 32 and s["bytes_total"] == s["messages_total"] * (model_bytes + 64)
