"""The headline v3 plan's numbers (issue 70; ``scenarios/studies/headline_v3/PLAN.md`` quotes them): a power
calculation on the archived headline cells' paired differences, IFCA's collapse rate, the cell times and the budget.

    python analysis/experiments/headline_v3_power.py analysis/cells/headline   # -> analysis/results/headline_v3_power.md

- **Power.** For each planned comparison (a serverless arm minus a server arm, rotation, static and churn fleets, the
  strips placement: all the archive has) and each reading (``p2pfl.metrics.readings``: equal device radio energy,
  mean and worst device, equal device uplink bytes, equal total bytes, equal simulated time, the end), the per-seed
  differences of headroom gain (``p2pfl.metrics.claims.headroom_gain``, the same seed's Local and Oracle) and
  ``seeds_to_resolve`` at the plan's margin and family: the fewest seeds whose Holm-strictest interval would clear
  -margin on one side if a rerun showed the archived mean and SD. IFCA's archived cells are IFCA without restarts
  (balanced init): their SD stands in for IFCA with restarts (restarts remove the collapses that make most of it).
  N = 1,000 pools the exploratory seeds 0-2 and the confirmatory seeds 3-7 where an arm has both.
- **Collapse.** The share of IFCA's runs whose final clusters merged two true groups (``merged_groups``), and the
  chance that all r restarts collapse if each does independently at that rate.
- **Cell times.** The archived cells' mean measured wall seconds (``timing.wall_s``; single-threaded runs, two at a
  time on 2 cores: CPU seconds), per N, arm and fleet, over the four heterogeneities.
- **Budget.** The plan's cells (``DESIGN``) times those cell times (IFCA's times r restarts), what it cuts and why.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import pandas as pd

import p2pfl
from p2pfl.clustering.scores import merged_groups
from p2pfl.metrics.claims import seeds_to_resolve
from p2pfl.metrics.readings import COST_LABELS, READINGS, CostCurve, cost_curve, gain_difference, read
from p2pfl.metrics.tables import markdown_table

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "analysis" / "results" / "headline_v3_power.md"
MARGIN = 0.10  # headroom gain a serverless arm may trail a server arm by and still match (the old study's)
ALPHA = 0.05
SERVERLESS = ("rnd_gossip_h1", "gossip", "dac_cosine")
SERVER = ("ifca", "rnd_relay")
NS = (100, 1000, 10000)
#: one Holm family per regime: every serverless arm x server arm x reading x N (N = 10,000 planned, counted as not
#: rejected until it runs)
FAMILY = len(SERVERLESS) * len(SERVER) * len(READINGS) * len(NS)
RESTARTS = 3  # IFCA's r
IFCA_KEPT = "ifca (no collapse)"  # IFCA's seeds that did not collapse: a proxy for IFCA with restarts
DYNAMICS = ("static", "churn")
#: the plan: seeds per N (N = 10,000 waits for the tensor clustering programs: see the budget)
SEEDS = {100: 10, 1000: 10, 10000: 0}
#: arms run once per placement (they depend on where devices are) and arms run once per seed, reused for both
PER_PLACEMENT = ("rnd_gossip_h1", "gossip", "dac_cosine")
PLACEMENT_FREE = ("ifca", "rnd_relay", "fedavg", "oracle", "local")
#: exploratory arms: DAC as published, on the first 3 seeds at N = 100 only (its N = 1,000 cells cost 2x gossip's)
EXPLORATORY = {"dac_original": {100: 3}}
#: the 1 Gbit/s server egress (the equal-time reading's sensitivity): server arms, first 3 seeds, each N
EGRESS_1G = {"ifca_1g": 3, "rnd_relay_1g": 3, "fedavg_1g": 3}
PILOT_H = 2.0  # the convergence pilot (rounds where the Oracle's last 20% gain < 0.3 points), reserved
BUDGET_H = 45.0


def dynamics_of(run: pd.Series) -> str:
    if isinstance(run.get("scenario.dynamics.mobility.model"), str):
        return "mobility"
    return "churn" if (run.get("scenario.dynamics.churn.offline") or 0.0) > 0 else "static"


def load(archive: Path) -> pd.DataFrame:
    """One row per archived headline cell: N, arm, fleet, heterogeneity, seed, path, wall seconds."""
    runs = p2pfl.load_runs(archive)
    out = pd.DataFrame({
        "n": runs["n_devices"].astype(int), "arm": runs["variant"], "seed": runs["seed"].astype(int),
        "het": runs["scenario.data.partition.kind"], "dyn": [dynamics_of(r) for _, r in runs.iterrows()],
        "path": runs["path"], "wall_s": runs["timing.wall_s"].astype(float)})
    return out


def curve_of(path: str, dyn: str) -> tuple[CostCurve, dict[str, Any]]:
    summary = json.loads((Path(path) / "summary.json").read_text())
    return cost_curve(summary, "over_time" if dyn == "churn" and summary.get("accuracy_over_time") else "curve"), summary


def collapsed(path: str) -> bool:
    """Whether a run's final clusters merged two true groups (``merged_groups``)."""
    s = json.loads((Path(path) / "summary.json").read_text())
    return merged_groups(s["true_clusters"], s["clusters"]) > 0


