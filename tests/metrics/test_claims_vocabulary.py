"""The five verdicts every claims table speaks (issue 34): exact strings, the downgrade to 'not comparable here',
and every verdict column the reports write parses as one of the five."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2pfl.metrics.claims import (
    CANNOT_TEST,
    DOES_NOT_HOLD,
    HOLDS,
    NOT_COMPARABLE,
    NOT_RESOLVED,
    NOT_RUN,
    VERDICTS,
    at_least,
    below,
    cannot_test,
    combine,
    downgrade,
    holds_if,
    kind,
    not_comparable,
    short,
)
from p2pfl.metrics.tables import markdown_table
from tests.helpers import analysis_module

ROOT = Path(__file__).resolve().parents[2]


def test_the_five_verdicts_are_these_strings():
    assert VERDICTS == ("holds", "does not hold", "not resolved (interval spans the margin)", "not comparable here",
                        "cannot be tested here")
    assert (HOLDS, DOES_NOT_HOLD, NOT_RESOLVED, NOT_COMPARABLE, CANNOT_TEST) == VERDICTS
    assert not_comparable("MLP here, cnn28 in the paper") == "not comparable here: MLP here, cnn28 in the paper"
    assert cannot_test("no real MNIST on this machine") == "cannot be tested here: no real MNIST on this machine"
    assert holds_if(True) == "holds" and holds_if(False) == "does not hold"


@pytest.mark.parametrize("reason", ["", "   ", "a | b", "two\nlines"])
def test_a_reason_is_one_table_cell(reason):
    with pytest.raises(ValueError, match="needs a one-line reason"):
        not_comparable(reason)
    with pytest.raises(ValueError, match="needs a one-line reason"):
        cannot_test(reason)


def test_downgrade_turns_a_computed_verdict_when_a_listed_difference_applies():
    why = "30 samples a client here, about 300 in the paper"
    for v in (HOLDS, DOES_NOT_HOLD, NOT_RESOLVED):
        assert downgrade(v, why) == f"not comparable here: {why}"
        assert downgrade(v, None) == v  # no difference listed: the computed verdict stands
    # a difference that can only make the claim harder here leaves a 'holds' standing
    assert downgrade(HOLDS, why, turns=(DOES_NOT_HOLD, NOT_RESOLVED)) == "holds"
    assert downgrade(DOES_NOT_HOLD, why, turns=(DOES_NOT_HOLD,)) == f"not comparable here: {why}"
    assert downgrade(NOT_RESOLVED, why, turns=(DOES_NOT_HOLD,)) == NOT_RESOLVED
    assert downgrade(NOT_RUN, why) == "not run"  # missing runs stay missing
    with pytest.raises(ValueError, match="turns must be among"):
        downgrade(HOLDS, why, turns=(not_comparable("x"),))


def test_kind_and_short_name_the_verdict():
    assert [kind(v) for v in VERDICTS[:3]] == list(VERDICTS[:3])
    assert kind(not_comparable("x")) == NOT_COMPARABLE and kind(cannot_test("y")) == CANNOT_TEST
    assert [short(v) for v in (HOLDS, DOES_NOT_HOLD, NOT_RESOLVED, not_comparable("x"), cannot_test("y"), NOT_RUN)] == [
        "holds", "does not hold", "not resolved", "not comparable here", "cannot be tested here", "not run"]
    for bad in ("not resolved", "not resolved (interval spans 0)", "not sourced here", "not comparable here",
                "cannot be tested here (no data)", "Holds", NOT_RUN):
        with pytest.raises(ValueError, match="not one of the five verdicts"):
            kind(bad)


def _verdict_column(lines: list[str], header: str = "verdict") -> list[str]:
    """The cells of one column of a markdown table, bold markers stripped."""
    cells = analysis_module("verdicts").cells  # the page's own row parser
    col = cells(lines[0]).index(header)
    return [cells(line)[col] for line in lines[2:]]


def test_a_claims_table_built_with_the_helpers_parses_as_the_five():
    why = "an MLP here, the paper's cnn28"
    rows = [("a beats b", "80 vs 69", "+2.0 [+0.5, +3.5]", below([-0.10, -0.12, -0.11])),
            ("a matches b", "-0.1", "-0.1 [-0.2, +0.0]", at_least([-0.001, -0.002, 0.0], 0.01)),
            ("a beats c", "1 vs 0", "-1.0 [-3.0, +1.0]", combine([below([-0.01, 0.02, -0.005]), HOLDS])),
            ("a flat at super sparse", "0.94 -> 0.94", "-10.8 [-14.4, -7.2]", downgrade(DOES_NOT_HOLD, why)),
            ("E4a", "Table XIX", "—", cannot_test("no real MNIST on this machine"))]
    lines = markdown_table([(c, p, o, f"**{v}**") for c, p, o, v in rows], ["claim", "paper", "ours", "verdict"])
    assert [kind(v) for v in _verdict_column(lines)] == [HOLDS, HOLDS, NOT_RESOLVED, NOT_COMPARABLE, CANNOT_TEST]


@pytest.mark.parametrize("report", ["conditional.md", "feddrman.md", "rnd_recovery.md"])
def test_every_committed_claims_table_speaks_the_five_verdicts(report):
    tables = analysis_module("verdicts").claims_tables((ROOT / "analysis" / "results" / report).read_text())
    assert tables, f"{report} has no claims table"
    for t in tables:
        for v in _verdict_column(t):
            kind(v)  # raises on anything but the five


def test_the_headline_matches_column_speaks_the_five_verdicts():
    md = (ROOT / "analysis" / "results" / "server_vs_serverless.md").read_text(encoding="utf-8").splitlines()
    section = md.index("## Serverless arms against IFCA")  # the exploratory comparisons (the confirmatory ones above)
    start = next(i for i in range(section, len(md)) if md[i].startswith("| fleet | serverless arm |"))
    end = next(i for i in range(start, len(md)) if not md[i].startswith("|"))
    cells = _verdict_column(md[start:end], "matches (Holm, margin 0.10)")
    # a comparison, or 'cannot be tested here' where the arm has no evaluation at IFCA's traffic to pair
    assert cells and all(kind(v) in (HOLDS, DOES_NOT_HOLD, NOT_RESOLVED, CANNOT_TEST) for v in cells)


def test_the_verdicts_page_counts_and_lists_every_claim_of_each_report(tmp_path):
    verdicts = analysis_module("verdicts")
    head = ["claim", "paper", "ours (paired)", "verdict"]
    tables = {"conditional.md": [("E1 flat", "0.94", "-0.3 [-0.5, -0.0]", f"**{HOLDS}**"),
                                 ("E4a", "Table XIX", "—", cannot_test("no real MNIST"))],
              "rnd_recovery.md": [("groups emerge", "Fig. 2", "2/10", not_comparable("Fashion-MNIST here")),
                                  ("gossip finds them", "not evaluated", "0/7", DOES_NOT_HOLD)],
              "feddrman.md": [("beats FedAvg", "88 vs 75", "-3.8 [-12.2, +4.6]", NOT_RESOLVED)],
              "libero_object.md": [("beats FedAvg", "88 vs 75", "-6.7 (n=1)", NOT_RUN), ("bytes", "21.5", "275.5", DOES_NOT_HOLD)]}
    for name, rows in tables.items():
        (tmp_path / name).write_text("# r\n\n" + "\n".join(markdown_table(rows, head)) + "\n\nafter\n| x | y |\n|---|---|\n| 1 | 2 |\n")
    assert verdicts.main(["--results", str(tmp_path)]) == 0
    page = (tmp_path / "verdicts.md").read_text().splitlines()
    counts = page[page.index("| report | claims | holds | does not hold | not resolved | not comparable here | "
                             "cannot be tested here | not run | in all |") + 2:]
    assert counts[0].endswith("(`conditional.md`) | the paper's | 1 | 0 | 0 | 0 | 1 | 0 | 2 |")
    assert counts[2].endswith("(`rnd_recovery.md`) | beyond the paper | 0 | 1 | 0 | 0 | 0 | 0 | 1 |")
    assert counts[4].endswith("(`libero_object.md`) | the paper's | 0 | 1 | 0 | 0 | 0 | 1 | 2 |")
    assert counts[5:7] == ["| all | the papers' | 1 | 1 | 1 | 1 | 1 | 1 | 6 |",
                           "| all | beyond the papers | 0 | 1 | 0 | 0 | 0 | 0 | 1 |"]
    paper, ours = page.index("## The papers' claims"), page.index("## Questions beyond the papers")
    row = "| FedDRMan (generated MuJoCo suites) | beats FedAvg | 88 vs 75 | -3.8 [-12.2, +4.6] | not resolved (interval spans the margin) |"
    assert paper < page.index(row) < ours
    assert page.index("| RND for clustered FL (federation discovery) | gossip finds them | not evaluated | 0/7 | does not hold |") > ours
    (tmp_path / "feddrman.md").write_text("| claim | verdict |\n|---|---|\n| beats FedAvg | not sourced here |\n")
    assert verdicts.main(["--results", str(tmp_path), "--md", str(tmp_path / "other.md")]) == 2
    assert not (tmp_path / "other.md").exists()  # nothing half-written
    with pytest.raises(ValueError, match=r"feddrman\.md: claim 'beats FedAvg': not one of the five verdicts"):
        verdicts.compile_md(tmp_path)
    (tmp_path / "feddrman.md").write_text("no table\n")
    with pytest.raises(ValueError, match=r"feddrman\.md: no claims table"):
        verdicts.compile_md(tmp_path)


def test_the_committed_verdicts_page_is_what_the_committed_reports_give():
    """analysis/results/verdicts.md regenerated after every report it gathers (python analysis/verdicts.py)."""
    verdicts = analysis_module("verdicts")
    committed = (ROOT / "analysis" / "results" / "verdicts.md").read_text(encoding="utf-8")
    assert verdicts.compile_md(ROOT / "analysis" / "results") == committed
