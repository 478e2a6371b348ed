"""analysis/reports/libero_report.py: the last evaluated round's per-task success, averaged over devices, in the
Table I layout (no LIBERO needed: it reads summaries)."""

from __future__ import annotations

import math

import pytest

from tests.helpers import analysis_module

from .conftest import needs_mujoco

pytestmark = pytest.mark.robotics

T0 = "libero_object/pick_up_the_alphabet_soup_and_place_it_in_the_basket"
T1 = "libero_object/pick_up_the_butter_and_place_it_in_the_basket"


def _log(round_: int, a: float, b: float) -> dict:
    return {"round": round_, "value": (a + b) / 2, "suite": "libero_object", "per_task": {T0: a, T1: b},
            "reach": {T0: 0.1 * a, T1: 0.1 * b}}


def test_last_round_per_task_is_averaged_over_the_devices() -> None:
    rep = analysis_module("libero_report")
    log = [_log(10, 1.0, 1.0), _log(20, 0.2, 0.0), _log(20, 0.6, 0.4)]  # a run's rollout_success log
    last, per_task = rep.final_per_task(log)
    assert last == 20 and per_task == {T0: 0.4, T1: 0.2}
    last, reach = rep.final_per_task(log, "reach")
    assert last == 20 and reach == pytest.approx({T0: 0.04, T1: 0.02})
    assert rep.final_per_task(log, "grasp") == (20, {})  # runs whose rollouts report no progress
    assert rep.short(T0) == "alphabet soup"


def test_the_curve_has_every_evaluated_rounds_success_and_bc_loss(tmp_path) -> None:
    rep = analysis_module("libero_report")
    log = [_log(10, 1.0, 0.5), _log(20, 0.2, 0.0), {**_log(20, 0.6, 0.4), "bc_test_loss": -3.0},
           {**_log(20, 0.6, 0.4), "bc_test_loss": -5.0}]
    got = rep.curve(log)
    assert [p[:2] for p in got] == [(10, 75.0), (20, pytest.approx(100 * (1.4 / 3 + 0.8 / 3) / 2))]
    assert math.isnan(got[0][2]) and got[1][2] == -4.0  # the devices that logged a loss
    assert got[0].reach_cm == pytest.approx(7.5) and math.isnan(got[0].lift)  # progress: m -> cm; no lift logged
    nan = math.nan
    rows = [{"label": "fedavg", "curve": got}, {"label": "fedavg", "curve": [rep.Point(20, 10.0, -2.0, 1.0, 0, 0, nan)]},
            {"label": "local", "curve": [rep.Point(20, 5.0, -1.0, 1.0, 0, nan, nan)]}]
    assert rep.figure(rows, tmp_path) == [f"![Success, BC test loss and progress per evaluated round]({rep.FIGURE})"]
    assert (tmp_path / rep.FIGURE).stat().st_size > 0
    rows = [{"label": "fedavg", "seed": 1, "curve": got}, {"label": "fedavg", "seed": 0, "curve": [(10, 0.0, -1.0), (20, 10.0, -2.0)]},
            {"label": "local", "seed": 0, "curve": [(20, 5.0, -1.0)]}]
    assert rep.loss_rises(rows) == []  # seed 1's one loss is its last, seed 0's falls; local: one scoring
    rows[1]["curve"] = [(10, 0.0, -6.0), (20, 10.0, -2.0)]
    rows[0]["curve"] = [(10, 75.0, -4.0), got[1], (30, 0.0, -4.0)]  # seed 1: -4.0 throughout, a tie is no rise
    assert rep.loss_rises(rows) == [("fedavg", 0, (10, 0.0, -6.0), (20, 10.0, -2.0))]
    rows[0]["curve"] = [got[0], got[1], (30, 0.0, -3.0)]  # round 10 has no loss: skipped
    assert rep.loss_rises(rows) == [("fedavg", 0, (10, 0.0, -6.0), (20, 10.0, -2.0)),
                                    ("fedavg", 1, got[1], (30, 0.0, -3.0))]
    assert "- Runs whose last policy imitates the held-out demos worse than an earlier one (BC test loss at its lowest " \
        "scoring vs at the last; success at those two scorings): FedAvg seed 0 -6.00 (round 10) vs -2.00, success 0.0% " \
        "vs 10.0%;" in "\n".join(rep.reading([{**r, "success": 0.0} for r in rows]))


