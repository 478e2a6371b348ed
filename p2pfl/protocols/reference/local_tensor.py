"""Local training as a tensor program (``engine: tensor``; the protocol: ``local.py`` beside this file): every
device trains its own row each round; nothing is sent (the papers' lower bound)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from p2pfl.tensor.program import DeviceRounds, Round

__all__ = ["LocalRounds"]


class LocalRounds(DeviceRounds):
    """Each device trains its own row; no message, no consensus to log."""

    def consensus_distance(self) -> Optional[float]:
        return None

    def round(self, r: int) -> Round:
        n = self.fleet.n
        self.train_all()
        idle = np.zeros(n, dtype=np.int64)
        return Round(float(self.fleet.compute_s().max(initial=0.0)), idle, idle.copy(), 0, {}, np.arange(n))
