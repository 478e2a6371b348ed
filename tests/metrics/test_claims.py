"""Claim verdicts come from the 95% t-interval of per-seed paired differences."""

from __future__ import annotations

import pytest

from p2pfl.metrics.claims import (
    DOES_NOT_HOLD,
    HOLDS,
    NOT_RESOLVED,
    NOT_RUN,
    at_least,
    beats,
    below,
    cannot_test,
    combine,
    fmt_ci,
    fmt_diff,
    paired,
    per_part,
)


def test_paired_differences_use_the_seeds_both_sides_have():
    assert paired({0: 0.5, 1: 0.7, 2: 0.9}, {1: 0.6, 2: 0.4, 3: 0.0}) == pytest.approx([0.1, 0.5])


@pytest.mark.parametrize(("diffs", "verdict"), [
    ([-0.10, -0.12, -0.11], "holds"),  # wholly below 0
    ([0.10, 0.12, 0.11], "does not hold"),  # wholly above
    ([-0.2, 0.1, -0.05], "not resolved (interval spans the margin)"),  # the margin of 'a < b' is 0
    ([-0.1], "not run"),  # one seed has no interval
])
def test_below(diffs, verdict):
    assert below(diffs) == verdict


def test_at_least_allows_the_margin():
    diffs = [-0.010, -0.012, -0.011]  # a is about 1.1 points below b
    assert at_least(diffs, margin=0.02) == "holds"
    assert at_least(diffs, margin=0.005) == "does not hold"
    assert at_least([-0.02, 0.01, -0.01], margin=0.005) == "not resolved (interval spans the margin)"


def test_combine_holds_only_where_every_cell_holds():
    assert combine([HOLDS, HOLDS]) == "holds"
    assert combine([HOLDS, DOES_NOT_HOLD]) == "does not hold"
    assert combine([HOLDS, NOT_RESOLVED]) == "not resolved (interval spans the margin)"
    assert combine([HOLDS, NOT_RUN]) == "not run"
    assert combine([]) == "not run"


def test_combine_takes_only_interval_verdicts():
    with pytest.raises(ValueError, match="combine takes interval verdicts"):
        combine([HOLDS, cannot_test("no data here")])


def test_formats():
    # mean 2, sd 1, n 3: half-width t(0.975, 2) * 1 / sqrt(3) = 4.303 / 1.732 = 2.484
    assert fmt_ci([1.0, 2.0, 3.0], digits=2) == "2.00 ± 2.48"
    assert fmt_ci([0.5]) == "0.500 (n=1)"
    assert fmt_ci([]) == "—"
    assert fmt_diff([0.01, 0.02, 0.03]) == "+2.0 [-0.5, +4.5]"


def test_beats_is_below_with_the_sides_swapped():
    assert beats([0.10, 0.12, 0.11]) == HOLDS
    assert beats([-0.10, -0.12, -0.11]) == DOES_NOT_HOLD
    assert beats([-0.2, 0.1, 0.05]) == NOT_RESOLVED
    assert beats([0.1]) == NOT_RUN


def test_per_part_writes_each_difference_and_combines_the_verdicts():
    parts = {"K=2": [0.010, 0.012, 0.011], "K=5": [-0.2, 0.1, -0.05]}
    text, verdict = per_part(parts, below)
    assert text == f"K=2: {fmt_diff(parts['K=2'])}; K=5: {fmt_diff(parts['K=5'])}"
    assert verdict == combine([below(d) for d in parts.values()]) == DOES_NOT_HOLD
    text, verdict = per_part({"fedavg": [10.0, 12.0, 11.0]}, beats, sep=" ", scale=1.0)
    assert (text, verdict) == ("fedavg +11.0 [+8.5, +13.5]", HOLDS)
    assert per_part({}, below) == ("", NOT_RUN)