def test_a_runs_largest_change_between_adjacent_scorings_against_the_rollouts_noise() -> None:
    rep = analysis_module("libero_report")
    rows = [{"label": "fedavg", "seed": 0, "episodes": 60, "curve": [(10, 0.0, -1.0), (20, 40.0, -2.0), (30, 30.0, -3.0)]},
            {"label": "centralized", "seed": 2, "episodes": 60, "curve": [(10, 5.0, -1.0), (20, 10.0, -1.0), (30, 63.3, -1.0),
                                                                          (40, 6.7, -1.0)]},
            {"label": "local", "seed": 0, "episodes": 300, "curve": [(50, 9.0, -1.0)]}]
    assert rep.swings(rows) == [(pytest.approx(56.6), "centralized", 2, (30, 63.3, -1.0), (40, 6.7, -1.0)),
                                (40.0, "fedavg", 0, (10, 0.0, -1.0), (20, 40.0, -2.0))]  # local: one scoring
    text = "\n".join(rep.reading([{**r, "success": 0.0} for r in rows]))
    assert "- Success from one scoring of a run to the next: the largest change of each run scored more than once is " \
        "48.3 points at the median of 2 runs, at most 56.6 (Centralized BC seed 2: 63.3% at round 30, 6.7% at round 40); " \
        "2 of the 2 change by more than 27.4, three times the standard deviation of the difference of two scorings of one " \
        "policy on 60 episodes each" in text
    rows[1]["curve"][2] = (30, 30.0, -1.0)  # 20.0 then 23.3: under 27.4
    assert "at most 40.0 (FedAvg seed 0: 0.0% at round 10, 40.0% at round 20); 1 of the 2 change" in \
        "\n".join(rep.reading([{**r, "success": 0.0} for r in rows]))


def test_table_rows_follow_the_paper_order_with_means_and_bytes() -> None:
    rep = analysis_module("libero_report")
    rows = [{"label": lab, "seed": 0, "round": 20, "per_task": {T0: a, T1: b}, "success": 50 * (a + b),
             "bytes": 4_000_000, "messages": 40, "sim_s": 1.0, "wall_s": 120.0}
            for lab, a, b in (("feddrman", 0.4, 0.2), ("local", 0.0, 0.2), ("fedavg", 0.2, 0.2), ("centralized", 0.6, 0.4))]
    lines = rep.table(rows)
    assert lines[0].startswith("| Method | alphabet soup SR (%) | butter SR (%) | Mean SR (%) |")
    assert [ln.split(" | ")[0] for ln in lines[2:]] == ["| Centralized BC", "| Local BC", "| FedAvg", "| FedDRMan"]
    assert lines[5] == "| FedDRMan | 40.0 (n=1) | 20.0 (n=1) | 30.0 (n=1) | 20 | 4.0 (0.10) | 2.0 | 88.0 |"
    text = "\n".join(rep.reading(rows))
    assert "FedDRMan − FedAvg: +10.0 (n=1) points, paired over 1 seed;" in text and "One seed cannot separate" in text
    assert "(Local 10.0%): Centralized − Local +40.0 (n=1) points paired over 1 seed (no interval with one)." in text


def test_with_seeds_the_reading_pairs_them_and_counts_every_episode() -> None:
    rep = analysis_module("libero_report")
    rows = [{"label": lab, "seed": seed, "round": 20, "per_task": {T0: v / 100}, "success": v, "episodes": 20,
             "bytes": 0, "messages": 0, "sim_s": 1.0, "wall_s": 60.0}
            for lab, values in (("centralized", (10, 20, 30)), ("local", (0, 5, 10)), ("fedavg", (20, 30, 20)),
                                ("feddrman", (25, 25)))
            for seed, v in enumerate(values)]
    text = "\n".join(rep.reading(rows))
    assert "(seeds: Centralized BC 3, Local BC 3, FedAvg 3, FedDRMan 2; 95% t-intervals in the table)." in text
    assert "FedDRMan − FedAvg: +0.0 [-63.5, +63.5] points, paired over 2 seeds;" in text
    assert "One seed cannot" not in text
    assert ("Successful episodes at the last round: Centralized BC 12 of 60, Local BC 3 of 60, FedAvg 14 of 60, "
            "FedDRMan 10 of 40 over the seeds") in text
    assert "Centralized − Local +15.0 [+2.6, +27.4] points paired over 3 seeds, pooling raised success at this budget." in text
    for r in rows:
        if r["label"] == "local":
            r["success"] = 40.0 - 20 * r["seed"]
    assert "Centralized − Local +0.0 [-74.5, +74.5] points paired over 3 seeds, not separated (the interval spans 0)." in "\n".join(rep.reading(rows))


