"""Loaders read the real on-disk formats (tiny fixtures in tmp_path) and fail clearly."""

from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from p2pfl.data import DataSpec, build_federation
from p2pfl.data import datasets as ds
from p2pfl.data.datasets import load_dataset, read_idx
from p2pfl.errors import DataError

pytestmark = pytest.mark.usefixtures("fresh_cache")


@pytest.mark.parametrize("layout,compress", [("flat", True), ("torchvision", True), ("torchvision", False)])
def test_fashion_mnist_idx_layouts(tmp_path, fmt, layout, compress):
    folder = tmp_path if layout == "flat" else tmp_path / "FashionMNIST" / "raw"
    written = fmt.write_idx_dataset(folder, 60, 30, compress=compress)
    pool = load_dataset("fashion_mnist", str(tmp_path))
    assert pool.train_x.shape == (60, 1, 28, 28) and pool.test_x.shape == (30, 1, 28, 28)
    assert np.array_equal(pool.train_x[:, 0], written["train_x"]) and np.array_equal(pool.test_y, written["test_y"])
    assert pool.train_y.dtype == np.int64


def test_mnist_torchvision_layout_and_federation_values(tmp_path, fmt):
    written = fmt.write_idx_dataset(tmp_path / "MNIST" / "raw", 60, 30, seed=4)
    fed = build_federation(DataSpec(dataset="mnist", root=str(tmp_path)), 3, seed=0)
    assert fed.input_shape == (1, 28, 28) and fed.stats()["samples_per_device"] == [20, 20, 20]
    s = fed.shards[1]
    want = torch.from_numpy(written["train_x"][s.train_index].astype(np.float32))[:, None] / 255.0
    assert torch.equal(s.train_x, want)
    assert s.test_x.shape == (5, 1, 28, 28)  # 20 * 0.25


def test_idx_reader_rejects_truncated_and_foreign_files(tmp_path, fmt):
    good = fmt.idx_bytes(np.zeros((3, 2, 2), np.uint8))
    (tmp_path / "cut.gz").write_bytes(gzip.compress(good[:-1]))
    with pytest.raises(DataError, match=r"header says \(3, 2, 2\) \(12 bytes\) but holds 11 bytes; the file is truncated"):
        read_idx(tmp_path / "cut.gz")
    (tmp_path / "junk").write_bytes(b"PK\x03\x04hello")
    with pytest.raises(DataError, match="not an IDX file"):
        read_idx(tmp_path / "junk")
    assert read_idx(_write(tmp_path / "ok", good)).shape == (3, 2, 2)


