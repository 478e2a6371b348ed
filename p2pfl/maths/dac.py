"""DAC, cosine variant, as a round over a fleet's rows: the Conditional paper's practical DAC (App. K-C; Listo Zec
et al. 2022 for DAC itself): "cosine-similarity-based neighbor discovery in model parameter space, deterministic
top-k neighbor selection, and uniform weight averaging".

The event kernel's devices run it one at a time (``p2pfl.protocols.serverless.dac.DACCosine.mix``: a device's
received models stacked, ``cosine_top_k``, ``weighted_average``); here every device's round at once, over
``x`` (``(n, P)`` float32, row i device i's model) and the candidate sets as CSR (``indptr``, ``indices``: row
i's candidates ``indices[indptr[i]:indptr[i + 1]]``, ascending ids; a device's topology neighbours, or all other
devices: :func:`all_candidates`):

- :func:`pair_cosines`: the cosine similarity of every candidate pair in float64, each unordered pair once
  (cos_ij = cos_ji bit for bit), from float32 rows widened to float64 as ``state_to_vector`` widens them. The
  kernel's ``cosine_similarities`` takes one matrix-vector product a device, whose sums run in another order:
  the two agree within ``COSINE_ATOL`` (1e-12; tested), and only the ranking is used.
- :func:`top_k`: each device's ``k`` most similar candidates (ties: the lower id, as ``cosine_top_k``), as a
  CSR of chosen ids in ascending order; all candidates where there are at most ``k``. A candidate whose cosine is
  not a number (a diverged model) ranks after every other.
- :func:`uniform_average_`: x_i <- (x_i + sum_{j in top(i)} x_j) / (1 + |top(i)|) for every device at once, in
  place, with ``weighted_average``'s arithmetic (float64 sum of the terms each already times its weight 1 / (1 + m),
  the device's own first, then its chosen peers in id order, cast back to float32): the kernel's bits for the same
  choice (tested).

Memory (n devices, P parameters, E candidate entries, chunk B rows, ``block_bytes`` b): besides the table
``x`` (4 n P bytes), :func:`pair_cosines` holds at most b bytes of widened rows and O(E) index and cosine arrays;
:func:`uniform_average_` holds a chunk's float64 sums (8 B P bytes, 16 B P with the gathered rows) and the
*pending* rows: those mixed but still to be read by a later chunk (4 P bytes each). Rows are mixed in the reverse
Cuthill-McKee order of the selection graph, so a row is read by chunks close to its own and pending rows stay near
the graph's bandwidth (``pending_rows`` says how many; at most n). At 10^5 headline devices (P = 25,450, B = 164,
b = 64 MB) that is 10.2 GB of table, about 70 MB of chunks, and pending rows: for top-2 on a geometric fleet of
mean degree 7, scattered or in strips, 429-450 rows (46 MB; 34,081 in id order), measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["all_candidates", "pair_cosines", "top_k", "uniform_average_", "mixing_order", "pending_rows",
           "selection_components", "Selection"]

#: Bytes of widened (float64) rows :func:`pair_cosines` gathers at once.
BLOCK_BYTES = 1 << 26


@dataclass(frozen=True)
class Selection:
    """Each device's chosen peers as CSR: row i's are ``indices[indptr[i]:indptr[i + 1]]``, ascending."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def n(self) -> int:
        return len(self.indptr) - 1

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.indptr)

    def of(self, i: int) -> list[int]:
        return self.indices[self.indptr[i] : self.indptr[i + 1]].tolist()


def all_candidates(n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of every other device a device's candidates (``candidates: all``): n (n - 1) entries."""
    indptr = np.arange(n + 1, dtype=np.int64) * (n - 1)
    cols = np.tile(np.arange(n - 1, dtype=np.int64), n).reshape(n, n - 1)
    cols += cols >= np.arange(n, dtype=np.int64)[:, None]  # skip the device itself
    return indptr, cols.reshape(-1)


def _rows_of(indptr: np.ndarray) -> np.ndarray:
    n = len(indptr) - 1
    return np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))


