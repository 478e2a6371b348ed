"""Every paper claim's verdict and comparability, gathered from the reproduction reports' claims tables: the papers'
claims apart from our questions beyond them.

    python analysis/reports/verdicts.py          # -> analysis/results/verdicts.md

Each report regenerates from its archived study by the command at its top; this reads the claims tables
(the markdown tables with a 'verdict' column) of the reports as committed, so it is as current as they are:
regenerate it after any of them. A row whose runs are missing reads 'not run' (not a verdict; a complete
report has none). Every other verdict is one of ``p2pfl.metrics.claims.VERDICTS``, and every comparability one
of ``COMPARABILITY`` (a cell that is not stops this with its report and row). The two columns are counted apart:
the verdict is computed from the numbers, the comparability declared per claim before the runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from p2pfl.metrics.claims import COMPARABILITY, NOT_RUN, VERDICTS, comparability_kind, short
from p2pfl.metrics.tables import markdown_table

try:
    from analysis.manifest import load as load_manifest
except ModuleNotFoundError:  # run as a script (python analysis/reports/verdicts.py): the repository root is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from analysis.manifest import load as load_manifest

RESULTS = Path(__file__).parents[1] / "results"
#: the reports with claims on a paper, and the paper (``../shared/papers/``) they test: the manifest's entries with
#: ``claims``, in its order (``analysis/manifest.yaml``)
REPORTS = tuple((str(Path(page).relative_to("analysis/results")), paper)
                for page, paper in load_manifest().claims_pages())
LABELS = [short(v) for v in VERDICTS] + [NOT_RUN]
SETUPS = list(COMPARABILITY)
#: a claim whose 'paper' cell starts so is a question of ours the paper does not test (its table has no such number)
BEYOND = ("not in the paper", "not tested in the paper", "not evaluated", "implied", "our variant")


def claims_tables(text: str) -> list[list[str]]:
    """Every markdown table in ``text`` (its lines, header first) whose header has a 'verdict' column."""
    tables: list[list[str]] = []
    cur: list[str] = []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            tables.append(cur)
            cur = []
    return [t for t in tables if "verdict" in cells(t[0])]


def cells(line: str) -> list[str]:
    """A markdown table row's cells, stripped (bold markers too)."""
    return [c.strip().strip("*").strip() for c in line.strip().strip("|").split(" | ")]


def claims(text: str, source: str = "report") -> list[dict[str, str]]:
    """The rows of ``text``'s claims tables: claim, paper, ours, verdict (checked: one of ``VERDICTS``, or 'not
    run') and comparability (one of ``COMPARABILITY``). ``ValueError`` naming ``source`` and the row for anything
    else, or for a report without a table."""
    tables = claims_tables(text)
    if not tables:
        raise ValueError(f"{source}: no claims table (a markdown table with a 'verdict' column)")
    rows = []
    for t in tables:
        head = cells(t[0])
        for line in t[2:]:
            row = dict(zip(head, cells(line)))
            verdict = row.get("verdict", "")
            setup = row.get("comparability", "")
            try:
                short(verdict)
                comparability_kind(setup)
            except ValueError as err:
                raise ValueError(f"{source}: claim {row.get('claim', '?')!r}: {err}") from None
            ours = next((v for k, v in row.items() if k.startswith("ours")), "—")
            rows.append({"claim": row.get("claim", "—"), "paper": row.get("paper", "—"), "ours": ours,
                         "verdict": verdict, "comparability": setup})
    return rows


def beyond(row: dict[str, str]) -> bool:
    """Whether ``row`` asks a question the paper does not test (``BEYOND``: its 'paper' cell says so)."""
    return row["paper"].lower().startswith(BEYOND)


