"""Per-cluster input transforms: rotation (E2b) and feature skew (RND paper).

All functions take and return float32 tensors ``(n, C, H, W)`` with values in
[0, 1]; randomness comes only from the Generator passed in.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from p2pfl.errors import DataError

__all__ = ["rotate", "add_noise", "add_pattern", "simplex_patterns", "noise_levels"]


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


def add_pattern(x: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """``clamp(x + pattern, 0, 1)`` with the same pattern on every sample."""
    return (x + pattern.unsqueeze(0)).clamp_(0.0, 1.0)
