"""The headline pilot (issue 33): the references' learning curves per heterogeneity and training-set size,
and the round budget and samples per device the headline studies take from them.

    p2pfl sweep scenarios/studies/headline_pilot.yaml --jobs 2 --out runs/headline_pilot \
        --archive analysis/cells/headline_pilot
    python analysis/reports/headline_pilot.py analysis/cells/headline_pilot   # -> analysis/results/headline_pilot.md + PNG

Reads the runs through the results API (``load_runs``, ``load_nodes``, ``load_curves``). Per (heterogeneity,
samples per device, reference) over seeds: the mean-device-accuracy curve (every evaluated round), the final mean
accuracy and the p10 device accuracy (the device at the 10th percentile). Headroom is Oracle minus Local at the
last round, paired by seed. The choices, by the rules the study header states:

- samples per device: the largest size at which Oracle - Local >= ``HEADROOM`` in every heterogeneity but
  the control (``CONTROL``); when none reaches it, the size with the largest smallest headroom, said so;
- round budget R: at that size, for each heterogeneity, the first evaluated round at which the Oracle's mean
  curve is within ``PLATEAU_TOL`` of its plateau (the mean of its last ``PLATEAU_LAST`` evaluations);
  R is the largest of these over the heterogeneities but the control.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from p2pfl.metrics.claims import device_percentile, fmt_ci, fmt_diff, mean_curve, paired
from p2pfl.metrics.runs import load_curves, load_nodes, load_runs
from p2pfl.metrics.tables import markdown_table, report_main
from p2pfl.study.verify import provenance_lines

COMMAND = ("p2pfl sweep scenarios/studies/headline_pilot.yaml --jobs 2 --out runs/headline_pilot "
           "--archive analysis/cells/headline_pilot\npython analysis/reports/headline_pilot.py analysis/cells/headline_pilot")
REFERENCES = ("centralized", "oracle", "fedavg", "local")
CONTROL = "feature_skew"
HEADROOM = 0.10  # Oracle - Local a heterogeneity must leave, in accuracy (issue 33)
PLATEAU_TOL = 0.01  # within 1 point of the plateau
PLATEAU_LAST = 3  # evaluations averaged for the plateau

Row = dict[str, Any]
Curve = Sequence[tuple[float, ...]]  # (round, mean device accuracy) per evaluation


def load(dirs: list[Path]) -> list[Row]:
    """One row per run: heterogeneity, samples, reference, seed, final accuracy, p10 device, wall seconds, curve."""
    runs = load_runs(*dirs)
    p10 = {path: device_percentile(v.tolist()) for path, v in load_nodes(*dirs).groupby("path", sort=False)["value"]}
    curves = {path: [(int(r), float(a)) for r, a in zip(c["round"], c["value"])]
              for path, c in load_curves(*dirs).groupby("path", sort=False)}
    return [{"het": r["scenario.data.partition.kind"], "samples": int(r["grid.data.samples_per_client"]),
             "ref": r["variant"], "seed": int(r["seed"]), "acc": float(r["accuracy_mean"]), "p10": p10[r["path"]],
             "wall_s": float(r["timing.wall_s"]), "curve": curves[r["path"]]} for r in runs.to_dict("records")]


def runs_of(rows: list[Row], het: str, samples: int, ref: str) -> list[Row]:
    """The runs (one per seed) of a reference at one heterogeneity and training-set size."""
    return [r for r in rows if (r["het"], r["samples"], r["ref"]) == (het, samples, ref)]


def seeds_curve(rows: list[Row], het: str, samples: int, ref: str) -> Curve:
    """The reference's mean curve over its seeds, at every round all of them evaluated."""
    return mean_curve([r["curve"] for r in runs_of(rows, het, samples, ref)])


def plateau_round(curve: Curve, tol: float = PLATEAU_TOL, last: int = PLATEAU_LAST) -> int:
    """The first evaluated round within ``tol`` of the plateau (the mean of the last ``last`` points)."""
    if not curve:
        raise ValueError("an empty curve has no plateau")
    plateau = float(np.mean([a for _, a in curve[-last:]]))
    return next(r for r, a in curve if a >= plateau - tol)


def headroom(rows: list[Row], het: str, samples: int) -> list[float]:
    """Oracle - Local at the last round, paired by seed."""
    oracle, local = ({r["seed"]: r["acc"] for r in runs_of(rows, het, samples, ref)} for ref in ("oracle", "local"))
    return paired(oracle, local)


def choose(rows: list[Row]) -> tuple[int, int, str]:
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
    rounds = {h: plateau_round(seeds_curve(rows, h, samples, "oracle")) for h in hets}
    budget = max(rounds.values())
    why += ("; R = " + ", ".join(f"{h} {r}" for h, r in sorted(rounds.items())) +
            f": the largest, the first round where the Oracle is within {100 * PLATEAU_TOL:.0f} point of its plateau")
    return samples, budget, why


def table(rows: list[Row]) -> list[str]:
    out = []
    for het in sorted({r["het"] for r in rows}):
        for s in sorted({r["samples"] for r in rows if r["het"] == het}):
            acc = {ref: [r["acc"] for r in runs_of(rows, het, s, ref)] for ref in REFERENCES}
            p10 = {ref: [r["p10"] for r in runs_of(rows, het, s, ref)] for ref in ("oracle", "local")}
            out.append([het, s, *(fmt_ci(acc[ref]) for ref in REFERENCES), fmt_diff(headroom(rows, het, s)),
                        fmt_ci(p10["oracle"]), fmt_ci(p10["local"])])
    return markdown_table(out, ["heterogeneity", "samples", *REFERENCES, "Oracle - Local (pts)", "p10 Oracle",
                                "p10 Local"], align="lr" + "r" * (len(REFERENCES) + 3))


def curve_table(rows: list[Row], samples: int) -> list[str]:
    out = []
    for het in sorted({r["het"] for r in rows}):
        curves = {ref: dict(seeds_curve(rows, het, samples, ref)) for ref in REFERENCES}
        lines = [[rd, *(f"{curves[ref].get(rd, float('nan')):.3f}" for ref in REFERENCES)] for rd in curves["oracle"]]
        out += [f"**{het}** (mean over seeds, mean device accuracy)", "",
                *markdown_table(lines, ["round", *REFERENCES], align="r" * (len(REFERENCES) + 1)), ""]
    return out


def figure(rows: list[Row], path: Path) -> None:
    hets = sorted({r["het"] for r in rows})
    sizes = sorted({r["samples"] for r in rows})
    fig = Figure(figsize=(3.2 * len(sizes), 2.6 * len(hets)))
    axes = fig.subplots(len(hets), len(sizes), squeeze=False, sharex=True)
    for i, het in enumerate(hets):
        for j, s in enumerate(sizes):
            ax = axes[i][j]
            for ref in REFERENCES:
                c = seeds_curve(rows, het, s, ref)
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


def report(rows: list[Row], png: Path) -> str:
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


def write(dirs: list[Path], md: Path) -> None:
    """The report ``md`` from the pilot's runs in ``dirs``, its figure beside it (the same name, .png)."""
    rows = load(dirs)
    png = md.with_suffix(".png")
    figure(rows, png)
    md.write_text(report(rows, png) + "\n".join(["", "## Provenance", "", "Each archive's cells by the revision that made them, and the last `p2pfl archive verify` of a sample of them at a later revision:", "", *provenance_lines(dirs), ""]))
    print(f"wrote {md} and {png}")


if __name__ == "__main__":
    raise SystemExit(report_main(write, __doc__, Path(__file__).parents[1] / "results" / "headline_pilot.md"))