def power(cells: pd.DataFrame) -> list[dict[str, Any]]:
    """Per N, fleet, comparison and reading: the archived paired gain differences and the seeds to resolve them."""
    rot = cells[(cells["het"] == "rotation") & cells["dyn"].isin(DYNAMICS)]
    out = []
    for (n, dyn), group in rot.groupby(["n", "dyn"], sort=True):
        by_arm = {arm: {int(r.seed): r.path for r in g.itertuples()} for arm, g in group.groupby("arm")}
        refs = {arm: {s: curve_of(p, dyn)[0].final for s, p in by_arm.get(arm, {}).items()} for arm in ("local", "oracle")}
        # IFCA with restarts, proxied by the seeds where IFCA did not collapse (what restarts are for)
        by_arm[IFCA_KEPT] = {s: path for s, path in by_arm.get("ifca", {}).items() if not collapsed(path)}
        for a in SERVERLESS:
            for b in (*SERVER, IFCA_KEPT):
                seeds = sorted(set(by_arm.get(a, {})) & set(by_arm.get(b, {})) & set(refs["local"]) & set(refs["oracle"]))
                if not seeds:
                    continue
                curves = {s: (curve_of(by_arm[a][s], dyn)[0], curve_of(by_arm[b][s], dyn)[0]) for s in seeds}
                for reading in READINGS:
                    diffs = [d for s in seeds if (d := gain_difference(read(*curves[s], reading), refs["local"][s],
                                                                       refs["oracle"][s])) is not None]
                    out.append({"n": n, "dyn": dyn, "a": a, "b": b, "reading": reading, "diffs": diffs,
                                "seeds_had": len(seeds),
                                "need": seeds_to_resolve(diffs, MARGIN, ALPHA, family=FAMILY) if len(diffs) >= 2
                                else None})
    return out


def collapse(cells: pd.DataFrame) -> list[tuple[int, str, int, int]]:
    """(N, fleet, IFCA runs whose clusters merged two true groups, IFCA runs), rotation."""
    out = []
    ifca = cells[(cells["arm"] == "ifca") & (cells["het"] == "rotation") & cells["dyn"].isin(DYNAMICS)]
    for (n, dyn), g in ifca.groupby(["n", "dyn"], sort=True):
        out.append((int(n), str(dyn), sum(collapsed(p) for p in g["path"]), len(g)))
    return out


def cell_times(cells: pd.DataFrame) -> dict[tuple[int, str, str], float]:
    """(N, arm, fleet) -> mean measured wall seconds of its archived cells (every heterogeneity)."""
    return {(int(n), str(arm), str(dyn)): float(g.mean()) for (n, arm, dyn), g in
            cells[cells["dyn"].isin(DYNAMICS)].groupby(["n", "arm", "dyn"])["wall_s"]}


