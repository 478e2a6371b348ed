"""The evaluation grid (``evaluation: {every_s: ...}``): every device scored at fixed simulated times.

A protocol evaluates at its rounds (``protocol.eval_every``), and a round's fleet-wide evaluation is complete when
its slowest device gets there: under churn or mobility that can come after most of the run's traffic, so a curve
read at equal bytes or time has nothing to read early on. With a grid every ``every_s`` simulated seconds, from
t = 0 (before any training), the kernel scores each device's current model as the protocol says it is now
(``Protocol.current_model``: the model the device's own evaluations score), on the device's local test set, as a
measurement (no bytes, no simulated time, no FLOPs: as the protocol's evaluations are charged). At t = 0 every
device is scored; later an offline device is not (it cannot be reached, and its model cannot have moved for its
own part): it keeps its last grid score. The summary's ``<metric>_over_time`` is then one point per grid time,
the mean of every device's latest grid score (``p2pfl.metrics.summary.score_on_grid``).

The grid changes no training: its evaluations draw no random number, send nothing and take no simulated time,
so the same scenario and seed give the same models, bytes and events as without it, plus the ``grid_eval``
events (tested). The protocol's own evaluations still give the final scores and ``<metric>_curve``.
"""

from __future__ import annotations

from pydantic import Field

from p2pfl.validation import Strict

__all__ = ["EvaluationSpec"]


class EvaluationSpec(Strict):
    """``evaluation:``: scoring besides the protocol's rounds."""

    every_s: float = Field(gt=0, description="score every device's current model every this many simulated "
                                             "seconds from t = 0 (an offline device keeps its last score); "
                                             "<metric>_over_time is then one point per grid time")
