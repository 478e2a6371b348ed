"""Server vs serverless clustering (issue 33): when should a fleet drop the server? From the archived cells of
``scenarios/studies/headline_n{100,1000,10000}.yaml``, at the budget the pilot chose (``headline_pilot.md``).

    p2pfl sweep scenarios/studies/headline_n100.yaml --jobs 2 --out runs/headline/n100 \
        --archive analysis/cells/headline/n100          # likewise n1000 (--jobs 2) and n10000 (--jobs 1)
    python analysis/reports/headline_report.py analysis/cells/headline   # -> analysis/results/server_vs_serverless.md

The arms were fixed before the runs (the study headers say why): the server's clustering arm is IFCA
(``SERVER_ARM``); the serverless clustering arms are rnd_gossip h1 and DAC as published (``SERVERLESS_ARMS``).
No arm is picked per row by its mean. Per group (N x heterogeneity x fleet dynamics) and seed:

- headroom gain (acc - local) / (oracle - local), Local and Oracle of the same group and seed;
- the serverless arm read at the server arm's traffic (bytes sent by every node, devices and servers, per
  device: the last evaluation at or below that traffic), at equal simulated time (both arms read at the
  earlier end: a seed where the slower had no evaluation yet is left out) and at the ends;
- "matches": the paired gain difference (serverless - IFCA) at equal traffic lies above -``MARGIN`` (10% of
  the headroom), Holm-corrected over the decision table's comparisons at each N (``at_least_holm``);
- "fewer bytes": at most 90% of the server arm's (``fewer_bytes``); time to target: the first evaluation
  at or above local + 0.9 (oracle - local), means of the group's seeds;
- p10: the device at the 10th percentile of accuracy (100 test samples per device).

A confirmatory study (``headline_n*_confirm.yaml``, planned from the exploratory readings by ``seeds_to_resolve``)
is judged on its own seeds and its own planned comparisons (section "Confirmatory study"), never pooled with the
exploratory seeds; where it ran, the crossover reads its verdict.

Server protocols do not depend on where devices are or how they move (every device has its own link to the
server), so the studies run them on the static and churned fleets only; their static cells are reused for
the group-mobility rows (marked), as is Local's (it sends nothing).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from p2pfl.errors import UserError
from p2pfl.metrics.claims import (
    DOES_NOT_HOLD,
    HOLDS,
    NOT_RESOLVED,
    NOT_RUN,
    at_least_holm,
    at_least_holm_p,
    cannot_test,
    device_percentile,
    fewer_bytes,
    fmt_ci,
    fmt_diff,
    headroom_gain,
    mean_curve,
    seeds_to_resolve,
    short,
    target_accuracy,
)
from p2pfl.metrics.curves import at_time, at_traffic, first_reaching, pareto
from p2pfl.metrics.runs import load_curves, load_nodes, load_runs
from p2pfl.metrics.tables import fmt_bytes, fmt_num, fmt_s, markdown_table, report_main
from p2pfl.study.verify import provenance_lines

ROOT = Path(__file__).resolve().parents[2]
COMMAND = ("for n in 100 1000; do p2pfl sweep scenarios/studies/headline_n$n.yaml --jobs 2 --out runs/headline/n$n "
           "--archive analysis/cells/headline/n$n; done\n"
           "p2pfl sweep scenarios/studies/headline_n10000.yaml --jobs 1 --out runs/headline/n10000 "
           "--archive analysis/cells/headline/n10000\n"
           "p2pfl sweep scenarios/studies/headline_n1000_confirm.yaml --jobs 1 --out runs/headline/n1000_confirm "
           "--archive analysis/cells/headline/n1000_confirm\n"
           "python analysis/reports/headline_report.py analysis/cells/headline")
SERVER_ARM = "ifca"
SERVERLESS_ARMS = ("rnd_gossip_h1", "dac_original")
#: every protocol in the report's order: the references, the server arms, the serverless arms
PROTOCOLS = ("oracle", "ifca", "rnd_relay", "rnd_direct", "fedavg", "rnd_gossip_h1", "rnd_gossip_h2", "dac_original",
             "dac_cosine", "gossip", "dsgd", "local")
#: the protocols that discover the clusters (the oracle is given them)
DISCOVERING = ("ifca", "rnd_relay", "rnd_direct", "rnd_gossip_h1", "rnd_gossip_h2", "dac_original", "dac_cosine")
HETS = ("rotation", "label_permutation", "label_shift", "feature_skew")
DYNAMICS = ("static", "churn", "mobility")
MARGIN = 0.10  # headroom gain a serverless arm may trail the server arm by and still "match"
BYTES_TOL = 0.10  # "fewer bytes" means at least 10% fewer
TARGET = 0.9  # time to target: local + 0.9 (oracle - local)
#: The verdict of an arm with no evaluation at or below IFCA's traffic (fewer than two seeds to pair there).
NO_READING = cannot_test("no evaluation of the arm at or below IFCA's traffic")
#: message kinds that discover clusters (the rest trains)
DISCOVERY_KINDS = ("rnd_predictor", "rnd_verdict", "rnd_upload", "rnd_row", "dac_request")

Row = dict[str, Any]
Group = tuple[int, str, str]  # (N, heterogeneity, dynamics)


# ------------------------------------------------------------------------------------------ runs
def dynamics_of(run: Row) -> str:
    """static, churn or mobility, from a run's resolved scenario (the static fleet is churn with nobody off)."""
    if run.get("scenario.dynamics.mobility.model") is not None:
        return "mobility"
    return "churn" if (run.get("scenario.dynamics.churn.offline") or 0.0) > 0 else "static"


