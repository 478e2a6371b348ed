"""The headline v3 convergence pilot (scenarios/studies/headline_v3/PLAN.md, section 1): the round budget R per N.

    p2pfl sweep scenarios/studies/headline_v3/pilot.yaml --jobs 1 --out runs/headline_v3/pilot \
        --archive analysis/cells/headline_v3/pilot
    python analysis/reports/headline_v3_pilot.py analysis/cells/headline_v3/pilot   # -> headline_v3_pilot.md

The rule, fixed in the plan before the pilot ran (``round_budget``): R is the smallest evaluated round at which the
Oracle's mean accuracy over the seeds gains less than ``GAIN`` (0.3 points) over the last 20% of R rounds (from the
evaluated round nearest 0.8 R, below it, to R). The server arms run R rounds, the serverless arms 2.5 R.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from p2pfl.metrics.claims import mean_curve
from p2pfl.metrics.runs import load_curves, load_runs
from p2pfl.metrics.tables import markdown_table, report_main
from p2pfl.study.verify import provenance_lines

GAIN = 0.003  # 0.3 points of accuracy
TAIL = 0.2  # the last 20% of the rounds
SERVERLESS = 2.5  # the serverless arms' rounds per server round (v2's 130 / 52)


def round_budget(curve: Sequence[tuple[float, float]], gain: float = GAIN, tail: float = TAIL) -> Optional[int]:
    """The smallest evaluated round R of ``curve`` ((round, mean accuracy) points, rounds ascending) at which the
    accuracy gains less than ``gain`` from the last evaluated round at or below (1 - tail) R to R; None when no
    round does (the curve still rises at its end)."""
    rounds = [int(r) for r, _ in curve]
    acc = dict((int(r), float(a)) for r, a in curve)
    for r in rounds:
        before = [q for q in rounds if q <= (1.0 - tail) * r]
        if before and acc[r] - acc[before[-1]] < gain:
            return r
    return None


def write(dirs: list[Path], md: Path) -> None:
    found = [d for d in dirs if d.is_dir()]
    runs = load_runs(*found) if found else None
    by_path = {} if runs is None else {path: [(int(r), float(a)) for r, a in zip(c["round"], c["value"])]
                                       for path, c in load_curves(*found).groupby("path", sort=False)}
    rows = []
    for n, group in [] if runs is None else sorted(runs.groupby("n_devices")):
        curves = [by_path[path] for path in group["path"]]
        mean = [(r, a) for r, a, *_ in mean_curve(curves)]
        r = round_budget(mean)
        last = mean[-1]
        rows.append([f"{int(n):,}", str(len(curves)), f"{last[1]:.4f} at round {int(last[0])}",
                     "none (still rising)" if r is None else str(r),
                     "—" if r is None else str(round(SERVERLESS * r))])
    lines = ["# Headline v3 convergence pilot: the round budget", "", "Regenerate:", "", "```bash",
             "p2pfl sweep scenarios/studies/headline_v3/pilot.yaml --jobs 1 --out runs/headline_v3/pilot "
             "--archive analysis/cells/headline_v3/pilot",
             f"python analysis/reports/headline_v3_pilot.py {' '.join(map(str, dirs))}", "```", "",
             "The Oracle on rotation, static, strips; the mean accuracy over seeds per evaluated round. R: the "
             f"smallest evaluated round at which the mean gains less than {100 * GAIN:g} points over the last "
             f"{100 * TAIL:g}% of R rounds (the rule in `scenarios/studies/headline_v3/PLAN.md`, fixed before the "
             f"pilot ran); serverless arms run {SERVERLESS:g} R.", "",
             *(markdown_table(rows, ["N", "seeds", "Oracle's last mean accuracy", "R (server arms)",
                                     "serverless rounds"]) if rows else ["No cell archived yet: R is not chosen."]), "",
             "## Provenance", "", *(provenance_lines(found) if found else ["No archive yet."]), ""]
    md.write_text("\n".join(lines) + "\n")
    print(f"wrote {md}")


if __name__ == "__main__":
    raise SystemExit(report_main(write, __doc__, Path(__file__).resolve().parents[1] / "results" /
                                 "headline_v3_pilot.md"))
