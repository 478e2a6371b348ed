"""The claims vocabulary (issue 69): a verdict computed from the numbers and a comparability declared before the
results are read, two columns that never decide each other; every report's claims table speaks both."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import p2pfl.metrics.claims as claims_module
from analysis.manifest import load as load_manifest
from p2pfl.metrics.claims import (
    CANNOT_TEST,
    COMPARABILITY,
    DIFFERS,
    DOES_NOT_HOLD,
    HOLDS,
    LIKE_FOR_LIKE,
    NO_PAPER,
    NOT_COMPARABLE,
    NOT_RESOLVED,
    NOT_RUN,
    VERDICTS,
    ClaimRow,
    Declared,
    at_least,
    below,
    cannot_test,
    claims_table,
    combine,
    comparability_kind,
    differs,
    holds_if,
    kind,
    not_comparable,
    short,
)
from tests.helpers import analysis_module, analysis_path

ROOT = Path(__file__).resolve().parents[2]
#: the report builders with a claims table (the manifest's entries with claims), each declaring its comparabilities in
#: a module-level ``Declared``
REPORTS = tuple(Path(e.script).stem for e in load_manifest().entries if e.claims is not None and e.script is not None)


def test_the_verdicts_and_comparabilities_are_these_strings():
    assert VERDICTS == ("holds", "does not hold", "not resolved (interval spans the margin)", "cannot be tested here")
    assert (HOLDS, DOES_NOT_HOLD, NOT_RESOLVED, CANNOT_TEST) == VERDICTS
    assert COMPARABILITY == ("like for like", "differs", "not comparable here", "—")
    assert (LIKE_FOR_LIKE, DIFFERS, NOT_COMPARABLE, NO_PAPER) == COMPARABILITY
    assert differs("MLP here, cnn28 in the paper") == "differs: MLP here, cnn28 in the paper"
    assert not_comparable("accuracy here, AUC there") == "not comparable here: accuracy here, AUC there"
    assert cannot_test("no real MNIST on this machine") == "cannot be tested here: no real MNIST on this machine"
    assert holds_if(True) == "holds" and holds_if(False) == "does not hold"


@pytest.mark.parametrize("reason", ["", "  ", "a | b", "two\nlines"])
def test_a_reason_is_one_table_cell(reason):
    for label in (not_comparable, cannot_test, differs):
        with pytest.raises(ValueError, match="needs a one-line reason"):
            label(reason)


def test_a_declared_row_prints_every_verdict_as_computed_beside_its_declared_comparability():
    declared = Declared({"model": differs("an MLP here"), "same": LIKE_FOR_LIKE, "ours": NO_PAPER})
    for verdict in (HOLDS, DOES_NOT_HOLD, NOT_RESOLVED, NOT_RUN, cannot_test("no data")):
        for key, label in declared.setups.items():
            assert declared.row(key, "c", "p", "o", verdict) == ClaimRow("c", "p", "o", verdict, label)
    with pytest.raises(KeyError, match="claim key 'other' has no declared comparability"):
        declared.row("other", "c", "p", "o", HOLDS)
    with pytest.raises(ValueError, match="not one of the verdicts"):
        declared.row("same", "c", "p", "o", not_comparable("x"))  # a comparability is not a verdict
    with pytest.raises(ValueError, match="claim 'bad': not a comparability"):
        Declared({"bad": "comparable-ish"})


def test_no_claims_function_takes_a_verdict_to_change():
    """The API has no parameter that names verdicts to turn (the old ``downgrade(..., turns=...)``)."""
    assert not hasattr(claims_module, "downgrade")
    for name in claims_module.__all__:
        obj = getattr(claims_module, name)
        if callable(obj) and not isinstance(obj, type):
            params = set(inspect.signature(obj).parameters)
            assert not params & {"turns", "turn", "relabel", "when"}, (name, params)


def _comparability_calls(tree: ast.Module) -> list[ast.Call]:
    names = {"differs", "not_comparable", "Declared"}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in names]


@pytest.mark.parametrize("report", REPORTS)
def test_a_report_declares_each_comparability_at_import_and_rows_name_only_a_key(report):
    """No report code path can choose a comparability from an outcome: every ``differs``/``not_comparable``/
    ``Declared`` call sits at module level (evaluated at import, before any result is read), and every
    ``DECLARED.row`` call names its claim key without a comparison or a conditional (a key picked by an outcome)."""
    tree = ast.parse(analysis_path(report).read_text(encoding="utf-8"))
    in_functions = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.Lambda))
                    for n in ast.walk(f)}
    calls = _comparability_calls(tree)
    assert any(isinstance(c.func, ast.Name) and c.func.id == "Declared" for c in calls), f"{report}: no Declared table"
    assert [ast.unparse(c)[:60] for c in calls if id(c) in in_functions] == []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "row") or (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "row"):
            key = node.args[0] if node.args else None
            assert (key is not None and not any(isinstance(n, (ast.Compare, ast.IfExp, ast.BoolOp))
                                               for n in ast.walk(key))) or (
                isinstance(key, ast.IfExp) and isinstance(key.test, ast.Compare)
                and all((isinstance(n, ast.Name) and n.id in ("c", "criterion")) or isinstance(n, ast.Constant)
                        for n in (key.test.left, *key.test.comparators))), f"{report}: {ast.unparse(node)[:80]}"
    assert "downgrade" not in analysis_path(report).read_text(encoding="utf-8")


def test_kind_and_short_name_the_verdict_and_comparability_kind_the_setup():
    assert [kind(v) for v in VERDICTS[:3]] == list(VERDICTS[:3])
    assert kind(cannot_test("y")) == CANNOT_TEST
    assert [short(v) for v in (HOLDS, DOES_NOT_HOLD, NOT_RESOLVED, cannot_test("y"), NOT_RUN)] == [
        "holds", "does not hold", "not resolved", "cannot be tested here", "not run"]
    for bad in ("not resolved", "not resolved (interval spans 0)", "not comparable here: x", "differs: x",
                "cannot be tested here (no data)", "Holds", NOT_RUN):
        with pytest.raises(ValueError, match="not one of the verdicts"):
            kind(bad)
    assert [comparability_kind(c) for c in (LIKE_FOR_LIKE, differs("x"), not_comparable("y"), NO_PAPER)] == list(
        COMPARABILITY)
    for bad in ("differs", "differs: ", "not comparable here", HOLDS, "like-for-like"):
        with pytest.raises(ValueError, match="not a comparability"):
            comparability_kind(bad)


def _column(lines: list[str], header: str) -> list[str]:
    """The cells of one column of a markdown table, bold markers stripped."""
    cells = analysis_module("verdicts").cells  # the page's own row parser
    col = cells(lines[0]).index(header)
    return [cells(line)[col] for line in lines[2:]]


def test_a_claims_table_built_with_the_helpers_parses_in_both_columns():
    declared = Declared({"a": LIKE_FOR_LIKE, "m": differs("an MLP here, the paper's cnn28"), "u": NO_PAPER})
    rows = [declared.row("a", "a beats b", "80 vs 69", "+2.0 [+0.5, +3.5]", below([-0.10, -0.12, -0.11])),
            declared.row("a", "a matches b", "-0.1", "-0.1 [-0.2, +0.0]", at_least([-0.001, -0.002, 0.0], 0.01)),
            declared.row("m", "a beats c", "1 vs 0", "-1.0 [-3.0, +1.0]", combine([below([-0.01, 0.02, -0.005]), HOLDS])),
            declared.row("m", "a flat at super sparse", "0.94 -> 0.94", "-10.8 [-14.4, -7.2]",
                         at_least([-0.10, -0.11, -0.12], 0.02)),
            declared.row("u", "E4a", "Table XIX", "—", cannot_test("no real MNIST on this machine"))]
    lines = claims_table(rows)
    assert lines[0] == "| claim | paper | ours | verdict | comparability |"
    assert [kind(v) for v in _column(lines, "verdict")] == [HOLDS, HOLDS, NOT_RESOLVED, DOES_NOT_HOLD, CANNOT_TEST]
    assert [comparability_kind(c) for c in _column(lines, "comparability")] == [
        LIKE_FOR_LIKE, LIKE_FOR_LIKE, DIFFERS, DIFFERS, NO_PAPER]


@pytest.mark.parametrize("report", ["conditional.md", "feddrman.md", "rnd_recovery.md", "libero_object.md",
                                    "rnd_overhead.md"])
def test_every_committed_claims_table_speaks_both_columns(report):
    tables = analysis_module("verdicts").claims_tables((ROOT / "analysis" / "results" / report).read_text())
    assert tables, f"{report} has no claims table"
    for t in tables:
        for v in _column(t, "verdict"):
            if v != NOT_RUN:
                kind(v)  # raises on anything but a verdict
        for c in _column(t, "comparability"):
            comparability_kind(c)


def test_the_headline_matches_column_speaks_the_verdicts():
    md = (ROOT / "analysis" / "results" / "server_vs_serverless.md").read_text(encoding="utf-8").splitlines()
    section = md.index("## Serverless arms against IFCA")  # the exploratory comparisons (the confirmatory ones above)
    start = next(i for i in range(section, len(md)) if md[i].startswith("| fleet | serverless arm |"))
    end = next(i for i in range(start, len(md)) if not md[i].startswith("|"))
    cells = _column(md[start:end], "matches (Holm, margin 0.10)")
    # a comparison, or 'cannot be tested here' where the arm has no evaluation at IFCA's traffic to pair
    assert cells and all(kind(v) in (HOLDS, DOES_NOT_HOLD, NOT_RESOLVED, CANNOT_TEST) for v in cells)


def test_the_verdicts_page_counts_verdicts_and_comparabilities_apart(tmp_path):
    verdicts = analysis_module("verdicts")
    decl = Declared({"l": LIKE_FOR_LIKE, "d": differs("Fashion-MNIST here"), "n": not_comparable("accuracy here"),
                     "o": NO_PAPER})
    tables = {"conditional.md": [decl.row("l", "E1 flat", "0.94", "-0.3 [-0.5, -0.0]", HOLDS),
                                 decl.row("o", "E4a", "Table XIX", "—", cannot_test("no real MNIST"))],
              "rnd_recovery.md": [decl.row("d", "groups emerge", "Fig. 2", "2/10", DOES_NOT_HOLD),
                                  decl.row("o", "gossip finds them", "not evaluated", "0/7", DOES_NOT_HOLD)],
              "feddrman.md": [decl.row("d", "beats FedAvg", "88 vs 75", "-3.8 [-12.2, +4.6]", NOT_RESOLVED)],
              "libero_object.md": [decl.row("l", "beats FedAvg", "88 vs 75", "-6.7 (n=1)", NOT_RUN),
                                   decl.row("n", "bytes", "21.5", "275.5", DOES_NOT_HOLD)],
              "rnd_overhead.md": [decl.row("d", "Fig. 3", "10x", "11.6x", HOLDS)]}
    for name, rows in tables.items():
        (tmp_path / name).write_text("# r\n\n" + "\n".join(claims_table(rows)) + "\n\nafter\n| x | y |\n|---|---|\n| 1 | 2 |\n")
    assert verdicts.main(["--results", str(tmp_path)]) == 0
    page = (tmp_path / "verdicts.md").read_text().splitlines()
    v = page[page.index("| report | claims | holds | does not hold | not resolved | cannot be tested here | not run "
                        "| in all |") + 2:]
    assert v[0].endswith("(`conditional.md`) | the paper's | 1 | 0 | 0 | 1 | 0 | 2 |")
    assert v[2].endswith("(`rnd_recovery.md`) | beyond the paper | 0 | 1 | 0 | 0 | 0 | 1 |")
    assert v[6:8] == ["| all | the papers' | 2 | 2 | 1 | 1 | 1 | 7 |", "| all | beyond the papers | 0 | 1 | 0 | 0 | 0 | 1 |"]
    c = page[page.index("| report | claims | like for like | differs | not comparable here | — | in all |") + 2:]
    assert c[0].endswith("(`conditional.md`) | the paper's | 1 | 0 | 0 | 1 | 2 |")
    assert c[6:8] == ["| all | the papers' | 2 | 3 | 1 | 1 | 7 |", "| all | beyond the papers | 0 | 0 | 0 | 1 | 1 |"]
    x = page[page.index("| verdict | like for like | differs | not comparable here | — | in all |") + 2:]
    assert x[:5] == ["| holds | 1 | 1 | 0 | 0 | 2 |", "| does not hold | 0 | 1 | 1 | 0 | 2 |",
                     "| not resolved | 0 | 1 | 0 | 0 | 1 |", "| cannot be tested here | 0 | 0 | 0 | 1 | 1 |",
                     "| not run | 1 | 0 | 0 | 0 | 1 |"]
    paper, ours = page.index("## The papers' claims"), page.index("## Questions beyond the papers")
    row = ("| FedDRMan (generated MuJoCo suites) | beats FedAvg | 88 vs 75 | -3.8 [-12.2, +4.6] | not resolved (interval "
           "spans the margin) | differs: Fashion-MNIST here |")
    assert paper < page.index(row) < ours
    (tmp_path / "feddrman.md").write_text("| claim | verdict | comparability |\n|---|---|---|\n| beats FedAvg | not sourced "
                                          "here | — |\n")
    assert verdicts.main(["--results", str(tmp_path), "--md", str(tmp_path / "other.md")]) == 2
    assert not (tmp_path / "other.md").exists()  # nothing half-written
    with pytest.raises(ValueError, match=r"feddrman\.md: claim 'beats FedAvg': not one of the verdicts"):
        verdicts.compile_md(tmp_path)
    (tmp_path / "feddrman.md").write_text("| claim | verdict | comparability |\n|---|---|---|\n| beats FedAvg | holds | "
                                          "roughly |\n")
    with pytest.raises(ValueError, match=r"feddrman\.md: claim 'beats FedAvg': not a comparability"):
        verdicts.compile_md(tmp_path)
    (tmp_path / "feddrman.md").write_text("no table\n")
    with pytest.raises(ValueError, match=r"feddrman\.md: no claims table"):
        verdicts.compile_md(tmp_path)


def test_the_committed_verdicts_page_is_what_the_committed_reports_give():
    """analysis/results/verdicts.md regenerated after every report it gathers (python analysis/reports/verdicts.py)."""
    verdicts = analysis_module("verdicts")
    committed = (ROOT / "analysis" / "results" / "verdicts.md").read_text(encoding="utf-8")
    assert verdicts.compile_md(ROOT / "analysis" / "results") == committed
