"""The suite's markers: registered, and the slow marks given by node id name existing tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SLOW_ELSEWHERE

ROOT = Path(__file__).resolve().parents[1]


def test_the_markers_are_registered_and_strict(pytestconfig: pytest.Config) -> None:
    assert "--strict-markers" in pytestconfig.getini("addopts")
    assert {"e2e", "robotics", "slow", "sweep"} <= {m.split(":")[0] for m in pytestconfig.getini("markers")}


@pytest.mark.parametrize("nodeid", SLOW_ELSEWHERE)
def test_each_slow_mark_by_node_id_names_a_test(nodeid: str) -> None:
    path, name = nodeid.split("::")
    assert f"\ndef {name}(" in (ROOT / path).read_text(encoding="utf-8"), f"{nodeid}: no such test; update SLOW_ELSEWHERE"


def test_slow_marks_by_node_id_reach_the_tests(request: pytest.FixtureRequest) -> None:
    """In a session that collected them, the tests named in SLOW_ELSEWHERE carry the mark (so -m 'not slow' drops them)."""
    items = [i for i in request.session.items if i.nodeid.split("[")[0] in SLOW_ELSEWHERE]
    assert all(i.get_closest_marker("slow") for i in items)
