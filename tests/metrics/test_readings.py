"""Readings under every cost (issue 70): each recomputed by hand from two hand-made runs.

J/bit constants of 1/8 sent and 1/16 received make a device's radio joules its bytes sent plus half its bytes
received, so every energy below is arithmetic on the bytes.
"""

from __future__ import annotations

from typing import Any

import pytest

from p2pfl.metrics.readings import (
    END,
    READINGS,
    CostCurve,
    Reading,
    at_budget,
    cost_curve,
    gain_difference,
    read,
    readings,
)

MODEL = {"send_j_per_bit": 0.125, "receive_j_per_bit": 0.0625, "j_per_flop": 0.0}


def summary(*, n: int, sent: list[int], received: list[int], servers: dict[str, int], radio: list[float],
            points: list[dict[str, Any]], end_t: float, final: float) -> dict[str, Any]:
    return {"metric": "accuracy", "n_devices": n, "accuracy_mean": final, "sim_time_s": end_t,
            "bytes_per_node": sent, "bytes_received_per_node": received, "bytes_relayed_per_node": [0] * n,
            "bytes_per_server": servers,
            "energy": {"model": MODEL, "j_per_device": {"radio_mean": sum(radio) / n, "radio_max": max(radio)}},
            "accuracy_curve": points}


#: serverless: two devices send 100 and 300 bytes and receive 300 and 100 (rho = 1); radio 250 and 350 J
GOSSIP = summary(n=2, sent=[100, 300], received=[300, 100], servers={}, radio=[100 + 150, 300 + 50],
                 points=[{"round": 1, "t": 1.0, "accuracy_mean": 0.5, "bytes_per_device": 50.0, "bytes_servers": 0},
                         {"round": 2, "t": 2.0, "accuracy_mean": 0.7, "bytes_per_device": 150.0, "bytes_servers": 0}],
                 end_t=2.5, final=0.8)
#: one server: devices send 40 and 60 bytes to it and receive its 200 (100 each; rho = 0); radio 90 and 110 J
SERVER = summary(n=2, sent=[40, 60], received=[100, 100], servers={"server": 200}, radio=[40 + 50, 60 + 50],
                 points=[{"round": 1, "t": 10.0, "accuracy_mean": 0.6, "bytes_per_device": 25.0, "bytes_servers": 100},
                         {"round": 2, "t": 20.0, "accuracy_mean": 0.9, "bytes_per_device": 50.0,
                          "bytes_servers": 200}],
                 end_t=20.0, final=0.9)


def test_the_costs_of_each_point():
    g = cost_curve(GOSSIP)
    assert g.scores == (0.5, 0.7, 0.8)
    # received by then: 400 x (0 + 1 x S(p)) / 400 = S(p); share of the radio work (S + R/2) / 600
    assert g.costs["energy_mean"] == pytest.approx((75.0, 225.0, 300.0), rel=1e-12)
    assert g.costs["energy_worst"] == pytest.approx((87.5, 262.5, 350.0), rel=1e-12)
    assert g.costs["device_uplink"] == (50.0, 150.0, 200.0)
    assert g.costs["total_bytes"] == (100.0, 300.0, 400.0)
    assert g.costs["time"] == (1.0, 2.0, 2.5)
    s = cost_curve(SERVER)
    assert s.scores == (0.6, 0.9, 0.9)  # the end: the summary's final accuracy
    # point 1: S = 50, received 200 x 100 / 200 = 100: (50 + 50) / (100 + 100) = half the radio work
    assert s.costs["energy_mean"] == pytest.approx((50.0, 100.0, 100.0), rel=1e-12)
    assert s.costs["energy_worst"] == pytest.approx((55.0, 110.0, 110.0), rel=1e-12)
    assert s.costs["device_uplink"] == (25.0, 50.0, 50.0)
    assert s.costs["total_bytes"] == (150.0, 300.0, 300.0)
    assert s.costs["time"] == (10.0, 20.0, 20.0)


