"""analysis/reports/headline_report.py on hand-made rows: readings on curves, headroom gain and Holm recomputed by hand,
reuse of static server cells under mobility, the decision and the crossover."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from p2pfl.metrics.claims import at_least, at_least_holm
from tests.helpers import analysis_module

rep = analysis_module("headline_report")


def _run(protocol: str, seed: int, acc: float, traffic: float, sim_s: float, *, egress: Optional[float] = None,
         dyn: str = "static", n: int = 100, het: str = "rotation") -> dict[str, Any]:
    """A run whose curve has two evaluations: half-way (half the traffic and time, acc - 0.1) and the end."""
    curve = [(4, sim_s / 2, acc - 0.1, traffic / 2), (8, sim_s, acc, traffic)]
    return {"protocol": protocol, "egress": egress, "seed": seed, "n": n, "het": het, "dyn": dyn, "reused": False,
            "acc": acc, "p10": acc - 0.05, "ari": None, "curve": curve, "traffic": traffic, "sim_s": sim_s,
            "study": f"headline_n{n}", "variant": protocol, "wall_s": 1.0, "degree": None}


def _group(ifca: list[float], arm: list[float], *, arm_traffic: float = 2e6, arm_time: float = 5.0,
           n: int = 100, het: str = "rotation") -> list[dict[str, Any]]:
    """Local 0.60 + s/100 and Oracle 0.80 + s/100 per seed s (headroom 0.20), IFCA at 1 MB and 100 s, the
    serverless arm rnd_gossip_h1 at ``arm_traffic`` and ``arm_time``."""
    rows = []
    for s, (a_ifca, a_arm) in enumerate(zip(ifca, arm)):
        rows += [_run("local", s, 0.60 + s / 100, 0.0, 1.0, n=n, het=het),
                 _run("oracle", s, 0.80 + s / 100, 1e6, 50.0, egress=5e7, n=n, het=het),
                 _run("ifca", s, a_ifca + s / 100, 1e6, 100.0, egress=5e7, n=n, het=het),
                 _run("rnd_gossip_h1", s, a_arm + s / 100, arm_traffic, arm_time, n=n, het=het)]
    return rows


def test_dynamics_egress_and_arm_names_come_from_the_resolved_scenario() -> None:
    # a load_runs row: the resolved scenario flattened into scenario.* columns, a missing value None
    assert rep.dynamics_of({"scenario.dynamics.churn.offline": 0.0, "scenario.dynamics.mobility": None}) == "static"
    assert rep.dynamics_of({"scenario.dynamics.churn.offline": 0.3}) == "churn"
    assert rep.dynamics_of({"scenario.dynamics.churn": None, "scenario.dynamics.mobility.model": "group"}) == "mobility"
    server = {"name": "server", "link": {"bandwidth_bps": 5.0e7}, "egress_bps": None}
    assert rep.egress_of([server]) == 5.0e7  # unset: one transfer at the link's rate
    assert rep.egress_of([{**server, "egress_bps": 1e9}]) == 1e9
    assert rep.egress_of([]) is None
    assert rep.arm(_run("ifca", 0, 0.5, 1, 1, egress=1e9)) == "ifca @1 Gbit/s"
    assert rep.arm(_run("ifca", 0, 0.5, 1, 1, egress=5e7)) == "ifca @50 Mbit/s"
    assert rep.arm(_run("gossip", 0, 0.5, 1, 1)) == "gossip"


def test_readings_on_a_curve() -> None:
    curve = [(4, 1.0, 0.5, 100.0), (8, 2.0, 0.7, 200.0), (12, 3.0, 0.65, 300.0)]
    assert rep.at_traffic(curve, 250.0) == 0.7 and rep.at_traffic(curve, 300.0) == 0.65
    assert rep.at_traffic(curve, 99.0) is None
    assert rep.at_time(curve, 2.5) == 0.7 and rep.at_time(curve, 0.5) is None
    assert rep.first_reaching(curve, 0.6) == (2.0, 200.0) and rep.first_reaching(curve, 0.9) is None


def test_headroom_gain_and_the_readings_are_recomputed_from_the_rows() -> None:
    # IFCA 0.75 + s/100: gain (0.75 - 0.60) / 0.20 = 0.75 at every seed. The arm ends at 0.72, 0.74, 0.76 (+ s/100)
    # with twice IFCA's traffic: at IFCA's traffic (1 MB) its half-way point counts: 0.62, 0.64, 0.66.
    table = rep.groups(_group([0.75] * 3, [0.72, 0.74, 0.76]))
    c = rep.comparison(table[(100, "rotation", "static")], "rnd_gossip_h1")
    assert c["server"] == "ifca @50 Mbit/s" and c["n_seeds"] == 3
    assert c["gain_server"] == pytest.approx([0.75] * 3)
    assert c["end"] == pytest.approx([(a - 0.60) / 0.20 - 0.75 for a in (0.72, 0.74, 0.76)])
    assert c["equal_traffic"] == pytest.approx([(a - 0.60) / 0.20 - 0.75 for a in (0.62, 0.64, 0.66)])
    # equal time: the arm ended at 5 s, IFCA at 100 s (first evaluated at 50 s): no seed has both
    assert c["equal_time"] == []
    assert c["traffic_ratio"] == pytest.approx([2.0] * 3) and c["time_ratio"] == pytest.approx([0.05] * 3)
    late = rep.groups(_group([0.75] * 3, [0.72, 0.74, 0.76], arm_time=60.0))
    c = rep.comparison(late[(100, "rotation", "static")], "rnd_gossip_h1")
    # at 60 s the arm has ended (0.72 + ...) and IFCA has its half-way point (0.65 + s/100)
    assert c["equal_time"] == pytest.approx([(a - 0.60) / 0.20 - 0.25 for a in (0.72, 0.74, 0.76)])


def test_holm_runs_over_each_ns_comparisons_and_can_turn_a_pass_into_not_resolved() -> None:
    # two groups where the arm trails IFCA by a gain of 0.05 +- 0.02 (margin 0.10): each alone holds at 95%,
    # but Holm's first step over two comparisons asks for the 97.5% interval, which spans the margin
    a = _group([0.75] * 3, [0.746, 0.738, 0.742], arm_traffic=1e6, het="rotation")
    b = _group([0.75] * 3, [0.746, 0.742, 0.738], arm_traffic=1e6, het="label_shift")
    table = rep.groups(a + b)
    verdict = rep.verdicts(table)
    diffs = [verdict[(g, "rnd_gossip_h1")][0]["equal_traffic"] for g in table]
    assert diffs[0] == pytest.approx([(x - 0.60) / 0.20 - 0.75 for x in (0.746, 0.738, 0.742)])
    held = [verdict[(g, "rnd_gossip_h1")][1] for g in table]
    assert held == at_least_holm(diffs, rep.MARGIN)
    assert [at_least(d, rep.MARGIN) for d in diffs] == ["holds", "holds"]
    assert all(v.startswith("not resolved") for v in held)
    # at another N the family is separate: group a alone at N = 1,000 holds
    alone = rep.verdicts(rep.groups(a + _group([0.75] * 3, [0.746, 0.742, 0.738], arm_traffic=1e6, n=1000)))
    assert {g[0]: v for (g, _), (_, v) in alone.items()} == {100: "holds", 1000: "holds"}
    # ... unless its study plans more comparisons there: those not run yet count as not rejected
    planned = rep.verdicts(rep.groups(a + _group([0.75] * 3, [0.746, 0.742, 0.738], arm_traffic=1e6, n=1000)),
                           {1000: 2})
    assert planned[((1000, "rotation", "static"), "rnd_gossip_h1")][1].startswith("not resolved")
    assert planned[((100, "rotation", "static"), "rnd_gossip_h1")][1] == "holds"


@pytest.mark.slow
def test_the_planned_families_count_each_studys_serverless_comparisons() -> None:
    # N = 100: 4 heterogeneities x 3 dynamics x 2 arms; N = 1,000: 2 x 2 x 2; N = 10,000: rotation x 2 x 2;
    # the confirmatory N = 1,000 study: rotation x 2 dynamics x rnd_gossip h1
    family = rep.planned_families()
    assert family == {"headline_n100": 24, "headline_n1000": 8, "headline_n10000": 4, "headline_n1000_confirm": 2}
    assert rep.by_n(family, ["headline_n100", "headline_n1000"]) == {100: 24, 1000: 8}
    assert rep.by_n(family, ["headline_n1000_confirm"]) == {1000: 2}


def test_a_confirmatory_study_is_judged_on_its_own_seeds_and_family_and_its_verdict_reaches_the_crossover() -> None:
    # exploratory, N = 1,000: the arm trails IFCA by 0.05 +- 0.02 of the headroom, 3 seeds, Holm over 8: not resolved
    explore = _group([0.75] * 3, [0.746, 0.738, 0.742], arm_traffic=1e6, n=1000)
    ex = rep.verdicts(rep.groups(explore), {1000: 8})
    assert ex[((1000, "rotation", "static"), "rnd_gossip_h1")][1].startswith("not resolved")
    # confirmatory: seeds 3-7 alone (the exploratory rows are not pooled in), Holm over its own 2
    confirm = [{**r, "seed": r["seed"] + 3, "study": "headline_n1000_confirm"}
               for r in _group([0.75] * 5, [0.746, 0.738, 0.742, 0.744, 0.740], arm_traffic=1e6, n=1000)]
    lines, verdict = rep.confirm_section(confirm, {"headline_n1000_confirm": 2})
    c, v = verdict[((1000, "rotation", "static"), "rnd_gossip_h1")]
    assert c["n_seeds"] == 5 and v == at_least_holm([c["equal_traffic"]], rep.MARGIN, family=2)[0] == "holds"
    assert lines[0] == "## Confirmatory study" and "(3, 4, 5, 6, 7)" in lines[2] and "2 at N = 1,000" in lines[2]
    crossing = rep.crossover({**ex, **verdict})  # the arm's bytes match IFCA's (ratio 1): no 10% fewer, time 0.05x
    assert any("rotation, static" in row and "N = 1,000" in row.split("|")[-3] for row in crossing)
    assert rep.confirm_section([], {}) == ([], {})
    early, _ = rep.confirm_section([r for r in confirm if r["protocol"] == "local"], {"headline_n1000_confirm": 2})
    assert early[-2:] == ["No comparison on two seeds or more yet.", ""]  # only Local has run: no empty table


def test_server_and_local_cells_are_reused_for_mobility_rows_and_marked() -> None:
    rows = _group([0.75] * 3, [0.74] * 3)
    rows += [{**r, "dyn": "mobility"} for r in rows if r["protocol"] == "rnd_gossip_h1"]
    table = rep.groups(rows)
    mob = table[(100, "rotation", "mobility")]
    assert set(mob) == {"local", "oracle @50 Mbit/s", "ifca @50 Mbit/s", "rnd_gossip_h1"}
    assert all(r["reused"] for a in ("local", "oracle @50 Mbit/s", "ifca @50 Mbit/s") for r in mob[a])
    assert not any(r["reused"] for r in mob["rnd_gossip_h1"])


def test_the_decision_and_the_crossover_follow_the_verdicts() -> None:
    # N = 100: the arm trails IFCA by 0.5 of the headroom (does not hold); N = 1,000: it matches with half the bytes
    small = _group([0.75] * 5, [0.65, 0.651, 0.649, 0.652, 0.648], arm_traffic=1e6)
    large = _group([0.75] * 5, [0.75, 0.751, 0.749, 0.752, 0.748], arm_traffic=0.5e6, n=1000)
    table = rep.groups(small + large)
    verdict = rep.verdicts(table)
    lines = rep.decision_table(table, verdict)
    assert "**keep the server: IFCA**" in lines[2] and lines[2].startswith("| N = 100, rotation, static | 5 |")
    assert "**drop the server: rnd_gossip_h1**" in lines[3] and "sent ≥ 10% fewer bytes" in lines[3]
    cross = rep.crossover(verdict)  # no IFCA at 1 Gbit/s in these groups: its column is not run
    assert cross[2] == "| rotation, static | rnd_gossip_h1 | 100, 1,000 | N = 1,000 | not run |"


def test_the_crossover_in_time_is_read_against_the_server_at_each_egress() -> None:
    # the arm matches IFCA with IFCA's bytes (not 10% fewer) and ends at 50 s: sooner than IFCA at 50 Mbit/s
    # (100 s), later than the same IFCA at 1 Gbit/s (10 s)
    rows = _group([0.75] * 5, [0.75, 0.751, 0.749, 0.752, 0.748], arm_traffic=1e6, arm_time=50.0, n=1000)
    rows += [{**r, "egress": 1e9, "sim_s": 10.0} for r in rows if r["protocol"] == "ifca"]
    verdict = rep.verdicts(rep.groups(rows))
    c, v = verdict[((1000, "rotation", "static"), "rnd_gossip_h1")]
    assert v == "holds" and c["time_ratio"] == pytest.approx([0.5] * 5)
    assert c["time_ratio_fastest"] == pytest.approx([5.0] * 5)
    assert rep.crossover(verdict)[2] == "| rotation, static | rnd_gossip_h1 | 1,000 | N = 1,000 | none of N = 1,000 |"
    line = rep.decision_table(rep.groups(rows), verdict)[2]
    assert "**drop a 50 Mbit/s server: rnd_gossip_h1**" in line
    assert line.endswith("simulated time 0.50x IFCA's at its slowest server egress, 5.00x at its fastest |")


def test_an_arm_that_sent_more_than_the_server_before_its_first_reading_has_no_verdict() -> None:
    # the arm's half-way evaluation already spent 1.5 MB, IFCA's whole traffic is 1 MB: nothing to read at equal
    # traffic (as under churn, where a round's fleet-wide evaluation waits for its slowest device)
    table = rep.groups(_group([0.75] * 5, [0.70, 0.71, 0.69, 0.72, 0.68], arm_traffic=3e6))
    verdict = rep.verdicts(table)
    line = rep.decision_table(table, verdict)[2]
    assert "| no reading at IFCA's traffic | — |" in line and "**no reading at IFCA's traffic**" in line
    assert "at the ends: rnd_gossip_h1 -0.25 [" in line


def test_an_arm_read_on_one_seed_is_reported_but_decides_nothing() -> None:
    # dac_original alone, one seed, read at IFCA's traffic (its half-way point, 0.64: gain 0.20 against IFCA's
    # 0.75): its column (the second) says so; no decision yet
    rows = [r for r in _group([0.75] * 3, [0.74] * 3) if r["protocol"] != "rnd_gossip_h1"]
    rows.append(_run("dac_original", 0, 0.74, 2e6, 5.0))
    table = rep.groups(rows)
    verdict = rep.verdicts(table)
    assert verdict[((100, "rotation", "static"), "dac_original")][1] == "not run"
    line = rep.decision_table(table, verdict)[2]
    assert "| — | -0.55 (n=1): fewer than two seeds | **—** | the arms have not run here yet (on two seeds or more) |" \
        in line


def test_an_arm_that_trails_beside_one_without_a_reading_keeps_the_server() -> None:
    rows = _group([0.75] * 5, [0.65, 0.651, 0.649, 0.652, 0.648], arm_traffic=1e6)  # trails by 0.5: does not hold
    rows += [_run("dac_original", s, 0.70 + s / 100, 3e6, 5.0) for s in range(5)]  # half-way already 1.5 MB
    table = rep.groups(rows)
    line = rep.decision_table(table, rep.verdicts(table))[2]
    assert "**keep the server: IFCA**" in line and "dac_original has no reading at IFCA's traffic" in line


def test_pareto_keeps_only_undominated_arms() -> None:
    front = rep.pareto({"ifca": (0.8, 5e6), "gossip": (0.7, 1e6), "dsgd": (0.7, 3e6), "local": (0.6, 0.0),
                        "worse": (0.5, 1e6)})
    assert front == ["ifca", "gossip", "local"]


def test_a_runs_figures_come_from_its_results_api_rows() -> None:
    import pandas as pd

    run = {"study": "headline_n100", "variant": "ifca_1g", "seed": 2, "n_devices": 4, "accuracy_mean": 0.7,
           "ari": None, "scenario.topology.servers": '[{"egress_bps": 1e9, "link": {"bandwidth_bps": 5e7}}]',
           "scenario.data.partition.kind": "rotation", "scenario.dynamics.churn.offline": 0.3,
           "bytes_total": 1000, "sim_time_s": 9.0, "bytes_wan": 800, "bytes_device_to_device": None,
           "bytes_per_server.server": 600, "bytes_received_per_server.server": 200,
           "bytes_by_kind.rnd_row": 40.0, "bytes_by_kind.models": 960, "clustering_flops": None,
           "compute_flops_total": 4e9, "round_latency_s.p50": 1.5, "energy.j_per_device.radio_mean": 1.0,
           "energy.j_per_device.compute_mean": 2.0, "energy.j_per_device.total_max": 4.0, "timing.wall_s": 3.0}
    nodes = pd.DataFrame({"value": [0.5, 0.6, None, 0.9], "bytes_sent": [10, 50, 20, 0],
                          "bytes_received": [100, 70, 130, 0]})
    curve = pd.DataFrame({"round": [4, 8, 12], "t": [3.0, 6.0, 9.0], "value": [0.4, None, 0.7],
                          "bytes_per_device": [10.0, 20.0, 30.0], "bytes_servers": [400, 500, 600]})
    r = rep.row_of(run, nodes, curve)
    assert (r["protocol"], r["egress"], r["het"], r["dyn"]) == ("ifca", 1e9, "rotation", "churn")
    assert (r["seed"], r["n"], r["acc"], r["ari"]) == (2, 4, 0.7, None)
    assert r["curve"] == [(4, 3.0, 0.4, 110.0), (12, 9.0, 0.7, 180.0)]  # bytes per device + servers' / N
    assert (r["traffic"], r["wan"], r["d2d"], r["discovery_bytes"]) == (250.0, 200.0, 0.0, 10.0)
    assert (r["server_egress"], r["server_ingress"], r["busiest"]) == (600.0, 200.0, 150.0)
    assert (r["flops"], r["discovery_flops"], r["lat50"], r["lat95"], r["degree"]) == (1e9, 0.0, 1.5, None, None)
    assert r["p10"] == 0.52  # of 0.5, 0.6, 0.9 (device 2 never scored): 0.5 + 0.2 x 0.1
    over_time = pd.DataFrame({"round": [None, None], "t": [2.0, 9.0], "value": [0.5, 0.7],
                              "bytes_per_device": [5.0, 30.0], "bytes_servers": [0, 600]})
    assert rep.row_of(run, nodes, over_time)["curve"] == [(0, 2.0, 0.5, 5.0), (0, 9.0, 0.7, 180.0)]  # round 0: by time


def _fewer_read() -> list[dict[str, Any]]:
    """Five seeds; the arm's seeds 3 and 4 have their first evaluation (half-way, 1.5 MB) past IFCA's whole traffic
    (1 MB): its interval at IFCA's traffic rests on seeds 0-2 (as the archived N = 100 label-permutation mobility
    row's rested on 3 of its 5)."""
    rows = [r for r in _group([0.75] * 5, [0.74, 0.76, 0.73, 0.75, 0.74])
            if not (r["protocol"] == "rnd_gossip_h1" and r["seed"] >= 3)]
    return rows + [_run("rnd_gossip_h1", s, 0.75 + s / 100, 3e6, 5.0) for s in (3, 4)]


