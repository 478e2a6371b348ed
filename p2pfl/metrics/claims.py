"""Verdicts on a paper's claims from paired differences over seeds, decided by the 95% t-interval, and each
claim's comparability with the paper's experiment, declared apart from the outcome.

A claims row has two columns that never decide each other (issue 69):

- the **verdict**, computed from the numbers and printed as computed: ``HOLDS`` "holds", ``DOES_NOT_HOLD``
  "does not hold" (the interval wholly on one side of the claim's margin, or a count or equality met or missed,
  ``holds_if``), ``NOT_RESOLVED`` "not resolved (interval spans the margin)"; or ``cannot_test(reason)``
  "cannot be tested here: <reason>" when the data or code the claim needs is not available offline. With
  fewer than two seeds there is no interval: ``NOT_RUN`` ("not run") marks a row whose runs are missing; it
  is not a verdict, and a complete report has none.
- the **comparability**, declared per claim before any result is read (a module-level ``Declared`` table of
  the report): ``LIKE_FOR_LIKE`` "like for like"; ``differs(how)`` "differs: <how>" (the same quantity measured
  in an experiment that differs from the paper's, e.g. another model); ``not_comparable(how)`` "not comparable
  here: <how>" (the quantity measured is not the paper's); ``NO_PAPER`` "—" (a question beyond the paper, or a
  claim that cannot be tested). A difference qualifies every outcome alike: nothing here takes a verdict and
  returns another, and ``Declared.row`` returns the verdict it is given.

A claim such as "method a beats method b" is checked on the per-seed differences a - b (the same seed:
the same data and initial weights). It holds when the whole interval lies on the claimed side, does not
hold when the whole interval lies on the other side, and is not resolved otherwise. ``at_least``, ``below``
and ``beats`` decide one comparison; ``per_part`` writes a claim checked per column or setting and
``combine``s its verdicts. ``kind`` names which verdict a string is, ``short`` its label without the
parenthesis or reason; ``comparability_kind`` does the same for the comparability column.

A table of m such claims is corrected for multiplicity with Holm's step-down procedure (``holm``,
``at_least_holm``); ``paired_p`` gives the paired t-test p-values it needs. ``headroom_gain``,
``target_accuracy`` and ``fewer_bytes`` are the headline report's derived quantities; ``device_percentile``
(the p10 device) and ``mean_curve`` (a curve's mean over seeds) are what the headline reports read per run
and per group of seeds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, Optional

import numpy as np

from p2pfl.metrics.report import ci95

__all__ = ["HOLDS", "DOES_NOT_HOLD", "NOT_RESOLVED", "CANNOT_TEST", "VERDICTS", "NOT_RUN",
           "LIKE_FOR_LIKE", "DIFFERS", "NOT_COMPARABLE", "NO_PAPER", "COMPARABILITY", "differs", "not_comparable",
           "comparability_kind", "Declared", "ClaimRow", "CLAIM_COLUMNS", "claims_table",
           "cannot_test", "holds_if", "kind", "short", "interval", "paired", "fmt_ci",
           "fmt_diff", "at_least", "below", "beats", "combine", "per_part", "holm", "holm_adjusted",
           "paired_p", "at_least_holm", "at_least_holm_p", "seeds_to_resolve", "headroom_gain", "headroom_gains",
           "target_accuracy", "fewer_bytes", "device_percentile", "mean_curve"]

# ------------------------------------------------------------------------------ the verdicts
HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
NOT_RESOLVED = "not resolved (interval spans the margin)"
CANNOT_TEST = "cannot be tested here"
#: the verdicts; the last always carries ": <reason>"
VERDICTS = (HOLDS, DOES_NOT_HOLD, NOT_RESOLVED, CANNOT_TEST)
#: not a verdict: the claim's runs are missing (fewer than two seeds)
NOT_RUN = "not run"
_DECIDED = (HOLDS, DOES_NOT_HOLD, NOT_RESOLVED)

# ------------------------------------------------------------------------------ comparability
LIKE_FOR_LIKE = "like for like"
DIFFERS = "differs"
NOT_COMPARABLE = "not comparable here"
#: the comparability of a claim with no experiment of the paper's to stand beside (ours, or not testable here)
NO_PAPER = "—"
#: the comparability labels; the middle two always carry ": <how>"
COMPARABILITY = (LIKE_FOR_LIKE, DIFFERS, NOT_COMPARABLE, NO_PAPER)


def _with_reason(label: str, reason: str) -> str:
    reason = reason.strip()
    if not reason or "|" in reason or "\n" in reason:
        raise ValueError(f"a '{label}' label needs a one-line reason without '|' (it is a table cell); got {reason!r}")
    return f"{label}: {reason}"


def differs(how: str) -> str:
    """'differs: <how>': the claim's quantity, measured in an experiment that differs from the paper's as ``how``
    says (ours, then the paper's). Declared before the runs; it qualifies every outcome alike."""
    return _with_reason(DIFFERS, how)


def not_comparable(how: str) -> str:
    """'not comparable here: <how>': the quantity measured here is not the one the paper's claim is about."""
    return _with_reason(NOT_COMPARABLE, how)


def cannot_test(reason: str) -> str:
    """'cannot be tested here: <reason>': the data or code the claim needs is not available offline; ``reason``
    says which."""
    return _with_reason(CANNOT_TEST, reason)


def comparability_kind(label: str) -> str:
    """Which of ``COMPARABILITY`` ``label`` is; ``ValueError`` for anything else."""
    if label in (LIKE_FOR_LIKE, NO_PAPER):
        return label
    for k in (DIFFERS, NOT_COMPARABLE):
        if label.startswith(k + ": ") and label[len(k) + 2:].strip():
            return k
    raise ValueError(f"not a comparability {list(COMPARABILITY)} (differs and not comparable here with ': <how>'): "
                     f"{label!r}")


class ClaimRow(NamedTuple):
    """One row of a claims table."""

    claim: str
    paper: str
    ours: str
    verdict: str
    comparability: str


#: the claims table's columns (``claims_table``); 'ours' takes the report's own heading
CLAIM_COLUMNS = ("claim", "paper", "ours", "verdict", "comparability")


@dataclass(frozen=True)
class Declared:
    """A report's comparabilities, declared once at import, before any result is read: claim key -> label.

    ``row`` joins a computed verdict with its claim's declared label and returns the verdict unchanged: a report
    cannot choose a label from an outcome, because it names only the claim's key.
    """

    setups: Mapping[str, str]

    def __post_init__(self) -> None:
        for key, label in self.setups.items():
            try:
                comparability_kind(label)
            except ValueError as err:
                raise ValueError(f"claim {key!r}: {err}") from None

    def row(self, key: str, claim: str, paper: str, ours: str, verdict: str) -> ClaimRow:
        """The row of claim ``key``: ``verdict`` as computed, beside the comparability declared for ``key``."""
        if key not in self.setups:
            raise KeyError(f"claim key {key!r} has no declared comparability; declare it in the report's table")
        if verdict != NOT_RUN:
            kind(verdict)
        return ClaimRow(claim, paper, ours, verdict, self.setups[key])


def claims_table(rows: Sequence[ClaimRow], ours: str = "ours") -> list[str]:
    """The markdown claims table: claim, paper, ours (headed ``ours``), verdict (bold), comparability."""
    from p2pfl.metrics.tables import markdown_table

    return markdown_table([(r.claim, r.paper, r.ours, f"**{r.verdict}**", r.comparability) for r in rows],
                          ["claim", "paper", ours, "verdict", "comparability"])


def holds_if(ok: bool) -> str:
    """``HOLDS`` or ``DOES_NOT_HOLD`` for a claim decided without an interval (a count, an equality)."""
    return HOLDS if ok else DOES_NOT_HOLD


def kind(verdict: str) -> str:
    """Which verdict ``verdict`` is (one of ``VERDICTS``): the exact string, or 'cannot be tested here: <reason>'.
    Raises ``ValueError`` for anything else (``NOT_RUN`` and every comparability label included)."""
    if verdict in _DECIDED:
        return verdict
    if verdict.startswith(CANNOT_TEST + ": ") and verdict[len(CANNOT_TEST) + 2:].strip():
        return CANNOT_TEST
    raise ValueError(f"not one of the verdicts {list(VERDICTS)} (the last with ': <reason>'): {verdict!r}")


def short(verdict: str) -> str:
    """A verdict's label without its parenthesis or reason: 'not resolved', 'cannot be tested here', ...; one of
    ``VERDICTS`` itself (a column heading) and ``NOT_RUN`` likewise."""
    return verdict if verdict == NOT_RUN else (verdict if verdict in VERDICTS else kind(verdict)).split(" (")[0]


def interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high) of the 95% t-interval; low and high are NaN for one value."""
    mean, _, lo, hi = ci95(values)
    return mean, lo, hi


def paired(a: dict[int, float], b: dict[int, float]) -> list[float]:
    """a - b per seed, over the seeds both have."""
    return [a[s] - b[s] for s in sorted(set(a) & set(b))]


def fmt_ci(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    """'mean ± half-width' (or 'mean (n=1)'; '—' for none)."""
    if not values:
        return "—"
    mean, lo, hi = interval(values)
    if math.isnan(lo):
        return f"{scale * mean:.{digits}f} (n=1)"
    return f"{scale * mean:.{digits}f} ± {scale * (hi - mean):.{digits}f}"


def fmt_diff(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    """A paired difference (default: in points of a rate): 'mean [low, high]'."""
    if not values:
        return "—"
    mean, lo, hi = interval(values)
    if math.isnan(lo):
        return f"{scale * mean:+.{digits}f} (n=1)"
    return f"{scale * mean:+.{digits}f} [{scale * lo:+.{digits}f}, {scale * hi:+.{digits}f}]"


def at_least(diffs: list[float], margin: float) -> str:
    """Verdict on 'a >= b - margin' from the paired differences a - b."""
    if len(diffs) < 2:
        return NOT_RUN
    _, lo, hi = interval(diffs)
    if lo >= -margin:
        return HOLDS
    if hi < -margin:
        return DOES_NOT_HOLD
    return NOT_RESOLVED


def below(diffs: list[float]) -> str:
    """Verdict on 'a < b' from the paired differences a - b (the margin is 0)."""
    if len(diffs) < 2:
        return NOT_RUN
    _, lo, hi = interval(diffs)
    if hi < 0:
        return HOLDS
    if lo >= 0:
        return DOES_NOT_HOLD
    return NOT_RESOLVED


def beats(diffs: list[float]) -> str:
    """Verdict on 'a > b' from the paired differences a - b: ``below`` on b - a."""
    return below([-d for d in diffs])


def combine(verdicts: list[str]) -> str:
    """One verdict for a claim checked in several cells (each from ``at_least`` or ``below``): holds only where it
    holds in every one, does not hold where it fails in one, else not resolved; not run if a cell was not."""
    if not verdicts or NOT_RUN in verdicts:
        return NOT_RUN
    if any(v not in _DECIDED for v in verdicts):
        raise ValueError(f"combine takes interval verdicts {list(_DECIDED)}; got {verdicts}")
    if all(v == HOLDS for v in verdicts):
        return HOLDS
    if any(v == DOES_NOT_HOLD for v in verdicts):
        return DOES_NOT_HOLD
    return NOT_RESOLVED


def per_part(diffs: Mapping[str, list[float]], verdict: Callable[[list[float]], str], *, sep: str = ": ",
             scale: float = 100.0, digits: int = 1) -> tuple[str, str]:
    """A claim checked part by part (per column, setting or method): 'part<sep>difference' (``fmt_diff``) joined by
    '; ', and the parts' verdicts ``combine``d (not run for no part)."""
    text = "; ".join(f"{part}{sep}{fmt_diff(d, scale, digits)}" for part, d in diffs.items())
    return text, combine([verdict(d) for d in diffs.values()])


