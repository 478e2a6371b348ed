"""FedDRMan vs FedAvg vs Local, with a centralized reference, on real LIBERO-Object (the paper's Table I layout).

    python -m p2pfl.robotics.libero_demos --suite libero_object --tasks 0,3,6 --demos 30 --noise 0.2 --lod 0.0005 --out ~/.cache/p2pfl/libero_lod/libero_object
    p2pfl sweep scenarios/studies/libero_object.yaml --jobs 1 --out runs/libero_object --archive analysis/cells/libero_object
    python analysis/reports/libero_report.py analysis/cells/libero_object        # -> analysis/results/libero_object.md

(and beside it ``libero_object_runs.csv``, one row per run, and ``libero_object_curves.png``, success and BC
test loss per evaluated round).

Reads the run directories (or their archived cells) through ``p2pfl.metrics.runs``: each run's rollout
success per task from its ``rollout_success`` log (one entry per device and evaluated round), with the
policy's BC test loss where the log has it, the best of the last k evaluations from its summary
(``success_best_of_last_k``), its bytes, messages and wall time from ``load_runs`` (``timing.wall_s``), the
budget from its ``scenario.*`` columns. A cell is the success (%) at the last evaluated round, averaged over
the devices (Local: over its 5 policies, as the paper's Local BC), then over seeds (± the 95% t-interval's
half-width when there are several). Ablations are read as paired differences over the seeds both arms ran.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib
from matplotlib.figure import Figure

from p2pfl.metrics.claims import (
    DOES_NOT_HOLD,
    HOLDS,
    LIKE_FOR_LIKE,
    NOT_RESOLVED,
    ClaimRow,
    Declared,
    beats,
    cannot_test,
    claims_table,
    differs,
    fmt_ci,
    fmt_diff,
    holds_if,
    mean_curve,
    paired,
)
from p2pfl.metrics.runs import load_runs, log_entries
from p2pfl.metrics.tables import markdown_table, report_main
from p2pfl.study.verify import provenance_lines

STUDY = "libero_object"
ORDER = ("centralized", "local", "fedavg", "feddrman", "fedavg_srb", "feddrman_no_sub", "feddrman_no_act")
LABELS = {"centralized": "Centralized BC", "local": "Local BC", "fedavg": "FedAvg", "feddrman": "FedDRMan",
          "fedavg_srb": "FedAvg + SRB", "feddrman_no_sub": "FedDRMan no L_sub", "feddrman_no_act": "FedDRMan no L_act"}
#: The paper's LIBERO-Object column of Table I (SR %, all 10 tasks, 50 rounds, 3 seeds).
PAPER_OBJECT = {"centralized": 56.0, "local": 27.2, "fedavg": 75.2, "feddrman": 88.0}
COMMAND = ("python -m p2pfl.robotics.libero_demos --suite libero_object --tasks 0,3,6 --demos 30 --noise 0.2 "
           "--lod 0.0005 --out ~/.cache/p2pfl/libero_lod/libero_object\n"
           "p2pfl sweep scenarios/studies/libero_object.yaml --jobs 1 --out runs/libero_object "
           "--archive analysis/cells/libero_object\n"
           "python analysis/reports/libero_report.py analysis/cells/libero_object")
#: (arm, its reference, what the difference isolates): paired over seeds
ABLATIONS = (("feddrman", "fedavg", "FedDRMan's server and terms together"),
             ("fedavg_srb", "fedavg", "spectral rebalancing (SRB) alone"),
             ("feddrman", "feddrman_no_sub", "the subspace term L_sub"),
             ("feddrman", "feddrman_no_act", "the action term L_act"))

#: (claim, arm a, arm b, the paper's numbers, which table): each 'a beats b', on the paired differences a - b (points)
CLAIMS = (("Table I (Object): FedDRMan beats FedAvg", "feddrman", "fedavg", "88.0 vs 75.2", "I"),
          ("Table I (Object): FedDRMan beats Local BC", "feddrman", "local", "88.0 vs 27.2", "I"),
          ("Table I (Object): FedAvg beats Local BC", "fedavg", "local", "75.2 vs 27.2", "I"),
          ("Table I (Object): Centralized BC is below FedAvg", "fedavg", "centralized", "56.0 vs 75.2", "I"),
          ("Table I (Object): FedDRMan beats Centralized BC", "feddrman", "centralized", "88.0 vs 56.0", "I"),
          ("Table III: removing L_sub lowers FedDRMan's success", "feddrman", "feddrman_no_sub",
           "85/70 -> 35/55 (object/goal)", "III"),
          ("Table III: removing L_act lowers FedDRMan's success", "feddrman", "feddrman_no_act",
           "85/70 -> 60/50 (object/goal)", "III"))
#: How our ablation arms differ from the paper's Table III rows.
TABLE_III = ("the paper's Table III removes the term on its Object-Goal federation, with CUA's clusters and without "
             "SRB; here on LIBERO-Object with one cluster (C = 1) and SRB kept")
#: The study's setting (scenarios/studies/libero_object.yaml), as the Table I rows differ from the paper's; the
#: report checks the runs against it (``SETTING``) so the declaration cannot drift from what ran.
TABLE_I = ("3 of LIBERO-Object's 10 tasks, scripted demos and a 0.14 M-parameter policy on 32 px images here; the "
           "paper's 10 tasks, 50 human demos a task and 5.38 M parameters")
SETTING = {"tasks": 3, "params_m": 0.14}
#: Every claims row's comparability, by key: declared at import, before any result is read (issue 69).
DECLARED = Declared({"I": differs(TABLE_I), "III": differs(TABLE_III), "bytes": LIKE_FOR_LIKE})
BYTES_CLAIM = "FedDRMan sends FedAvg's bytes"


def per_task_at(log: list[dict[str, Any]], round_: int, key: str = "per_task") -> dict[str, float]:
    """Task -> ``key`` averaged over the devices evaluated at ``round_`` in a run's ``rollout_success`` log:
    ``per_task`` is the success, ``reach`` the closest the gripper came to the task's object (m), ``grasp`` the
    share of episodes that held it (the last two only in logs of runs whose rollouts report progress)."""
    per: dict[str, list[float]] = {}
    for e in log:
        if e["round"] == round_:
            for task, v in (e.get(key) if isinstance(e.get(key), dict) else {}).items():
                per.setdefault(task, []).append(v)
    return {t: sum(v) / len(v) for t, v in sorted(per.items())}


def final_per_task(log: list[dict[str, Any]], key: str = "per_task") -> tuple[int, dict[str, float]]:
    """(last evaluated round, ``per_task_at`` that round) of a run's ``rollout_success`` log."""
    if not log:
        raise SystemExit("a run has no rollout_success log: not a robot run")
    last = max(e["round"] for e in log)
    return last, per_task_at(log, last, key)


