"""Whole-block kernels of the block-centric graph algorithms: one call does what would take one
superstep per hop or one Python-level pass per edge.

Each kernel has a scipy form (compiled loops: ``scipy.sparse`` CSR matvec, ``csgraph``
components and Dijkstra) and a numpy form with the same results bit for bit; the numpy form runs
when scipy is missing or ``MARIANA_NO_SCIPY=1`` is set (tests compare the two).

- ``csr_sum``: per row, the sum of ``x[indices]`` over the row's entries *in stored order*,
  sequentially from 0.0: scipy's ``csr_matvec`` with unit data (``1.0 * x`` is exact) and
  ``np.bincount`` with weights both add in that order, so PageRank keeps its ascending-source
  summation (bit-identical to ``PageRankVertex``); the matvec is ~5x faster than gather+bincount.
- ``components``: connected components of a symmetric CSR graph, each row labelled by the smallest
  row of its component.
- ``relax``: shortest distances inside a block from seeds that start at given distances; every
  distance is the minimum over paths of the left-to-right float sum ``((d0 + w1) + w2) + ...``,
  the value Bellman-Ford in supersteps reaches (float addition is monotone), so SSSP stays
  bit-identical to ``SSSPVertex``. With unit weights (BFS) every distance is a small integer, exact
  in float64, and seeds that all start at the same depth take a breadth-first search instead of
  Dijkstra (scipy's traversal, then the depths from the predecessors by pointer jumping).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

try:  # optional: the numpy forms below give the same bits
    from scipy.sparse import csr_matrix as _csr_matrix
    from scipy.sparse.csgraph import connected_components as _cc
    from scipy.sparse.csgraph import breadth_first_order as _bfo
    from scipy.sparse.csgraph import dijkstra as _dijkstra
except ImportError:  # pragma: no cover - scipy is a dependency; this is the fallback
    _csr_matrix = None

__all__ = ["have_scipy", "csr_sum", "components", "relax"]


def have_scipy() -> bool:
    """Whether the scipy kernels run (scipy importable and not switched off by MARIANA_NO_SCIPY)."""
    return _csr_matrix is not None and os.environ.get("MARIANA_NO_SCIPY", "") in ("", "0")


class CSRSum:
    """A fixed sparse pattern (rows ``indptr``, columns ``indices``) to sum vectors over, many times."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray) -> None:
        self.indptr, self.indices = indptr, indices
        self._m: Any = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        rows = len(self.indptr) - 1
        if have_scipy():
            if self._m is None or self._m.shape[1] != len(x):
                self._m = _csr_matrix((np.ones(len(self.indices)), self.indices, self.indptr), shape=(rows, len(x)))
            return self._m @ x
        dpos = np.repeat(np.arange(rows), np.diff(self.indptr))
        return np.bincount(dpos, weights=x[self.indices], minlength=rows)


def csr_sum(indptr: np.ndarray, indices: np.ndarray) -> CSRSum:
    """``f(x)[r] = sum(x[indices[indptr[r]:indptr[r+1]]])``, added in stored order."""
    return CSRSum(indptr, indices)


def components(indptr: np.ndarray, indices: np.ndarray, symmetric: bool = False) -> np.ndarray:
    """For each row of a CSR graph, the smallest row of its weakly connected component.
    ``symmetric``: every edge is stored in both directions (the CSR is its own transpose)."""
    k = len(indptr) - 1
    if not indices.size:
        return np.arange(k)
    if have_scipy():
        labels = _undirected_labels(indptr, indices) if symmetric else None
        if labels is None:
            m = _csr_matrix((np.ones(indices.size), indices, indptr), shape=(k, k))  # float64: no copy
            # (connection="strong" would skip the transpose, but takes minutes on a grid)
            _, labels = _cc(m, directed=True, connection="weak")
        first = np.full(int(labels.max()) + 1, k, dtype=np.int64)
        np.minimum.at(first, labels, np.arange(k))
        return first[labels]
    return _hook_components(k, np.repeat(np.arange(k), np.diff(indptr)), indices)