# ------------------------------------------------------------------------------ multiple comparisons
def _check_p(pvalues: Sequence[float]) -> None:
    if any(not 0.0 <= p <= 1.0 for p in pvalues):  # also rejects NaN
        raise ValueError(f"p-values must lie in [0, 1], got {list(pvalues)}")


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Which hypotheses Holm's step-down procedure rejects, in input order (family-wise error <= alpha).

    Sorted ascending, p_(i) is rejected while p_(j) <= alpha / (m - j + 1) for every j <= i; the first
    failure stops it. Holm, S. (1979), "A simple sequentially rejective multiple test procedure",
    Scand. J. Statist. 6:65-70.
    """
    _check_p(pvalues)
    m = len(pvalues)
    out = [False] * m
    for i, k in enumerate(sorted(range(m), key=lambda k: pvalues[k])):
        if pvalues[k] > alpha / (m - i):
            break
        out[k] = True
    return out


def holm_adjusted(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values in input order: max over j <= i of (m - j + 1) p_(j), capped at 1 (Holm 1979).

    H_i is rejected by ``holm`` at level alpha exactly when its adjusted p-value is <= alpha.
    """
    _check_p(pvalues)
    m = len(pvalues)
    out = [0.0] * m
    running = 0.0
    for i, k in enumerate(sorted(range(m), key=lambda k: pvalues[k])):
        running = max(running, min(1.0, (m - i) * pvalues[k]))
        out[k] = running
    return out