def egress_of(servers: list[dict[str, Any]]) -> Optional[float]:
    """The server's egress (bit/s; its link's bandwidth when not set), None without a server."""
    if not servers:
        return None
    s = servers[0]
    return float(s.get("egress_bps") or (s.get("link") or {}).get("bandwidth_bps") or 0.0)


def row_of(run: Row, nodes: pd.DataFrame, curve: pd.DataFrame) -> Row:
    """One run's figures from its ``load_runs`` row (a missing value None), its devices (``load_nodes``) and its
    evaluations (``load_curves``); traffic is bytes sent by every node per device."""
    n = int(run["n_devices"])
    scored = curve[curve["value"].notna()]
    points = zip(scored["round"], scored["t"], scored["value"], scored["bytes_per_device"], scored["bytes_servers"])

    def summed(prefix: str) -> float:  # a mapping of summary.json, flattened by load_runs into prefix<key> columns
        return float(sum(v for k, v in run.items() if k.startswith(prefix) and v is not None))

    energy = "energy.j_per_device."
    curve_points = [(0 if pd.isna(r) else int(r), float(t), float(a), float(b) + float(s) / n)  # round 0: over time
                    for r, t, a, b, s in points]
    return {
        "study": run["study"], "protocol": run["variant"].removesuffix("_1g"), "seed": int(run["seed"]), "n": n,
        "egress": egress_of(json.loads(run["scenario.topology.servers"])), "het": run["scenario.data.partition.kind"],
        "dyn": dynamics_of(run), "reused": False, "acc": run["accuracy_mean"], "ari": run.get("ari"),
        "p10": device_percentile(nodes["value"].tolist()),
        "curve": curve_points,
        "traffic": run["bytes_total"] / n, "sim_s": run["sim_time_s"],
        "wan": (run.get("bytes_wan") or 0) / n, "d2d": (run.get("bytes_device_to_device") or 0) / n,
        "server_egress": summed("bytes_per_server."), "server_ingress": summed("bytes_received_per_server."),
        "busiest": float((nodes["bytes_sent"] + nodes["bytes_received"]).max()),
        "lat50": run.get("round_latency_s.p50"), "lat95": run.get("round_latency_s.p95"),
        "j_radio": run[energy + "radio_mean"], "j_compute": run[energy + "compute_mean"],
        "j_max": run[energy + "total_max"],
        "flops": run["compute_flops_total"] / n, "discovery_flops": float(run.get("clustering_flops") or 0) / n,
        "discovery_bytes": sum(run.get(f"bytes_by_kind.{k}") or 0 for k in DISCOVERY_KINDS) / n,
        "degree": run.get("dynamics.mean_radius_degree"), "wall_s": run["timing.wall_s"],
    }


def load(dirs: Sequence[Path]) -> list[Row]:
    """One row per run of the headline studies in ``dirs``."""
    runs = load_runs(*dirs)
    runs = runs[runs["study"].astype(str).str.startswith("headline_n")]
    if runs.empty:
        raise UserError(f"{', '.join(map(str, dirs))}: no runs of the headline studies "
                        "(scenarios/studies/headline_n*.yaml) found")
    nodes = dict(tuple(load_nodes(*dirs).groupby("path", sort=False)))
    curves = dict(tuple(load_curves(*dirs).groupby("path", sort=False)))
    # under churn a round's fleet-wide evaluation waits for its slowest device: such runs are read over time
    # where they have that curve (summary.json's accuracy_over_time)
    over_time = dict(tuple(load_curves(*dirs, over_time=True).groupby("path", sort=False)))
    records = runs.astype(object).where(runs.notna(), None).to_dict("records")
    return [row_of(run, nodes[run["path"]], over_time[run["path"]] if dynamics_of(run) == "churn"
                   and run["path"] in over_time else curves[run["path"]]) for run in records]


def arm(row: Row) -> str:
    """A row's name in the tables: the protocol, with the server's egress where there is one."""
    e = row["egress"]
    if e is None:
        return row["protocol"]
    return f"{row['protocol']} @{e / 1e9:g} Gbit/s" if e >= 1e9 else f"{row['protocol']} @{e / 1e6:g} Mbit/s"


def groups(rows: list[Row]) -> dict[Group, dict[str, list[Row]]]:
    """(N, heterogeneity, dynamics) -> arm -> runs; server arms and Local reuse their static runs under mobility."""
    out: dict[Group, dict[str, list[Row]]] = {}
    for r in rows:
        out.setdefault((r["n"], r["het"], r["dyn"]), {}).setdefault(arm(r), []).append(r)
    for (n, het, dyn), arms in list(out.items()):
        if dyn != "mobility":
            continue
        for name, runs in out.get((n, het, "static"), {}).items():
            if runs[0]["egress"] is not None or runs[0]["protocol"] == "local":
                arms.setdefault(name, [{**r, "dyn": "mobility", "reused": True} for r in runs])
    return {k: dict(sorted(v.items(), key=lambda kv: _order(kv[0])))
            for k, v in sorted(out.items(), key=lambda kv: (kv[0][0], *_regime_order(kv[0][1], kv[0][2])))}