def test_progress_columns_appear_when_every_run_reports_them() -> None:
    rep = analysis_module("libero_report")
    rows = [{"label": lab, "seed": 0, "round": 20, "per_task": {T0: 0.0}, "success": 0.0, "reach_cm": cm, "grasp": g,
             "bytes": 0, "messages": 0, "sim_s": 1.0, "wall_s": 60.0}
            for lab, cm, g in (("centralized", 2.5, 40.0), ("fedavg", 6.0, 0.0))]
    rows.append({**rows[1], "label": "local", "success": 100 * 2 / 75, "episodes": 75})
    rows[0]["episodes"] = rows[1]["episodes"] = 15
    lines = rep.table(rows)
    assert lines[0] == ("| Method | alphabet soup SR (%) | Mean SR (%) | Closest reach (cm) | Grasped (%) | Round | "
                        "Comm. MB (MB/msg) | Wall (min) | Paper Object SR (%) |")
    assert lines[2] == "| Centralized BC | 0.0 (n=1) | 0.0 (n=1) | 2.5 (n=1) | 40.0 (n=1) | 20 | 0 (-) | 1.0 | 56.0 |"
    text = "\n".join(rep.reading(rows))
    assert "success does not rank the methods" not in text  # Local completed 2 episodes
    assert "Successful episodes at the last round: Centralized BC 0 of 15, Local BC 2 of 75, FedAvg 0 of 15 " in text
    assert "without more seeds it does not separate the method from the run" in text
    assert "(Local 2.7%): Centralized − Local -2.7 (n=1) points paired over 1 seed (no interval with one)." in text
    assert "- Where the episodes stop, run by run: the table below" in text
    assert rep.stops_table(rows)[:3] == ["| Method | Seed | SR (%) | Closest reach (cm) | Grasped (%) |",
                                         "|---|---:|---:|---:|---:|", "| Centralized BC | 0 | 0.0 | 2.5 | 40.0 |"]
    rows[1]["reach_cm"] = None  # one run without progress: no column rather than a partial one
    assert "Closest reach" not in rep.table(rows)[0]


