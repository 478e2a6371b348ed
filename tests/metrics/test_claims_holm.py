"""Holm-corrected claim verdicts, paired t-test p-values and the headline report's derived quantities."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import ttest_1samp

from p2pfl.metrics.claims import (
    DOES_NOT_HOLD,
    HOLDS,
    NOT_RESOLVED,
    at_least,
    at_least_holm,
    at_least_holm_p,
    device_percentile,
    fewer_bytes,
    headroom_gain,
    headroom_gains,
    holm,
    holm_adjusted,
    mean_curve,
    paired_p,
    seeds_to_resolve,
    target_accuracy,
)

OFFSETS = [-0.02, -0.01, 0.0, 0.01, 0.02]  # sd 0.0158114, standard error over 5 seeds 0.00707107


def around(mean: float) -> list[float]:
    return [mean + o for o in OFFSETS]


def test_holm_textbook_example():
    # sorted: 0.005 x 4 = 0.02 <= 0.05 reject; 0.01 x 3 = 0.03 reject; 0.03 x 2 = 0.06 > 0.05 stop
    p = [0.01, 0.04, 0.03, 0.005]
    assert holm(p, 0.05) == [True, False, False, True]
    # running max of (0.02, 0.03, 0.06, 0.04) -> 0.02, 0.03, 0.06, 0.06, back in input order
    assert holm_adjusted(p) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-12)


def test_holm_stops_at_the_first_failure_and_caps_at_one():
    # 0.03 > 0.05 / 2: nothing rejected, though 0.04 <= 0.05 / 1 at the second step would pass
    assert holm([0.04, 0.03], 0.05) == [False, False]
    assert holm_adjusted([0.04, 0.03]) == pytest.approx([0.06, 0.06])  # max(0.04, 0.03 x 2)
    assert holm_adjusted([0.6, 0.7]) == [1.0, 1.0]
    assert holm([], 0.05) == [] and holm_adjusted([]) == []
    assert holm([0.01, 0.04], 0.05) == [True, True]  # 0.04 <= 0.05 / 1 at the second step (Bonferroni: 0.025)


def test_holm_rejects_nan():
    with pytest.raises(ValueError):
        holm([0.01, math.nan])


def test_paired_p_at_the_t_table_value():
    # t = 2.776 with 4 degrees of freedom is the two-sided 5% critical value: one-sided p = 0.025
    diffs = [2.776 * math.sqrt(2.5 / 5) + o for o in (-2, -1, 0, 1, 2)]  # sd sqrt(2.5), n 5
    assert paired_p(diffs, 0.0, "greater") == pytest.approx(0.025, abs=1e-4)
    assert paired_p(diffs, 0.0, "less") == pytest.approx(0.975, abs=1e-4)
    shifted = [d + 0.5 for d in diffs]
    assert paired_p(shifted, 0.5, "greater") == pytest.approx(0.025, abs=1e-4)


@pytest.mark.parametrize("side", ["greater", "less"])
def test_paired_p_matches_scipy_ttest(side):
    diffs = [0.013, -0.004, 0.021, 0.008, 0.002, 0.017]
    expected = ttest_1samp(diffs, popmean=-0.01, alternative=side).pvalue
    assert paired_p(diffs, -0.01, side) == pytest.approx(expected, rel=1e-9)


def test_paired_p_edge_cases():
    assert math.isnan(paired_p([0.1]))
    assert math.isnan(paired_p([]))
    assert paired_p([0.1, 0.1, 0.1], 0.0, "greater") == 0.0  # no variance, above the margin
    assert paired_p([0.1, 0.1, 0.1], 0.0, "less") == 1.0
    assert paired_p([0.1, 0.1, 0.1], 0.1, "greater") == 1.0  # on the margin: H0 not rejected
    with pytest.raises(ValueError):
        paired_p([0.1, 0.2], 0.0, "two-sided")  # type: ignore[arg-type]


def test_holm_turns_an_uncorrected_holds_into_not_resolved():
    margin = 0.02
    # t = 3 against -margin with 4 df: two-sided p = 0.040, within 0.05 alone but above Holm's 0.05 / 2
    borderline = around(-margin + 3 * 0.00707107)
    clear = around(0.05)  # t = 9.9: p ~ 6e-4 <= 0.05 / 3, rejected first
    spanning = around(-margin)  # t = 0: p = 1
    table = [borderline, clear, spanning]
    assert at_least(borderline, margin) == "holds"  # uncorrected
    assert at_least_holm(table, margin) == [
        "not resolved (interval spans the margin)", "holds", "not resolved (interval spans the margin)"]


def test_holm_steps_down_past_bonferroni():
    margin = 0.02
    borderline = around(-margin + 3 * 0.00707107)  # two-sided p = 0.040 > 0.05 / 2, <= 0.05 / 1
    assert at_least_holm([around(0.05), borderline], margin) == ["holds", "holds"]


def test_holm_reads_a_rejection_in_the_direction_of_the_mean():
    margin = 0.02
    table = [around(-0.08), around(0.05), [0.3]]
    assert at_least_holm(table, margin) == ["does not hold", "holds", "not run"]


def test_not_run_comparisons_are_left_out_of_the_family():
    margin = 0.02
    borderline = around(-margin + 3 * 0.00707107)  # two-sided p = 0.040: rejected only when m = 1
    assert at_least_holm([borderline, [0.5]], margin) == ["holds", "not run"]
    assert at_least_holm([borderline, around(-margin)], margin)[0].startswith("not resolved")


def test_the_adjusted_p_value_is_the_one_behind_each_verdict():
    margin = 0.02
    borderline = around(-margin + 3 * 0.00707107)  # t = 3, 4 df: two-sided p = 0.0399
    p_borderline = 2 * ttest_1samp(borderline, popmean=-margin, alternative="greater").pvalue
    assert p_borderline == pytest.approx(0.0399, abs=1e-4)
    # alone: unadjusted; with a clear comparison ahead of it (m = 2): the running max of (2 p_clear, 1 p_borderline)
    assert at_least_holm_p([borderline], margin) == pytest.approx([p_borderline], rel=1e-12)
    clear = around(0.05)
    p_clear = 2 * ttest_1samp(clear, popmean=-margin, alternative="greater").pvalue
    got = at_least_holm_p([clear, borderline, [0.3]], margin)
    assert got[:2] == pytest.approx([2 * p_clear, p_borderline], rel=1e-9) and got[2] is None
    # a planned family of 3: the borderline's adjusted p is 2 p (step 2 of 3), over 0.05: not resolved
    got = at_least_holm_p([clear, borderline], margin, family=3)
    assert got == pytest.approx([3 * p_clear, 2 * p_borderline], rel=1e-9)
    assert at_least_holm([clear, borderline], margin, family=3) == ["holds", NOT_RESOLVED]
    # the verdicts and the adjusted p-values agree on every table above: rejected exactly when p <= 0.05
    for table, family in (([borderline], None), ([clear, borderline], None), ([clear, borderline], 3),
                          ([around(-0.08), clear], None)):
        for v, a in zip(at_least_holm(table, margin, family=family), at_least_holm_p(table, margin, family=family)):
            assert a is not None and (v != NOT_RESOLVED) == (a <= 0.05)


def test_a_planned_family_counts_the_comparisons_not_run_yet_as_not_rejected():
    margin = 0.02
    borderline = around(-margin + 3 * 0.00707107)  # two-sided p = 0.040: rejected only when m = 1
    clear = around(0.05)  # p ~ 6e-4: rejected at Holm's first step for every m here (<= 8)
    assert at_least_holm([borderline], margin) == ["holds"]
    assert at_least_holm([borderline], margin, family=1) == ["holds"]
    assert at_least_holm([borderline], margin, family=2)[0].startswith("not resolved")  # the study plans two
    # the same verdicts as with the missing comparisons present at p = 1 (zero spread, exactly at the margin)
    for family in (2, 5, 8):
        padded = [clear, borderline] + [[-margin] * 3] * (family - 2)
        assert at_least_holm([clear, borderline], margin, family=family) == at_least_holm(padded, margin)[:2]
    assert at_least_holm([clear, [0.1]], margin, family=3) == ["holds", "not run"]  # one seed: not tested
    with pytest.raises(ValueError, match="family=1 is smaller than the 2 comparisons tested"):
        at_least_holm([clear, borderline], margin, family=1)


@pytest.mark.parametrize("diffs", [
    [-0.010, -0.012, -0.011], [0.03, 0.01, 0.02], [-0.02, 0.01, -0.01], [-0.1, -0.12, -0.09], [-0.2, 0.3]])
@pytest.mark.parametrize("margin", [0.005, 0.02])
def test_one_comparison_is_the_uncorrected_verdict(diffs, margin):
    assert at_least_holm([diffs], margin) == [at_least(diffs, margin)]


def test_headroom_gain():
    assert headroom_gain(0.8, 0.6, 0.9) == pytest.approx(2 / 3)
    assert headroom_gain(0.5, 0.6, 0.9) == pytest.approx(-1 / 3)  # worse than training alone
    assert headroom_gain(0.9, 0.6, 0.9) == pytest.approx(1.0)
    assert math.isnan(headroom_gain(0.8, 0.7, 0.7))  # no headroom
    assert math.isnan(headroom_gain(0.8, 0.7, 0.65))


def test_headroom_gains_pair_by_seed():
    acc = {0: 0.8, 1: 0.7, 2: 0.9}
    local = {0: 0.6, 1: 0.6, 3: 0.5}
    oracle = {0: 0.9, 1: 0.8, 2: 1.0, 3: 0.9}
    assert headroom_gains(acc, local, oracle) == pytest.approx([2 / 3, 0.5])  # seeds 0 and 1 only


def test_target_accuracy():
    assert target_accuracy(0.6, 0.9) == pytest.approx(0.87)
    assert target_accuracy(0.6, 0.9, fraction=0.5) == pytest.approx(0.75)


def test_fewer_bytes_needs_the_tolerance():
    assert not fewer_bytes(334.03, 336.57)  # 0.75% fewer: within 10%, not fewer
    assert not fewer_bytes(336.57, 334.03)  # nor more
    assert fewer_bytes(300.0, 334.03)  # 0.9 x 334.03 = 300.63
    assert fewer_bytes(90.0, 100.0) and not fewer_bytes(90.01, 100.0)
    assert fewer_bytes(334.03, 336.57, tolerance=0.0)


def test_device_percentile_interpolates_and_skips_unscored_devices():
    # 11 devices 0.0, 0.1, ..., 1.0: the 10th percentile sits on the second, 0.1 (position 0.1 x 10 = 1)
    assert device_percentile([i / 10 for i in range(11)] + [None, math.nan]) == 0.1
    # 5 devices, sorted 0.5 ... 0.9: position 0.1 x 4 = 0.4, between 0.5 and 0.6: 0.5 + 0.4 x 0.1 = 0.54
    assert device_percentile([0.9, 0.5, 0.7, 0.8, 0.6]) == 0.54
    assert device_percentile([0.5, 0.7, 1.0], q=50) == 0.7


def test_mean_curve_averages_the_rounds_every_seed_evaluated():
    a = [(4, 1.0, 0.5), (8, 2.0, 0.75), (12, 3.0, 1.0)]
    b = [(4, 3.0, 0.25), (8, 4.0, 0.25)]  # never reached round 12
    assert mean_curve([a, b]) == [(4, 2.0, 0.375), (8, 3.0, 0.5)]
    assert mean_curve([a]) == a
    assert mean_curve([[(4, 0.5)], [(4, 1.0), (8, 1.0)]]) == [(4, 0.75)]
    assert mean_curve([a, [p for p in b if p[1] > 3.0]]) == [(8, 3.0, 0.5)]  # a point dropped: its round too
    assert mean_curve([]) == []


def _sample(n: int, mean: float, sd: float) -> list[float]:
    """``n`` values with exactly this mean and sample sd."""
    z = np.linspace(-1.0, 1.0, n)
    z = (z - z.mean()) / z.std(ddof=1)
    return list(mean + sd * z)


@pytest.mark.parametrize(("mean", "sd", "family", "verdict"), [
    (0.02, 0.05, 8, HOLDS),  # matches within the margin 0.1
    (-0.16, 0.05, 8, DOES_NOT_HOLD),  # trails by more than the margin
    (0.05, 0.30, 24, HOLDS),  # noisy: many seeds
    (-0.08, 0.02, 1, HOLDS),  # close to the margin
])
def test_seeds_to_resolve_is_the_fewest_seeds_at_which_holm_would_decide_with_the_same_mean_and_sd(
        mean, sd, family, verdict):
    n = seeds_to_resolve(_sample(3, mean, sd), 0.1, family=family)
    assert n is not None and n >= 2
    # with the same mean and sd at n seeds, Holm over the family (the others untested, p = 1) decides ...
    assert at_least_holm([_sample(n, mean, sd)], 0.1, family=family) == [verdict]
    if n > 2:  # ... and at one seed fewer it does not
        assert at_least_holm([_sample(n - 1, mean, sd)], 0.1, family=family) == [NOT_RESOLVED]


def test_seeds_to_resolve_edges():
    assert seeds_to_resolve([0.1], 0.1) is None  # one value has no sd
    assert seeds_to_resolve([0.05, 0.05, 0.05], 0.1) == 2  # no spread: two seeds decide
    assert seeds_to_resolve([-0.1, -0.1], 0.1) is None  # exactly on the margin: never
    assert seeds_to_resolve(_sample(3, -0.099, 0.5), 0.1, cap=100) is None  # past the cap
