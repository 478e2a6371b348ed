"""Dynamics: churn statistics and traces, mobility's radius graph, compute interrupted by going
offline, stragglers, DSGD's mixing under link failures, and how runs end."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import simpy

from p2pfl.config import load_dict
from p2pfl.errors import ConfigError
from p2pfl.learning.aggregate import state_to_vector
from p2pfl.learning.state import live_state
from p2pfl.maths.consensus import consensus_distance
from p2pfl.protocols.base import Process, Protocol
from p2pfl.sim.dynamics import DynamicsSpec, Fleet
from p2pfl.sim.dynamics.schedule import start_dynamics
from p2pfl.sim.kernel import Simulation, SimulationStalled
from p2pfl.topology import Link, TopologySpec, build_topology
from tests.helpers import digits_scenario


def fleet_of(topology: dict[str, Any], dynamics: dict[str, Any], seed: int = 0, groups=None):
    """A bare fleet driven by the dynamics only (no protocol), and the events it logged."""
    env = simpy.Environment()
    graph = build_topology(TopologySpec(**topology), seed=seed).graph
    events: list[dict[str, Any]] = []
    fleet = Fleet(env, graph, {}, Link(0.01, 1e8, 0.0), lambda kind, **f: events.append({"t": env.now, "kind": kind, **f}),
                  radius=topology.get("radius") if "mobility" in dynamics else None)
    mover = start_dynamics(env, fleet, DynamicsSpec(**dynamics), seed, graph, groups=groups)
    return env, fleet, mover, events


# --------------------------------------------------------------------------- churn


@pytest.mark.slow
@pytest.mark.parametrize("dist", ["exponential", "weibull"])
def test_churn_availability_matches_the_offline_fraction(dist):
    env, fleet, _, _ = fleet_of({"kind": "ring", "n": 300},
                                {"churn": {"offline": 0.3, "cycle_s": 10.0, "dist": dist, "shape": 2.0}})
    env.run(until=3000.0)
    avail = fleet.availability()
    assert abs(avail.mean() - 0.7) < 0.02
    assert fleet.offline_periods.min() > 100  # every device churned, about 300 cycles each


def test_churn_fraction_picks_that_share_of_devices():
    env, fleet, _, _ = fleet_of({"kind": "ring", "n": 40}, {"churn": {"fraction": 0.25, "offline": 0.5, "cycle_s": 1.0}})
    env.run(until=200.0)
    assert int((fleet.offline_periods > 0).sum()) == 10


def test_trace_replays_exactly(tmp_path):
    trace = tmp_path / "avail.csv"
    trace.write_text("device,t_off,t_on\n2,1.5,4.0\n0,0.0,2.0\n2,5.0,\n")
    env, fleet, _, events = fleet_of({"kind": "ring", "n": 4}, {"churn": {"trace": str(trace)}})
    env.run(until=10.0)
    got = [(e["t"], e["kind"], e["node"]) for e in events]
    assert got == [(0.0, "offline", 0), (1.5, "offline", 2), (2.0, "online", 0), (4.0, "online", 2),
                   (5.0, "offline", 2)]
    assert fleet.availability().tolist() == pytest.approx([0.8, 1.0, 1 - 7.5 / 10, 1.0])


@pytest.mark.parametrize("rows,message", [
    ("0,1.0,0.5\n", "need 0 <= t_off < t_on"),
    ("9,1.0,2.0\n", "device '9' does not exist"),
    ("0,1.0,3.0\n0,2.0,4.0\n", "offline periods overlap"),
    ("0,x,3.0\n", "t_off 'x' is not a number"),
    ("0,1.0\n", "expected 3 columns"),
])
def test_bad_trace_rows_are_one_line_errors(tmp_path, rows, message):
    trace = tmp_path / "avail.csv"
    trace.write_text(rows)
    with pytest.raises(ConfigError, match=message) as err:
        fleet_of({"kind": "ring", "n": 4}, {"churn": {"trace": str(trace)}})
    assert str(trace) in str(err.value) and "\n" not in str(err.value)


# --------------------------------------------------------------------------- links and partitions


def test_scheduled_link_failure_and_partition_change_the_live_neighbourhood():
    env, fleet, _, events = fleet_of({"kind": "ring", "n": 6}, {"events": [
        {"at": 1.0, "event": "link_down", "links": [[0, 1]], "until": 3.0},
        {"at": 2.0, "event": "partition", "groups": [[0, 1, 2]], "until": 4.0}]})
    env.run(until=1.5)
    assert fleet.live_neighbors(0) == (5,) and fleet.live_neighbors(1) == (2,)
    env.run(until=2.5)
    assert fleet.live_neighbors(0) == () and fleet.live_neighbors(3) == (4,) and fleet.live_neighbors(2) == (1,)
    env.run(until=3.5)
    assert fleet.live_neighbors(0) == (1,)
    env.run(until=5.0)
    assert fleet.live_neighbors(0) == (1, 5)
    assert [e["kind"] for e in events] == ["link_down", "partition", "link_up", "heal"]
    assert events[1]["groups"] == [0, 0, 0, 1, 1, 1]


def test_overlapping_failures_hold_a_link_down_until_both_end():
    env, fleet, _, _ = fleet_of({"kind": "ring", "n": 4}, {"events": [
        {"at": 1.0, "event": "link_down", "links": [[0, 1]], "until": 3.0},
        {"at": 2.0, "event": "link_down", "links": [[1, 0]], "until": 4.0}]})
    env.run(until=3.5)
    assert fleet.blocked(0, 1) == "link_down"
    env.run(until=4.5)
    assert fleet.blocked(0, 1) is None


# --------------------------------------------------------------------------- mobility


def test_mobility_live_neighbourhood_is_the_radius_graph_at_every_update():
    topo = {"kind": "random_geometric", "n": 40, "radius": 0.25}
    env, fleet, mover, events = fleet_of(topo, {
        "mobility": {"speed": [0.01, 0.05], "pause_s": 1.0, "update_s": 0.5},
        "churn": {"fraction": 0.5, "offline": 0.2, "cycle_s": 5.0}})
    previous = fleet.pos.copy()
    changes = 0
    for k in range(1, 121):
        env.run(until=k * 0.5 + 1e-9)
        pos = fleet.pos
        assert np.all((pos >= 0) & (pos <= 1))
        assert np.all(np.hypot(*(pos - previous).T) <= 0.05 * 0.5 + 1e-12)  # never faster than the top speed
        dist = np.hypot(pos[:, None, 0] - pos[None, :, 0], pos[:, None, 1] - pos[None, :, 1])
        for i in range(40):
            radius_nbrs = {j for j in range(40) if j != i and dist[i, j] <= 0.25}
            assert set(fleet.adjacency(i)) == radius_nbrs
            assert set(fleet.live_neighbors(i)) == {j for j in radius_nbrs if fleet.online[j]}
        changes += int(np.any(pos != previous))
        previous = pos.copy()
    assert changes == 120
    assert sum(e["kind"] == "link_up" and e["cause"] == "move" for e in events) > 10
    assert len(mover.frames) == 121


def test_group_mobility_keeps_members_near_their_moving_reference_point():
    groups = [k % 3 for k in range(30)]
    env, fleet, mover, _ = fleet_of({"kind": "random_geometric", "n": 30, "radius": 0.2}, {
        "mobility": {"model": "group", "speed": [0.05, 0.05], "group_radius": 0.08, "update_s": 0.5}}, groups=groups)
    last, travelled = mover.reference(0.0), np.zeros(3)
    for k in range(1, 41):
        env.run(until=k * 0.5 + 1e-9)
        ref = mover.reference(env.now)
        travelled += np.hypot(*(ref - last).T)
        last = ref
        near = np.hypot(*(fleet.pos - ref[np.asarray(groups)]).T)
        assert near.max() <= 0.08 + 1e-12  # clipping to the square never moves a member away
        dist = np.hypot(fleet.pos[:, None, 0] - fleet.pos[None, :, 0], fleet.pos[:, None, 1] - fleet.pos[None, :, 1])
        for i in range(30):
            assert set(fleet.live_neighbors(i)) == {j for j in range(30) if j != i and dist[i, j] <= 0.2}
    assert np.all(travelled > 0.8) and np.all(travelled <= 0.05 * 20 + 1e-9)  # 0.05 units/s for 20 s, turns cut
    # members of a group are linked to each other (2 x 0.08 < 0.2): the groups move as connected clusters
    assert all(j in fleet.live_neighbors(i) for i in range(30) for j in range(30) if i != j and groups[i] == groups[j])


def test_mobility_latency_follows_distance():
    topo = {"kind": "random_geometric", "n": 10, "radius": 0.6}
    env = simpy.Environment()
    graph = build_topology(TopologySpec(**topo), seed=0).graph
    fleet = Fleet(env, graph, {}, Link(0.01, 1e8, 0.0), lambda kind, **f: None, radius=0.6, latency_s_per_unit=2.0)
    start_dynamics(env, fleet, DynamicsSpec(mobility={"speed": [0.1, 0.1], "update_s": 1.0}), 0, graph)
    u, v = next(iter(graph.edges))
    d = float(np.hypot(*(fleet.pos[u] - fleet.pos[v])))
    assert fleet.link(u, v).latency_s == pytest.approx(0.01 + 2.0 * d)


# --------------------------------------------------------------------------- compute, stragglers


def _local(dynamics: dict[str, Any]) -> tuple[Simulation, dict[str, Any]]:
    sc = digits_scenario({"name": "local", "rounds": 1}, n=3, dynamics=dynamics, devices={"flops_per_s": 1.0e7})
    sim = Simulation(load_dict(sc))
    return sim, sim.run()


def _round_end(sim: Simulation, node: int) -> float:
    return next(e["t"] for e in sim.recorder.events if e["kind"] == "round" and e["node"] == node)


@pytest.mark.slow
def test_training_cut_by_going_offline_is_resumed_or_lost():
    sim, _ = _local({})
    duration = _round_end(sim, 0)
    off, on = 0.25 * duration, 0.75 * duration
    event = [{"at": off, "event": "off", "devices": [0], "until": on}]
    resumed, _ = _local({"events": event})
    assert _round_end(resumed, 0) == pytest.approx(duration + (on - off))
    assert _round_end(resumed, 1) == pytest.approx(duration)
    lost, summary = _local({"events": event, "interrupted_training": "lost"})
    assert _round_end(lost, 0) == pytest.approx(on + duration)
    wasted = [e for e in lost.recorder.events if e["kind"] == "compute" and e["what"] == "lost:train"]
    flops = next(e["flops"] for e in sim.recorder.events if e["kind"] == "compute" and e["node"] == 0)
    assert len(wasted) == 1 and wasted[0]["flops"] == pytest.approx(0.25 * flops, rel=1e-6)
    assert summary["compute_flops_per_node"][0] == pytest.approx(1.25 * flops, rel=1e-6)
    # the same job's outcome either way: the model trained is the same
    assert resumed.recorder.scores == lost.recorder.scores == sim.recorder.scores


@pytest.mark.slow
def test_stragglers_slow_the_compute_in_their_window():
    sim, _ = _local({})
    duration = _round_end(sim, 0)
    slow, _ = _local({"stragglers": [{"devices": [0], "multiplier": 0.5, "at": 0.0, "until": 0.5 * duration}]})
    # half the window at half speed does a quarter of the work; the rest at full speed
    assert _round_end(slow, 0) == pytest.approx(0.5 * duration + 0.75 * duration)
    assert _round_end(slow, 1) == pytest.approx(duration)


# --------------------------------------------------------------------------- DSGD under link failures


@pytest.mark.slow
def test_dsgd_mixing_preserves_the_mean_and_reaches_consensus_under_link_failures():
    base = digits_scenario({"name": "dsgd", "rounds": 8, "init": "independent", "round_timeout_s": 1.0}, n=8,
                           kind="ring", training={"epochs": 1, "batch_size": 16, "lr": 0.0, "momentum": 0.9},
                           devices={"flops_per_s": 1.0e7})
    probe = Simulation(load_dict(base))
    probe.run()
    t_train = next(e["sim_s"] for e in probe.recorder.events if e["kind"] == "compute")
    # links fail and recover halfway through training phases, when nothing is on them
    events = [{"at": 0.5 * t_train, "event": "link_down", "links": [[0, 1], [4, 5]], "until": 2.5 * t_train},
              {"at": 3.5 * t_train, "event": "link_down", "links": [[2, 3]], "until": 5.5 * t_train}]
    sim = Simulation(load_dict({**base, "dynamics": {"events": events}}))
    initial = [live_state(sim.new_model(i)) for i in range(8)]
    summary = sim.run()
    final = [live_state(sim.protocol.models[i]) for i in range(8)]
    assert summary["dynamics"]["link_down_events"] == 3
    mean0 = sum(state_to_vector(s) for s in initial) / 8
    mean1 = sum(state_to_vector(s) for s in final) / 8
    assert float((mean1 - mean0).abs().max()) < 1e-6
    assert consensus_distance(final) < 0.2 * consensus_distance(initial)
    # the cut links changed the mixing: the models differ from the static run's
    static = [state_to_vector(live_state(probe.protocol.models[i])) for i in range(8)]
    assert any(float((state_to_vector(f) - s).abs().max()) > 1e-4 for f, s in zip(final, static))


# --------------------------------------------------------------------------- how runs end


def test_a_device_gone_for_good_ends_the_run_without_it():
    sc = digits_scenario({"name": "gossip", "rounds": 3, "reply_timeout_s": 0.05}, n=5,
                         dynamics={"events": [{"at": 0.0, "event": "off", "devices": [4]}], "stall_after_s": 30.0})
    sim = Simulation(load_dict(sc))
    summary = sim.run()
    assert summary["dynamics"]["left_fleet"] == [4]
    assert summary["accuracy_per_node"][4] is None
    assert sum(1 for e in sim.recorder.events if e["kind"] == "round") == 3 * 4


class _Waiter(Protocol):
    """Awaits a message nobody sends (a protocol bug the watchdog must catch)."""

    name = "waiter"
    supports_dynamics = True

    def device(self, ctx) -> Process:
        yield ctx.recv("never")


def test_a_protocol_that_waits_forever_under_churn_is_reported_stalled():
    sc = digits_scenario({"name": "gossip", "rounds": 1}, n=3, dynamics={
        "churn": {"offline": 0.2, "cycle_s": 1.0}, "stall_after_s": 50.0})
    with pytest.raises(SimulationStalled, match="no protocol event for 50 simulated seconds"):
        Simulation(load_dict(sc), protocol=_Waiter).run()


@pytest.mark.parametrize("protocol,message", [
    ({"name": "gossip", "rounds": 2}, "field 'protocol.reply_timeout_s': required under dynamics"),
    ({"name": "dsgd", "rounds": 2}, "field 'protocol.round_timeout_s': required under dynamics"),
    ({"name": "fedavg", "rounds": 2}, "field 'protocol.round_timeout_s': required under dynamics"),
])
def test_protocols_need_deadlines_under_dynamics(protocol, message):
    sc = digits_scenario(protocol, n=4, servers=protocol["name"] == "fedavg",
                         dynamics={"churn": {"offline": 0.2, "cycle_s": 1.0}})
    with pytest.raises(ConfigError, match=message):
        Simulation(load_dict(sc))


@pytest.mark.slow
def test_gossip_push_needs_no_deadline_and_static_runs_are_unchanged_by_an_empty_block():
    sc = digits_scenario({"name": "gossip", "rounds": 3, "exchange": "push"}, n=4)
    static = Simulation(load_dict(sc)).run()
    empty = Simulation(load_dict({**sc, "dynamics": {}})).run()
    for key in ("accuracy_per_node", "bytes_total", "messages_total", "sim_time_s"):
        assert static[key] == empty[key]


class _Static(Protocol):
    """A protocol that never declared it copes with dynamics."""

    name = "static_only"

    def device(self, ctx) -> Process:
        yield ctx.sleep(1.0)


def test_a_protocol_without_dynamics_support_is_refused():
    sc = digits_scenario({"name": "gossip", "rounds": 2}, n=4, dynamics={"churn": {"offline": 0.2, "cycle_s": 1.0}})
    with pytest.raises(ConfigError, match="protocol 'static_only' does not run under dynamics"):
        Simulation(load_dict(sc), protocol=_Static)


@pytest.mark.parametrize("dynamics,message", [
    ({"mobility": {"speed": [0.1, 0.2]}}, "dynamics.mobility needs topology kind random_geometric"),
    ({"churn": {"offline": 0.3}}, "offline and cycle_s go together"),
    ({"churn": {"offline": 0.3, "cycle_s": 5, "mean_up_s": 3}}, "not both"),
    ({"churn": {"fraction": 0.5}}, "give offline and cycle_s"),
    ({"events": [{"at": 1, "event": "off"}]}, "event off takes devices"),
    ({"events": [{"at": 2, "event": "off", "devices": [1], "until": 1}]}, "until must be > at"),
    ({"events": [{"at": 1, "event": "partition", "groups": [[0, 1], [1, 2]]}]}, "partition groups overlap"),
    ({"stragglers": [{"multiplier": 0.5}]}, "exactly one of devices or fraction"),
    ({"churn": {"offline": 1.5, "cycle_s": 2}}, "dynamics.churn.offline"),
])
def test_bad_dynamics_blocks_are_one_line_errors(dynamics, message):
    sc = digits_scenario({"name": "gossip", "rounds": 2, "reply_timeout_s": 0.1}, n=4, dynamics=dynamics)
    with pytest.raises(ConfigError, match=message) as err:
        load_dict(sc)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("event,message", [
    ({"at": 1, "event": "off", "devices": [7]}, r"dynamics.events\[0\].devices: device 7 does not exist"),
    ({"at": 1, "event": "link_down", "links": [[0, 2]]}, r"dynamics.events\[0\].links: \(0, 2\) is not a link"),
])
@pytest.mark.slow
def test_events_naming_missing_devices_or_links_are_refused(event, message):
    sc = digits_scenario({"name": "gossip", "rounds": 2, "reply_timeout_s": 0.1}, n=4,
                         dynamics={"events": [event]})
    with pytest.raises(ConfigError, match=message):
        Simulation(load_dict(sc)).run()
