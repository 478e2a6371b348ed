"""Programs through one server attached to every device (FedAvg, IFCA, the Oracle): the server's broadcast and
the devices' uploads, timed as the event kernel times them, and the server's sample-weighted averages."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from p2pfl.learning.aggregate import add_weighted_
from p2pfl.seeding import stream
from p2pfl.sim.cost import tx_time_s
from p2pfl.tensor.program import Fleet, RoundProgram, ScenarioView
from p2pfl.tensor.timing import fifo
from p2pfl.tensor.train import chunks
from p2pfl.topology.build import ServerNode

__all__ = ["ServerRounds"]


class ServerRounds(RoundProgram):
    """A server attached to every device: its broadcast and the devices' uploads, timed as the kernel times them."""

    def __init__(self, params: Any, fleet: Fleet) -> None:
        super().__init__(params, fleet)
        assert fleet.server is not None  # ``unsupported`` refuses a scenario without one
        self.server: ServerNode = fleet.server
        self.serialized = fleet.serialized  # ``topology.ingress: serialized``: one upload at a time
        self.servers = (self.server.name,)
        self.rng = stream(fleet.seed, "node", fleet.n)  # the server's stream in the event kernel

    @classmethod
    def unsupported(cls, scenario: ScenarioView) -> Optional[str]:
        servers = scenario.topology.servers
        if len(servers) != 1 or servers[0].attach != "all":
            return f"topology.servers: {scenario.protocol.name} needs one server attached to all devices"
        if servers[0].ingress_bps is not None:
            return ("topology.servers[0].ingress_bps: a server receives in parallel or one upload at a time "
                    "(topology.ingress), not at a capacity")
        return None

    def exchange(self, chosen: np.ndarray, down: int, up: int, compute_s: np.ndarray) -> tuple[float, np.ndarray,
                                                                                                 np.ndarray]:
        """The server sends ``down`` bytes to each of ``chosen`` in id order over its egress slots (each at
        min(link, egress, the device's downlink); slots taken in turn, the kernel's order when the devices'
        downlinks are equal); each device computes for ``compute_s`` and uploads ``up`` bytes (a server
        receives in parallel). The round's end and the bytes each node sent and received."""
        n, link = self.fleet.n, self.server.link
        ready = self.broadcast(chosen, down) + compute_s
        end = float((self.uploads(chosen, up, ready) + link.latency_s).max(initial=0.0))
        sent = np.zeros(n + 1, dtype=np.int64)
        received = np.zeros(n + 1, dtype=np.int64)
        sent[chosen] = up
        received[chosen] = down
        sent[n] = down * len(chosen)
        received[n] = up * len(chosen)
        return end, sent, received

    def broadcast(self, chosen: np.ndarray, down: int) -> np.ndarray:
        """When the server's ``down``-byte message, sent to each of ``chosen`` in id order over its egress slots,
        reaches each (from the round's start; ``exchange``)."""
        f, link = self.fleet, self.server.link
        egress = self.server.egress_bps
        slots = 1 if egress is None else max(1, int(egress // link.bandwidth_bps))
        server_up = np.inf if egress is None else egress
        bw = np.minimum(np.minimum(link.bandwidth_bps, server_up), f.downlink_bps[chosen])
        return fifo(np.zeros(len(chosen)), tx_time_s(down, bw), np.arange(len(chosen)) % slots, slots) + link.latency_s

    def scores_of(self, models: torch.Tensor, model_of: np.ndarray) -> np.ndarray:
        """Each device's score of the server's model ``models[model_of[i]]`` on its test set."""
        f = self.fleet
        out = np.empty(f.n)
        for part in chunks(f.n, f.chunk):
            rows = models[torch.from_numpy(model_of[part])]
            out[part] = f.trainer.score(rows, torch.arange(part.start, part.stop)).numpy()
        return out

    def uploads(self, chosen: np.ndarray, up: int, ready: np.ndarray) -> np.ndarray:
        """When each of ``chosen``'s ``up``-byte uploads, ready at ``ready``, has left its device (parallel
        ingress) or been taken by the server one at a time (serialized)."""
        upload = tx_time_s(up, np.minimum(self.server.link.bandwidth_bps, self.fleet.uplink_bps[chosen]))
        if self.serialized:
            return fifo(ready, upload, np.zeros(len(chosen), dtype=np.int64), 1)
        return ready + upload

    def train_clusters(self, models: torch.Tensor, chosen: np.ndarray, cluster: np.ndarray) -> None:
        """Each of ``chosen`` (ascending) trains a copy of its ``cluster``'s row of ``models``; each row then
        becomes the sample-weighted average of its members' (``weighted_average``'s float64 sum,
        ``add_weighted_``, in id order), a row no one trained stays (in place)."""
        f = self.fleet
        weight = float(f.trainer.data.samples)
        counts = np.bincount(cluster, minlength=models.shape[0])
        acc = torch.zeros((models.shape[0], models.shape[1]), dtype=torch.float64)
        for part in chunks(len(chosen), f.chunk):
            q = cluster[part]
            rows = models[torch.from_numpy(q)].clone()
            f.trainer.train(rows, torch.from_numpy(chosen[part]))
            for c in np.unique(q):
                add_weighted_(acc[c], rows[torch.from_numpy(np.flatnonzero(q == c))], weight / (weight * counts[c]))
        for c in np.flatnonzero(counts):
            models[c] = acc[c].to(models.dtype)
