"""Every executor gives the same run, byte for byte: summaries and event logs of inline vs process."""

from __future__ import annotations

import json
from typing import Any

import pytest

from p2pfl.config import load_dict
from p2pfl.executors.base import Done, Joined
from p2pfl.executors.process import ProcessExecutor
from p2pfl.sim.kernel import Simulation
from tests.helpers import digits_scenario, robot_scenario
from tests.robotics.conftest import needs_mujoco

FAST = {"rnd_epochs": 1, "rnd_batch_size": 64}

CASES: dict[str, dict[str, Any]] = {
    "gossip_sync": digits_scenario({"name": "gossip", "rounds": 3, "eval_every": 1}, n=6),
    "gossip_async": digits_scenario({"name": "gossip", "rounds": 3, "mode": "async", "eval_every": 1}, n=6),
    "dsgd": digits_scenario({"name": "dsgd", "rounds": 3, "eval_every": 1}, n=6),
    "dac_cosine": digits_scenario({"name": "dac", "rounds": 3, "eval_every": 1}, n=6, kind="complete"),
    "dac_original": digits_scenario({"name": "dac", "variant": "original", "rounds": 3, "n_sampled": 3}, n=6,
                                    kind="complete"),
    "rnd_gossip": digits_scenario({"name": "rnd_gossip", "rounds": 2, "alpha": 0.5, **FAST}, n=6),
    "fedavg": digits_scenario({"name": "fedavg", "rounds": 3, "client_fraction": 0.5}, n=6, servers=True),
    "fedprox": digits_scenario({"name": "fedprox", "rounds": 2, "mu": 0.1}, n=4, servers=True),
    "ditto": digits_scenario({"name": "ditto", "rounds": 2}, n=4, servers=True),
    "ifca": digits_scenario({"name": "ifca", "rounds": 3, "n_clusters": 2}, n=6, servers=True),
    "rnd": digits_scenario({"name": "rnd", "rounds": 2, **FAST}, n=6, servers=True),
    "conditional": digits_scenario({"name": "conditional", "rounds": 2, "components": 3}, n=6, servers=True),
    "conditional_pooled": digits_scenario({"name": "conditional", "mode": "pooled", "rounds": 2, "components": 3},
                                          n=6),
    "local": digits_scenario({"name": "local", "rounds": 2, "eval_every": 1}, n=4),
    "oracle": digits_scenario({"name": "oracle", "rounds": 2}, n=4, servers=True),
    "centralized": digits_scenario({"name": "centralized", "rounds": 2}, n=4),
    # under dynamics: jobs cut by going offline are redone ("lost") and others pause; same bits anywhere
    "gossip_churn_lost": digits_scenario(
        {"name": "gossip", "rounds": 4, "reply_timeout_s": 0.05, "eval_every": 1}, n=6,
        dynamics={"interrupted_training": "lost", "churn": {"offline": 0.4, "cycle_s": 0.3},
                  "link_failures": {"mean_up_s": 0.5, "mean_down_s": 0.1}},
        devices={"flops_per_s": 2.0e7}),
    "rnd_gossip_churn": digits_scenario(
        {"name": "rnd_gossip", "rounds": 2, "alpha": 0.5, "reply_timeout_s": 0.05, "discovery_timeout_s": 5.0,
         **FAST}, n=6, dynamics={"churn": {"offline": 0.3, "cycle_s": 0.5}}),
}


@pytest.fixture(scope="module")
def workers():
    """Spawned workers: safe for every job (robot rollouts render)."""
    ex = ProcessExecutor(2)
    yield ex
    ex.close()


@pytest.fixture(scope="module")
def forked():
    """Forked workers, as a scenario with 1 thread and no rendering gets them, this process one of them."""
    ex = ProcessExecutor(2, start="fork", parent_share=True)
    yield ex
    ex.close()


def _run(raw: dict[str, Any], executor=None) -> tuple[str, str]:
    sim = Simulation(load_dict(raw), executor=executor)
    summary = sim.run()
    return json.dumps(summary, sort_keys=True), json.dumps(sim.recorder.events, sort_keys=True)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.slow
