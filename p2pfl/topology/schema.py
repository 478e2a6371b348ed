"""Validated topology configuration (the ``topology:`` block or a ``topologies/*.yaml`` file).

Each kind of graph takes only the parameters it uses; the model validator
rejects missing and stray parameters with a message that states the rule.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from p2pfl import limits
from p2pfl.validation import Strict

__all__ = [
    "Kind",
    "KIND_PARAMS",
    "RANDOM_KINDS",
    "FILE_KINDS",
    "LinkSpec",
    "EdgeOverride",
    "ServerSpec",
    "TopologySpec",
]

Kind = Literal[
    "ring",
    "line",
    "grid",
    "torus",
    "complete",
    "star",
    "k_regular",
    "erdos_renyi",
    "watts_strogatz",
    "barabasi_albert",
    "random_geometric",
    "edge_list",
    "graphml",
]

#: Parameters (besides ``n``) that each kind needs; every other one must be absent.
KIND_PARAMS: dict[str, tuple[str, ...]] = {
    "ring": (),
    "line": (),
    "grid": ("rows", "cols"),
    "torus": ("rows", "cols"),
    "complete": (),
    "star": (),
    "k_regular": ("k",),
    "erdos_renyi": ("p",),
    "watts_strogatz": ("k", "p"),
    "barabasi_albert": ("m",),
    "random_geometric": ("radius",),
    "edge_list": ("path",),
    "graphml": ("path",),
}

#: Kinds drawn at random: they use the seed and retry ``tries`` times for connectivity.
RANDOM_KINDS = ("k_regular", "erdos_renyi", "watts_strogatz", "barabasi_albert", "random_geometric")

#: Kinds read from a file: ``n`` comes from the file.
FILE_KINDS = ("edge_list", "graphml")

_OPTIONAL_PARAMS = ("rows", "cols", "k", "p", "m", "radius", "path")


class LinkSpec(Strict):
    """Properties of a network link: one-way latency, bandwidth, and loss probability."""

    latency_s: float = Field(default=0.01, ge=0)
    bandwidth_bps: float = Field(default=1e8, gt=0)
    loss: float = Field(default=0.0, ge=0, lt=1)


class EdgeOverride(Strict):
    """Link properties for one edge ``(u, v)``; a field left out keeps the default link's value."""

    u: int
    v: int
    latency_s: float | None = Field(default=None, ge=0)
    bandwidth_bps: float | None = Field(default=None, gt=0)
    loss: float | None = Field(default=None, ge=0, lt=1)


class ServerSpec(Strict):
    """A server node attached to all devices or to a list of device ids.

    ``egress_bps`` / ``ingress_bps`` are the server's own send / receive capacity: transfers run at most
    at the link's bandwidth, floor(capacity / link bandwidth) of them at once (at least one, at the
    capacity's rate when it is below the link's). Left out, the server sends one transfer at a time at
    the link's bandwidth and receives as ``topology.ingress`` says (``p2pfl.sim.network``).
    """

    name: str = Field(default="server", min_length=1)
    attach: Literal["all"] | list[int] = Field(default="all", min_length=1)
    link: LinkSpec = LinkSpec()
    egress_bps: float | None = Field(default=None, gt=0, description="send capacity (bit/s); null: one transfer "
                                                                      "at a time at the link's bandwidth")
    ingress_bps: float | None = Field(default=None, gt=0, description="receive capacity (bit/s); null: as "
                                                                       "topology.ingress")


