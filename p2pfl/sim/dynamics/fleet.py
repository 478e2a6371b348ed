"""The live fleet: who is online, which links are up, the partition, positions and FLOP-rate factors.

The dynamics processes (``p2pfl.sim.dynamics.schedule``) change it; the network asks it whether a
hop may go through (``blocked``) and contexts read the live neighbourhood from it. Every change is
an event in the run's log (``offline``, ``online``, ``link_down``, ``link_up``, ``partition``,
``heal``, ``move``) and wakes the processes waiting for it (a device coming back online, a compute
that must pause (a SimPy interrupt), a protocol waiting for its neighbourhood to change).

Partitions cut device-to-device links only: a server's links are infrastructure (a cellular or
wired uplink), not part of the neighbourhood mesh. Servers never go offline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional

import networkx as nx
import numpy as np
import simpy

from p2pfl.topology import Link

__all__ = ["Fleet", "Edge", "edge"]

Edge = tuple[int, int]


def edge(u: int, v: int) -> Edge:
    """The undirected key of a link: (smaller id, larger id)."""
    return (u, v) if u < v else (v, u)


class Fleet:
    """Live state on top of the static topology (module docstring).

    ``graph``: the device graph (edges carry ``link``); ``server_links``: (device, server) -> Link;
    ``default_link``: the topology's link, for links that mobility creates; ``record(kind, **fields)``
    writes an event at the current time.
    """

    def __init__(self, env: simpy.Environment, graph: nx.Graph, server_links: dict[Edge, Link], default_link: Link,
                 record: Callable[..., None], *, radius: Optional[float] = None,
                 latency_s_per_unit: float = 0.0) -> None:
        self.env = env
        self.n_devices = n = graph.number_of_nodes()
        self._static = graph
        self._server_links = server_links
        self._default = default_link
        self._record = record
        self.n_events = 0  # events this fleet wrote (the kernel's watchdog tells them from protocol events)
        self.online = np.ones(n, dtype=bool)
        self._offline_since = np.zeros(n)
        self._offline_s = np.zeros(n)
        self.offline_periods = np.zeros(n, dtype=np.int64)
        self.rate_factor = np.ones(n)
        self._down: dict[Edge, int] = {}  # link -> number of causes holding it down (failure, schedule)
        self._gen: dict[Edge, int] = {}  # link -> times it went down (a hop in flight compares)
        self.link_down_events = 0
        self.group: Optional[np.ndarray] = None  # partition label per device
        self._part_gen = 0
        self._partitions: list[Optional[np.ndarray]] = [None]  # by generation
        self.radius = radius
        self._latency_per_unit = latency_s_per_unit
        self.pos: Optional[np.ndarray] = None
        self._degree_area = 0.0  # under mobility: integral over time of the radius graph's mean degree
        self._degree_since = (0.0, 0.0)  # (time, mean degree) of the current radius graph
        self._radius_adj: Optional[list[set[int]]] = None
        self._servers_of: dict[int, list[int]] = {}
        for d, s in server_links:
            self._servers_of.setdefault(d, []).append(s)
            self._servers_of.setdefault(s, []).append(d)
        self._static_adj = {i: tuple(sorted(int(j) for j in graph.neighbors(i))) for i in graph.nodes}
        self._live: dict[int, tuple[int, ...]] = {}
        self._changed: dict[int, simpy.Event] = {}  # node -> fires at the next change of its neighbourhood
        self._back: dict[int, simpy.Event] = {}  # device -> fires when it comes back online
        #: device -> its processes computing now (going offline or a new FLOP rate interrupts them)
        self.computing: dict[int, list[simpy.Process]] = {}

    # ------------------------------------------------------------------ queries

    def is_online(self, node: int) -> bool:
        return node >= self.n_devices or bool(self.online[node])

    def adjacency(self, node: int) -> Iterable[int]:
        """Devices that may be linked to ``node`` now (the static graph, or the radius graph under mobility)."""
        if node >= self.n_devices:
            return self._servers_of.get(node, ())
        if self._radius_adj is not None:
            return sorted(self._radius_adj[node])
        return self._static_adj[node]

    def linked(self, u: int, v: int) -> bool:
        """Is there a link u-v at all right now (up or down)?"""
        if u >= self.n_devices or v >= self.n_devices:
            return edge(u, v) in self._server_links or (v, u) in self._server_links
        if self._radius_adj is not None:
            return v in self._radius_adj[u]
        return self._static.has_edge(u, v)

    def link(self, u: int, v: int) -> Link:
        """The link u-v as it is now (under mobility its latency grows with distance)."""
        if u >= self.n_devices or v >= self.n_devices:
            return self._server_links.get((u, v)) or self._server_links[(v, u)]
        base = self._static.edges[u, v]["link"] if self._static.has_edge(u, v) else self._default
        if self.pos is None or not self._latency_per_unit:
            return base
        d = float(np.hypot(*(self.pos[u] - self.pos[v])))
        return Link(latency_s=base.latency_s + d * self._latency_per_unit, bandwidth_bps=base.bandwidth_bps,
                    loss=base.loss)

    def generation(self, u: int, v: int) -> tuple[int, int]:
        """Changes a hop in flight compares: times the link went down, and partitions set."""
        return self._gen.get(edge(u, v), 0), self._part_gen

    def blocked(self, u: int, v: int, since: Optional[tuple[int, int]] = None) -> Optional[str]:
        """Why a hop u->v cannot go through now (``partition``, ``link_down``, ``offline``), or None.

        ``since``: the ``generation`` when the hop started; a link that went down meanwhile (even if
        it is up again) lost the message.
        """
        cross = u < self.n_devices and v < self.n_devices
        if cross and self.group is not None and self.group[u] != self.group[v]:
            return "partition"
        if since is not None and since[1] != self._part_gen and cross and self._was_cut(u, v, since[1]):
            return "partition"
        key = edge(u, v)
        if not self.linked(u, v) or self._down.get(key, 0) > 0:
            return "link_down"
        if since is not None and since[0] != self._gen.get(key, 0):
            return "link_down"
        if not self.is_online(v):
            return "offline"
        return None

    def _was_cut(self, u: int, v: int, since: int) -> bool:
        """Did a partition set after generation ``since`` separate u and v (even if healed by now)?"""
        return any(g is not None and g[u] != g[v] for g in self._partitions[since + 1:])

    def live_neighbors(self, node: int) -> tuple[int, ...]:
        """Online devices whose link to ``node`` is up and not cut by a partition (sorted)."""
        live = self._live.get(node)
        if live is None:
            live = self._live[node] = tuple(j for j in self.adjacency(node)
                                            if self.is_online(j) and self.blocked(node, j) is None)
        return live

    def live_hops(self, node: int) -> tuple[int, ...]:
        """Where a message at ``node`` can go next: its live neighbours and its servers with the link up."""
        if node >= self.n_devices:
            return self.live_neighbors(node)
        servers = tuple(s for s in self._servers_of.get(node, ()) if self.blocked(node, s) is None)
        return self.live_neighbors(node) + servers if servers else self.live_neighbors(node)

    def neighborhood_change(self, node: int) -> simpy.Event:
        """An event that fires at the next change of ``node``'s live neighbourhood."""
        ev = self._changed.get(node)
        if ev is None:
            ev = self._changed[node] = self.env.event()
        return ev

    def wait_online(self, node: int) -> Iterator[simpy.Event]:
        """Sub-generator: return at once if ``node`` is online, else when it comes back."""
        while not self.is_online(node):
            ev = self._back.get(node)
            if ev is None:
                ev = self._back[node] = self.env.event()
            yield ev

    def availability(self) -> np.ndarray:
        """Fraction of the simulated time each device was online, up to now."""
        now = self.env.now
        off = self._offline_s + np.where(self.online, 0.0, now - self._offline_since)
        return np.ones(self.n_devices) if now <= 0 else 1.0 - off / now

    # ------------------------------------------------------------------ changes

    def _log(self, kind: str, **fields: Any) -> None:
        self.n_events += 1
        self._record(kind, **fields)

    def _touch(self, nodes: Iterable[int]) -> None:
        """Forget cached neighbourhoods of ``nodes`` and wake whoever waits for them to change."""
        for n in nodes:
            self._live.pop(n, None)
            ev = self._changed.pop(n, None)
            if ev is not None:
                ev.succeed()

    def _around(self, node: int) -> list[int]:
        return [node, *self.adjacency(node), *(self._servers_of.get(node, ()) if node < self.n_devices else ())]

    def set_online(self, device: int, on: bool, cause: str) -> None:
        """Switch ``device`` on or off (no-op when already so)."""
        if bool(self.online[device]) == on:
            return
        now = self.env.now
        self.online[device] = on
        if on:
            self._offline_s[device] += now - self._offline_since[device]
            ev = self._back.pop(device, None)
            if ev is not None:
                ev.succeed()
        else:
            self._offline_since[device] = now
            self.offline_periods[device] += 1
            self._interrupt_compute(device)
        self._log("online" if on else "offline", node=device, cause=cause)
        self._touch(self._around(device))

    def _interrupt_compute(self, device: int) -> None:
        for proc in self.computing.get(device, ()):
            proc.interrupt("fleet")

    def set_rate_factor(self, device: int, factor: float) -> None:
        """Set ``device``'s FLOP-rate multiplier (stragglers)."""
        if self.rate_factor[device] != factor:
            self.rate_factor[device] = factor
            self._interrupt_compute(device)

    def link_down(self, u: int, v: int, cause: str) -> None:
        """One more cause holds link u-v down (it goes down on the first)."""
        key = edge(u, v)
        count = self._down.get(key, 0)
        self._down[key] = count + 1
        if count == 0:
            self._gen[key] = self._gen.get(key, 0) + 1
            self.link_down_events += 1
            self._log("link_down", u=key[0], v=key[1], cause=cause)
            self._touch(key)

    def link_up(self, u: int, v: int, cause: str) -> None:
        """One cause releases link u-v (it comes up when none holds it)."""
        key = edge(u, v)
        count = self._down.get(key, 0)
        if count == 0:
            return
        if count == 1:
            del self._down[key]
            self._log("link_up", u=key[0], v=key[1], cause=cause)
            self._touch(key)
        else:
            self._down[key] = count - 1

    def set_partition(self, group: Optional[np.ndarray], cause: str) -> None:
        """Cut the device graph into the groups of ``group`` (a label per device), or heal it (None)."""
        labels = None if group is None else np.asarray(group)
        self.group = labels
        self._part_gen += 1
        self._partitions.append(labels)
        if labels is None:
            self._log("heal", cause=cause)
        else:
            self._log("partition", groups=[int(g) for g in labels], cause=cause)
        self._touch(range(self.n_devices + len({s for d, s in self._server_links})))

    def set_positions(self, pos: np.ndarray, moved: int) -> None:
        """New positions: the live links become the radius graph of ``pos`` (mobility)."""
        from scipy.spatial import cKDTree  # only mobility needs it (0.5 s to import)

        assert self.radius is not None
        self.pos = pos
        pairs = cKDTree(pos).query_pairs(self.radius, output_type="ndarray")
        adj: list[set[int]] = [set() for _ in range(self.n_devices)]
        for a, b in pairs.tolist():
            adj[a].add(b)
            adj[b].add(a)
        old = self._radius_adj
        self._radius_adj = adj
        t0, degree = self._degree_since
        self._degree_area += (self.env.now - t0) * degree
        self._degree_since = (self.env.now, 2.0 * len(pairs) / max(self.n_devices, 1))
        if old is None:
            return
        gone = sorted(edge(a, b) for a in range(self.n_devices) for b in old[a] - adj[a] if a < b)
        new = sorted(edge(a, b) for a in range(self.n_devices) for b in adj[a] - old[a] if a < b)
        for a, b in gone:
            self._gen[(a, b)] = self._gen.get((a, b), 0) + 1  # a hop in flight on it is lost
            self._log("link_down", u=a, v=b, cause="move")
        for a, b in new:
            self._log("link_up", u=a, v=b, cause="move")
        self._log("move", moved=moved, links_up=len(new), links_down=len(gone))
        self._touch({x for e in gone + new for x in e})

    def mean_degree(self) -> float:
        """Under mobility: the radius graph's mean degree averaged over the run so far."""
        t0, degree = self._degree_since
        now = self.env.now
        return degree if now <= 0 else (self._degree_area + (now - t0) * degree) / now
