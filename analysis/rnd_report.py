"""Which feature-skew strengths and compatibility bands let RND discovery recover the groups?

    python analysis/rnd_report.py runs/rnd_recovery [analysis/cells/rnd_authors_skew] [--md FILE]

Reads the run directories of ``scenarios/studies/rnd_recovery.yaml`` (``p2pfl sweep`` writes them) and
writes, per variant (rnd with a server, rnd_gossip with the groups spatially local, rnd_gossip with the
groups scattered), a table of skew (kind and RMS) x alpha: exact recoveries (ARI = 1) out of the seeds,
the mean ARI with its 95% t-interval, and the mean number of federations; and one heat map of the
exact-recovery rate per variant. Runs of ``scenarios/studies/rnd_authors_skew.yaml`` among the directories add
one claim row per variant and criterion: the authors' code's skew.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from p2pfl.metrics.claims import DOES_NOT_HOLD, NOT_RESOLVED, NOT_RUN, downgrade, holds_if
from p2pfl.metrics.report import ci95
from p2pfl.metrics.runs import load_runs
from p2pfl.metrics.tables import markdown_table, report_main

VARIANTS = {"rnd_server": "rnd, a server (direct predictor exchange)",
            "rnd_gossip_grouped": "rnd_gossip, 1 hop, each group's devices neighbours",
            "rnd_gossip_scattered": "rnd_gossip, 2 hops, groups scattered over a random neighbourhood"}
#: the skew level issue 14 filed as the authors' (noise kind, the paper's wording; the paper's text gives no number)
AUTHORS = ("noise", 0.15)
EXACT_OK = 0.9  # a setting "recovers the groups" when at least 90% of its seeds give ARI = 1
#: how the rnd_recovery study differs from the authors' experiment (the paper on CIFAR-10, its code's skew)
AUTHORS_DIFFER = ("the authors' 0.15 is the per-pixel RMS of a 7x7-smoothed mean-shift pattern per group (their "
                  "code) on CIFAR-10 with about 4,167 images a device; here unsmoothed Gaussian noise on Fashion-MNIST "
                  "with 300 a device (scenarios/studies/rnd_authors_skew.yaml tests theirs)")
#: what still differs in rnd_authors_skew.yaml; a recovery there shows the novelty matrix carries the groups, a
#: failure of one of our criteria does not refute the paper
AUTHORS_CODE_DIFFER = ("Fashion-MNIST here, CIFAR-10 in the paper, and the compatibility criterion is ours (the "
                       "paper names one without a formula)")


def cells(runs: Any) -> Any:
    """One row per (variant, kind, level, alpha): runs, exact recoveries (ARI = 1), the ARIs, mean federations,
    and whether the setting recovers the groups (``ok``)."""
    skew = [json.loads(p) for p in runs["grid.data.partition"]]
    runs = runs.assign(kind=[p["mode"] for p in skew], alpha=runs["grid.protocol.alpha"].astype(float),
                       level=[float(p["rms"] if p["mode"] == "pattern" else p["noise_std"]) for p in skew])
    return runs.groupby(["variant", "kind", "level", "alpha"], sort=False).agg(
        n=("ari", "size"), exact=("ari", lambda a: int((a == 1.0).sum())), aris=("ari", list),
        feds=("n_federations", "mean")).sort_index().assign(ok=lambda t: t.exact >= EXACT_OK * t.n)


def fmt(c: Any) -> str:
    mean, _, lo, hi = ci95(c.aris)
    half = "" if math.isnan(lo) else f" ± {hi - mean:.2f}"
    return f"{c.exact}/{c.n} · ARI {mean:.2f}{half} · {c.feds:.1f} fed."


def heatmap(table: Any, skews: list[tuple[str, float]], alphas: list[float], path: Path) -> None:
    fig = Figure(figsize=(4 * len(VARIANTS), 3.6))
    axes = fig.subplots(1, len(VARIANTS), sharey=True)
    for ax, variant in zip(axes, VARIANTS):
        grid = np.full((len(skews), len(alphas)), np.nan)
        for i, (kind, level) in enumerate(skews):
            for j, a in enumerate(alphas):
                if (variant, kind, level, a) in table.index:
                    c = table.loc[(variant, kind, level, a)]
                    grid[i, j] = c.exact / c.n
        ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
        for i in range(len(skews)):
            for j in range(len(alphas)):
                if not np.isnan(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center",
                            color="black" if grid[i, j] > 0.5 else "white", fontsize=8)
        ax.set_xticks(range(len(alphas)), [f"α={a:g}" for a in alphas])
        ax.set_yticks(range(len(skews)), [f"{k} {v:g}" for k, v in skews])
        ax.set_title(variant, fontsize=9)
    fig.suptitle("share of seeds with exact recovery (ARI = 1)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _best(table: Any, variant: str, kind: str, level: float) -> str:
    """The band with the most exact recoveries at one skew: 'k/n at alpha a'."""
    if (variant, kind, level) not in table.index.droplevel("alpha"):
        return NOT_RUN
    found = table.loc[(variant, kind, level)]
    a = max(found.index, key=lambda a: (found.loc[a, "exact"], -a))
    return f"{found.loc[a, 'exact']}/{found.loc[a, 'n']} at alpha {a:g}"


AUTHORS_CODE = "the authors' code's skew (7x7-smoothed pattern, RMS 0.15, 4,167 images a device)"


def authors_code(runs: Any) -> list[tuple[str, ...]]:
    """Claim rows of rnd_authors_skew.yaml: exact recoveries per variant and compatibility criterion. The server
    version's rows test the paper's claim (a failure there is not comparable: ``AUTHORS_CODE_DIFFER``); the
    decentralized versions' rows ask our question of Sec. VI's proposal, which the paper does not evaluate."""
    t = runs.groupby(["variant", "grid.protocol.criterion"]).ari.agg(n="size", exact=lambda a: int((a == 1.0).sum()))
    rows = []
    for (v, c), r in sorted(t.iterrows(), key=lambda vr: (vr[0][0] != "rnd_server", vr[0])):  # the paper's first
        ok = holds_if(r.exact >= EXACT_OK * r.n)
        if v == "rnd_server":
            rows.append((f"Federations emerge from the novelty matrix without K (rnd_server) at {AUTHORS_CODE}, "
                         f"criterion {c}", "4 groups found", f"{r.exact}/{r.n} seeds exact",
                         downgrade(ok, AUTHORS_CODE_DIFFER, turns=(DOES_NOT_HOLD,))))
        else:
            rows.append((f"A decentralized version ({v}) finds the groups at {AUTHORS_CODE} on Fashion-MNIST, "
                         f"criterion {c} (Sec. VI proposes it; the paper does not evaluate it)", "not evaluated",
                         f"{r.exact}/{r.n} seeds exact", ok))
    return rows


def claims(table: Any, recovered: list[tuple[str, str, float]], skews: list[tuple[str, float]],
           n_seeds: int, extra: list[tuple[str, ...]]) -> list[str]:
    """The paper's claims this study tests, with verdicts (recovery: >= 90% of seeds exact)."""
    kind, level = AUTHORS
    at_authors = [r for r in recovered if r[0] == "rnd_server" and r[1] == f"{kind} {level:g}"]
    server_ok = {(s, a) for v, s, a in recovered if v == "rnd_server"}
    rows = [("Federations emerge from the novelty matrix without K (Sec. IV, Fig. 2's block structure), at "
             f"the skew filed as the authors' ({kind} {level:g})", "4 groups found",
             f"rnd_server best {_best(table, 'rnd_server', kind, level)}",
             downgrade(holds_if(bool(at_authors)), AUTHORS_DIFFER))]
    for k in sorted({k for k, _ in skews}):
        top = max(lv for kk, lv in skews if kk == k)
        # a stronger skew than the authors' on other data: a recovery shows the groups can emerge, a failure
        # says nothing of the authors' setting
        rows.append((f"... at the study's strongest {k} skew ({k} {top:g})", "—",
                     f"rnd_server best {_best(table, 'rnd_server', k, top)}",
                     downgrade(holds_if(any(s == f"{k} {top:g}" for s, _ in server_ok)),
                               f"{k} {top:g} on Fashion-MNIST with 300 images a device, not the authors' setting",
                               turns=(DOES_NOT_HOLD, NOT_RESOLVED))))
    for variant in ("rnd_gossip_grouped", "rnd_gossip_scattered"):
        mine = {(s, a) for v, s, a in recovered if v == variant}
        both = len(server_ok & mine)
        rows.append((f"A decentralized version over neighbourhoods ({variant}) finds the groups where the server "
                     "version does (Sec. VI proposes it; the paper does not evaluate it)", "not evaluated",
                     f"recovers {both} of the {len(server_ok)} settings rnd_server recovers ({len(mine)} in all)",
                     NOT_RUN if variant not in table.index.get_level_values("variant") else
                     holds_if(bool(server_ok) and both == len(server_ok))))
    return ["## Claims", "", f"Recovery: at least {EXACT_OK:.0%} of the {n_seeds} seeds give ARI = 1. The overhead "
            "claim (Fig. 3) is checked in `rnd_overhead.md`. A row whose experiment differs from the paper's in a way "
            "that can change the answer reads 'not comparable here' and says how.", "",
            *markdown_table(rows + extra, ["claim", "paper", "ours", "verdict"]), ""]