def paired_p(diffs: Sequence[float], margin: float = 0.0, side: Literal["greater", "less"] = "greater") -> float:
    """One-sided paired t-test p-value on the per-seed differences (n - 1 degrees of freedom).

    ``side="greater"`` tests H0: mean(diff) <= margin against mean > margin; ``"less"`` tests
    H0: mean >= margin. NaN for fewer than two differences. Zero variance leaves no sampling error:
    0.0 when the common value lies strictly on the alternative's side of the margin, else 1.0.
    """
    if side not in ("greater", "less"):
        raise ValueError(f"side must be 'greater' or 'less', got {side!r}")
    n = len(diffs)
    if n < 2:
        return math.nan
    mean = float(statistics.mean(diffs))  # exact, as in ci95: equal values have sd 0
    sd = float(statistics.stdev(diffs))
    sign = 1.0 if side == "greater" else -1.0
    if sd == 0.0:
        return 0.0 if sign * (mean - margin) > 0 else 1.0
    from scipy.stats import t

    return float(t.sf(sign * (mean - margin) / (sd / math.sqrt(n)), n - 1))


def _at_least_pvalues(diffs_list: Sequence[Sequence[float]], margin: float, family: Optional[int]
                      ) -> tuple[list[int], list[float]]:
    """(the comparisons on two seeds or more, the p-values Holm's procedure takes: theirs in that order, then
    p = 1 for each planned one missing): ``at_least_holm``'s two-sided paired tests of mean(diff) = -margin."""
    tested = [k for k, d in enumerate(diffs_list) if len(d) >= 2]
    p = [min(1.0, 2 * min(paired_p(diffs_list[k], -margin, "greater"), paired_p(diffs_list[k], -margin, "less")))
         for k in tested]
    if family is not None:
        if family < len(p):
            raise ValueError(f"family={family} is smaller than the {len(p)} comparisons tested")
        p += [1.0] * (family - len(p))
    return tested, p


