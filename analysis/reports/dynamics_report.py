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

Every figure comes from the run directories only (``p2pfl.metrics.runs`` tables, and positions.npz
for the frames). The studies' archives hold them (``positions.npz`` only for the run drawn):

    python analysis/reports/dynamics_report.py analysis/cells/dynamics [--md analysis/results/dynamics.md]
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from p2pfl.clustering.plots import federation_frames
from p2pfl.metrics.report import band, ci95
from p2pfl.metrics.runs import load_runs, log_entries
from p2pfl.metrics.tables import markdown_table, report_main
from p2pfl.study.verify import provenance_lines

PROTOCOLS = ("gossip", "dsgd", "dac", "rnd_gossip", "fedavg")
REASONS = ("offline", "link_down", "partition", "loss")


def setting_of(run: Any) -> str:
    """A run's dynamics setting, in words: static, churn 30%, partition, mobility 0.2."""
    off, speed = run.get("grid.dynamics.churn.offline"), run.get("grid.dynamics.mobility.speed")
    if pd.notna(off):
        return "static" if float(off) == 0 else f"churn {float(off):.0%}"
    if pd.notna(speed):
        return f"mobility {json.loads(speed)[0]:g}"
    return "partition" if run["study"] == "dynamics_partition" else str(run["study"])


def static_degree(path: str) -> float:
    """Mean degree of the run's device graph as built from its scenario.yaml."""
    import yaml

    from p2pfl.topology import TopologySpec, build_topology

    sc = yaml.safe_load((Path(path) / "scenario.yaml").read_text())
    g = build_topology(TopologySpec(**sc["topology"]), seed=sc["seed"]).graph
    return 2.0 * g.number_of_edges() / g.number_of_nodes()


def load(dirs: list[Path]) -> pd.DataFrame:
    """One row per run: protocol (variant), setting, seed, the figures the report uses, and its ari and
    federation_labels logs (lists of entries)."""
    runs = load_runs(*dirs)
    runs["protocol"], runs["setting"] = runs["variant"], runs.apply(setting_of, axis=1)
    for reason in REASONS:
        runs[f"dropped.{reason}"] = runs.get(f"messages_dropped_by_reason.{reason}", pd.Series(0, runs.index)).fillna(0)
    degree = runs.get("dynamics.mean_radius_degree", pd.Series(math.nan, runs.index))
    runs["degree"] = [d if pd.notna(d) and d else static_degree(p) for d, p in zip(degree, runs["path"])]
    for name in ("ari", "federation_labels"):
        entries = log_entries(*dirs, name=name)
        runs[f"{name}_log"] = [entries.get(p, []) for p in runs["path"]]
    return runs.rename(columns={"accuracy_mean": "accuracy", "accuracy_worst": "worst", "bytes_total": "bytes",
                                "dynamics.availability_mean": "availability"})


def _ci(values: list[float]) -> str:
    """'mean ± half-width' of the 95% interval ('–' without values: ARI of a protocol that has none)."""
    mean, _, lo, hi = ci95(values)
    if math.isnan(mean):
        return "–"
    return f"{mean:.3f}" if math.isnan(lo) else f"{mean:.3f} ± {(hi - lo) / 2:.3f}"


def _settings(runs: pd.DataFrame) -> list[str]:
    order = ["static", "churn 10%", "churn 30%", "churn 50%", "partition"]
    found = set(runs["setting"])
    mobility = sorted((s for s in found if s.startswith("mobility")), key=lambda s: float(s.split()[1]))
    return [s for s in order if s in found] + mobility


def _cell(runs: pd.DataFrame, protocol: str, setting: str) -> pd.DataFrame:
    """The runs of one protocol and setting, by seed; ``static_*``: the static run of the same seed (NaN: none)."""
    cell = runs[(runs["protocol"] == protocol) & (runs["setting"] == setting)].sort_values("seed", kind="stable")
    static = runs[(runs["protocol"] == protocol) & (runs["setting"] == "static")].set_index("seed")
    return cell.assign(static_accuracy=cell["seed"].map(static["accuracy"]),
                       static_bytes=cell["seed"].map(static["bytes"]))


