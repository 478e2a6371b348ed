"""Metropolis-Hastings mixing weights (Xiao & Boyd, "Fast linear iterations for distributed averaging", 2004,
Sec. 4.2; the mixing of D-PSGD, Lian et al. 2017): w_ij = 1 / (1 + max(d_i, d_j)) on each edge (i, j) and
w_ii = 1 - sum_j w_ij, a symmetric doubly stochastic matrix from the degrees alone.

Arrays of edges in, arrays out: the tensor engine passes every edge of the fleet at once, a kernel device its
own row (``p2pfl.protocols.serverless.dsgd``); the sums run in the order given, so both get the same bits.
"""

from __future__ import annotations

import numpy as np

__all__ = ["metropolis_edge_weights", "metropolis_self_weights"]


def metropolis_edge_weights(degree_i: np.ndarray, degree_j: np.ndarray) -> np.ndarray:
    """w_ij = 1 / (1 + max(d_i, d_j)) of each edge (i, j), from its ends' degrees (float64)."""
    return 1.0 / (1.0 + np.maximum(np.asarray(degree_i), np.asarray(degree_j)))


def metropolis_self_weights(row_of: np.ndarray, weights: np.ndarray, n_rows: int) -> np.ndarray:
    """w_ii = 1 - sum_j w_ij of each of ``n_rows`` rows: ``weights[e]`` belongs to row ``row_of[e]``, and a row's
    weights are added one after another in the order given."""
    return 1.0 - np.bincount(np.asarray(row_of, dtype=np.int64), weights=weights, minlength=n_rows)