def test_a_row_shows_the_seeds_its_interval_rests_on() -> None:
    # seeds 0-2 at IFCA's traffic: half-way 0.64, 0.67, 0.65 against Local 0.60-0.62, gains 0.20, 0.30, 0.15 vs
    # IFCA's 0.75: -0.55, -0.45, -0.60, mean -0.53, t(0.975, 2) interval [-0.72, -0.34]; at the ends all 5 seeds
    table = rep.groups(_fewer_read())
    verdict = rep.verdicts(table)
    c, _ = verdict[((100, "rotation", "static"), "rnd_gossip_h1")]
    assert c["n_seeds"] == 5 and c["equal_traffic"] == pytest.approx([-0.55, -0.45, -0.60])
    assert rep.seeds_read(c) == "3 of 5" and len(c["end"]) == 5
    decision = rep.decision_table(table, verdict)
    assert decision[0].startswith("| fleet | seeds run | headroom (pts) |")
    assert decision[2] == ("| N = 100, rotation, static | 5 | 20.0 | 0.75 | — | -0.53 [-0.72, -0.34] on 3 of 5 seeds: "
                           "does not hold | — | **keep the server: IFCA** | every serverless arm trails IFCA by more "
                           "than 10% of the headroom at IFCA's traffic |")
    comparisons = rep.comparisons_table(verdict, {})
    assert comparisons[0].startswith("| fleet | serverless arm | seeds read at IFCA's traffic | gain − IFCA's at")
    assert comparisons[2] == ("| N = 100, rotation, static | rnd_gossip_h1 | 3 of 5 | -0.53 [-0.72, -0.34] | does not "
                              "hold | 0.0102 | 3 | — (0) | -0.02 [-0.09, +0.05] | 2.40 | 0.050 |")
    # every seed read: the count is the row's, nothing added
    full = rep.groups(_group([0.75] * 5, [0.74, 0.76, 0.73, 0.75, 0.74]))
    every = rep.verdicts(full)
    assert rep.seeds_read(every[((100, "rotation", "static"), "rnd_gossip_h1")][0]) == "5"
    assert "seeds:" not in rep.decision_table(full, every)[2]
    assert rep.on_seeds([0.1], 5) == "" and rep.on_seeds([], 5) == "" and rep.on_seeds([0.1, 0.2], 5) == \
        " on 2 of 5 seeds"


