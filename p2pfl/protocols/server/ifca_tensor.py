"""IFCA as a tensor program (``engine: tensor``; the protocol: ``ifca.py`` beside this file).

Ghosh et al. 2020, Alg. 2: the server broadcasts K cluster models as K rows; each device picks the one with the
lowest loss on its training data (E-step, K forward passes charged, scored a chunk of devices at a time), trains
a copy and uploads it with its cluster id; each cluster's model becomes the sample-weighted average of its
uploads (float64, in id order), a cluster nobody chose keeps its own. With ``balanced_init``, probes redraw the
K inits until every cluster is picked by ceil(n / 2K) devices. Each round's assignment is logged and reported
as the round's clusters, as the kernel's IFCA does.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from p2pfl.maths.clusters import choose_clusters, clusters_from_assignment
from p2pfl.maths.messages import message_size
from p2pfl.protocols.server.ifca import IFCAParams, is_balanced
from p2pfl.tensor.program import Fleet, Round, ScenarioView
from p2pfl.tensor.server import ServerRounds
from p2pfl.tensor.train import chunks

__all__ = ["IFCARounds"]


class IFCARounds(ServerRounds):
    """IFCA through one server attached to every device (module docstring)."""

    def __init__(self, params: IFCAParams, fleet: Fleet) -> None:
        super().__init__(params, fleet)
        self.models = self.init_models(0)
        self.assignment = np.zeros(fleet.n, dtype=np.int64)
        self.init_balanced: list[tuple[bool, float]] = []  # each probe's verdict and when (from the round's start)

    @classmethod
    def unsupported(cls, scenario: ScenarioView) -> Optional[str]:
        if scenario.protocol.restarts > 1:
            return "protocol.restarts: IFCA runs one initialisation (restarts: 1)"
        return super().unsupported(scenario)

    @property
    def k(self) -> int:
        return int(self.params.n_clusters)

    def init_models(self, draw: int) -> torch.Tensor:
        """(K, P): draw ``draw``'s K cluster models (the kernel's ``IFCA.init_models``)."""
        return torch.stack([self.fleet.drawn("ifca.init", draw, q) for q in range(self.k)])

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
        """The balanced initializer (the reference code's; off by default, as in the paper): what it sent, and
        each probe's verdict logged (``ifca_init_balanced``)."""
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
            self.models = self.init_models(draw + 1)
        assert spent is not None
        spent.logs["ifca_init_balanced"] = [{"t": at, "value": ok, "draw": d}
                                            for d, (ok, at) in enumerate(self.init_balanced)]
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
                     np.full(n, self.estep_flops()), reported=self.clusters())
        step.logs["assignment"] = [{"t": end, "value": chosen.tolist(), "round": r}]
        return step if probed is None else probed.then(step)

    def clusters(self) -> list[list[int]]:
        """The non-empty clusters of the latest assignment, in cluster-id order."""
        return clusters_from_assignment(self.assignment, self.k)

    def scores(self) -> np.ndarray:
        return self.scores_of(self.models, self.assignment)