def test_each_reading_at_the_smaller_final_budget():
    r = readings(cost_curve(GOSSIP), cost_curve(SERVER))
    assert list(r) == list(READINGS)
    # mean device: budget min(300, 100) = 100 J; gossip between 75 J (0.5) and 225 J (0.7): 0.5 + 0.2 x 25 / 150
    assert r["energy_mean"].budget == pytest.approx(100.0)
    assert r["energy_mean"].a == pytest.approx(0.5 + 0.2 * 25 / 150, rel=1e-12)
    assert r["energy_mean"].b == 0.9
    # worst device: budget min(350, 110) = 110 J; gossip between 87.5 J and 262.5 J: 0.5 + 0.2 x 22.5 / 175
    assert r["energy_worst"].budget == pytest.approx(110.0)
    assert r["energy_worst"].a == pytest.approx(0.5 + 0.2 * 22.5 / 175, rel=1e-12)
    assert r["energy_worst"].b == 0.9
    # device uplink: min(200, 50) = 50 bytes, gossip's first evaluation exactly
    assert r["device_uplink"] == Reading(50.0, 0.5, 0.9)
    # total bytes, the server's included: min(400, 300) = 300, gossip's second evaluation exactly
    assert r["total_bytes"] == Reading(300.0, 0.7, 0.9)
    # time: min(2.5, 20) = 2.5 s: gossip at its end; the server's first evaluation is at 10 s: no reading
    assert r["time"] == Reading(2.5, 0.8, None)
    assert r["time"].difference is None
    assert r[END] == Reading(None, 0.8, 0.9)
    assert r[END].difference == pytest.approx(-0.1)


def test_the_reading_is_symmetric_in_the_arms():
    g, s = cost_curve(GOSSIP), cost_curve(SERVER)
    for cost in READINGS:
        ab, ba = read(g, s, cost), read(s, g, cost)
        assert (ab.budget, ab.a, ab.b) == (ba.budget, ba.b, ba.a)


def test_at_budget_reads_the_last_point_at_a_budget_and_nothing_outside_the_run():
    c = CostCurve(scores=(0.1, 0.3, 0.4, 0.6), costs={k: (1.0, 2.0, 2.0, 4.0) for k in
                                                       ("energy_mean", "energy_worst", "device_uplink", "total_bytes",
                                                        "time")})
    assert at_budget(c, "time", 2.0) == 0.4  # two evaluations at the same cost: the later one
    assert at_budget(c, "time", 3.0) == pytest.approx(0.5)
    assert at_budget(c, "time", 1.0) == 0.1
    assert at_budget(c, "time", 0.5) is None  # before the first evaluation: never measured
    assert at_budget(c, "time", 4.5) is None  # past the end: never reached


def test_a_curve_must_not_spend_backwards():
    costs = {k: (1.0, 2.0) for k in ("energy_mean", "energy_worst", "device_uplink", "total_bytes")}
    with pytest.raises(ValueError, match="'time' must not decrease"):
        CostCurve(scores=(0.1, 0.2), costs={**costs, "time": (2.0, 1.0)})
    with pytest.raises(ValueError, match="'time' needs one value per point"):
        CostCurve(scores=(0.1, 0.2), costs=costs)


def test_gain_difference_is_the_headroom_gains_difference():
    r = read(cost_curve(GOSSIP), cost_curve(SERVER), END)
    assert gain_difference(r, local=0.4, oracle=0.9) == pytest.approx((0.8 - 0.9) / 0.5)
    assert gain_difference(Reading(2.5, 0.8, None), local=0.4, oracle=0.9) is None
    assert gain_difference(r, local=0.9, oracle=0.9) is None  # no headroom


def test_over_time_reads_the_fleet_over_time_curve():
    churned = {**GOSSIP, "accuracy_over_time": [{"t": 0.5, "accuracy_mean": 0.2, "devices_scored": 1,
                                                 "bytes_per_device": 10.0, "bytes_servers": 0}]}
    c = cost_curve(churned, curve="over_time")
    assert c.scores == (0.2, 0.8)
    assert c.costs["time"] == (0.5, 2.5)
    assert c.costs["total_bytes"] == (20.0, 400.0)