def test_process_executor_is_byte_identical_to_inline(case, forked):
    inline = _run({**CASES[case], "executor": "inline"})
    jobs_before = forked._next
    shipped = _run(CASES[case], executor=forked)
    assert forked._next > jobs_before  # the jobs really went to the executor
    assert shipped[0] == inline[0]
    assert shipped[1] == inline[1]


@pytest.mark.slow
@pytest.mark.parametrize("case", ["dsgd", "rnd_gossip"])
def test_spawned_workers_give_the_same_bytes(case, workers):
    assert _run(CASES[case], executor=workers) == _run({**CASES[case], "executor": "inline"})


@pytest.mark.parametrize(("threads", "renders", "start"), [(1, False, "fork"), (2, False, "spawn"),
                                                           (1, True, "spawn")])
def test_workers_are_forked_only_for_single_threaded_jobs_that_do_not_render(threads, renders, start):
    from p2pfl.executors.select import make_executor, start_method
    from p2pfl.executors.spec import ExecutorSpec

    assert start_method(threads, renders) == start
    if start == "fork":  # the executor starts its workers so (a forked worker starts at once; spawned ones take s)
        ex = make_executor("process", ExecutorSpec(kind="process", workers=1), threads=threads, renders=renders)
        try:
            assert ex.start_method == start
        finally:
            ex.close()


@pytest.mark.slow
def test_this_process_takes_a_share_and_one_worker_the_rest(monkeypatch):
    """With parent_share, jobs split between this process (run when an outcome is awaited) and the
    worker process by modelled load; the run is the inline run, byte for byte."""
    import p2pfl.executors.process as process

    ran_here: list[int] = []
    run_job = process.run_job
    monkeypatch.setattr(process, "run_job", lambda job: ran_here.append(job.node) or run_job(job))
    ex = ProcessExecutor(2, start="fork", parent_share=True)
    try:
        assert len(ex._procs) == 1
        submitted_before = ex._next
        shipped = _run(CASES["fedavg"], executor=ex)
        total = ex._next - submitted_before
    finally:
        ex.close()
    assert 0 < len(ran_here) < total  # both slots trained
    assert shipped == _run({**CASES["fedavg"], "executor": "inline"})


def test_forked_workers_refuse_a_multi_threaded_job(forked):
    import torch

    from p2pfl.executors.base import ExecutorError
    from p2pfl.executors.jobs import EvalJob

    job = EvalJob(node=0, model=torch.nn.Linear(2, 2), x=torch.zeros(1, 2), y=torch.zeros(1, dtype=torch.long),
                  metric="accuracy", threads=2)
    with pytest.raises(ExecutorError, match="threads: 2 was sent to forked workers"):
        forked.submit(job)


@pytest.mark.slow
def test_scenario_executor_block_starts_and_stops_its_own_workers():
    raw = {**CASES["fedavg"], "executor": {"kind": "process", "workers": 2}}
    sim = Simulation(load_dict(raw))
    assert isinstance(sim.executor, ProcessExecutor) and sim.executor.workers == 2
    assert sim.executor.parent_share and sim.executor.start_method == "fork"
    procs = sim.executor._procs
    assert len(procs) == 1  # this process is the other worker
    summary = sim.run()
    assert not any(p.is_alive() for p in procs)
    assert json.dumps(summary, sort_keys=True) == _run({**CASES["fedavg"], "executor": "inline"})[0]


@needs_mujoco
@pytest.mark.parametrize("protocol", [
    {"name": "feddrman", "rounds": 2, "n_clusters": 2, "rank": 4},  # the distillation loss travels with the job
    {"name": "fedkd", "rounds": 2},  # a mentor-mentee pair and the loss's own generator
])
@pytest.mark.robotics
@pytest.mark.slow
def test_robot_protocols_are_byte_identical_across_executors(tmp_path_factory, protocol, workers):
    root = tmp_path_factory.mktemp("demos")
    inline = _run(robot_scenario(root, protocol, executor="inline"))
    assert _run(robot_scenario(root, protocol), executor=workers) == inline