def bc_loss_at(log: list[dict[str, Any]], round_: int) -> float | None:
    """The policy's BC test loss (GMM NLL on the held-out demos) at ``round_``, averaged over the devices that
    report one; None for logs without it (runs from before it was logged)."""
    values = [e["bc_test_loss"] for e in log if e["round"] == round_ and e.get("bc_test_loss") is not None]
    return sum(values) / len(values) if values else None


class Point(NamedTuple):
    """One evaluated round of a run: success (%) and progress averaged over the devices per task, then over the
    tasks (as the table's means); the BC test loss over the devices; NaN where the log has no such field."""

    round: int
    success: float
    loss: float
    reach_cm: float
    grasp: float
    lift: float
    carry_cm: float


def curve(log: list[dict[str, Any]]) -> list[Point]:
    """A run's ``Point`` at every evaluated round."""
    def mean(per: dict[str, float]) -> float:
        return 100 * sum(per.values()) / len(per) if per else math.nan

    out = []
    for r in sorted({int(e["round"]) for e in log}):
        loss = bc_loss_at(log, r)
        out.append(Point(r, mean(per_task_at(log, r)), math.nan if loss is None else loss,
                         *(mean(per_task_at(log, r, key)) for key in ("reach", "grasp", "lift", "carry"))))
    return out