def budget(times: dict[tuple[int, str, str], float]) -> tuple[list[list[Any]], float, list[list[Any]]]:
    """The plan's rows (N, arm, cells, cell time static/churn, CPU-hours), the total, and N = 10,000 priced."""
    rows, total = [], 0.0

    def row(n: int, arm: str, seeds: int, placements: int, factor: float = 1.0, label: str = "") -> float:
        t = {d: times.get((n, arm, d), math.nan) * factor for d in DYNAMICS}
        cells = seeds * placements * len(DYNAMICS)
        hours = seeds * placements * sum(t.values()) / 3600
        rows.append([f"{n:,}", label or arm, cells, f"{t['static']:.0f}", f"{t['churn']:.0f}", f"{hours:.2f}"])
        return hours

    for n in (100, 1000):
        k = SEEDS[n]
        for arm in PER_PLACEMENT:
            total += row(n, arm, k, 2)
        for arm in PLACEMENT_FREE:
            total += row(n, arm, k, 1, RESTARTS if arm == "ifca" else 1.0,
                         f"ifca, r = {RESTARTS}" if arm == "ifca" else "")
        for arm, by_n in EXPLORATORY.items():
            if n in by_n:
                total += row(n, arm, by_n[n], 2, label=f"{arm} (exploratory)")
        for arm, k1g in EGRESS_1G.items():
            total += row(n, arm, k1g, 1, RESTARTS if arm == "ifca_1g" else 1.0, f"{arm} (egress sensitivity)")
    rows.append(["", "convergence pilot (reserved)", "", "", "", f"{PILOT_H:.2f}"])
    total += PILOT_H
    cut: list[list[Any]] = []
    for arm in (*PER_PLACEMENT, *PLACEMENT_FREE):
        t = {d: times.get((10000, arm, d)) for d in DYNAMICS}
        if any(v is None for v in t.values()):
            cut.append([arm, "not in the archive at N = 10,000", ""])
            continue
        factor = RESTARTS if arm == "ifca" else 1.0
        places = 2 if arm in PER_PLACEMENT else 1
        cut.append([arm, f"{sum(t.values()) * factor:.0f}", f"{5 * places * sum(t.values()) * factor / 3600:.1f}"])
    return rows, total, cut


def fmt(x: Optional[float], digits: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.{digits}f}"


