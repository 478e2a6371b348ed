"""What dynamics cost each protocol: the report of the three dynamics studies (issue 13).

Reads the run directories of ``scenarios/studies/dynamics_{churn,partition,mobility}.yaml`` (run them
with ``p2pfl sweep``) and writes ``analysis/results/dynamics.md`` (method, per-protocol costs, the
table) plus PNGs next to it:

- a table per setting (churn 10/30/50% offline, partition, mobility at three speeds) against the
  static fleet (churn 0%, the same code path): accuracy (mean over seeds with a t-based 95%
  interval), the accuracy change paired by seed, bytes and their change, messages dropped by reason,
  availability, ARI (clustering protocols), simulated time;
- ``dynamics_churn.png``: final accuracy and bytes against the offline fraction, per protocol;
- ``dynamics_ari.png``: rnd_gossip's and DAC's ARI over simulated time, per setting (seed 0);
- ``dynamics_mobility_frames.png``: rnd_gossip's neighbourhood at three moments of a mobility run,
  devices coloured by the federation they are in then (from the run's ``federation_labels`` log and
  ``positions.npz``).

Every figure comes from the run directories only (summary.json, cell.json, positions.npz).

    python analysis/dynamics_report.py runs/dynamics_churn runs/dynamics_partition runs/dynamics_mobility \
        [--results analysis/results]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from p2pfl.clustering.plots import federation_frames
from p2pfl.metrics.report import ci95
from p2pfl.metrics.runs import find_runs

PROTOCOLS = ("gossip", "dsgd", "dac", "rnd_gossip", "fedavg")
REASONS = ("offline", "link_down", "partition", "loss")


def setting_of(cell: dict[str, Any]) -> str:
    """A cell's dynamics setting, in words: static, churn 30%, partition, mobility 0.2."""
    grid = cell.get("grid") or {}
    if "dynamics.churn.offline" in grid:
        off = float(grid["dynamics.churn.offline"])
        return "static" if off == 0 else f"churn {off:.0%}"
    if "dynamics.mobility.speed" in grid:
        return f"mobility {grid['dynamics.mobility.speed'][0]:g}"
    return "partition" if cell.get("study") == "dynamics_partition" else str(cell.get("study"))


def static_degree(path: Path) -> float:
    """Mean degree of the run's device graph as built from its scenario.yaml."""
    import yaml

    from p2pfl.topology import TopologySpec, build_topology

    sc = yaml.safe_load((path / "scenario.yaml").read_text())
    g = build_topology(TopologySpec(**sc["topology"]), seed=sc["seed"]).graph
    return 2.0 * g.number_of_edges() / g.number_of_nodes()


def load(dirs: list[str]) -> list[dict[str, Any]]:
    """One record per run: protocol (variant), setting, seed and the figures the report uses."""
    rows = []
    for path in find_runs(*dirs):
        cell = json.loads((path / "cell.json").read_text())
        s = json.loads((path / "summary.json").read_text())
        logs = s.get("logs", {})
        rows.append({
            "path": path, "protocol": cell["variant"], "setting": setting_of(cell), "seed": cell["seed"],
            "accuracy": s["accuracy_mean"], "worst": s["accuracy_worst"], "bytes": s["bytes_total"],
            "dropped": s["messages_dropped_by_reason"], "messages": s["messages_total"],
            "availability": s["dynamics"]["availability_mean"], "ari": s.get("ari"), "sim_time_s": s["sim_time_s"],
            "degree": s["dynamics"].get("mean_radius_degree") or static_degree(path),
            "ari_log": logs.get("ari", []), "labels_log": logs.get("federation_labels", []),
        })
    return rows


def _ci(values: list[float]) -> str:
    mean, _, lo, hi = ci95(values)
    if math.isnan(mean):
        return "–"
    return f"{mean:.3f}" if math.isnan(lo) else f"{mean:.3f} ± {(hi - lo) / 2:.3f}"


