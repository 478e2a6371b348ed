"""The batched executor: stacked training within its stated tolerance of inline, and its fallbacks."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from p2pfl.config import load_dict
from p2pfl.executors.batched import ATOL, BN_ATOL, RTOL, BatchedExecutor, stackable
from p2pfl.executors.inline import InlineExecutor
from p2pfl.executors.jobs import TrainJob
from p2pfl.executors.select import stacks_well
from p2pfl.learning.models import CNN28, CNN32, MLP
from p2pfl.learning.train import TrainingSpec
from p2pfl.protocols.server.fedprox import proximal_penalty
from p2pfl.sim.kernel import Simulation
from tests.helpers import digits_scenario


def _jobs(make, shape, k: int, n: int, spec: TrainingSpec) -> list[TrainJob]:
    jobs = []
    for i in range(k):
        torch.manual_seed(i)  # distinct initial models
        g = torch.Generator().manual_seed(100 + i)
        data = torch.Generator().manual_seed(200 + i)
        jobs.append(TrainJob(i, make(), torch.rand(n, *shape, generator=data),
                             torch.randint(0, 10, (n,), generator=data), spec, g))
    return jobs


def _run_all(executor, jobs):
    futures = [executor.submit(j) for j in jobs]
    return [f.result() for f in futures]


@pytest.mark.parametrize(("make", "shape", "n", "atol"), [
    (lambda: MLP(64, 10, 32), (64,), 50, ATOL),
    (lambda: CNN28(10, hidden=16), (1, 28, 28), 40, ATOL),
    pytest.param(lambda: CNN32(10, hidden=16), (3, 32, 32), 24, BN_ATOL, marks=pytest.mark.slow),  # BatchNorm buffers too
])
def test_stacked_jobs_are_within_tolerance_of_inline(make, shape, n, atol):
    spec = TrainingSpec(epochs=2, batch_size=16, lr=0.05, momentum=0.9, weight_decay=1e-4)
    inline = _run_all(InlineExecutor(), _jobs(make, shape, 4, n, spec))
    batched = BatchedExecutor()
    stacked = _run_all(batched, _jobs(make, shape, 4, n, spec))
    assert batched.stacked_jobs == 4
    for a, b in zip(inline, stacked):
        assert a.state.keys() == b.state.keys()
        for name, w in a.state.items():
            assert b.state[name].dtype == w.dtype
            if torch.is_floating_point(w):
                torch.testing.assert_close(b.state[name], w, atol=atol, rtol=RTOL)
            else:
                assert torch.equal(b.state[name], w)  # num_batches_tracked
        assert torch.equal(a.generator_state, b.generator_state)  # the same batch orders were drawn
        assert a.result.samples == b.result.samples == 2 * n
        assert b.result.loss == pytest.approx(a.result.loss, rel=1e-5 if atol == ATOL else RTOL)
    # the models really differ from each other (a stacked group must not mix them up)
    assert not torch.equal(stacked[0].state[next(iter(stacked[0].state))], stacked[1].state[next(iter(stacked[1].state))])


def test_jobs_it_cannot_stack_run_as_inline_runs_them():
    spec = TrainingSpec(batch_size=16)
    make = lambda: MLP(64, 10, 16)
    jobs = _jobs(make, (64,), 3, 30, spec)
    anchor = {k: v.clone() for k, v in jobs[0].model.named_parameters()}
    for j in jobs:
        j.penalty = proximal_penalty(anchor, 0.5)
    assert not any(stackable(j) for j in jobs)
    batched = BatchedExecutor()
    out_b = _run_all(batched, jobs)
    jobs = _jobs(make, (64,), 3, 30, spec)
    for j in jobs:
        j.penalty = proximal_penalty(anchor, 0.5)
    out_i = _run_all(InlineExecutor(), jobs)
    assert batched.stacked_jobs == 0
    for a, b in zip(out_i, out_b):
        assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)


def test_a_snapshot_is_taken_at_submit():
    """Changing the live model after submit must not change what the job trains."""
    spec = TrainingSpec(batch_size=16)
    jobs = _jobs(lambda: MLP(64, 10, 16), (64,), 2, 30, spec)
    reference = _run_all(BatchedExecutor(), _jobs(lambda: MLP(64, 10, 16), (64,), 2, 30, spec))
    batched = BatchedExecutor()
    futures = [batched.submit(j) for j in jobs]
    with torch.no_grad():
        for j in jobs:
            for p in j.model.parameters():
                p.add_(1.0)
    out = [f.result() for f in futures]
    for a, b in zip(reference, out):
        assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)


def test_auto_stacks_linear_models_only():
    assert stacks_well(MLP(64, 10, 16))
    assert not stacks_well(CNN28(10))
    assert not stacks_well(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)))


@pytest.mark.slow
def test_a_batched_run_is_within_tolerance_of_inline():
    raw = digits_scenario({"name": "fedavg", "rounds": 4, "eval_every": 1}, n=6, servers=True)
    raw["data"]["samples_per_client"] = 60
    raw["devices"] = {"flops_per_s": 1.0e6}  # training outlasts the server's staggered sends: jobs overlap
    inline = Simulation(load_dict({**raw, "executor": "inline"})).run()
    sim = Simulation(load_dict({**raw, "executor": "batched"}))
    batched = sim.run()
    assert sim.executor.stacked_jobs == 6 * 4  # every round's six jobs trained as one group
    assert sim.timing()["stacked_jobs"] == 6 * 4
    assert abs(batched["accuracy_mean"] - inline["accuracy_mean"]) <= 0.02
    # the modelled history (bytes, compute, times) does not depend on the executor at all
    for key in ("bytes_total", "compute_flops_total", "sim_time_s"):
        assert json.dumps(batched[key]) == json.dumps(inline[key])


def test_flat_models_stack_as_one_leaf_with_the_same_bits():
    """Flat snapshots train as one (k, P) tensor; the result equals the per-layer stacking exactly."""
    from p2pfl.learning.flat import FlatState
    from p2pfl.learning.state import flatten_live_

    spec = TrainingSpec(epochs=2, batch_size=16, lr=0.05, momentum=0.9, weight_decay=1e-4)
    make = lambda: MLP(64, 10, 32)
    per_layer = _run_all(BatchedExecutor(), _jobs(make, (64,), 3, 40, spec))
    flat_jobs = _jobs(make, (64,), 3, 40, spec)
    for j in flat_jobs:
        assert flatten_live_(j.model)
    flat = _run_all(BatchedExecutor(), flat_jobs)
    for a, b in zip(per_layer, flat):
        assert isinstance(b.state, FlatState)
        assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)
        assert a.result == b.result


@pytest.mark.slow
def test_models_with_state_outside_their_state_dict_are_not_stacked():
    """Conditional's statistics are a non-persistent buffer: stacking would give every model the first one's."""
    raw = digits_scenario({"name": "conditional", "rounds": 2, "components": 3}, n=6, servers=True)
    raw["devices"] = {"flops_per_s": 1.0e6}
    inline = Simulation(load_dict({**raw, "executor": "inline"}))
    batched = Simulation(load_dict({**raw, "executor": "batched"}))
    assert json.dumps(batched.run(), sort_keys=True) == json.dumps(inline.run(), sort_keys=True)
    assert batched.executor.stacked_jobs == 0


def test_a_group_larger_than_max_group_trains_in_slices_with_the_same_bits(monkeypatch):
    """Slices bound the memory of a round where every device trains at once; the weights do not change."""
    import p2pfl.executors.batched as batched_module

    spec = TrainingSpec(epochs=2, batch_size=16, lr=0.05, momentum=0.9, weight_decay=1e-4)
    make = lambda: MLP(64, 10, 32)
    whole = _run_all(BatchedExecutor(), _jobs(make, (64,), 9, 40, spec))
    monkeypatch.setattr(batched_module, "MAX_GROUP", 4)
    assert [len(s) for s in batched_module._slices(list(range(9)), 4)] == [3, 3, 3]
    assert [len(s) for s in batched_module._slices(list(range(5)), 4)] == [3, 2]
    executor = BatchedExecutor()
    sliced = _run_all(executor, _jobs(make, (64,), 9, 40, spec))
    assert executor.stacked_jobs == 9  # every slice stacked: none fell back to a group of one
    for a, b in zip(whole, sliced):
        assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)
        assert torch.equal(a.generator_state, b.generator_state) and a.result == b.result


def test_outcomes_are_made_a_slice_at_a_time_with_the_same_bits_whatever_the_await_order(monkeypatch):
    """Awaiting one job trains its slice only: the others' outcomes are not all held until awaited."""
    import p2pfl.executors.batched as batched_module

    spec = TrainingSpec(epochs=1, batch_size=16, lr=0.05, momentum=0.9)
    make = lambda: MLP(64, 10, 32)
    monkeypatch.setattr(batched_module, "MAX_GROUP", 4)
    eager = BatchedExecutor()
    jobs = _jobs(make, (64,), 11, 40, spec)
    reference = _run_all(eager, jobs[:9]) + _run_all(eager, jobs[9:])  # slices 3 + 3 + 3, then a group of 2
    lazy = BatchedExecutor()
    jobs = _jobs(make, (64,), 11, 40, spec)
    futures = [lazy.submit(j) for j in jobs[:9]]
    first = futures[0].result()
    assert len(lazy._done) == 2 and len(lazy._waiting) == 6  # one slice trained, two waiting
    futures += [lazy.submit(j) for j in jobs[9:]]  # pending after the flush: not part of its slices
    outcomes = [futures[i].result() for i in (9, 10, *range(8, 0, -1))]
    outcomes = [first, *outcomes[:1:-1], *outcomes[:2]]
    assert lazy.stacked_jobs == 11 and not lazy._done and not lazy._waiting
    for a, b in zip(reference, outcomes):
        assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)
        assert torch.equal(a.generator_state, b.generator_state) and a.result == b.result


