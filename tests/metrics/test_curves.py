"""Reading a score curve (``p2pfl.metrics.curves``): at a traffic or time budget, first reaching a target, Pareto."""

from __future__ import annotations

from p2pfl.metrics.curves import at_time, at_traffic, first_reaching, pareto

# (round, simulated time, score, traffic)
CURVE = [(1, 10.0, 0.5, 100.0), (2, 20.0, 0.7, 200.0), (3, 30.0, 0.65, 300.0)]


def test_at_traffic_reads_the_last_evaluation_within_the_budget():
    assert at_traffic(CURVE, 250.0) == 0.7
    assert at_traffic(CURVE, 300.0) == 0.65
    assert at_traffic(CURVE, 200.0 * (1 - 1e-10)) == 0.7  # within the relative tolerance: its own point
    assert at_traffic(CURVE, 99.0) is None


def test_at_time_reads_the_last_evaluation_by_then():
    assert at_time(CURVE, 29.999) == 0.7
    assert at_time(CURVE, 30.0) == 0.65
    assert at_time(CURVE, 5.0) is None


def test_first_reaching_gives_time_and_traffic():
    assert first_reaching(CURVE, 0.6) == (20.0, 200.0)
    assert first_reaching(CURVE, 0.5) == (10.0, 100.0)
    assert first_reaching(CURVE, 0.9) is None


def test_pareto_keeps_what_no_other_beats_on_both():
    points = {"a": (0.9, 300.0), "b": (0.8, 100.0), "c": (0.7, 200.0), "d": (0.9, 300.0)}
    assert pareto(points) == ["a", "b", "d"]  # c: b is better and cheaper; a and d tie, neither beats the other
