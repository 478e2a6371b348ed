"""The headline comparison (issue 16): server vs serverless clustering at neighbourhood scale, static and
under churn and mobility, from the run directories of the studies ``scenarios/studies/headline_n*.yaml``.

    for n in 100 1000; do
      p2pfl sweep scenarios/studies/headline_n$n.yaml --jobs 2 --out runs/headline/n$n \
          --archive analysis/cells/headline/n$n; done
    p2pfl sweep scenarios/studies/headline_n10000.yaml --jobs 1 --out runs/headline/n10000 \
        --archive analysis/cells/headline/n10000   # alone: memory, see its header
    python analysis/headline_report.py analysis/cells/headline   # -> analysis/results/server_vs_serverless.md + PNGs

The committed archive (``analysis/cells/headline``: each complete cell without its event stream, see
``p2pfl.metrics.archive``) is what the report reads; the same sweep command resumes a study from it.

Reads run directories only (``cell.json``, ``scenario.yaml``, ``summary.json``, ``timing.json``,
``positions.npz``). Per cell (protocol x N x heterogeneity x fleet setting) over seeds: mean device accuracy
and its worst decile (mean of the lowest 10% of devices), final ARI of the federations, bytes sent per
device and by the server, simulated time of the run and to reach the target accuracy (0.9 x the Oracle's
mean final accuracy in the same setting), modelled compute per device, and messages lost to the dynamics
(dropped because a device was offline, a link was down or out of range). Intervals are 95% t-intervals
over seeds; "matches" is decided on paired per-seed differences (``p2pfl.metrics.claims``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from p2pfl.clustering.plots import federation_frames  # noqa: E402
from p2pfl.metrics.claims import at_least, fmt_ci, fmt_diff, interval, paired  # noqa: E402
from p2pfl.metrics.runs import find_runs  # noqa: E402

OUT = ROOT / "analysis" / "results"
COMMAND = ("for n in 100 1000; do p2pfl sweep scenarios/studies/headline_n$n.yaml --jobs 2 "
           "--out runs/headline/n$n --archive analysis/cells/headline/n$n; done\n"
           "MALLOC_MMAP_THRESHOLD_=65536 p2pfl sweep scenarios/studies/headline_n10000.yaml --jobs 1 "
           "--out runs/headline/n10000 --archive analysis/cells/headline/n10000   # alone: memory, see its header\n"
           "python analysis/headline_report.py analysis/cells/headline")
#: protocol -> (side, clusters?): the report's order
PROTOCOLS = {
    "oracle": ("server", True), "rnd_relay": ("server", True), "rnd_direct": ("server", True),
    "ifca": ("server", True), "fedavg": ("server", False),
    "rnd_gossip_h1": ("serverless", True), "rnd_gossip_h2": ("serverless", True),
    "dac_cosine": ("serverless", True), "dac_original": ("serverless", True),
    "gossip": ("serverless", False), "dsgd": ("serverless", False), "local": ("none", False),
}
#: server protocols a serverless one must match (the Oracle knows the groups: a ceiling, not a contender)
SERVER_CLUSTERING = ("rnd_relay", "rnd_direct", "ifca")
SERVERLESS_CLUSTERING = ("rnd_gossip_h1", "rnd_gossip_h2", "dac_cosine", "dac_original")
SETTINGS = ("together, static", "scattered, static", "together, churn", "scattered, churn", "group mobility")
LOST = ("offline", "link_down", "partition")
MATCH_MARGIN = 0.02  # accuracy points a serverless protocol may trail the server's best and still "match"
#: protocols whose cost grows by design faster than their devices: rnd with a server trains a predictor per
#: device and scores every (predictor, device) pair, N^2 (RND paper, Sec. III); used only where a protocol ran
#: at a single N, so its growth could not be measured
DESIGN_GROWTH = {"rnd_relay": (2.0, "N^2 predictor pairs scored (by design)"),
                 "rnd_direct": (2.0, "N^2 predictor pairs scored (by design)")}


# ------------------------------------------------------------------------------------------ runs
def setting_of(scenario: dict[str, Any]) -> str:
    """The fleet setting of a run, from its resolved scenario."""
    dyn = scenario.get("dynamics") or {}
    if dyn.get("mobility"):
        return "group mobility"
    where = "together" if scenario["topology"].get("placement") == "strips" else "scattered"
    churn = (dyn.get("churn") or {}).get("offline") or 0.0
    return f"{where}, churn" if churn > 0 else f"{where}, static"


def worst_decile(values: list[float]) -> float:
    """Mean of the lowest 10% of devices (at least one)."""
    v = sorted(values)
    return float(np.mean(v[: max(1, math.ceil(0.1 * len(v)))]))


def ari_curve(summary: dict[str, Any]) -> list[tuple[float, float]]:
    """(simulated time, ARI) of every clustering event the run logged."""
    events = summary.get("clustering_events") or summary.get("logs", {}).get("ari", [])
    return [(float(e["t"]), float(e["ari"] if "ari" in e else e["value"])) for e in events]


def load(root: Path) -> list[dict[str, Any]]:
    """One row per run directory of the headline studies under ``root``."""
    rows = []
    for path in find_runs(root):
        cell = json.loads((path / "cell.json").read_text())
        if not str(cell.get("study", "")).startswith("headline_n"):
            continue
        s = json.loads((path / "summary.json").read_text())
        sc = yaml.safe_load((path / "scenario.yaml").read_text())
        dropped = s.get("messages_dropped_by_reason", {})
        rows.append({
            "path": path, "study": cell["study"], "protocol": cell["variant"], "seed": int(cell["seed"]), "n": int(sc["topology"]["n"]),
            "partition": sc["data"]["partition"]["kind"], "setting": setting_of(sc),
            "acc": s["accuracy_mean"], "worst10": worst_decile(s["accuracy_per_node"]), "ari": s.get("ari"),
            "bytes_device": float(np.mean(s["bytes_per_node"])), "bytes_server": float(sum(s["bytes_per_server"].values())),
            "bytes": s["bytes_total"], "sim_s": s["sim_time_s"], "flops_device": float(np.mean(s["compute_flops_per_node"])),
            "lost": sum(int(dropped.get(k, 0)) for k in LOST), "messages": s["messages_total"],
            "curve": [(float(e["t"]), float(e["accuracy_mean"])) for e in s["accuracy_curve"]],
            "ari_curve": ari_curve(s), "wall_s": json.loads((path / "timing.json").read_text())["wall_s"],
        })
    if not rows:
        raise SystemExit(f"{root}: no runs of the headline studies (scenarios/studies/headline_n*.yaml) found")
    return rows


Key = tuple[int, str, str]  # (N, partition, setting)


def cells(rows: list[dict[str, Any]]) -> dict[Key, dict[str, list[dict[str, Any]]]]:
    """(N, partition, setting) -> protocol -> runs over seeds."""
    out: dict[Key, dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        out.setdefault((r["n"], r["partition"], r["setting"]), {}).setdefault(r["protocol"], []).append(r)
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], kv[0][1], SETTINGS.index(kv[0][2]))))


def mean(runs: list[dict[str, Any]], field: str) -> float:
    vals = [r[field] for r in runs if r[field] is not None]
    return float(np.mean(vals)) if vals else float("nan")


def by_seed(runs: list[dict[str, Any]], field: str) -> dict[int, float]:
    return {r["seed"]: r[field] for r in runs if r[field] is not None}


def time_to(curve: list[tuple[float, float]], target: float) -> float | None:
    """First simulated time the mean device accuracy reached ``target`` (None: never)."""
    return next((t for t, a in curve if a >= target), None)


def with_targets(table: dict[Key, dict[str, list[dict[str, Any]]]]) -> None:
    """Add ``t_target`` to every run: time to 0.9 x the Oracle's mean final accuracy of its setting."""
    for protos in table.values():
        target = 0.9 * mean(protos["oracle"], "acc") if "oracle" in protos else None
        for runs in protos.values():
            for r in runs:
                r["target"] = target
                r["t_target"] = None if target is None else time_to(r["curve"], target)


