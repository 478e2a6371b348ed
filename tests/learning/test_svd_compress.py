"""FedKD's dynamic SVD compression: energy rank, exact truncation, bytes."""

from __future__ import annotations

import torch

from p2pfl.learning.svd_compress import compress_update, decompress_update, energy_rank, energy_threshold
from p2pfl.sim.cost import payload_bytes


def test_energy_rank_is_the_fewest_values_reaching_the_threshold():
    s = torch.tensor([3.0, 2.0, 1.0, 0.0])  # energies 9, 4, 1 of 14
    assert energy_rank(s, 9 / 14) == 1
    assert energy_rank(s, 9 / 14 + 1e-6) == 2
    assert energy_rank(s, 13 / 14) == 2
    assert energy_rank(s, 0.99) == 3
    assert energy_rank(torch.zeros(3), 0.9) == 1
    assert energy_threshold(0, 10, 0.95, 0.98) == 0.95 and abs(energy_threshold(10, 10, 0.95, 0.98) - 0.98) < 1e-12


def test_compression_is_the_rank_k_truncation_and_charges_the_factors():
    g = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(40, 40, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(30, 30, generator=g, dtype=torch.float64))
    s = torch.tensor([10.0, 5.0, 1.0] + [0.01] * 27, dtype=torch.float64)
    w = u[:, :30] @ torch.diag(s) @ v.T
    bias = torch.randn(40, generator=g, dtype=torch.float64)
    packed = compress_update({"w": w, "b": bias}, threshold=0.99)  # 100+25 of 126.0027 -> k = 2
    assert packed["w"]["us"].shape == (40, 2) and packed["w"]["v"].shape == (30, 2)
    assert payload_bytes(packed) == (2 * 70 + 40) * 8
    out = decompress_update(packed)
    expect = u[:, :2] @ torch.diag(s[:2]) @ v[:, :2].T
    assert torch.allclose(out["w"], expect, atol=1e-10) and torch.equal(out["b"], bias)
    full = decompress_update(compress_update({"w": w}, threshold=1.0))["w"]  # no saving at full rank: sent dense
    assert torch.equal(full, w)