def _undirected_labels(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray | None:
    """Component labels of a symmetric CSR by scipy's own undirected labelling, which follows
    the rows of a CSR and of its transpose: given the rows only (they hold both directions), half
    the visits; the public call builds the transpose first (~4x the time on R-MAT).
    None where that internal function is not there as expected (other scipy versions)."""
    if len(indptr) > 2**31 or len(indices) >= 2**31:
        return None
    try:
        from scipy.sparse.csgraph._traversal import _connected_components_undirected as undirected
    except ImportError:
        return None
    ip, ix = indptr.astype(np.int32, copy=False), indices.astype(np.int32, copy=False)
    labels = np.empty(len(indptr) - 1, dtype=np.int32)
    try:  # a symmetric CSR reaches every neighbour through its own rows: the transpose is empty
        undirected(ix, ip, ix[:0], np.zeros_like(ip), labels)
    except (TypeError, ValueError):
        return None
    return labels


def _hook_components(k: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``components`` in numpy: hook every edge's larger root under the smaller, then jump
    pointers, until nothing moves (O(log n) vectorised rounds)."""
    parent = np.arange(k)
    while True:
        pu, pv = parent[u], parent[v]
        lo, hi = np.minimum(pu, pv), np.maximum(pu, pv)
        if np.array_equal(lo, hi):
            return parent
        np.minimum.at(parent, hi, lo)
        while True:
            pp = parent[parent]
            if np.array_equal(pp, parent):
                break
            parent = pp


class Relaxer:
    """Shortest distances over one block's internal edges (CSR: ``indptr``, ``indices`` local
    rows, ``weight``), from seeds with start distances; see the module note on bit-identity."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, weight: np.ndarray | None) -> None:
        self.unit = weight is None  # every edge weighs 1.0: hop counts
        self.indptr, self.indices = indptr, indices
        self.weight = np.ones(len(indices)) if weight is None else weight
        self.k = len(indptr) - 1

    #: frontier rounds before the rest goes to scipy's Dijkstra, which costs O(rows) per call
    #: whatever it reaches: a few boundary updates take a few cheap rounds, a long local
    #: propagation (a block newly reached, a high-diameter block) one Dijkstra
    ROUNDS = 16

    def __call__(self, dist: np.ndarray, seeds: np.ndarray, method: str | None = None) -> np.ndarray:
        """Lower ``dist`` (in place) to what the seeds' current distances reach (the rest of
        ``dist`` is a fixpoint already); the rows that went down. ``method``: "dijkstra",
        "frontier" or None (Dijkstra from the source, else frontier rounds, then Dijkstra from
        what is left): the same bits."""
        if not seeds.size or not self.indices.size:
            return seeds[:0]
        if method is None:
            method = "auto" if have_scipy() else "frontier"
        start = dist[seeds]
        if method == "auto" and self.unit and (start == start[0]).all():
            cand = self._bfs(dist, seeds, float(start[0]))
        elif method == "dijkstra" or (method == "auto" and not start.any()):
            cand = self._dijkstra(dist, seeds)
        else:
            cand, rest = self._frontier(dist, seeds, self.ROUNDS if method == "auto" else -1)
            if rest.size:
                cand = np.minimum(cand, self._dijkstra(cand, rest))
        better = np.flatnonzero(cand < dist)
        dist[better] = cand[better]
        return better

    def _dijkstra(self, dist: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        k = self.k
        start = dist[seeds]
        if not start.any():  # every seed at 0.0: 0.0 + w == w, plain multi-source Dijkstra
            return _dijkstra(self._matrix(), directed=True, indices=seeds, min_only=True)
        # a super-source (row k) with an edge of weight d0 to each seed: 0.0 + d0 == d0 exactly
        n = len(self.indices)
        indptr = np.append(self.indptr, n + seeds.size)
        m = _csr_matrix((np.concatenate((self.weight, start)), np.concatenate((self.indices, seeds)), indptr),
                        shape=(k + 1, k + 1))
        return _dijkstra(m, directed=True, indices=k, min_only=True)[:k]

    def _bfs(self, dist: np.ndarray, seeds: np.ndarray, d0: float) -> np.ndarray:
        """Unit weights, every seed at depth ``d0``: one breadth-first traversal (from a
        super-source, row k, when there are several seeds), depths from the predecessor tree."""
        k = self.k
        if seeds.size == 1:
            m, root, base = self._matrix(), int(seeds[0]), d0
        else:
            indptr = np.append(self.indptr, len(self.indices) + seeds.size)
            m = _csr_matrix((np.ones(len(self.indices) + seeds.size), np.concatenate((self.indices, seeds)), indptr),
                            shape=(k + 1, k + 1))
            root, base = k, d0 - 1.0
        order, pred = _bfo(m, root, directed=True, return_predecessors=True)
        hops = _levels(order, pred)
        cand = np.full(k, np.inf)
        mine = order[order < k]
        cand[mine] = base + hops[order < k]
        return np.minimum(cand, dist)

    def _matrix(self) -> Any:
        m = self.__dict__.get("_m")
        if m is None:
            m = self.__dict__["_m"] = _csr_matrix((self.weight, self.indices, self.indptr), shape=(self.k, self.k))
        return m

    def _frontier(self, dist: np.ndarray, seeds: np.ndarray, rounds: int) -> tuple[np.ndarray, np.ndarray]:
        """Bellman-Ford rounds over the rows that improved, at most ``rounds`` (-1: to the end):
        (candidates, the rows still to relax)."""
        cand = dist.copy()  # what is known was relaxed to a fixpoint already: only news propagate
        rows = seeds
        indptr, indices, weight = self.indptr, self.indices, self.weight
        while rows.size and rounds != 0:
            rounds -= 1
            starts, counts = indptr[rows], indptr[rows + 1] - indptr[rows]
            total = int(counts.sum())
            if not total:
                return cand, rows[:0]
            e = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts) + np.arange(total)
            via = np.repeat(cand[rows], counts) + weight[e]
            best = cand.copy()  # (a block-sized copy and scan per round measured 2.5x faster on a
            np.minimum.at(best, indices[e], via)  # 2-block grid than sorting the offers)
            rows = np.flatnonzero(best < cand)
            cand = best
        return cand, rows


def _levels(order: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """The hop count of each node in ``order`` (a breadth-first order from ``order[0]``, with the
    predecessors): parents are taken in queue order, so the position of a node's parent never
    goes down along ``order`` and each level ends where the previous one's children do: one
    ``searchsorted`` per level (pointer jumping measured 1.3x slower on a grid)."""
    n = len(order)
    pos = np.empty(len(pred), dtype=np.int64)
    pos[order] = np.arange(n)
    parent = pos[pred[order[1:]]]  # for positions 1..n-1
    if parent.size > 1 and (parent[1:] < parent[:-1]).any():  # not queue order: jump pointers
        hops = np.zeros(n, dtype=np.int64)
        anc = np.concatenate(([0], parent))
        hops[1:] = 1
        while True:
            up = anc[anc]
            if np.array_equal(up, anc):
                return hops
            hops += hops[anc]
            anc = up
    bounds, find = [0, 1], parent.searchsorted
    while bounds[-1] < n:
        bounds.append(int(find(bounds[-1], "left")) + 1)
    return np.repeat(np.arange(len(bounds) - 1, dtype=np.int64), np.diff(bounds))


def relax(indptr: np.ndarray, indices: np.ndarray, weight: np.ndarray | None) -> Relaxer:
    """A ``Relaxer`` over one block's internal edges (``weight`` None: every edge weighs 1.0)."""
    return Relaxer(indptr, indices, weight)
