"""Gossip, DSGD and FedAvg as programs over the fleet's rows: a round is a few tensor operations.

Each program trains every device of the round (``RowTrainer``, a chunk at a time), combines the models as
the protocol says, and returns what the round sent and how long it took (``p2pfl.engine.timing``). What a
device learns about another still comes only from a model it was sent: the programs combine rows along
the messages the protocol sends, and count those messages' bytes as the event kernel counts them
(``p2pfl.sim.cost.message_bytes``: the tensor bytes, 8 a scalar, a 64-byte header).

- DSGD (Lian et al. 2017; ``p2pfl.protocols.serverless.dsgd``): train, send to every neighbour, mix with
  Metropolis-Hastings weights. Synchronous by definition, so the same algorithm as the event kernel's; the
  mix accumulates in float64 as ``weighted_sum`` does, a chunk of rows at a time.
- FedAvg (McMahan et al. 2017; ``p2pfl.protocols.server.fedavg``): the global model is one row; each
  selected device trains a copy of it (a chunk at a time, never N rows at once), the server averages
  weighted by samples (float64, as ``weighted_average``).
- Gossip (Boyd et al. 2006; ``p2pfl.protocols.serverless.gossip``, ``mode: sync``, ``push_pull``): each
  device picks a neighbour uniformly at random and the pair exchange models. The event kernel runs the
  exchanges one after another as messages arrive (an exchange that overlaps another averages with a model
  that has already moved); here every exchange of a round is simultaneous. Our rule for that (the paper
  defines pairwise exchanges, one at a time): over the round's exchange graph (i -- j when one picked the
  other), x_i <- x_i + sum_j w_ij (x_j - x_i) with w_ij = 1 / (1 + max(e_i, e_j)), e_i the partners of i
  this round. An exchange that overlaps no other is the pairwise average (w = 1/2); the matrix is
  symmetric and doubly stochastic, so the fleet's mean model is kept exactly (up to rounding) in every
  round, which the kernel's push-pull keeps only when exchanges do not overlap. Peers are drawn from one
  fleet stream (``stream(seed, "engine.peers")``), not the kernel's per-device streams, so the pairs differ
  from the kernel's: runs agree in distribution, not exchange by exchange.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch

from p2pfl.engine.graph import Adjacency
from p2pfl.engine.timing import fifo, tx_s
from p2pfl.engine.train import RowTrainer, chunks
from p2pfl.protocols.server.fedavg import select_clients
from p2pfl.seeding import stream
from p2pfl.topology.build import Link

__all__ = ["Fleet", "Round", "RoundProgram", "GossipRounds", "DSGDRounds", "FedAvgRounds", "PROGRAMS"]


@dataclass
class Fleet:
    """What every program is given: the trainer (rows' data and batch orders), the graph, the devices'
    profiles as arrays, the links, and the model's message size."""

    trainer: RowTrainer
    adjacency: Adjacency
    flops_per_s: np.ndarray
    uplink_bps: np.ndarray
    downlink_bps: np.ndarray
    link: Link
    state_bytes: int  # the model's tensor bytes (a message adds the header and its scalars)
    job_flops: float  # modelled FLOPs of one device's training job
    seed: int
    chunk: int

    @property
    def n(self) -> int:
        return self.adjacency.n

    def compute_s(self) -> np.ndarray:
        """Each device's simulated seconds of one training job."""
        return self.job_flops / self.flops_per_s


@dataclass
class Round:
    """What one round sent (per node: devices, then servers) and how long it took."""

    duration_s: float
    sent: np.ndarray  # bytes sent by each node
    received: np.ndarray
    messages: int
    by_kind: dict[str, int]
    trained: np.ndarray  # devices that ran a training job
    counts: dict[str, int] = field(default_factory=dict)


class RoundProgram(ABC):
    """One protocol as a tensor program: ``round(r)`` runs round r on the fleet's rows."""

    servers: tuple[str, ...] = ()

    def __init__(self, params: Any, fleet: Fleet, rows: Optional[torch.Tensor]) -> None:
        self.params = params
        self.fleet = fleet
        self.rows = rows  # (N, P) for the serverless programs

    @abstractmethod
    def round(self, r: int) -> Round: ...

    @abstractmethod
    def scores(self) -> np.ndarray:
        """Each device's score of its model now."""

    def consensus_distance(self) -> Optional[float]:
        """(1/n) sum_i ||x_i - mean(x)||^2 in float64, or None where there is one model."""
        assert self.rows is not None
        x, n = self.rows, self.fleet.n
        mean = torch.zeros(x.shape[1], dtype=torch.float64)
        for part in chunks(n, self.fleet.chunk):
            mean += x[part].double().sum(dim=0)
        mean /= n
        total = 0.0
        for part in chunks(n, self.fleet.chunk):
            total += float(x[part].double().sub_(mean).pow_(2).sum())
        return total / n

    def train_all(self) -> None:
        assert self.rows is not None
        trainer = self.fleet.trainer
        for part in chunks(self.fleet.n, self.fleet.chunk):
            trainer.train(self.rows[part], torch.arange(part.start, part.stop))

    def _scores_of_rows(self) -> np.ndarray:
        assert self.rows is not None
        out = np.empty(self.fleet.n)
        for part in chunks(self.fleet.n, self.fleet.chunk):
            out[part] = self.fleet.trainer.score(self.rows[part], torch.arange(part.start, part.stop)).numpy()
        return out

    def result(self) -> dict[str, Any]:
        return {}


class GossipRounds(RoundProgram):
    """Sync push-pull gossip with simultaneous exchanges (module docstring)."""

    def __init__(self, params: Any, fleet: Fleet, rows: Optional[torch.Tensor]) -> None:
        super().__init__(params, fleet, rows)
        self.rng = stream(fleet.seed, "engine.peers")
        self.exchanges_without_peer = 0

    def scores(self) -> np.ndarray:
        return self._scores_of_rows()

    def round(self, r: int) -> Round:
        f, adj, n = self.fleet, self.fleet.adjacency, self.fleet.n
        self.train_all()
        deg = adj.degree
        has = deg > 0
        self.exchanges_without_peer += int((~has).sum())
        src = np.flatnonzero(has)
        pick = adj.indptr[src] + np.minimum((self.rng.random(len(src)) * deg[src]).astype(np.int64), deg[src] - 1)
        dst = adj.indices[pick].astype(np.int64)
        self._mix(src, dst)
        size = 64 + f.state_bytes
        # time: each device pushes when its training ends; its replies leave after its push, in arrival order
        c = f.compute_s()
        bw = np.minimum(np.minimum(f.link.bandwidth_bps, f.uplink_bps[src]), f.downlink_bps[dst])
        push_done = c[src] + tx_s(size, bw)
        push_free = np.zeros(n)
        push_free[src] = push_done
        arrive = push_done + f.link.latency_s
        back = np.minimum(np.minimum(f.link.bandwidth_bps, f.uplink_bps[dst]), f.downlink_bps[src])
        reply_done = fifo(np.maximum(arrive, push_free[dst]), tx_s(size, back), dst, n)
        end = float(max((reply_done + f.link.latency_s).max(initial=0.0), c.max(initial=0.0)))
        sent = np.zeros(n + len(self.servers), dtype=np.int64)
        received = np.zeros_like(sent)
        np.add.at(sent, src, size)
        np.add.at(sent, dst, size)
        np.add.at(received, dst, size)
        np.add.at(received, src, size)
        k = len(src)
        return Round(end, sent, received, 2 * k, {"gossip_push": k * size, "gossip_reply": k * size},
                     np.arange(n))

    def _mix(self, src: np.ndarray, dst: np.ndarray) -> None:
        """x_i += sum_j w_ij (x_j - x_i) over the round's exchange graph, all from the round's models."""
        assert self.rows is not None
        n = self.fleet.n
        lo, hi = np.minimum(src, dst), np.maximum(src, dst)
        key = np.unique(lo * n + hi)
        a, b = key // n, key % n
        e = np.bincount(a, minlength=n) + np.bincount(b, minlength=n)
        w = torch.from_numpy(1.0 / (1.0 + np.maximum(e[a], e[b]))).to(self.rows.dtype)
        x = self.rows
        out = x.clone()
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        for part in chunks(len(key), max(1, self.fleet.chunk)):
            d = (x[tb[part]] - x[ta[part]]).mul_(w[part].unsqueeze(1))
            out.index_add_(0, ta[part], d)
            out.index_add_(0, tb[part], d, alpha=-1)
        x.copy_(out)

    def result(self) -> dict[str, Any]:
        return {"exchanges_without_peer": self.exchanges_without_peer}


class DSGDRounds(RoundProgram):
    """D-PSGD with Metropolis-Hastings weights (module docstring)."""

    def __init__(self, params: Any, fleet: Fleet, rows: Optional[torch.Tensor]) -> None:
        super().__init__(params, fleet, rows)
        adj, n = fleet.adjacency, fleet.n
        deg, src = adj.degree, adj.sources
        w = 1.0 / (1.0 + np.maximum(deg[src], deg[adj.indices]))
        w_self = 1.0 - np.bincount(src, weights=w, minlength=n)
        # the mixing matrix W (self weight included) as CSR, each row in id order as ``weighted_sum`` adds it
        at = np.concatenate([src, np.arange(n)])
        cols = np.concatenate([adj.indices.astype(np.int64), np.arange(n)])
        order = np.lexsort((cols, at))
        self.crow = torch.from_numpy(np.r_[0, np.cumsum(deg + 1)])
        self.col = torch.from_numpy(cols[order])
        self.val = torch.from_numpy(np.concatenate([w, w_self])[order])

    def scores(self) -> np.ndarray:
        return self._scores_of_rows()

    def round(self, r: int) -> Round:
        f, adj, n = self.fleet, self.fleet.adjacency, self.fleet.n
        self.train_all()
        self._mix()
        size = 64 + f.state_bytes
        src, dst = adj.sources, adj.indices.astype(np.int64)
        c = f.compute_s()
        tx = tx_s(size, np.minimum(np.minimum(f.link.bandwidth_bps, f.uplink_bps[src]), f.downlink_bps[dst]))
        run = np.cumsum(tx)  # each uplink sends to its neighbours in id order, one after another
        before = np.repeat(np.r_[0.0, run][adj.indptr[:-1]], adj.degree)
        arrive = c[src] + (run - before) + f.link.latency_s
        end = float(max(arrive.max(initial=0.0), c.max(initial=0.0)))
        sent = np.zeros(n, dtype=np.int64)
        np.add.at(sent, src, size)
        received = np.zeros(n, dtype=np.int64)
        np.add.at(received, dst, size)
        return Round(end, sent, received, len(dst), {"dsgd_model": len(dst) * size}, np.arange(n))

    def _mix(self) -> None:
        """x_i <- w_ii x_i + sum_j w_ij x_j in float64 (as ``weighted_sum``), a block of W's rows at a time."""
        assert self.rows is not None
        x, n = self.rows, self.fleet.n
        x64 = x.double()  # a copy: x can take each block's result at once
        for part in chunks(n, self.fleet.chunk):
            a, b = int(self.crow[part.start]), int(self.crow[part.stop])
            with warnings.catch_warnings():  # "sparse CSR support is in beta": the one operation used is mm
                warnings.simplefilter("ignore", UserWarning)
                block = torch.sparse_csr_tensor(self.crow[part.start : part.stop + 1] - a, self.col[a:b],
                                                self.val[a:b], size=(part.stop - part.start, n), check_invariants=False)
                x[part] = torch.sparse.mm(block, x64).to(x.dtype)


class FedAvgRounds(RoundProgram):
    """FedAvg through one server attached to every device (module docstring)."""

    servers = ("server",)

    def __init__(self, params: Any, fleet: Fleet, rows: Optional[torch.Tensor], *, global_row: torch.Tensor,
                 server: Any) -> None:
        super().__init__(params, fleet, None)
        self.global_row = global_row
        self.server = server  # p2pfl.topology.build.ServerNode
        self.servers = (server.name,)
        self.rng = stream(fleet.seed, "node", fleet.n)  # the server's stream in the event kernel

    def scores(self) -> np.ndarray:
        f = self.fleet
        out = np.empty(f.n)
        for part in chunks(f.n, f.chunk):
            rows = self.global_row.expand(part.stop - part.start, -1)
            out[part] = f.trainer.score(rows, torch.arange(part.start, part.stop)).numpy()
        return out

    def consensus_distance(self) -> Optional[float]:
        return None

    def round(self, r: int) -> Round:
        f, n, link = self.fleet, self.fleet.n, self.server.link
        chosen = np.asarray(select_clients(tuple(range(n)), self.params.client_fraction, self.rng), dtype=np.int64)
        weight = float(f.trainer.data.samples)
        acc = torch.zeros_like(self.global_row, dtype=torch.float64)
        total = weight * len(chosen)
        for part in chunks(len(chosen), f.chunk):
            devices = torch.from_numpy(chosen[part])
            rows = self.global_row.expand(len(devices), -1).clone()
            f.trainer.train(rows, devices)
            acc += (rows.double() * (weight / total)).sum(dim=0)
        self.global_row = acc.to(self.global_row.dtype)
        down, up = 64 + f.state_bytes, 64 + f.state_bytes + 8  # the global model; a model and its sample count
        # time: the server sends in id order over its egress slots, each device trains, then uploads
        egress = self.server.egress_bps
        slots = 1 if egress is None else max(1, int(egress // link.bandwidth_bps))
        server_up = np.inf if egress is None else egress
        bw = np.minimum(np.minimum(link.bandwidth_bps, server_up), f.downlink_bps[chosen])
        got = fifo(np.zeros(len(chosen)), tx_s(down, bw), np.arange(len(chosen)) % slots, slots) + link.latency_s
        ready = got + f.compute_s()[chosen]
        server_down = np.inf if self.server.ingress_bps is None else self.server.ingress_bps
        arrive = ready + tx_s(up, np.minimum(np.minimum(link.bandwidth_bps, f.uplink_bps[chosen]), server_down))
        end = float((arrive + link.latency_s).max(initial=0.0))
        sent = np.zeros(n + 1, dtype=np.int64)
        received = np.zeros(n + 1, dtype=np.int64)
        sent[chosen] = up
        received[chosen] = down
        sent[n] = down * len(chosen)
        received[n] = up * len(chosen)
        k = len(chosen)
        return Round(end, sent, received, 2 * k, {"model": k * down, "update": k * up}, chosen)


PROGRAMS: dict[str, type[RoundProgram]] = {"gossip": GossipRounds, "dsgd": DSGDRounds, "fedavg": FedAvgRounds}
