"""Per-cluster input transforms: rotation (E2b) and feature skew (RND paper).

All functions take and return float32 tensors ``(n, C, H, W)`` with values in
[0, 1]; randomness comes only from the Generator passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from p2pfl.errors import DataError

__all__ = ["rotate", "add_noise", "add_pattern", "simplex_patterns", "smoothed_patterns", "simplex_coordinates",
           "noise_levels"]


def rotate(x: torch.Tensor, angle_deg: float) -> torch.Tensor:
    """Rotate images counter-clockwise by ``angle_deg`` (Conditional paper, App. E).

    Multiples of 90 degrees are exact (``torch.rot90``); other angles use
    bilinear interpolation about the centre with zero fill.
    """
    a = float(angle_deg) % 360.0
    if a == 0:
        return x.clone()
    if a % 90 == 0:
        return torch.rot90(x, int(a // 90), dims=(-2, -1)).contiguous()
    from torchvision.transforms.functional import InterpolationMode
    from torchvision.transforms.functional import rotate as tv_rotate

    return tv_rotate(x, a, interpolation=InterpolationMode.BILINEAR, fill=0.0).clamp_(0.0, 1.0)


def noise_levels(noise_std: float | Sequence[float], n_clusters: int) -> list[float]:
    """Per-group Gaussian std: a list is taken as is (one per group); a single
    value s gives evenly spaced levels s * g / (K - 1), g = 0..K-1 (group 0 clean)."""
    if isinstance(noise_std, (int, float)):
        if n_clusters == 1:
            return [float(noise_std)]
        return [float(noise_std) * g / (n_clusters - 1) for g in range(n_clusters)]
    levels = [float(s) for s in noise_std]
    if len(levels) != n_clusters:
        raise DataError(f"feature_skew noise_std lists {len(levels)} values but n_clusters={n_clusters}; give one per cluster")
    return levels


def add_noise(x: torch.Tensor, std: float, *, rng: np.random.Generator) -> torch.Tensor:
    """``clamp(x + N(0, std^2), 0, 1)`` with fresh noise per pixel and sample."""
    if std == 0:
        return x.clone()
    noise = torch.from_numpy(rng.standard_normal(tuple(x.shape), dtype=np.float32))
    return (x + std * noise).clamp_(0.0, 1.0)


def simplex_patterns(n_groups: int, shape: Sequence[int], rms: float, *, rng: np.random.Generator) -> torch.Tensor:
    """K additive patterns: zero-sum, pairwise equidistant, each with per-pixel RMS ``rms``.

    The vertices of a regular simplex centred at the origin: K orthonormal
    random directions (QR of a Gaussian matrix) minus their mean, scaled to
    the requested RMS.  Returns a float32 tensor ``(K, *shape)``.
    """
    d = int(np.prod(shape))
    if n_groups > d:
        raise DataError(f"feature_skew pattern needs n_clusters <= {d} pixels; got {n_groups}")
    if n_groups == 1:
        return torch.zeros((1, *shape), dtype=torch.float32)
    q, _ = np.linalg.qr(rng.standard_normal((d, n_groups)))
    v = q.T - q.T.mean(axis=0, keepdims=True)  # (K, d), rows zero-sum and equidistant
    v *= rms / np.sqrt((v**2).mean(axis=1, keepdims=True))
    return torch.from_numpy(v.astype(np.float32)).reshape(n_groups, *shape)


def simplex_coordinates(k: int) -> torch.Tensor:
    """``(k, k - 1)`` vertices of a regular simplex centred at the origin (Helmert contrasts, float32).

    Column ``c`` is ``1 / sqrt((c + 1)(c + 2))`` on rows ``0..c`` and ``-(c + 1) / sqrt((c + 1)(c + 2))`` on
    row ``c + 1``: orthonormal columns orthogonal to the ones vector, so every row has norm
    ``sqrt((k - 1) / k)`` and any two rows are ``sqrt(2)`` apart. The RND authors' ``_regular_simplex_coordinates``.
    """
    out = torch.zeros((k, k - 1), dtype=torch.float32)
    for c in range(k - 1):
        den = math.sqrt((c + 1) * (c + 2))
        out[: c + 1, c] = 1.0 / den
        out[c + 1, c] = -(c + 1) / den
    return out


def smoothed_patterns(n_groups: int, shape: Sequence[int], rms: float, *, smooth: int = 7,
                      generator: torch.Generator) -> torch.Tensor:
    """K smoothed mean-shift patterns: pairwise equidistant, each of per-pixel RMS ``rms``; ``(K, C, H, W)`` float32.

    The RND authors' construction (``domm99/experiments-2026-uncertainty-based-clustered-fl``,
    ``src/learning/__init__.py``, ``_create_equidistant_gaussian_patterns`` with its defaults
    ``smooth_patterns=True``, ``smoothing_kernel_size=7``, called with ``FEATURE_SKEW_RMS = 0.15``), step
    for step in float32:

    1. ``B = randn(C*H*W, K - 1)`` from ``generator`` (one random direction per simplex axis);
    2. box side ``k = min(smooth, H, W)``, less 1 if even; if ``k >= 3`` each column, as ``C`` images of
       ``H x W``, is averaged over a ``k x k`` box (``avg_pool2d``, stride 1, zero padding ``k // 2``, the
       padding counted in the mean), then centred (its mean over the pixels subtracted);
    3. ``Q`` = the reduced QR factor of ``B`` (orthonormal columns);
    4. patterns = ``simplex_coordinates(K) @ Q.T`` times ``rms * sqrt(C*H*W) / sqrt((K - 1) / K)``.

    Row norms are all ``rms * sqrt(C*H*W)`` (per-pixel RMS exactly ``rms``), any two rows
    ``sqrt(2 K / (K - 1))`` times that apart, and the rows sum to zero. One group, or ``rms`` 0: zeros.
    Where ours differs from theirs: the generator is the scenario's ``data.pattern`` stream, not
    ``manual_seed(seed)`` (see ``plan_feature_skew``). Their text (Sec. V) calls the skew "a different
    Gaussian noise distribution" per group; this pattern is what their code applies.
    """
    if len(shape) != 3:
        raise DataError(f"feature_skew smoothed_pattern needs images (C, H, W); got input shape {tuple(shape)}")
    c, h, w = (int(s) for s in shape)
    d = c * h * w
    if n_groups - 1 > d:
        raise DataError(f"feature_skew smoothed_pattern needs n_clusters - 1 <= {d} pixels; got {n_groups}")
    if n_groups == 1 or rms == 0.0:
        return torch.zeros((n_groups, c, h, w), dtype=torch.float32)
    basis = torch.randn(d, n_groups - 1, generator=generator, dtype=torch.float32)
    k = min(int(smooth), h, w)
    if k % 2 == 0:
        k -= 1
    if k >= 3:
        images = basis.T.reshape((n_groups - 1) * c, 1, h, w)
        images = F.avg_pool2d(images, kernel_size=k, stride=1, padding=k // 2)
        basis = images.reshape(n_groups - 1, d).T
        basis = basis - basis.mean(dim=0, keepdim=True)
    q, _ = torch.linalg.qr(basis, mode="reduced")
    patterns = simplex_coordinates(n_groups) @ q.T
    patterns = patterns * (rms * math.sqrt(d) / math.sqrt((n_groups - 1) / n_groups))
    return patterns.reshape(n_groups, c, h, w).contiguous()


def add_pattern(x: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """``clamp(x + pattern, 0, 1)`` with the same pattern on every sample."""
    return (x + pattern.unsqueeze(0)).clamp_(0.0, 1.0)
