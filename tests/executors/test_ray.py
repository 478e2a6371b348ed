"""Ray, on one local Ray for the module: the executor gives the same bytes as inline and job errors surface with the
task's traceback (a clear error without Ray); ``p2pfl sweep --jobs ray`` runs every cell as a Ray task, with the same
files as ``--jobs 1``, failures reported, resumable."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import p2pfl
from p2pfl.config import load
from p2pfl.errors import ConfigError
from p2pfl.executors.base import ExecutorError
from p2pfl.executors.jobs import TrainJob
from p2pfl.learning.train import TrainingSpec
from p2pfl.sim.kernel import Simulation
from tests.study.test_sweep import FEDAVG, _write_study

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

CASES = {
    "gossip": ("quickstart.yaml", ["protocol.rounds=3"]),
    "fedavg": ("fmnist_fedavg.yaml", ["data.dataset=digits", "model={name: mlp, hidden: 32}",
                                      "data.samples_per_client=60", "protocol.rounds=2"]),
}


@pytest.fixture(scope="module")
def ray_local():
    """One small local Ray for the module (the executor and the sweep join it and leave it running)."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'p2pfl-sim[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True, configure_logging=False)
    yield ray
    ray.shutdown()


def _run(case: str, executor: str) -> tuple[str, str]:
    path, overrides = CASES[case]
    sim = Simulation(load(SCENARIOS / path, overrides=[*overrides, f"executor={executor}"]))
    summary = sim.run()
    return json.dumps(summary, sort_keys=True), json.dumps(sim.recorder.events, sort_keys=True, default=repr)


@pytest.mark.slow
@pytest.mark.parametrize(("case", "executor"), [("gossip", "ray"), ("fedavg", "{kind: ray, workers: 2}")])
def test_ray_matches_inline_byte_for_byte(ray_local, case: str, executor: str) -> None:
    ray_summary, ray_events = _run(case, executor)
    inline_summary, inline_events = _run(case, "inline")
    assert ray_summary == inline_summary
    assert ray_events == inline_events
    assert ray_local.is_initialized()  # the executor did not stop a Ray it did not start


@pytest.mark.slow
def test_failing_job_raises_executor_error_with_task_traceback(ray_local) -> None:
    from p2pfl.executors.ray import RayExecutor

    ex = RayExecutor(None, workers=None, threads=1)
    job = TrainJob(0, nn.Linear(3, 2), torch.zeros(8, 5), torch.zeros(8, dtype=torch.long), TrainingSpec(),
                   torch.Generator().manual_seed(0))  # 5 features into a 3-input layer: the forward raises
    future = ex.submit(job)
    with pytest.raises(ExecutorError, match=r"(?s)failed in a Ray task.*mat1 and mat2 shapes cannot be multiplied"):
        future.result()
    ex.close()
    assert ray_local.is_initialized()


def test_without_ray_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from p2pfl.executors.ray import RayExecutor

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ConfigError, match=r"field 'executor': kind 'ray' needs Ray; pip install 'p2pfl-sim\[ray\]'"):
        RayExecutor(None, workers=None, threads=1)


def _files(cell: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(cell.iterdir()) if p.name not in ("timing.json", "manifest.json")}


@pytest.mark.sweep
@pytest.mark.slow
def test_ray_cells_are_byte_identical_to_jobs_1_failures_are_reported_and_a_rerun_resumes(ray_local, tmp_path):
    # fedavg without a server: a user error in its task, reported as for worker processes
    study = _write_study(tmp_path, name="onray", grid={"training.lr": [0.02, 0.05]}, seeds=[0],
                         variants={"gossip": {}, "fedavg": {"unset": FEDAVG["unset"], "set": {"protocol.name": "fedavg"}}})
    on_ray = p2pfl.sweep(study, jobs="ray", out=tmp_path / "ray")
    assert sorted(on_ray.ran) == ["gossip__training.lr=0.02__seed0", "gossip__training.lr=0.05__seed0"]
    assert set(on_ray.failed) == {"fedavg__training.lr=0.02__seed0", "fedavg__training.lr=0.05__seed0"}
    assert all("protocol 'fedavg' needs a server" in m for m in on_ray.failed.values())
    assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == [".sweep.lock", *sorted(on_ray.ran)]
    assert ray_local.is_initialized()  # the sweep did not stop a Ray it did not start
    local = p2pfl.sweep(study, jobs=1, out=tmp_path / "local")
    assert sorted(local.ran) == sorted(on_ray.ran)
    for cell in on_ray.ran:
        assert _files(tmp_path / "ray" / cell) == _files(tmp_path / "local" / cell)
        assert (tmp_path / "ray" / cell / "cell.json").is_file()
    again = p2pfl.sweep(study, jobs="ray", out=tmp_path / "ray")
    assert sorted(again.skipped) == sorted(on_ray.ran) and not again.ran and set(again.failed) == set(on_ray.failed)
