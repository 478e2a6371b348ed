"""The suite's markers are registered and strict."""

from __future__ import annotations

import pytest


def test_the_markers_are_registered_and_strict(pytestconfig: pytest.Config) -> None:
    assert "--strict-markers" in pytestconfig.getini("addopts")
    assert {"e2e", "robotics", "slow", "sweep"} <= {m.split(":")[0] for m in pytestconfig.getini("markers")}



def test_the_fast_tier_keeps_tests_in_every_folder(request: pytest.FixtureRequest) -> None:
    """`-m "not slow"` still covers each folder of the suite (in a session that collected the slow ones too)."""
    folders = {i.nodeid.split("/")[1] for i in request.session.items if i.nodeid.count("/") >= 2}
    fast = {i.nodeid.split("/")[1] for i in request.session.items
            if i.nodeid.count("/") >= 2 and not i.get_closest_marker("slow")}
    assert folders - fast == set()
