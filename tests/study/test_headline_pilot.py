"""analysis/reports/headline_pilot.py on hand-made rows: plateau round, headroom pairing, the budget and size choice."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import analysis_module


def _row(het: str, samples: int, ref: str, seed: int, curve: list[tuple[int, float]]) -> dict[str, Any]:
    return {"het": het, "samples": samples, "ref": ref, "seed": seed, "acc": curve[-1][1], "p10": curve[-1][1],
            "wall_s": 1.0, "curve": curve}


def test_plateau_round_is_the_first_within_tolerance() -> None:
    pilot = analysis_module("headline_pilot")
    curve = [(4, 0.50), (8, 0.70), (12, 0.785), (16, 0.795), (20, 0.80), (24, 0.80)]
    # plateau = mean(0.795, 0.80, 0.80) = 0.7983; within 1 point: >= 0.7883 -> round 16 (0.785 is not)
    assert pilot.plateau_round(curve) == 16
    assert pilot.plateau_round(curve, tol=0.02) == 12
    with pytest.raises(ValueError, match="empty curve"):
        pilot.plateau_round([])


def test_choice_takes_the_largest_size_with_headroom_and_the_oracles_slowest_plateau() -> None:
    pilot = analysis_module("headline_pilot")
    rows = []
    for seed in (0, 1):
        d = 0.01 * seed
        for het, slow in (("rotation", False), ("label_permutation", True)):
            for samples, local in ((25, 0.50), (100, 0.65)):
                oracle = [(4, 0.5), (8, 0.70 if slow else 0.76), (12, 0.76), (16, 0.76)]
                rows.append(_row(het, samples, "oracle", seed, [(r, a + d) for r, a in oracle]))
                rows.append(_row(het, samples, "local", seed, [(4, local), (16, local + d)]))
        rows.append(_row("feature_skew", 100, "oracle", seed, [(4, 0.5), (16, 0.5)]))  # the control: no headroom
        rows.append(_row("feature_skew", 100, "local", seed, [(4, 0.6), (16, 0.6)]))
    samples, budget, why = pilot.choose(rows)
    # headroom 0.76 - 0.50 = 26 points at 25 samples, 0.76 - 0.65 = 11 at 100: both >= 10 -> the larger, 100;
    # the control's negative headroom does not count
    assert samples == 100 and "11.0 points" in why
    assert budget == 12  # rotation plateaus at round 8, label_permutation at 12
    assert pilot.headroom(rows, "rotation", 100) == pytest.approx([0.11, 0.11])
    rows = [r for r in rows if not (r["ref"] == "local" and r["samples"] == 25)] + [
        _row(h, 25, "local", s, [(4, 0.70), (16, 0.70)]) for h in ("rotation", "label_permutation") for s in (0, 1)]
    samples, _, why = pilot.choose(rows)  # 25 samples: 6-7 points; 100: 11 -> still 100
    assert samples == 100
    rows = [{**r, "acc": r["acc"] + 0.05} if r["ref"] == "local" else r for r in rows]
    samples, _, why = pilot.choose(rows)  # now no size has 10 points: the one with the largest smallest headroom
    assert samples == 100 and "no size reaches 10 points" in why