# ------------------------------------------------------------------------------------------ tables
def fmt_bytes(b: float) -> str:
    if math.isnan(b):
        return "—"
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= k:
            return f"{b / k:.2f} {unit}"
    return f"{b:.0f} B"


def ordered(protos: Iterable[str]) -> list[str]:
    return [p for p in PROTOCOLS if p in set(protos)]


def accuracy_tables(table: dict[Key, dict[str, list[dict[str, Any]]]]) -> list[str]:
    """Per N and heterogeneity: protocols x settings, mean accuracy ± CI (worst decile below)."""
    out = []
    for n, part in sorted({(k[0], k[1]) for k in table}):
        settings = [s for s in SETTINGS if (n, part, s) in table]
        protos = ordered({p for s in settings for p in table[(n, part, s)]})
        out += [f"### N = {n:,}, {part}: accuracy (mean ± 95% CI; worst decile)", "",
                "| protocol | " + " | ".join(settings) + " |", "|---|" + "---|" * len(settings)]
        for p in protos:
            cellv = []
            for s in settings:
                runs = table[(n, part, s)].get(p, [])
                cellv.append(f"{fmt_ci([r['acc'] for r in runs])} ({mean(runs, 'worst10'):.3f})" if runs else "—")
            out.append(f"| {p} | " + " | ".join(cellv) + " |")
        out.append("")
    return out


