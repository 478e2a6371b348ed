"""Device positions over time: random waypoint or a trajectory file.

Random waypoint (Johnson & Maltz 1996; the model of most MANET studies): a moving device picks a
destination uniformly in the unit square (the layout of ``random_geometric``) and a speed uniformly
in ``speed``, travels there in a straight line, pauses ``pause_s``, and repeats. Each device draws
from its own seed stream. Positions are exact functions of time, so the neighbourhood does not
depend on ``update_s`` except through when it is recomputed.

Group (reference point group mobility, Hong et al. 1999): each true group of the data partition
(the world's layout, not something a protocol may read) has a reference point moving by random
waypoint; a member sits at its own fixed offset, drawn uniformly in a disc of ``group_radius``
around it (clipped to the square). The groups start apart at random places and drift through each
other's neighbourhoods.

Trajectory: positions interpolated linearly between a device's waypoints (held before the first
and after the last); devices absent from the file stay where the layout put them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Optional

import networkx as nx
import numpy as np

from p2pfl.errors import ConfigError
from p2pfl.seeding import stream
from p2pfl.sim.dynamics.draws import affected
from p2pfl.sim.dynamics.schema import MobilitySpec
from p2pfl.sim.dynamics.traces import read_trajectory

__all__ = ["Mover", "RandomWaypoint", "GroupMobility", "Trajectory", "build_mover", "MAX_FRAME_BYTES"]

#: Positions kept for the run's ``positions.npz`` artifact; beyond it every other frame is dropped.
MAX_FRAME_BYTES = 32 * 2**20


class Mover(ABC):
    """Positions of every device at time t, plus the frames kept for pictures."""

    def __init__(self, start: np.ndarray) -> None:
        self.start = start
        self.frame_times: list[float] = [0.0]
        self.frames: list[np.ndarray] = [start.astype(np.float32)]
        self._stride = 1
        self._seen = 0

    @abstractmethod
    def positions(self, t: float) -> np.ndarray:
        """(n, 2) positions at time ``t`` (t never decreases between calls)."""

    def keep_frame(self, t: float, pos: np.ndarray) -> None:
        """Keep every ``stride``-th frame; halve the frames when they outgrow ``MAX_FRAME_BYTES``."""
        self._seen += 1
        if self._seen % self._stride:
            return
        self.frame_times.append(t)
        self.frames.append(pos.astype(np.float32))
        if len(self.frames) * pos.size * 4 > MAX_FRAME_BYTES:
            self.frame_times, self.frames = self.frame_times[::2], self.frames[::2]
            self._stride *= 2


class RandomWaypoint(Mover):
    """Random waypoint in the unit square for the devices in ``moving`` (module docstring)."""

    def __init__(self, start: np.ndarray, moving: list[int], speed: tuple[float, float], pause_s: float,
                 seed: int) -> None:
        super().__init__(start)
        self.moving = np.asarray(moving, dtype=np.int64)
        self._lo, self._hi = speed
        self._pause = pause_s
        self._rngs = [stream(seed, "mobility", d) for d in moving]
        k = len(moving)
        self._from = start[self.moving].copy()
        self._to = np.empty((k, 2))
        self._depart = np.zeros(k)
        self._arrive = np.zeros(k)
        for i in range(k):
            self._new_leg(i, 0.0)

    def _new_leg(self, i: int, t: float) -> None:
        rng = self._rngs[i]
        dest = rng.random(2)
        speed = rng.uniform(self._lo, self._hi)
        self._to[i] = dest
        self._depart[i] = t
        self._arrive[i] = t + float(np.hypot(*(dest - self._from[i]))) / speed

    def positions(self, t: float) -> np.ndarray:
        for i in range(len(self.moving)):  # legs (and pauses) that ended before t
            while self._arrive[i] + self._pause <= t:
                self._from[i] = self._to[i]
                self._new_leg(i, self._arrive[i] + self._pause)
        span = np.maximum(self._arrive - self._depart, 1e-300)
        frac = np.clip((t - self._depart) / span, 0.0, 1.0)[:, None]
        pos = self.start.copy()
        pos[self.moving] = self._from + frac * (self._to - self._from)
        return pos


class GroupMobility(Mover):
    """Reference point group mobility (module docstring): members follow their group's waypoint walk."""

    def __init__(self, groups: Sequence[int], speed: tuple[float, float], pause_s: float, radius: float,
                 seed: int) -> None:
        labels = sorted(set(groups))
        self.group_of = np.array([labels.index(g) for g in groups], dtype=np.int64)
        refs = stream(seed, "mobility.groups").random((len(labels), 2))
        offsets = np.empty((len(groups), 2))
        for d in range(len(groups)):  # uniform in the disc: radius * sqrt(u), angle 2 pi v
            u, v = stream(seed, "mobility.offset", d).random(2)
            offsets[d] = radius * np.sqrt(u) * np.array([np.cos(2 * np.pi * v), np.sin(2 * np.pi * v)])
        self.offsets = offsets
        self.refs = RandomWaypoint(refs, list(range(len(labels))), speed, pause_s, seed)
        super().__init__(self._place(refs))

    def _place(self, refs: np.ndarray) -> np.ndarray:
        return np.clip(refs[self.group_of] + self.offsets, 0.0, 1.0)

    def reference(self, t: float) -> np.ndarray:
        """The groups' reference points at time ``t``."""
        return self.refs.positions(t)

    def positions(self, t: float) -> np.ndarray:
        return self._place(self.refs.positions(t))


class Trajectory(Mover):
    """Waypoints from a file, linearly interpolated."""

    def __init__(self, start: np.ndarray, paths: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        super().__init__(start)
        self.paths = paths

    def positions(self, t: float) -> np.ndarray:
        pos = self.start.copy()
        for d, (times, xy) in self.paths.items():
            pos[d, 0] = np.interp(t, times, xy[:, 0])
            pos[d, 1] = np.interp(t, times, xy[:, 1])
        return pos


def layout(graph: nx.Graph) -> Optional[np.ndarray]:
    """The (n, 2) node positions of a geometric topology, or None."""
    if not all("pos" in graph.nodes[v] for v in graph.nodes):
        return None
    return np.array([graph.nodes[v]["pos"] for v in range(graph.number_of_nodes())], dtype=float)


def build_mover(spec: MobilitySpec, graph: nx.Graph, seed: int, n: int,
                groups: Optional[Sequence[int]] = None) -> Mover:
    """The mover for ``spec`` starting from the topology's layout (``group``: from the groups' places;
    ``groups`` are the partition's true clusters, one per device)."""
    if spec.model == "group":
        if groups is None or len(groups) != n:
            raise ConfigError("dynamics.mobility model group needs the data partition's groups (one per device)")
        return GroupMobility(groups, spec.speed, spec.pause_s, spec.group_radius, seed)
    start = layout(graph)
    if start is None:
        raise ConfigError("dynamics.mobility needs a layout: use topology kind random_geometric")
    if spec.model == "trajectory":
        assert spec.trajectory is not None
        return Trajectory(start, read_trajectory(spec.trajectory, n))
    moving = affected(stream(seed, "mobility"), n, spec.fraction)
    return RandomWaypoint(start, moving, spec.speed, spec.pause_s, seed)