def rows_from_runs(dirs: list[Path]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per run of the study, and the budget from their scenarios."""
    runs = load_runs(*dirs)
    logs = log_entries(*dirs, name="rollout_success")
    rows, budget, every = [], {}, set()
    for _, r in runs[runs["study"] == STUDY].iterrows():
        log = logs.get(r["path"], [])
        sc = {k.removeprefix("scenario."): v for k, v in r.items() if k.startswith("scenario.")}
        part, files = "data.partition.", json.loads(sc["data.partition.libero_tasks.libero_object"])
        if _number(sc["protocol.eval_every"]) is not None:  # Local scores once, after the last round
            every.add(int(sc["protocol.eval_every"]))
        budget = {"rounds": sc["protocol.rounds"],
                  "episodes": sc[part + "eval_episodes"], "horizon": sc[part + "horizons.libero_object"],
                  "demos": sc[part + "demos_per_task"], "history": sc[part + "history"],
                  "wrist": sc.get(part + "wrist") in (True,), "clients": sc[part + "clients_per_suite"],
                  "alpha": sc[part + "alpha"], "tasks": [Path(f).stem.removesuffix("_demo") for f in files],
                  "binarize": sc.get(part + "binarize_gripper") in (True,),
                  "lod": _number(sc.get(part + "render_lod")) or 0.0,
                  "dart": demos_have_labels(sc["data.root"], files)}
        last, per_task = final_per_task(log)
        points = curve(log)
        policies = sum(1 for e in log if e["round"] == last and not e["cached"])
        rows.append({"label": r["variant"], "seed": int(r["seed"]), "cell": r["cell"], "round": last, "per_task": per_task,
                     "success": points[-1].success, "bytes": r["bytes_total"],
                     "best": _number(r.get("success_best_of_last_k"), 100), "best_k": _number(r.get("best_of_last_k")),
                     "bc_loss": _number(points[-1].loss), "curve": points,
                     **{k: _number(getattr(points[-1], k)) for k in ("reach_cm", "grasp", "lift", "carry_cm")},
                     "episodes": policies * len(per_task) * budget["episodes"],
                     "messages": r["messages_total"], "sim_s": r["sim_time_s"], "wall_s": r["timing.wall_s"]})
    if not rows:
        raise SystemExit(f"{' '.join(map(str, dirs))}: no runs of the study {STUDY!r} "
                         "(scenarios/studies/libero_object.yaml) found")
    budget["eval_every"] = sorted(every)
    return rows, budget


def _number(v: Any, scale: float = 1.0) -> float | None:
    """``v`` scaled, or None where a run's summary has no such field (NaN in the runs table)."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else scale * float(v)


def demos_have_labels(root: str, files: list[str]) -> bool | None:
    """Whether the runs' first demo file holds ``expert_actions`` (noise-injected demos); None if it is gone."""
    import h5py

    path = Path(root).expanduser() / files[0]
    if not path.is_file():
        return None
    with h5py.File(path, "r") as f:
        return "expert_actions" in f["data/demo_0"]


def policy_params(history: int, wrist: bool) -> int:
    """Parameters of the policy the runs trained (LIBERO's robot: 7 joints, 2 gripper values, 7-D action)."""
    from p2pfl.robotics.policy import ObsLayout, ResNetTPolicy

    lay = ObsLayout(history=history, joint=7, gripper=2, action=7, wrist=wrist)
    return sum(p.numel() for p in ResNetTPolicy(lay).parameters())


def short(task: str) -> str:
    """'libero_object/pick_up_the_bbq_sauce_and_place_it_in_the_basket' -> 'bbq sauce'."""
    name = task.split("/")[-1]
    return name.removeprefix("pick_up_the_").removesuffix("_and_place_it_in_the_basket").replace("_", " ")


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The Table I layout for the subset: per-task SR, mean SR at the last evaluated round, then (where every
    run has them) the best of the last k evaluations, the BC test loss, the closest reach to the task's object,
    the shares of episodes that grasped it and lifted it, the closest the object came to the basket; evaluated
    round, bytes, wall time, paper's Object SR."""
    tasks = sorted({t for r in rows for t in r["per_task"]})
    progress, best, bc, lifts = has_progress(rows), every(rows, "best"), every(rows, "bc_loss"), every(rows, "lift")
    k = {r.get("best_k") for r in rows}
    head = (["Method"] + [f"{short(t)} SR (%)" for t in tasks] + ["Mean SR (%)"]
            + ([f"Best of last {int(next(iter(k)))} SR (%)" if len(k) == 1 else "Best of last k SR (%)"] if best else [])
            + (["BC test NLL"] if bc else [])
            + (["Closest reach (cm)", "Grasped (%)"] if progress else [])
            + (["Lifted (%)", "Object to basket (cm)"] if lifts else [])
            + ["Round", "Comm. MB (MB/msg)", "Wall (min)", "Paper Object SR (%)"])
    rows_out = []
    for label in ORDER:
        rs = sorted((r for r in rows if r["label"] == label), key=lambda r: r["seed"])
        if not rs:
            continue
        cells = [LABELS[label]]
        for t in tasks:
            cells.append(fmt_ci([100 * r["per_task"][t] for r in rs], scale=1.0, digits=1))
        cells.append(fmt_ci([r["success"] for r in rs], scale=1.0, digits=1))
        if best:
            cells.append(fmt_ci([r["best"] for r in rs], scale=1.0, digits=1))
        if bc:
            cells.append(fmt_ci([r["bc_loss"] for r in rs], scale=1.0, digits=2))
        if progress:
            cells.append(fmt_ci([r["reach_cm"] for r in rs], scale=1.0, digits=1))
            cells.append(fmt_ci([r["grasp"] for r in rs], scale=1.0, digits=1))
        if lifts:
            cells.append(fmt_ci([r["lift"] for r in rs], scale=1.0, digits=1))
            cells.append(fmt_ci([r["carry_cm"] for r in rs], scale=1.0, digits=1))
        cells.append(str(rs[0]["round"]))
        mb = sum(r["bytes"] for r in rs) / len(rs) / 1e6
        per_msg = sum(r["bytes"] / r["messages"] for r in rs if r["messages"]) / len(rs) / 1e6
        cells.append(f"{mb:.1f} ({per_msg:.2f})" if per_msg else "0 (-)")
        cells.append(f"{sum(r['wall_s'] for r in rs) / len(rs) / 60:.1f}")
        cells.append(f"{PAPER_OBJECT[label]:.1f}" if label in PAPER_OBJECT else "-")
        rows_out.append(cells)
    return markdown_table(rows_out, head)


def binarization(rows: list[dict[str, Any]], rescored: dict[str, Any]) -> list[str]:
    """The rescored cells (``analysis/experiments/libero_rescore.py``: the saved final policies rolled out with the gripper
    command continuous) beside their binarized last-round success, per method over the seeds rescored, and
    whether the methods' order by mean success changes."""
    pairs: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        got = rescored.get(r.get("cell", ""))
        if got is not None and got.get("success_mean") is not None:
            pairs.setdefault(r["label"], []).append((r["success"], 100 * got["success_mean"]))
    if not pairs:
        return []
    body = [[LABELS[lab], str(len(ps)), fmt_ci([b for b, _ in ps], scale=1.0, digits=1),
             fmt_ci([c for _, c in ps], scale=1.0, digits=1), fmt_diff([c - b for b, c in ps], scale=1.0)]
            for lab in ORDER if (ps := pairs.get(lab))]
    binarized = {lab: sum(b for b, _ in ps) / len(ps) for lab, ps in pairs.items()}
    continuous = {lab: sum(c for _, c in ps) / len(ps) for lab, ps in pairs.items()}
    swapped = swapped_pairs(binarized, continuous)
    return [*markdown_table(body, ["Method", "Seeds rescored", "SR binarized (%)", "SR continuous (%)",
                                   "Continuous − binarized (points)"]), "",
            "The methods' order by mean success " + (
                "is the same both ways (no two methods swap places; a tie in one reading is no swap)." if not swapped
                else "changes with the gripper command (" + "; ".join(
                    f"{LABELS[a]} above {LABELS[b]} binarized, below continuous" for a, b in swapped) + "): read both.")]


def swapped_pairs(first: dict[str, float], second: dict[str, float]) -> list[tuple[str, str]]:
    """Pairs (a, b), in the table's order, that ``first`` ranks strictly a above b and ``second`` strictly b
    above a (both: higher ranks higher). A tie in either reading orders nothing, so it swaps nothing."""
    keys = [k for k in ORDER if k in first and k in second]
    return [(a, b) if first[a] > first[b] else (b, a) for i, a in enumerate(keys) for b in keys[i + 1:]
            if (first[a] - first[b]) * (second[a] - second[b]) < 0]


def by_first(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Pairs grouped by their first member, in order."""
    out: dict[str, list[str]] = {}
    for a, b in pairs:
        out.setdefault(a, []).append(b)
    return out


def and_list(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def in_run_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs in the table's method order, then by seed."""
    return sorted(rows, key=lambda r: (ORDER.index(r["label"]), r["seed"]))


def has_progress(rows: list[dict[str, Any]]) -> bool:
    """Whether every run's rollouts reported progress (closest reach, grasps): no partial columns."""
    return every(rows, "reach_cm")


def every(rows: list[dict[str, Any]], key: str) -> bool:
    """Whether every run has ``key``: a column is shown whole or not at all."""
    return all(r.get(key) is not None for r in rows)


def success_by_seed(rows: list[dict[str, Any]], label: str) -> dict[int, float]:
    """Seed -> last-round mean success (%) of ``label``'s runs (what claims and ablations pair by seed)."""
    return {r["seed"]: r["success"] for r in rows if r["label"] == label}


def ablations(rows: list[dict[str, Any]]) -> list[str]:
    """Paired differences (last-round mean SR, points) of ``ABLATIONS`` over the seeds both arms ran, with a
    95% t-interval and what each isolates; arms not run are left out."""
    out = []
    for arm, ref, isolates in ABLATIONS:
        diffs = paired(success_by_seed(rows, arm), success_by_seed(rows, ref))
        if diffs:
            out.append([f"{LABELS[arm]} − {LABELS[ref]}", isolates, str(len(diffs)), fmt_diff(diffs, scale=1.0)])
    return markdown_table(out, ["Arms", "Isolates", "Seeds", "Mean SR difference (points, 95% CI)"]) if out else []


def check_setting(b: dict[str, Any]) -> None:
    """Raise ``ValueError`` when the runs' setting is not the one ``TABLE_I`` declares (``SETTING``)."""
    found = {"tasks": len(b["tasks"]), "params_m": round(policy_params(b["history"], b["wrist"]) / 1e6, 2)}
    if found != SETTING:
        raise ValueError(f"the runs' setting {found} is not the declared {SETTING}: update TABLE_I and SETTING in "
                         "analysis/reports/libero_report.py before reading the results")


def claims(rows: list[dict[str, Any]], b: dict[str, Any]) -> list[ClaimRow]:
    """The claims rows from the last-round success paired by seed: each verdict as computed (fewer than two seeds of
    either arm: 'not run'), beside the comparability ``DECLARED`` for its table."""
    check_setting(b)
    out = []
    for claim, a, ref, paper, table in CLAIMS:
        d = paired(success_by_seed(rows, a), success_by_seed(rows, ref))
        ours = f"{LABELS[a]} − {LABELS[ref]}: {fmt_diff(d, scale=1.0)} pts ({len(d)} seed{'s' * (len(d) != 1)})"
        out.append(DECLARED.row(table, claim, paper, ours if d else "—", beats(d)))
    fa = [r for r in rows if r["label"] == "fedavg"]
    fd = [r for r in rows if r["label"] == "feddrman"]
    if fa and fd:  # the payload: FedDRMan's server sends FedAvg's model, whatever the setting
        out.append(DECLARED.row("bytes", BYTES_CLAIM, "21.53 MB each", f"FedAvg {fa[0]['bytes'] / 1e6:.1f} MB, "
                                f"FedDRMan {fd[0]['bytes'] / 1e6:.1f} MB",
                                holds_if({r["bytes"] for r in fa} == {r["bytes"] for r in fd})))
    return out


def mean_by_label(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    """Method -> ``key`` averaged over its runs (seeds), in the table's order."""
    return {lab: sum(r[key] for r in rs) / len(rs) for lab in ORDER if (rs := [r for r in rows if r["label"] == lab])}


def reading(rows: list[dict[str, Any]]) -> list[str]:
    """Sentences stated from the table's numbers only."""
    mean = mean_by_label(rows, "success")
    n_seeds = {lab: len(success_by_seed(rows, lab)) for lab in mean}
    seeds = max(n_seeds.values())
    counts = (f"{seeds} seed{'s' * (seeds > 1)}" if len(set(n_seeds.values())) == 1 else
              "seeds: " + ", ".join(f"{LABELS[k]} {n}" for k, n in n_seeds.items()))
    out = ["- Mean success over the chosen tasks: " + ", ".join(f"{LABELS[k]} {v:.1f}%" for k, v in mean.items())
           + f" ({counts}; " + ("no interval with one seed)." if seeds == 1 else "95% t-intervals in the table).")]
    if "feddrman" in mean and "fedavg" in mean:
        d = paired(success_by_seed(rows, "feddrman"), success_by_seed(rows, "fedavg"))
        out.append(f"- FedDRMan − FedAvg: {fmt_diff(d, scale=1.0)} points, paired over {len(d)} seed{'s' * (len(d) != 1)}; "
                   f"the paper's Object column has +12.8 ({PAPER_OBJECT['feddrman']} vs {PAPER_OBJECT['fedavg']}) with "
                   "all 10 tasks, 50 rounds and LIBERO's human demonstrations."
                   + (" One seed cannot separate a difference from seed noise." if len(d) < 2 else ""))
    if all(v == 0 for v in mean.values()):
        out.append("- No method completes a task: at this budget our policy does not reach LIBERO-Object's "
                   "goal states, so success does not rank the methods.")
    if has_progress(rows):
        out.append("- Where the episodes stop, run by run: the table below (scored from the simulator's object poses, "
                   "never shown to a policy); the main table has each method's mean over seeds.")
    if all("episodes" in r for r in rows):
        won = {lab: (sum(round(r["success"] / 100 * r["episodes"]) for r in rs), sum(r["episodes"] for r in rs))
               for lab in ORDER if (rs := [r for r in rows if r["label"] == lab])}
        out.append("- Successful episodes at the last round: " + ", ".join(
            f"{LABELS[lab]} {k} of {n}" for lab, (k, n) in won.items())
                   + (" (Local rolls out each client's policy). Each count comes from one training run (Local: five "
                      "policies); without more seeds it does not separate the method from the run." if seeds == 1 else
                      " over the seeds (Local rolls out each client's policy). Episodes of one run share its policy, "
                      "so the seeds, not the episodes, are the samples the intervals use."))
    if every(rows, "best"):
        best = mean_by_label(rows, "best")
        out.append("- Best of the last k evaluations vs the last one: " + ", ".join(
            f"{LABELS[k]} {best[k]:.1f}% vs {v:.1f}%" for k, v in mean.items())
                   + ". The same rollouts choose and score the best checkpoint, so it reads high (summary.json's "
                   "success_best_of_last_k; the paper scores its chosen checkpoint on fresh rollouts); the last "
                   "round is the unbiased reading.")
    if every(rows, "bc_loss"):
        bc = mean_by_label(rows, "bc_loss")
        out.append("- BC test loss (GMM NLL of the held-out demos' actions, lower is better): " + ", ".join(
            f"{LABELS[k]} {v:.2f}" for k, v in sorted(bc.items(), key=lambda kv: kv[1]))
                   + (". Loss and success agree on every pair of methods that success separates." if not (
                       swapped := swapped_pairs(mean, {k: -v for k, v in bc.items()})) else
                      f". The order by loss differs from the order by success in {len(swapped)} pairs ("
                      + "; ".join(f"{LABELS[a]} succeeds more than {and_list([LABELS[b] for b in bs])} at a higher "
                                  "loss" for a, bs in by_first(swapped).items())
                      + "): imitating the demos better does not make a policy finish more tasks here."))
    if (scored := [r for r in rows if len(r.get("curve") or []) > 1]):
        rises = loss_rises(scored)
        out.append("- Runs whose last policy imitates the held-out demos worse than an earlier one (BC test loss at its "
                   "lowest scoring vs at the last; success at those two scorings): " + ("; ".join(
                       f"{LABELS[k]} seed {s} {low[2]:.2f} (round {low[0]}) vs {last[2]:.2f}, success {low[1]:.1f}% vs "
                       f"{last[1]:.1f}%" for k, s, low, last in rises) + f" ({len(rises)} of {len(scored)} runs scored "
                       "more than once; the others' loss was lowest at the last scoring)." if rises else
                       f"none (of the {len(scored)} runs scored more than once, each one's loss was lowest at its last)."))
    if (sw := swings(rows)) and every(rows, "episodes"):
        big, n = max(sw, key=lambda s: s[0]), min(r["episodes"] for r in rows)
        sd = 100 * math.sqrt(0.5 / n)  # of the difference of two binomial scorings at 50%, the largest
        out.append(f"- Success from one scoring of a run to the next: the largest change of each run scored more than "
                   f"once is {statistics.median(s[0] for s in sw):.1f} points at the median of {len(sw)} runs, at most "
                   f"{big[0]:.1f} ({LABELS[big[1]]} seed {big[2]}: {big[3][1]:.1f}% at round {big[3][0]}, "
                   f"{big[4][1]:.1f}% at round {big[4][0]}); {sum(s[0] > 3 * sd for s in sw)} of the {len(sw)} change by more than "
                   f"{3 * sd:.1f}, three times the standard deviation of the difference of two scorings of one policy "
                   f"on {n} episodes each (binomial, at 50%, where it is largest): changes that large are the policy "
                   "changing between checkpoints, not the rollouts.")
    if "centralized" in mean and "local" in mean:
        d = paired(success_by_seed(rows, "centralized"), success_by_seed(rows, "local"))
        side = {HOLDS: "pooling raised success at this budget", DOES_NOT_HOLD: "pooling lowered success at this budget",
                NOT_RESOLVED: "not separated (the interval spans 0)"}
        out.append(f"- Pooling all clients' demos (Centralized {mean['centralized']:.1f}%) vs each client's own (Local "
                   f"{mean['local']:.1f}%): Centralized − Local {fmt_diff(d, scale=1.0)} points paired over {len(d)} "
                   + (f"seeds, {side[beats(d)]}." if len(d) > 1 else "seed (no interval with one)." if d else
                      "seeds (none in common)."))
    return out


def loss_rises(rows: list[dict[str, Any]]) -> list[tuple[str, int, tuple[float, ...], tuple[float, ...]]]:
    """Runs, in the table's order then by seed, whose BC test loss was lower at an earlier scoring than at the last:
    (method, seed, the curve's point at the lowest loss, its last point); scorings without a loss are skipped."""
    out = []
    for r in in_run_order(rows):
        points = [p for p in r["curve"] if not math.isnan(p[2])]
        if points and (low := min(points, key=lambda p: p[2]))[2] < points[-1][2]:
            out.append((r["label"], r["seed"], tuple(low), tuple(points[-1])))
    return out


def swings(rows: list[dict[str, Any]]) -> list[tuple[float, str, int, tuple[float, ...], tuple[float, ...]]]:
    """Per run scored more than once, in run order, its largest change in success between adjacent scorings:
    (the change in points, method, seed, the point before, the point after)."""
    out = []
    for r in in_run_order(rows):
        if len(c := r.get("curve") or []) > 1:
            a, b = max(pairwise(c), key=lambda ab: abs(ab[1][1] - ab[0][1]))
            out.append((abs(b[1] - a[1]), r["label"], r["seed"], tuple(a), tuple(b)))
    return out


def rescored_in(dirs: list[Path]) -> dict[str, Any]:
    """``analysis/experiments/libero_rescore.py``'s results by cell, read from ``libero_rescore.json`` in each folder reported
    on (the rescoring writes it beside the cells it rescored)."""
    rescored: dict[str, Any] = {}
    for f in (d / "libero_rescore.json" for d in dirs):  # libero_rescore.RESCORE_FILE
        if f.is_file():
            rescored.update(json.loads(f.read_text(encoding="utf-8")))
    return rescored


RUNS_CSV = "libero_object_runs.csv"  # beside the report: one row per run, for pandas or a spreadsheet
RUN_COLUMNS = {"label": "method", "seed": "seed", "round": "round", "success": "success_pct", "best": "best_of_last_k_pct",
               "bc_loss": "bc_test_nll", "reach_cm": "reach_cm", "grasp": "grasped_pct", "lift": "lifted_pct",
               "carry_cm": "object_to_basket_cm", "episodes": "episodes", "bytes": "bytes", "messages": "messages",
               "wall_s": "wall_s"}


def runs_table(rows: list[dict[str, Any]]) -> list[list[Any]]:
    """One row per run (the table's order, then seed): ``RUN_COLUMNS`` and each task's success (%), the header
    first; a value a run lacks is empty."""
    tasks = sorted({t for r in rows for t in r["per_task"]})
    out: list[list[Any]] = [[*RUN_COLUMNS.values(), *(f"{short(t)} success_pct" for t in tasks)]]
    for r in in_run_order(rows):
        values = [LABELS[r["label"]] if k == "label" else r.get(k) for k in RUN_COLUMNS]
        out.append([*(_cell(v) for v in values), *(_cell(100 * r["per_task"][t]) if t in r["per_task"] else ""
                                                     for t in tasks)])
    return out


def _cell(v: Any) -> Any:
    """A CSV cell: empty for a missing value, a float to 4 decimals (19.000000000000004 reads 19.0)."""
    return "" if v is None else round(v, 4) if isinstance(v, float) else v


FIGURE = "libero_object_curves.png"  # beside the report


#: The figure's panels: a ``Point`` field and its axis label.
PANELS = (("success", "rollout success (%)"), ("loss", "BC test loss (GMM NLL, held-out demos)"),
          ("lift", "episodes that lifted the object 4 cm (%)"), ("carry_cm", "closest the object came to the basket (cm)"))


def figure(rows: list[dict[str, Any]], out: Path) -> list[str]:
    """Success, BC test loss and how far the episodes got, per evaluated round, mean over each method's seeds (the
    rounds all its seeds evaluated), written to ``out``/``FIGURE``; the report's line that shows it. A panel whose
    field no run logged is left out."""
    fields = [(f, text) for f, text in PANELS
              if any(not math.isnan(getattr(p, f)) for r in rows for p in r["curve"])]
    fig = Figure(figsize=(10, 3.6 * math.ceil(len(fields) / 2)))
    axes = list(fig.subplots(math.ceil(len(fields) / 2), 2, squeeze=False).flat)
    colours = matplotlib.colormaps["tab10"].colors  # type: ignore[attr-defined]
    for i, label in enumerate(lab for lab in ORDER if any(r["label"] == lab for r in rows)):
        runs = [r["curve"] for r in rows if r["label"] == label]
        points = mean_curve(runs)
        style = {"marker": "o", "color": colours[i % 10], "label": f"{LABELS[label]} ({len(runs)} seed{'s' * (len(runs) > 1)})"}
        for ax, (f, _) in zip(axes, fields):
            ax.plot([p[0] for p in points], [p[Point._fields.index(f)] for p in points], **style)
    for ax, (_, text) in zip(axes, fields):
        ax.set(xlabel="round", ylabel=text)
        ax.grid(alpha=0.3)
    for ax in axes[len(fields):]:
        ax.set_visible(False)
    axes[0].legend(fontsize=7)
    fig.suptitle("LIBERO-Object per evaluated round, mean over tasks and seeds (Local BC: the last round only)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out / FIGURE, dpi=120)
    return [f"![Success, BC test loss and progress per evaluated round]({FIGURE})"]


def stops_table(rows: list[dict[str, Any]]) -> list[str]:
    """Where each run's episodes stop at its last round, one line per run (method order, then seed)."""
    cols = {"success": "SR (%)", "reach_cm": "Closest reach (cm)", "grasp": "Grasped (%)"} | (
        {"lift": "Lifted (%)", "carry_cm": "Object to basket (cm)"} if every(rows, "lift") else {})
    return markdown_table([[LABELS[r["label"]], r["seed"], *(f"{r[k]:.1f}" for k in cols)]
                           for r in in_run_order(rows)],
                          ["Method", "Seed", *cols.values()], align="lr" + "r" * len(cols))


def write(dirs: list[Path], md: Path) -> None:
    rows, b = rows_from_runs(dirs)
    md.parent.mkdir(parents=True, exist_ok=True)  # the figure and the CSV go beside the report
    rescored = rescored_in(dirs)
    check, paired, verdicts = binarization(rows, rescored), ablations(rows), claims(rows, b)
    cpu_min = sum(r["wall_s"] for r in rows) / 60
    tasks = ", ".join(short(t) for t in b["tasks"])
    text = "\n".join([
        "# FedDRMan on real LIBERO-Object (Table I layout, a 3-task subset)", "",
        "Regenerate:", "", "```", COMMAND, "```", "",
        f"Real LIBERO-Object environments (LIBERO's BDDL tasks in robosuite/MuJoCo): tasks {tasks}; "
        f"{b['demos']} scripted demos per task (`p2pfl.robotics.libero_demos`: placements from LIBERO's seeded reset, "
        + {True: "executed with noise on the translation and labelled with the expert's actions (DART), ",
           False: "executed as the expert acted (no noise injection), ", None: ""}[b["dart"]] +
        f"LIBERO's hdf5 format), split over {b['clients']} clients by Dirichlet({b['alpha']}) over tasks, 10% of each "
        f"task's demos held out for the BC test loss. {b['rounds']} rounds of one local epoch; every policy is scored by "
        f"{b['episodes']} rollouts per task from LIBERO's fixed initial states (which no demo used), up to "
        f"{b['horizon']} control steps each (LIBERO's horizon), "
        + (f"every {'/'.join(map(str, b['eval_every']))} rounds and at the last (Local BC: at the last "
           "only), " if b["eval_every"] else "after the last round, ")
        + ("the gripper command sent as +1 or -1 (binarized, as LIBERO's own policies send it). " if b["binarize"] else
           "the gripper command sent as the policy gives it (not binarized). ")
        + (f"Demos and rollouts draw LIBERO's visual meshes simplified within {1e3 * b['lod']:g} mm "
           "(`data.partition.render_lod`, ours: about 3x faster renders, the physics byte-identical, the images a "
           "few levels of 255 apart on average; `analysis/bench/bench_libero_lod.py`), the wrist camera's gripper whole. "
           if b.get("lod") else "")
        + f"Rollouts run on the process executor (2 workers). {len(rows)} runs, {cpu_min:.0f} min of wall time in all.", "",
        f"Differences from the paper's Table I, stated: {len(b['tasks'])} of LIBERO-Object's 10 tasks, scripted demos instead of "
        f"LIBERO's 50 human demos per task, " + (f"{b['rounds']} rounds instead of 50, " if b["rounds"] != 50 else "")
        + "a policy of "
        f"{policy_params(b['history'], b['wrist']) / 1e6:.2f} M parameters on 32 px "
        f"{'agent-view and wrist' if b['wrist'] else 'agent-view (no wrist camera)'} images (the paper's 5.38 M, both cameras), "
        "scores read at the last evaluated round (the best of the last k beside it, optimistic), "
        "FedProx, FedKD and FedVLA not run (the "
        "generated-suite study covers FedProx and FedKD; FedVLA "
        + cannot_test("its method is not among the sources available offline") + ").", "",
        *table(rows), "",
        *(["Closest reach: per episode, the smallest distance between the end effector and the task's object, "
           "averaged over episodes, tasks and devices. Grasped: the share of episodes in which both fingers held "
           "the object at some step (robosuite's two-finger contact check: strict, an episode can succeed without "
           "it firing, so it counts holds from below). Both are read from the simulator's state for "
           "scoring; no policy sees them."
           + (" Lifted: the share of episodes in which the object rose 4 cm above where it rested (robosuite's Lift "
              "criterion). Object to basket: per episode, the closest the object came to the basket's origin, "
              "averaged like the reach." if every(rows, "lift") else ""), ""] if has_progress(rows) else []),
        "Wall (min): each run's wall-clock time as it ran on this 2-core machine, its mean over seeds: some runs "
        "shared the machine with other work, and a run resumed from its kept scorings replays only the training "
        "(`--archive`), so the column records what the study cost, not a timing; the cost of a step is measured in "
        "`analysis/bench/bench_libero.py` and `analysis/bench/bench_libero_lod.py`.", "",
        *["## Provenance", "", "Each archive's cells by the revision that made them, and the last `p2pfl archive verify` of a "
          "sample of them at a later revision (re-run and compared byte for byte):", "", *provenance_lines(dirs), ""], "## Claims", "",
        "Verdicts from the 95% t-interval of the per-seed paired difference of last-round success (points): 'a beats "
        "b' holds when the whole interval is above 0, does not hold when it is wholly below, and is not resolved "
        "otherwise; fewer than two seeds of both arms: not run. Each verdict is printed as computed; the setting "
        "differs from the paper's (above), so only each comparison's direction is checked, and the comparability "
        "column says how each row differs (declared in this script before the results were read).", "",
        *claims_table(verdicts, "ours (paired difference)"), "",
        *(["## Ablations", "", *paired, ""] if paired else []),
        *(["## The gripper command, binarized or not", "",
           "The saved final policies rolled out again with the gripper command as the policy gives it "
           "(`python analysis/experiments/libero_rescore.py analysis/cells/libero_object`), beside the study's binarized score "
           "of the same policies.", "", *check, ""] if check else []),
        "## Reading", "", *reading(rows), "",
        *(["## Where each run's episodes stop (last round)", "", *stops_table(rows), ""] if has_progress(rows) else []),
        f"Every run's numbers, one row per run and seed: `{RUNS_CSV}` beside this report.", "",
        "## Per evaluated round", "",
        "Success, BC test loss, lifts and the object's closest approach to the basket at every scoring, mean over "
        "each method's seeds; read the "
        "last round for the table's comparisons (a best-looking round chosen from these same rollouts reads high).", "",
        *figure(rows, md.parent), "",
    ])
    with open(md.parent / RUNS_CSV, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows(runs_table(rows))
    md.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    raise SystemExit(report_main(write, __doc__, Path(__file__).parents[1] / "results" / "libero_object.md"))