def test_a_job_with_its_start_state_is_not_copied_again(monkeypatch):
    """``ctx.train(delta=True)`` hands its start copy over: the executor trains from it, no second copy."""
    import p2pfl.executors.batched as batched_module

    spec = TrainingSpec(epochs=1, batch_size=16, lr=0.05)
    copies = []
    clone = batched_module.clone_state
    monkeypatch.setattr(batched_module, "clone_state", lambda state: copies.append(1) or clone(state))
    plain = _run_all(BatchedExecutor(), _jobs(lambda: MLP(64, 10, 32), (64,), 3, 40, spec))
    assert len(copies) == 3
    jobs = _jobs(lambda: MLP(64, 10, 32), (64,), 3, 40, spec)
    for job in jobs:
        job.state = clone({k: v.detach() for k, v in job.model.state_dict().items()})
    given = _run_all(BatchedExecutor(), jobs)
    assert len(copies) == 3  # none more
    for a, b in zip(plain, given):
        assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)


@pytest.mark.slow
def test_rnd_predictor_fits_stack_within_their_tolerance():
    raw = digits_scenario({"name": "rnd_gossip", "rounds": 1, "alpha": 0.99, "rnd_epochs": 2, "rnd_batch_size": 16},
                          n=6)
    inline = Simulation(load_dict({**raw, "executor": "inline"})).run()
    sim = Simulation(load_dict({**raw, "executor": "batched"}))
    batched = sim.run()
    # the six fits are pending together (every device starts with one) and train as one group;
    # the round's six MLP jobs too
    assert sim.executor.stacked_jobs == 6 + 6
    assert batched["clusters"] == inline["clusters"]
    assert abs(batched["accuracy_mean"] - inline["accuracy_mean"]) <= 0.02
    for key in ("bytes_total", "compute_flops_total", "sim_time_s", "clustering_flops"):
        assert json.dumps(batched[key]) == json.dumps(inline[key])


