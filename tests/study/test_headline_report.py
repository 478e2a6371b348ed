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