def _order(name: str) -> tuple[int, str]:
    proto = name.split(" @")[0]
    return (PROTOCOLS.index(proto) if proto in PROTOCOLS else 99, name)


def _regime_order(het: str, dyn: str) -> tuple[int, int]:
    return (HETS.index(het) if het in HETS else 9, DYNAMICS.index(dyn))


def slowest_egress(runs: list[Row]) -> list[Row]:
    """Those of one protocol's ``runs`` at its slowest server egress (the studies' 50 Mbit/s; all without a server)."""
    slowest = min((r["egress"] for r in runs if r["egress"] is not None), default=None)
    return [r for r in runs if r["egress"] == slowest]


def reference(arms: dict[str, list[Row]], protocol: str) -> dict[int, float]:
    """Final accuracy per seed of a reference (``local``; ``oracle`` at the slowest server egress)."""
    return {r["seed"]: r["acc"] for r in slowest_egress([r for rs in arms.values() for r in rs
                                                          if r["protocol"] == protocol])}


def server_arm(arms: dict[str, list[Row]], protocol: str = SERVER_ARM, fastest: bool = False) -> Optional[str]:
    """The name of ``protocol``'s arm at the slowest server egress (the studies' 50 Mbit/s; ``fastest``: at the
    fastest, 1 Gbit/s), if it ran."""
    names = [a for a, rs in arms.items() if rs[0]["protocol"] == protocol]
    pick = max if fastest else min
    return pick(names, key=lambda a: arms[a][0]["egress"] or 0.0) if names else None


# ------------------------------------------------------------------------------------------ readings
def gains(runs: list[Row], local: dict[int, float], oracle: dict[int, float],
          acc_of: Any = None) -> dict[int, float]:
    """Headroom gain per seed (``acc_of(run)`` the accuracy read; default the final one)."""
    out = {}
    for r in runs:
        s = r["seed"]
        acc = r["acc"] if acc_of is None else acc_of(r)
        if acc is not None and s in local and s in oracle:
            g = headroom_gain(acc, local[s], oracle[s])
            if not math.isnan(g):
                out[s] = g
    return out


def comparison(arms: dict[str, list[Row]], name: str) -> Optional[dict[str, Any]]:
    """The serverless arm ``name`` against the server arm in one group: paired gain differences (serverless -
    server) at equal traffic, equal time and at the ends; traffic and time ratios (the time also against the
    server arm at its fastest egress, whose learning and bytes are the same but whose rounds are shorter)."""
    server = server_arm(arms)
    if server is None or name not in arms:
        return None
    local, oracle = reference(arms, "local"), reference(arms, "oracle")
    srv = {r["seed"]: r for r in arms[server]}
    fastest = server_arm(arms, fastest=True)
    fast = {r["seed"]: r for r in arms[fastest]} if fastest != server and fastest is not None else {}
    mine = {r["seed"]: r for r in arms[name] if r["seed"] in srv}
    g_srv = gains(list(srv.values()), local, oracle)

    def diffs(acc_of: Any, acc_of_server: Any = None) -> list[float]:
        g = gains(list(mine.values()), local, oracle, acc_of)
        g_s = g_srv if acc_of_server is None else gains(list(srv.values()), local, oracle, acc_of_server)
        return [g[s] - g_s[s] for s in sorted(set(g) & set(g_s))]

    def t_equal(r: Row) -> float:  # the earlier of the two ends
        return min(r["sim_s"], srv[r["seed"]]["sim_s"])

    return {
        "server": server, "n_seeds": len(mine),
        "gain_server": list(g_srv.values()), "gain": list(gains(list(mine.values()), local, oracle).values()),
        "equal_traffic": diffs(lambda r: at_traffic(r["curve"], srv[r["seed"]]["traffic"])),
        # both read when the faster one ended; a seed where the slower had not been evaluated yet is left out
        "equal_time": diffs(lambda r: at_time(r["curve"], t_equal(r)),
                            lambda r: at_time(r["curve"], t_equal(mine[r["seed"]])) if r["seed"] in mine else None),
        "end": diffs(None),
        "traffic_ratio": [mine[s]["traffic"] / srv[s]["traffic"] for s in mine],
        "time_ratio": [mine[s]["sim_s"] / srv[s]["sim_s"] for s in mine],
        # None: the group ran the server arm at one egress only
        "time_ratio_fastest": [mine[s]["sim_s"] / fast[s]["sim_s"] for s in mine if s in fast] if fast else None,
    }