def _write(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


def test_missing_fashion_mnist_names_expected_files(tmp_path):
    with pytest.raises(DataError) as err:
        load_dataset("fashion_mnist", str(tmp_path))
    msg = str(err.value)
    assert "train-images-idx3-ubyte.gz" in msg and "t10k-labels-idx1-ubyte.gz" in msg
    assert str(tmp_path / "FashionMNIST" / "raw") in msg
    assert "apt-get install dataset-fashion-mnist" in msg and "data.download: true" in msg and "\n" not in msg


@pytest.mark.skipif(os.path.isdir(ds.MNIST_SYSTEM_DIR), reason="MNIST installed system-wide")
def test_missing_mnist_without_root_names_system_dir():
    with pytest.raises(DataError, match=r"mnist: expected train-images-idx3-ubyte.gz.* in /usr/share/datasets/mnist"):
        load_dataset("mnist")


def test_download_true_fetches_only_when_missing(tmp_path, fmt, monkeypatch):
    calls = []

    def fake_download(cls_name, root):
        calls.append((cls_name, root))
        fmt.write_idx_dataset(root / "FashionMNIST" / "raw", 20, 10)

    monkeypatch.setattr(ds, "_torchvision_download", fake_download)
    pool = load_dataset("fashion_mnist", str(tmp_path), download=True)
    assert calls == [("FashionMNIST", tmp_path)] and pool.train_x.shape == (20, 1, 28, 28)
    ds.clear_cache()
    load_dataset("fashion_mnist", str(tmp_path), download=True)
    assert len(calls) == 1  # files now present: no second download


def test_cifar10_pickle_batches(tmp_path, fmt):
    written = fmt.write_cifar10(tmp_path, per_batch=20, n_test=20)
    pool = load_dataset("cifar10", str(tmp_path))
    assert pool.train_x.shape == (100, 3, 32, 32) and pool.test_x.shape == (20, 3, 32, 32)
    assert np.array_equal(pool.train_x, written["train_x"]) and np.array_equal(pool.train_y, written["train_y"])
    fed = build_federation(DataSpec(dataset="cifar10", root=str(tmp_path), partition={"kind": "label_shift", "n_clusters": 2}), 2, seed=0)
    assert set(fed.shards[0].train_y.tolist()) == {0, 1, 8, 9}  # vehicles
    assert set(fed.shards[1].train_y.tolist()) == {2, 3, 4, 5, 6, 7}  # animals
    assert fed.input_shape == (3, 32, 32)


def test_cifar100_fine_coarse_and_superclass_partitions(tmp_path, fmt):
    fmt.write_cifar100(tmp_path, per_class=2, n_test_per_class=1)
    pool = load_dataset("cifar100", str(tmp_path))
    assert np.array_equal(pool.fine_to_coarse, np.arange(100) // 5)
    fed = build_federation(DataSpec(dataset="cifar100", root=str(tmp_path), partition={"kind": "label_shift", "n_clusters": 20}), 20, seed=0)
    for s in fed.shards:
        assert set(s.train_y.tolist()) == set(range(5 * s.true_cluster, 5 * s.true_cluster + 5))
    assert fed.num_classes == 100
    cov = build_federation(DataSpec(dataset="cifar100", root=str(tmp_path), partition={"kind": "covariate_subclass", "n_clusters": 5}), 5, seed=0)
    assert cov.num_classes == 20
    for s in cov.shards:
        fine = pool.train_y[s.train_index]
        assert set((fine % 5).tolist()) == {s.true_cluster}  # subclass k of every superclass
        assert np.array_equal(s.train_y.numpy(), fine // 5)


def test_missing_cifar_names_expected_file(tmp_path):
    with pytest.raises(DataError, match=r"cifar10: expected data_batch_1, .*test_batch in .*cifar-10-batches-py"):
        load_dataset("cifar10", str(tmp_path))


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_cifar_unpickler_refuses_code(tmp_path, fmt):
    fmt.write_cifar10(tmp_path)
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_3", "wb") as f:
        pickle.dump({"data": _Evil(), "labels": []}, f, protocol=2)
    with pytest.raises(DataError, match="is not allowed in a CIFAR batch"):
        load_dataset("cifar10", str(tmp_path))


def test_cross_dataset_with_fixture_mnist_and_fallback(tmp_path, fmt):
    fmt.write_idx_dataset(tmp_path / "FashionMNIST" / "raw", 60, 30, seed=1)
    spec = DataSpec(dataset="fashion_mnist", root=str(tmp_path), partition={"kind": "cross_dataset", "others": ["mnist"]})
    fed = build_federation(spec, 4, seed=0)  # no MNIST files: digits upsampled to 28x28
    assert [s.source for s in fed.shards] == ["fashion_mnist", "fashion_mnist", "digits28", "digits28"]
    assert fed.dataset == "fashion_mnist+digits28" and fed.input_shape == (1, 28, 28) and fed.num_classes == 10
    fmt.write_idx_dataset(tmp_path / "MNIST" / "raw", 40, 20, seed=2)
    fed = build_federation(spec, 4, seed=0)
    assert [s.source for s in fed.shards] == ["fashion_mnist", "fashion_mnist", "mnist", "mnist"]
    assert fed.stats()["samples_per_device"] == [30, 30, 20, 20]
    strict = DataSpec(dataset="mnist", root=str(tmp_path / "nowhere"), partition={"kind": "cross_dataset", "others": ["fashion_mnist"], "fallback": False})
    with pytest.raises(DataError, match="mnist: expected"):
        build_federation(strict, 2, seed=0)


REAL = Path(ds.FASHION_MNIST_SYSTEM_DIR)


@pytest.mark.slow
@pytest.mark.skipif(not (REAL / "train-images-idx3-ubyte.gz").is_file(), reason="needs dataset-fashion-mnist (apt-get install dataset-fashion-mnist)")
def test_real_fashion_mnist_loads_and_partitions():
    # Its speed (< 5 s for 100 devices) is measured by analysis/bench/bench_data.py, not asserted here.
    fed = build_federation(DataSpec(dataset="fashion_mnist", partition={"kind": "dirichlet", "alpha": 0.5}), 100, seed=0)
    pool = load_dataset("fashion_mnist")
    assert pool.train_x.shape == (60000, 1, 28, 28) and pool.test_x.shape == (10000, 1, 28, 28)
    assert np.bincount(pool.train_y).tolist() == [6000] * 10
    assert sum(fed.stats()["samples_per_device"]) == 60000