def at_least_holm_p(diffs_list: Sequence[Sequence[float]], margin: float,
                    family: Optional[int] = None) -> list[Optional[float]]:
    """The Holm-adjusted p-value behind each ``at_least_holm`` verdict (``holm_adjusted`` over the same family),
    in input order; None where fewer than two seeds ran. A verdict other than "not resolved" at level alpha is
    exactly an adjusted p-value <= alpha: the figure to print beside an unadjusted interval."""
    tested, p = _at_least_pvalues(diffs_list, margin, family)
    out: list[Optional[float]] = [None] * len(diffs_list)
    for k, a in zip(tested, holm_adjusted(p)):
        out[k] = a
    return out


def at_least_holm(diffs_list: Sequence[Sequence[float]], margin: float, alpha: float = 0.05,
                  family: Optional[int] = None) -> list[str]:
    """``at_least`` verdicts ('a >= b - margin', diffs a - b) for a table of m comparisons, Holm-corrected.

    Each comparison's two-sided paired t-test of mean(diff) = -margin, p = 2 min(p_greater, p_less)
    (``paired_p``), enters Holm's procedure at level ``alpha`` (``holm``); a rejection is read in the
    direction of the mean: "holds" when mean > -margin (a matches b within the margin), "does not hold"
    when mean < -margin. Rejection at Holm's step i is the (1 - alpha / (m - i + 1)) two-sided t-interval
    lying wholly above, resp. below, -margin, so for m = 1 this is ``at_least``. Otherwise the verdict is
    ``at_least``'s "not resolved" string: the adjusted p-value exceeds alpha (that interval spans the
    margin, or an earlier step stopped the procedure). Fewer than two seeds: "not run", left out of m.
    Directional decisions after Holm: Shaffer (1980), Ann. Statist. 8:1342-1347.

    ``family``: the comparisons planned, when some have not run yet (at least those tested here). Each one
    missing enters Holm's procedure as p = 1, so a verdict given now stands once they come in, whatever they
    show (their real p-values are at most 1, and Holm's thresholds only grow as they fall).
    """
    tested, p = _at_least_pvalues(diffs_list, margin, family)
    out = [NOT_RUN] * len(diffs_list)
    for k, rejected in zip(tested, holm(p, alpha)):
        if not rejected:
            out[k] = NOT_RESOLVED
        else:
            out[k] = HOLDS if statistics.mean(diffs_list[k]) > -margin else DOES_NOT_HOLD
    return out


