"""The evaluation grid (``evaluation: {every_s: ...}``, p2pfl.sim.grid): every device scored from t = 0 at fixed
simulated times, without changing the training; ``<metric>_over_time`` one point per grid time."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

import pytest
from torch import nn

from p2pfl.config import load_dict
from p2pfl.errors import ConfigError
from p2pfl.metrics.readings import cost_curve
from p2pfl.metrics.recorder import GridTime
from p2pfl.metrics.summary import score_on_grid
from p2pfl.protocols.base import Process, Protocol
from p2pfl.protocols.serverless.gossip import Gossip
from p2pfl.sim.kernel import Simulation, SimulationStalled
from tests.helpers import digits_scenario

CHURN = {"churn": {"offline": 0.3, "cycle_s": 0.05, "dist": "weibull", "shape": 1.5}}


def _run(sc: dict[str, Any], events: Path) -> tuple[dict[str, Any], Simulation, list[dict[str, Any]]]:
    sim = Simulation(load_dict(sc), events_path=events)
    summary = sim.run()
    return summary, sim, [json.loads(line) for line in events.read_text().splitlines()]


@pytest.mark.slow
def test_the_grid_scores_every_device_from_t0_and_changes_no_training(tmp_path: Path) -> None:
    sc = digits_scenario({"name": "gossip", "rounds": 6, "eval_every": 2, "reply_timeout_s": "auto"}, n=8,
                         kind="complete", dynamics=CHURN, executor="inline", save_models="final")
    plain, plain_sim, plain_events = _run(sc, tmp_path / "plain.jsonl")
    every = 0.01
    grid, grid_sim, grid_events = _run({**sc, "evaluation": {"every_s": every}}, tmp_path / "grid.jsonl")
    # the same training: every event but the grid's, every model, every figure but the curve over time
    assert [e for e in grid_events if e["kind"] != "grid_eval"] == plain_events
    assert grid_sim.artifacts()["models.npz"] == plain_sim.artifacts()["models.npz"]
    assert {k: v for k, v in grid.items() if k != "accuracy_over_time"} == \
        {k: v for k, v in plain.items() if k != "accuracy_over_time"}
    # one point per grid time from t = 0 to the end, every device scored by then
    points = grid["accuracy_over_time"]
    assert [p["t"] for p in points] == pytest.approx([k * every for k in range(len(points))], abs=1e-12)
    assert points[-1]["t"] <= grid["sim_time_s"] < points[-1]["t"] + every
    assert all(p["devices_scored"] == 8 for p in points)
    assert points[0]["devices_evaluated"] == 8 and points[0]["bytes_per_device"] == 0.0
    assert cost_curve(grid, "over_time").costs["time"][0] == 0.0  # read from the start
    # at t > 0 the devices online are scored, the others keep their last score: recomputed from the event log
    online, latest = set(range(8)), {}
    by_time: dict[float, list[int]] = {}
    for e in grid_events:
        if e["kind"] in ("offline", "online"):
            (online.discard if e["kind"] == "offline" else online.add)(e["node"])
        elif e["kind"] == "grid_eval":
            if e["t"] > 0 and e["t"] not in by_time:
                assert {x["node"] for x in grid_events if x["kind"] == "grid_eval" and x["t"] == e["t"]} == online
            by_time.setdefault(e["t"], []).append(e["node"])
    assert sum(p["devices_evaluated"] < 8 for p in points) > 0  # churn took some offline at some grid time
    for p in points:
        evaluated = [e for e in grid_events if e["kind"] == "grid_eval" and e["t"] == p["t"]]
        assert p["devices_evaluated"] == len(evaluated)
        latest.update({e["node"]: e["accuracy"] for e in evaluated})
        assert p["accuracy_mean"] == pytest.approx(sum(latest.values()) / 8, abs=1e-12)
    # the protocol's own evaluations still make the round curve and the final scores
    assert grid["accuracy_curve"] == plain["accuracy_curve"] and len(grid_sim.recorder.evaluations) == \
        sum(e["kind"] == "eval" for e in grid_events)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", [
    {"name": "fedavg", "rounds": 3},
    {"name": "ifca", "rounds": 3, "n_clusters": 2},
    {"name": "oracle", "rounds": 3},
    {"name": "rnd", "rounds": 3, "rnd_epochs": 1},
])
def test_a_server_protocols_grid_scores_the_model_its_rounds_score(protocol: dict[str, Any]) -> None:
    # between two rounds' evaluations every device's grid score is its last round's score: the server's model
    # for it (the global model, its cluster's)
    sc = digits_scenario({**protocol, "eval_every": 1}, n=6, kind="complete", servers=True, executor="inline",
                         data={"dataset": "digits", "partition": {"kind": "rotation", "angles": [0, 180]},
                               "samples_per_client": 40}, evaluation={"every_s": 0.01})
    sim = Simulation(load_dict(sc))
    summary = sim.run()
    events = sim.recorder.events
    rounds = [e for e in events if e["kind"] == "eval"]
    first = min(e["t"] for e in rounds)
    compared = 0
    for e in events:
        if e["kind"] != "grid_eval" or e["t"] < first:
            continue
        last = [x for x in rounds if x["node"] == e["node"] and x["t"] <= e["t"]][-1]
        assert e["accuracy"] == last["accuracy"]
        compared += 1
    assert compared >= 6 and len(summary["accuracy_over_time"]) > 3
    at_start = summary["accuracy_over_time"][0]
    assert at_start["t"] == 0.0 and at_start["devices_scored"] == 6


def test_score_on_grid_keeps_an_offline_devices_last_score_and_a_diverged_one_voids_the_mean() -> None:
    def ev(node: int, score: Optional[float]) -> dict[str, Any]:
        return {"t": 0.0, "kind": "grid_eval", "node": node, "accuracy": score}

    grid = [GridTime(0.0, 0, 0, [ev(0, 0.1), ev(1, 0.3)]), GridTime(5.0, 40, 10, [ev(1, 0.5)]),
            GridTime(10.0, 80, 20, []), GridTime(15.0, 90, 20, [ev(0, None)])]
    points = score_on_grid(grid, "accuracy", 2)
    assert points == [
        {"t": 0.0, "accuracy_mean": pytest.approx(0.2), "devices_scored": 2, "devices_evaluated": 2,
         "bytes_per_device": 0.0, "bytes_servers": 0},
        {"t": 5.0, "accuracy_mean": pytest.approx(0.3), "devices_scored": 2, "devices_evaluated": 1,
         "bytes_per_device": 20.0, "bytes_servers": 10},
        {"t": 10.0, "accuracy_mean": pytest.approx(0.3), "devices_scored": 2, "devices_evaluated": 0,
         "bytes_per_device": 40.0, "bytes_servers": 20},
        {"t": 15.0, "accuracy_mean": None, "devices_scored": 2, "devices_evaluated": 1,
         "bytes_per_device": 45.0, "bytes_servers": 20}]
    assert score_on_grid([], "accuracy", 2) == []


class _Variant(Gossip):
    """A gossip variant that did not say which model each device holds: the parent's word is not inherited."""

    name = "gossip_variant"


