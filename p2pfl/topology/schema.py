"""Validated topology configuration (the ``topology:`` block or a ``topologies/*.yaml`` file).

Each kind of graph takes only the parameters it uses; the model validator
rejects missing and stray parameters with a message that states the rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from p2pfl.config.validation import Strict

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
    """A server node attached to all devices or to a list of device ids."""

    name: str = Field(default="server", min_length=1)
    attach: Literal["all"] | list[int] = Field(default="all", min_length=1)
    link: LinkSpec = LinkSpec()


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
    seed: int | None = None
    allow_disconnected: bool = False
    link: LinkSpec = LinkSpec()
    edges: list[EdgeOverride] = []
    servers: list[ServerSpec] = []

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