def ari_tables(table: dict[Key, dict[str, list[dict[str, Any]]]]) -> list[str]:
    out = []
    for n, part in sorted({(k[0], k[1]) for k in table}):
        settings = [s for s in SETTINGS if (n, part, s) in table]
        protos = [p for p in ordered({p for s in settings for p in table[(n, part, s)]})
                  if PROTOCOLS[p][1] and p != "oracle"]
        if not protos:
            continue
        out += [f"### N = {n:,}, {part}: final ARI of the federations (mean ± 95% CI)", "",
                "| protocol | " + " | ".join(settings) + " |", "|---|" + "---|" * len(settings)]
        for p in protos:
            vals = [fmt_ci([r["ari"] for r in table[(n, part, s)].get(p, []) if r["ari"] is not None], digits=2)
                    for s in settings]
            out.append(f"| {p} | " + " | ".join(vals) + " |")
        out.append("")
    return out


def cost_tables(table: dict[Key, dict[str, list[dict[str, Any]]]]) -> list[str]:
    """Per N and heterogeneity, the static fleet with groups together: what each protocol costs; messages lost
    under churn and mobility."""
    out = []
    for n, part in sorted({(k[0], k[1]) for k in table}):
        base = table.get((n, part, "together, static"))
        if not base:
            continue
        out += [f"### N = {n:,}, {part}: costs (groups together, static; lost messages under churn / mobility)", "",
                "| protocol | bytes / device | bytes at the server | sim time (s) | time to target (s) | "
                "GFLOP / device | lost (churn) | lost (mobility) |", "|---|---|---|---|---|---|---|---|"]
        for p in ordered(base):
            runs = base[p]
            reached = [r["t_target"] for r in runs if r.get("t_target") is not None]
            tt = f"{np.mean(reached):.2f} ({len(reached)}/{len(runs)})" if reached else f"never (0/{len(runs)})"
            churn = table.get((n, part, "together, churn"), {}).get(p, [])
            mob = table.get((n, part, "group mobility"), {}).get(p, [])
            lost = [f"{mean(runs_, 'lost'):.0f}" if runs_ else "—" for runs_ in (churn, mob)]
            out.append(f"| {p} | {fmt_bytes(mean(runs, 'bytes_device'))} | {fmt_bytes(mean(runs, 'bytes_server'))} | "
                       f"{mean(runs, 'sim_s'):.2f} | {tt} | {mean(runs, 'flops_device') / 1e9:.2f} | {lost[0]} | {lost[1]} |")
        out.append("")
    return out


