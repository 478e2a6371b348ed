"""Clustering tests train tiny torch nets: pin one intra-op thread (fast and reproducible
on shared CPUs) and restore the previous setting afterwards."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