def verdicts(table: dict[Group, dict[str, list[Row]]], family: Mapping[int, int] = {}
             ) -> dict[tuple[Group, str], tuple[dict[str, Any], str]]:
    """(group, serverless arm) -> (its comparison, the Holm-corrected 'matches at equal traffic' verdict), Holm
    over all of them at the same N (the decision table's family): ``family[N]`` comparisons where given (the
    study's plan, ``planned_families``: those not run yet count as not rejected, so a verdict stands when they
    come in), else the comparisons at hand."""
    out: dict[tuple[Group, str], tuple[dict[str, Any], str]] = {}
    for n in sorted({g[0] for g in table}):
        comps = {(g, name): c for g, arms in table.items() if g[0] == n for name in SERVERLESS_ARMS
                 if (c := comparison(arms, name)) is not None}
        tested = sum(len(c["equal_traffic"]) >= 2 for c in comps.values())
        planned = max(family[n], tested) if n in family else None
        diffs = [c["equal_traffic"] for c in comps.values()]
        held = at_least_holm(diffs, MARGIN, family=planned)
        for c, adjusted in zip(comps.values(), at_least_holm_p(diffs, MARGIN, family=planned)):
            c["holm_p"] = adjusted
        # "not run" from Holm: fewer than two seeds; with none read at IFCA's traffic, that is no reading there
        out.update({key: (c, NO_READING if v == NOT_RUN and not c["equal_traffic"] else v)
                    for (key, c), v in zip(comps.items(), held)})
    return out


# ------------------------------------------------------------------------------------------ tables
def md(header: Sequence[str], rows: list[list[Any]], align: str = "") -> list[str]:
    """``markdown_table`` then a blank line (``align``: default left for the first column, right for the rest)."""
    return [*markdown_table(rows, header, align=align or "l" + "r" * (len(header) - 1)), ""]


def mean_of(runs: list[Row], field: str) -> float:
    vals = [r[field] for r in runs if r[field] is not None]
    return float(np.mean(vals)) if vals else math.nan


def group_name(g: Group) -> str:
    return f"N = {g[0]:,}, {g[1]}, {g[2]}"


def seeds_read(c: dict[str, Any]) -> str:
    """The seeds a comparison's interval at IFCA's traffic rests on: 'k', or 'k of n' where n seeds ran both arms
    and only k were read there (a seed whose first fleet-wide evaluation came after IFCA's whole traffic has no
    reading at it)."""
    k, n = len(c["equal_traffic"]), c["n_seeds"]
    return f"{k}" if k == n else f"{k} of {n}"


def on_seeds(diffs: list[float], n: int) -> str:
    """' on k of n seeds' where an interval rests on k seeds (its differences), two or more, and a row shows n; else
    '' (``fmt_diff`` states one seed as '(n=1)')."""
    return "" if len(diffs) < 2 or len(diffs) == n else f" on {len(diffs)} of {n} seeds"


def degree_line(rows: list[Row]) -> str:
    """The mobile fleets' mean radio degree per N, as the study headers promise (each mobility run's
    ``dynamics.mean_radius_degree``, the radius graph's mean degree averaged over the run; the mean over the runs);
    '' without a mobility run that recorded it."""
    by_n: dict[int, list[float]] = {}
    for r in rows:
        if r["dyn"] == "mobility" and not r["reused"] and r["degree"] is not None:
            by_n.setdefault(r["n"], []).append(float(r["degree"]))
    if not by_n:
        return ""
    return "Group mobility: mean radio degree (the radius graph's, averaged over each run) " + ", ".join(
        f"{np.mean(v):.1f} at N = {n:,} ({len(v)} run{'s' if len(v) > 1 else ''})" for n, v in sorted(by_n.items())) + "."


def _ratio(x: float, decimals: int = 2) -> str:
    """A ratio with ``decimals`` decimals, or one significant digit below their last (0.003, not 0.00)."""
    return f"{x:.{decimals}f}" if x >= 10.0 ** -decimals else f"{x:.1g}"


def recommend(c_by_arm: dict[str, tuple[dict[str, Any], str]], fedavg_gain: float,
              server_gain: float) -> tuple[str, str]:
    """(what to run, because ...) for one group from the serverless arms' verdicts (an arm read on one seed only
    is left out)."""
    c_by_arm = {a: cv for a, cv in c_by_arm.items() if cv[1] != NOT_RUN}
    holds = [(a, c) for a, (c, v) in c_by_arm.items() if v == HOLDS]
    if holds:
        a, c = max(holds, key=lambda ac: float(np.mean(ac[1]["gain"])))
        fewer = _fewer_bytes(c)
        why = (f"matches the server's IFCA at its traffic (gain {fmt_diff(c['equal_traffic'], 1.0, 2)} vs IFCA)"
               + ("; at the end it sent ≥ 10% fewer bytes" if fewer else "") +
               f"; simulated time {_ratio(float(np.mean(c['time_ratio'])))}x IFCA's"
               + ("" if not c["time_ratio_fastest"] else
                  f" at its slowest server egress, {_ratio(float(np.mean(c['time_ratio_fastest'])))}x at its fastest"))
        fast = c["time_ratio_fastest"]
        if fewer or not fast or float(np.mean(fast)) < 1.0:
            return f"drop the server: {a}", why
        # the same bytes, sooner only than the slower server: the answer depends on the server's egress
        return f"drop a {c['server'].split(' @')[-1]} server: {a}", why
    if c_by_arm and all(v == DOES_NOT_HOLD for _, v in c_by_arm.values()):
        why = "every serverless arm trails IFCA by more than 10% of the headroom at IFCA's traffic"
        if not math.isnan(fedavg_gain) and fedavg_gain >= server_gain:
            return "keep a server: FedAvg", why + f"; FedAvg's gain {fedavg_gain:.2f} ≥ IFCA's {server_gain:.2f}"
        return "keep the server: IFCA", why
    if not c_by_arm:
        return "—", "the arms have not run here yet (on two seeds or more)"
    if all(v == NO_READING for _, v in c_by_arm.values()):
        return "no reading at IFCA's traffic", (
            "each arm's first fleet-wide evaluation came after it had sent more than IFCA's whole traffic (a round's "
            "evaluation is fleet-wide when its slowest device gets there: late under churn); at the ends: "
            + ", ".join(f"{a} {fmt_diff(c['end'], 1.0, 2)}" for a, (c, _) in c_by_arm.items()))
    open_arms = [a for a, (_, v) in c_by_arm.items() if v == NOT_RESOLVED]
    if not open_arms:  # the readable arms trail, the others have no reading
        return "keep the server: IFCA", "the arms with a reading trail IFCA by more than 10% of the headroom; " + \
            ", ".join(a for a, (_, v) in c_by_arm.items() if v == NO_READING) + " has no reading at IFCA's traffic"
    return f"{short(NOT_RESOLVED)} at this budget", "the Holm-corrected interval spans the margin for " + ", ".join(
        open_arms)


