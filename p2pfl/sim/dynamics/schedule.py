"""The dynamics as SimPy processes acting on the :class:`~p2pfl.sim.dynamics.fleet.Fleet`.

Each random process has its own seed stream (``stream(seed, "churn", device)``, ``"link", u, v``,
``"stragglers", k``, ``"mobility", device``), so adding a device or a link does not reshuffle the
others, and the same scenario and seed replay the same history.

- churn: an alternating renewal process per affected device (exponential or Weibull up and down
  times), started in its stationary state (offline with probability down / (up + down)); or a trace;
- link failures: the same renewal process per affected device-to-device link;
- ``events``: scheduled changes (and their ``until`` undo);
- stragglers: FLOP-rate factors over time windows (overlapping windows multiply);
- mobility: ``p2pfl.sim.dynamics.mobility`` moves the devices and every ``update_s`` the live
  links become the radius graph of the new positions.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Generator, Sequence
from typing import Any, Optional

import networkx as nx
import numpy as np
import simpy

from p2pfl.errors import ConfigError
from p2pfl.seeding import stream
from p2pfl.sim.dynamics.draws import affected, renewal
from p2pfl.sim.dynamics.fleet import Fleet, edge
from p2pfl.sim.dynamics.mobility import Mover, build_mover
from p2pfl.sim.dynamics.schema import DynamicsSpec, EventSpec, HalfPlane, StragglerSpec, _Durations
from p2pfl.sim.dynamics.traces import read_churn_trace

__all__ = ["start_dynamics", "half_plane_groups"]


def _renewal(env: simpy.Environment, rng: np.random.Generator, law: _Durations,
             switch: Callable[[bool], None]) -> Generator[simpy.Event, Any, None]:
    """Up and down periods forever, from the stationary state (``draws.renewal``)."""
    periods = renewal(rng, law)
    up, length = next(periods)
    if not up:
        switch(False)
    while True:
        yield env.timeout(length)
        up, length = next(periods)
        switch(up)


def start_dynamics(env: simpy.Environment, fleet: Fleet, spec: DynamicsSpec, seed: int, graph: nx.Graph,
                   groups: Optional[Sequence[int]] = None) -> Optional[Mover]:
    """Start every process the spec asks for (before the protocol's, so changes at t=0 come first).

    Returns the mover under mobility (its frames of positions become an artifact), else None.
    Raises ConfigError for device ids or links that do not exist.
    """
    n = fleet.n_devices
    mover = build_mover(spec.mobility, graph, seed, n, groups) if spec.mobility is not None else None
    if mover is not None:
        fleet.set_positions(mover.positions(0.0), moved=0)
        assert spec.mobility is not None
        env.process(_move(env, fleet, mover, spec.mobility.update_s))
    churn = spec.churn
    if churn is not None and churn.trace is not None:
        rows = read_churn_trace(churn.trace, n)
        env.process(_timeline(env, [(t, k, functools.partial(fleet.set_online, d, on, "trace"))
                                    for k, (t, d, on) in enumerate(rows)]))
    elif churn is not None and not churn.inert:
        for d in affected(stream(seed, "churn"), n, churn.fraction):
            env.process(_renewal(env, stream(seed, "churn", d), churn,
                                 functools.partial(fleet.set_online, d, cause="churn")))
    if spec.link_failures is not None and not spec.link_failures.inert:
        edges = sorted(edge(u, v) for u, v in graph.edges)
        law = spec.link_failures
        for k in affected(stream(seed, "link"), len(edges), law.fraction):
            u, v = edges[k]
            env.process(_renewal(env, stream(seed, "link", u, v), law, _link_switch(fleet, u, v)))
    actions: list[tuple[float, int, Callable[[], None]]] = []
    for i, ev in enumerate(spec.events):
        actions += _event_actions(i, ev, fleet, graph, mover)
    stragglers = _Stragglers(fleet)
    for k, window in enumerate(spec.stragglers):
        actions += _straggler_actions(k, window, stragglers, seed)
    if actions:
        env.process(_timeline(env, actions))
    return mover


def _link_switch(fleet: Fleet, u: int, v: int) -> Callable[[bool], None]:
    def switch(up: bool) -> None:
        (fleet.link_up if up else fleet.link_down)(u, v, "failure")
    return switch


def _timeline(env: simpy.Environment, actions: list[tuple[float, int, Callable[[], None]]]) -> Generator[simpy.Event, Any, None]:
    """Run ``actions`` at their times (ties in the order given)."""
    for t, _, act in sorted(actions, key=lambda a: (a[0], a[1])):
        if t > env.now:
            yield env.timeout(t - env.now)
        act()


def _move(env: simpy.Environment, fleet: Fleet, mover: Mover, update_s: float) -> Generator[simpy.Event, Any, None]:
    last = mover.positions(0.0)
    while True:
        yield env.timeout(update_s)
        pos = mover.positions(env.now)
        moved = int(np.any(pos != last, axis=1).sum())
        fleet.set_positions(pos, moved)
        mover.keep_frame(env.now, pos)
        last = pos


def _check_devices(devices: list[int], n: int, field: str) -> None:
    for d in devices:
        if not 0 <= d < n:
            raise ConfigError(f"{field}: device {d} does not exist; device ids are 0..{n - 1}")


def _each(fn: Callable[..., None], items: list, *args: object) -> Callable[[], None]:
    """An action calling ``fn(item, *args)`` for every item (a tuple item is unpacked)."""
    def act() -> None:
        for item in items:
            fn(*(item if isinstance(item, tuple) else (item,)), *args)
    return act


def _event_actions(i: int, ev: EventSpec, fleet: Fleet, graph: nx.Graph, mover: Optional[Mover]) -> list[tuple[float, int, Callable[[], None]]]:
    """(time, order, action) for scheduled event ``i`` and its ``until`` undo."""
    n = fleet.n_devices
    field = f"dynamics.events[{i}]"
    order = 2 * i
    out: list[tuple[float, int, Callable[[], None]]] = []
    if ev.devices is not None:
        _check_devices(ev.devices, n, f"{field}.devices")
        out.append((ev.at, order, _each(fleet.set_online, list(ev.devices), ev.event == "on", "event")))
        if ev.until is not None:
            out.append((ev.until, order + 1, _each(fleet.set_online, list(ev.devices), True, "event")))
    elif ev.links is not None:
        for u, v in ev.links:
            if u == v or not (graph.has_edge(u, v) or fleet.linked(u, v)):
                raise ConfigError(f"{field}.links: ({u}, {v}) is not a link of the topology; name existing links")
        links = [tuple(link) for link in ev.links]
        out.append((ev.at, order, _each(fleet.link_down if ev.event == "link_down" else fleet.link_up, links,
                                        "event")))
        if ev.until is not None:
            out.append((ev.until, order + 1, _each(fleet.link_up, links, "event")))
    elif ev.event == "partition":
        if ev.groups is not None:
            for g in ev.groups:
                _check_devices(g, n, f"{field}.groups")
            labels = np.full(n, len(ev.groups), dtype=np.int64)
            for k, g in enumerate(ev.groups):
                labels[list(g)] = k
            out.append((ev.at, order, lambda: fleet.set_partition(labels, "event")))
        else:
            plane = ev.half_plane
            assert plane is not None
            if mover is None and not all("pos" in graph.nodes[v] for v in graph.nodes):
                raise ConfigError(f"{field}.half_plane: the topology has no layout (node positions); "
                                  "use kind random_geometric or give groups")
            static = np.array([graph.nodes[v].get("pos", (0.0, 0.0)) for v in range(n)], dtype=float)
            out.append((ev.at, order, lambda: fleet.set_partition(
                half_plane_groups(fleet.pos if fleet.pos is not None else static, plane), "event")))
        if ev.until is not None:
            out.append((ev.until, order + 1, lambda: fleet.set_partition(None, "event")))
    else:  # heal
        out.append((ev.at, order, lambda: fleet.set_partition(None, "event")))
    return out


def half_plane_groups(pos: np.ndarray, plane: HalfPlane) -> np.ndarray:
    """1 for devices on the side ``normal`` points to (strictly), 0 for the others."""
    side = (pos - np.asarray(plane.point)) @ np.asarray(plane.normal)
    return (side > 0).astype(np.int64)


class _Stragglers:
    """Active FLOP-rate windows per device; the factor is their product (recomputed, so it returns to 1 exactly)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.active: dict[int, list[float]] = {}

    def add(self, devices: list[int], m: float) -> Callable[[], None]:
        def act() -> None:
            for d in devices:
                self.active.setdefault(d, []).append(m)
                self.fleet.set_rate_factor(d, math.prod(self.active[d]))
        return act

    def remove(self, devices: list[int], m: float) -> Callable[[], None]:
        def act() -> None:
            for d in devices:
                self.active[d].remove(m)
                self.fleet.set_rate_factor(d, math.prod(self.active[d]))
        return act


def _straggler_actions(k: int, window: StragglerSpec, stragglers: _Stragglers,
                       seed: int) -> list[tuple[float, int, Callable[[], None]]]:
    """Start (and end) straggler window ``k``."""
    n = stragglers.fleet.n_devices
    if window.devices is not None:
        _check_devices(window.devices, n, f"dynamics.stragglers[{k}].devices")
        devices = sorted(set(window.devices))
    else:
        devices = affected(stream(seed, "stragglers", k), n, window.fraction or 0.0)
    order = 1_000_000 + 2 * k  # after the scheduled events at the same time
    out = [(window.at, order, stragglers.add(devices, window.multiplier))]
    if window.until is not None:
        out.append((window.until, order + 1, stragglers.remove(devices, window.multiplier)))
    return out
