"""Centralized training (the upper reference): one model trained on the union of all devices' data.

No network: the pooled data are assumed to sit in one data centre, modelled
as device 0, whose FLOP rate is charged for the training (``rounds`` passes of
``training.epochs`` epochs over the pooled set). The single model is scored
on every device's local test set (a measurement, no bytes). 0 bytes by design.
``held_out_per_cluster`` leaves devices out of the pooled set (``pooled.py``).

``checkpoint: best_val_nll`` keeps, of the models after each round, the one with the lowest mean loss
(``model.loss``: a GMM policy's negative log-likelihood) on the data's held-out validation samples
(``Federation.validation_set``: never trained on, never scored), and the last round scores that checkpoint
instead of the last model: on evaluations no choice read (the choice reads no score). Each validation pass is
charged as a job (``validate``: forward FLOPs x validation samples) and logged (``val_nll``, per round); the
chosen round and its loss go to the summary (``checkpoint_round``, ``checkpoint_val_nll``). The training is the
same as with ``checkpoint: last``, bit for bit (the pass draws no random number).
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import Field

from p2pfl.errors import ConfigError
from p2pfl.learning.heldout import heldout_loss
from p2pfl.protocols.base import Process, Protocol
from p2pfl.protocols.reference.pooled import PooledParams, held_out_devices, pooled_xy

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["Centralized", "CentralizedParams", "CHECKPOINT_HELP"]

CHECKPOINT_HELP = ("which model the last round scores: last (the model after the last round), or best_val_nll (of "
                   "the models after each round, the one with the lowest mean loss on the data's held-out "
                   "validation samples, e.g. data.partition.val_demos_per_task; never trained on, never scored)")


class CentralizedParams(PooledParams):
    """Centralized's params: the pooled references' ``held_out_per_cluster`` and the scored ``checkpoint``."""

    checkpoint: Literal["last", "best_val_nll"] = Field("last", description=CHECKPOINT_HELP)


class Centralized(Protocol[CentralizedParams]):
    """Pooled training of one model on all data, run by device 0 as the data centre."""

    name = "centralized"
    Params = CentralizedParams
    summary = "reference: one model trained on all devices' pooled data (no network)"
    supports_dynamics = True  # no messages; the data centre (device 0) pauses while offline

    def __init__(self, params: CentralizedParams, run: RunInfo) -> None:
        super().__init__(params, run)
        self.held_out = held_out_devices(run, params.held_out_per_cluster)
        #: (round, validation loss) of the checkpoint scored last (``checkpoint: best_val_nll``)
        self.chosen: Optional[tuple[int, float]] = None

    def progress_total(self) -> int:
        return self.params.rounds

    def device(self, ctx: DeviceContext) -> Process:
        if ctx.id != 0:
            return
        val = self._validation(ctx)
        x, y = pooled_xy(ctx.pooled_shards(), [d for d in self.run.device_ids if d not in self.held_out])
        model = ctx.new_model()
        best: Optional[tuple[float, int, dict[str, Any]]] = None  # (validation loss, round, state)
        for r in range(1, self.params.rounds + 1):
            yield from ctx.train(model, x=x, y=y)
            if val is not None:
                loss = yield from ctx.work(heldout_loss, model, *val, flops=ctx.forward_flops(model) * int(val[1].shape[0]),
                                           what="validate")
                if loss is None:
                    raise ConfigError("protocol.checkpoint: best_val_nll needs a model with a loss(x, y) method "
                                      "(a policy's NLL); use checkpoint: last")
                ctx.log("val_nll", loss, round=r)
                if math.isfinite(loss) and (best is None or loss < best[0]):  # a tie keeps the earlier round
                    best = (loss, r, {k: v.detach().clone() for k, v in model.state_dict().items()})
            if self.should_eval(r):
                scored = model
                if r == self.params.rounds and best is not None:
                    scored = copy.deepcopy(model)
                    scored.load_state_dict(best[2])
                    self.chosen = (best[1], best[0])
                    ctx.log("checkpoint", best[1], val_nll=best[0])
                for d in self.run.device_ids:
                    ctx.evaluate_device(d, scored, r)
            ctx.round_done(r)

    def _validation(self, ctx: DeviceContext) -> Optional[tuple[Any, Any]]:
        """The validation samples ``checkpoint: best_val_nll`` chooses by (None for ``last``); a one-line error where
        the data hold none."""
        if self.params.checkpoint == "last":
            return None
        val = ctx.pooled_validation()
        if val is None or int(val[1].shape[0]) == 0:
            raise ConfigError("protocol.checkpoint: best_val_nll needs held-out validation samples, and the data hold "
                              "none; set data.partition.val_demos_per_task (demos read from files), or checkpoint: last")
        return val

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"held_out": list(self.held_out)} if self.held_out else {}
        if self.chosen is not None:
            out.update(checkpoint_round=self.chosen[0], checkpoint_val_nll=self.chosen[1])
        return out