def mean_gain(arms: dict[str, list[Row]], name: Optional[str], local: dict[int, float],
              oracle: dict[int, float]) -> float:
    """Arm ``name``'s headroom gain, mean over its seeds (NaN: the arm did not run, or has no gain)."""
    return float(np.mean(list(gains(arms[name], local, oracle).values()) or [math.nan])) if name else math.nan


def decision_table(table: dict[Group, dict[str, list[Row]]],
                   verdict: dict[tuple[Group, str], tuple[dict[str, Any], str]]) -> list[str]:
    rows = []
    for g, arms in table.items():
        by_arm = {a: verdict[(g, a)] for a in SERVERLESS_ARMS if (g, a) in verdict}
        server = server_arm(arms)
        local, oracle = reference(arms, "local"), reference(arms, "oracle")
        g_srv, g_fa = (mean_gain(arms, a, local, oracle) for a in (server, server_arm(arms, "fedavg")))
        what, why = recommend(by_arm, g_fa, g_srv)
        seeds = len(arms[server]) if server else 0  # the row's: an interval on fewer says so (on_seeds)
        cells = ["—" if a not in by_arm else "no reading at IFCA's traffic" if by_arm[a][1] == NO_READING else
                 f"{fmt_diff(diffs := by_arm[a][0]['equal_traffic'], 1.0, 2)}{on_seeds(diffs, seeds)}: "
                 + ("fewer than two seeds" if by_arm[a][1] == NOT_RUN else short(by_arm[a][1]))
                 for a in SERVERLESS_ARMS]
        head = 100 * (float(np.mean(list(oracle.values()))) - float(np.mean(list(local.values())))) \
            if local and oracle else math.nan
        rows.append([group_name(g), seeds, fmt_num(head, ".1f"), fmt_num(g_srv, ".2f"), fmt_num(g_fa, ".2f"), *cells,
                     f"**{what}**", why])
    return md(["fleet", "seeds run", "headroom (pts)", "IFCA gain", "FedAvg gain",
               *[f"{a} − IFCA, gain at IFCA's traffic" for a in SERVERLESS_ARMS], "run", "because"], rows,
              "lrrrr" + "l" * (len(SERVERLESS_ARMS) + 2))


def crossover(verdict: dict[tuple[Group, str], tuple[dict[str, Any], str]]) -> list[str]:
    """Per regime (heterogeneity x dynamics) and serverless arm: the smallest N where it matches IFCA at equal
    traffic and, at its end, spent >= 10% fewer bytes or less simulated time, against IFCA's server at its
    slowest egress and at its fastest (the same learning and bytes, shorter rounds)."""
    regimes = sorted({(g[1], g[2]) for g, _ in verdict}, key=lambda r: _regime_order(*r))
    rows = []
    for het, dyn in regimes:
        for a in SERVERLESS_ARMS:
            ns = sorted(g[0] for g, aa in verdict if (g[1], g[2], aa) == (het, dyn, a))
            if not ns:
                continue
            tried = ", ".join(f"{n:,}" for n in ns)
            cells = []
            for t in ("time_ratio", "time_ratio_fastest"):
                read = [n for n in ns if verdict[((n, het, dyn), a)][0][t] is not None]
                hit = next((n for n in read if _pays(*verdict[((n, het, dyn), a)], time=t)), None)
                at = ", ".join(f"{n:,}" for n in read)
                cells.append(f"N = {hit:,}" if hit else f"none of N = {at}" if read else "not run")
            rows.append([f"{het}, {dyn}", a, tried, *cells])
    return md(["regime", "serverless arm", "N run", "crossover, server at its slowest egress (50 Mbit/s)",
               "crossover, server at its fastest egress (1 Gbit/s)"], rows, "lllll")


