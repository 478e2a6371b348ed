"""Shared helpers for the data tests: fixture writers and cache hygiene."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from p2pfl.data import datasets

_spec = importlib.util.spec_from_file_location(
    "p2pfl_test_data_formats", Path(__file__).resolve().parents[1] / "fixtures" / "data_formats.py"
)
formats = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(formats)


@pytest.fixture
def fmt():
    """The fixture-writing module (tests/fixtures/data_formats.py)."""
    return formats


@pytest.fixture
def fresh_cache():
    """Forget cached pools before and after a test that writes dataset files."""
    datasets.clear_cache()
    yield
    datasets.clear_cache()