class TopologySpec(Strict):
    """Which graph to build, its links, and its servers.

    ``seed`` pins the graph of a random kind regardless of the run's seed (so
    per-edge overrides keep naming existing edges); None derives it from the run seed.
    """

    kind: Kind
    n: int | None = Field(default=None, ge=1)
    rows: int | None = Field(default=None, ge=1)
    cols: int | None = Field(default=None, ge=1)
    k: int | None = Field(default=None, ge=0)
    p: float | None = Field(default=None, ge=0, le=1)
    m: int | None = Field(default=None, ge=1)
    radius: float | None = Field(default=None, gt=0)
    path: str | None = Field(default=None, min_length=1)
    tries: int = Field(default=100, ge=1)
    seed: int | None = Field(default=None, ge=0, description="seed of the graph only (default: the run's)")
    allow_disconnected: bool = False
    placement: Literal["scattered", "strips"] = Field(
        default="scattered",
        description="random_geometric: 'strips' numbers the devices by x, so each contiguous block of ids "
                    "(the data partitions' true groups) is a vertical strip of the square; same positions")
    link: LinkSpec = LinkSpec()
    edges: list[EdgeOverride] = Field(default_factory=list)
    servers: list[ServerSpec] = Field(default_factory=list)
    ingress: Literal["parallel", "serialized"] = Field(
        default="parallel",
        description="'parallel': a node receives any number of transfers at once (each capped by its downlink); "
                    "'serialized': one at a time through its downlink, as it sends through its uplink "
                    "(a server's ingress_bps gives it more at once)")

    @field_validator("n", "rows", "cols", "k", "m")
    @classmethod
    def _device_counts(cls, v: int | None, info: ValidationInfo) -> int | None:
        return limits.at_most(v, limits.MAX_DEVICES, "devices (p2pfl.limits.MAX_DEVICES)",
                              f"use a smaller {info.field_name}")

    @field_validator("tries")
    @classmethod
    def _tries(cls, v: int) -> int:
        limits.at_most(v, limits.MAX_TRIES, "tries (p2pfl.limits.MAX_TRIES)",
                       "use fewer tries; if the graph is rarely connected, make it denser or set allow_disconnected: true")
        return v

    def _links_estimate(self, n: int) -> float:
        """Expected number of links of the graph this spec draws (sizes the memory check)."""
        pairs = n * (n - 1) / 2
        k, m = self.k or 0, self.m or 0
        return {
            "complete": pairs,
            "k_regular": n * k / 2,
            "watts_strogatz": n * k / 2,
            "erdos_renyi": pairs * (self.p or 0.0),
            "barabasi_albert": max(n - m, 0) * m,
            "random_geometric": pairs * min(1.0, math.pi * min(self.radius or 0.0, 2.0) ** 2),
        }.get(self.kind, 2.0 * n)

    def _check_size(self) -> None:
        """Refuse graphs that cannot be built on this machine, before anything is allocated."""
        n = self.n_devices
        if n is None:  # file kinds: the file's own size bounds the graph
            return
        if n > limits.MAX_DEVICES:
            raise ValueError(f"rows * cols = {n:,} devices; at most {limits.MAX_DEVICES:,} devices "
                             "(p2pfl.limits.MAX_DEVICES); use fewer rows or cols")
        if self.kind == "erdos_renyi" and n > limits.MAX_PAIRWISE_DEVICES:
            raise ValueError(f"kind 'erdos_renyi' tests every pair of devices: at most {limits.MAX_PAIRWISE_DEVICES:,} "
                             f"devices (p2pfl.limits.MAX_PAIRWISE_DEVICES); got n={n:,}; use a smaller n, "
                             "or kind random_geometric or k_regular for large sparse graphs")
        links = self._links_estimate(n)
        limits.check_fits(n * limits.BYTES_PER_DEVICE + links * limits.BYTES_PER_LINK,
                          f"a {self.kind} topology of {n:,} devices and about {links:,.0f} links would",
                          "use fewer devices (n) or a sparser graph")

    @model_validator(mode="after")
    def _params_match_kind(self) -> TopologySpec:
        needed = KIND_PARAMS[self.kind]
        for name in needed:
            if getattr(self, name) is None:
                raise ValueError(f"kind '{self.kind}' needs '{name}'")
        for name in _OPTIONAL_PARAMS:
            if name not in needed and getattr(self, name) is not None:
                users = ", ".join(f"'{k}'" for k, params in KIND_PARAMS.items() if name in params)
                plural = "kinds" if "," in users else "kind"
                raise ValueError(f"'{name}' is only used by {plural} {users}; remove it for kind '{self.kind}'")
        # Compare with the defaults (not model_fields_set) so a dumped spec with defaults filled reloads.
        unused = [name for name, default in (("tries", 100), ("seed", None)) if getattr(self, name) != default]
        if unused and self.kind not in RANDOM_KINDS:
            raise ValueError(
                f"'{unused[0]}' is only used by random kinds ({', '.join(RANDOM_KINDS)}); "
                f"remove it for kind '{self.kind}'"
            )
        if self.placement != "scattered" and self.kind != "random_geometric":
            raise ValueError(f"'placement' is only used by kind 'random_geometric'; remove it for kind '{self.kind}'")
        if self.kind in FILE_KINDS:
            if self.n is not None:
                raise ValueError(f"kind '{self.kind}' takes 'n' from the file; remove 'n'")
        elif self.kind in ("grid", "torus"):
            if self.n is not None and self.n != self.n_devices:
                raise ValueError(
                    f"kind '{self.kind}' needs n == rows * cols; got n={self.n}, rows={self.rows}, cols={self.cols}"
                )
        elif self.n is None:
            raise ValueError(f"kind '{self.kind}' needs 'n'")
        names = [s.name for s in self.servers]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"server names must be unique; got '{name}' twice")
        self._check_size()
        return self

    @property
    def n_devices(self) -> int | None:
        """Number of devices, or None for file kinds (known only once the file is read)."""
        if self.rows is not None and self.cols is not None:
            return self.rows * self.cols
        return self.n

    def with_base_dir(self, base_dir: str | Path) -> TopologySpec:
        """This spec with a relative ``path`` resolved against ``base_dir`` (the YAML file's folder)."""
        if self.path is None or Path(self.path).is_absolute():
            return self
        return self.model_copy(update={"path": str((Path(base_dir) / self.path).resolve())})