def _fewer_bytes(c: dict[str, Any]) -> bool:
    """Did the serverless arm end with at least 10% less traffic than IFCA (mean ratio over seeds)?"""
    return fewer_bytes(float(np.mean(c["traffic_ratio"])), 1.0, BYTES_TOL)


def _pays(c: dict[str, Any], v: str, time: str = "time_ratio") -> bool:
    """Matches IFCA (``v``) with >= 10% fewer bytes or less simulated time (``time``: the ratio to read)."""
    return v == HOLDS and (_fewer_bytes(c) or (c[time] is not None and float(np.mean(c[time])) < 1.0))


def accuracy_table(g: Group, arms: dict[str, list[Row]]) -> list[str]:
    local, oracle = reference(arms, "local"), reference(arms, "oracle")
    target = target_accuracy(float(np.mean(list(local.values()) or [math.nan])),
                             float(np.mean(list(oracle.values()) or [math.nan])), TARGET)
    front = pareto({a: (mean_of(rs, "acc"), mean_of(rs, "traffic")) for a, rs in arms.items()})
    rows = []
    for a, rs in arms.items():
        times = [h[0] for r in rs if (h := first_reaching(r["curve"], target)) is not None]
        ttt = "—" if math.isnan(target) else "never" if not times else fmt_s(float(np.mean(times))) + (
            "" if len(times) == len(rs) else f" ({len(times)}/{len(rs)} seeds)")
        g_ = list(gains(rs, local, oracle).values())
        ari = [r["ari"] for r in rs if r["ari"] is not None]
        name = a + (" (static run)" if rs[0]["reused"] else "") + (" ★" if a in front else "")
        rows.append([name, len(rs), fmt_ci([r["acc"] for r in rs]), fmt_ci(g_, 1.0, 2) if g_ else "—",
                     fmt_ci([r["p10"] for r in rs]), fmt_ci(ari, 1.0, 2) if ari else "—",
                     fmt_bytes(mean_of(rs, "traffic")), fmt_s(mean_of(rs, "sim_s")), ttt])
    return [f"**{group_name(g)}** (target {fmt_num(target, '.3f')}; ★ Pareto front of accuracy vs traffic)", "",
            *md(["arm", "seeds", "accuracy", "headroom gain", "p10 device", "ARI", "traffic / device", "sim time",
                 "time to target"], rows)]


def cost_table(g: Group, arms: dict[str, list[Row]]) -> list[str]:
    rows = [[a, *(fmt_bytes(mean_of(rs, k)) for k in ("wan", "d2d", "server_egress", "server_ingress", "busiest")),
             fmt_s(mean_of(rs, "lat50")), fmt_s(mean_of(rs, "lat95")),
             *(f"{mean_of(rs, k):.2f}" for k in ("j_radio", "j_compute", "j_max")), f"{mean_of(rs, 'wall_s'):.0f}"]
            for a, rs in arms.items() if not rs[0]["reused"]]
    return [f"**{group_name(g)}**", "",
            *md(["arm", "WAN / device", "device-device / device", "server egress", "server ingress",
                 "busiest device (sent + received)", "round p50", "round p95", "radio J / device",
                 "compute J / device", "max J (a device)", "wall s / run"], rows)]


def discovery_table(table: dict[Group, dict[str, list[Row]]]) -> list[str]:
    """Per clustering protocol and N (static fleets, all heterogeneities): what discovering the clusters cost
    beside training, per device."""
    rows = []
    for n in sorted({g[0] for g in table}):
        runs = [r for g, arms in table.items() if g[0] == n and g[2] == "static" for rs in arms.values() for r in rs]
        for p in DISCOVERING:
            rs = slowest_egress([r for r in runs if r["protocol"] == p])
            if not rs:
                continue
            d_f, f = mean_of(rs, "discovery_flops"), mean_of(rs, "flops")
            d_b, b = mean_of(rs, "discovery_bytes"), mean_of(rs, "traffic")
            rows.append([f"{n:,}", p, len(rs), f"{d_f / 1e9:.2f}", f"{(f - d_f) / 1e9:.2f}", fmt_bytes(d_b),
                         fmt_bytes(b - d_b), f"{100 * d_b / b:.0f}%" if b else "—"])
    return md(["N", "protocol", "runs", "discovery GFLOP / device", "training GFLOP / device",
               "discovery bytes / device", "other bytes / device", "discovery share of bytes"], rows)


def comparisons_table(verdict: dict[tuple[Group, str], tuple[dict[str, Any], str]],
                      family: Mapping[int, int]) -> list[str]:
    """One row per comparison on two seeds or more (one seed is shown in the decision table only), with the seeds
    a rerun showing the same mean and sd would need to decide it (``seeds_to_resolve``, over N's family)."""
    def needed(n: int, diffs: list[float]) -> str:
        k = seeds_to_resolve(diffs, MARGIN, family=family.get(n, sum(g[0] == n for g, _ in verdict)))
        return "> 100" if k is None else str(k)

    rows = [[group_name(g), a, seeds_read(c), fmt_diff(c["equal_traffic"], 1.0, 2), v,
             "—" if c["holm_p"] is None else f"{c['holm_p']:.3g}", needed(g[0], c["equal_traffic"]),
             f"{fmt_diff(c['equal_time'], 1.0, 2)} ({len(c['equal_time'])})",
             fmt_diff(c["end"], 1.0, 2) + on_seeds(c["end"], c["n_seeds"]),
             f"{np.mean(c['traffic_ratio']):.2f}", _ratio(float(np.mean(c["time_ratio"])), 3)]
            for (g, a), (c, v) in verdict.items() if v != NOT_RUN]
    if not rows:
        return ["No comparison on two seeds or more yet.", ""]
    return md(["fleet", "serverless arm", "seeds read at IFCA's traffic", "gain − IFCA's at IFCA's traffic",
               "matches (Holm, margin 0.10)",
               "Holm-adjusted p", "seeds to decide (planning)", "at equal time (seeds evaluated by then)",
               "at the ends", "traffic ratio (end)", "sim time ratio (end)"], rows, "lllrlrrrrrr")