def test_best_of_k_and_bc_loss_columns_and_paired_ablations() -> None:
    rep = analysis_module("libero_report")
    assert rep.curve([{**_log(10, 0, 0), "bc_test_loss": 9.0}, {**_log(20, 0, 0), "bc_test_loss": 1.0},
                      {**_log(20, 0, 0), "bc_test_loss": 2.0}, _log(20, 0, 0)])[-1].loss == 1.5
    assert math.isnan(rep.curve([_log(20, 0, 0)])[-1].loss)  # a run from before the loss was logged
    succ = {("feddrman", 0): 60.0, ("feddrman", 1): 40.0, ("fedavg", 0): 50.0, ("fedavg", 1): 20.0,
            ("feddrman_no_sub", 0): 60.0, ("fedavg", 2): 10.0}
    bc = {"feddrman": 1.0, "fedavg": 2.0, "feddrman_no_sub": 3.0}
    rows = [{"label": lab, "seed": s, "round": 50, "per_task": {T0: v / 100}, "success": v, "best": v + 5,
             "best_k": 5.0, "bc_loss": bc[lab], "bytes": 0, "messages": 0, "sim_s": 1.0, "wall_s": 60.0}
            for (lab, s), v in succ.items()]
    lines = rep.table(rows)
    assert lines[0].startswith("| Method | alphabet soup SR (%) | Mean SR (%) | Best of last 5 SR (%) | BC test NLL | Round |")
    assert lines[2].startswith("| FedAvg | 26.7 ± 51.7 | 26.7 ± 51.7 | 31.7 ± 51.7 | 2.00 ± 0.00 | 50 |")
    abl = rep.ablations(rows)  # paired over the seeds both arms ran: FedDRMan - FedAvg on seeds 0 and 1
    assert abl[2] == "| FedDRMan − FedAvg | FedDRMan's server and terms together | 2 | +15.0 [-48.5, +78.5] |"
    assert abl[3] == "| FedDRMan − FedDRMan no L_sub | the subspace term L_sub | 1 | +0.0 (n=1) |"
    assert len(abl) == 4  # no FedAvg + SRB, no "no L_act" runs: their rows left out
    text = "\n".join(rep.reading(rows))
    assert "BC test loss (GMM NLL of the held-out demos' actions, lower is better): FedDRMan 1.00, FedAvg 2.00, " \
           "FedDRMan no L_sub 3.00. The order by loss differs from the order by success in 2 pairs (FedDRMan no L_sub " \
           "succeeds more than FedAvg and FedDRMan at a higher loss)" in text
    rows = [r for r in rows if r["label"] != "feddrman_no_sub"]
    assert "Loss and success agree on every pair of methods that success separates." in "\n".join(rep.reading(rows))
    for r in rows:  # FedAvg at FedDRMan's success: a tie orders nothing, whatever the losses
        r["success"] = 50.0
    assert "Loss and success agree" in "\n".join(rep.reading(rows))
    rows = [{**r, "success": 60.0 if r["label"] == "fedavg" else 40.0} for r in rows]
    assert "(FedAvg succeeds more than FedDRMan at a higher loss)" in "\n".join(rep.reading(rows))
    assert "Best of the last k evaluations vs the last one: FedAvg 31.7% vs 26.7%" in text
    for r in rows:
        r["bc_loss"] = None if r["label"] == "fedavg" and r["seed"] == 2 else r["bc_loss"]
    assert "BC test NLL" not in rep.table(rows)[0]  # one run without it: no partial column


def test_claims_print_each_verdict_as_computed_beside_the_declared_setting() -> None:
    rep = analysis_module("libero_report")
    budget = {"tasks": [T0, T1, "libero_object/pick_up_the_cream_cheese_and_place_it_in_the_basket"], "demos": 30,
              "history": 1, "wrist": True}
    succ = {"feddrman": (40.0, 50.0, 45.0), "fedavg": (10.0, 20.0, 12.0), "centralized": (30.0, 60.0, 20.0),
            "feddrman_no_sub": (50.0, 70.0, 60.0), "local": (60.0, 70.0, 65.0), "feddrman_no_act": (0.0, 0.0, 0.0)}
    rows = [{"label": lab, "seed": s, "success": v, "bytes": 275_500_000 if lab in ("fedavg", "feddrman") else 0}
            for lab, vs in succ.items() for s, v in enumerate(vs)]
    rows = [r for r in rows if not (r["label"] == "feddrman_no_act" and r["seed"] > 0)]  # one seed run
    got = {c.claim: (c.ours, c.verdict, c.comparability) for c in rep.claims(rows, budget)}
    table_i = f"differs: {rep.TABLE_I}"
    assert got["Table I (Object): FedDRMan beats FedAvg"] == ("FedDRMan − FedAvg: +31.0 [+26.7, +35.3] pts (3 seeds)",
                                                              "holds", table_i)
    assert got["Table I (Object): FedDRMan beats Centralized BC"][1:] == ("not resolved (interval spans the margin)",
                                                                          table_i)
    assert got["Table I (Object): FedDRMan beats Local BC"][1:] == ("does not hold", table_i)  # printed as computed
    assert got["Table III: removing L_sub lowers FedDRMan's success"][1:] == ("does not hold", f"differs: {rep.TABLE_III}")
    assert got["Table III: removing L_act lowers FedDRMan's success"][:2] == (
        "FedDRMan − FedDRMan no L_act: +40.0 (n=1) pts (1 seed)", "not run")
    assert got[rep.BYTES_CLAIM] == ("FedAvg 275.5 MB, FedDRMan 275.5 MB", "holds", "like for like")
    got = {c.claim: (c.ours, c.verdict) for c in rep.claims([r for r in rows if r["label"] not in ("feddrman",
                                                                                                   "centralized")], budget)}
    assert got["Table I (Object): FedDRMan beats FedAvg"] == ("—", "not run") and rep.BYTES_CLAIM not in got
    with pytest.raises(ValueError, match=r"the runs' setting \{'tasks': 2, 'params_m': 0.14\} is not the declared"):
        rep.claims(rows, {**budget, "tasks": [T0, T1]})


