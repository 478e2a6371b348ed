"""SRB, spectral rebalancing (FedDRMan, Pal et al. 2026, Sec. III-C2, Eq. 13-14).

Averaging updates attenuates weak but useful directions. SRB takes the SVD of a 2-D (aggregated)
update and lifts every singular value below sigma_{c*} to it, c* the first index whose cumulative
singular-value share reaches ``beta``; singular vectors are unchanged. Pure tensor functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

__all__ = ["spectral_rebalance", "rebalance_update"]


def spectral_rebalance(delta: torch.Tensor, beta: float) -> torch.Tensor:
    """Eq. 13-14: U diag(max(sigma_i, sigma_{c*})) V^T with c* the first index whose cumulative
    singular-value share reaches ``beta``. Singular vectors are unchanged."""
    if delta.ndim != 2:
        raise ValueError(f"spectral_rebalance needs a 2-D matrix; got shape {tuple(delta.shape)}")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1]; got {beta}")
    d = delta.double()
    u, s, vh = torch.linalg.svd(d, full_matrices=False)
    total = s.sum()
    if total <= 0:
        return delta.clone()
    share = torch.cumsum(s, 0) / total
    c_star = int(torch.nonzero(share >= beta - 1e-12)[0]) if bool((share >= beta - 1e-12).any()) else len(s) - 1
    s_new = torch.maximum(s, s[c_star])
    return (u @ torch.diag(s_new) @ vh).to(delta.dtype)


def rebalance_update(delta: Mapping[str, torch.Tensor], beta: float,
                     eligible: Callable[[str, torch.Tensor], bool]) -> dict[str, torch.Tensor]:
    """SRB on every eligible 2-D block of an update; other entries keep the plain average."""
    return {k: spectral_rebalance(v, beta) if eligible(k, v) else v.clone() for k, v in delta.items()}
