"""Cluster choice and clusters from an assignment (IFCA, Ghosh et al. 2020, Alg. 2: each device's E-step, the
server's clusters): the event kernel's IFCA (``p2pfl.protocols.server.ifca``) and the tensor engine's
(``p2pfl.protocols.server.ifca_tensor.IFCARounds``) call these."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import numpy as np

__all__ = ["choose_clusters", "choose_cluster", "clusters_from_assignment"]


def choose_clusters(losses: np.ndarray) -> np.ndarray:
    """E-step of each row of ``losses`` (``(..., K)``: K models' losses): the cluster of the lowest loss (ties:
    the lowest id)."""
    return np.argmin(np.asarray(losses, dtype=np.float64), axis=-1)


def choose_cluster(losses: Sequence[float]) -> int:
    """E-step of one device: :func:`choose_clusters` of its K losses."""
    return int(choose_clusters(np.asarray(losses, dtype=np.float64)))


def clusters_from_assignment(assignment: Union[Sequence[int], np.ndarray], k: int) -> list[list[int]]:
    """Non-empty clusters as lists of device ids (ascending), in cluster-id order: ``assignment[d]`` is device
    d's cluster, one of ``range(k)``."""
    a = np.asarray(assignment, dtype=np.int64)
    order = np.argsort(a, kind="stable")
    bounds = np.cumsum(np.bincount(a, minlength=k))[:-1]
    return [g.tolist() for g in np.split(order, bounds) if len(g)]
