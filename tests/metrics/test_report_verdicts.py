"""The claims rows of the RND, Conditional and FedDRMan reports, on hand-made runs: each verdict printed as
computed, and beside it the comparability the report declared, the same whatever the outcome (issue 69)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from p2pfl.metrics.claims import CANNOT_TEST, DOES_NOT_HOLD, HOLDS, NO_PAPER, NOT_RESOLVED, NOT_RUN, kind
from tests.helpers import analysis_module


# ------------------------------------------------------------------------------------------ RND
def _rnd_runs(exact: dict[tuple[str, str, float, float], int], n: int = 10) -> pd.DataFrame:
    """load_runs rows of rnd_recovery: ``exact[(variant, kind, level, alpha)]`` of ``n`` seeds with ARI 1."""
    rows = []
    for (variant, mode, level, alpha), k in exact.items():
        part = {"kind": "feature_skew", "mode": mode, **({"rms": level} if mode == "pattern" else {"noise_std": level})}
        rows += [{"variant": variant, "grid.data.partition": json.dumps(part), "grid.protocol.alpha": alpha,
                  "ari": 1.0 if s < k else 0.5, "n_federations": 4, "seed": s} for s in range(n)]
    return pd.DataFrame(rows)


def _cols(lines: list[str]) -> dict[str, tuple[str, str]]:
    """claim -> (verdict, comparability) of a claims table's lines (bold stripped)."""
    cells = analysis_module("verdicts").cells
    return {r[0]: (r[3], r[4]) for r in (cells(line) for line in lines if line.startswith("| ")) if r[0] != "claim"}


def test_rnd_rows_print_the_verdict_as_computed_and_the_declared_difference_whatever_it_finds():
    rep = analysis_module("rnd_report")
    got = {}
    for found in (2, 10):  # fails or recovers at the authors' band: the same comparability either way
        table = rep.cells(_rnd_runs({("rnd_server", "noise", 0.15, 0.3): found, ("rnd_server", "noise", 0.15, 0.1): 10,
                                     ("rnd_server", "noise", 0.5, 0.2): 10}))
        recovered = [(v, f"{k} {lv:g}", a) for (v, k, lv, a), c in table.iterrows() if c.ok]
        got[found] = list(_cols(rep.claims(table, recovered, [("noise", 0.15), ("noise", 0.5)], 10, [])).values())
    assert got[2][0] == (DOES_NOT_HOLD, f"differs: {rep.AUTHORS_DIFFER}")  # read at the authors' alpha 0.3, not 0.1
    assert got[10][0] == (HOLDS, f"differs: {rep.AUTHORS_DIFFER}")
    assert got[2][1] == got[10][1] == (HOLDS, NO_PAPER)  # the strongest noise skew: ours, not the paper's
    assert got[2][2:] == [(NOT_RUN, NO_PAPER)] * 2  # no rnd_gossip runs here


def test_rnd_authors_code_rows_per_device_test_the_paper_shared_and_gossip_ask_ours():
    rep = analysis_module("rnd_report")
    runs = pd.DataFrame([{"variant": v, "grid.protocol.criterion": c, "scenario.protocol.predictor_init": init,
                          "grid.protocol.gap": 0.5 if c == "gap" else float("nan"), "ari": 1.0 if s < k else 0.5,
                          "seed": s}
                         for v, init, c, k in (("rnd_server", "per_device", "band", 10),
                                               ("rnd_server", "per_device", "gap", 3),
                                               ("rnd_server", "shared", "band", 10),
                                               ("rnd_gossip_local_h1", "per_device", "gap", 8))
                         for s in range(15)])  # seeds 10-14 calibrate only: never judged
    rows = rep.authors_code(runs)
    assert [(r.verdict, r.comparability) for r in rows] == [
        (HOLDS, f"differs: {rep.AUTHORS_CODE_DIFFER}"), (DOES_NOT_HOLD, f"differs: {rep.GAP_DIFFER}"),
        (HOLDS, NO_PAPER), (DOES_NOT_HOLD, NO_PAPER)]
    assert [r.ours for r in rows] == ["10/10 seeds exact", "3/10 seeds exact", "10/10 seeds exact", "8/10 seeds exact"]
    assert rows[1].claim.endswith("per-device predictors, criterion gap 0.5")
    assert rows[2].paper.startswith("our variant")
    missing = rep.authors_code(runs[runs["variant"] != "rnd_server"])
    assert [(r.claim.rsplit(", ", 1)[1], r.verdict) for r in missing[:2]] == [("criterion band", NOT_RUN),
                                                                               ("criterion gap", NOT_RUN)]


# ------------------------------------------------------------------------------------------ Conditional
def _cond_lines(rep, drop: float) -> dict[str, tuple[str, str]]:
    rows = []
    for variant in ("Cond-pooled", "Oracle", "Cond", "Local"):
        for exp in ("e3bs", "e1s", "e3bs_cnn28"):
            for s, noise in enumerate((-0.01, 0.0, 0.01)):
                rows += [{"exp": exp, "variant": variant, "col": "rich", "seed": s, "score": 0.9},
                         {"exp": exp, "variant": variant, "col": "super_sparse", "seed": s,
                          "score": 0.9 + (drop if exp.startswith("e3bs") else 0.0) + noise / 10}]
    return _cols(rep.claims(pd.DataFrame(rows), None))