def table(runs: pd.DataFrame) -> list[str]:
    """The markdown table: every protocol x setting against the static fleet."""
    rows = []
    for p in PROTOCOLS:
        for st in _settings(runs):
            cell = _cell(runs, p, st)
            if cell.empty:
                continue
            paired = cell[cell["static_accuracy"].notna()]
            diffs = (paired["accuracy"] - paired["static_accuracy"]).tolist()
            mb = float(np.mean(cell["bytes"].to_numpy())) / 1e6
            static_mb = paired["static_bytes"].astype("int64").to_numpy()
            dbytes = f"{mb / (np.mean(static_mb) / 1e6) - 1:+.0%}" if len(static_mb) and st != "static" else "–"
            drops = " / ".join(f"{np.mean(cell[f'dropped.{k}'].to_numpy()):.0f}" for k in REASONS)
            rows.append([p, st, len(cell), _ci(cell["accuracy"].tolist()), _ci(diffs) if st != "static" else "–",
                         _ci(cell["worst"].tolist()), f"{mb:.1f}", dbytes, drops,
                         f"{np.mean(cell['availability'].to_numpy()):.2f}", f"{np.mean(cell['degree'].to_numpy()):.1f}",
                         _ci(cell["ari"].dropna().tolist()), f"{np.mean(cell['sim_time_s'].to_numpy()):.1f}"])
    return markdown_table(rows, ["protocol", "setting", "runs", "accuracy (95% CI)", "Δ accuracy vs static (paired)",
                                 "worst device", "MB sent", "Δ bytes",
                                 "dropped: offline / link_down / partition / loss",
                                 "availability", "mean degree", "ARI", "sim time s"])


def churn_figure(runs: pd.DataFrame, out: Path) -> Path:
    fig = Figure(figsize=(10, 4))
    acc, byt = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    levels = [("static", 0.0), ("churn 10%", 0.1), ("churn 30%", 0.3), ("churn 50%", 0.5)]
    for p in PROTOCOLS:
        xs, ys, es, bs = [], [], [], []
        for name, x in levels:
            vals = runs[(runs["protocol"] == p) & (runs["setting"] == name)]
            if vals.empty:
                continue
            mean, lo, hi = band(vals["accuracy"].tolist())
            xs.append(x)
            ys.append(mean)
            es.append((hi - lo) / 2)
            bs.append(float(np.mean(vals["bytes"].to_numpy())) / 1e6)
        if xs:
            acc.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=p)
            byt.plot(xs, bs, marker="o", label=p)
    acc.set(xlabel="offline fraction of time", ylabel="final mean accuracy (95% CI over seeds)")
    byt.set(xlabel="offline fraction of time", ylabel="MB sent (mean over seeds)", yscale="log")
    acc.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return out


def frames_figure(runs: pd.DataFrame, out: Path) -> Path | None:
    """rnd_gossip's moving neighbourhood at three moments, devices coloured by federation."""
    drawn = runs[(runs["protocol"] == "rnd_gossip") & runs["setting"].str.startswith("mobility")
                 & runs["federation_labels_log"].map(bool)
                 & runs["path"].map(lambda p: (Path(p) / "positions.npz").is_file())]
    if drawn.empty:
        return None
    speed = drawn["setting"].str.split().str[1].astype(float)
    drawn = drawn.assign(speed=speed).sort_values(["speed", "seed"], ascending=[False, True], kind="stable")
    run = next((r for _, r in drawn.iterrows() if r["setting"] == "mobility 0.2"), drawn.iloc[0])
    radius = float(run["scenario.topology.radius"])
    return federation_frames(Path(run["path"]) / "positions.npz", run["federation_labels_log"], run["ari_log"], radius,
                             out, title=f"rnd_gossip under mobility ({run['setting']} units/s, seed {run['seed']}): "
                                        f"links within radio range {radius:g}, colour = federation")


