"""Gossip, DSGD, FedAvg, IFCA, the Oracle and Local as programs over the fleet's rows: a round is a few tensor operations.

Each program trains every device of the round (``RowTrainer``, a chunk at a time), combines the models as
the protocol says, and returns what the round sent and how long it took (``p2pfl.engine.timing``). What a
device learns about another still comes only from a model it was sent: the programs combine rows along
the messages the protocol sends, and count those messages' bytes as each protocol declares them
(``p2pfl.maths.messages``: the sizes the event kernel measures of its payloads). The round maths (mixing
weights, consensus distance, cluster choice, transfer times) is the kernel's own (``p2pfl.maths``).

- DSGD (Lian et al. 2017; ``p2pfl.protocols.serverless.dsgd``): train, send to every neighbour, mix with
  Metropolis-Hastings weights. Synchronous by definition, so the same algorithm as the event kernel's; the
  mix accumulates in float64 as ``weighted_sum`` does, a chunk of rows at a time.
- FedAvg (McMahan et al. 2017; ``p2pfl.protocols.server.fedavg``): the global model is one row; each
  selected device trains a copy of it (a chunk at a time, never N rows at once), the server averages
  weighted by samples (float64, as ``weighted_average``).
- IFCA (Ghosh et al. 2020, Alg. 2; ``p2pfl.protocols.server.ifca``): K cluster models as K rows; the E-step
  scores them on every device's training data a chunk at a time (:class:`IFCARounds`).
- Gossip (Boyd et al. 2006; ``p2pfl.protocols.serverless.gossip``, ``mode: sync``, ``push_pull``): each
  device trains, then picks a neighbour uniformly at random, and the round's exchanges run one after
  another in a random order, each moving both ends halfway to the other's current model: Boyd et al.'s
  randomized gossip with N ticks a round. The event kernel runs the exchanges in the order its messages
  arrive, and an exchange that overlaps another averages with a model sent before that one moved (a
  push-pull reply); here each is atomic, so the fleet's mean model is kept in every round (up to
  rounding). Peers and order come from one fleet stream (``stream(seed, "engine.peers")``), not the
  kernel's per-device streams, so runs agree in distribution, not exchange by exchange
  (``scenarios/studies/engine_check.yaml``).
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from p2pfl.engine.graph import Adjacency
from p2pfl.engine.timing import fifo
from p2pfl.engine.train import RowTrainer, chunks
from p2pfl.maths.clusters import choose_clusters, clusters_from_assignment
from p2pfl.maths.consensus import consensus_distance
from p2pfl.maths.messages import message_size
from p2pfl.maths.mixing import metropolis_edge_weights, metropolis_self_weights
from p2pfl.protocols.server.fedavg import select_clients
from p2pfl.seeding import stream
from p2pfl.sim.cost import tx_time_s
from p2pfl.topology.build import Link

__all__ = ["Fleet", "Round", "RoundProgram", "GossipRounds", "DSGDRounds", "LocalRounds", "ServerRounds", "FedAvgRounds", "IFCARounds", "OracleRounds",
           "PROGRAMS"]


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
    forward_flops: float  # modelled FLOPs of one forward pass of one sample
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
    flops: Optional[np.ndarray] = None  # modelled FLOPs each device computed besides its training job

    def then(self, nxt: Round) -> Round:
        """This round's traffic and time followed by ``nxt``'s (the trained devices and FLOPs: both)."""
        kinds = dict(self.by_kind)
        for k, b in nxt.by_kind.items():
            kinds[k] = kinds.get(k, 0) + b
        flops = self.flops if nxt.flops is None else nxt.flops if self.flops is None else self.flops + nxt.flops
        return Round(self.duration_s + nxt.duration_s, self.sent + nxt.sent, self.received + nxt.received,
                     self.messages + nxt.messages, kinds, np.concatenate([self.trained, nxt.trained]), flops)


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
        """(1/n) sum_i ||x_i - mean(x)||^2 of the rows (the kernel's gossip's), or None where there is one model."""
        assert self.rows is not None
        return consensus_distance(self.rows)

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

    def clusters(self) -> Optional[list[list[int]]]:
        """The federations the protocol found (None: it does not cluster)."""
        return None


class GossipRounds(RoundProgram):
    """Sync push-pull gossip, the round's exchanges one after another (module docstring)."""

    def __init__(self, params: Any, fleet: Fleet, rows: Optional[torch.Tensor]) -> None:
        super().__init__(params, fleet, rows)
        self.rng = stream(fleet.seed, "engine.peers")

    def scores(self) -> np.ndarray:
        return self._scores_of_rows()

    def round(self, r: int) -> Round:
        f, adj, n = self.fleet, self.fleet.adjacency, self.fleet.n
        self.train_all()
        deg = adj.degree
        src = np.flatnonzero(deg > 0)
        pick = adj.indptr[src] + np.minimum((self.rng.random(len(src)) * deg[src]).astype(np.int64), deg[src] - 1)
        dst = adj.indices[pick].astype(np.int64)
        self._mix(src, dst)
        size = message_size("gossip", "gossip_push", f.state_bytes)  # a reply is as big
        # time: each device pushes when its training ends; its replies leave after its push, in arrival order
        c = f.compute_s()
        bw = np.minimum(np.minimum(f.link.bandwidth_bps, f.uplink_bps[src]), f.downlink_bps[dst])
        push_done = c[src] + tx_time_s(size, bw)
        push_free = np.zeros(n)
        push_free[src] = push_done
        arrive = push_done + f.link.latency_s
        back = np.minimum(np.minimum(f.link.bandwidth_bps, f.uplink_bps[dst]), f.downlink_bps[src])
        reply_done = fifo(np.maximum(arrive, push_free[dst]), tx_time_s(size, back), dst, n)
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
        """The round's exchanges one after another in a random order (Boyd et al.'s ticks): each moves both
        ends halfway to the other's current model, as ``add_delta_(x, sub(y, x), 0.5)`` does. Run in layers:
        an exchange goes once every earlier one sharing an end has gone, so a layer's pairs are disjoint and
        the result is the sequential one's, bit for bit (tested)."""
        assert self.rows is not None
        x, n = self.rows, self.fleet.n
        order = self.rng.permutation(len(src))
        a, b = src[order], dst[order]
        left = np.arange(len(a))
        while len(left):
            first = np.full(n, len(a), dtype=np.int64)  # each node's earliest exchange still to go
            np.minimum.at(first, a[left], left)
            np.minimum.at(first, b[left], left)
            now = (first[a[left]] == left) & (first[b[left]] == left)
            layer = left[now]
            left = left[~now]
            for part in chunks(len(layer), self.fleet.chunk):
                ia, ib = torch.from_numpy(a[layer[part]]), torch.from_numpy(b[layer[part]])
                xa, xb = x[ia], x[ib]
                x[ia] = xa + (xb - xa) * 0.5
                x[ib] = xb + (xa - xb) * 0.5


