"""Federation discovery from a novelty matrix, with no number of clusters given.

RND clustered-FL paper, Sec. IV (novelty-driven federation discovery) and
Sec. V ("the number of federations does not need to be specified a
priori ... federations are derived from the structure of the novelty matrix
through the compatibility criterion"). ``U[i, j] = s_ij`` is the novelty of
device j's predictor on device i's data (row i is computed by device i).

The paper names this "compatibility criterion" but does not define it; the rule
below is this package's design (reports label it so), step by step:

1. **Directed compatibility.** ``j`` is compatible with ``i`` when ``j``'s
   predictor explains ``i``'s data about as well as ``i``'s own does. Two
   criteria, both ours (the paper gives no formula):

   * ``band`` (the default): two-sided, relative to the own score::

         C[i, j]  <=>  |U[i, j] - U[i, i]| <= alpha * U[i, i]
                 (evaluated as (1 - alpha) U[i, i] <= U[i, j] <= (1 + alpha) U[i, i])

   * ``gap``: one-sided and absolute, after the paper's Fig. 2, which plots
     ``s_ii - s_ij`` and reads a pair as same-group when it is "close to zero"
     and cross-group when it is larger in size::

         C[i, j]  <=>  U[i, j] - U[i, i] <= gap

     ``gap`` is in the scores' units (the sum over the 64 embedding outputs,
     as the authors' ``RND_UNCERTAINTY_REDUCTION = "sum"``). A predictor
     that explains ``i``'s data better than ``i``'s own always passes; the
     band rejects it below ``(1 - alpha) U[i, i]``.

   An unscored pair (``nan``) is *unknown*: never compatible.
2. **Mutual compatibility.** An edge ``i -- j`` exists only when
   ``C[i, j] and C[j, i]``. The matrix is not symmetric, and one direction is
   not enough: a predictor trained on a broad distribution (or on data that
   is easy for every predictor) generalises to everybody's data, so its
   column is compatible everywhere; with an OR it would glue all clusters
   into one. Requiring both directions asks that each device's data also be
   explained by the other's predictor.
3. **Components.** Federations start as the connected components of the
   mutual-compatibility graph.
4. **Majority refinement (anti-chaining).** In a federation ``F`` the
   support of member ``m`` is::

       support(m) = #{j in F \\ {m} : edge m -- j} / #{j in F \\ {m} : U[m, j], U[j, m] both scored}

   While some member of a federation with two or more members has support
   ``<= 1/2``, the member with the lowest support (ties: the largest id) is
   split off, and supports are recomputed. One at a time, because removing
   a bridging outsider raises everyone else's support. The split-off
   members are clustered again by steps 3-4 among themselves; a core that
   falls apart (possible only with unscored pairs) is split into its
   components and refined again. Every final federation therefore has each
   member compatible with a strict majority of the fellow members it has
   scores for; with full scores any two members then share a neighbour
   (diameter <= 2), so long chains cannot survive.

Output order is deterministic: members ascending, federations by their
smallest member.

``label_propagation_clusters`` is the decentralized counterpart of step 3:
each device repeatedly takes the minimum label among itself and its
compatible neighbours, needing only its neighbours' labels per round.
"""

from __future__ import annotations

import warnings
from fractions import Fraction
from numbers import Integral, Real

import numpy as np

__all__ = [
    "CRITERIA",
    "compatible",
    "compatible_row",
    "compatibility_graph",
    "compatibility_clusters",
    "label_propagation_clusters",
]


#: The directed criteria (module docstring, step 1): the relative two-sided band and the absolute one-sided gap.
CRITERIA = ("band", "gap")

# --------------------------------------------------------------------------- checks


def _check_alpha(alpha: object, criterion: object = "band") -> float:
    """``alpha`` is the criterion's threshold: the band's relative half-width in [0, 1), or the gap >= 0."""
    if criterion not in CRITERIA:
        raise ValueError(f"The 'criterion' parameter must be one of {', '.join(CRITERIA)}; got {criterion!r} instead")
    if criterion == "gap":
        if isinstance(alpha, bool) or not isinstance(alpha, Real) or not (0.0 <= float(alpha) < float("inf")):
            raise ValueError(f"The 'alpha' parameter (the gap) must be a finite float >= 0; got {alpha!r} instead")
    elif isinstance(alpha, bool) or not isinstance(alpha, Real) or not (0.0 <= float(alpha) < 1.0):
        raise ValueError(f"The 'alpha' parameter must be in [0, 1); got {alpha!r} instead")
    return float(alpha)


