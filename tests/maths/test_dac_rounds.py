"""DAC cosine as a round over arrays (``p2pfl.maths.dac``) against the event kernel's per-device DAC cosine
(``DACCosine.mix``: ``cosine_top_k`` and ``weighted_average`` of FlatStates): cosines within ``COSINE_ATOL``, the
same choices, the mixed models bit for bit; the federations as ``selection_components`` reports them."""

from __future__ import annotations

from types import SimpleNamespace

import networkx as nx
import numpy as np
import pytest
import torch

from p2pfl.learning.aggregate import state_to_vector
from p2pfl.learning.flat import FlatState, Layout
from p2pfl.maths.dac import (
    Selection,
    all_candidates,
    pair_cosines,
    pending_rows,
    selection_components,
    top_k,
    uniform_average_,
)
from p2pfl.protocols.serverless import dac as kernel_dac
from p2pfl.protocols.serverless.dac import COSINE_ATOL, DACCosine, cosine_similarities
from p2pfl.tensor.graph import Adjacency


def fleet(n: int, p: int, groups: int, seed: int) -> torch.Tensor:
    """``n`` float32 models in ``groups`` directions plus noise (what trained clustered models look like)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(groups, p, generator=g)
    return (centres[torch.arange(n) % groups] + 0.7 * torch.randn(n, p, generator=g)).float()


def kernel_round(x: torch.Tensor, indptr: np.ndarray, indices: np.ndarray, k: int) -> tuple[torch.Tensor, dict]:
    """Every device's ``DACCosine.mix`` from the same round models, as the kernel's devices run it."""
    layout = Layout(("w",), ((int(x.shape[1]),),), (0, int(x.shape[1])), torch.float32)
    states = [FlatState(x[i].clone(), layout) for i in range(x.shape[0])]
    proto = SimpleNamespace(params=SimpleNamespace(top_k=k), chosen={})
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        peers = indices[indptr[i] : indptr[i + 1]].tolist()
        device = SimpleNamespace(id=i)
        mixed = DACCosine.mix(proto, device, states[i], {j: states[j] for j in peers}, {})  # type: ignore[arg-type]
        out[i] = state_to_vector(mixed).float()
    return out, proto.chosen


def geometric(n: int, radius: float, seed: int) -> Adjacency:
    """A random geometric graph of n - 1 devices and one isolated device (it keeps its model)."""
    g = nx.random_geometric_graph(n - 1, radius, seed=seed)
    g.add_node(n - 1)
    return Adjacency.from_graph(g)


@pytest.mark.parametrize("n,k,radius,seed", [(12, 2, 0.4, 0), (25, 3, 0.3, 1), (40, 2, 0.25, 2), (40, 5, 0.3, 3)])
def test_the_array_round_is_the_kernels_dac_cosine_bit_for_bit(n: int, k: int, radius: float, seed: int) -> None:
    adj = geometric(n, radius, seed)
    x = fleet(n, 301, 4, seed)
    cos = pair_cosines(x, adj.indptr, adj.indices, block_bytes=8 * 301 * 3)  # several blocks
    for i in range(n):  # each device's cosines are the kernel's within its stated tolerance
        at = slice(adj.indptr[i], adj.indptr[i + 1])
        if at.start == at.stop:
            continue
        theirs = cosine_similarities({"w": x[i]}, [{"w": x[j]} for j in adj.indices[at]])
        assert np.abs(cos[at] - np.asarray(theirs)).max() <= COSINE_ATOL
    sel = top_k(cos, adj.indptr, adj.indices, k)
    expected, chosen = kernel_round(x, adj.indptr, adj.indices, k)
    assert [sel.of(i) for i in range(n)] == [chosen[i] for i in range(n)]
    mixed = x.clone()
    uniform_average_(mixed, sel, chunk=7)
    assert torch.equal(mixed.view(torch.int32), expected.view(torch.int32))  # every bit, signs of zeros included
    assert selection_components(sel) == kernel_dac.selection_components(n, chosen)


def test_all_candidates_is_every_other_device() -> None:
    indptr, indices = all_candidates(5)
    assert [indices[indptr[i] : indptr[i + 1]].tolist() for i in range(5)] == \
        [[j for j in range(5) if j != i] for i in range(5)]
    x = fleet(16, 50, 2, 7)
    indptr, indices = all_candidates(16)
    sel = top_k(pair_cosines(x, indptr, indices), indptr, indices, 3)
    expected, chosen = kernel_round(x, indptr, indices, 3)
    assert [sel.of(i) for i in range(16)] == [chosen[i] for i in range(16)]
    mixed = x.clone()
    uniform_average_(mixed, sel, chunk=16)
    assert torch.equal(mixed, expected)


def test_ties_go_to_the_lower_id_and_not_a_number_ranks_last() -> None:
    indptr = np.array([0, 4], dtype=np.int64)
    indices = np.array([1, 3, 5, 8])
    cos = np.array([0.5, 0.9, 0.9, np.nan])
    assert top_k(cos, indptr, indices, 1).of(0) == [3]
    assert top_k(cos, indptr, indices, 3).of(0) == [1, 3, 5]
    assert top_k(cos, indptr, indices, 9).of(0) == [1, 3, 5, 8]
    assert top_k(np.array([0.2, 0.2, 0.2, 0.2]), indptr, indices, 2).of(0) == [1, 3]


def test_mixing_in_place_holds_few_rows_in_a_large_geometric_fleet() -> None:
    """The memory bound: rows pending write-back stay near the selection graph's bandwidth, far below n."""
    n = 20_000
    rng = np.random.default_rng(0)
    from p2pfl.topology.geometric import geometric_pairs

    _, pairs = geometric_pairs(n, 1.1 * np.sqrt(7 / (np.pi * (n - 1))), 0, "scattered")
    adj = Adjacency.from_pairs(n, pairs)
    cos = rng.random(len(adj.indices))
    sel = top_k(cos, adj.indptr, adj.indices, 2)
    assert pending_rows(sel, 164) < n // 10
    x = torch.from_numpy(rng.standard_normal((n, 3)).astype(np.float32))
    expected = x.clone()
    uniform_average_(expected, sel, chunk=n)  # one chunk: nothing pending across chunks
    mixed = x.clone()
    uniform_average_(mixed, sel, chunk=164)
    assert torch.equal(mixed, expected)


def test_an_empty_selection_keeps_the_model() -> None:
    x = fleet(3, 10, 1, 0)
    sel = Selection(np.zeros(4, dtype=np.int64), np.zeros(0, dtype=np.int64))
    mixed = x.clone()
    uniform_average_(mixed, sel, chunk=2)
    assert torch.equal(mixed, x)
    assert selection_components(sel) == [[0], [1], [2]]
