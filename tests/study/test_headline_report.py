"""analysis/headline_report.py on hand-made rows: settings, worst decile, Pareto front, crossover, decision."""

from __future__ import annotations

from typing import Any

from tests.helpers import analysis_module


def _run(protocol: str, seed: int, acc: float, nbytes: float, sim_s: float, server: float = 0.0) -> dict[str, Any]:
    return {"protocol": protocol, "seed": seed, "acc": acc, "bytes": nbytes, "sim_s": sim_s, "bytes_device": nbytes,
            "bytes_server": server, "worst10": acc, "ari": None, "curve": [(sim_s / 2, acc / 2), (sim_s, acc)]}


def test_setting_and_worst_decile() -> None:
    rep = analysis_module("headline_report")
    base = {"topology": {"placement": "strips"}, "dynamics": {"churn": {"offline": 0.0}}}
    assert rep.setting_of(base) == "together, static"
    assert rep.setting_of({"topology": {}, "dynamics": {"churn": {"offline": 0.3}}}) == "scattered, churn"
    assert rep.setting_of({"topology": {"placement": "strips"}, "dynamics": {"mobility": {"model": "group"}}}) == "group mobility"
    assert rep.worst_decile([0.9] * 18 + [0.1, 0.3]) == 0.2  # lowest 2 of 20
    assert rep.worst_decile([0.5, 0.7]) == 0.5  # at least one device


def test_pareto_drops_only_dominated_protocols() -> None:
    rep = analysis_module("headline_report")
    protos = {"fedavg": [_run("fedavg", 0, 0.6, 100.0, 5.0)], "gossip": [_run("gossip", 0, 0.5, 100.0, 1.0)],
              "dsgd": [_run("dsgd", 0, 0.5, 200.0, 2.0)], "local": [_run("local", 0, 0.3, 0.0, 0.1)]}
    assert rep.pareto(protos) == ["fedavg", "gossip", "local"]  # dsgd: gossip is as accurate, cheaper, faster


def test_crossover_needs_a_paired_match_and_fewer_bytes() -> None:
    rep = analysis_module("headline_report")
    seeds = (0, 1, 2)
    small = {"ifca": [_run("ifca", s, 0.60 + 0.01 * s, 1e6, 10.0) for s in seeds],
             "rnd_gossip_h1": [_run("rnd_gossip_h1", s, 0.40 + 0.01 * s, 5e5, 50.0) for s in seeds]}
    large = {"ifca": [_run("ifca", s, 0.60 + 0.01 * s, 1e8, 100.0) for s in seeds],
             "rnd_gossip_h1": [_run("rnd_gossip_h1", s, 0.605 + 0.011 * s, 5e6, 50.0) for s in seeds]}
    table = {(100, "feature_skew", "together, static"): small, (1000, "feature_skew", "together, static"): large}
    lines, found = rep.crossover(table)
    assert found == {("feature_skew", "together, static"): 1000}
    assert "| no (does not hold) |" in lines[2] and "| yes (holds) |" in lines[3]
    rows = rep.decision(table)
    assert "| 100, feature_skew, together, static | **ifca** |" in rows[2]
    assert "| 1,000, feature_skew, together, static | **rnd_gossip_h1** |" in rows[3]


def test_limits_extrapolate_by_measured_or_design_growth() -> None:
    rep = analysis_module("headline_report")

    def row(p: str, n: int, wall: float) -> dict[str, Any]:
        return {"protocol": p, "n": n, "wall_s": wall, "partition": "feature_skew", "setting": "together, static"}

    rows = [row("gossip", 100, 60.0), row("gossip", 1000, 600.0), row("gossip", 10000, 6000.0),
            row("rnd_gossip_h1", 100, 60.0), row("rnd_gossip_h1", 1000, 6000.0),  # 100x per 10x N: exponent 2
            row("rnd_relay", 100, 240.0), row("ifca", 100, 30.0),
            {**row("ifca", 100, 9999.0), "setting": "together, churn"}]  # not the like-for-like setting
    lines = rep.limits(rows)
    body = "\n".join(lines)
    assert "| gossip |" not in body  # ran at every N
    assert "| rnd_gossip_h1 | 1,000 | 100.0 min | 2.00 (measured, N = 100 → 1,000) | N = 10,000: 166.7 h |" in body
    assert "| rnd_relay | 100 | 4.0 min | 2.00 (N^2 predictor pairs scored (by design)) | N = 1,000: 6.7 h |" in body
    assert "| ifca | 100 | 0.5 min | unknown (one N) | — |" in body
    assert rep.limits([row("gossip", 100, 1.0)]) == []


