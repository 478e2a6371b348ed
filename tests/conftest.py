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

