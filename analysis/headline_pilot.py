"""The headline pilot (issue 33): the references' learning curves per heterogeneity and training-set size,
and the round budget and samples per device the headline studies take from them.

    p2pfl sweep scenarios/studies/headline_pilot.yaml --jobs 2 --out runs/headline_pilot \
        --archive analysis/cells/headline_pilot
    python analysis/headline_pilot.py analysis/cells/headline_pilot   # -> analysis/results/headline_pilot.md + PNG

Reads run directories (``cell.json``, ``summary.json``). Per (heterogeneity, samples per device, reference)
over seeds: the mean-device-accuracy curve (every evaluated round), the final mean accuracy and the p10
device accuracy (the device at the 10th percentile). Headroom is Oracle minus Local at the last round,
paired by seed. The choices, by the rules the study header states:

- samples per device: the largest size at which Oracle - Local >= ``HEADROOM`` in every heterogeneity but
  the control (``CONTROL``); when none reaches it, the size with the largest smallest headroom, said so;
- round budget R: at that size, for each heterogeneity, the first evaluated round at which the Oracle's mean
  curve is within ``PLATEAU_TOL`` of its plateau (the mean of its last ``PLATEAU_LAST`` evaluations);
  R is the largest of these over the heterogeneities but the control.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from p2pfl.metrics.claims import fmt_ci, fmt_diff, paired  # noqa: E402
from p2pfl.metrics.runs import find_runs  # noqa: E402

OUT = ROOT / "analysis" / "results"
COMMAND = ("p2pfl sweep scenarios/studies/headline_pilot.yaml --jobs 2 --out runs/headline_pilot "
           "--archive analysis/cells/headline_pilot\npython analysis/headline_pilot.py analysis/cells/headline_pilot")
REFERENCES = ("centralized", "oracle", "fedavg", "local")
CONTROL = "feature_skew"
HEADROOM = 0.10  # Oracle - Local a heterogeneity must leave, in accuracy (issue 33)
PLATEAU_TOL = 0.01  # within 1 point of the plateau
PLATEAU_LAST = 3  # evaluations averaged for the plateau

Curve = list[tuple[int, float]]


def p10(values: Sequence[float]) -> float:
    """The 10th-percentile device accuracy (linear interpolation)."""
    return float(np.percentile(np.asarray(values, dtype=float), 10))


def load(root: Path) -> list[dict[str, Any]]:
    """One row per run: heterogeneity, samples, reference, seed, final accuracy, p10, curve."""
    rows = []
    for run in find_runs(root):
        cell = json.loads((run / "cell.json").read_text())
        s = json.loads((run / "summary.json").read_text())
        timing = json.loads((run / "timing.json").read_text())
        grid = cell["grid"]
        rows.append({"het": grid["data.partition"]["kind"], "samples": int(grid["data.samples_per_client"]),
                     "ref": cell["variant"], "seed": int(cell["seed"]), "acc": float(s["accuracy_mean"]),
                     "p10": p10(s["accuracy_per_node"]), "wall_s": float(timing["wall_s"]),
                     "curve": [(int(p["round"]), float(p["accuracy_mean"])) for p in s["accuracy_curve"]]})
    return rows


def mean_curve(curves: list[Curve]) -> Curve:
    """The seeds' mean at every round all of them evaluated."""
    common = sorted(set.intersection(*(set(r for r, _ in c) for c in curves))) if curves else []
    return [(r, float(np.mean([dict(c)[r] for c in curves]))) for r in common]


def plateau_round(curve: Curve, tol: float = PLATEAU_TOL, last: int = PLATEAU_LAST) -> int:
    """The first evaluated round within ``tol`` of the plateau (the mean of the last ``last`` points)."""
    if not curve:
        raise ValueError("an empty curve has no plateau")
    plateau = float(np.mean([a for _, a in curve[-last:]]))
    return next(r for r, a in curve if a >= plateau - tol)


def headroom(rows: list[dict[str, Any]], het: str, samples: int) -> list[float]:
    """Oracle - Local at the last round, paired by seed."""
    def by_seed(ref: str) -> dict[int, float]:
        return {r["seed"]: r["acc"] for r in rows if (r["het"], r["samples"], r["ref"]) == (het, samples, ref)}

    return paired(by_seed("oracle"), by_seed("local"))