def _check_novelty(U: object) -> np.ndarray:
    """A square float matrix of non-negative finite scores, ``nan`` = unscored, diagonal scored."""
    try:
        arr = np.array(U, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"The 'U' parameter must be a numeric matrix; got {type(U).__name__} instead") from None
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ValueError(f"The 'U' parameter must be a square (N, N) matrix; got shape {arr.shape} instead")
    known = ~np.isnan(arr)
    if np.isinf(arr).any():
        raise ValueError("The 'U' parameter must not contain inf; use nan for unscored pairs")
    if (arr[known] < 0).any():
        raise ValueError(f"The 'U' parameter must be >= 0 (novelties are squared errors); got min {arr[known].min()!r}")
    diag = np.diag(arr)
    if np.isnan(diag).any():
        bad = np.flatnonzero(np.isnan(diag)).tolist()
        raise ValueError(f"The diagonal of 'U' must be scored (each device scores its own predictor); nan at {bad}")
    return arr


def _check_adjacency(A: object) -> np.ndarray:
    arr = np.asarray(A)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ValueError(f"The 'compat_adjacency' parameter must be a square (N, N) matrix; got shape {arr.shape} instead")
    if arr.dtype != bool:
        if not np.isin(arr, (0, 1)).all():
            raise ValueError("The 'compat_adjacency' parameter must be boolean (or 0/1)")
        arr = arr.astype(bool)
    return arr


# --------------------------------------------------------------------------- criterion


def compatible(U: np.ndarray, alpha: float, *, criterion: str = "band") -> np.ndarray:
    """Directed compatibility (unscored -> False); row ``i`` is device ``i``'s verdict on the predictors it
    scored, the diagonal is True.

    ``band``: ``C[i, j] = (1 - alpha) U_ii <= U_ij <= (1 + alpha) U_ii``, which is
    ``|U_ij - U_ii| <= alpha * U_ii`` evaluated as a band, so the edges are inclusive in floating point too.
    ``gap``: ``C[i, j] = U_ij - U_ii <= alpha``, ``alpha`` then the absolute gap (>= 0). Both ours (module
    docstring).
    """
    U = _check_novelty(U)
    alpha = _check_alpha(alpha, criterion)
    return _compatible(U, alpha, criterion)


def _directed(own: np.ndarray | float, scores: np.ndarray, alpha: float, criterion: str) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # nan compares False: unscored is never compatible
        if criterion == "gap":
            return np.asarray(scores - own <= alpha)
        return np.asarray(((1.0 - alpha) * own <= scores) & ((1.0 + alpha) * own >= scores))


def _compatible(U: np.ndarray, alpha: float, criterion: str = "band") -> np.ndarray:
    C = _directed(np.diag(U)[:, None], U, alpha, criterion)
    np.fill_diagonal(C, True)
    return C


def compatible_row(row: np.ndarray, own: int, alpha: float, *, criterion: str = "band") -> np.ndarray:
    """Device ``own``'s verdicts on its row ``[s_own,1, ..., s_own,N]``: row ``own`` of :func:`compatible`
    (nan is never compatible), for a device that holds only its own row. Not checked: the fast path."""
    ok = _directed(row[own], row, alpha, criterion)
    ok[own] = True
    return ok


def compatibility_graph(U: np.ndarray, alpha: float, *, criterion: str = "band") -> np.ndarray:
    """Symmetric adjacency of mutual compatibility: ``C[i, j] and C[j, i]``, no self-loops."""
    C = compatible(U, alpha, criterion=criterion)
    A = C & C.T
    np.fill_diagonal(A, False)
    return A


# --------------------------------------------------------------------------- partition


def _components(nodes: list[int], A: np.ndarray) -> list[list[int]]:
    """Connected components of ``A`` restricted to ``nodes`` (each sorted; by smallest member)."""
    remaining = set(nodes)
    comps: list[list[int]] = []
    for start in sorted(nodes):
        if start not in remaining:
            continue
        remaining.discard(start)
        comp, frontier = [start], [start]
        while frontier:
            nxt = []
            for v in frontier:
                for w in np.flatnonzero(A[v]).tolist():
                    if w in remaining:
                        remaining.discard(w)
                        comp.append(w)
                        nxt.append(w)
            frontier = nxt
        comps.append(sorted(comp))
    return comps