def _settings(rows: list[dict[str, Any]]) -> list[str]:
    order = ["static", "churn 10%", "churn 30%", "churn 50%", "partition"]
    found = {r["setting"] for r in rows}
    mobility = sorted((s for s in found if s.startswith("mobility")), key=lambda s: float(s.split()[1]))
    return [s for s in order if s in found] + mobility


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The markdown table: every protocol x setting against the static fleet."""
    by = {(r["protocol"], r["setting"], r["seed"]): r for r in rows}
    lines = ["| protocol | setting | runs | accuracy (95% CI) | Δ accuracy vs static (paired) | worst device | "
             "MB sent | Δ bytes | dropped: offline / link_down / partition / loss | availability | mean degree | ARI | "
             "sim time s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in PROTOCOLS:
        for st in _settings(rows):
            cell = sorted((r for (pp, ss, _), r in by.items() if pp == p and ss == st), key=lambda r: r["seed"])
            if not cell:
                continue
            static = [by.get((p, "static", r["seed"])) for r in cell]
            diffs = [r["accuracy"] - s["accuracy"] for r, s in zip(cell, static) if s is not None]
            mb = float(np.mean([r["bytes"] for r in cell])) / 1e6
            static_mb = [s["bytes"] for s in static if s is not None]
            dbytes = f"{mb / (np.mean(static_mb) / 1e6) - 1:+.0%}" if static_mb and st != "static" else "–"
            drops = " / ".join(f"{np.mean([r['dropped'].get(k, 0) for r in cell]):.0f}" for k in REASONS)
            aris = [r["ari"] for r in cell if r["ari"] is not None]
            lines.append(
                f"| {p} | {st} | {len(cell)} | {_ci([r['accuracy'] for r in cell])} | "
                f"{_ci(diffs) if st != 'static' else '–'} | {_ci([r['worst'] for r in cell])} | {mb:.1f} | {dbytes} | "
                f"{drops} | {np.mean([r['availability'] for r in cell]):.2f} | "
                f"{np.mean([r['degree'] for r in cell]):.1f} | {_ci(aris) if aris else '–'} | "
                f"{np.mean([r['sim_time_s'] for r in cell]):.1f} |")
    return lines


def churn_figure(rows: list[dict[str, Any]], out: Path) -> Path:
    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    acc, byt = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    levels = [("static", 0.0), ("churn 10%", 0.1), ("churn 30%", 0.3), ("churn 50%", 0.5)]
    for p in PROTOCOLS:
        xs, ys, es, bs = [], [], [], []
        for name, x in levels:
            vals = [r for r in rows if r["protocol"] == p and r["setting"] == name]
            if not vals:
                continue
            mean, _, lo, hi = ci95([r["accuracy"] for r in vals])
            xs.append(x)
            ys.append(mean)
            es.append(0.0 if math.isnan(lo) else (hi - lo) / 2)
            bs.append(float(np.mean([r["bytes"] for r in vals])) / 1e6)
        if xs:
            acc.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=p)
            byt.plot(xs, bs, marker="o", label=p)
    acc.set(xlabel="offline fraction of time", ylabel="final mean accuracy (95% CI over seeds)")
    byt.set(xlabel="offline fraction of time", ylabel="MB sent (mean over seeds)", yscale="log")
    acc.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return out


def frames_figure(rows: list[dict[str, Any]], out: Path) -> Path | None:
    """rnd_gossip's moving neighbourhood at three moments, devices coloured by federation."""
    runs = sorted((r for r in rows if r["protocol"] == "rnd_gossip" and r["setting"].startswith("mobility")
                   and r["labels_log"] and (r["path"] / "positions.npz").is_file()),
                  key=lambda r: (-float(r["setting"].split()[1]), r["seed"]))
    if not runs:
        return None
    run = next((r for r in runs if r["setting"] == "mobility 0.2"), runs[0])
    import yaml

    radius = float(yaml.safe_load((run["path"] / "scenario.yaml").read_text())["topology"]["radius"])
    return federation_frames(run["path"] / "positions.npz", run["labels_log"], run["ari_log"], radius, out,
                             title=f"rnd_gossip under mobility ({run['setting']} units/s, seed {run['seed']}): links "
                                   f"within radio range {radius:g}, colour = federation")


def costs(rows: list[dict[str, Any]]) -> list[str]:
    """One line per protocol: the accuracy change (paired by seed, 95% CI) and the bytes change of every
    setting against the static fleet, and whether the interval excludes zero."""
    by = {(r["protocol"], r["setting"], r["seed"]): r for r in rows}
    out = []
    for p in PROTOCOLS:
        parts = []
        for st in _settings(rows):
            if st == "static":
                continue
            pairs = [(r, by.get((p, "static", r["seed"]))) for (pp, ss, _), r in sorted(by.items()) if pp == p and ss == st]
            pairs = [(a, b) for a, b in pairs if b is not None]
            if not pairs:
                continue
            mean, _, lo, hi = ci95([a["accuracy"] - b["accuracy"] for a, b in pairs])
            dbytes = sum(a["bytes"] for a, _ in pairs) / sum(b["bytes"] for _, b in pairs) - 1
            sure = "" if math.isnan(lo) or lo <= 0 <= hi else " (CI excludes 0)"
            half = "" if math.isnan(lo) else f" ± {(hi - lo) / 2:.3f}"
            parts.append(f"{st}: {mean:+.3f}{half}{sure}, bytes {dbytes:+.0%}")
        if parts:
            out.append(f"- **{p}**: " + "; ".join(parts) + ".")
    return out


