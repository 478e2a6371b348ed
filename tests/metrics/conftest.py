"""The session's tree of real run directories (see ``tests/metrics/run_tree.py``)."""

from __future__ import annotations

import pytest

from tests.metrics.run_tree import Tree, build_tree


@pytest.fixture(scope="session")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    return build_tree(tmp_path_factory.mktemp("runs"))
