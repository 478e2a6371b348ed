"""analysis/reports/libero_factors_report.py on hand-made rows: the factor table's success with 95% t-intervals over
seeds, the paired difference to the baseline, the grasp diagnostics, the CPU-hours, and the reading (the goal, the
factors ruled out, the remaining gap). Every number here is worked by hand in the comments (t(0.975, 2) = 4.3027)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import analysis_module

pytestmark = pytest.mark.robotics

T = "libero_object/pick_up_the_butter_and_place_it_in_the_basket"


def _row(v: str, seed: int, sr: float, *, reach: float = 2.0, grasp: float = 50.0, bc: float | None = -20.0,
         wall: float = 3600.0, ck: int | None = None) -> dict[str, Any]:
    return {"variant": v, "seed": seed, "round": 50, "success": sr, "per_task": {T: sr / 100}, "bc_loss": bc,
            "reach_cm": reach, "grasp": grasp, "lift": 50.0, "carry_cm": 30.0, "checkpoint_round": ck,
            "wall_s": wall, "cores": 2}


ROWS = [_row("baseline", 0, 0.0, reach=4.0, grasp=10.0), _row("baseline", 1, 30.0, reach=1.0, grasp=70.0),
        _row("baseline", 2, 6.0, reach=1.0, grasp=40.0),
        _row("lr_1e-4", 0, 40.0), _row("lr_1e-4", 1, 70.0), _row("lr_1e-4", 2, 46.0),
        _row("image_64", 2, 8.0, wall=7200.0), _row("image_64", 0, 2.0, wall=7200.0), _row("image_64", 1, 28.0, wall=7200.0),
        _row("policy_1.7m", 0, 10.0, wall=1800.0),
        _row("best_val_nll", 0, 0.0, ck=30, bc=None), _row("best_val_nll", 1, 30.0, ck=50, bc=None),
        _row("best_val_nll", 2, 6.0, ck=40, bc=None)]


def test_the_factor_table_has_each_variants_success_difference_diagnostics_and_cpu_hours() -> None:
    rep = analysis_module("libero_factors_report")
    table = rep.factor_table(ROWS)
    assert table[0] == ("| Variant | Changes | Seeds | SR (%) | SR by seed (%) | − baseline (points, 95% CI) | Reads | "
                        "Closest reach (cm) | Grasped (%) | Lifted (%) | Object to basket (cm) | BC test NLL | "
                        "Checkpoint round | CPU-h |")
    # baseline 0/30/6: mean 12, sd sqrt(252), half-width 4.3027 x 15.875 / sqrt(3) = 39.4; reach 4/1/1: 2 ± 4.3;
    # grasped 10/70/40: 40 ± 74.5; 3 cells x 1 h x 2 cores = 6.0 CPU-h
    assert table[2] == ("| Baseline (today) | lr 1e-3, 32 px, demos from the default arm pose, 0.14 M parameters, last "
                        "round | 3 | 12.0 ± 39.4 | 0.0 / 30.0 / 6.0 | — | — | 2.0 ± 4.3 | 40.0 ± 74.5 | 50.0 ± 0.0 | "
                        "30.0 ± 0.0 | -20.00 ± 0.00 | — | 6.0 |")
    # every seed +40 over the baseline: the interval is the point, above 0
    assert table[3] == ("| (a) lr 1e-4 | training.lr: 1e-4 (the paper's) | 3 | 52.0 ± 39.4 | 40.0 / 70.0 / 46.0 | "
                        "+40.0 [+40.0, +40.0] | raises | 2.0 ± 0.0 | 50.0 ± 0.0 | 50.0 ± 0.0 | 30.0 ± 0.0 | "
                        "-20.00 ± 0.00 | — | 6.0 |")
    # differences +2/-2/+2 (rows given out of seed order): mean 0.67, sd 2.309, half-width 5.74; 3 x 2 h x 2 = 12
    assert table[4] == ("| (b) 64 px images | data.partition.image_px: 64 (renders 128 px in every variant) | 3 | "
                        "12.7 ± 33.8 | 2.0 / 28.0 / 8.0 | +0.7 [-5.1, +6.4] | not separated | 2.0 ± 0.0 | 50.0 ± 0.0 | "
                        "50.0 ± 0.0 | 30.0 ± 0.0 | -20.00 ± 0.00 | — | 12.0 |")
    assert table[5] == ("| (d) 1.73 M-parameter policy | model.options: width 256, depth 2, channels 32 | 1 | 10.0 (n=1) | "
                        "10.0 | +10.0 (n=1) | one seed | 2.0 (n=1) | 50.0 (n=1) | 50.0 (n=1) | 30.0 (n=1) | "
                        "-20.00 (n=1) | — | 1.0 |")
    # a difference of 0 every seed is not separated from 0 (neither raises nor lowers); no BC NLL logged: '—'
    assert table[6] == ("| (e) best checkpoint by validation NLL | protocol.checkpoint: best_val_nll (3 validation demos a "
                        "task) | 3 | 12.0 ± 39.4 | 0.0 / 30.0 / 6.0 | +0.0 [+0.0, +0.0] | not separated | 2.0 ± 0.0 | "
                        "50.0 ± 0.0 | 50.0 ± 0.0 | 30.0 ± 0.0 | — | 30 / 50 / 40 | 6.0 |")
    assert len(table) == 7
    assert rep.cpu_hours(ROWS) == 31.0  # 6 + 6 + 12 + 1 + 6
    runs = rep.runs_table(ROWS)
    assert runs[2] == "| Baseline (today) | 0 | 0.0 | 0.0 | 4.0 | 10.0 | 50.0 | 30.0 | -20.00 | 2.00 |"
    assert runs[8] == "| (b) 64 px images | 0 | 2.0 | 2.0 | 2.0 | 50.0 | 50.0 | 30.0 | -20.00 | 4.00 |"  # seed order
    assert runs[-1] == "| (e) best checkpoint by validation NLL | 2 | 6.0 | 6.0 | 2.0 | 50.0 | 50.0 | 30.0 | — | 2.00 |"


def test_the_reading_names_the_goal_the_factors_ruled_out_and_the_cost() -> None:
    rep = analysis_module("libero_factors_report")
    text = rep.reading(ROWS)
    assert text[0] == ("- Mean success at the last evaluated round: Baseline (today) 12.0%, (a) lr 1e-4 52.0%, (b) 64 px "
                       "images 12.7%, (d) 1.73 M-parameter policy 10.0%, (e) best checkpoint by validation NLL 12.0%.")
    assert text[1] == ("- The goal, a centralized policy at >= 50% mean success: reached by (a) lr 1e-4 (52.0%, its "
                       "interval's low end 12.6%); the federated methods are re-run at that setting next (issue 69).")
    # the gap 50 - 12 = 38: (b)'s interval ends at +6.4 and (e)'s at 0, below it; (a)'s reaches +40; (d): one seed
    assert text[2] == ("- The gap from the baseline (12.0%) to 50% is 38.0 points. Ruled out as closing it alone (the "
                       "paired difference's whole interval below it): (b) 64 px images (at most +6.4), (e) best "
                       "checkpoint by validation NLL (at most +0.0). Not ruled out (the interval reaches the gap; more "
                       "seeds, or factors together, tell): (a) lr 1e-4 (up to +40.0).")
    assert text[3] == "- The study cost 31.0 CPU-hours (13 cells)."
    short = [r for r in ROWS if r["variant"] != "lr_1e-4"]
    text = rep.reading(short)
    assert text[1] == "- The goal, a centralized policy at >= 50% mean success: not reached by any variant."
    assert text[3] == ("- Remaining gap: the best variant, (b) 64 px images, is 37.3 points short of 50%; the study cost "
                       "25.0 CPU-hours (10 cells), 2.5 a cell on average.")
