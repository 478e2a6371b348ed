"""The scenario's ``dynamics:`` block: churn, link failures, partitions, mobility and stragglers.

Everything random is drawn from the scenario seed (or ``dynamics.seed``), on the simulated
clock. Example::

    dynamics:
      interrupted_training: resumed      # or lost: the work done so far is wasted
      churn: {fraction: 0.5, offline: 0.3, cycle_s: 200, dist: weibull, shape: 1.5}
      link_failures: {mean_up_s: 600, mean_down_s: 60}
      events:
        - {at: 120, event: off, devices: [3, 5], until: 300}
        - {at: 400, event: partition, half_plane: {point: [0.5, 0.5], normal: [1, 0]}, until: 600}
      mobility: {model: random_waypoint, speed: [0.001, 0.005], pause_s: 20, update_s: 5}
      stragglers: [{fraction: 0.2, multiplier: 0.25, at: 0, until: 500}]
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, model_validator

from p2pfl.validation import Strict

__all__ = ["ChurnSpec", "LinkFailureSpec", "HalfPlane", "EventSpec", "MobilitySpec", "StragglerSpec",
           "DynamicsSpec"]


class _Durations(Strict):
    """Up and down periods: exponential (memoryless) or Weibull (``shape`` < 1 bursty, > 1 regular)."""

    dist: Literal["exponential", "weibull"] = Field("exponential", description="law of up and down periods")
    shape: float = Field(1.5, gt=0, le=100, description="Weibull shape k (weibull only)")
    mean_up_s: Optional[float] = Field(None, gt=0, description="mean time a device/link stays up")
    mean_down_s: Optional[float] = Field(None, gt=0, description="mean time it stays down")
    offline: Optional[float] = Field(None, ge=0, lt=1, description="fraction of time down (with cycle_s); "
                                                                   "0: never (a study's static cell)")
    cycle_s: Optional[float] = Field(None, gt=0, description="mean up + down time (with offline)")

    @model_validator(mode="after")
    def _means(self) -> _Durations:
        by_means = self.mean_up_s is not None or self.mean_down_s is not None
        by_fraction = self.offline is not None or self.cycle_s is not None
        if by_means and by_fraction:
            raise ValueError("give either mean_up_s and mean_down_s, or offline and cycle_s, not both")
        if by_means and (self.mean_up_s is None or self.mean_down_s is None):
            raise ValueError("mean_up_s and mean_down_s go together; give both")
        if by_fraction and (self.offline is None or self.cycle_s is None):
            raise ValueError("offline and cycle_s go together; give both (e.g. offline: 0.3, cycle_s: 200)")
        return self

    @property
    def inert(self) -> bool:
        """``offline: 0``: nothing ever goes down."""
        return self.offline == 0

    def means(self) -> tuple[float, float]:
        """(mean up time, mean down time) in seconds."""
        if self.offline is not None and self.cycle_s is not None:
            return (1.0 - self.offline) * self.cycle_s, self.offline * self.cycle_s
        assert self.mean_up_s is not None and self.mean_down_s is not None
        return self.mean_up_s, self.mean_down_s


class ChurnSpec(_Durations):
    """Devices switching off and on: a renewal process per affected device, or a trace file."""

    fraction: float = Field(1.0, ge=0, le=1, description="share of devices that churn (drawn from the seed)")
    trace: Optional[str] = Field(None, description="CSV file of 'device,t_off,t_on' rows (t_on empty: stays off)")

    @model_validator(mode="after")
    def _kind(self) -> ChurnSpec:
        has_means = self.mean_up_s is not None or self.offline is not None
        if self.trace is not None and has_means:
            raise ValueError("a trace replaces the up/down law; drop mean_up_s/mean_down_s/offline/cycle_s")
        if self.trace is None and not has_means:
            raise ValueError("give offline and cycle_s (e.g. offline: 0.3, cycle_s: 200), "
                             "mean_up_s and mean_down_s, or a trace file")
        return self


class LinkFailureSpec(_Durations):
    """Device-to-device links failing and recovering, each on its own renewal process."""

    fraction: float = Field(1.0, ge=0, le=1, description="share of links that fail (drawn from the seed)")

    @model_validator(mode="after")
    def _given(self) -> LinkFailureSpec:
        if self.mean_up_s is None and self.offline is None:
            raise ValueError("give mean_up_s and mean_down_s, or offline and cycle_s")
        return self


class HalfPlane(Strict):
    """The devices on the side of the line through ``point`` that ``normal`` points to, against the rest."""

    point: tuple[float, float]
    normal: tuple[float, float]

    @model_validator(mode="after")
    def _nonzero(self) -> HalfPlane:
        if self.normal[0] == 0 and self.normal[1] == 0:
            raise ValueError("normal must not be (0, 0); e.g. normal: [1, 0] cuts left from right")
        return self


#: What each scheduled event needs (besides ``at``); ``until`` is allowed for all but on/link_up/heal.
_EVENT_FIELDS: dict[str, str] = {"off": "devices", "on": "devices", "link_down": "links", "link_up": "links",
                                 "partition": "groups or half_plane", "heal": ""}


class EventSpec(Strict):
    """One scheduled change: ``off``/``on`` devices, ``link_down``/``link_up`` links, ``partition``/``heal``."""

    at: float = Field(ge=0, description="simulated time (s)")
    event: Literal["off", "on", "link_down", "link_up", "partition", "heal"]
    devices: Optional[list[int]] = Field(None, min_length=1, description="off/on: device ids")
    links: Optional[list[tuple[int, int]]] = Field(None, min_length=1, description="link_down/link_up: [u, v] pairs")
    groups: Optional[list[list[int]]] = Field(None, min_length=1,
                                              description="partition: node sets (devices in none form one more set)")
    half_plane: Optional[HalfPlane] = Field(None, description="partition: cut the layout by a line")
    until: Optional[float] = Field(None, description="undo the change at this time (off, link_down, partition)")

    @model_validator(mode="after")
    def _fields(self) -> EventSpec:
        ev = self.event
        given = {k for k in ("devices", "links", "groups", "half_plane") if getattr(self, k) is not None}
        need = {"off": {"devices"}, "on": {"devices"}, "link_down": {"links"}, "link_up": {"links"},
                "heal": set()}.get(ev)
        if ev == "partition":
            if len(given) != 1 or not given <= {"groups", "half_plane"}:
                raise ValueError("event partition needs exactly one of groups or half_plane")
        elif given != need:
            wanted = _EVENT_FIELDS[ev] or "no other field"
            raise ValueError(f"event {ev} takes {wanted}; got {sorted(given) or 'none'}")
        if self.until is not None:
            if ev in ("on", "link_up", "heal"):
                raise ValueError(f"event {ev} takes no until (it is already the undo)")
            if not self.until > self.at:
                raise ValueError(f"until must be > at; got at={self.at}, until={self.until}")
        if self.groups is not None:
            seen: set[int] = set()
            for g in self.groups:
                if seen & set(g):
                    raise ValueError(f"partition groups overlap at devices {sorted(seen & set(g))}")
                seen |= set(g)
        return self


class MobilitySpec(Strict):
    """Devices moving in the layout of a ``random_geometric`` topology; the neighbourhood is the radius graph."""

    model: Literal["random_waypoint", "group", "trajectory"] = "random_waypoint"
    fraction: float = Field(1.0, ge=0, le=1, description="random_waypoint: share of devices that move")
    speed: tuple[float, float] = Field((0.001, 0.01), description="random_waypoint, group: [min, max] units/s")
    pause_s: float = Field(0.0, ge=0, description="random_waypoint, group: pause at each waypoint")
    group_radius: float = Field(0.1, gt=0, le=1, description="group: members stay within this distance of "
                                                              "their group's reference point")
    trajectory: Optional[str] = Field(None, description="trajectory: CSV of 't,device,x,y' waypoints")
    update_s: float = Field(1.0, gt=0, description="the radius graph is recomputed every update_s")
    latency_s_per_unit: float = Field(0.0, ge=0, description="extra link latency per unit of distance")

    @model_validator(mode="after")
    def _check(self) -> MobilitySpec:
        lo, hi = self.speed
        if not (0 < lo <= hi) or not math.isfinite(hi):
            raise ValueError(f"speed must be [min, max] with 0 < min <= max; got {list(self.speed)}")
        if self.model == "trajectory" and self.trajectory is None:
            raise ValueError("model trajectory needs trajectory: FILE.csv (rows t,device,x,y)")
        if self.model != "trajectory" and self.trajectory is not None:
            raise ValueError("trajectory is for model: trajectory; drop it or set model: trajectory")
        return self


class StragglerSpec(Strict):
    """A window in which some devices compute at ``multiplier`` times their FLOP rate."""

    devices: Optional[list[int]] = Field(None, min_length=1, description="device ids (or fraction)")
    fraction: Optional[float] = Field(None, gt=0, le=1, description="share of devices drawn from the seed")
    multiplier: float = Field(gt=0, le=1e6, description="FLOP-rate factor (0.25: four times slower)")
    at: float = Field(0.0, ge=0, description="start of the window (s)")
    until: Optional[float] = Field(None, description="end of the window (s); none: to the end")

    @model_validator(mode="after")
    def _check(self) -> StragglerSpec:
        if (self.devices is None) == (self.fraction is None):
            raise ValueError("give exactly one of devices or fraction")
        if self.until is not None and not self.until > self.at:
            raise ValueError(f"until must be > at; got at={self.at}, until={self.until}")
        return self


class DynamicsSpec(Strict):
    """The ``dynamics:`` block (module docstring). Absent: a static fleet."""

    seed: Optional[int] = Field(None, ge=0, description="seed of the dynamics only (default: the scenario's)")
    interrupted_training: Literal["resumed", "lost"] = Field(
        "resumed", description="training cut by going offline: resumed where it stopped, or lost and redone")
    stall_after_s: float = Field(86400.0, gt=0, description="a run with no protocol event for this long "
                                                             "(simulated) has stalled")
    churn: Optional[ChurnSpec] = None
    link_failures: Optional[LinkFailureSpec] = None
    events: list[EventSpec] = Field(default_factory=list)
    mobility: Optional[MobilitySpec] = None
    stragglers: list[StragglerSpec] = Field(default_factory=list)

    def with_base_dir(self, base_dir: str | Path) -> DynamicsSpec:
        """This spec with relative trace and trajectory files resolved against ``base_dir``."""
        out = self
        if self.churn is not None and self.churn.trace is not None and not Path(self.churn.trace).is_absolute():
            out = out.model_copy(update={"churn": self.churn.model_copy(
                update={"trace": str((Path(base_dir) / self.churn.trace).resolve())})})
        mob = self.mobility
        if mob is not None and mob.trajectory is not None and not Path(mob.trajectory).is_absolute():
            out = out.model_copy(update={"mobility": mob.model_copy(
                update={"trajectory": str((Path(base_dir) / mob.trajectory).resolve())})})
        return out
