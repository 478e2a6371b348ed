"""DAC, cosine variant, as a tensor program (``engine: tensor``; the protocol: ``dac.py`` beside this file).

The Conditional paper's practical DAC (App. K-C; DAC: Listo Zec et al. 2022): each round every device trains,
sends its model to each of its topology neighbours (``candidates: neighbors``), and sets its model to the
uniform average of itself and the ``top_k`` received models most cosine-similar to its own (ties: the lower id).
The round is ``p2pfl.maths.dac`` over the fleet's rows: the kernel's choices and its mixed models bit for bit
for the same trained models (``tests/maths/test_dac_rounds.py``). Synchronous, like DSGD: the messages are
DSGD's (a model to every neighbour, each uplink in id order), so bytes and time are DSGD's arithmetic; the
cosine and its ranking are not charged as compute, as the kernel charges none (``clustering_flops``: 0).

Under dynamics (``dynamics.churn``, replayed at round barriers) a device offline at a round's start skips it;
the others exchange with their live neighbours until ``round_timeout_s`` (``p2pfl.tensor.exchange``) and rank
the models that came. Reported federations: the connected components of "i averaged j" over each device's
latest round (``selection_components``), reported every round under dynamics as the kernel's are.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from p2pfl.maths.dac import Selection, pair_cosines, selection_components, top_k, uniform_average_
from p2pfl.maths.messages import message_size
from p2pfl.protocols.serverless.dac import DACParams
from p2pfl.tensor.exchange import neighbour_round
from p2pfl.tensor.program import DeviceRounds, Fleet, Round, ScenarioView
from p2pfl.tensor.timing import neighbour_sends

__all__ = ["DACCosineRounds"]


class DACCosineRounds(DeviceRounds):
    """DAC cosine top-k over the fleet's rows (module docstring)."""

    supports_churn = True

    def __init__(self, params: DACParams, fleet: Fleet) -> None:
        super().__init__(params, fleet)
        #: whom each device averaged in its latest round (-1: no one), the kernel's ``DAC.chosen``
        self.chosen = np.full((fleet.n, params.top_k), -1, dtype=np.int64)
        self.models_missing = 0

    @classmethod
    def unsupported(cls, scenario: ScenarioView) -> Optional[str]:
        p = scenario.protocol  # variant: original has no program (``DACOriginal``): the engine names the field
        if p.candidates != "neighbors":
            return ("protocol.candidates: DAC's candidates are the topology neighbours (candidates: all relays "
                    "every model over shortest paths, whose relay bytes the engine does not route)")
        if scenario.dynamics is not None and p.round_timeout_s is None:
            return "protocol.round_timeout_s: required under dynamics (a dropped model would be awaited forever)"
        return super().unsupported(scenario)

    def round(self, r: int) -> Round:
        f, adj, n = self.fleet, self.fleet.adjacency, self.fleet.n
        size = message_size("dac", "dac_model", f.state_bytes)
        if f.dynamic:
            return self._dynamic_round(size)
        self.train_all()
        self._mix(adj.indptr, adj.indices.astype(np.int64), np.ones(n, dtype=bool))
        src, dst = adj.sources, adj.indices.astype(np.int64)
        end = neighbour_sends(f, adj, size)
        sent = np.bincount(src, minlength=n).astype(np.int64) * size
        received = np.bincount(dst, minlength=n).astype(np.int64) * size
        return Round(end, sent, received, len(dst), {"dac_model": len(dst) * size}, np.arange(n))

    def _dynamic_round(self, size: int) -> Round:
        f, n = self.fleet, self.fleet.n
        online = self.online()
        trained = np.flatnonzero(online)
        if not len(trained):
            idle = np.zeros(n, dtype=np.int64)
            return Round(self.idle_until_back(), idle, idle.copy(), 0, {}, trained, reported=self.clusters())
        self.train_some(trained)
        ex = neighbour_round(f, online, size, self.params.round_timeout_s, self.now)
        indptr, senders = ex.received_by(n)
        self._mix(indptr, senders, online)
        self.models_missing += ex.missing
        k = len(ex.src)
        drops = {"offline": ex.dropped} if ex.dropped else {}
        return Round(ex.duration_s, ex.sent, ex.received, k, {"dac_model": k * size}, trained,
                     reported=self.clusters(), dropped=drops,
                     bytes_dropped={"offline": ex.dropped * size} if ex.dropped else {})

    def _mix(self, indptr: np.ndarray, candidates: np.ndarray, mixed: np.ndarray) -> None:
        """Rank each device's candidates (CSR) by cosine, keep the top k, average uniformly; remember whom each
        device in ``mixed`` averaged."""
        sel = top_k(pair_cosines(self.rows, indptr, candidates), indptr, candidates, self.params.top_k)
        uniform_average_(self.rows, sel, chunk=self.fleet.chunk, mixed=None if mixed.all() else mixed)
        rows = np.flatnonzero(mixed)
        counts = sel.counts[rows]
        self.chosen[rows] = -1
        slot = np.arange(len(sel.indices)) - np.repeat(sel.indptr[:-1], sel.counts)
        owner = np.repeat(np.arange(sel.n), sel.counts)
        keep = mixed[owner]
        self.chosen[owner[keep], slot[keep]] = sel.indices[keep]
        assert int(counts.sum()) == int(keep.sum())

    def consensus_distance(self) -> Optional[float]:
        """None: the kernel's DAC logs no consensus distance (its models are meant to differ by cluster)."""
        return None

    def clusters(self) -> list[list[int]]:
        """Connected components of "i averaged j" over each device's latest round (the kernel's federations)."""
        counts = (self.chosen >= 0).sum(axis=1)
        indptr = np.zeros(self.fleet.n + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return selection_components(Selection(indptr, self.chosen[self.chosen >= 0]))

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"clustering_flops": 0}  # the kernel charges no FLOPs for the cosines
        if self.fleet.dynamic:
            out["models_missing"] = self.models_missing
        return out