@needs_mujoco
@pytest.mark.robotics
@pytest.mark.slow
def test_rollouts_kept_from_spawned_workers_give_the_inline_bytes_and_are_read_back(tmp_path_factory, workers):
    """With an evaluation folder, the kernel keeps each rollout's result once its worker has sent it back
    (``Future.ready``, without waiting), and a rerun reads them all: the bytes of an inline run either way."""
    root = tmp_path_factory.mktemp("demos")
    kept = root / "kept"
    raw = robot_scenario(root, {"name": "fedavg", "rounds": 2})
    inline = _run({**raw, "executor": "inline"})
    for read in (0, 2):
        sim = Simulation(load_dict(raw), executor=workers, evaluations=kept)
        summary = sim.run()
        assert (json.dumps(summary, sort_keys=True), json.dumps(sim.recorder.events, sort_keys=True)) == inline
        assert sim.evaluations is not None and sim.evaluations.read == read
        assert sim.evaluations.written == 2 - read and len(list(kept.iterdir())) == 2  # 2 suites, 1 evaluation


@pytest.mark.slow
def test_a_spawned_workers_job_is_ready_once_it_is_back_and_not_before_it_is_sent(workers):
    import operator
    import time

    from p2pfl.executors.jobs import CallJob

    fut = workers.submit(CallJob(0, operator.add, (2, 3), threads=1, flops=1))
    for _ in range(1200):  # the worker answers within a minute on any machine; the loop never asserts on time
        if fut.ready():
            break
        time.sleep(0.05)
    assert fut.ready() and fut.result() == 5 and fut.ready()


def test_a_joined_outcome_combines_its_jobs_in_order_once(workers):
    import operator

    from p2pfl.executors.jobs import CallJob

    calls: list[list[int]] = []
    joined = Joined([workers.submit(CallJob(0, operator.add, (2, 3), threads=1, flops=1)),
                     workers.submit(CallJob(1, operator.mul, (2, 3), threads=1, flops=1)), Done(7)],
                    lambda outs: calls.append(outs) or sum(o * 10**i for i, o in enumerate(outs)))
    assert joined.result() == 5 + 60 + 700 and joined.result() == 765 and joined.ready()
    assert calls == [[5, 6, 7]]  # combined once, in the parts' order
    assert not Joined([Done(1), _Never(2)], sum).ready() and Joined([Done(1), Done(2)], sum).ready()


class _Never(Done[int]):
    def ready(self) -> bool:
        return False


@pytest.mark.robotics
@pytest.mark.slow
@needs_mujoco
def test_rollouts_run_as_jobs_once_per_suite_and_model(tmp_path_factory, workers):
    """The server scores one global model on 4 devices of 2 suites: 2 rollout jobs per evaluation, in the
    workers; the other devices' scores reuse them (cached: no compute charged twice)."""
    from p2pfl.executors.jobs import CallJob
    from p2pfl.robotics.rollout import run_rollouts

    root = tmp_path_factory.mktemp("demos")
    submitted: list[CallJob] = []
    submit = workers.submit
    workers.submit = lambda job: (submitted.append(job) if isinstance(job, CallJob) else None) or submit(job)
    try:
        _, events = _run(robot_scenario(root, {"name": "fedavg", "rounds": 2, "eval_every": 1}), executor=workers)
    finally:
        del workers.submit
    rollouts = [j for j in submitted if j.fn is run_rollouts]
    assert len(rollouts) == 2 * 2  # two suites x two evaluated rounds
    logs = [e for e in json.loads(events) if e["kind"] == "log" and e["name"] == "rollout_success"]
    assert len(logs) == 4 * 2 and sum(not e["cached"] for e in logs) == 4
    charged = [e for e in json.loads(events) if e["kind"] == "compute" and e["what"] == "rollout"]
    assert len(charged) == 4 and all(e["flops"] > 0 for e in charged)
