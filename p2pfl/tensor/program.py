"""A protocol as a tensor program: what every program is given (:class:`Fleet`), what a round returns
(:class:`Round`), the interface (:class:`RoundProgram`) and the programs whose devices hold a row each
(:class:`DeviceRounds`; a server's programs: ``p2pfl.tensor.server``).

A protocol names its program (``Protocol.tensor_program``); the program lives beside the protocol's module
(``p2pfl/protocols/serverless/gossip_tensor.py`` beside ``gossip.py``) and says what it cannot express
(:meth:`RoundProgram.unsupported`). A program trains the devices of the round (``RowTrainer``, a chunk at a
time), combines the rows as the protocol's messages say, and returns what the round sent and how long it took
(``p2pfl.tensor.timing``). What a device learns about another still comes only from a model it was sent: a
program combines rows along the messages the protocol sends and counts their bytes as the protocol declares
them (``p2pfl.maths.messages``). The round maths (mixing weights, consensus distance, cluster choice, transfer
times, weighted averages) is the event kernel's own (``p2pfl.maths``, ``p2pfl.learning.aggregate``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

import numpy as np
import torch

from p2pfl.learning.train import TrainingSpec
from p2pfl.maths.churn import ChurnReplay
from p2pfl.maths.consensus import consensus_distance
from p2pfl.sim.dynamics.schema import DynamicsSpec
from p2pfl.tensor.graph import Adjacency
from p2pfl.tensor.train import RowTrainer, chunks
from p2pfl.topology.build import Link, ServerNode
from p2pfl.topology.schema import TopologySpec

__all__ = ["Fleet", "Round", "RoundProgram", "DeviceRounds", "ScenarioView", "Logs"]

#: A round's protocol metrics by name, as the kernel's ``ctx.log`` records them (each entry's ``t``: seconds
#: from the round's start)
Logs = dict[str, list[dict[str, Any]]]


class ScenarioView(Protocol):
    """What a program may read of a scenario to say whether it can run it (``p2pfl.config.Scenario`` is one)."""

    @property
    def protocol(self) -> Any: ...  # the protocol's validated params

    @property
    def topology(self) -> TopologySpec: ...

    @property
    def dynamics(self) -> Optional[DynamicsSpec]: ...

    @property
    def training(self) -> TrainingSpec: ...


@dataclass
class Fleet:
    """What every program is given: the trainer (rows' data and batch orders), the graph, the devices'
    profiles as arrays, the links, the model's message size, the initial models and the server."""

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
    first: torch.Tensor  # the common initial model as a row (the kernel's ``ctx.new_model()``)
    drawn: Callable[..., torch.Tensor]  # drawn(purpose, *ids): a model row from a seed of its own (``RunInfo.seed_for``)
    server: Optional[ServerNode] = None  # the one server attached to every device (a server's programs)
    serialized: bool = False  # ``topology.ingress: serialized``: the server receives one upload at a time
    #: the kernel's churn replayed (``p2pfl.maths.churn``) where the scenario has a ``dynamics:`` block (its
    #: protocols then run as the kernel runs them under dynamics: deadlines, live peers, a DSGD degree), else None
    churn: Optional[ChurnReplay] = None

    @property
    def dynamic(self) -> bool:
        """Does the scenario have a ``dynamics:`` block (the kernel's ``Protocol.dynamic``)?"""
        return self.churn is not None

    @property
    def n(self) -> int:
        return self.adjacency.n

    def compute_s(self) -> np.ndarray:
        """Each device's simulated seconds of one training job."""
        return self.job_flops / self.flops_per_s


@dataclass
class Round:
    """What one round sent (per node: devices, then servers), how long it took, and what it logged and reported."""

    duration_s: float
    sent: np.ndarray  # bytes sent by each node
    received: np.ndarray
    messages: int
    by_kind: dict[str, int]
    trained: np.ndarray  # devices that ran a training job
    flops: Optional[np.ndarray] = None  # modelled FLOPs each device computed besides its training job
    logs: Logs = field(default_factory=dict)  # the protocol's metrics (``t``: from the round's start)
    reported: Optional[list[list[int]]] = None  # the clusters found this round (the kernel's ``ctx.report_clusters``)
    dropped: dict[str, int] = field(default_factory=dict)  # messages dropped, by reason (``offline``)
    bytes_dropped: dict[str, int] = field(default_factory=dict)  # their bytes, by reason

    def then(self, nxt: Round) -> Round:
        """This round's traffic and time followed by ``nxt``'s (the trained devices, FLOPs and logs: both; the
        clusters: the latest report)."""
        kinds = dict(self.by_kind)
        for k, b in nxt.by_kind.items():
            kinds[k] = kinds.get(k, 0) + b
        flops = self.flops if nxt.flops is None else nxt.flops if self.flops is None else self.flops + nxt.flops
        logs = {name: list(entries) for name, entries in self.logs.items()}
        for name, entries in nxt.logs.items():
            logs.setdefault(name, []).extend({**e, "t": self.duration_s + e["t"]} for e in entries)
        dropped, bytes_dropped = dict(self.dropped), dict(self.bytes_dropped)
        for why, count in nxt.dropped.items():
            dropped[why] = dropped.get(why, 0) + count
        for why, b in nxt.bytes_dropped.items():
            bytes_dropped[why] = bytes_dropped.get(why, 0) + b
        return Round(self.duration_s + nxt.duration_s, self.sent + nxt.sent, self.received + nxt.received,
                     self.messages + nxt.messages, kinds, np.concatenate([self.trained, nxt.trained]), flops, logs,
                     self.reported if nxt.reported is None else nxt.reported, dropped, bytes_dropped)


class RoundProgram(ABC):
    """One protocol as a tensor program: built from its params and the fleet, ``round(r)`` runs round r."""

    servers: tuple[str, ...] = ()
    #: It runs under churn (``dynamics.churn``, replayed at round barriers: ``Fleet.churn``).
    supports_churn: bool = False

    def __init__(self, params: Any, fleet: Fleet) -> None:
        self.params = params
        self.fleet = fleet
        #: simulated time at the start of the round ``round`` runs (the driver sets it before each round)
        self.now = 0.0

    @classmethod
    def unsupported(cls, scenario: ScenarioView) -> Optional[str]:
        """Why this program cannot run ``scenario``, one line naming the field first (``"protocol.mode: ..."``),
        or None. The engine's own limits (a static, lossless fleet; SGD) are the engine's to check."""
        return None

    @abstractmethod
    def round(self, r: int) -> Round: ...

    @abstractmethod
    def scores(self) -> np.ndarray:
        """Each device's score of its model now."""

    def consensus_distance(self) -> Optional[float]:
        """(1/n) sum_i ||x_i - mean(x)||^2 of the devices' models, or None where the protocol does not log it."""
        return None

    def clusters(self) -> Optional[list[list[int]]]:
        """The federations the protocol found (None: it does not cluster)."""
        return None

    def result(self) -> dict[str, Any]:
        """The protocol's own summary fields (the kernel's ``Protocol.result``: e.g. ``models_missing`` under
        dynamics)."""
        return {}

    def online(self) -> np.ndarray:
        """Who is online at the round's start (all devices without churn): the kernel's churn at ``now``."""
        churn = self.fleet.churn
        return np.ones(self.fleet.n, dtype=bool) if churn is None else churn.online_at(self.now)

    def idle_until_back(self) -> float:
        """Seconds from ``now`` until the next device switch (a round that found every device offline waits for
        one to come back, as the kernel's devices wait); 0 where nothing ever switches again."""
        churn = self.fleet.churn
        nxt = np.inf if churn is None else churn.next_switch()
        return float(nxt - self.now) if np.isfinite(nxt) else 0.0


class DeviceRounds(RoundProgram):
    """A program whose devices hold a model each: ``rows`` (N, P), from the common initial model, or each
    device's own (``init: independent``, where the protocol has that field)."""

    def __init__(self, params: Any, fleet: Fleet) -> None:
        super().__init__(params, fleet)
        n, first = fleet.n, fleet.first
        self.rows = torch.empty((n, int(first.shape[0])), dtype=first.dtype)
        if getattr(params, "init", "common") == "independent":
            for i in range(n):
                self.rows[i] = fleet.drawn("init", i)
        else:
            self.rows[:] = first

    @classmethod
    def unsupported(cls, scenario: ScenarioView) -> Optional[str]:
        topo = scenario.topology
        if topo.servers:
            return f"topology.servers: {scenario.protocol.name} runs without servers"
        if topo.ingress == "serialized":
            return "topology.ingress: devices receive in parallel (serialized ingress is for a server's uploads)"
        return None

    def consensus_distance(self) -> Optional[float]:
        """The rows' consensus distance (``p2pfl.maths.consensus``: the kernel's gossip's arithmetic)."""
        return consensus_distance(self.rows)

    def train_all(self) -> None:
        trainer = self.fleet.trainer
        for part in chunks(self.fleet.n, self.fleet.chunk):
            trainer.train(self.rows[part], torch.arange(part.start, part.stop))

    def train_some(self, devices: np.ndarray) -> None:
        """Train the rows of ``devices`` (ascending ids; under churn, those online), one job each."""
        if len(devices) == self.fleet.n:
            self.train_all()
            return
        trainer = self.fleet.trainer
        for part in chunks(len(devices), self.fleet.chunk):
            ids = torch.from_numpy(devices[part])
            rows = self.rows[ids]
            trainer.train(rows, ids)
            self.rows[ids] = rows

    def scores(self) -> np.ndarray:
        out = np.empty(self.fleet.n)
        for part in chunks(self.fleet.n, self.fleet.chunk):
            out[part] = self.fleet.trainer.score(self.rows[part], torch.arange(part.start, part.stop)).numpy()
        return out
