"""Shared fixtures: a SimPy env and a seeded RNG (SimPy/networkx test style)."""

from __future__ import annotations

import numpy as np
import pytest
import simpy


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


#: Tests over ~2 s in folders whose files other work owns (tests/architecture, tests/protocols): marked here, by
#: node id, until their files carry the mark themselves (tests/test_markers.py checks each still names a test).
SLOW_ELSEWHERE = (
    "tests/architecture/test_imports.py::test_validating_a_scenario_imports_only_its_protocol",
    "tests/protocols/test_registry.py::test_a_protocol_registered_by_an_entry_point_runs_from_the_command",
)


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.split("[")[0] in SLOW_ELSEWHERE:
            item.add_marker(pytest.mark.slow)
