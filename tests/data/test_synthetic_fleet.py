"""One synthetic draw serves both engines (``p2pfl.data.synthetic.synthetic_fleet``): its rows are the event
kernel's shards and the tensor engine's stacked arrays, and they hold the values of drawing device by device."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from p2pfl.data.schema import DataSpec
from p2pfl.data.synthetic import build_synthetic, cluster_parameters, synthetic_fleet
from p2pfl.seeding import stream
from p2pfl.tensor.data import fleet_data


def by_hand(spec: DataSpec, n: int, seed: int, clusters: np.ndarray, n_train: int, n_test: int) -> list[tuple]:
    """Device by device, its four draws in turn from its own stream and its cluster's arithmetic on them."""
    d = spec.partition.n_features  # type: ignore[union-attr]
    noise = spec.partition.noise_std  # type: ignore[union-attr]
    out = []
    for i in range(n):
        c = cluster_parameters(seed, int(clusters[i]), d)
        rng = stream(seed, "data.synthetic.samples", i)
        parts = []
        for size in (n_train, n_test):
            x = rng.standard_normal((size, d)) @ c["A"].T + c["mu"]
            eps = noise * rng.standard_normal(size)
            if spec.dataset == "synthetic_logistic":
                y = ((x - c["mu"]) @ c["w"] + eps > 0).astype(np.int64)
            else:
                y = (x @ c["w"] + c["b"] + eps).astype(np.float32)
            parts += [x.astype(np.float32), y]
        out.append(tuple(parts))
    return out


@pytest.mark.parametrize(("dataset", "d", "samples", "n", "k"), [
    ("synthetic_logistic", 10, 16, 40, 3), ("synthetic_linear", 7, 50, 12, 2), ("synthetic_linear", 33, 5, 9, 1),
    ("synthetic_logistic", 64, 200, 6, 2),
])
def test_the_fleet_draw_is_each_devices_own_draw_bit_for_bit(dataset: str, d: int, samples: int, n: int,
                                                             k: int) -> None:
    spec = DataSpec(dataset=dataset, samples_per_client=samples, test_samples_per_client=7,
                    partition={"kind": "parameter_shift", "n_clusters": k, "n_features": d})
    fleet = synthetic_fleet(spec, n, seed=4)
    blocks = synthetic_fleet(spec, n, seed=4, block_bytes=1)  # one device's normals at a time
    for i, (x, y, tx, ty) in enumerate(by_hand(spec, n, 4, fleet.clusters, samples, 7)):
        for mine, theirs in ((fleet.x[i], x), (fleet.y[i], y), (fleet.test_x[i], tx), (fleet.test_y[i], ty)):
            assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs)
    for name in ("x", "y", "test_x", "test_y", "clusters"):
        assert np.array_equal(getattr(blocks, name), getattr(fleet, name)), name


def test_the_kernels_shards_and_the_tensor_rows_are_the_fleet_draw() -> None:
    spec = DataSpec(dataset="synthetic_logistic", samples_per_client=16,
                    partition={"kind": "parameter_shift", "n_clusters": 2, "n_features": 10})
    fleet, fed, rows = synthetic_fleet(spec, 8, seed=1), build_synthetic(spec, 8, seed=1), fleet_data(spec, 8, 1)
    for i, s in enumerate(fed.shards):
        assert torch.equal(s.train_x, torch.from_numpy(fleet.x[i])) and torch.equal(rows.x[torch.tensor([i])][0], s.train_x)
        assert torch.equal(s.test_y, rows.test_y[i]) and s.true_cluster == fleet.clusters[i]
        assert s.train_x.untyped_storage().nbytes() == s.train_x.numel() * 4  # a shard holds its own samples only
