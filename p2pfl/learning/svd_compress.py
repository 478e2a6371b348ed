"""FedKD's dynamic SVD compression of model updates (Wu et al., 2022, "Communication-efficient
federated learning via knowledge distillation", Nat. Commun. 13:2032, Methods).

Each 2-D update matrix G is replaced by its top-k SVD factors, k the fewest singular values whose
squared sum reaches the energy threshold T (sum_{i<=k} s_i^2 >= T * sum_i s_i^2). T grows
linearly over training, T(t) = T_start + (T_end - T_start) * t / R: coarse early updates travel
cheaply, fine late ones precisely. Other tensors travel dense. The compressed form is a dict of
tensors, so the network charges exactly the factors' bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["energy_rank", "compress_update", "decompress_update", "energy_threshold"]

State = dict[str, torch.Tensor]


def energy_threshold(round_: int, rounds: int, start: float, end: float) -> float:
    """T(t) for round ``round_`` of ``rounds`` (linear from ``start`` to ``end``)."""
    return start + (end - start) * round_ / max(rounds, 1)


def energy_rank(s: torch.Tensor, threshold: float) -> int:
    """Smallest k with sum(s[:k]^2) >= threshold * sum(s^2) (at least 1)."""
    e = s.double() ** 2
    total = float(e.sum())
    if total == 0.0:
        return 1
    cum = torch.cumsum(e, 0) / total
    return int(min(int((cum < threshold - 1e-12).sum()) + 1, s.numel()))


def compress_update(update: Mapping[str, torch.Tensor], threshold: float) -> dict[str, dict[str, torch.Tensor]]:
    """{name: {"us": U_k diag(s_k), "v": V_k}} for 2-D float tensors, {name: {"dense": t}} otherwise.

    A matrix is factored only when the factors are smaller than the matrix itself.
    """
    out: dict[str, dict[str, torch.Tensor]] = {}
    for k, g in update.items():
        if g.ndim == 2 and torch.is_floating_point(g) and min(g.shape) > 1:
            u, s, vh = torch.linalg.svd(g, full_matrices=False)
            r = energy_rank(s, threshold)
            if r * (g.shape[0] + g.shape[1]) < g.numel():
                out[k] = {"us": (u[:, :r] * s[:r]).contiguous(), "v": vh[:r].T.contiguous()}
                continue
        out[k] = {"dense": g.clone()}
    return out


def decompress_update(packed: dict[str, dict[str, torch.Tensor]]) -> State:
    """The inverse of ``compress_update`` (exact for dense entries, rank-k for factored ones)."""
    return {k: (p["dense"].clone() if "dense" in p else p["us"] @ p["v"].T) for k, p in packed.items()}
