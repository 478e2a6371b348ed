"""Centralized training (the upper reference): one model trained on the union of all devices' data.

No network: the pooled data are assumed to sit in one data centre, modelled
as device 0, whose FLOP rate is charged for the training (``rounds`` passes of
``training.epochs`` epochs over the pooled set). The single model is scored
on every device's local test set (a measurement, no bytes). 0 bytes by design.
``held_out_per_cluster`` leaves devices out of the pooled set (``pooled.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from p2pfl.protocols.base import Process, Protocol
from p2pfl.protocols.reference.pooled import PooledParams, held_out_devices, pooled_xy

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["Centralized"]


class Centralized(Protocol[PooledParams]):
    """Pooled training of one model on all data, run by device 0 as the data centre."""

    name = "centralized"
    Params = PooledParams
    summary = "reference: one model trained on all devices' pooled data (no network)"
    supports_dynamics = True  # no messages; the data centre (device 0) pauses while offline

    def __init__(self, params: PooledParams, run: RunInfo) -> None:
        super().__init__(params, run)
        self.held_out = held_out_devices(run, params.held_out_per_cluster)

    def progress_total(self) -> int:
        return self.params.rounds

    def device(self, ctx: DeviceContext) -> Process:
        if ctx.id != 0:
            return
        x, y = pooled_xy(ctx.pooled_shards(), [d for d in self.run.device_ids if d not in self.held_out])
        model = ctx.new_model()
        for r in range(1, self.params.rounds + 1):
            yield from ctx.train(model, x=x, y=y)
            if self.should_eval(r):
                for d in self.run.device_ids:
                    ctx.evaluate_device(d, model, r)
            ctx.round_done(r)

    def result(self) -> dict[str, Any]:
        return {"held_out": list(self.held_out)} if self.held_out else {}