def test_lift_and_carry_columns_and_where_the_episodes_stop() -> None:
    rep = analysis_module("libero_report")
    rows = [{"label": lab, "seed": 0, "round": 50, "per_task": {T0: s / 100}, "success": s, "reach_cm": 1.5,
             "grasp": g, "lift": li, "carry_cm": c, "bytes": 0, "messages": 0, "sim_s": 1.0, "wall_s": 60.0}
            for lab, s, g, li, c in (("centralized", 0.0, 66.7, 40.0, 12.5), ("feddrman", 20.0, 80.0, 60.0, 4.0))]
    lines = rep.table(rows)
    assert "| Closest reach (cm) | Grasped (%) | Lifted (%) | Object to basket (cm) | Round |" in lines[0]
    assert lines[2].startswith("| Centralized BC | 0.0 (n=1) | 0.0 (n=1) | 1.5 (n=1) | 66.7 (n=1) | 40.0 (n=1) | 12.5 (n=1) |")
    assert "- Where the episodes stop, run by run: the table below" in "\n".join(rep.reading(rows))
    rows.append({**rows[0], "seed": 1, "success": 33.3, "reach_cm": 0.95, "grasp": 100.0})
    assert rep.stops_table(rows) == [
        "| Method | Seed | SR (%) | Closest reach (cm) | Grasped (%) | Lifted (%) | Object to basket (cm) |",
        "|---|---:|---:|---:|---:|---:|---:|",
        "| Centralized BC | 0 | 0.0 | 1.5 | 66.7 | 40.0 | 12.5 |", "| Centralized BC | 1 | 33.3 | 0.9 | 100.0 | 40.0 | 12.5 |",
        "| FedDRMan | 0 | 20.0 | 1.5 | 80.0 | 60.0 | 4.0 |"]
    rows[1]["lift"] = None  # a run from before lifts were scored: no partial columns
    assert "Lifted (%)" not in rep.table(rows)[0] and "Lifted (%)" not in rep.stops_table(rows)[0]


@needs_mujoco
@pytest.mark.slow
def test_rescoring_a_cells_saved_policies_reproduces_its_last_scores(tmp_path) -> None:
    """With the run's own gripper setting, rolling out the saved final policies again gives the run's last
    success exactly: the rescoring runs the same rollouts on the same weights (then it changes only the setting)."""
    import p2pfl
    from tests.helpers import robot_scenario

    rescore = analysis_module("libero_rescore")
    run = p2pfl.run(robot_scenario(tmp_path / "data", {"name": "local", "rounds": 1}, save_models="final"),
                    out=tmp_path / "run")
    got = rescore.rescore_cell(tmp_path / "run")
    assert got["binarize_gripper"] is False and got["round"] == 1 and got["policies"] == 4  # Local: four of its own
    assert got["success_per_node"] == run.summary["success_per_node"]
    assert got["success_mean"] == pytest.approx(run.summary["success_mean"], abs=1e-12)


def test_the_report_reads_each_folders_rescoring(tmp_path) -> None:
    """A rescoring is written beside the cells it rescored (the script's default) and read from there."""
    rep, rescore = analysis_module("libero_report"), analysis_module("libero_rescore")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    assert rescore.main([str(a)]) == 0 and not (a / rescore.RESCORE_FILE).exists()  # no saved models: nothing
    (a / rescore.RESCORE_FILE).write_text('{"fedavg__seed0": {"success_mean": 0.5}}')
    (b / rescore.RESCORE_FILE).write_text('{"feddrman__seed0": {"success_mean": 0.25}}')
    assert rep.rescored_in([a, b]) == {"fedavg__seed0": {"success_mean": 0.5}, "feddrman__seed0": {"success_mean": 0.25}}
    assert rep.rescored_in([tmp_path]) == {}