def choose(rows: list[dict[str, Any]]) -> tuple[int, int, str]:
    """(samples per device, round budget R, the reason in words), by the rules in the module docstring."""
    hets = sorted({r["het"] for r in rows} - {CONTROL})
    sizes = sorted({r["samples"] for r in rows})
    if not hets or not sizes:
        raise ValueError("no pilot runs outside the control")
    smallest = {s: min(float(np.mean(headroom(rows, h, s) or [float("nan")])) for h in hets) for s in sizes}
    enough = [s for s in sizes if smallest[s] >= HEADROOM]
    if enough:
        samples = max(enough)
        why = (f"the largest size with Oracle - Local >= {100 * HEADROOM:.0f} points in every heterogeneity but "
               f"the control (smallest headroom there: {100 * smallest[samples]:.1f} points)")
    else:
        samples = max(sizes, key=lambda s: smallest[s])
        why = (f"no size reaches {100 * HEADROOM:.0f} points of headroom in every heterogeneity; this one has the "
               f"largest smallest headroom ({100 * smallest[samples]:.1f} points)")
    rounds = {h: plateau_round(mean_curve([r["curve"] for r in rows
                                           if (r["het"], r["samples"], r["ref"]) == (h, samples, "oracle")]))
              for h in hets}
    budget = max(rounds.values())
    why += ("; R = " + ", ".join(f"{h} {r}" for h, r in sorted(rounds.items())) +
            f": the largest, the first round where the Oracle is within {100 * PLATEAU_TOL:.0f} point of its plateau")
    return samples, budget, why


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| heterogeneity | samples | " + " | ".join(REFERENCES) + " | Oracle - Local (pts) | p10 Oracle | p10 Local |",
             "|---|---:|" + "---:|" * (len(REFERENCES) + 3)]
    for het in sorted({r["het"] for r in rows}):
        for s in sorted({r["samples"] for r in rows if r["het"] == het}):
            cell = [r for r in rows if (r["het"], r["samples"]) == (het, s)]

            def acc(ref: str, field: str = "acc", cell: list[dict[str, Any]] = cell) -> list[float]:
                return [r[field] for r in cell if r["ref"] == ref]

            cells = [fmt_ci(acc(ref)) for ref in REFERENCES]
            lines.append(f"| {het} | {s} | " + " | ".join(cells) + f" | {fmt_diff(headroom(rows, het, s))} | "
                         f"{fmt_ci(acc('oracle', 'p10'))} | {fmt_ci(acc('local', 'p10'))} |")
    return lines


def curve_table(rows: list[dict[str, Any]], samples: int) -> list[str]:
    hets = sorted({r["het"] for r in rows})
    out = []
    for het in hets:
        curves = {ref: mean_curve([r["curve"] for r in rows if (r["het"], r["samples"], r["ref"]) == (het, samples, ref)])
                  for ref in REFERENCES}
        rounds = [r for r, _ in curves["oracle"]]
        out += [f"**{het}** (mean over seeds, mean device accuracy)", "",
                "| round | " + " | ".join(REFERENCES) + " |", "|---:|" + "---:|" * len(REFERENCES)]
        for rd in rounds:
            out.append(f"| {rd} | " + " | ".join(f"{dict(curves[ref]).get(rd, float('nan')):.3f}" for ref in REFERENCES) + " |")
        out.append("")
    return out


def figure(rows: list[dict[str, Any]], path: Path) -> None:
    hets = sorted({r["het"] for r in rows})
    sizes = sorted({r["samples"] for r in rows})
    fig = Figure(figsize=(3.2 * len(sizes), 2.6 * len(hets)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(hets), len(sizes), squeeze=False, sharex=True)
    for i, het in enumerate(hets):
        for j, s in enumerate(sizes):
            ax = axes[i][j]
            for ref in REFERENCES:
                c = mean_curve([r["curve"] for r in rows if (r["het"], r["samples"], r["ref"]) == (het, s, ref)])
                if c:
                    ax.plot([r for r, _ in c], [a for _, a in c], label=ref)
            ax.set_title(f"{het}, {s} samples", fontsize=8)
            ax.tick_params(labelsize=7)
            if j == 0:
                ax.set_ylabel("mean device accuracy", fontsize=7)
            if i == len(hets) - 1:
                ax.set_xlabel("round", fontsize=7)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def report(rows: list[dict[str, Any]], png: Path) -> str:
    samples, budget, why = choose(rows)
    n_runs = len(rows)
    seeds = sorted({r["seed"] for r in rows})
    cpu_h = sum(r["wall_s"] for r in rows) / 3600
    lines = [
        "# Headline pilot: where clustering can pay, and after how many rounds (issue 33)", "",
        "Made by:", "", "    " + COMMAND.replace("\n", "\n    "), "",
        f"{n_runs} runs: the references {', '.join(REFERENCES)} at N = 100 (the headline fleet: Fashion-MNIST, MLP "
        f"of hidden 32, mean degree about 7), 64 rounds, scored every 4 on 100 local test samples per device, "
        f"seeds {seeds}. Intervals: 95% t-intervals over seeds; Oracle - Local paired by seed. p10: the device at "
        f"the 10th percentile of accuracy. Compute: {cpu_h:.2f} CPU-hours (the runs' wall times summed, one core "
        "each).", "",
        f"**Chosen: {samples} training samples per device, R = {budget} rounds, 100 test samples per device.** "
        f"Why: {why}.", "",
        "Final accuracy (round 64):", "", *table(rows), "",
        f"Curves at {samples} samples per device (![curves]({png.name})):", "", *curve_table(rows, samples),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--out", type=Path, default=OUT / "headline_pilot.md")
    args = ap.parse_args(argv)
    rows = load(args.root)
    if not rows:
        print(f"no runs under {args.root}", file=sys.stderr)
        return 2
    png = args.out.with_suffix(".png")
    figure(rows, png)
    args.out.write_text(report(rows, png))
    print(f"wrote {args.out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