@pytest.mark.slow
def test_per_device_predictor_fits_stack_from_each_devices_own_init_within_their_tolerance(monkeypatch):
    """``predictor_init: per_device``: the six fits pending together train as one stacked group, each from its
    device's own initial predictor, and end within ``STACK_ATOL`` of the inline fits."""
    from p2pfl.clustering.novelty import RNDProbe
    from p2pfl.clustering.rnd import STACK_ATOL

    trained: dict[int, dict[str, torch.Tensor]] = {}  # device -> its trained predictor, in the run under way

    class Probe(RNDProbe):
        def train(self, ctx, event):  # type: ignore[no-untyped-def]
            state = yield from super().train(ctx, event)
            trained[ctx.id] = state
            return state

    monkeypatch.setattr("p2pfl.protocols.serverless.rnd_gossip.RNDProbe", Probe)
    raw = digits_scenario({"name": "rnd_gossip", "rounds": 1, "alpha": 0.99, "rnd_epochs": 2, "rnd_batch_size": 16,
                           "predictor_init": "per_device"}, n=6)
    Simulation(load_dict({**raw, "executor": "inline"})).run()
    inline = dict(trained)
    trained.clear()
    sim = Simulation(load_dict({**raw, "executor": "batched"}))
    sim.run()
    batched = dict(trained)
    assert sim.executor.stacked_jobs == 6 + 6  # the six fits trained as one group, the round's six MLP jobs too
    assert sorted(inline) == sorted(batched) == list(range(6))
    worst = max(float((inline[d][k] - batched[d][k]).abs().max()) for d in inline for k in inline[d])
    assert worst <= STACK_ATOL
    # each device kept its own start: the trained predictors differ far beyond the tolerance
    assert min(float((batched[0][k] - batched[d][k]).abs().max()) for d in range(1, 6)
               for k in batched[0] if k.endswith("weight")) > 100 * STACK_ATOL