def compile_md(results: Path) -> str:
    """The verdicts page: per report, the computed verdicts and the declared comparabilities counted apart, the
    papers' claims apart from our questions beyond them; the papers' claims crossed (verdict x comparability);
    then every claim in two tables."""
    verdicts, setups, tables = [], [], {False: [], True: []}
    totals = {scope: (dict.fromkeys(LABELS, 0), dict.fromkeys(SETUPS, 0)) for scope in (False, True)}
    cross = {(v, c): 0 for v in LABELS for c in SETUPS}
    for name, paper in REPORTS:
        path = results / name
        if not path.is_file():
            raise ValueError(f"{path}: missing (regenerate it by the command at its top, or run from the repository)")
        rows = claims(path.read_text(encoding="utf-8"), str(path))
        for scope in (False, True):
            picked = [r for r in rows if beyond(r) == scope]
            per_v, per_c = dict.fromkeys(LABELS, 0), dict.fromkeys(SETUPS, 0)
            for r in picked:
                v, c = short(r["verdict"]), comparability_kind(r["comparability"])
                per_v[v] += 1
                per_c[c] += 1
                if not scope:
                    cross[v, c] += 1
                tables[scope].append((paper, r["claim"], r["paper"], r["ours"], r["verdict"], r["comparability"]))
            for total, per in zip(totals[scope], (per_v, per_c)):
                for k in per:
                    total[k] += per[k]
            if picked:
                label = (f"{paper} (`{name}`)", "beyond the paper" if scope else "the paper's")
                verdicts.append((*label, *map(str, per_v.values()), str(len(picked))))
                setups.append((*label, *map(str, per_c.values()), str(len(picked))))
    for scope in (False, True):
        label = ("all", "beyond the papers" if scope else "the papers'")
        verdicts.append((*label, *map(str, totals[scope][0].values()), str(sum(totals[scope][0].values()))))
        setups.append((*label, *map(str, totals[scope][1].values()), str(sum(totals[scope][1].values()))))
    crossed = [(v, *(str(cross[v, c]) for c in SETUPS), str(sum(cross[v, c] for c in SETUPS))) for v in LABELS]
    return "\n".join([
        "# Every claim's verdict and comparability: the papers' claims, then our questions beyond them", "",
        "Regenerate: `python analysis/reports/verdicts.py` (from the committed reports in `analysis/results/`; each "
        "regenerates from its archived study by the command at its top).", "",
        "Each claim has two columns that never decide each other (`p2pfl.metrics.claims`). The **verdict** is "
        "computed from the numbers and printed as computed: holds / does not hold (the 95% interval wholly on one "
        "side of the claim's margin, or a count or equality met or missed) / not resolved (the interval spans the "
        "margin) / cannot be tested here (data or code not available offline); 'not run': the claim's runs are not "
        "all in yet (no verdict). The **comparability** is declared per claim in the report's code before its "
        "results are read, and qualifies every outcome alike: like for like / differs (the paper's quantity, "
        "measured in an experiment that differs as it says) / not comparable here (the quantity measured is not the "
        "paper's) / — (a question beyond the paper, or a claim that cannot be tested).", "",
        "## Verdicts (computed)", "",
        *markdown_table(verdicts, ["report", "claims", *LABELS, "in all"]), "",
        "## Comparability (declared before the runs)", "",
        *markdown_table(setups, ["report", "claims", *SETUPS, "in all"]), "",
        "## The papers' claims: verdict by comparability", "",
        *markdown_table(crossed, ["verdict", *SETUPS, "in all"]), "",
        "## The papers' claims", "",
        "Each with the number the paper reports, our number, the verdict as computed, and how our experiment "
        "stands to the paper's.", "",
        *markdown_table(tables[False], ["paper", "claim", "paper's result", "ours", "verdict", "comparability"]), "",
        "## Questions beyond the papers", "",
        "Ours, asked with the papers' methods where the paper reports no number (its 'paper' cell says so: "
        "a federated variant of a pooled method, a decentralized version the paper proposes without evaluating, a "
        "property it implies, a variant of our own); a 'does not hold' here is about our question, not the paper's.",
        "",
        *markdown_table(tables[True], ["paper", "claim", "paper's result", "ours", "verdict", "comparability"]), ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help=f"the reports' folder (default {RESULTS})")
    ap.add_argument("--md", type=Path, help="the page to write (default: RESULTS/verdicts.md)")
    args = ap.parse_args(argv)
    md = args.md or args.results / "verdicts.md"
    try:
        text = compile_md(args.results)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    tmp = md.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, md)  # whole or not at all
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