def _support(m: int, core: list[int], A: np.ndarray, known: np.ndarray) -> Fraction:
    others = [j for j in core if j != m]
    n_known = int(known[m, others].sum())
    if n_known == 0:
        return Fraction(0)
    return Fraction(int(A[m, others].sum()), n_known)


def _peel(comp: list[int], A: np.ndarray, known: np.ndarray) -> tuple[list[int], list[int]]:
    """Split off lowest-support members until every member's support is > 1/2."""
    core = list(comp)
    peeled: list[int] = []
    while len(core) > 1:
        supports = {m: _support(m, core, A, known) for m in core}
        worst = min(core, key=lambda m: (supports[m], -m))
        if supports[worst] > Fraction(1, 2):
            break
        core.remove(worst)
        peeled.append(worst)
    return core, peeled


def _partition(A: np.ndarray, known: np.ndarray) -> list[list[int]]:
    out: list[list[int]] = []
    todo = [list(range(A.shape[0]))]
    while todo:
        nodes = todo.pop()
        for comp in _components(nodes, A):
            core, peeled = _peel(comp, A, known)
            if not peeled:
                out.append(comp)
                continue
            todo.append(peeled)
            todo.append(core)  # re-split if the core fell apart (only possible with unscored pairs)
    return sorted((sorted(f) for f in out), key=lambda f: f[0])


def compatibility_clusters(U: np.ndarray, alpha: float, *, criterion: str = "band") -> list[list[int]]:
    """Federations from the novelty matrix: mutual-compatibility components, majority-refined.

    See the module docstring for the exact rule (``criterion`` picks step 1's test, ``alpha`` its
    threshold). ``nan`` entries of ``U`` are unscored pairs (no edge, and not counted in a member's support).
    """
    U = _check_novelty(U)
    alpha = _check_alpha(alpha, criterion)
    if U.shape[0] == 0:
        return []
    C = _compatible(U, alpha, criterion)
    A = C & C.T
    np.fill_diagonal(A, False)
    scored = ~np.isnan(U)
    known = scored & scored.T
    np.fill_diagonal(known, False)
    return _partition(A, known)


def label_propagation_clusters(compat_adjacency: np.ndarray, *, max_iter: int = 100) -> tuple[list[list[int]], int]:
    """Decentralized federations by synchronous min-label propagation over compatible edges.

    Every device starts with its own id as label; in each round every device
    takes the minimum of its label and its compatible neighbours' labels.
    The result is the connected components of the mutual graph
    ``A & A.T`` (an asymmetric input is reduced to mutual edges, as in
    ``compatibility_graph``). Returns ``(clusters, iterations)`` where
    ``iterations`` counts rounds including the final round that changed
    nothing (each round costs one label message per device per neighbour);
    it is at most the diameter of the largest component plus one. If
    ``max_iter`` rounds pass without a quiet round, a ``RuntimeWarning`` is
    issued and the current labels are returned.
    """
    if isinstance(max_iter, bool) or not isinstance(max_iter, Integral) or max_iter < 1:
        raise ValueError(f"The 'max_iter' parameter must be an int >= 1; got {max_iter!r} instead")
    A = _check_adjacency(compat_adjacency)
    n = A.shape[0]
    if n == 0:
        return [], 0
    A = A & A.T
    np.fill_diagonal(A, False)
    labels = np.arange(n)
    iterations = 0
    stable = False
    while iterations < max_iter:
        iterations += 1
        neigh_min = np.where(A, labels[None, :], n).min(axis=1)
        new = np.minimum(labels, neigh_min)
        if np.array_equal(new, labels):
            stable = True
            break
        labels = new
    if not stable:
        warnings.warn(
            f"label propagation did not settle within max_iter={max_iter} rounds; labels may be partial",
            RuntimeWarning,
            stacklevel=2,
        )
    groups: dict[int, list[int]] = {}
    for node, lab in enumerate(labels.tolist()):
        groups.setdefault(lab, []).append(node)
    return sorted(groups.values(), key=lambda f: f[0]), iterations
