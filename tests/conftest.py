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