class DSGDRounds(RoundProgram):
    """D-PSGD with Metropolis-Hastings weights (module docstring)."""

    def __init__(self, params: Any, fleet: Fleet, rows: Optional[torch.Tensor]) -> None:
        super().__init__(params, fleet, rows)
        adj, n = fleet.adjacency, fleet.n
        deg, src = adj.degree, adj.sources
        w = metropolis_edge_weights(deg[src], deg[adj.indices])
        w_self = metropolis_self_weights(src, w, n)
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
        size = message_size("dsgd", "dsgd_model", f.state_bytes)
        src, dst = adj.sources, adj.indices.astype(np.int64)
        c = f.compute_s()
        tx = tx_time_s(size, np.minimum(np.minimum(f.link.bandwidth_bps, f.uplink_bps[src]), f.downlink_bps[dst]))
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


class LocalRounds(RoundProgram):
    """Local training only (``p2pfl.protocols.reference.local``, the papers' lower bound): every device
    trains its own row each round; nothing is sent."""

    def scores(self) -> np.ndarray:
        return self._scores_of_rows()

    def consensus_distance(self) -> Optional[float]:
        return None

    def round(self, r: int) -> Round:
        n = self.fleet.n
        self.train_all()
        idle = np.zeros(n, dtype=np.int64)
        return Round(float(self.fleet.compute_s().max(initial=0.0)), idle, idle.copy(), 0, {}, np.arange(n))


