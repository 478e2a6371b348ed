"""The core count reaches the executors as an argument, never through the environment:
``p2pfl.run(cores=)`` -> ``Simulation(cores=)`` -> ``resolve_kind`` / ``make_executor`` (a sweep passes each cell
its share)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import p2pfl
import p2pfl.executors.process as process
from p2pfl.executors.select import AUTO_PROCESS_MIN_S, REAL_FLOPS_PER_S, make_executor, resolve_kind
from p2pfl.executors.spec import ExecutorSpec
from tests.helpers import digits_scenario

#: a model ``auto`` does not stack, so it chooses between process workers and inline by the cores
CONV = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten())
LONG_FLOPS = 2 * AUTO_PROCESS_MIN_S * REAL_FLOPS_PER_S


def test_auto_starts_workers_only_with_two_cores_per_thread_given():
    def kind(cores: int) -> str:
        return resolve_kind(ExecutorSpec(), threads=2, torch_device=torch.device("cpu"), train_flops=LONG_FLOPS,
                            model=CONV, cores=cores)

    assert (kind(3), kind(4)) == ("inline", "process")


def test_the_default_worker_count_is_the_cores_given_over_the_threads(monkeypatch):
    made: list[int] = []

    class Recorded:
        def __init__(self, workers: int, **_: object) -> None:
            made.append(workers)

    monkeypatch.setattr(process, "ProcessExecutor", Recorded)
    make_executor("process", ExecutorSpec(kind="process"), threads=2, cores=7)
    make_executor("process", ExecutorSpec(kind="process"), threads=2, cores=1)
    assert made == [3, 1]


@pytest.mark.slow
def test_a_run_hands_its_cores_to_the_executor_choice(monkeypatch):
    import p2pfl.sim.kernel as kernel

    seen: list[object] = []
    real = kernel.resolve_kind
    monkeypatch.setattr(kernel, "resolve_kind", lambda *a, **kw: seen.append(kw["cores"]) or real(*a, **kw))
    base = digits_scenario({"name": "local", "rounds": 1}, n=3)
    p2pfl.run(base, write=False, cores=5)
    p2pfl.run(base, write=False)
    assert seen == [5, None]  # None: every core this process may use
