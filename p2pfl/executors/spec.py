"""The scenario's ``executor:`` block, and how many cores this process may use."""

from __future__ import annotations

import os
from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from p2pfl.validation import Strict

__all__ = ["ExecutorSpec", "available_cores"]


class ExecutorSpec(Strict):
    """``executor: auto | inline | process | ray | batched`` or ``{kind: ..., workers: N, address: ...}``.

    ``auto`` picks ``batched`` for models of linear layers, else ``process`` (every core) when the
    run's modelled training is long enough to repay the workers' start-up, else ``inline``
    (``p2pfl.executors.select``).
    """

    kind: Literal["auto", "inline", "process", "ray", "batched"] = "auto"
    workers: Optional[int] = Field(None, ge=1, le=1024, description="worker processes (process), Ray tasks in flight "
                                   "(ray), or the pool slots for what batched does not stack (batched; 1: none)")
    address: Optional[str] = Field(None, description="Ray cluster address ('auto', 'ray://host:10001'); none: a local Ray")
    defer_uploads: bool = Field(False, description="a device's upload to a server carries its training outcome "
                                "unread until the server takes it, so a round's jobs train together (batched: "
                                "stacked, within its tolerance; other executors: the same bits) (p2pfl.sim.deferred)")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return {"kind": v} if isinstance(v, str) else v

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> ExecutorSpec:
        if self.address is not None and self.kind != "ray":
            raise ValueError(f"'address' is for kind 'ray' only (kind is {self.kind!r}); remove it")
        if self.workers is not None and self.kind == "inline":
            raise ValueError("'workers' is not used by kind 'inline'; remove it or use kind 'process'")
        return self


def available_cores() -> int:
    """Cores this process may use (its CPU affinity). A sweep passes each cell its share explicitly
    (``p2pfl.run(..., cores=)``); this is the default where none is given."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