def test_reading_states_resolved_and_unresolved_leads_moves_crossovers_and_growth() -> None:
    rep = analysis_module("headline_report")
    seeds = (0, 1, 2)

    def runs(p: str, acc: list[float], nbytes: float = 1e6, n: int = 100, server: float = 0.0) -> list[dict[str, Any]]:
        return [{**_run(p, s, a, nbytes, 10.0, server), "n": n, "partition": "label_shift",
                 "setting": "together, static", "study": f"headline_n{n}"} for s, a in zip(seeds, acc)]

    static = {"ifca": runs("ifca", [0.90, 0.92, 0.94]), "fedavg": runs("fedavg", [0.50, 0.52, 0.51], server=4e6),
              "rnd_gossip_h1": runs("rnd_gossip_h1", [0.80, 0.83, 0.85], 2e5)}
    churn = {"ifca": runs("ifca", [0.88, 0.90, 0.92]), "rnd_gossip_h1": runs("rnd_gossip_h1", [0.80, 0.83, 0.85])}
    big = {"fedavg": runs("fedavg", [0.5, 0.5, 0.5], 1e7, n=1000, server=4e7)}
    table = {(100, "label_shift", "together, static"): static, (100, "label_shift", "together, churn"): churn,
             (1000, "label_shift", "together, static"): big}
    rows = [r for protos in table.values() for rs in protos.values() for r in rs]
    for r in rows:
        r["partition"] = "feature_skew" if r["n"] == 1000 or r["protocol"] == "fedavg" else r["partition"]
    text = "\n".join(rep.reading(table, rows, {("label_shift", "together, static"): None,
                                               ("label_shift", "together, churn"): 100}))
    assert ("N = 100, label_shift, groups together, static: the best clustering protocol, ifca 0.920, leads the best "
            "single model, fedavg 0.510, by +41.0 [") in text and "spans 0" not in text.split("\n")[0]
    assert "churn moves ifca by -2.0 [-2.0, -2.0] pts and rnd_gossip_h1 by +0.0 [+0.0, +0.0] pts" in text
    assert ("label_shift: serverless clustering matches the server's best at fewer bytes in 1 of 2 settings at the "
            "N where both kinds ran (100): together, churn (from N = 100)") in text  # N = 1,000: fedavg only
    assert "fedavg 1.00 (cost tables" in text  # 1 MB -> 10 MB per device over 100 -> 1,000 devices
    tied = {"fedavg": runs("fedavg", [0.60, 0.50, 0.55]), "ifca": runs("ifca", [0.50, 0.60, 0.54])}
    line = rep.reading({(100, "label_shift", "together, static"): tied}, [], {})[0]
    assert "the best single model, fedavg 0.550, leads the best clustering protocol, ifca 0.547" in line
    assert line.endswith(": an interval that spans 0 (accuracy table).")


def test_groups_missing_a_protocol_or_seed_are_left_out_and_named() -> None:
    rep = analysis_module("headline_report")

    def row(p: str, seed: int, n: int, setting: str) -> dict[str, Any]:
        return {"protocol": p, "seed": seed, "n": n, "partition": "feature_skew", "setting": setting,
                "study": f"headline_n{n}"}

    rows = ([row(p, s, 100, "together, static") for p in ("ifca", "gossip") for s in (0, 1, 2)]
            + [row("ifca", s, 100, "group mobility") for s in (0, 1, 2)]  # gossip not run yet
            + [row("gossip", s, 100, "together, churn") for s in (0, 1)]  # ifca and a seed missing
            + [row("fedavg", 0, 1000, "together, static")])
    fs = "feature_skew"
    sizes = {"headline_n100": rep.StudySize(100, 360, {(100, fs, s): 6 for s in rep.SETTINGS}),
             # a study whose exclusions leave one run in this group: that one run completes it
             "headline_n1000": rep.StudySize(1000, 120, {(1000, fs, "together, static"): 1})}
    kept, partial = rep.complete_groups(rows, sizes)
    assert partial == [(100, "feature_skew", "together, churn"), (100, "feature_skew", "group mobility")]
    assert sorted((r["n"], r["setting"]) for r in kept) == [(100, "together, static")] * 6 + [(1000, "together, static")]
    assert rep.status(rows, sizes, partial) == (
        "Cells complete: `headline_n100` 11 of 360, `headline_n1000` 1 of 120; left out of every table and plot "
        "until all their protocols and seeds have run: N = 100, feature_skew, together, churn; N = 100, "
        "feature_skew, group mobility.")
