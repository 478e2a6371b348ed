"""DSGD as a tensor program (``engine: tensor``; the protocol: ``dsgd.py`` beside this file).

D-PSGD (Lian et al. 2017): train, send to every neighbour, mix with Metropolis-Hastings weights
(``p2pfl.maths.mixing``, the kernel's). Synchronous by definition, so the same algorithm as the event kernel's;
the mix accumulates in float64 as ``weighted_sum`` does, a block of the mixing matrix's rows at a time.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from p2pfl.maths.messages import message_size
from p2pfl.maths.mixing import metropolis_edge_weights, metropolis_self_weights
from p2pfl.protocols.serverless.dsgd import DSGDParams
from p2pfl.sim.cost import tx_time_s
from p2pfl.tensor.program import DeviceRounds, Fleet, Round
from p2pfl.tensor.train import chunks

__all__ = ["DSGDRounds"]


class DSGDRounds(DeviceRounds):
    """D-PSGD with Metropolis-Hastings weights (module docstring)."""

    def __init__(self, params: DSGDParams, fleet: Fleet) -> None:
        super().__init__(params, fleet)
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
        x, n = self.rows, self.fleet.n
        x64 = x.double()  # a copy: x can take each block's result at once
        for part in chunks(n, self.fleet.chunk):
            a, b = int(self.crow[part.start]), int(self.crow[part.stop])
            with warnings.catch_warnings():  # "sparse CSR support is in beta": the one operation used is mm
                warnings.simplefilter("ignore", UserWarning)
                block = torch.sparse_csr_tensor(self.crow[part.start : part.stop + 1] - a, self.col[a:b],
                                                self.val[a:b], size=(part.stop - part.start, n), check_invariants=False)
                x[part] = torch.sparse.mm(block, x64).to(x.dtype)