def pair_cosines(x: torch.Tensor, indptr: np.ndarray, indices: np.ndarray, *,
                 block_bytes: int = BLOCK_BYTES) -> np.ndarray:
    """cos(x_i, x_j) in float64 of every CSR entry (i, j), each unordered pair computed once (module docstring).

    The denominator is ||x_j|| ||x_i|| clamped at 1e-300, as ``cosine_similarities``'s."""
    n, p = int(x.shape[0]), int(x.shape[1])
    rows = _rows_of(indptr)
    cols = np.asarray(indices, dtype=np.int64)
    lo, hi = np.minimum(rows, cols), np.maximum(rows, cols)
    pairs, back = np.unique(lo * n + hi, return_inverse=True)
    a, b = pairs // n, pairs % n
    norms = torch.empty(n, dtype=torch.float64)
    step = max(1, block_bytes // (8 * p))
    for s in range(0, n, step):
        norms[s : s + step] = torch.linalg.vector_norm(x[s : s + step].to(torch.float64), dim=1)
    dots = torch.empty(len(pairs), dtype=torch.float64)
    step = max(1, block_bytes // (24 * p))  # two gathered blocks and their product
    for s in range(0, len(pairs), step):
        ia = torch.from_numpy(a[s : s + step])
        ib = torch.from_numpy(b[s : s + step])
        prod = x[ia].to(torch.float64).mul_(x[ib])  # float32 x float32 is exact in float64
        torch.sum(prod, dim=1, out=dots[s : s + step])
    cos = dots / (norms[torch.from_numpy(b)] * norms[torch.from_numpy(a)]).clamp_min(1e-300)
    return cos.numpy()[back]


def top_k(cos: np.ndarray, indptr: np.ndarray, indices: np.ndarray, k: int) -> Selection:
    """Each row's ``k`` entries of highest ``cos`` (ties: the lower id; NaN last), their ids ascending."""
    rows = _rows_of(indptr)
    cols = np.asarray(indices, dtype=np.int64)
    neg = -np.asarray(cos, dtype=np.float64)  # NaN sorts after every number
    order = np.lexsort((cols, neg, rows))
    rank = np.arange(len(order)) - indptr[rows[order]]
    kept = order[rank < k]
    chosen_rows, chosen = rows[kept], cols[kept]
    by_id = np.lexsort((chosen, chosen_rows))
    counts = np.minimum(np.diff(indptr), k)
    out_ptr = np.zeros(len(indptr), dtype=np.int64)
    np.cumsum(counts, out=out_ptr[1:])
    return Selection(out_ptr, chosen[by_id])


def mixing_order(sel: Selection) -> np.ndarray:
    """Devices in the reverse Cuthill-McKee order of the selection graph (i -- j when i chose j), so that the
    devices that read a row are mixed close together (:func:`uniform_average_`)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    n = sel.n
    graph = csr_matrix((np.ones(len(sel.indices), dtype=np.int8), sel.indices, sel.indptr), shape=(n, n))
    sym = (graph + graph.T).tocsr()
    return np.asarray(reverse_cuthill_mckee(sym, symmetric_mode=True), dtype=np.int64)


def _release_chunks(sel: Selection, order: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Each mixed device's chunk (in ``order``, the devices mixed) and the last chunk that reads its row (its own
    or a chooser's); -1 for a device not mixed."""
    n = sel.n
    own = np.full(n, -1, dtype=np.int64)
    own[order] = np.arange(len(order)) // chunk
    last = own.copy()
    readers = own[_rows_of(sel.indptr)]
    np.maximum.at(last, sel.indices.astype(np.int64), readers)
    last[own < 0] = -1  # a row not mixed is never pending
    return own, last


def _mixed_order(sel: Selection, order: np.ndarray | None, mixed: np.ndarray | None) -> np.ndarray:
    """The devices to mix, in mixing order: ``order`` (default :func:`mixing_order`) less those not ``mixed``."""
    order = mixing_order(sel) if order is None else order
    return order if mixed is None else order[np.asarray(mixed, dtype=bool)[order]]


def pending_rows(sel: Selection, chunk: int, order: np.ndarray | None = None,
                 mixed: np.ndarray | None = None) -> int:
    """The most rows :func:`uniform_average_` holds mixed but not yet written back, at ``chunk`` rows a chunk."""
    order = _mixed_order(sel, order, mixed)
    own, last = _release_chunks(sel, order, chunk)
    chunks = (len(order) + chunk - 1) // chunk
    made = np.cumsum(np.bincount(own[own >= 0], minlength=chunks))
    freed = np.cumsum(np.bincount(last[last >= 0], minlength=chunks))
    return int((made - np.r_[0, freed[:-1]]).max(initial=0))


@torch.no_grad()
def uniform_average_(x: torch.Tensor, sel: Selection, *, chunk: int, order: np.ndarray | None = None,
                     mixed: np.ndarray | None = None) -> int:
    """Every device's model becomes the uniform average of itself and its chosen peers' (``sel``), all from the
    models as they were: ``weighted_average([(x_i, 1)] + [(x_j, 1) for j in sel(i)])``'s bits, in place
    (``mixed``: only the devices it marks, as a bool mask; the others keep their rows untouched, and choose no one).

    A chunk of ``chunk`` devices (in ``order``, default :func:`mixing_order`) is mixed at once into pending
    rows; a pending row is written back once every chunk that reads its old value is done. Returns the most
    rows held pending (module docstring: the memory bound)."""
    order = _mixed_order(sel, order, mixed)
    n = len(order)
    if mixed is not None and int(sel.counts[~np.asarray(mixed, dtype=bool)].sum()):
        raise ValueError("a device that is not mixed chose peers")
    _, last = _release_chunks(sel, order, chunk)
    size = pending_rows(sel, chunk, order)
    pool = torch.empty((size, int(x.shape[1])), dtype=x.dtype)
    free = list(range(size - 1, -1, -1))  # a stack of free slots
    slot = np.full(sel.n, -1, dtype=np.int64)
    counts = sel.counts
    weight = 1.0 / (counts + 1.0)  # weighted_average: w / sum(w) with every w = 1
    pend = np.flatnonzero(last >= 0)
    release = pend[np.argsort(last[pend], kind="stable")]
    bounds = np.searchsorted(last[release], np.arange((n + chunk - 1) // chunk + 1))
    width = int(x.shape[1])
    acc_buf = torch.empty((min(chunk, n), width), dtype=torch.float64)
    term_buf = torch.empty_like(acc_buf)
    for c, start in enumerate(range(0, n, chunk)):
        devs = order[start : start + chunk]
        m = counts[devs]
        w = torch.from_numpy(weight[devs]).unsqueeze(1)
        acc, term = acc_buf[: len(devs)], term_buf[: len(devs)]
        acc.zero_()  # weighted_sum's accumulator: 0 + w x_i first (a -0.0 becomes +0.0, as there)
        acc.add_(torch.mul(x[torch.from_numpy(devs)], w, out=term))  # float32 x float64: the float64 product
        for s in range(int(m.max(initial=0))):
            has = np.flatnonzero(m > s)
            peers = torch.from_numpy(sel.indices[sel.indptr[devs[has]] + s].astype(np.int64))
            if len(has) == len(devs):
                acc.add_(torch.mul(x[peers], w, out=term))
            else:
                at = torch.from_numpy(has)
                acc[at] += torch.mul(x[peers], w[at], out=term[: len(has)])
        slots = [free.pop() for _ in range(len(devs))]
        slot[devs] = slots
        pool[torch.tensor(slots, dtype=torch.int64)] = acc.to(x.dtype)
        done = release[bounds[c] : bounds[c + 1]]
        if len(done):
            x[torch.from_numpy(done)] = pool[torch.from_numpy(slot[done])]
            free.extend(slot[done].tolist())
    return size


def selection_components(sel: Selection) -> list[list[int]]:
    """Connected components of {i -- j : i chose j} (DAC's reported federations, ``dac.selection_components``):
    members ascending, components ordered by their smallest member."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    n = sel.n
    graph = csr_matrix((np.ones(len(sel.indices), dtype=np.int8), sel.indices, sel.indptr), shape=(n, n))
    _, labels = connected_components(graph, directed=True, connection="weak")
    first = np.full(labels.max(initial=-1) + 1, n, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(n))
    key = first[labels]  # each device's component by its smallest member
    order = np.lexsort((np.arange(n), key))
    bounds = np.flatnonzero(np.diff(key[order])) + 1
    return [g.tolist() for g in np.split(order, bounds)] if n else []
