"""MCDC synthetic tasks (Conditional-PCA paper, App. A-A).

Clusters of clients with distinct generating parameters.  Cluster k draws,
from its own stream ``(seed, "data.synthetic", k)``:

- an input distribution x = A_k z + mu_k, z ~ N(0, I_D), A_k with i.i.d.
  N(0, 1/D) entries, mu_k ~ N(0, I_D) (so clusters differ in covariance and
  mean, which is what the PCA statistics pick up);
- a weight vector w_k ~ N(0, I_D).

``synthetic_linear``: y = w_k . x + b_k + noise_std * eps, b_k ~ N(0, 1),
eps ~ N(0, 1); float32 targets, ``num_classes`` 0 (regression).
``synthetic_logistic``: y = 1[w_k . (x - mu_k) + noise_std * eps > 0]; the
boundary passes through the cluster mean, so classes are balanced; int64 labels.

Every device draws its own samples from ``(seed, "data.synthetic.samples", i)``:
``samples_per_client`` training samples (default 200) and
round(n * f / (1 - f)) test samples, f = test_fraction.

One draw serves both engines (:func:`synthetic_fleet`): the fleet's samples as arrays, each device's normals
drawn from its own stream in one call, the arithmetic done per cluster over all its devices at once (the values
of drawing and computing device by device, bit for bit: tested). The event kernel's shards are its rows
(:func:`build_synthetic`); the tensor engine stacks them as they are (``p2pfl.tensor.data``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import torch

from p2pfl.data.schema import DataSpec, ParameterShiftPartition
from p2pfl.data.shards import Federation, Shard
from p2pfl.data.splitters import assign_clusters
from p2pfl.seeding import stream

__all__ = ["build_synthetic", "synthetic_fleet", "SyntheticFleet", "synthetic_task", "cluster_parameters",
           "ClusterParameters", "DEFAULT_SAMPLES"]

DEFAULT_SAMPLES = 200


class ClusterParameters(TypedDict):
    """One cluster's generating parameters: x = A z + mu, y from w . x (+ b)."""

    A: np.ndarray
    mu: np.ndarray
    w: np.ndarray
    b: float


def cluster_parameters(seed: int, cluster: int, n_features: int) -> ClusterParameters:
    """Generating parameters (A, mu, w, b) of one cluster."""
    rng = stream(seed, "data.synthetic", cluster)
    d = n_features
    return {
        "A": rng.standard_normal((d, d)) / np.sqrt(d),
        "mu": rng.standard_normal(d),
        "w": rng.standard_normal(d),
        "b": float(rng.standard_normal()),
    }


def synthetic_task(spec: DataSpec, n_devices: int) -> tuple[np.ndarray, int, int]:
    """Each device's cluster, and the training and test samples every device draws."""
    p = spec.partition_as(ParameterShiftPartition)
    clusters = assign_clusters(n_devices, p.n_clusters, p.assignment)
    n_train = spec.samples_per_client or DEFAULT_SAMPLES
    n_test = spec.test_samples_per_client or max(1, int(np.floor(n_train * spec.test_fraction / (1 - spec.test_fraction) + 0.5)))
    return clusters, n_train, n_test


@dataclass(frozen=True)
class SyntheticFleet:
    """Every device's samples: ``x[i]`` device i's training inputs ``(S, D)`` float32, ``y[i]`` its targets (int64
    labels, or float32 for regression), ``test_x``/``test_y`` its test samples; ``clusters[i]`` its cluster."""

    x: np.ndarray
    y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    clusters: np.ndarray
    logistic: bool


def synthetic_fleet(spec: DataSpec, n_devices: int, *, seed: int, block_bytes: int = 1 << 26) -> SyntheticFleet:
    """The samples of ``n_devices`` devices under run seed ``seed``: device i's standard normals come from its own
    stream ``(seed, "data.synthetic.samples", i)`` in one call (its training inputs, their noise, its test inputs,
    their noise: the numbers of four draws in turn); a cluster's arithmetic is done over all its devices of a block
    at once (``block_bytes`` of normals: a row's values do not depend on the rows beside it)."""
    p = spec.partition_as(ParameterShiftPartition)
    logistic = spec.dataset == "synthetic_logistic"
    clusters, n_train, n_test = synthetic_task(spec, n_devices)
    n, d = n_devices, p.n_features
    width = (n_train + n_test) * (d + 1)  # a device's normals
    params = [cluster_parameters(seed, k, d) for k in range(p.n_clusters)]
    x = np.empty((n, n_train, d), dtype=np.float32)
    y = np.empty((n, n_train), dtype=np.int64 if logistic else np.float32)
    tx = np.empty((n, n_test, d), dtype=np.float32)
    ty = np.empty((n, n_test), dtype=y.dtype)
    step = max(1, block_bytes // (8 * width))  # devices whose normals are held at once
    for first in range(0, n, step):
        devices = np.arange(first, min(first + step, n))
        z = np.empty((len(devices), width))
        for row, i in enumerate(devices):
            z[row] = stream(seed, "data.synthetic.samples", int(i)).standard_normal(width)
        at = 0
        for size, xs, ys in ((n_train, x, y), (n_test, tx, ty)):
            for k, c in enumerate(params):
                rows = np.flatnonzero(clusters[devices] == k)
                if not len(rows):
                    continue
                inputs = z[rows, at : at + size * d].reshape(-1, d) @ c["A"].T + c["mu"]  # one row a sample
                eps = p.noise_std * z[rows, at + size * d : at + size * (d + 1)].reshape(-1)
                if logistic:
                    target = ((inputs - c["mu"]) @ c["w"] + eps > 0).astype(np.int64)
                else:
                    target = (inputs @ c["w"] + c["b"] + eps).astype(np.float32)
                xs[devices[rows]] = inputs.astype(np.float32).reshape(len(rows), size, d)
                ys[devices[rows]] = target.reshape(len(rows), size)
            at += size * (d + 1)
    return SyntheticFleet(x=x, y=y, test_x=tx, test_y=ty, clusters=np.asarray(clusters, dtype=np.int64),
                          logistic=logistic)


def build_synthetic(spec: DataSpec, n_devices: int, *, seed: int) -> Federation:
    """A Federation of vector data for ``synthetic_linear`` / ``synthetic_logistic``: each shard a copy of its
    device's rows of :func:`synthetic_fleet` (a copy: a shard sent to a worker carries its own samples only)."""
    p = spec.partition_as(ParameterShiftPartition)
    fleet = synthetic_fleet(spec, n_devices, seed=seed)
    n_train, n_test = fleet.x.shape[1], fleet.test_x.shape[1]

    def own(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a.copy())

    shards = tuple(Shard(own(fleet.x[i]), own(fleet.y[i]), own(fleet.test_x[i]), own(fleet.test_y[i]), int(c),
                         np.arange(n_train), np.arange(n_test), spec.dataset) for i, c in enumerate(fleet.clusters))
    return Federation(
        dataset=spec.dataset,
        shards=shards,
        num_classes=2 if fleet.logistic else 0,
        input_shape=(p.n_features,),
        true_clusters=tuple(int(c) for c in fleet.clusters),
        partition=p.kind,
        task="classification" if fleet.logistic else "regression",
    )