class ServerRounds(RoundProgram):
    """A server attached to every device: its broadcast and the devices' uploads, timed as the kernel times them."""

    def __init__(self, params: Any, fleet: Fleet, rows: Optional[torch.Tensor], *, server: Any,
                 serialized: bool = False) -> None:
        super().__init__(params, fleet, None)
        self.server = server  # p2pfl.topology.build.ServerNode
        self.serialized = serialized  # ``topology.ingress: serialized``: the server receives one upload at a time
        self.servers = (server.name,)
        self.rng = stream(fleet.seed, "node", fleet.n)  # the server's stream in the event kernel

    def consensus_distance(self) -> Optional[float]:
        return None

    def exchange(self, chosen: np.ndarray, down: int, up: int, compute_s: np.ndarray) -> tuple[float, np.ndarray,
                                                                                                 np.ndarray]:
        """The server sends ``down`` bytes to each of ``chosen`` in id order over its egress slots (each at
        min(link, egress, the device's downlink); slots taken in turn, the kernel's order when the devices'
        downlinks are equal); each device computes for ``compute_s`` and uploads ``up`` bytes (a server
        receives in parallel). The round's end and the bytes each node sent and received."""
        f, n, link = self.fleet, self.fleet.n, self.server.link
        egress = self.server.egress_bps
        slots = 1 if egress is None else max(1, int(egress // link.bandwidth_bps))
        server_up = np.inf if egress is None else egress
        bw = np.minimum(np.minimum(link.bandwidth_bps, server_up), f.downlink_bps[chosen])
        got = fifo(np.zeros(len(chosen)), tx_time_s(down, bw), np.arange(len(chosen)) % slots, slots) + link.latency_s
        ready = got + compute_s
        end = float((self.uploads(chosen, up, ready) + link.latency_s).max(initial=0.0))
        sent = np.zeros(n + 1, dtype=np.int64)
        received = np.zeros(n + 1, dtype=np.int64)
        sent[chosen] = up
        received[chosen] = down
        sent[n] = down * len(chosen)
        received[n] = up * len(chosen)
        return end, sent, received


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
        """Each of ``chosen`` trains a copy of its ``cluster``'s row of ``models``; each row then becomes the
        sample-weighted average of its members' (float64), a row no one trained stays (in place)."""
        f = self.fleet
        weight = float(f.trainer.data.samples)
        acc = torch.zeros((models.shape[0], models.shape[1]), dtype=torch.float64)
        counts = np.bincount(cluster, minlength=models.shape[0])
        for part in chunks(len(chosen), f.chunk):
            q = torch.from_numpy(cluster[part])
            rows = models[q].clone()
            f.trainer.train(rows, torch.from_numpy(chosen[part]))
            acc.index_add_(0, q, rows.double() * weight)
        for c in np.flatnonzero(counts):
            models[c] = (acc[c] / (weight * counts[c])).to(models.dtype)


class FedAvgRounds(ServerRounds):
    """FedAvg through one server attached to every device (module docstring)."""

    def __init__(self, params: Any, fleet: Fleet, rows: Optional[torch.Tensor], *, global_row: torch.Tensor,
                 server: Any, serialized: bool = False) -> None:
        super().__init__(params, fleet, None, server=server, serialized=serialized)
        self.global_row = global_row

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
            acc += (rows.double() * (weight / total)).sum(dim=0)
        self.global_row = acc.to(self.global_row.dtype)
        down = message_size("fedavg", "model", f.state_bytes)  # the global model
        up = message_size("fedavg", "update", f.state_bytes)  # a model and its sample count
        end, sent, received = self.exchange(chosen, down, up, f.compute_s()[chosen])
        k = len(chosen)
        return Round(end, sent, received, 2 * k, {"model": k * down, "update": k * up}, chosen)


class IFCARounds(ServerRounds):
    """IFCA (Ghosh et al. 2020, Alg. 2; ``p2pfl.protocols.server.ifca``): the server broadcasts K cluster
    models; each device picks the one with the lowest loss on its training data (E-step, K forward passes
    charged), trains a copy and uploads it with its cluster id; each cluster's model becomes the
    sample-weighted average of its uploads (float64, in id order), a cluster nobody chose keeps its own. With
    ``balanced_init``, probes redraw the K inits until every cluster is picked by ceil(n / 2K) devices."""

    def __init__(self, params: Any, fleet: Fleet, rows: Optional[torch.Tensor], *, server: Any,
                 init: Callable[[int], torch.Tensor], serialized: bool = False) -> None:
        super().__init__(params, fleet, None, server=server, serialized=serialized)
        self.init = init  # draw -> (K, P) cluster models (the kernel's ``IFCA.init_models``)
        self.models = init(0)
        self.assignment = np.zeros(fleet.n, dtype=np.int64)
        self.init_balanced: list[tuple[bool, float]] = []  # each probe's verdict and when (from the round's start)

    @property
    def k(self) -> int:
        return int(self.params.n_clusters)

    def estep_flops(self) -> float:
        return float(self.k * self.fleet.forward_flops * self.fleet.trainer.data.samples)

    def choose(self) -> np.ndarray:
        """Each device's cluster: the argmin of the K models' mean training loss (ties: the lowest id)."""
        f = self.fleet
        out = np.empty(f.n, dtype=np.int64)
        for part in chunks(f.n, max(1, f.chunk // self.k)):
            losses = f.trainer.losses(self.models, torch.arange(part.start, part.stop))
            out[part] = choose_clusters(losses.numpy())
        return out

    def probe(self) -> Round:
        """The balanced initializer (the reference code's; off by default, as in the paper): what it sent."""
        from p2pfl.protocols.server.ifca import is_balanced

        f, n = self.fleet, self.fleet.n
        everyone = np.arange(n)
        down = message_size("ifca", "probe", f.state_bytes, self.k)  # K models
        up = message_size("ifca", "probe_reply", f.state_bytes)  # a cluster id
        spent: Optional[Round] = None
        for draw in range(self.params.init_tries):
            picks = self.choose()
            end, sent, received = self.exchange(everyone, down, up, self.estep_flops() / f.flops_per_s)
            step = Round(end, sent, received, 2 * n, {"probe": n * down, "probe_reply": n * up},
                         np.zeros(0, dtype=np.int64), np.full(n, self.estep_flops()))
            spent = step if spent is None else spent.then(step)
            balanced = is_balanced(picks.tolist(), self.k)
            self.init_balanced.append((balanced, spent.duration_s))
            if balanced or draw == self.params.init_tries - 1:
                break
            self.models = self.init(draw + 1)
        assert spent is not None
        return spent

    def round(self, r: int) -> Round:
        f, n = self.fleet, self.fleet.n
        probed = self.probe() if self.params.balanced_init and r == 1 else None
        chosen = self.choose()
        self.train_clusters(self.models, np.arange(n), chosen)
        self.assignment = chosen
        down = message_size("ifca", "models", f.state_bytes, self.k)  # the K models
        up = message_size("ifca", "update", f.state_bytes)  # a model, its sample count and cluster
        everyone = np.arange(n)
        end, sent, received = self.exchange(everyone, down, up, self.estep_flops() / f.flops_per_s + f.compute_s())
        step = Round(end, sent, received, 2 * n, {"models": n * down, "update": n * up}, everyone,
                     np.full(n, self.estep_flops()))
        return step if probed is None else probed.then(step)

    def clusters(self) -> list[list[int]]:
        """The non-empty clusters of the latest assignment, in cluster-id order."""
        return clusters_from_assignment(self.assignment, self.k)

    def scores(self) -> np.ndarray:
        return self.scores_of(self.models, self.assignment)


class OracleRounds(ServerRounds):
    """The Oracle, ``mode: federated`` (``p2pfl.protocols.reference.oracle``; the Conditional paper's upper
    reference): each device announces its true cluster once (an 8-byte ``join``), then the server runs FedAvg
    within every cluster: one row a cluster, all from the common initial model."""

    def __init__(self, params: Any, fleet: Fleet, rows: Optional[torch.Tensor], *, server: Any, first: torch.Tensor,
                 true_clusters: np.ndarray, serialized: bool = False) -> None:
        super().__init__(params, fleet, None, server=server, serialized=serialized)
        self.labels, self.cluster_of = np.unique(true_clusters, return_inverse=True)
        self.models = first.expand(len(self.labels), -1).clone()

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


PROGRAMS: dict[str, type[RoundProgram]] = {"gossip": GossipRounds, "dsgd": DSGDRounds, "fedavg": FedAvgRounds,
                                            "ifca": IFCARounds, "local": LocalRounds, "oracle": OracleRounds}
