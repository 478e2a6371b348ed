"""FedAvg as a tensor program (``engine: tensor``; the protocol: ``fedavg.py`` beside this file).

McMahan et al. 2017, Alg. 1, through one server attached to every device: the global model is one row; each
selected device (``select_clients``, the kernel's draw from the server's stream) trains a copy of it, a chunk at
a time (never N rows at once), and the server averages them weighted by samples: ``weighted_average``'s float64
sum (``add_weighted_``), in id order where the kernel adds the uploads in arrival order.
"""

from __future__ import annotations

import numpy as np
import torch

from p2pfl.learning.aggregate import add_weighted_
from p2pfl.maths.messages import message_size
from p2pfl.protocols.server.fedavg import FedAvgParams, select_clients
from p2pfl.tensor.program import Fleet, Round
from p2pfl.tensor.server import ServerRounds
from p2pfl.tensor.train import chunks

__all__ = ["FedAvgRounds"]


class FedAvgRounds(ServerRounds):
    """FedAvg through one server attached to every device (module docstring)."""

    def __init__(self, params: FedAvgParams, fleet: Fleet) -> None:
        super().__init__(params, fleet)
        self.global_row = fleet.first

    def scores(self) -> np.ndarray:
        return self.scores_of(self.global_row.unsqueeze(0), np.zeros(self.fleet.n, dtype=np.int64))

    def round(self, r: int) -> Round:
        f = self.fleet
        chosen = np.asarray(select_clients(tuple(range(f.n)), self.params.client_fraction, self.rng), dtype=np.int64)
        weight = float(f.trainer.data.samples)
        acc = torch.zeros_like(self.global_row, dtype=torch.float64)
        total = weight * len(chosen)
        for part in chunks(len(chosen), f.chunk):
            devices = torch.from_numpy(chosen[part])
            rows = self.global_row.expand(len(devices), -1).clone()
            f.trainer.train(rows, devices)
            add_weighted_(acc, rows, weight / total)  # ``weighted_average``'s sum, in id order
        self.global_row = acc.to(self.global_row.dtype)
        down = message_size("fedavg", "model", f.state_bytes)  # the global model
        up = message_size("fedavg", "update", f.state_bytes)  # a model and its sample count
        end, sent, received = self.exchange(chosen, down, up, f.compute_s()[chosen])
        k = len(chosen)
        return Round(end, sent, received, 2 * k, {"model": k * down, "update": k * up}, chosen)
