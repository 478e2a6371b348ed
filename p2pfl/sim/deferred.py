"""A trained state that is read only when its receiver takes it: a server round's jobs then train together.

A server's round is staggered: its uplink sends the model to one device after another, so each device's
job starts a little after the previous one and is usually over before the next begins. Read at the end of
its compute time, each job trains alone (the batched executor stacks only jobs pending together: in the
headline fleet at N = 10^4, none of a FedAvg round's). Yet nobody reads a device's trained model before the server averages
the uploads. :class:`DeferredState` is what such an upload carries instead of the model's state: its
size is known (the bytes on the wire are the same), and its values are the job's outcome, fetched when the
server first reads an upload, by which time every device of the round has submitted its job. The device's
generator takes the job's state then, or before this device's next job, whichever is first
(``DeviceContext.deferred_train``). Opt in with ``executor: {defer_uploads: true}``: the values are the
same as reading each outcome at once under every executor but ``batched``, where the stacked jobs train
within its stated tolerance of alone (``p2pfl.executors.batched``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Optional

import torch

from p2pfl.executors.base import Future
from p2pfl.executors.jobs import TrainOutcome
from p2pfl.learning.flat import FlatState, Layout

__all__ = ["DeferredState", "settle"]


class DeferredState:
    """A training job's outcome state, fetched on first ``value()``; ``nbytes`` its size on the wire."""

    __slots__ = ("_future", "_layout", "_on_fetch", "_value", "nbytes")

    def __init__(self, future: Future[TrainOutcome], layout: Optional[Layout], nbytes: int,
                 on_fetch: Callable[[DeferredState, TrainOutcome], None]) -> None:
        self._future: Optional[Future[TrainOutcome]] = future
        self._layout = layout
        self._on_fetch: Optional[Callable[[DeferredState, TrainOutcome], None]] = on_fetch
        self._value: Optional[Mapping[str, torch.Tensor]] = None
        self.nbytes = nbytes

    def value(self) -> Mapping[str, torch.Tensor]:
        """The trained state: a FlatState in the model's layout (a plain state dict for a model that is not flat)."""
        if self._value is None:
            assert self._future is not None
            outcome, self._future = self._future.result(), None  # the outcome is not kept: only its state
            state = outcome.state
            self._value = state if self._layout is None else FlatState(self._layout.pack(state), self._layout)
            if self._on_fetch is not None:
                on_fetch, self._on_fetch = self._on_fetch, None
                on_fetch(self, outcome)
        return self._value

    def __repr__(self) -> str:
        return f"DeferredState({self.nbytes} bytes, {'read' if self._value is not None else 'not read yet'})"


def settle(payload: Any) -> Any:
    """``payload`` with each :class:`DeferredState` among its values (a dict's) read."""
    if isinstance(payload, dict):
        for key, value in payload.items():
            if isinstance(value, DeferredState):
                payload[key] = value.value()
    return payload