def write(dirs: list[Path], md: Path) -> None:
    runs = load_runs(*dirs)
    authors, runs = runs[runs.study == "rnd_authors_skew"], runs[runs.study != "rnd_authors_skew"]
    table = cells(runs)
    skews = sorted({(k, v) for _, k, v, _ in table.index}, key=lambda s: (s[0] != "noise", s[1]))
    alphas = sorted({a for *_, a in table.index})
    n_seeds = runs["seed"].nunique()
    png = md.with_suffix(".png")
    heatmap(table, skews, alphas, png)
    lines = [
        "# RND federation discovery: which skews and bands recover the groups",
        "",
        "Regenerate (540 runs, 10 seeds):",
        "",
        "```bash",
        "p2pfl sweep scenarios/studies/rnd_recovery.yaml --jobs 2 --out runs/rnd_recovery",
        f"python analysis/rnd_report.py {' '.join(map(str, dirs))}",
        "```",
        "",
        "Fashion-MNIST, 4 feature-skew groups x 3 devices (the paper's k = 4, N = 12), 300 samples each, RND "
        "predictors of 30 epochs (batch 32, Adam 1e-3), one training round (the study measures discovery). "
        "`pattern`: each group adds its own fixed zero-sum pattern of that per-pixel RMS; `noise`: Gaussian noise "
        "per pixel whose std grows over the groups from 0 (group 0 clean) to that value, the kind the paper's text "
        "describes (Sec. V, via ProFed: \"a different Gaussian noise distribution\" per group); the authors' code "
        "instead shifts each group by a 7x7-smoothed pattern (`scenarios/studies/rnd_authors_skew.yaml`). alpha: the "
        "compatibility band |s_ij - s_ii| <= alpha s_ii.",
        "",
        "**The compatibility rule is this package's design, not the paper's text.** The paper says federations "
        "come from the novelty matrix \"through the compatibility criterion\" without defining it; ours "
        "(`p2pfl/clustering/compatibility.py`) is: the band above, edges only where both directions agree, "
        "connected components, then majority peeling (a member compatible with at most half of its federation "
        "is split off). `rnd_gossip` applies the band, the mutual edges and the components (label "
        "propagation), but not the peeling: peeling needs every member's support over the whole federation, "
        "which a device learns only from the verdicts of the peers in its reach; instead each device trains "
        "with its own mutually compatible peers only, so a chain through the component does not put two groups "
        "in one model.",
        "",
        f"Cells: exact recoveries (ARI = 1) out of {n_seeds} seeds · mean ARI ± half-width of the 95% interval · "
        f"mean number of federations (4 is right). A setting recovers the groups when at least "
        f"{EXACT_OK:.0%} of its seeds are exact. The row marked * is the level issue 14 filed as the authors' "
        f"({AUTHORS[0]} {AUTHORS[1]:g}; the paper's text gives no number, and the authors' code's 0.15 is the RMS of a "
        "smoothed pattern, not noise).",
        "",
    ]
    verdicts = [(v, f"{k} {lv:g}", a) for v in VARIANTS for k, lv in skews for a in alphas
                if (v, k, lv, a) in table.index and table.loc[(v, k, lv, a), "ok"]]
    lines += claims(table, verdicts, skews, n_seeds, authors_code(authors) if len(authors) else [])
    for variant, title in VARIANTS.items():
        rows = [[f"{kind} {level:g}" + (" *" if (kind, level) == AUTHORS else "")]
                + [fmt(table.loc[(variant, kind, level, a)]) if (variant, kind, level, a) in table.index else "—"
                   for a in alphas] for kind, level in skews]
        lines += [f"## {variant}: {title}", "", *markdown_table(rows, ["skew", *(f"alpha {a:g}" for a in alphas)]), ""]
    lines += ["## Settings that recover the groups", ""]
    for variant in VARIANTS:
        ok = [f"{s}, alpha {a:g}" for v, s, a in verdicts if v == variant]
        lines.append(f"- `{variant}`: " + ("; ".join(ok) if ok else "none"))
    authors = [f"`{v}` alpha {a:g}" for v, s, a in verdicts if s == f"{AUTHORS[0]} {AUTHORS[1]:g}"]
    lines += ["", f"At the level filed as the authors' ({AUTHORS[0]} {AUTHORS[1]:g}): "
              + ("recovered by " + ", ".join(authors) if authors else "no variant and band recovers the groups") + ".",
              "", f"![exact recovery]({png.name})", ""]
    md.write_text("\n".join(lines) + "\n")
    print(f"wrote {md} and {png}")


if __name__ == "__main__":
    raise SystemExit(report_main(write, __doc__, Path(__file__).parent / "results" / "rnd_recovery.md"))
