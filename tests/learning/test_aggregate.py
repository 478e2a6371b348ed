"""weighted_sum / weighted_average: the same bits as the code they replaced, and DSGD's Metropolis mixing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import networkx as nx
import pytest
import torch

from p2pfl.learning.aggregate import State, add_weighted_, weighted_average, weighted_sum
from p2pfl.learning.flat import FlatState, Layout
from p2pfl.protocols.serverless.dsgd import metropolis_mix, metropolis_weights

# --------------------------------------------------------------------------- the code before the refactor, verbatim


def _old_weighted_average(items: Sequence[tuple[Mapping[str, torch.Tensor], float]]) -> State:
    total = float(sum(w for _, w in items))
    out: State = {}
    for k in list(items[0][0].keys()):
        ref = items[0][0][k]
        if not torch.is_floating_point(ref):
            out[k] = ref.clone()
            continue
        acc = torch.zeros_like(ref, dtype=torch.float64)
        for state, w in items:
            acc += state[k].to(torch.float64) * (w / total)
        out[k] = acc.to(ref.dtype)
    return out


def _old_dsgd_mix(states: dict[int, State], weights: dict[int, float]) -> State:
    ids = sorted(states)
    out: State = {}
    for k, ref in states[ids[0]].items():
        if not torch.is_floating_point(ref):
            out[k] = ref.clone()
            continue
        acc = torch.zeros_like(ref, dtype=torch.float64)
        for j in ids:
            acc += states[j][k].to(torch.float64) * weights[j]
        out[k] = acc.to(ref.dtype)
    return out


# --------------------------------------------------------------------------- helpers


def _state(seed: int) -> State:
    g = torch.Generator().manual_seed(seed)
    return {
        "w": torch.randn(7, 5, generator=g),
        "b": torch.randn(5, generator=g, dtype=torch.float64),
        "h": torch.randn(3, generator=g).to(torch.float16),
        "n": torch.tensor(seed, dtype=torch.int64),  # a BN counter: kept from the first
    }


def _same_bits(a: State, b: State) -> bool:
    return list(a) == list(b) and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("weights", [[1.0, 1.0, 1.0], [40.0, 17.0, 3.0, 99.0], [0.1, 0.7, 0.2], [3, 5]])
def test_weighted_average_has_the_bits_of_the_code_it_replaced(weights):
    items = [(_state(i), w) for i, w in enumerate(weights)]
    assert _same_bits(weighted_average(items), _old_weighted_average(items))


def test_weighted_average_is_weighted_sum_with_normalised_weights():
    items = [(_state(i), w) for i, w in enumerate([2.0, 5.0, 11.0])]
    total = 18.0
    assert _same_bits(weighted_average(items), weighted_sum([(s, w / total) for s, w in items]))


def test_weighted_sum_is_unnormalised_keeps_integer_buffers_and_checks_inputs():
    a, b = {"v": torch.tensor([1.0, 2.0]), "n": torch.tensor(4)}, {"v": torch.tensor([3.0, 5.0]), "n": torch.tensor(9)}
    out = weighted_sum([(a, 2.0), (b, 1.0)])
    assert out["v"].tolist() == [5.0, 9.0] and out["v"].dtype == torch.float32
    assert int(out["n"]) == 4
    with pytest.raises(ValueError, match="at least one"):
        weighted_sum([])
    with pytest.raises(ValueError, match="different keys"):
        weighted_sum([(a, 1.0), ({"v": torch.zeros(2)}, 1.0)])


@pytest.mark.parametrize("graph", [nx.cycle_graph(5), nx.star_graph(4), nx.barabasi_albert_graph(9, 2, seed=3)])
def test_dsgd_mixing_has_the_bits_of_the_old_mix(graph):
    states = {int(i): _state(10 + int(i)) for i in graph}
    for i in graph:
        row = metropolis_weights(graph, i)
        # received models in arrival order (neighbours reversed), own model last, as the device builds them
        mine = {j: states[j] for j in reversed(sorted(row)) if j != i} | {int(i): states[int(i)]}
        assert _same_bits(metropolis_mix(mine, row), _old_dsgd_mix(mine, row))


def test_dsgd_mixing_keeps_the_integer_buffer_of_the_lowest_id():
    g = nx.path_graph(3)
    states = {i: _state(20 + i) for i in g}
    out = metropolis_mix({2: states[2], 1: states[1], 0: states[0]}, metropolis_weights(g, 1))
    assert int(out["n"]) == 20


@pytest.mark.parametrize(("rows", "width"), [(3000, 1), (300, 2), (40, 834), (17, 5000)])
def test_add_weighted_of_a_table_is_the_one_by_one_sum(rows: int, width: int) -> None:
    """The tensor engine's averages (a table of rows) and the kernel's (a list of states) are one arithmetic: the
    terms added in order, however many rows a block holds (torch.sum of more than 16 rows adds in another order)."""
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, width, generator=g)
    w = (torch.rand(rows, generator=g, dtype=torch.float64) + 0.5).tolist()
    by_hand = torch.zeros(width, dtype=torch.float64)
    for i in range(rows):
        by_hand += x[i].to(torch.float64) * w[i]
    for block_bytes in (1 << 24, 8 * width * 5, 1):
        assert torch.equal(add_weighted_(torch.zeros(width, dtype=torch.float64), x, w, block_bytes), by_hand)
        assert torch.equal(add_weighted_(torch.zeros(width, dtype=torch.float64), list(x), w, block_bytes), by_hand)
    half = add_weighted_(torch.zeros(width, dtype=torch.float64), x[: rows // 2], w[: rows // 2])
    assert torch.equal(add_weighted_(half, x[rows // 2 :], w[rows // 2 :]), by_hand)  # a run goes on across chunks
    if rows > 16:
        assert not torch.equal((x.double() * torch.tensor(w, dtype=torch.float64).unsqueeze(1)).sum(dim=0), by_hand)
    layout = Layout(("w",), ((width,),), (0, width), torch.float32)
    states = [(FlatState(x[i].clone(), layout), w[i]) for i in range(min(rows, 50))]
    assert torch.equal(weighted_sum(states).vector, add_weighted_(torch.zeros(width, dtype=torch.float64),
                                                                  x[:50], w[:50]).to(torch.float32))
