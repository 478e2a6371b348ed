"""FedAvg as a tensor program (``engine: tensor``; the protocol: ``fedavg.py`` beside this file).

McMahan et al. 2017, Alg. 1, through one server attached to every device: the global model is one row; each
selected device (``select_clients``, the kernel's draw from the server's stream) trains a copy of it, a chunk at
a time (never N rows at once), and the server averages them weighted by samples: ``weighted_average``'s float64
sum (``add_weighted_``), in id order where the kernel adds the uploads in arrival order.

Under dynamics (``dynamics.churn`` replayed at round barriers; ``round_timeout_s`` required): the server picks
among the devices online at the round's start (the kernel's live devices, the same draw); a model that reaches
a device offline then is dropped (``offline``) and that device does not train; the others train and upload, and
the server averages the updates that came by ``round_timeout_s`` from the round's start (the rest count in
``updates_missing``). The round ends when every selected device's update came, else at the deadline.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from p2pfl.learning.aggregate import add_weighted_
from p2pfl.maths.messages import message_size
from p2pfl.protocols.server.fedavg import FedAvgParams, select_clients
from p2pfl.tensor.program import Fleet, Round, ScenarioView
from p2pfl.tensor.server import ServerRounds
from p2pfl.tensor.train import chunks

__all__ = ["FedAvgRounds"]


class FedAvgRounds(ServerRounds):
    """FedAvg through one server attached to every device (module docstring)."""

    supports_churn = True

    def __init__(self, params: FedAvgParams, fleet: Fleet) -> None:
        super().__init__(params, fleet)
        self.global_row = fleet.first
        self.updates_missing = 0

    @classmethod
    def unsupported(cls, scenario: ScenarioView) -> Optional[str]:
        if scenario.dynamics is not None and scenario.protocol.round_timeout_s is None:
            return "protocol.round_timeout_s: required under dynamics (a dropped update would be awaited forever)"
        return super().unsupported(scenario)

    def result(self) -> dict[str, Any]:
        return {"updates_missing": self.updates_missing} if self.fleet.dynamic else {}

    def scores(self) -> np.ndarray:
        return self.scores_of(self.global_row.unsqueeze(0), np.zeros(self.fleet.n, dtype=np.int64))

    def round(self, r: int) -> Round:
        f = self.fleet
        if f.dynamic:
            return self._dynamic_round()
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

    def _dynamic_round(self) -> Round:
        """A round under dynamics (module docstring)."""
        f, n = self.fleet, self.fleet.n
        churn = f.churn
        assert churn is not None
        live = tuple(np.flatnonzero(self.online()).tolist())
        chosen = np.asarray(select_clients(live, self.params.client_fraction, self.rng), dtype=np.int64)
        down = message_size("fedavg", "model", f.state_bytes)
        up = message_size("fedavg", "update", f.state_bytes)
        got = self.broadcast(chosen, down)
        reached = churn.states(chosen, self.now + got)  # the device is online when the model arrives
        trained = chosen[reached]
        arrive = self.uploads(trained, up, got[reached] + f.compute_s()[trained]) + self.server.link.latency_s
        in_time = arrive <= self.params.round_timeout_s
        weight = float(f.trainer.data.samples)
        total = weight * int(in_time.sum())
        acc = torch.zeros_like(self.global_row, dtype=torch.float64)
        for part in chunks(len(trained), f.chunk):
            devices = torch.from_numpy(trained[part])
            rows = self.global_row.expand(len(devices), -1).clone()
            f.trainer.train(rows, devices)
            used = torch.from_numpy(in_time[part])
            if bool(used.any()):
                add_weighted_(acc, rows[used], weight / total)  # the updates that came, in id order
        if total > 0:
            self.global_row = acc.to(self.global_row.dtype)
        self.updates_missing += len(chosen) - int(in_time.sum())
        complete = len(trained) == len(chosen) and bool(in_time.all())
        end = float(arrive.max(initial=0.0)) if complete else float(self.params.round_timeout_s)
        sent = np.zeros(n + 1, dtype=np.int64)
        received = np.zeros(n + 1, dtype=np.int64)
        sent[trained] = up
        received[trained] = down
        sent[n] = down * len(chosen)
        received[n] = up * len(trained)
        lost = len(chosen) - len(trained)
        return Round(end, sent, received, len(chosen) + len(trained),
                     {"model": len(chosen) * down, "update": len(trained) * up}, trained,
                     dropped={"offline": lost} if lost else {}, bytes_dropped={"offline": lost * down} if lost else {})
