"""``p2pfl sweep --jobs ray``: every cell a Ray task; the same files as ``--jobs 1``, failures reported, resumable."""

from __future__ import annotations

from pathlib import Path

import pytest

import p2pfl
from tests.study.test_sweep import FEDAVG, _write_study

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'p2pfl-sim[ray]')")


def _files(cell: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(cell.iterdir()) if p.name not in ("timing.json", "manifest.json")}


@pytest.fixture(scope="module")
def ray_local():
    """One small local Ray for the module's sweeps (a sweep joins it and leaves it running)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


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
