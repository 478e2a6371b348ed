"""The cell formatters of ``p2pfl.metrics.tables`` and ``bands`` of ``p2pfl.metrics.report``."""

from __future__ import annotations

import math

import pytest

from p2pfl.metrics.report import bands
from p2pfl.metrics.tables import fmt_bytes, fmt_num, fmt_s


def test_fmt_num_writes_a_dash_for_a_missing_value():
    assert fmt_num(0.12345, ".2f") == "0.12"
    assert fmt_num(math.nan, ".2f") == "—" and fmt_num(None, ".1f") == "—"
    assert fmt_num(None, ".1f", na="–") == "–"


@pytest.mark.parametrize("b, text", [(999, "999 B"), (1_000, "1.00 kB"), (2_500_000, "2.50 MB"),
                                     (3.25e9, "3.25 GB"), (None, "—"), (math.nan, "—")])
def test_fmt_bytes_picks_the_largest_unit_reached(b, text):
    assert fmt_bytes(b) == text


def test_fmt_s_drops_decimals_from_100_s():
    assert fmt_s(99.994) == "99.99 s" and fmt_s(1234.4) == "1,234 s"
    assert fmt_s(None) == "—" and fmt_s(math.nan) == "—"


def test_bands_are_band_per_point():
    means, lows, highs = bands([[1.0, 3.0], [5.0], []])
    assert means[:2] == [2.0, 5.0] and math.isnan(means[2])
    # two values: mean 2, sd sqrt(2), t(0.975, 1) = 12.706...: half-width 12.706 * sqrt(2) / sqrt(2)
    assert lows[0] == pytest.approx(2.0 - 12.706204736174698) and highs[0] == pytest.approx(2.0 + 12.706204736174698)
    assert (lows[1], highs[1]) == (5.0, 5.0)  # one value: no interval, the band is the mean