def test_the_header_prints_the_mobile_fleets_mean_radio_degree(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _fewer_read()
    mobile = [{**r, "dyn": "mobility", "degree": d} for r, d in
              zip([r for r in rows if r["protocol"] == "rnd_gossip_h1"], (6.0, 7.0, 6.5, 7.5, 8.0))]
    large = [{**_run("rnd_gossip_h1", 0, 0.7, 1e6, 5.0, n=1000, dyn="mobility"), "degree": 8.25}]
    assert rep.degree_line(rows) == ""  # no mobile fleet: nothing promised
    assert rep.degree_line(rows + mobile + large) == (
        "Group mobility: mean radio degree (the radius graph's, averaged over each run) 7.0 at N = 100 (5 runs), "
        "8.2 at N = 1,000 (1 run).")
    # in the report's header, where the study headers promise it (the runs loaded, the studies' plan stubbed; the
    # cost tables' figures at zero)
    costs = dict.fromkeys(("discovery_flops", "flops", "discovery_bytes", "wan", "d2d", "server_egress",
                           "server_ingress", "busiest", "lat50", "lat95", "j_radio", "j_compute", "j_max"), 0.0)
    monkeypatch.setattr(rep, "load", lambda dirs: [{**costs, **r} for r in rows + mobile])
    monkeypatch.setattr(rep, "planned_families", lambda: {"headline_n100": 2})
    monkeypatch.setattr(rep, "study_status", lambda rows: "headline_n100: 25 of 25 cells")
    monkeypatch.setattr(rep, "provenance_lines", lambda dirs: [])
    monkeypatch.setattr(rep, "curves_figure", lambda *args: None)
    report = tmp_path / "report.md"
    rep.write([tmp_path], report)
    lines = report.read_text().splitlines()
    header = next(line for line in lines if line.startswith("25 runs archived"))
    assert header.endswith("keep their round curve. Group mobility: mean radio degree (the radius graph's, averaged "
                           "over each run) 7.0 at N = 100 (5 runs).")
    assert "| N = 100, rotation, static | 5 | 20.0 | 0.75 | — | -0.53 [-0.72, -0.34] on 3 of 5 seeds: does not hold |" \
        in "\n".join(lines)