@pytest.mark.parametrize("change,message", [
    ({"evaluation": {"every_s": 0}}, "evaluation.every_s"),
    ({"evaluation": {"every_s": -1.0}}, "evaluation.every_s"),
    ({"evaluation": {}}, "evaluation.every_s"),
    ({"evaluation": {"every_s": 1.0, "points": 3}}, "evaluation.points"),
    ({"evaluation": {"every_s": 1.0}, "engine": "tensor"},
     "evaluation.every_s needs engine: events (the tensor engine scores at its rounds only)"),
])
def test_bad_grids_are_one_line_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        load_dict({**digits_scenario({"name": "gossip", "rounds": 2}, n=4), **change})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("protocol,cls,name", [
    ({"name": "ditto", "rounds": 2}, None, "ditto"),
    ({"name": "centralized", "rounds": 2}, None, "centralized"),
    ({"name": "gossip", "rounds": 2}, _Variant, "gossip_variant"),
])
def test_a_protocol_that_does_not_say_its_current_models_is_refused(protocol: dict[str, Any], cls: Any,
                                                                   name: str) -> None:
    sc = digits_scenario(protocol, n=4, servers=protocol["name"] == "ditto", evaluation={"every_s": 1.0})
    with pytest.raises(ConfigError, match=f"field 'evaluation.every_s': protocol '{name}' does not say which model "
                                          "each device holds now") as err:
        Simulation(load_dict(sc), protocol=cls)
    assert "\n" not in str(err.value)


class _Waiter(Protocol):
    """Has a model per device, then waits for a message that never comes."""

    name = "waiter"
    supports_dynamics = True
    current_models = True

    def __init__(self, params: Any, run: Any) -> None:
        super().__init__(params, run)
        self.models: dict[int, nn.Module] = {}

    def current_model(self, device: int) -> Optional[nn.Module]:
        return self.models.get(device)

    def device(self, ctx: Any) -> Process:
        self.models[ctx.id] = ctx.new_model()
        yield ctx.recv("never")


@pytest.mark.slow
@pytest.mark.parametrize("dynamics,message", [
    (None, "simulation stalled at t=0"),
    ({"churn": {"offline": 0.2, "cycle_s": 1.0}, "stall_after_s": 50.0}, "no protocol event for 50 simulated seconds"),
])
def test_a_stalled_run_is_still_reported_with_a_grid(dynamics: Optional[dict[str, Any]], message: str) -> None:
    sc = digits_scenario({"name": "gossip", "rounds": 1}, n=3, evaluation={"every_s": 1.0},
                         **({} if dynamics is None else {"dynamics": dynamics}))
    with pytest.raises(SimulationStalled, match=message):
        Simulation(load_dict(sc), protocol=_Waiter).run()