def write(archive: Path, out: Path) -> None:
    cells = load(archive)
    rows = power(cells)
    lines = ["# Headline v3: power, collapse, cell times and budget (issue 70)", "",
             f"`python analysis/experiments/headline_v3_power.py {archive}` (from the archived cells of "
             "`scenarios/studies/headline_n*.yaml`; the plan: `scenarios/studies/headline_v3/PLAN.md`).", "",
             f"Margin {MARGIN} headroom gain; alpha {ALPHA}; Holm family per regime: {len(SERVERLESS)} serverless x "
             f"{len(SERVER)} server arms x {len(READINGS)} readings x {len(NS)} N = {FAMILY} comparisons; "
             "`seeds to resolve`: the fewest seeds at which the family's strictest Holm interval (1 - alpha / "
             f"{FAMILY}) clears -margin on one side, if a rerun showed the archived mean and SD (`seeds_to_resolve`, "
             "cap 100: '>100'). Differences are serverless minus server, in headroom gain (0 = Local, 1 = Oracle).",
             "", "## Power: the archived paired differences per comparison and reading", ""]
    table = []
    for r in rows:
        d = r["diffs"]
        mean = statistics.mean(d) if d else None
        sd = statistics.stdev(d) if len(d) >= 2 else None
        need = r["need"]
        table.append([f"{r['n']:,}", r["dyn"], f"{r['a']} - {r['b']}", COST_LABELS[r["reading"]],
                      f"{len(d)}/{r['seeds_had']}", fmt(mean), "—" if sd is None else f"{sd:.3f}",
                      ("—" if len(d) < 2 else ">100") if need is None else str(need)])
    lines += markdown_table(table, ["N", "fleet", "comparison", "reading", "seeds read", "mean", "SD",
                                    "seeds to resolve"], align="lllllrrr")
    lines += ["", "## Power: summary per N and fleet (the family's comparisons; IFCA as archived)", ""]
    summary = []
    family = pd.DataFrame([r for r in rows if r["b"] != IFCA_KEPT])
    for (n, dyn), group in family.groupby(["n", "dyn"], sort=True):
        read_ok = [r for r in group.itertuples() if len(r.diffs) >= 2]
        needs = sorted(r.need for r in read_ok if r.need is not None)
        sds = [statistics.stdev(r.diffs) for r in read_ok]
        summary.append([f"{n:,}", dyn, len(group), len(read_ok),
                        sum(x <= 10 for x in needs), sum(x <= 5 for x in needs),
                        str(needs[len(needs) // 2]) if needs else "—", f"{statistics.median(sds):.3f}" if sds else "—",
                        f"{max(sds):.3f}" if sds else "—"])
    lines += markdown_table(summary, ["N", "fleet", "comparisons", "with a reading (>= 2 seeds)",
                                      "resolved at <= 10 seeds", "at <= 5", "median seeds to resolve",
                                      "median SD", "largest SD"], align="llrrrrrrr")
    lines += ["", "## Power against IFCA with restarts, proxied by the seeds where IFCA did not collapse", "",
              "Seeds to resolve for each serverless arm minus IFCA, with IFCA read only on its seeds that did not "
              "merge two groups (the runs restarts are meant to keep), beside IFCA as archived:", ""]
    by_key = {(r["n"], r["dyn"], r["a"], r["b"], r["reading"]): r for r in rows}
    proxy = []
    for r in rows:
        if r["b"] != IFCA_KEPT or len(r["diffs"]) < 2:
            continue
        plain = by_key[(r["n"], r["dyn"], r["a"], "ifca", r["reading"])]
        need = r["need"]
        proxy.append([f"{r['n']:,}", r["dyn"], r["a"], COST_LABELS[r["reading"]], f"{len(r['diffs'])}",
                      fmt(statistics.mean(r["diffs"])), f"{statistics.stdev(r['diffs']):.3f}",
                      ">100" if need is None else str(need),
                      f"{statistics.stdev(plain['diffs']):.3f}" if len(plain["diffs"]) >= 2 else "—",
                      "—" if len(plain["diffs"]) < 2 else (">100" if plain["need"] is None else str(plain["need"]))])
    lines += markdown_table(proxy, ["N", "fleet", "serverless arm", "reading", "seeds", "mean", "SD",
                                    "seeds to resolve", "SD, all IFCA seeds", "seeds to resolve, all"],
                            align="llllrrrrrr")
    lines += ["", "## IFCA's collapse (two true groups merged), rotation, without restarts", ""]
    coll = collapse(cells)
    merged = sum(m for _, _, m, _ in coll)
    total_runs = sum(t for _, _, _, t in coll)
    p = merged / total_runs if total_runs else math.nan
    lines += markdown_table([[f"{n:,}", dyn, f"{m}/{t}"] for n, dyn, m, t in coll] + [["all", "", f"{merged}/{total_runs}"]],
                            ["N", "fleet", "runs collapsed"], align="llr")
    lines += ["", f"If each restart collapses independently with p = {p:.2f} (the pooled rate), all r collapse with "
                  "p^r: " + ", ".join(f"r = {r}: {p ** r:.2f}" for r in range(1, 6)) + f". The plan takes r = {RESTARTS} "
                  f"(each restart with the archived arm's balanced init), at {RESTARTS}x IFCA's bytes, FLOPs and time.",
              "", "## Cell times (mean measured wall s per cell, all heterogeneities)", ""]
    times = cell_times(cells)
    arms = sorted({a for _, a, _ in times})
    lines += markdown_table([[f"{n:,}", a, *(f"{times[(n, a, d)]:.0f}" if (n, a, d) in times else "—" for d in DYNAMICS)]
                             for n in NS for a in arms if any((n, a, d) in times for d in DYNAMICS)],
                            ["N", "arm", "static", "churn"], align="llrr")
    rows_b, total, cut = budget(times)
    lines += ["", "## Budget", "",
              f"Seeds: {SEEDS[100]} at N = 100 and {SEEDS[1000]} at N = 1,000; rotation; static and churn; "
              "placement-dependent arms (" + ", ".join(PER_PLACEMENT) + ") once per placement (strips, scattered), "
              "the others once per seed and fleet, reused for both placements. Cell times: the archived means "
              f"(IFCA's x {RESTARTS} restarts; scattered assumed to cost what strips cost).", ""]
    lines += markdown_table(rows_b, ["N", "arm", "cells", "cell s static", "cell s churn", "CPU-hours"],
                            align="llrrrr")
    lines += ["", f"**Total: {total:.1f} CPU-hours** of {BUDGET_H:.0f}.", "",
              "N = 10,000 priced at 5 seeds, both fleets, both placements where an arm depends on them (cell s: "
              "static + churn):", ""]
    lines += markdown_table(cut, ["arm", "cell s (static + churn)", "CPU-hours at 5 seeds"], align="lrr")
    cut_total = sum(float(c[2]) for c in cut if c[2])
    lines += ["", f"N = 10,000 would add {cut_total:.1f} CPU-hours (the arms priced): it waits for the tensor "
                  "clustering programs."]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out} ({total:.1f} CPU-hours planned)")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archive", type=Path, nargs="?", default=ROOT / "analysis" / "cells" / "headline")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    write(args.archive, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