def costs(runs: pd.DataFrame) -> list[str]:
    """One line per protocol: the accuracy change (paired by seed, 95% CI) and the bytes change of every
    setting against the static fleet, and whether the interval excludes zero."""
    out = []
    for p in PROTOCOLS:
        parts = []
        for st in _settings(runs):
            paired = _cell(runs, p, st).dropna(subset=["static_accuracy"])
            if st == "static" or paired.empty:
                continue
            mean, _, lo, hi = ci95((paired["accuracy"] - paired["static_accuracy"]).tolist())
            dbytes = sum(paired["bytes"].tolist()) / sum(paired["static_bytes"].astype("int64").tolist()) - 1
            sure = "" if math.isnan(lo) or lo <= 0 <= hi else " (CI excludes 0)"
            half = "" if math.isnan(lo) else f" ± {(hi - lo) / 2:.3f}"
            parts.append(f"{st}: {mean:+.3f}{half}{sure}, bytes {dbytes:+.0%}")
        if parts:
            out.append(f"- **{p}**: " + "; ".join(parts) + ".")
    return out


def ari_figure(runs: pd.DataFrame, out: Path) -> Path | None:
    """ARI over simulated time (seed 0) of the clustering protocols, one panel each."""
    protos = [p for p in ("rnd_gossip", "dac") if runs.loc[runs["protocol"] == p, "ari_log"].map(bool).any()]
    if not protos:
        return None
    fig = Figure(figsize=(5.5 * len(protos), 4))
    for k, p in enumerate(protos):
        ax = fig.add_subplot(1, len(protos), k + 1)
        for st in _settings(runs):
            run = runs[(runs["protocol"] == p) & (runs["setting"] == st) & (runs["seed"] == 0)]
            if run.empty or not run["ari_log"].iloc[0]:
                continue
            log = run["ari_log"].iloc[0]
            ax.plot([e["t"] for e in log], [e["value"] for e in log], marker=".", label=st)
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


def write(dirs: list[Path], md: Path) -> None:
    runs = load(dirs)
    res = md.parent
    res.mkdir(parents=True, exist_ok=True)
    churn = churn_figure(runs, res / "dynamics_churn.png")
    ari = ari_figure(runs, res / "dynamics_ari.png")
    frames = frames_figure(runs, res / "dynamics_mobility_frames.png")
    n_expected = runs.groupby(["protocol", "setting"]).ngroups * 3
    text = ["# What dynamics cost: gossip, DSGD, DAC, rnd_gossip and FedAvg under churn, a partition and mobility", "",
            f"Generated by `python analysis/reports/dynamics_report.py {' '.join(map(str, dirs))}` from {len(runs)} run "
            f"directories ({n_expected} cells expected at three seeds; every cell finished: none stalled). "
            "Regenerate with the sweep commands at the top of `scenarios/studies/dynamics_*.yaml`.", "",
            "## Provenance", "", "Each archive's cells by the revision that made them, and the last `p2pfl archive verify` of a sample of them at a later revision:", "", *provenance_lines(dirs), "", "## Method", "", METHOD, "## What the dynamics cost each protocol (against the static fleet)", "",
            "Accuracy change (mean over seeds of run minus static, 95% CI) and change of total bytes sent:", "",
            *costs(runs), "", "## All cells", "", *table(runs), "", f"![churn]({churn.name})", ""]
    for fig in (ari, frames):
        if fig is not None:
            text += [f"![{fig.stem}]({fig.name})", ""]
    md.write_text("\n".join(text))
    print("\n".join(costs(runs)))
    print(f"wrote {md}")


if __name__ == "__main__":
    raise SystemExit(report_main(write, __doc__, Path(__file__).parents[1] / "results" / "dynamics.md"))
