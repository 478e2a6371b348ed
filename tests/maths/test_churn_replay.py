"""The kernel's churn replayed over arrays (``p2pfl.maths.churn``): the same switches at the same floats as the
kernel's churn processes (``p2pfl.sim.dynamics.schedule``), the online mask at any time and the state at any
message's arrival equal to the kernel fleet's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import simpy

from p2pfl.config import load_dict
from p2pfl.maths.churn import ChurnReplay
from p2pfl.sim.dynamics import DynamicsSpec, Fleet
from p2pfl.sim.dynamics.draws import dynamics_seed
from p2pfl.sim.dynamics.schedule import start_dynamics
from p2pfl.sim.kernel import Simulation
from p2pfl.topology import Link, TopologySpec, build_topology
from tests.helpers import digits_scenario


def kernel_churn(n: int, dynamics: dict[str, Any], seed: int, until: float) -> list[tuple[float, int, bool]]:
    """The kernel fleet's ``offline``/``online`` events up to ``until``: (t, device, online)."""
    env = simpy.Environment()
    graph = build_topology(TopologySpec(kind="ring", n=n), seed=0).graph
    events: list[tuple[float, int, bool]] = []
    fleet = Fleet(env, graph, {}, Link(0.01, 1e8, 0.0),
                  lambda kind, **f: events.append((env.now, int(f["node"]), kind == "online")))
    start_dynamics(env, fleet, DynamicsSpec(**dynamics), seed, graph)
    env.run(until=until)
    return events


def state_from(events: list[tuple[float, int, bool]], n: int, t: float) -> np.ndarray:
    on = np.ones(n, dtype=bool)
    for at, d, up in events:
        if at <= t:
            on[d] = up
    return on


CHURNS = [
    {"offline": 0.3, "cycle_s": 2.0},
    {"offline": 0.5, "cycle_s": 1.0, "dist": "weibull", "shape": 0.7, "fraction": 0.5},
    {"mean_up_s": 3.0, "mean_down_s": 0.5, "dist": "weibull", "shape": 2.5, "fraction": 0.25},
]


@pytest.mark.parametrize("churn", CHURNS)
def test_the_replay_switches_when_the_kernel_does_bit_for_bit(churn: dict[str, Any]) -> None:
    n, seed, until = 40, 11, 30.0
    kernel = kernel_churn(n, {"churn": churn}, seed, until)
    replay = ChurnReplay(DynamicsSpec(churn=churn).churn, n, seed)
    grid = np.linspace(0.0, until, 301)
    for t in grid:  # the mask at round barriers, any spacing
        assert np.array_equal(replay.online_at(float(t)), state_from(kernel, n, float(t))), t
    assert sorted(replay.log()) == sorted(kernel)  # the same switches, the same float times


@pytest.mark.parametrize("churn", CHURNS[:2])
def test_a_devices_state_at_a_messages_arrival(churn: dict[str, Any]) -> None:
    n, seed = 30, 4
    kernel = kernel_churn(n, {"churn": churn}, seed, 20.0)
    replay = ChurnReplay(DynamicsSpec(churn=churn).churn, n, seed)
    rng = np.random.default_rng(0)
    for start in (0.0, 3.0, 3.5, 9.0):
        replay.online_at(start)
        devices = rng.integers(0, n, 500)
        times = start + rng.random(500) * 4.0
        times[:5] = start  # at the barrier itself
        switch_times = np.array([t for t, _, _ in kernel if t > start])
        times[5:8] = switch_times[:3] if len(switch_times) >= 3 else start  # exactly at a switch: after it
        got = replay.states(devices, times)
        want = np.array([state_from(kernel, n, float(t))[d] for d, t in zip(devices, times)])
        assert np.array_equal(got, want)


def test_a_trace_is_replayed_as_the_kernel_applies_it(tmp_path) -> None:
    trace = tmp_path / "avail.csv"
    trace.write_text("device,t_off,t_on\n2,1.5,4.0\n0,0.0,2.0\n2,4.0,\n3,1.0,1.0000001\n")
    kernel = kernel_churn(5, {"churn": {"trace": str(trace)}}, 0, 10.0)
    replay = ChurnReplay(DynamicsSpec(churn={"trace": str(trace)}).churn, 5, 0)
    for t in [0.0, 1.0, 1.00000005, 1.5, 2.0, 3.9, 4.0, 7.0]:
        assert np.array_equal(replay.online_at(t), state_from(kernel, 5, t)), t
    assert replay.log() == kernel


def test_no_churn_and_offline_zero_keep_everyone_online() -> None:
    for spec in (None, DynamicsSpec(churn={"offline": 0.0, "cycle_s": 2.0}).churn):
        replay = ChurnReplay(spec, 7, 0)
        assert not replay.churns and replay.online_at(1e9).all()
        assert replay.states(np.array([1, 2]), np.array([1e9, 2e9])).all()
    with pytest.raises(ValueError, match="cannot go back"):
        replay.online_at(1.0)


def test_a_kernel_run_goes_offline_where_the_replay_says() -> None:
    """The whole kernel (the scenario's dynamics seed, its fleet): a run's offline/online events are the replay's."""
    sc = load_dict(digits_scenario({"name": "gossip", "rounds": 2, "reply_timeout_s": 0.2}, n=8,
                                   dynamics={"churn": {"offline": 0.4, "cycle_s": 0.05}}))
    sim = Simulation(sc)
    sim.run()
    events = [(e["t"], int(e["node"]), e["kind"] == "online") for e in sim.recorder.events
              if e["kind"] in ("online", "offline")]
    assert len(events) > 10
    assert sc.dynamics is not None
    replay = ChurnReplay(sc.dynamics.churn, 8, dynamics_seed(sc.seed, sc.dynamics.seed))
    replay.online_at(max(t for t, _, _ in events))
    assert sorted(replay.log()) == sorted(events)
