"""Shared fixtures (a SimPy env and a seeded RNG: SimPy/networkx test style) and the suite's hooks (torch threads per
worker, long files first)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import simpy


def pytest_configure(config: pytest.Config) -> None:
    """Each pytest-xdist worker takes its share of the cores for torch's intra-op threads.

    Two workers of two threads each on two cores leave OpenMP's threads spinning against each other: a test that
    trains directly (not through a run, whose jobs take the scenario's ``threads``) took 6.5 s in the suite and
    0.4 s alone. Tests that need a count set it themselves.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with the most ``slow`` tests first, each file's tests in their order (stable sort).

    pytest-xdist (``--dist loadfile``) hands out files in collection order, so the long ones start first and
    the suite ends on short files on both workers instead of one worker finishing a long file alone."""
    slow: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        slow[path] = slow.get(path, 0) + (item.get_closest_marker("slow") is not None)
    items.sort(key=lambda item: -slow[item.nodeid.split("::")[0]])


@pytest.fixture
def env() -> simpy.Environment:
    return simpy.Environment()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _fixed_torch_global_rng():
    """Every test starts from the same torch global RNG state, whatever ran before it.

    Project code never uses the global RNG; tests that draw inputs with torch.rand do,
    and must not depend on test order.
    """
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(0)
        yield