@pytest.mark.slow
def test_a_pool_runs_the_rest_on_every_core_with_the_same_bits():
    raw = digits_scenario({"name": "rnd_gossip", "rounds": 2, "alpha": 0.99, "rnd_epochs": 2, "rnd_batch_size": 16},
                          n=6)
    alone = Simulation(load_dict({**raw, "executor": {"kind": "batched", "workers": 1}}))
    pooled = Simulation(load_dict({**raw, "executor": {"kind": "batched", "workers": 2}}))
    assert alone.executor.describe() == "batched" and pooled.executor.describe().startswith("batched (process")
    assert json.dumps(alone.run()) == json.dumps(pooled.run())


def test_auto_starts_the_pool_for_a_protocol_with_heavy_work_of_its_own():
    from p2pfl.clustering.novelty import RNDProbe

    raw = digits_scenario({"name": "rnd_gossip", "rounds": 1}, n=4)
    small = Simulation(load_dict(raw))
    assert small.executor.describe() == "batched"  # 4 devices' discovery: well under AUTO_PROCESS_MIN_S
    samples = 4 * 32  # digits, 40 per device less the test fifth
    assert small.protocol.work_flops(samples) == RNDProbe(small.run_info, epochs=10, batch_size=128,
                                                          lr=1e-3).work_flops(samples, 1) > 0


def test_a_job_cheaper_than_shipping_it_runs_here_and_the_rest_in_the_pool():
    from p2pfl.executors.batched import INLINE_FLOPS
    from p2pfl.executors.jobs import EvalJob

    class Pool(InlineExecutor):
        def __init__(self) -> None:
            super().__init__()
            self.sent: list[float] = []

        def submit(self, job):
            self.sent.append(job.flops)
            return super().submit(job)

    pool = Pool()
    executor = BatchedExecutor(pool)
    model, x, y = MLP(64, 10, 16), torch.rand(20, 64), torch.randint(0, 10, (20,))
    scores = [executor.submit(EvalJob(0, model, x, y, "accuracy", flops=f)).result()
              for f in (INLINE_FLOPS / 4, INLINE_FLOPS, 0.0)]
    assert pool.sent == [INLINE_FLOPS, 0.0]  # the cheap one ran here; unknown cost (0) goes to the pool as before
    assert scores[0] == scores[1] == scores[2] == InlineExecutor().submit(EvalJob(0, model, x, y, "accuracy")).result()
