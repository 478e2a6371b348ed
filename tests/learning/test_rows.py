"""A fleet's models as rows of one table: the same values and bits as models of their own."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

import p2pfl
from p2pfl.learning.models import CNN28, MLP
from p2pfl.learning.rows import RowModel, table_for
from p2pfl.learning.state import add_delta_, live_state, load_state_
from p2pfl.protocols.reference.local import Local
from p2pfl.protocols.server.fedavg import FedAvg
from p2pfl.protocols.serverless.dsgd import DSGD
from p2pfl.protocols.serverless.gossip import Gossip
from p2pfl.protocols.serverless.rnd_gossip import RNDGossip
from tests.helpers import digits_scenario


def _rows(model: nn.Module, k: int) -> list[RowModel]:
    table = table_for(model, chunk=2)  # chunks of two rows: a third row opens a second chunk
    assert table is not None
    vector = table.layout.pack(model.state_dict())
    return [table.add(vector) for _ in range(k)]


def test_a_row_model_computes_what_its_module_computes_bit_for_bit():
    torch.manual_seed(0)
    model = CNN28(10, hidden=8)
    row = _rows(model, 3)[2]
    x = torch.rand(5, 1, 28, 28)
    model.eval()
    row.eval()
    assert torch.equal(row(x), model(x))
    assert list(row.state_dict()) == list(model.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(row.state_dict().values(), model.state_dict().values()))


def test_rows_are_independent_and_the_state_maths_works_on_them():
    a, b, c = _rows(MLP(12, 3, 8), 3)
    add_delta_(a, live_state(b), 1.0)  # a = 2 b
    assert torch.equal(live_state(a).vector, 2 * live_state(b).vector)
    assert torch.equal(live_state(b).vector, live_state(c).vector)
    load_state_(c, live_state(a))
    assert torch.equal(live_state(c).vector, live_state(a).vector)
    b.load_state_dict({k: torch.zeros_like(v) for k, v in b.state_dict().items()})
    assert not live_state(b).vector.any() and live_state(a).vector.any()


def test_a_copy_or_a_pickle_of_a_row_model_is_a_plain_module_with_its_values():
    torch.manual_seed(1)
    model = MLP(12, 3, 8)
    row = _rows(model, 1)[0]
    row.eval()
    for other in (copy.deepcopy(row), pickle.loads(pickle.dumps(row))):
        assert type(other) is MLP and not other.training
        assert all(torch.equal(p, q) for p, q in zip(other.state_dict().values(), model.state_dict().values()))
        with torch.no_grad():
            next(other.parameters()).add_(1.0)  # the copy is its own
    assert torch.equal(live_state(row).vector, torch.cat([p.reshape(-1) for p in model.parameters()]))


def test_a_row_model_keeps_no_views_and_refuses_hooks_with_a_clear_error():
    torch.manual_seed(2)
    a, b = _rows(MLP(12, 3, 8), 2)
    a(torch.rand(4, 12))
    copy.deepcopy(a)
    a.state_dict()
    assert live_state(a)._views is None  # forward, copies and state dicts made their views and let them go
    with pytest.raises(TypeError, match=r"takes no hooks, submodules or parameters; register them on model\.materialize"):
        a.register_forward_hook(lambda *args: None)
    with pytest.raises(TypeError, match="takes no hooks"):
        a.extra = nn.Linear(2, 2)
    assert not b._forward_hooks and not b._modules  # nothing leaked into the tables the rows share
    hooked = a.materialize()
    hooked.register_forward_hook(lambda *args: None)
    assert len(hooked._forward_hooks) == 1


def test_models_with_buffers_are_not_rows():
    assert table_for(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)), chunk=4) is None


@pytest.mark.parametrize("protocol, servers", [(Gossip, False), (DSGD, False), (FedAvg, True), (Local, False),
                                               (RNDGossip, False)],
                         ids=["gossip", "dsgd", "fedavg", "local", "rnd_gossip"])
@pytest.mark.parametrize("executor", ["inline", "batched"])
@pytest.mark.slow
def test_a_run_on_rows_is_byte_identical_to_one_on_models_of_their_own(protocol, servers, executor, tmp_path,
                                                                      monkeypatch):
    extra = {"round_timeout_s": 5.0} if protocol is FedAvg else {}
    raw = {**digits_scenario({"name": protocol.name, "rounds": 3, "eval_every": 1, **extra}, n=5, servers=servers),
           "executor": executor}
    p2pfl.run(raw, out=tmp_path / "rows")
    monkeypatch.setattr(protocol, "model_rows", False)
    p2pfl.run(raw, out=tmp_path / "own")
    for name in ("summary.json", "events.jsonl"):
        assert (tmp_path / "rows" / name).read_bytes() == (tmp_path / "own" / name).read_bytes(), name


@pytest.mark.parametrize("name, rows", [("gossip", True), ("dsgd", True), ("local", True), ("rnd_gossip", True),
                                        ("dac", False)])
def test_the_protocols_that_take_rows_get_them_and_the_others_modules_of_their_own(name, rows):
    from p2pfl.config import load_dict
    from p2pfl.sim.kernel import Simulation

    sim = Simulation(load_dict(digits_scenario({"name": name, "rounds": 1}, n=4)))
    assert isinstance(sim.new_model(), RowModel) is rows
    sim.close()