def seeds_to_resolve(diffs: Sequence[float], margin: float, alpha: float = 0.05, family: int = 1,
                     cap: int = 100) -> Optional[int]:
    """A planning estimate, not a test: the fewest seeds at which the paired differences ``diffs`` would decide
    'a >= b - margin' (``at_least_holm``) if a rerun showed the same mean and sd: the two-sided
    (1 - alpha / family) t-interval, Holm's strictest step, clear of -margin. None: fewer than two values, or
    more than ``cap`` seeds. Past results do not promise a rerun's mean: this sizes a follow-up study."""
    if len(diffs) < 2:
        return None
    mean, sd = float(statistics.mean(diffs)), float(statistics.stdev(diffs))
    gap = abs(mean + margin)
    if sd == 0.0:
        return 2 if gap > 0 else None
    from scipy.stats import t

    q = 1 - alpha / (2 * family)
    return next((n for n in range(2, cap + 1) if t.ppf(q, n - 1) * sd / math.sqrt(n) < gap), None)


# ------------------------------------------------------------------------------ headline quantities
def headroom_gain(acc: float, local: float, oracle: float) -> float:
    """Share of the local-to-oracle headroom a method gains: (acc - local) / (oracle - local).

    NaN when oracle - local <= 0: the oracle is no better than training alone, so there is no headroom
    for collaboration to share and the ratio means nothing.
    """
    headroom = oracle - local
    return (acc - local) / headroom if headroom > 0 else math.nan


def headroom_gains(acc: dict[int, float], local: dict[int, float], oracle: dict[int, float]) -> list[float]:
    """``headroom_gain`` per seed, over the seeds all three have (in seed order): paired like ``paired``."""
    return [headroom_gain(acc[s], local[s], oracle[s]) for s in sorted(set(acc) & set(local) & set(oracle))]


def target_accuracy(local: float, oracle: float, fraction: float = 0.9) -> float:
    """The accuracy ``fraction`` of the way from local training to the oracle: local + fraction (oracle - local)."""
    return local + fraction * (oracle - local)


def fewer_bytes(a: float, b: float, tolerance: float = 0.10) -> bool:
    """Whether a counts as fewer bytes than b: a <= (1 - tolerance) b, so differences within the tolerance
    (e.g. 336.57 vs 334.03 MB at 10%) count as neither fewer nor more."""
    return a <= (1.0 - tolerance) * b


def device_percentile(values: Sequence[Optional[float]], q: float = 10.0) -> float:
    """The score of the device at the ``q``-th percentile (numpy's linear interpolation); devices never
    scored (None or NaN) are left out. ``q = 10``: the p10 device, the fleet's weak tail."""
    scored = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.percentile(np.asarray(scored, dtype=float), q))


def mean_curve(curves: Sequence[Sequence[Sequence[float]]]) -> list[tuple[float, ...]]:
    """A curve's mean over seeds: ``(round, mean of each other field)`` at every round all ``curves`` evaluated.

    Each curve is a sequence of points ``(round, value, ...)``, one per evaluation, all with the same fields;
    each mean is numpy's over the curves, in their order. A round some curve lacks is left out, so dropping
    a curve's points first (a log axis needs values above 0) drops those rounds for every seed.
    """
    by_round = [{p[0]: p for p in c} for c in curves]
    common = sorted(set.intersection(*(set(b) for b in by_round))) if by_round else []
    return [(r, *(float(np.mean([b[r][k] for b in by_round])) for k in range(1, len(by_round[0][r]))))
            for r in common]
