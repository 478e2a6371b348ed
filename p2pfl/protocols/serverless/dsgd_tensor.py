"""DSGD as a tensor program (``engine: tensor``; the protocol: ``dsgd.py`` beside this file).

D-PSGD (Lian et al. 2017): train, send to every neighbour, mix with Metropolis-Hastings weights
(``p2pfl.maths.mixing``, the kernel's). Synchronous by definition, so the same algorithm as the event kernel's;
the mix accumulates in float64 as ``weighted_sum`` does, a block of the mixing matrix's rows at a time.

Under dynamics (``dsgd.py``'s extension; ``dynamics.churn`` replayed at round barriers): a device offline at a
round's start skips it; the others send their model and live degree to their live neighbours and wait until
``round_timeout_s`` (``p2pfl.tensor.exchange``); each mixes over the models that came with Metropolis-Hastings
weights of the live degrees, the missing mass on itself (``live_metropolis_row``'s arithmetic, row by row).
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

import numpy as np
import torch

from p2pfl.maths.messages import message_size
from p2pfl.maths.mixing import metropolis_edge_weights, metropolis_self_weights
from p2pfl.protocols.serverless.dsgd import DSGDParams
from p2pfl.tensor.exchange import neighbour_round
from p2pfl.tensor.program import DeviceRounds, Fleet, Round, ScenarioView
from p2pfl.tensor.timing import neighbour_sends
from p2pfl.tensor.train import chunks

__all__ = ["DSGDRounds"]


class DSGDRounds(DeviceRounds):
    """D-PSGD with Metropolis-Hastings weights (module docstring)."""

    supports_churn = True

    def __init__(self, params: DSGDParams, fleet: Fleet) -> None:
        super().__init__(params, fleet)
        adj, n = fleet.adjacency, fleet.n
        self.crow, self.col, self.val = mixing_csr(n, adj.sources, adj.indices.astype(np.int64), adj.degree,
                                                   adj.degree)
        self.models_missing = 0

    @classmethod
    def unsupported(cls, scenario: ScenarioView) -> Optional[str]:
        if scenario.dynamics is not None and scenario.protocol.round_timeout_s is None:
            return "protocol.round_timeout_s: required under dynamics (a dropped model would be awaited forever)"
        return super().unsupported(scenario)

    def result(self) -> dict[str, Any]:
        return {"models_missing": self.models_missing} if self.fleet.dynamic else {}

    def round(self, r: int) -> Round:
        f, adj, n = self.fleet, self.fleet.adjacency, self.fleet.n
        if f.dynamic:
            return self._dynamic_round()
        self.train_all()
        self._mix()
        size = message_size("dsgd", "dsgd_model", f.state_bytes)
        src, dst = adj.sources, adj.indices.astype(np.int64)
        end = neighbour_sends(f, adj, size)
        sent = np.zeros(n, dtype=np.int64)
        np.add.at(sent, src, size)
        received = np.zeros(n, dtype=np.int64)
        np.add.at(received, dst, size)
        return Round(end, sent, received, len(dst), {"dsgd_model": len(dst) * size}, np.arange(n))

    def _dynamic_round(self) -> Round:
        """A round under dynamics (module docstring): live peers, the degree in each message, a deadline."""
        f, n = self.fleet, self.fleet.n
        size = message_size("dsgd", "dsgd_model", f.state_bytes, dynamic=True)  # a model and the live degree
        online = self.online()
        trained = np.flatnonzero(online)
        if not len(trained):
            idle = np.zeros(n, dtype=np.int64)
            return Round(self.idle_until_back(), idle, idle.copy(), 0, {}, trained)
        self.train_some(trained)
        ex = neighbour_round(f, online, size, self.params.round_timeout_s, self.now)
        dst, src = ex.dst[ex.got], ex.src[ex.got]  # the models that came, by receiver, senders ascending
        self._mix(*mixing_csr(n, dst, src, ex.degree, np.bincount(dst, minlength=n)))
        self.models_missing += ex.missing
        k = len(ex.src)
        return Round(ex.duration_s, ex.sent, ex.received, k, {"dsgd_model": k * size}, trained,
                     dropped={"offline": ex.dropped} if ex.dropped else {},
                     bytes_dropped={"offline": ex.dropped * size} if ex.dropped else {})

    def _mix(self, crow: Optional[torch.Tensor] = None, col: Optional[torch.Tensor] = None,
             val: Optional[torch.Tensor] = None) -> None:
        """x_i <- w_ii x_i + sum_j w_ij x_j in float64 (as ``weighted_sum``), a block of W's rows at a time
        (W: the static fleet's, or a round's ``crow``, ``col``, ``val``)."""
        x, n = self.rows, self.fleet.n
        crow = self.crow if crow is None else crow
        col = self.col if col is None else col
        val = self.val if val is None else val
        x64 = x.double()  # a copy: x can take each block's result at once
        for part in chunks(n, self.fleet.chunk):
            a, b = int(crow[part.start]), int(crow[part.stop])
            with warnings.catch_warnings():  # "sparse CSR support is in beta": the one operation used is mm
                warnings.simplefilter("ignore", UserWarning)
                block = torch.sparse_csr_tensor(crow[part.start : part.stop + 1] - a, col[a:b],
                                                val[a:b], size=(part.stop - part.start, n), check_invariants=False)
                x[part] = torch.sparse.mm(block, x64).to(x.dtype)


def mixing_csr(n: int, row: np.ndarray, col: np.ndarray, degree: np.ndarray,
               count: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Metropolis-Hastings matrix as CSR (``crow``, ``col``, ``val``): w_ij = 1 / (1 + max(d_i, d_j)) on each
    entry (``row[e]``, ``col[e]``), grouped by row with columns ascending (``count``: entries a row), w_ii the rest
    of row i's mass; each row in id order, self included, as ``weighted_sum`` adds it. ``degree``: the degrees the
    weights read (the topology's, or the live ones under dynamics)."""
    w = metropolis_edge_weights(degree[row], degree[col])
    w_self = metropolis_self_weights(row, w, n)
    at = np.concatenate([row, np.arange(n)])
    cols = np.concatenate([col, np.arange(n)])
    order = np.lexsort((cols, at))
    return (torch.from_numpy(np.r_[0, np.cumsum(count + 1)]), torch.from_numpy(cols[order]),
            torch.from_numpy(np.concatenate([w, w_self])[order]))
