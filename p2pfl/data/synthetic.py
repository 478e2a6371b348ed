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
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypedDict

import numpy as np
import torch

from p2pfl.data.schema import DataSpec, ParameterShiftPartition
from p2pfl.data.shards import Federation, Shard
from p2pfl.data.splitters import assign_clusters
from p2pfl.seeding import stream

__all__ = ["build_synthetic", "synthetic_draws", "synthetic_task", "cluster_parameters", "ClusterParameters", "DEFAULT_SAMPLES"]

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


def _draw(params: ClusterParameters, n: int, logistic: bool, noise_std: float,
          rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    d = params["mu"].shape[0]
    x = rng.standard_normal((n, d)) @ params["A"].T + params["mu"]
    eps = noise_std * rng.standard_normal(n)
    if logistic:
        y = ((x - params["mu"]) @ params["w"] + eps > 0).astype(np.int64)
        return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y)
    y = x @ params["w"] + params["b"] + eps
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.float32))


def synthetic_task(spec: DataSpec, n_devices: int) -> tuple[np.ndarray, int, int]:
    """Each device's cluster, and the training and test samples every device draws."""
    p = spec.partition_as(ParameterShiftPartition)
    clusters = assign_clusters(n_devices, p.n_clusters, p.assignment)
    n_train = spec.samples_per_client or DEFAULT_SAMPLES
    n_test = spec.test_samples_per_client or max(1, int(np.floor(n_train * spec.test_fraction / (1 - spec.test_fraction) + 0.5)))
    return clusters, n_train, n_test


def synthetic_draws(spec: DataSpec, n_devices: int, *, seed: int) -> Iterator[tuple[torch.Tensor, ...]]:
    """Device by device, its training inputs and targets, then its test inputs and targets."""
    p = spec.partition_as(ParameterShiftPartition)
    logistic = spec.dataset == "synthetic_logistic"
    clusters, n_train, n_test = synthetic_task(spec, n_devices)
    params = [cluster_parameters(seed, k, p.n_features) for k in range(p.n_clusters)]
    for i, c in enumerate(clusters):
        rng = stream(seed, "data.synthetic.samples", i)
        yield (*_draw(params[c], n_train, logistic, p.noise_std, rng), *_draw(params[c], n_test, logistic, p.noise_std, rng))


def build_synthetic(spec: DataSpec, n_devices: int, *, seed: int) -> Federation:
    """A Federation of vector data for ``synthetic_linear`` / ``synthetic_logistic``."""
    p = spec.partition_as(ParameterShiftPartition)
    logistic = spec.dataset == "synthetic_logistic"
    clusters, n_train, n_test = synthetic_task(spec, n_devices)
    shards = tuple(Shard(trx, try_, tex, tey, int(c), np.arange(n_train), np.arange(n_test), spec.dataset)
                   for c, (trx, try_, tex, tey) in zip(clusters, synthetic_draws(spec, n_devices, seed=seed)))
    return Federation(
        dataset=spec.dataset,
        shards=shards,
        num_classes=2 if logistic else 0,
        input_shape=(p.n_features,),
        true_clusters=tuple(int(c) for c in clusters),
        partition=p.kind,
        task="classification" if logistic else "regression",
    )
