"""Client distribution statistics (Conditional-PCA paper, Sec. III-A and App. B-C).

A client stacks Z = [phi(x) || onehot(y)] over its training set (Eq. 1) and
keeps the top-l eigenvalues of Z's sample covariance as its fingerprint s.
phi is the identity on flattened inputs (28x28, 8x8 and vector data); for
32x32 RGB data the caller passes phi(x), the 128-d embeddings of the frozen
cross-trained encoder (``p2pfl.conditioning.encoder``), as ``x``. Regression
targets enter Z as one real column instead of a one-hot block.

The eigenvalues come from a randomized SVD (Halko, Martinsson & Tropp 2011,
Alg. 4.4 with ``power_iterations`` subspace iterations) whose Gaussian test
matrix is drawn from a fixed seed: every client runs the same agreed-upon
deterministic procedure, in O(n d k) time (k = l + oversample).

The paper z-scores the eigenvalues across clients (App. B-C); that needs the
population mean and standard deviation of each component, computed here from
per-client sums and sums of squares (``population_moments``). ``log_normalize``
(log(1 + s)) is the communication-free alternative.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

__all__ = ["feature_matrix", "pca_statistics", "pca_flops", "population_moments", "zscore_normalize", "log_normalize"]

#: Seed of the shared Gaussian test matrix of the randomized SVD (part of the agreed procedure).
SKETCH_SEED = 0
_EPS = 1e-8


def feature_matrix(x: torch.Tensor, y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Z = [flatten(x) || onehot(y)] as float64 ``(n, d + C)``; regression (``num_classes == 0``): [x || y]."""
    flat = x.reshape(x.shape[0], -1).to(torch.float64)
    if num_classes > 0:
        lab = F.one_hot(y.to(torch.int64), num_classes).to(torch.float64)
    else:
        lab = y.reshape(-1, 1).to(torch.float64)
    return torch.cat([flat, lab], dim=1)


def pca_statistics(z: torch.Tensor | np.ndarray, l: int = 32, *, method: str = "randomized", oversample: int = 10,
                   power_iterations: int = 4) -> np.ndarray:
    """Top-``l`` eigenvalues of the sample covariance of ``z`` (rows = samples), descending.

    Components beyond the rank of the centred ``z`` are 0. ``method="exact"``
    uses a full eigendecomposition (O(n d^2 + d^3)); ``"randomized"`` the
    sketch described in the module docstring. Raises ValueError on bad input.
    """
    z = torch.as_tensor(z, dtype=torch.float64)
    if z.ndim != 2 or z.shape[0] < 1:
        raise ValueError(f"The 'z' parameter must be a 2-D matrix with at least one row; got shape {tuple(z.shape)} instead")
    if l < 1:
        raise ValueError(f"The 'l' parameter must be >= 1; got {l} instead")
    if method not in ("randomized", "exact"):
        raise ValueError(f"The 'method' parameter must be 'randomized' or 'exact'; got {method!r} instead")
    n = z.shape[0]
    out = np.zeros(l, dtype=np.float64)
    if n < 2:
        return out
    zc = z - z.mean(dim=0, keepdim=True)
    if method == "exact":
        eig = torch.linalg.eigvalsh(zc.T @ zc / (n - 1)).flip(0).clamp_min(0.0)
    else:
        eig = _randomized_eigenvalues(zc, l, oversample, power_iterations)
    m = min(l, eig.shape[0])
    out[:m] = eig[:m].numpy()
    return out


def _randomized_eigenvalues(zc: torch.Tensor, l: int, oversample: int, power_iterations: int) -> torch.Tensor:
    """Covariance eigenvalues of centred ``zc`` from a rank-(l+oversample) range sketch."""
    n, d = zc.shape
    k = min(l + oversample, n, d)
    gen = torch.Generator().manual_seed(SKETCH_SEED)
    omega = torch.randn(d, k, generator=gen, dtype=torch.float64)
    q, _ = torch.linalg.qr(zc @ omega)
    for _ in range(power_iterations):
        q, _ = torch.linalg.qr(zc.T @ q)
        q, _ = torch.linalg.qr(zc @ q)
    sigma = torch.linalg.svdvals(q.T @ zc)
    return sigma**2 / (n - 1)


def pca_flops(n: int, d: int, l: int = 32, *, oversample: int = 10, power_iterations: int = 4) -> int:
    """Modelled FLOPs of ``pca_statistics`` (randomized) on an ``n x d`` matrix (multiply-add = 2 FLOPs).

    centring 2nd; sketch Z Omega 2ndk; each power iteration two products
    (4ndk) and two QRs (4nk^2 + 4dk^2); the first QR 4nk^2; B = Q^T Z 2ndk;
    SVD of the k x d matrix B ~ 4dk^2 + 22k^3 (Golub & Van Loan). k = l + oversample.
    """
    k = min(l + oversample, n, d) if n > 1 else 0
    q = power_iterations
    return int(2 * n * d + 2 * n * d * k * (2 + 2 * q) + 4 * n * k * k * (1 + q) + 4 * d * k * k * q
               + 4 * d * k * k + 22 * k**3)


def population_moments(sums: np.ndarray, sumsqs: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and (population) standard deviation per component from summed s_i and s_i^2 over ``count`` clients."""
    if count < 1:
        raise ValueError(f"The 'count' parameter must be >= 1; got {count} instead")
    mean = np.asarray(sums, dtype=np.float64) / count
    var = np.asarray(sumsqs, dtype=np.float64) / count - mean**2
    return mean, np.sqrt(np.clip(var, 0.0, None))


def zscore_normalize(s: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """(s - mean) / std per component; components with zero spread become 0."""
    s, mean, std = (np.asarray(a, dtype=np.float64) for a in (s, mean, std))
    return np.where(std > _EPS, (s - mean) / np.where(std > _EPS, std, 1.0), 0.0)


def log_normalize(s: np.ndarray) -> np.ndarray:
    """log(1 + s): the communication-free normalization (eigenvalues span orders of magnitude).

    log1p rather than log: components beyond the rank of Z are exactly 0 and
    log would turn them into a huge constant input (log 1e-8 = -18.4).
    """
    return np.log1p(np.clip(np.asarray(s, dtype=np.float64), 0.0, None))