def test_conditional_rows_keep_their_declared_comparability_whatever_the_outcome():
    rep = analysis_module("conditional_report")
    fall, flat = _cond_lines(rep, -0.30), _cond_lines(rep, 0.0)
    assert [c for _, c in fall.values()] == [c for _, c in flat.values()]  # the comparability never moves
    for model, label in (("MLP", f"differs: {rep.SPARSE_DIFFERS}"), ("cnn28", "like for like")):
        claim = f"E3b sparsity, {model}: Cond-pooled stays flat from rich to super sparse (within 2 points)"
        assert fall[claim] == (DOES_NOT_HOLD, label) and flat[claim] == (HOLDS, label)
    assert fall["E3b sparsity, MLP: Cond stays flat from rich to super sparse (within 2 points)"] == (
        DOES_NOT_HOLD, NO_PAPER)  # federated Conditional: ours
    assert fall["E1 sparsity, MLP: Local degrades from rich to super sparse"] == (
        NOT_RESOLVED, f"differs: {rep.SPARSE_DIFFERS}")  # no fall on e1s here: the interval spans 0
    assert fall["E1 sparsity, cnn28: Local degrades from rich to super sparse"] == (
        NOT_RUN, f"differs: {rep.FED_CNN28_DIFFERS}")
    assert not any("(there:" in claim for claim in fall)  # no gloss that is not in the paper
    assert fall["MCDC: the conditioned MLP closes at least 90% of the gap between the global and the cluster "
                "models (pooled: Centralized, Cond-pooled, Oracle)"][0] == NOT_RUN
    assert [kind(v) for k, (v, _) in fall.items() if k.startswith(("E4a", "E4b", "MNIST"))] == [CANNOT_TEST] * 3


def test_conditional_statistics_rows_read_the_ari_of_every_seed():
    rep = analysis_module("conditional_report")
    aris = {"E3b K=2": [0.06, 0.1, 0.0], "E3b K=5": [0.09, 0.1, 0.1], "E2b C1 [0, 180]": [1.0, 1.0, 1.0]}
    rows = rep.statistics_claims(aris)
    assert [(r.verdict, r.comparability) for r in rows] == [(DOES_NOT_HOLD, "like for like"), (HOLDS, "like for like")]
    assert rows[0].ours.startswith("E3b K=2: ARI 0.05 ± ")
    assert [r.verdict for r in rep.statistics_claims(None)] == [NOT_RUN, NOT_RUN]


# ------------------------------------------------------------------------------------------ FedDRMan
def _robot(table: str, label: str, suites: list[str], seed: int, success: float, groups: Any = ()) -> dict[str, Any]:
    return {"table": table, "label": label, "suites": suites, "seed": seed, "final": {s: success for s in suites},
            "cua_groups": [[1, list(g)] for g in groups], "per_suite": 2, "bytes_total": 1e6,
            "protocol": "feddrman" if label.startswith(("feddrman", "full", "BC")) else label, "revision": "r"}


def _feddrman_groups(rep: Any, split: list[list[int]]) -> Any:
    rows = []
    for s, e in enumerate((-0.01, 0.0, 0.01)):
        rows += [_robot("I", lab, ["object"], s, v + e) for lab, v in
                 (("feddrman", 0.5), ("fedavg", 0.7), ("fedprox", 0.6), ("fedkd", 0.1), ("local", 0.2),
                  ("centralized", 0.65))]
        rows += [_robot("II", lab, ["object", "goal"], s, v + e, [split] if lab == "feddrman" else ())
                 for lab, v in (("feddrman", 0.3), ("fedavg", 0.2), ("local", 0.2))]
        rows += [_robot("III", lab, ["object", "goal"], s, v + e, [split] if lab != "full-CUA" else ())
                 for lab, v in (("full", 0.3), ("full-CUA", 0.2), ("BC+CUA", 0.2), ("BC+act+CUA", 0.2),
                                ("BC+sub+CUA", 0.2), ("BC+sub+act+CUA", 0.2))]
    return rows, rep.group(rows)


def test_feddrman_rows_keep_their_declared_comparability_whatever_the_outcome():
    rep = analysis_module("feddrman_report")
    rows, groups = _feddrman_groups(rep, [[0, 1], [2, 3]])
    got = {r.claim: (r.verdict, r.comparability) for r in rep.claims(groups)}
    flipped = [{**r, "final": {s: 1.0 - v for s, v in r["final"].items()}} for r in rows]  # every ordering reversed
    back = {r.claim: (r.verdict, r.comparability) for r in rep.claims(rep.group(flipped))}
    assert [c for _, c in got.values()] == [c for _, c in back.values()]
    claim = "Table I: Centralized BC is below FedAvg"
    assert got[claim] == (HOLDS, f"differs: {rep.SETUP}") and back[claim] == (DOES_NOT_HOLD, f"differs: {rep.SETUP}")
    assert got["Table I: FedDRMan is the best federated method (mean over suites)"][0] == DOES_NOT_HOLD  # as computed
    assert got["Fig. 5a: CUA groups clients of one suite together and never across suites"][0] == HOLDS
    assert got["FedDRMan sends FedAvg's bytes"] == (HOLDS, "like for like")
    assert kind(got["Table I: FedVLA, the paper's sixth baseline, is below FedDRMan"][0]) == CANNOT_TEST


