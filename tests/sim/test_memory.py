"""Memory at scale: handled messages are freed, the consensus distance is computed in blocks, malloc_trim
changes no bit, and the data build runs at the scenario's thread count."""

from __future__ import annotations

import weakref
from typing import Any

import pytest
import torch

import p2pfl
import p2pfl.sim.kernel as kernel
from p2pfl.api import resolve
from p2pfl.learning.flat import FlatState, Layout
from p2pfl.maths.consensus import consensus_distance, rows_of_one_table
from p2pfl.protocols.serverless.dsgd import DSGD
from p2pfl.protocols.serverless.gossip import Gossip
from p2pfl.sim import heap
from p2pfl.sim.kernel import Simulation
from p2pfl.sim.network import Message, Network
from tests.helpers import digits_scenario


class _WatchedGossip(Gossip):
    """Gossip that counts, as each device ends a round, the pushes it answered that are still alive."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.answered: dict[int, list[weakref.ref[Message]]] = {}
        self.alive = 0

    def answer(self, ctx: Any, model: Any, msg: Message) -> None:
        self.answered.setdefault(ctx.id, []).append(weakref.ref(msg))
        super().answer(ctx, model, msg)

    def round_finished(self, ctx: Any, r: int) -> None:  # its responder is waiting for the next push now
        self.alive += sum(ref() is not None for ref in self.answered.get(ctx.id, []))


def test_gossip_responder_keeps_no_push_while_it_waits_for_the_next():
    sim = Simulation(resolve(digits_scenario({"name": "gossip", "rounds": 4}, n=6, kind="complete")),
                     protocol=_WatchedGossip)
    sim.run()
    watched = sim.protocol
    assert isinstance(watched, _WatchedGossip)
    assert sum(len(seen) for seen in watched.answered.values()) >= 12  # pushes were answered
    assert watched.alive == 0


def test_dsgd_keeps_no_round_model_after_mixing(monkeypatch):
    delivered: dict[tuple[int, int], list[weakref.ref[Message]]] = {}
    alive = []
    rounds: dict[int, int] = {}
    deliver = Network._deliver

    def watch(self: Network, msg: Message, u: int, v: int) -> None:
        delivered.setdefault((msg.dst, msg.round), []).append(weakref.ref(msg))
        deliver(self, msg, u, v)

    class Watched(DSGD):
        def payload(self, ctx: Any, mine: Any, peers: tuple[int, ...]) -> dict[str, Any]:
            """Count, once the device has trained in round r, its round r - 1 messages still alive."""
            r = rounds[ctx.id] = rounds.get(ctx.id, 0) + 1
            alive.extend(ref for ref in delivered.get((ctx.id, r - 1), []) if ref() is not None)
            return super().payload(ctx, mine, peers)

    monkeypatch.setattr(Network, "_deliver", watch)
    Simulation(resolve(digits_scenario({"name": "dsgd", "rounds": 3}, n=6, kind="ring")), protocol=Watched).run()
    assert sum(len(refs) for refs in delivered.values()) == 6 * 2 * 3
    assert alive == []


def test_gossip_training_keeps_one_start_copy_per_device_under_batched(monkeypatch):
    """The start copy of ``ctx.train(delta=True)`` is the batched executor's snapshot too (not a second one)."""
    import p2pfl.executors.batched as batched_module

    copies = []
    clone = batched_module.clone_state
    monkeypatch.setattr(batched_module, "clone_state", lambda state: copies.append(1) or clone(state))
    raw = digits_scenario({"name": "gossip", "rounds": 2}, n=6, kind="ring")
    sim = Simulation(resolve({**raw, "executor": "batched"}))
    sim.run()
    assert sim.executor.stacked_jobs == 12 and copies == []


@pytest.mark.parametrize("caller,scenario", [(2, 1), (1, 2)])
def test_data_build_runs_at_the_scenarios_threads(monkeypatch, caller, scenario):
    seen = []
    build = kernel.build_any_federation

    def spy(*args: Any, **kw: Any) -> Any:
        seen.append(torch.get_num_threads())
        return build(*args, **kw)

    monkeypatch.setattr(kernel, "build_any_federation", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(caller)
    try:
        Simulation(resolve(digits_scenario({"name": "local", "rounds": 1}, threads=scenario))).close()
        assert seen == [scenario]
        assert torch.get_num_threads() == caller  # the caller's count is back
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("flat", [True, False])
def test_consensus_distance_in_blocks_is_the_stacked_formula_bit_for_bit(flat):
    g = torch.Generator().manual_seed(0)
    vectors = [torch.randn(5000, generator=g) * 0.1 + 0.5 for _ in range(1100)]  # 3 column and 43 row blocks
    states = [FlatState(v, Layout(("w",), ((5000,),), (0, 5000), torch.float32)) if flat else {"w": v}
              for v in vectors]
    stacked = torch.stack([v.to(torch.float64) for v in vectors])
    expected = float(((stacked - stacked.mean(dim=0)) ** 2).sum(dim=1).mean())
    assert consensus_distance(states).hex() == expected.hex()


def test_consensus_distance_of_a_tables_rows_reads_them_in_place_to_the_same_bits():
    g = torch.Generator().manual_seed(1)
    table = torch.randn(1100, 5000, generator=g) * 0.1 + 0.5
    layout = Layout(("w",), ((5000,),), (0, 5000), torch.float32)
    rows = [FlatState(table[i], layout) for i in range(1100)]
    assert rows_of_one_table([r.vector for r in rows]) is not None
    order = list(range(1100))
    order[3], order[4] = 4, 3  # out of order, a row missing, a row of another tensor: stacked as before
    for other in ([rows[i] for i in order], rows[:5] + rows[6:], rows[:-1] + [FlatState(table[-1].clone(), layout)]):
        assert rows_of_one_table([r.vector for r in other]) is None
    stacked = table.to(torch.float64)
    expected = float(((stacked - stacked.mean(dim=0)) ** 2).sum(dim=1).mean())
    assert consensus_distance(rows).hex() == expected.hex()
    assert consensus_distance([FlatState(table[i].clone(), layout) for i in range(1100)]).hex() == expected.hex()


@pytest.mark.skipif(heap._TRIM is None, reason="malloc_trim is glibc's")
@pytest.mark.slow
def test_malloc_trim_each_fleet_round_leaves_the_results_bit_identical(monkeypatch, tmp_path):
    sc = digits_scenario({"name": "gossip", "rounds": 3}, n=6, kind="ring")
    calls = []
    trim = heap._TRIM
    monkeypatch.setattr(heap, "_TRIM", lambda pad: calls.append(pad) or trim(pad))
    files = {}
    for on in (True, False):
        monkeypatch.setattr(heap, "TRIM", on)
        p2pfl.run(sc, out=tmp_path / str(on))
        files[on] = [(tmp_path / str(on) / name).read_bytes() for name in ("summary.json", "events.jsonl")]
    assert calls == [0, 0, 0]  # once per fleet round, and only when on
    assert files[True] == files[False]