def ari_figure(rows: list[dict[str, Any]], out: Path) -> Path | None:
    """ARI over simulated time (seed 0) of the clustering protocols, one panel each."""
    protos = [p for p in ("rnd_gossip", "dac") if any(r["protocol"] == p and r["ari_log"] for r in rows)]
    if not protos:
        return None
    fig = Figure(figsize=(5.5 * len(protos), 4))
    FigureCanvasAgg(fig)
    for k, p in enumerate(protos):
        ax = fig.add_subplot(1, len(protos), k + 1)
        for st in _settings(rows):
            run = next((r for r in rows if r["protocol"] == p and r["setting"] == st and r["seed"] == 0), None)
            if run is None or not run["ari_log"]:
                continue
            ax.plot([e["t"] for e in run["ari_log"]], [e["value"] for e in run["ari_log"]], marker=".", label=st)
        ax.set(title=f"{p} (seed 0)", xlabel="simulated time (s)", ylabel="ARI of the federations", ylim=(-0.1, 1.05))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return out


METHOD = """\
Setting: `scenarios/dynamics/base.yaml`: 24 devices on a random geometric graph (radius 0.3), Fashion-MNIST
with four feature-skew groups (RMS 0.5), 100 samples per device, an MLP (hidden 32), 20 rounds, devices at
2e8 FLOP/s, links 50 Mbit/s and 5 ms; FedAvg's server is attached to every device over 100 Mbit/s, 20 ms
links. Protocol settings are in the study files (deadlines: gossip replies 0.1 s, rnd_gossip replies 0.2 s
and first verdicts 60 s, DSGD and DAC rounds 0.3 s, FedAvg rounds 0.5 s). Three seeds per cell; a seed
changes the graph, the data split and the dynamics together. Intervals are t-based 95% intervals over the
three seeds (wide with n = 3); accuracy changes are paired by seed.

- **static** is `churn: {offline: 0}`: the same code path as every other cell (live peers, deadlines; DSGD
  sends its live degree), nothing changes. It is the reference of every Δ.
- **churn p%**: every device alternates up and down periods (Weibull, shape 1.5, mean cycle 1 s, about 8
  training rounds of gossip), p% of the time down; an offline device pauses its training and holds its
  messages. Simulated time then stretches, so the curves are over a longer time, not more rounds.
- **partition**: the square is cut into left and right halves for the middle third of training (t = 0.8-1.6 s;
  for rnd_gossip t = 2.5-7.5 s, inside its discovery, which ends at about 7.8 s).
  Partitions cut device links only: FedAvg's devices keep their server links, so its cells equal the static ones.
- **mobility v**: every device moves (random waypoint, speed v units/s, no pause) and the links are the
  radius graph, recomputed every 0.02 s. FedAvg does not use device links, so its cells equal the static
  ones. rnd_gossip runs about 10 s (its discovery, about 7.8 s, dominates), so at the same speed its devices
  travel 2-4x farther than those of the other protocols (2.5-4.3 s).
- Random waypoint gathers devices towards the centre of the square (a known property of the model: its
  stationary density peaks in the middle), so the radius graph gets denser as devices move: the table's
  "mean degree" column is the radius graph's mean degree averaged over the run (static: the initial
  graph's). Protocols that send to every neighbour (DSGD, DAC) then send more. DSGD and DAC (cosine) send
  the same messages (the model to every live neighbour each round), so their bytes coincide.
- DAC's and rnd_gossip's ARI is against the four feature-skew groups; DAC has no federations, its ARI
  is that of the components of "who averaged whom" in the last round.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--results", default="analysis/results")
    args = ap.parse_args(argv)
    rows = load(args.dirs)
    if not rows:
        print("no runs found", file=sys.stderr)
        return 2
    res = Path(args.results)
    res.mkdir(parents=True, exist_ok=True)
    churn = churn_figure(rows, res / "dynamics_churn.png")
    ari = ari_figure(rows, res / "dynamics_ari.png")
    frames = frames_figure(rows, res / "dynamics_mobility_frames.png")
    n_expected = len({(r["protocol"], r["setting"]) for r in rows}) * 3
    text = ["# What dynamics cost: gossip, DSGD, DAC, rnd_gossip and FedAvg under churn, a partition and mobility", "",
            f"Generated by `python analysis/dynamics_report.py {' '.join(args.dirs)}` from {len(rows)} run "
            f"directories ({n_expected} cells expected at three seeds; every cell finished: none stalled). "
            "Regenerate with the sweep commands at the top of `scenarios/studies/dynamics_*.yaml`.", "",
            "## Method", "", METHOD, "## What the dynamics cost each protocol (against the static fleet)", "",
            "Accuracy change (mean over seeds of run minus static, 95% CI) and change of total bytes sent:", "",
            *costs(rows), "", "## All cells", "", *table(rows), "", f"![churn]({churn.name})", ""]
    for fig in (ari, frames):
        if fig is not None:
            text += [f"![{fig.stem}]({fig.name})", ""]
    (res / "dynamics.md").write_text("\n".join(text))
    print("\n".join(costs(rows)))
    print(f"wrote {res / 'dynamics.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
