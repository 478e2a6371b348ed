"""Same scenario + seed -> byte-identical summary.json and events.jsonl; another seed differs."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

import p2pfl
from tests.helpers import digits_scenario

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("protocol,servers", [({"name": "gossip", "rounds": 3, "mode": "async"}, False),
                                              ({"name": "fedavg", "rounds": 3, "client_fraction": 0.5}, True),
                                              ({"name": "local", "rounds": 2}, False)])
@pytest.mark.slow
def test_same_seed_gives_byte_identical_outputs(tmp_path, protocol, servers):
    sc = digits_scenario(protocol, n=5, kind="erdos_renyi", servers=servers)
    sc["topology"]["p"] = 0.6
    sc["devices"] = {"flops_per_s": {"dist": "lognormal", "median": 1.0e8, "sigma": 0.5}}
    runs = [p2pfl.run(sc, out=tmp_path / name, seed=seed) for name, seed in (("a", 3), ("b", 3), ("c", 4))]
    files = ("summary.json", "events.jsonl", "scenario.yaml")
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    assert (tmp_path / "a" / "summary.json").read_bytes() != (tmp_path / "c" / "summary.json").read_bytes()
    assert (tmp_path / "a" / "events.jsonl").read_bytes() != (tmp_path / "c" / "events.jsonl").read_bytes()
    assert runs[0].summary["seed"] == 3 and runs[2].summary["seed"] == 4


@pytest.mark.slow
def test_resolved_scenario_yaml_reruns_to_the_same_summary(tmp_path):
    first = p2pfl.run(ROOT / "scenarios" / "quickstart.yaml", out=tmp_path / "a",
                      overrides=["protocol.rounds=2", "data.samples_per_client=30"])
    resolved = yaml.safe_load((tmp_path / "a" / "scenario.yaml").read_text())
    assert resolved["seed"] == 0 and resolved["protocol"]["rounds"] == 2
    assert resolved["topology"]["kind"] == "random_geometric"  # inlined from the topology file
    again = p2pfl.run(tmp_path / "a" / "scenario.yaml", out=tmp_path / "b")
    assert (tmp_path / "a" / "summary.json").read_bytes() == (tmp_path / "b" / "summary.json").read_bytes()
    assert again.accuracy_mean == first.accuracy_mean


def test_run_directory_follows_the_outputs_contract(tmp_path):
    import json

    result = p2pfl.run(digits_scenario({"name": "gossip", "rounds": 2}, n=4), out=tmp_path / "run")
    names = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert names == ["events.jsonl", "manifest.json", "scenario.yaml", "summary.json", "timing.json"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    for key in ("scenario", "protocol", "seed", "rounds", "sim_time_s", "accuracy_mean", "accuracy_per_node",
                "bytes_total", "messages_total", "bytes_per_node", "compute_flops_total", "compute_sim_s_total"):
        assert key in summary, key
    assert summary["bytes_total"] == sum(summary["bytes_per_node"]) == result.bytes_total
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    sends = [e for e in events if e["kind"] == "send"]
    assert len(sends) == summary["messages_total"]
    assert sum(e["bytes"] for e in sends) == summary["bytes_total"]
    assert all(e1["t"] <= e2["t"] for e1, e2 in itertools.pairwise(events))
    timing = json.loads((tmp_path / "run" / "timing.json").read_text())
    assert timing["wall_s"] >= timing["train_wall_s"] > 0
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["package"] == "p2pfl-sim" and manifest["torch"].startswith("2.14")
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temp dir left behind


@pytest.mark.slow
@pytest.mark.e2e
def test_byte_identical_across_processes_with_different_hash_seeds(tmp_path):
    """No hidden dependence on set/dict ordering of strings (PYTHONHASHSEED) or process state: a fresh interpreter
    with a fixed hash seed writes the bytes this test process (another hash seed, other tests run before) writes."""
    import os
    import subprocess
    import sys

    sc = digits_scenario({"name": "gossip", "rounds": 2, "mode": "async"}, n=5, kind="watts_strogatz")
    sc["topology"].update({"k": 2, "p": 0.3})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    here = os.environ.get("PYTHONHASHSEED")
    other = "2" if here == "1" else "1"  # unset here: this process's hash seed is random
    p2pfl.run(path, out=tmp_path / "a")
    proc = subprocess.run([sys.executable, "-m", "p2pfl", "run", str(path), "--out", str(tmp_path / "b"), "--quiet"],
                          env={**os.environ, "PYTHONHASHSEED": other}, capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    for f in ("summary.json", "events.jsonl"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
