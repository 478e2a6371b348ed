"""The Oracle as a tensor program (``engine: tensor``; the protocol: ``oracle.py`` beside this file).

``mode: federated`` (the Conditional paper's upper reference): each device announces its true cluster once (an
8-byte ``join``), then the server runs FedAvg within every cluster: one row a cluster, all from the common
initial model. Like ``oracle.py``, it reads the true clusters (the one program the fence lets).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from p2pfl.maths.messages import message_size
from p2pfl.protocols.reference.oracle import OracleParams
from p2pfl.protocols.server.fedavg import select_clients
from p2pfl.tensor.program import Fleet, Round, ScenarioView
from p2pfl.tensor.server import ServerRounds

__all__ = ["OracleRounds"]


class OracleRounds(ServerRounds):
    """FedAvg within each true cluster, after every device's join (module docstring)."""

    def __init__(self, params: OracleParams, fleet: Fleet) -> None:
        super().__init__(params, fleet)
        self.labels, self.cluster_of = np.unique(fleet.trainer.data.true_clusters, return_inverse=True)
        self.models = fleet.first.expand(len(self.labels), -1).clone()

    @classmethod
    def unsupported(cls, scenario: ScenarioView) -> Optional[str]:
        if scenario.protocol.mode != "federated":
            return "protocol.mode: the Oracle runs with mode: federated (FedAvg within each true cluster)"
        return super().unsupported(scenario)

    def joins(self) -> Round:
        """Every device's join (its cluster id) to the server, before the first round."""
        n = self.fleet.n
        everyone = np.arange(n)
        size = message_size("oracle", "join", self.fleet.state_bytes)
        end = float((self.uploads(everyone, size, np.zeros(n)) + self.server.link.latency_s).max(initial=0.0))
        sent = np.zeros(n + 1, dtype=np.int64)
        received = np.zeros(n + 1, dtype=np.int64)
        sent[:n] = size
        received[n] = size * n
        return Round(end, sent, received, n, {"join": n * size}, np.zeros(0, dtype=np.int64))

    def round(self, r: int) -> Round:
        f = self.fleet
        chosen = np.asarray(select_clients(tuple(range(f.n)), self.params.client_fraction, self.rng), dtype=np.int64)
        self.train_clusters(self.models, chosen, self.cluster_of[chosen])
        down = message_size("oracle", "model", f.state_bytes)  # the device's cluster's model
        up = message_size("oracle", "update", f.state_bytes)  # a model and its sample count
        end, sent, received = self.exchange(chosen, down, up, f.compute_s()[chosen])
        k = len(chosen)
        step = Round(end, sent, received, 2 * k, {"model": k * down, "update": k * up}, chosen)
        return self.joins().then(step) if r == 1 else step

    def scores(self) -> np.ndarray:
        return self.scores_of(self.models, self.cluster_of)

    def clusters(self) -> list[list[int]]:
        """The true clusters, in label order (what the Oracle knows)."""
        return [np.flatnonzero(self.cluster_of == q).tolist() for q in range(len(self.labels))]