def test_the_binarization_check_pairs_rescored_cells_with_their_binarized_score() -> None:
    rep = analysis_module("libero_report")
    rows = [{"label": lab, "seed": s, "cell": f"{lab}__seed{s}", "success": v}
            for lab, s, v in (("fedavg", 0, 40.0), ("fedavg", 1, 20.0), ("feddrman", 0, 50.0), ("feddrman", 1, 30.0))]
    assert rep.binarization(rows, {}) == []
    rescored = {"fedavg__seed0": {"success_mean": 0.6}, "feddrman__seed0": {"success_mean": 0.5},
                "other__seed0": {"success_mean": 1.0}}
    lines = rep.binarization(rows, rescored)
    assert lines[2] == "| FedAvg | 1 | 40.0 (n=1) | 60.0 (n=1) | +20.0 (n=1) |"
    assert lines[3] == "| FedDRMan | 1 | 50.0 (n=1) | 50.0 (n=1) | +0.0 (n=1) |"
    assert lines[-1] == ("The methods' order by mean success changes with the gripper command (FedDRMan above FedAvg "
                         "binarized, below continuous): read both.")
    rescored["fedavg__seed0"]["success_mean"] = 0.3
    same = "The methods' order by mean success is the same both ways (no two methods swap places; a tie in one reading is no swap)."
    assert rep.binarization(rows, rescored)[-1] == same
    rescored["fedavg__seed0"]["success_mean"] = 0.5  # a tie continuous: no swap
    assert rep.binarization(rows, rescored)[-1] == same
    assert rep.swapped_pairs({"fedavg": 1.0, "local": 2.0, "feddrman": 3.0}, {"fedavg": 3.0, "local": 2.0, "feddrman": 1.0}) \
        == [("local", "fedavg"), ("feddrman", "local"), ("feddrman", "fedavg")]
    assert rep.by_first([("local", "fedavg"), ("feddrman", "local"), ("feddrman", "fedavg")]) \
        == {"local": ["fedavg"], "feddrman": ["local", "fedavg"]}
    assert [rep.and_list(w) for w in (["a"], ["a", "b"], ["a", "b", "c"])] == ["a", "a and b", "a, b and c"]


def test_the_archived_studys_budget_reads_the_federated_runs_scoring_interval() -> None:
    """Local BC scores only after its last round (no eval_every): the budget takes the interval from the runs
    that have one, whatever order the cells come in."""
    from pathlib import Path

    rep = analysis_module("libero_report")
    archive = Path(__file__).resolve().parents[2] / "analysis" / "cells" / "libero_object"
    rows, budget = rep.rows_from_runs([archive])
    assert {r["label"] for r in rows} >= {"local", "fedavg"}
    assert budget["eval_every"] == [10] and budget["episodes"] == 20


def test_the_runs_csv_has_a_row_per_run_in_the_tables_order() -> None:
    rep = analysis_module("libero_report")
    rows = [{"label": lab, "seed": seed, "round": 50, "per_task": {T0: a, T1: 0.1}, "success": 100 * (a + 0.1) / 2,
             "bc_loss": None, "bytes": 7, "messages": 2, "wall_s": 60.0, "episodes": 40}
            for lab, seed, a in (("fedavg", 1, 0.3), ("local", 0, 0.2), ("fedavg", 0, 1 / 3))]
    table = rep.runs_table(rows)
    assert table[0][:4] == ["method", "seed", "round", "success_pct"]
    assert table[0][-2:] == ["alphabet soup success_pct", "butter success_pct"]
    assert [r[:2] for r in table[1:]] == [["Local BC", 0], ["FedAvg", 0], ["FedAvg", 1]]
    head = table[0]
    assert table[2][head.index("success_pct")] == 21.6667 and table[2][-2:] == [33.3333, 10.0]
    assert table[2][head.index("bc_test_nll")] == "" and table[2][head.index("reach_cm")] == ""  # not in the run