def test_feddrman_provenance_notes_stand_above_the_table_not_in_a_verdict(monkeypatch):
    rep = analysis_module("feddrman_report")
    rows, groups = _feddrman_groups(rep, [[0, 1, 2], [3]])
    monkeypatch.setattr(rep, "_includes", lambda rev, commit: False)
    notes = rep.provenance_notes(rows, groups)
    assert notes[0] == f"Caution: these runs predate commit {rep.FIXES[0][0]} ({rep.FIXES[0][1]}); re-run them " \
                       "(`p2pfl archive verify`)."
    assert notes[1].startswith("Table III: CUA never separated object from goal")
    monkeypatch.setattr(rep, "_includes", lambda rev, commit: True)
    assert rep.provenance_notes(*_feddrman_groups(rep, [[0, 1], [2, 3]])) == []
    assert rep.cua_separates([_robot("III", "full", ["object", "goal"], 0, 0.1, [[[0], [1, 2, 3]], [[0, 1], [2, 3]]])])


def test_includes_cannot_tell_without_a_revision():
    rep = analysis_module("feddrman_report")
    assert rep._includes(None, "63664ba") is None and rep._includes(float("nan"), "63664ba") is None


def test_feddrman_claims_not_run_yet_are_listed_below_the_table_without_a_verdict():
    rep = analysis_module("feddrman_report")
    row = rep.DECLARED.row
    lines = rep.claims_table([row("bytes", "a", "p", "o", HOLDS), row("success", "b", "p", "—", NOT_RUN),
                              row("success", "c", "p", "—", NOT_RUN)])
    assert lines[0] == "| claim | paper | ours (paired difference, points) | verdict | comparability |"
    assert lines[2:] == ["| a | p | o | **holds** | like for like |", "", "Not run yet (no verdict): b; c."]
    assert rep.claims_table([row("success", "b", "p", "—", NOT_RUN)]) == ["", "Not run yet (no verdict): b."]


def test_feddrman_budget_states_each_tables_value_where_the_tables_differ():
    rep = analysis_module("feddrman_report")
    assert rep.per_table({"I": {5}, "II": {5}}) == "5"
    # Table II's 2 clients per suite must not stand for Table I's 5 (the last run read used to set the line)
    assert rep.per_table({"II": {2}, "I": {5}, "III": {2}}) == "5 (Table I), 2 (Table II), 2 (Table III)"
    assert rep.per_table({"I": {20, 50}}) == "20/50 (Table I)"


def test_feddrman_coverage_counts_runs_against_the_planned_cells():
    rep = analysis_module("feddrman_report")
    rows = [{"study": "feddrman_table1"}] * 3 + [{"study": "feddrman_table2"}]
    line = rep._coverage(rows, {"feddrman_table1": 75, "feddrman_table2": 80})[0]
    assert line.startswith("Runs per study: feddrman_table1 3 of 75, feddrman_table2 1 of 80. Not run yet: "
                           "feddrman_table1_feddrman, feddrman_table2_feddrman, feddrman_table3 (")
    # the planned cells come from the studies on disk
    assert rep.study_cells()["feddrman_table2"] == 80


def test_rnd_gap_is_calibrated_on_its_own_cells_ties_to_the_median_threshold():
    import numpy as np

    rep = analysis_module("rnd_report")
    truth = [0, 0, 0, 1, 1, 1]
    U = np.where(np.equal.outer(truth, truth), 1.2, 2.0)
    np.fill_diagonal(U, 1.0)  # in-group gap 0.2, cross-group gap 1.0
    chosen, exact = rep.calibrate_gap([(U, truth), (U, truth)])
    assert [g for g, k in exact.items() if k == 2] == [0.2, 0.3, 0.4, 0.5, 0.75]  # 1.0 merges the groups
    assert chosen == 0.4 and exact[0.1] == 0 and exact[1.0] == 0


def test_headline_v3_pilot_round_budget_reads_the_gain_over_the_last_fifth():
    rep = analysis_module("headline_v3_pilot")
    curve = [(4 * k, 0.5 + 0.1 * (1 - 0.9 ** k)) for k in range(1, 61)]  # rises ever more slowly to round 240
    r = rep.round_budget(curve)
    before = max(q for q, _ in curve if q <= 0.8 * r)
    acc = dict(curve)
    assert acc[r] - acc[before] < 0.003
    earlier = [q for q, _ in curve if q < r and [p for p, _ in curve if p <= 0.8 * q]]
    assert all(acc[q] - acc[max(p for p, _ in curve if p <= 0.8 * q)] >= 0.003 for q in earlier)
    assert rep.round_budget([(4 * k, 0.01 * k) for k in range(1, 61)]) is None  # still rising 1 point a step