# ------------------------------------------------------------------------------------------ figures
def colour(protocol: str) -> Any:
    import matplotlib

    return matplotlib.colormaps["tab20"](PROTOCOLS.index(protocol) / len(PROTOCOLS))


def curves_figure(table: dict[Group, dict[str, list[Row]]], n: int, dyn: str, out: Path) -> Optional[Path]:
    """Mean accuracy over seeds vs traffic per device and vs simulated time, one row per heterogeneity."""
    keys = [g for g in table if g[0] == n and g[2] == dyn]
    if not keys:
        return None
    fig = Figure(figsize=(11, 3.6 * len(keys)))
    for i, g in enumerate(keys):
        for j, (x, label) in enumerate(((3, "traffic per device (bytes, log)"), (1, "simulated time (s, log)"))):
            ax = fig.add_subplot(len(keys), 2, 2 * i + j + 1)
            for a, rs in table[g].items():
                if rs[0]["egress"] is not None and a != server_arm(table[g], rs[0]["protocol"]):
                    continue  # the faster egress has the same curve against traffic; its time is in the tables
                # the seeds' mean (x, accuracy) at the rounds every seed evaluated with x > 0 (a log axis)
                pts = [(m[x], m[2]) for m in mean_curve([[p for p in r["curve"] if p[x] > 0] for r in rs])]
                if pts:
                    ax.plot(*zip(*pts), label=rs[0]["protocol"], color=colour(rs[0]["protocol"]), lw=1.2)
            ax.set(xscale="log", xlabel=label, ylabel="mean accuracy", title=f"N = {n:,}, {g[1]}, {dyn}")
            ax.title.set_fontsize(9)
            if i == 0 and j == 1:  # the time panel: every protocol has a curve there (Local sends nothing)
                ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    return out


# ------------------------------------------------------------------------------------------ report
@functools.cache
def studies() -> dict[str, Any]:
    """Study name -> the headline study (``load_study``: every cell validated, seconds each), for those on disk:
    N = 100, 1,000 and 10,000 (exploratory) and any ``headline_n*_confirm.yaml`` (confirmatory)."""
    from p2pfl.study.spec import load_study

    folder = ROOT / "scenarios" / "studies"
    paths = [folder / f"headline_n{n}.yaml" for n in (100, 1000, 10000)]
    paths += sorted(folder.glob("headline_n*_confirm.yaml"))
    return {path.stem: load_study(path) for path in paths if path.is_file()}


def confirmatory(study: str) -> bool:
    """A confirmatory study: planned from an exploratory one's readings, judged on its own seeds."""
    return study.endswith("_confirm")


def planned_families() -> dict[str, int]:
    """Study name -> the comparisons it plans: one per serverless arm and (heterogeneity, dynamics) it runs."""
    return {name: len({(c.variant, c.scenario.data.partition.kind, _planned_dynamics(c.scenario.dynamics))
                       for c in study.cells if c.variant in SERVERLESS_ARMS}) for name, study in studies().items()}


def _planned_dynamics(spec: Any) -> str:
    if spec is not None and spec.mobility is not None:
        return "mobility"
    return "churn" if spec is not None and spec.churn is not None and spec.churn.offline > 0 else "static"


def study_status(rows: list[Row]) -> str:
    """Runs archived against each study's cells."""
    return "; ".join(f"{name}: {sum(r['study'] == name for r in rows)} of {len(study.cells)} cells"
                     for name, study in studies().items())


def by_n(family: Mapping[str, int], names: Sequence[str]) -> dict[int, int]:
    """N -> the planned family of the study among ``names`` that has that N (``headline_n<N>...``)."""
    return {int(name.removeprefix("headline_n").split("_")[0]): family[name] for name in names if name in family}


def confirm_section(rows: list[Row], family: Mapping[str, int]) -> tuple[list[str], dict[tuple[Group, str], Any]]:
    """The confirmatory studies' section (decision rows and comparisons on their own seeds, Holm over their own
    planned comparisons) and their verdicts; nothing when none has run."""
    if not rows:
        return [], {}
    names = sorted({r["study"] for r in rows})
    fam = by_n(family, names)
    table = groups(rows)
    verdict = verdicts(table, fam)
    seeds = sorted({r["seed"] for r in rows})
    return ["## Confirmatory study", "",
            f"{', '.join(f'`{n}`' for n in names)}: planned from the exploratory readings before its runs (its header "
            f"says how), judged on its own seeds ({', '.join(map(str, seeds))}) alone, never pooled with the "
            f"exploratory ones, Holm over its own planned comparisons (" + ", ".join(
                f"{m} at N = {n:,}" for n, m in fam.items()) + "). Where it ran, its verdict is the one the "
            "crossover below reads.", "",
            *decision_table(table, verdict), *comparisons_table(verdict, fam)], verdict