def pareto(protos: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Protocols no other one beats on accuracy, total bytes and simulated time at once (means)."""
    pts = {p: (mean(r, "acc"), mean(r, "bytes"), mean(r, "sim_s")) for p, r in protos.items()}

    def dominated(p: str) -> bool:
        a, b, t = pts[p]
        return any(a2 >= a and b2 <= b and t2 <= t and (a2, b2, t2) != (a, b, t) for q, (a2, b2, t2) in pts.items()
                   if q != p)

    return [p for p in ordered(pts) if not dominated(p)]


def pareto_table(table: dict[Key, dict[str, list[dict[str, Any]]]]) -> list[str]:
    out = ["| N | heterogeneity | setting | Pareto front (accuracy ↑, bytes ↓, simulated time ↓) |", "|---|---|---|---|"]
    for (n, part, s), protos in table.items():
        front = pareto(protos)
        out.append(f"| {n:,} | {part} | {s} | " + ", ".join(
            f"{p} ({mean(protos[p], 'acc'):.3f}, {fmt_bytes(mean(protos[p], 'bytes'))}, {mean(protos[p], 'sim_s'):.1f} s)"
            for p in front) + " |")
    return out + [""]


def best(protos: dict[str, list[dict[str, Any]]], names: tuple[str, ...]) -> str | None:
    have = [p for p in names if p in protos]
    return max(have, key=lambda p: mean(protos[p], "acc")) if have else None


def crossover(table: dict[Key, dict[str, list[dict[str, Any]]]]) -> tuple[list[str], dict[tuple[str, str], int | None]]:
    """Per heterogeneity and setting, by N: the server's best clustering vs the best serverless one, and the
    smallest N where serverless matches (paired 95% interval above -MATCH_MARGIN) at fewer bytes."""
    lines = ["| heterogeneity | setting | N | server's best (acc, bytes) | serverless best (acc, bytes) | "
             "serverless − server (paired) | matches at fewer bytes |", "|---|---|---|---|---|---|---|"]
    found: dict[tuple[str, str], int | None] = {}
    for (n, part, s), protos in table.items():
        srv, sl = best(protos, SERVER_CLUSTERING), best(protos, SERVERLESS_CLUSTERING)
        if srv is None or sl is None:
            continue
        diffs = paired(by_seed(protos[sl], "acc"), by_seed(protos[srv], "acc"))
        verdict = at_least(diffs, MATCH_MARGIN)
        cheaper = mean(protos[sl], "bytes") < mean(protos[srv], "bytes")
        ok = verdict == "holds" and cheaper
        found.setdefault((part, s), None)
        if ok and found[(part, s)] is None:
            found[(part, s)] = n
        lines.append(f"| {part} | {s} | {n:,} | {srv} ({mean(protos[srv], 'acc'):.3f}, {fmt_bytes(mean(protos[srv], 'bytes'))}) "
                     f"| {sl} ({mean(protos[sl], 'acc'):.3f}, {fmt_bytes(mean(protos[sl], 'bytes'))}) | "
                     f"{fmt_diff(diffs)} pts | {'yes' if ok else 'no'} ({verdict}{'' if cheaper else '; more bytes'}) |")
    return lines + [""], found


def decision(table: dict[Key, dict[str, list[dict[str, Any]]]]) -> list[str]:
    """Fleet like this -> run that: the most accurate protocol, or the cheapest one statistically tied with it."""
    lines = ["| fleet (N, heterogeneity, setting) | run | because |", "|---|---|---|"]
    for (n, part, s), protos in table.items():
        contenders = {p: r for p, r in protos.items() if p != "oracle"}
        top = max(contenders, key=lambda p: mean(contenders[p], "acc"))
        tied = [p for p in contenders if p == top or at_least(paired(by_seed(contenders[p], "acc"),
                                                                          by_seed(contenders[top], "acc")),
                                                               MATCH_MARGIN) == "holds"]
        pick = min(tied, key=lambda p: mean(contenders[p], "bytes"))
        why = (f"accuracy {mean(contenders[pick], 'acc'):.3f} "
               + (f"(best: {top} {mean(contenders[top], 'acc'):.3f}, within {MATCH_MARGIN} on every seed's interval) "
                  if pick != top else "(the best) ")
               + f"at {fmt_bytes(mean(contenders[pick], 'bytes_device'))} per device"
               + (f" and {fmt_bytes(mean(contenders[pick], 'bytes_server'))} at the server"
                  if mean(contenders[pick], "bytes_server") > 0 else ", no server")
               + f"; {mean(contenders[pick], 'sim_s'):.1f} s simulated")
        lines.append(f"| {n:,}, {part}, {s} | **{pick}** | {why} |")
    return lines + [""]


# ------------------------------------------------------------------------------------------ reading
UNCLUSTERED = ("fedavg", "gossip", "dsgd")  # one model for the whole fleet


def _acc(protos: dict[str, list[dict[str, Any]]], p: str) -> str:
    return f"{p} {mean(protos[p], 'acc'):.3f}"


def _growth(rows: list[dict[str, Any]], protocol: str, field: str) -> tuple[int, int, float] | None:
    """Log-log slope of ``field`` (mean over seeds) between the two largest N ``protocol`` ran at (feature skew,
    groups together, static); None where it ran at one N or the values are not positive."""
    sel = [r for r in rows if r["protocol"] == protocol and r["partition"] == "feature_skew"
           and r["setting"] == "together, static"]
    ns = sorted({r["n"] for r in sel})
    if len(ns) < 2:
        return None
    lo, hi = (mean([r for r in sel if r["n"] == n], field) for n in ns[-2:])
    if not (lo > 0 and hi > 0):
        return None
    return ns[-2], ns[-1], math.log(hi / lo) / math.log(ns[-1] / ns[-2])


def reading(table: dict[Key, dict[str, list[dict[str, Any]]]], rows: list[dict[str, Any]],
            found: dict[tuple[str, str], int | None]) -> list[str]:
    """What the tables below show, one bullet per finding, each naming the table it comes from; generated from
    the same numbers, so it cannot drift from them."""
    out = []
    for n, part in sorted({(k[0], k[1]) for k in table}):
        protos = table.get((n, part, "together, static"), {})
        clus = best(protos, SERVER_CLUSTERING + SERVERLESS_CLUSTERING)
        one = best(protos, UNCLUSTERED)
        if clus and one:
            ahead, behind = (clus, one) if mean(protos[clus], "acc") > mean(protos[one], "acc") else (one, clus)
            diffs = paired(by_seed(protos[ahead], "acc"), by_seed(protos[behind], "acc"))
            resolved = len(diffs) > 1 and interval(diffs)[1] > 0
            which = ("the best clustering protocol, {a}, leads the best single model, {b}," if ahead == clus else
                     "the best single model, {a}, leads the best clustering protocol, {b},").format(
                         a=_acc(protos, ahead), b=_acc(protos, behind))
            lead = f"{which} by {fmt_diff(diffs)} pts" + ("" if resolved else ": an interval that spans 0")
            oracle = (f"; the Oracle (FedAvg within the true groups) reaches {mean(protos['oracle'], 'acc'):.3f}"
                      if "oracle" in protos else "")
            out.append(f"- N = {n:,}, {part}, groups together, static: {lead}{oracle} (accuracy table).")
        srv, sl = best(protos, SERVER_CLUSTERING), best(protos, SERVERLESS_CLUSTERING)
        if srv and sl:
            moved = []
            for s in ("together, churn", "group mobility"):
                other = table.get((n, part, s), {})
                if srv in other and sl in other:
                    d_srv = paired(by_seed(other[srv], "acc"), by_seed(protos[srv], "acc"))
                    d_sl = paired(by_seed(other[sl], "acc"), by_seed(protos[sl], "acc"))
                    moved.append(f"{s.split(', ')[-1]} moves {srv} by {fmt_diff(d_srv)} pts and {sl} by "
                                 f"{fmt_diff(d_sl)} pts")
            if moved:
                out.append(f"- N = {n:,}, {part}: against the static fleet with groups together, "
                           + "; ".join(moved) + " (accuracy table, paired over seeds).")
    parts = sorted({part for part, _ in found})
    for part in parts:
        hits = {s: n for (p, s), n in found.items() if p == part}
        yes = [f"{s} (from N = {n:,})" for s, n in hits.items() if n]
        ns = sorted({k[0] for k, protos in table.items() if k[1] == part and best(protos, SERVER_CLUSTERING)
                     and best(protos, SERVERLESS_CLUSTERING)})
        out.append(f"- {part}: serverless clustering matches the server's best at fewer bytes in "
                   f"{len(yes)} of {len(hits)} settings at the N where both kinds ran "
                   f"({', '.join(f'{n:,}' for n in ns)})"
                   + (f": {'; '.join(yes)}" if yes else "") + " (crossover table).")
    grow = []
    for p in ordered({r["protocol"] for r in rows}):
        g = _growth(rows, p, "bytes_device")
        if g:
            grow.append(f"{p} {g[2]:.2f}")
    if grow:
        out.append("- Bytes per device grow with N (log-log slope between the two largest N each ran; 0 = flat): "
                   + ", ".join(grow) + " (cost tables; bytes plot).")
    srv_time = []
    for n in sorted({k[0] for k in table}):
        runs = table.get((n, "feature_skew", "together, static"), {}).get("fedavg", [])
        if runs:
            srv_time.append(f"N = {n:,}: {mean(runs, 'sim_s'):.1f} s simulated, {fmt_bytes(mean(runs, 'bytes_server'))} "
                            "from the server")
    if srv_time:
        out.append("- The server's uplink: FedAvg's 8 rounds take " + "; ".join(srv_time)
                   + " (feature skew, static; cost tables).")
    return out + [""]


class StudySize(NamedTuple):
    """What a headline study defines: its N, its cells, and the runs (protocols x seeds, less the study's
    exclusions) of each (N, heterogeneity, setting) group."""

    n: int
    cells: int
    groups: dict[Key, int]
    excluded: tuple[str, ...] = ()  # "protocol under setting" for each (variant, setting) the study's exclude drops


def study_sizes() -> dict[str, StudySize]:
    """Each committed headline study (``scenarios/studies/headline_n*.yaml``) by name."""
    from p2pfl.config.study import load_study

    out = {}
    for f in sorted((ROOT / "scenarios" / "studies").glob("headline_n*.yaml"), key=lambda f: int(f.stem.split("_n")[1])):
        st = load_study(f)
        groups = Counter((c.scenario.topology.n, c.scenario.data.partition.kind, setting_of(c.scenario.model_dump()))
                         for c in st.cells)
        out[st.name] = StudySize(st.cells[0].scenario.topology.n, len(st.cells), dict(groups), excluded(st.spec))
    return out


def excluded(spec: Any) -> tuple[str, ...]:
    """The (protocol, setting) pairs a headline study's ``exclude`` entries drop, in words."""
    from p2pfl.config.study import expand

    def setting(a: dict[str, Any]) -> str:
        return setting_of({"topology": {"placement": a.get("topology.placement", "strips")},
                           "dynamics": a.get("dynamics") or {}})

    kept = {(v, setting(a)) for v, a, _ in expand(spec)}
    every = {(v, setting(a)) for v, a, _ in expand(spec.model_copy(update={"exclude": []}))}
    return tuple(f"{v} under {s}" for v, s in sorted(every - kept, key=lambda p: (str(p[0]), SETTINGS.index(p[1]))))


def complete_groups(rows: list[dict[str, Any]], sizes: dict[str, StudySize]) -> tuple[list[dict[str, Any]], list[Key]]:
    """The rows of the (N, heterogeneity, setting) groups whose every protocol x seed ran, and the groups left out
    (a study still running: comparing a group's protocols needs all of them)."""
    expected = {k: c for size in sizes.values() for k, c in size.groups.items()}
    count = Counter((r["n"], r["partition"], r["setting"]) for r in rows)
    partial = sorted((k for k, c in count.items() if c < expected.get(k, 0)),
                     key=lambda k: (k[0], k[1], SETTINGS.index(k[2])))
    left_out = set(partial)
    return [r for r in rows if (r["n"], r["partition"], r["setting"]) not in left_out], partial


def status(rows: list[dict[str, Any]], sizes: dict[str, StudySize], partial: list[Key]) -> str:
    """Cells complete per headline study, and the groups the tables leave out."""
    have = Counter(r["study"] for r in rows)
    text = "Cells complete: " + ", ".join(f"`{name}` {have.get(name, 0)} of {size.cells}" for name, size in sizes.items())
    if partial:
        text += ("; left out of every table and plot until all their protocols and seeds have run: "
                 + "; ".join(f"N = {n:,}, {part}, {s}" for n, part, s in partial))
    return text + "."


# ------------------------------------------------------------------------------------------ plots
def _on_grid(curves: list[list[tuple[float, float]]], grid: np.ndarray) -> np.ndarray:
    """Step curves (value held from each point on) sampled on ``grid``; NaN before a curve starts."""
    out = np.full((len(curves), grid.size), np.nan)
    for i, c in enumerate(curves):
        if not c:
            continue
        t, v = np.array([p[0] for p in c]), np.array([p[1] for p in c])
        idx = np.searchsorted(t, grid, side="right") - 1
        out[i] = np.where(idx >= 0, v[np.clip(idx, 0, None)], np.nan)
    return out


def colour(protocol: str) -> Any:
    """One colour per protocol in every plot."""
    import matplotlib

    return matplotlib.colormaps["tab20"](list(PROTOCOLS).index(protocol) / len(PROTOCOLS))


def _band(ax: Any, runs: list[dict[str, Any]], field: str, label: str) -> None:
    curves = [r[field] for r in runs if r[field]]
    if not curves:
        return
    ts = [p[0] for c in curves for p in c if p[0] > 0]
    if not ts:
        return
    grid = np.geomspace(min(ts), max(ts), 200)
    vals = _on_grid(curves, grid)
    ok = ~np.isnan(vals).any(axis=0)
    if not ok.any():
        return
    m = vals[:, ok].mean(axis=0)
    ax.plot(grid[ok], m, label=label, lw=1.2, color=colour(label))
    if len(curves) > 1:
        lo_hi = np.array([interval(list(col))[1:] for col in vals[:, ok].T])
        ax.fill_between(grid[ok], lo_hi[:, 0], lo_hi[:, 1], color=colour(label), alpha=0.12, lw=0)


def curves_figure(table: dict[Key, dict[str, list[dict[str, Any]]]], n: int, out: Path) -> Path | None:
    """Accuracy (static, churn, mobility; groups together) and ARI (static) vs simulated time at N, with 95%
    bands over seeds; one row per heterogeneity."""
    parts = sorted({k[1] for k in table if k[0] == n})
    if not parts:
        return None
    cols = [("together, static", "curve"), ("together, churn", "curve"), ("group mobility", "curve"),
            ("together, static", "ari_curve")]
    # only the panels some run fills (N = 10,000 runs one setting and no clustering protocol)
    cols = [(s, f) for s, f in cols if any(r.get(f) for part in parts for p, runs in table.get((n, part, s), {}).items()
                                           if f == "curve" or PROTOCOLS[p][1] for r in runs)]
    fig = Figure(figsize=(5 * len(cols), 4.5 * len(parts)))
    FigureCanvasAgg(fig)
    for i, part in enumerate(parts):
        for j, (s, field) in enumerate(cols):
            ax = fig.add_subplot(len(parts), len(cols), i * len(cols) + j + 1)
            for p in ordered(table.get((n, part, s), {})):
                if field == "ari_curve" and not PROTOCOLS[p][1]:
                    continue
                _band(ax, table[(n, part, s)][p], field, p)
            ari = field == "ari_curve"
            ax.set(xscale="log", xlabel="simulated time (s, log)", ylabel="ARI" if ari else "mean accuracy",
                   ylim=(-0.1, 1.05) if ari else (0.0, 1.0),
                   title=f"{part}, {s}: {'ARI' if ari else 'accuracy'}")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.title.set_fontsize(9)
            if j == 0:
                ax.legend(fontsize=6, ncol=2)
    fig.suptitle(f"N = {n:,}: mean over seeds, shaded 95% band", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def bytes_figure(rows: list[dict[str, Any]], out: Path) -> Path | None:
    """Bytes per device and at the server vs N (feature skew, groups together, static), log-log."""
    sel = [r for r in rows if r["partition"] == "feature_skew" and r["setting"] == "together, static"]
    if not sel:
        return None
    fig = Figure(figsize=(11, 4.2))
    FigureCanvasAgg(fig)
    for k, (field, title) in enumerate((("bytes_device", "bytes sent per device"), ("bytes_server", "bytes sent by the server"))):
        ax = fig.add_subplot(1, 2, k + 1)
        for p in ordered({r["protocol"] for r in sel}):
            pts = sorted({r["n"] for r in sel if r["protocol"] == p})
            ys = [mean([r for r in sel if r["protocol"] == p and r["n"] == n], field) for n in pts]
            if any(y > 0 for y in ys):
                ax.plot(pts, ys, marker="o", label=p, color=colour(p))
        ax.set(xscale="log", yscale="log", xlabel="devices N", ylabel="bytes", title=title + " (feature skew, static)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def frames_figure(rows: list[dict[str, Any]], out: Path) -> Path | None:
    """rnd_gossip_h1's neighbourhood at the start, middle and end of a group-mobility run (smallest N, seed 0),
    devices coloured by federation (the one each joins, before its federations form)."""
    runs = sorted((r for r in rows if r["protocol"] == "rnd_gossip_h1" and r["setting"] == "group mobility"
                   and (r["path"] / "positions.npz").is_file()), key=lambda r: (r["n"], r["partition"], r["seed"]))
    if not runs:
        return None
    run = runs[0]
    logs = json.loads((run["path"] / "summary.json").read_text()).get("logs", {})
    if not logs.get("federation_labels"):
        return None
    radius = float(yaml.safe_load((run["path"] / "scenario.yaml").read_text())["topology"]["radius"])
    with np.load(run["path"] / "positions.npz", allow_pickle=False) as z:
        end = float(z["t"][-1])
    return federation_frames(run["path"] / "positions.npz", logs["federation_labels"], logs.get("ari", []), radius, out,
                             title=f"rnd_gossip_h1 under group mobility (N = {run['n']}, {run['partition']}, seed "
                                   f"{run['seed']}): links within radio range {radius:g}, colour = the federation "
                                   "each device joins once discovery ends", marker_size=18.0,
                             at=(0.0, end / 2, end))


# ------------------------------------------------------------------------------------------ report
def largest_n(rows: list[dict[str, Any]]) -> list[str]:
    return ["| protocol | largest N run | runs | wall time (CPU-h, all its runs) |", "|---|---|---|---|"] + [
        f"| {p} | {max(r['n'] for r in rows if r['protocol'] == p):,} | {sum(r['protocol'] == p for r in rows)} | "
        f"{sum(r['wall_s'] for r in rows if r['protocol'] == p) / 3600:.2f} |"
        for p in ordered({r["protocol"] for r in rows})] + [""]


def wall_per_run(rows: list[dict[str, Any]], protocol: str, n: int) -> float:
    """Mean wall seconds of a run of ``protocol`` at ``n``, on the static fleet with groups together and feature
    skew where it ran there (the setting every N has), else over all its runs at ``n``."""
    runs = [r for r in rows if r["protocol"] == protocol and r["n"] == n]
    like = [r for r in runs if r["partition"] == "feature_skew" and r["setting"] == "together, static"]
    return float(np.mean([r["wall_s"] for r in like or runs]))


def limits(rows: list[dict[str, Any]]) -> list[str]:
    """Per protocol not run at every N: its wall time per run at the largest N it reached, the growth of that
    time with N (measured between its two largest N, else the protocol's design), and what one run at the next
    N of the study would take at that growth."""
    all_n = sorted({r["n"] for r in rows})
    out = ["| protocol | largest N run | wall per run there | growth with N (exponent, from) | one run at the next N "
           "(extrapolated) |", "|---|---|---|---|---|"]
    for p in ordered({r["protocol"] for r in rows}):
        ns = sorted({r["n"] for r in rows if r["protocol"] == p})
        nxt = next((n for n in all_n if n > ns[-1]), None)
        if nxt is None:
            continue
        w = wall_per_run(rows, p, ns[-1])
        if len(ns) >= 2:
            w0 = wall_per_run(rows, p, ns[-2])
            k, src = math.log(w / w0) / math.log(ns[-1] / ns[-2]), f"measured, N = {ns[-2]:,} → {ns[-1]:,}"
        elif p in DESIGN_GROWTH:
            k, src = DESIGN_GROWTH[p]
        else:
            out.append(f"| {p} | {ns[-1]:,} | {w / 60:.1f} min | unknown (one N) | — |")
            continue
        out.append(f"| {p} | {ns[-1]:,} | {w / 60:.1f} min | {k:.2f} ({src}) | N = {nxt:,}: "
                   f"{w * (nxt / ns[-1]) ** k / 3600:.1f} h |")
    if len(out) == 2:
        return []
    return out + ["", "Wall time is one process on one core of this machine (the studies ran two cells at a time); "
                  "extrapolations assume the growth stays the same beyond the N measured.", ""]


def write(root: Path, out_dir: Path) -> str:
    ran = load(root)
    sizes = study_sizes()
    rows, partial = complete_groups(ran, sizes)
    table = cells(rows)
    with_targets(table)
    out_dir.mkdir(parents=True, exist_ok=True)
    figs = [f for n in sorted({r["n"] for r in rows})
            if (f := curves_figure(table, n, out_dir / f"svs_curves_N{n}.png")) is not None]
    for f in (bytes_figure(rows, out_dir / "svs_bytes_vs_n.png"), frames_figure(rows, out_dir / "svs_mobility_frames.png")):
        if f is not None:
            figs.append(f)
    cross, found = crossover(table)
    seeds = sorted({r["seed"] for r in rows})
    text = "\n".join([
        "# Server vs serverless clustering at neighbourhood scale", "",
        "Regenerate:", "", "```", COMMAND, "```", "",
        f"{len(ran)} runs, seeds {seeds}, {sum(r['wall_s'] for r in ran) / 3600:.1f} CPU-hours of wall time in all. "
        + status(ran, sizes, partial) + " "
        "The fleet is `scenarios/headline/base.yaml` (its header states the links and the server's bottleneck); "
        "each protocol file of `scenarios/headline/` sets the protocol and its deadlines; the studies "
        "`scenarios/studies/headline_n*.yaml` say which protocols run at which N and why.", "",
        "## Reading", "", *reading(table, rows, found),
        "## Decision table", "", *decision(table),
        "## Crossover: where serverless clustering matches the server", "",
        f"'Matches' = the paired 95% interval of (serverless best − server's best) accuracy lies above −{MATCH_MARGIN}, "
        "at fewer total bytes. Server's best among " + ", ".join(SERVER_CLUSTERING) + "; serverless best among "
        + ", ".join(SERVERLESS_CLUSTERING) + ".", "", *cross,
        "Smallest N where it matches: " + "; ".join(f"{part} / {s}: {'N = ' + format(n, ',') if n else 'none of the N run'}"
                                                    for (part, s), n in found.items()) + ".", "",
        "## Pareto fronts", "", *pareto_table(table),
        "## Accuracy", "", *accuracy_tables(table),
        "## ARI", "", *ari_tables(table),
        "## Costs", "", *cost_tables(table),
        "## Largest N each protocol reached (every run, complete groups or not)", "", *largest_n(ran),
        "## Measured limits: protocols cut at larger N", "", *(limits(ran) or ["Every protocol ran at every N.", ""]),
        *[line for name, size in sizes.items() if size.excluded
          for line in (f"`{name}` leaves out {', '.join(size.excluded)} (its `exclude`; the study file's header "
                       "gives the measured reason).", "")],
        "Memory: at N = 10,000 gossip and dsgd fit this machine's 23.7 GB only with glibc's mmap threshold pinned "
        "(`MALLOC_MMAP_THRESHOLD_=65536` in the command above; the same results, slower); with glibc's default "
        "the heap keeps freed model-sized buffers and the second gossip cell was killed at 24 GB "
        "(`headline_n10000.yaml`'s header and `analysis/bench_heap.py` give the measurements).", "",
        "Plots: " + ", ".join(f"`{f.name}`" for f in figs) + ".", "",
    ])
    (out_dir / "server_vs_serverless.md").write_text(text + "\n")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, help="folder holding the studies' run folders (analysis/cells/headline)")
    ap.add_argument("--results", type=Path, default=OUT, help="folder for the report and plots")
    a = ap.parse_args(argv)
    print(write(a.runs, a.results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