def write(dirs: list[Path], report: Path) -> None:
    """The report from the runs in ``dirs``, its figures beside it."""
    rows = load(dirs)
    explore = [r for r in rows if not confirmatory(r["study"])]
    family = planned_families()
    table = groups(explore)
    explore_family = by_n(family, [name for name in family if not confirmatory(name)])
    verdict = verdicts(table, explore_family)
    confirm_lines, confirm_verdict = confirm_section([r for r in rows if confirmatory(r["study"])], family)
    out_dir = report.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    figs = [f for n in sorted({g[0] for g in table}) for dyn in DYNAMICS
            if (f := curves_figure(table, n, dyn, out_dir / f"svs_curves_N{n}_{dyn}.png")) is not None]
    cpu_h = {n: sum(r["wall_s"] for r in rows if r["n"] == n) / 3600 for n in sorted({r["n"] for r in rows})}
    text = "\n".join([
        "# Server vs serverless clustering: when should a fleet drop the server?", "",
        "Regenerate:", "", "```", COMMAND, "```", "",
        f"{len(rows)} runs archived ({study_status(rows)}), "
        + ", ".join(f"{h:.1f} CPU-hours at N = {n:,}" for n, h in cpu_h.items()) + ". "
        "Budget, samples and test sets come from the pilot (`headline_pilot.md`); the study headers state them. "
        f"Arms fixed before the runs: server **{SERVER_ARM}**, serverless **{' and '.join(SERVERLESS_ARMS)}**. "
        f"Gains are (acc − Local) / (Oracle − Local) per seed; 'matches' = the paired gain difference at IFCA's "
        f"traffic lies above −{MARGIN} with Holm's correction over each N's planned comparisons ("
        + ", ".join(f"{m} at N = {n:,}" for n, m in explore_family.items())
        + "; those not run yet count as not rejected, so a verdict given now stands when they come in). "
        "Brackets are paired 95% t-intervals over the seeds, not adjusted: a verdict needs the Holm-adjusted "
        f"p-value of the test of mean = −{MARGIN} at or below 0.05 (the comparisons table prints it), which over a "
        "family of m asks at its strictest step for the 1 − 0.05/m interval, so an unadjusted bracket clear of "
        "the margin can still read 'not resolved'; "
        f"'fewer bytes' = at least "
        f"{100 * BYTES_TOL:.0f}% fewer. Traffic = bytes sent by every node (devices and servers) per device. "
        "Under churn a round's fleet-wide evaluation waits for its slowest device, so churned runs are read over "
        "simulated time where they have that curve (summary.json's accuracy_over_time: each device's latest "
        "score, over the devices scored so far); runs archived before that field (the server arms' here) keep their round curve. "
        + degree_line(rows), "",
        "## Provenance", "", "Each archive's cells by the revision that made them, and the last `p2pfl archive verify` of a sample of them at a later revision:", "", *provenance_lines(dirs), "",
        "## Decision table", "", *decision_table(table, verdict),
        "Seeds run: IFCA's; an interval read on fewer seeds says so ('on k of n seeds'): a seed whose first "
        "fleet-wide evaluation came after IFCA's whole traffic has no reading at it. "
        "'Drop the server': a serverless arm matches IFCA at IFCA's traffic and ends with >= 10% fewer bytes or "
        "sooner than IFCA at each server egress run; 'drop a 50 Mbit/s server': it matches with about IFCA's bytes "
        "and ends sooner than IFCA at that egress but later than IFCA at the faster one (the same learning and "
        "bytes, shorter rounds).", "",
        *confirm_lines,
        "## Crossover N", "", *crossover({**verdict, **confirm_verdict}),
        "## Serverless arms against IFCA", "", *comparisons_table(verdict, explore_family),
        "At equal time, '— (0)' means IFCA had no evaluation yet (its first comes after 4 rounds) when the "
        "serverless arm had finished; the time ratio gives how much sooner that was. Seeds to decide: a planning "
        "estimate for a follow-up, not a test: the fewest seeds at which the gain difference at IFCA's traffic "
        "would be decided (Holm's strictest step over the N's family) if a rerun showed the same mean and sd "
        "(`p2pfl.metrics.claims.seeds_to_resolve`).", "",
        "## Accuracy, gain, p10 device, ARI, traffic, time to target (Pareto ★)", "",
        *[line for g, arms in table.items() for line in accuracy_table(g, arms)],
        "## Discovery vs training cost (static fleets)", "", *discovery_table(table),
        "## Bytes by path, latency, energy (devices only)", "",
        *[line for g, arms in table.items() for line in cost_table(g, arms)],
        "Plots: " + ", ".join(f"`{f.name}`" for f in figs) + ".", "",
    ])
    report.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    raise SystemExit(report_main(write, __doc__, ROOT / "analysis" / "results" / "server_vs_serverless.md"))
