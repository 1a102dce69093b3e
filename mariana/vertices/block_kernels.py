"""Whole-block kernels of the block-centric graph algorithms: one call does what would take one
superstep per hop or one Python-level pass per edge.

Each kernel has a scipy form (compiled loops: ``scipy.sparse`` CSR matvec, ``csgraph``
components and Dijkstra) and a numpy form with the same results bit for bit; the numpy form runs
when scipy is missing or ``MARIANA_NO_SCIPY=1`` is set (tests compare the two).

- ``csr_sum``: per row, the sum of ``x[indices]`` over the row's entries *in stored order*,
  sequentially from 0.0: scipy's ``csr_matvec`` with unit data (``1.0 * x`` is exact) and
  ``np.bincount`` with weights both add in that order, so PageRank keeps its ascending-source
  summation (bit-identical to ``PageRankVertex``); the matvec is ~5x faster than gather+bincount.
  It runs over row pieces that share one small array of ones (no unit data per entry).
- ``transpose``: a CSR's entries by column, rows ascending within a column (duplicates kept):
  scipy's ``tocsc``, one counting sort in C, where a stable argsort of the columns took ~5x longer.
- ``group_by``: the stable order of values by key (a counting sort), the same way.
- ``components``: connected components of a symmetric CSR graph, each row labelled by the smallest
  row of its component (a dense symmetric graph: from a sample of its entries first, Afforest).
- ``relax``: shortest distances inside a block from seeds that start at given distances; every
  distance is the minimum over paths of the left-to-right float sum ``((d0 + w1) + w2) + ...``,
  the value Bellman-Ford in supersteps reaches (float addition is monotone), so SSSP stays
  bit-identical to ``SSSPVertex``. With unit weights (BFS) every distance is a small integer, exact
  in float64, and seeds that all start at the same depth take a breadth-first search instead of
  Dijkstra (scipy's traversal; the depths from its queue order, one search per level).
- ``triangle_credits``: LCC's degrees and triangle sums inside one block (every neighbour local),
  exact integers; see its doc for the cost.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

try:  # optional: the numpy forms below give the same bits
    from scipy.sparse import csr_matrix as _csr_matrix
except ImportError:  # pragma: no cover - scipy is a dependency; this is the fallback
    _csr_matrix = None
try:  # scipy's C lookup of given (row, column) entries of a CSR; private: LCC's wedge form needs it
    from scipy.sparse._sparsetools import csr_sample_values as _sample
except ImportError:  # pragma: no cover - other scipy versions: the masked products instead
    _sample = None
try:  # scipy's C expansion of a CSR's row pointers into row ids (what tocoo uses); private
    from scipy.sparse._sparsetools import expandptr as _expandptr
except ImportError:  # pragma: no cover - other scipy versions: np.repeat
    _expandptr = None
try:  # scipy's C CSR matvec (what ``csr_matrix @ x`` calls); private: ``csr_sum`` by row pieces
    from scipy.sparse._sparsetools import csr_matvec as _matvec
except ImportError:  # pragma: no cover - other scipy versions: a csr_matrix with unit data
    _matvec = None

__all__ = ["have_scipy", "import_traversals", "row_ids", "csr_sum", "transpose", "group_by", "stable_argsort", "components",
           "relax", "triangle_credits"]


def _csgraph() -> Any:
    """``scipy.sparse.csgraph``, imported by the jobs that use it (``import_traversals``): ~12 MB
    of every process, and its linear-algebra imports' start-up, that PageRank, CDLP and LCC never use."""
    import scipy.sparse.csgraph as csgraph

    return csgraph


def import_traversals() -> None:
    """Import scipy's graph traversals now: WCC, BFS and SSSP call this as their blocks are made,
    so that the first processing superstep does not pay the import (~0.1-0.2 s)."""
    if have_scipy():
        _csgraph()


def have_scipy() -> bool:
    """Whether the scipy kernels run (scipy importable and not switched off by MARIANA_NO_SCIPY)."""
    return _csr_matrix is not None and os.environ.get("MARIANA_NO_SCIPY", "") in ("", "0")


def row_ids(indptr: np.ndarray, dtype: Any = np.int32) -> np.ndarray:
    """The row of every entry of a CSR, ``np.repeat(np.arange(k, dtype), np.diff(indptr))``: with
    scipy its C loop (``expandptr``), about half the time of ``np.repeat`` on a graph's rows."""
    k = len(indptr) - 1
    it = np.dtype(dtype)
    if (_expandptr is not None and have_scipy() and k >= 0 and it in (np.dtype(np.int32), np.dtype(np.int64))
            and int(indptr[0]) == 0 and (it == np.int64 or int(indptr[-1]) < 2 ** 31)):
        out = np.empty(int(indptr[-1]), it)
        _expandptr(k, indptr.astype(it, copy=False), out)
        return out
    return np.repeat(np.arange(max(k, 0), dtype=it), np.diff(indptr))


#: ``csr_sum`` sums its rows in pieces of about this many entries, so that the unit data its matvec
#: reads is one small array (2 MB) for every piece, not 8 bytes an entry for the job's life
SUM_PIECE = 1 << 18


class CSRSum:
    """A fixed sparse pattern (rows ``indptr``, columns ``indices``) to sum vectors over, many times.

    With scipy: its C matvec over row pieces of ~``SUM_PIECE`` entries, every piece reading the
    same array of ones (a piece's row pointers rebased, 4 bytes a row). A ``csr_matrix`` with unit
    data held 8 bytes an entry more: 33 MB of each scale-19 PageRank worker on two. As fast."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray) -> None:
        self.indptr, self.indices = indptr, indices
        self._pieces: list[tuple[int, int, np.ndarray, np.ndarray]] | None = None
        self._ones: np.ndarray | None = None
        self._m: Any = None

    def _cut(self) -> None:
        """Row pieces of about ``SUM_PIECE`` entries (a longer row is a piece of its own)."""
        indptr, k = self.indptr, len(self.indptr) - 1
        at = np.arange(SUM_PIECE, int(indptr[-1]), SUM_PIECE, dtype=indptr.dtype)
        cuts = np.unique(np.concatenate(([0], np.searchsorted(indptr, at, side="right") - 1, [k]))).tolist()
        self._pieces = []
        for r0, r1 in zip(cuts[:-1], cuts[1:]):
            e0, e1 = int(indptr[r0]), int(indptr[r1])
            if r1 > r0:
                self._pieces.append((r0, r1, (indptr[r0:r1 + 1] - e0).astype(np.int32), self.indices[e0:e1]))
        self._ones = np.ones(max((len(p[3]) for p in self._pieces), default=0))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        rows = len(self.indptr) - 1
        if have_scipy():
            y = np.zeros(rows)
            if _matvec is not None and len(x) < 2 ** 31 and self.indices.dtype == np.int32:
                if self._pieces is None:
                    self._cut()
                x = np.ascontiguousarray(x, dtype=np.float64)
                for r0, r1, ptr, cols in self._pieces:  # type: ignore[union-attr]
                    _matvec(r1 - r0, len(x), ptr, cols, self._ones, x, y[r0:r1])
                return y
            if self._m is None or self._m.shape[1] != len(x):
                self._m = _csr_matrix((np.ones(len(self.indices)), self.indices, self.indptr), shape=(rows, len(x)))
            return self._m @ x
        dpos = np.repeat(np.arange(rows), np.diff(self.indptr))
        return np.bincount(dpos, weights=x[self.indices], minlength=rows)


def csr_sum(indptr: np.ndarray, indices: np.ndarray) -> CSRSum:
    """``f(x)[r] = sum(x[indices[indptr[r]:indptr[r+1]]])``, added in stored order."""
    return CSRSum(indptr, indices)


def transpose(indptr: np.ndarray, indices: np.ndarray, ncols: int) -> tuple[np.ndarray, np.ndarray]:
    """The CSR pattern (``indptr``, column ``indices``) by column: ``(column indptr, rows)``, each
    column's rows ascending, duplicates kept. The pattern only: ~5 bytes an entry of temporaries."""
    k = len(indptr) - 1
    if have_scipy() and max(len(indices), k, ncols) < 2 ** 31:
        m = _csr_matrix((np.ones(len(indices), np.int8), indices.astype(np.int32, copy=False),
                         indptr.astype(np.int32)), shape=(k, ncols))
        t = m.tocsc()
        del m
        return t.indptr, t.indices
    order = np.argsort(indices, kind="stable")
    rows = np.repeat(np.arange(k, dtype=np.int32 if k < 2 ** 31 else np.int64), np.diff(indptr))[order]
    return np.concatenate(([0], np.cumsum(np.bincount(indices, minlength=ncols)))), rows


def stable_argsort(a: np.ndarray) -> np.ndarray:
    """``np.argsort(a, kind="stable")``; for non-negative int32 values by two 16-bit radix passes
    (numpy sorts 16-bit keys by radix; 3x faster than its merge sort on millions of edges)."""
    if a.dtype != np.int32 or a.size < 1024 or a.min() < 0:
        return np.argsort(a, kind="stable")
    low = np.argsort((a & 0xFFFF).astype(np.uint16), kind="stable")
    return low[np.argsort((a[low] >> 16).astype(np.uint16), kind="stable")]


def group_by(keys: np.ndarray, nkeys: int, values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A stable counting sort of int ``keys`` in [0, nkeys): ``(indptr, order)``, key ``j``'s
    positions being ``order[indptr[j]:indptr[j + 1]]``, ascending; with ``values``, those values
    in that order instead of the positions. scipy: one ``tocsc`` of a one-row matrix (the
    positions or values as its data), ~3x faster than the radix argsort of the numpy form."""
    n = len(keys)
    if have_scipy() and max(n, nkeys) < 2 ** 31:
        data = np.arange(n, dtype=np.int32) if values is None else values
        t = _csr_matrix((data, keys.astype(np.int32, copy=False), np.array([0, n], np.int32)), shape=(1, nkeys)).tocsc()
        return t.indptr, t.data
    order = stable_argsort(keys)
    return np.concatenate(([0], np.cumsum(np.bincount(keys, minlength=nkeys)))), order if values is None else values[order]


#: ``components`` of a symmetric graph with at least this many entries per row on average
#: first labels a sample (each row's first ``SAMPLE`` entries); see ``_sampled_labels``
SAMPLE_DEGREE = 8
SAMPLE = 2


def components(indptr: np.ndarray, indices: np.ndarray, symmetric: bool = False,
               cols: np.ndarray | None = None) -> np.ndarray:
    """For each row of a CSR graph, the smallest row of its weakly connected component.
    ``symmetric``: every edge is stored in both directions (the CSR is its own transpose).
    ``cols``: the row of each value in ``indices`` (None: the values are rows)."""
    k = len(indptr) - 1
    if not indices.size:
        return np.arange(k)
    if have_scipy():
        labels = None
        if symmetric and indices.size >= SAMPLE_DEGREE * k:
            labels = _sampled_labels(k, indptr, indices, cols)
        if cols is not None and labels is None:
            indices = cols[indices]
        if symmetric and labels is None:
            labels = _undirected_labels(indptr, indices)
        if labels is None:
            m = _csr_matrix((np.ones(indices.size), indices, indptr), shape=(k, k))  # float64: no copy
            # (connection="strong" would skip the transpose, but takes minutes on a grid)
            _, labels = _csgraph().connected_components(m, directed=True, connection="weak")
        first = np.full(int(labels.max()) + 1, k, dtype=np.int64)
        np.minimum.at(first, labels, np.arange(k))
        return first[labels]
    return _hook_components(k, np.repeat(np.arange(k), np.diff(indptr)), indices if cols is None else cols[indices])


def _sampled_labels(k: int, indptr: np.ndarray, indices: np.ndarray, cols: np.ndarray | None) -> np.ndarray | None:
    """Component labels of a symmetric graph from few of its entries (Afforest, Sutton et al. 2018):
    label the graph of every row's first ``SAMPLE`` entries; the largest component found keeps the
    rest of its rows' entries unread, every other row adds them (joining the sample's components:
    labelled as a graph over those), and the labels of the sample plus those are the graph's.
    Exact because the graph is symmetric: an unread entry u -> v has u in the largest component,
    and if v is not, v's own row adds v -> u. A dense graph with a giant
    component (R-MAT) is then labelled from a fraction of its entries; None where the rows to add
    hold over half the entries (then the whole graph is labelled instead)."""
    if len(indices) >= 2 ** 31 or k >= 2 ** 31:
        return None
    ip = indptr.astype(np.int64, copy=False)
    deg = np.diff(ip)
    s_src, s_pos = [], []
    for j in range(SAMPLE):
        r = np.flatnonzero(deg > j)
        s_src.append(r)
        s_pos.append(ip[r] + j)
    s_dst = indices[np.concatenate(s_pos)]
    if cols is not None:
        s_dst = cols[s_dst]
    labels = _labels_of(k, np.concatenate(s_src), s_dst)
    giant = int(np.argmax(np.bincount(labels)))
    rest = np.flatnonzero((deg > SAMPLE) & (labels != giant))
    starts, counts = ip[rest] + SAMPLE, deg[rest] - SAMPLE
    total = int(counts.sum())
    if 2 * total > indices.size:
        return None
    e = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts) + np.arange(total)
    r_dst = indices[e] if cols is None else cols[indices[e]]
    # the rest joins the sample's components: a graph over them (smaller still), then through it
    return _labels_of(int(labels.max()) + 1, labels[np.repeat(rest, counts)], labels[r_dst])[labels]


def _labels_of(k: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """scipy's component labels of the undirected graph of the edges (src, dst)."""
    src, dst = src.astype(np.int32, copy=False), dst.astype(np.int32, copy=False)
    ptr, idx = group_by(src, k, dst)
    t_ptr, t_idx = group_by(dst, k, src)  # the transpose
    labels = _undirected_labels(ptr, idx, t_ptr, t_idx)
    if labels is None:
        _, labels = _csgraph().connected_components(_csr_matrix((np.ones(idx.size), idx, ptr), shape=(k, k)), directed=False)
    return labels


def _undirected_labels(indptr: np.ndarray, indices: np.ndarray, t_indptr: np.ndarray | None = None,
                       t_indices: np.ndarray | None = None) -> np.ndarray | None:
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
    if t_indptr is None or t_indices is None:  # a symmetric CSR reaches every neighbour through its own
        t_ip, t_ix = np.zeros_like(ip), ix[:0]  # rows: the transpose is empty
    else:
        t_ip, t_ix = t_indptr.astype(np.int32, copy=False), t_indices.astype(np.int32, copy=False)
    try:
        undirected(ix, ip, t_ix, t_ip, labels)
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
            return _csgraph().dijkstra(self._matrix(), directed=True, indices=seeds, min_only=True)
        # a super-source (row k) with an edge of weight d0 to each seed: 0.0 + d0 == d0 exactly
        n = len(self.indices)
        indptr = np.append(self.indptr, n + seeds.size)
        m = _csr_matrix((np.concatenate((self.weight, start)), np.concatenate((self.indices, seeds)), indptr),
                        shape=(k + 1, k + 1))
        return _csgraph().dijkstra(m, directed=True, indices=k, min_only=True)[:k]

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
        order, pred = _csgraph().breadth_first_order(m, root, directed=True, return_predecessors=True)
        hops = _levels(order, pred)
        cand = np.full(k, np.inf)
        if seeds.size == 1:  # (no super-source: every node of the order is a row)
            cand[order] = hops + base
        else:
            mine = order < k
            cand[order[mine]] = base + hops[mine]
        return np.minimum(cand, dist, out=cand)

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
    it: Any = np.int32 if len(pred) < 2 ** 31 else np.int64  # (32 bits: the scatter takes a third of the time)
    pos = np.empty(len(pred), dtype=it)
    pos[order] = np.arange(n, dtype=it)
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
        bounds.append(int(find(it(bounds[-1]), "left")) + 1)  # (a key of the array's type: no cast of it)
    return np.repeat(np.arange(len(bounds) - 1, dtype=np.int64), np.diff(bounds))


def relax(indptr: np.ndarray, indices: np.ndarray, weight: np.ndarray | None) -> Relaxer:
    """A ``Relaxer`` over one block's internal edges (``weight`` None: every edge weighs 1.0)."""
    return Relaxer(indptr, indices, weight)


#: at most about this many length-2 paths (scipy) or wedges (numpy) per chunk of rows: bounds
#: the memory of ``triangle_credits`` whatever the degrees
TRIANGLE_CHUNK = 1 << 22


def triangle_credits(indptr: np.ndarray, indices: np.ndarray, symmetric: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """LCC's counts over a directed graph given as a CSR of out-edges (rows and columns the same
    ``k`` vertices; duplicates and self-loops allowed, ignored): ``(deg, tri)`` with ``deg[v]`` =
    |N(v)|, N(v) the in- plus out-neighbours other than v, and ``tri[v]`` the number of directed
    edges among N(v) (int64, exact; ``deg`` is int32 where no degree exceeds ``_FEW``).

    With ``M[a, b]`` the number of directed edges between a and b (0..2) and the vertices ranked
    by (degree, row), each triangle v < x < w (by rank) adds M[x, w] to v, M[v, w] to x and
    M[v, x] to w; ``U`` is M kept on the edges that go up in rank (``out_U(v)`` entries in row v).
    scipy form, two integer sparse products masked by U's pattern: (U @ U)[v, w] sums over the
    length-2 paths v -> x -> w (sum over x of in_U(x) out_U(x) terms) M[v, x] and M[x, w] at once
    (packed in one int64), which credits v (row sums) and w (column sums); (U^T @ U)[x, w] sums
    M[v, w] over the pairs of higher neighbours of each v (sum over v of out_U(v)^2 terms),
    which credits x. out_U(v) <= sqrt(2m) (every higher-ranked neighbour has degree >= v's), so
    both are O(m sqrt(m)) whatever the largest degree (unranked, a hub of degree d costs d^2);
    rows go in chunks of about ``TRIANGLE_CHUNK`` terms. numpy form: the same wedges of each v
    enumerated, the closing edge looked up by binary search; the same integers.
    ``symmetric``: every edge is stored both ways (an undirected graph as loaded), so M is 2 on
    every neighbour pair and needs no transpose."""
    k = len(indptr) - 1
    if have_scipy():
        return _triangles_scipy(k, indptr, indices, symmetric)
    rows = np.repeat(np.arange(k, dtype=np.int64), np.diff(indptr))
    cols = indices.astype(np.int64)
    keep = rows != cols
    return _triangles_numpy(k, rows[keep], cols[keep])


def _rank_up(k: int, deg: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Which entries (row, col) go up in rank (degree, row)."""
    return (deg[cols] > deg[rows]) | ((deg[cols] == deg[rows]) & (cols > rows))


def _row_chunks(work: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive row ranges of about ``TRIANGLE_CHUNK`` work each (at least one row)."""
    k = len(work)
    if not k or int(work.sum()) <= TRIANGLE_CHUNK:
        return [(0, k)] if k else []
    cum = np.cumsum(work)
    out, lo = [], 0
    while lo < k:
        base = int(cum[lo - 1]) if lo else 0
        hi = max(int(np.searchsorted(cum, base + TRIANGLE_CHUNK, side="right")), lo + 1)
        out.append((lo, min(hi, k)))
        lo = hi
    return out


#: the packing of two sums in one int64 product term: (a * _PACK + 1) * (_PACK + b)
_PACK = 1 << 20


def _triangles_scipy(k: int, indptr: np.ndarray, indices: np.ndarray, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    few = _few_symmetric(k, indptr, indices) if symmetric and _sample is not None else None
    if few is not None:
        return few
    oriented = _orient_symmetric(k, indptr, indices) if symmetric else None
    if oriented is not None:
        deg, rank, uptr, ucol = oriented
        umult = None
    else:
        deg, rank, uptr, ucol, umult = _orient(k, indptr, indices, symmetric)
    if not ucol.size:
        return deg.astype(np.int64), np.zeros(k, dtype=np.int64)
    out_u = np.diff(uptr).astype(np.int64)
    wedges = int(np.dot(out_u, out_u - 1)) // 2
    if _sample is not None and wedges <= WEDGE_FACTOR * ucol.size:
        tri = _wedge_triangles(k, uptr, ucol, umult, rank, out_u, wedges)
        assert tri is not None  # (ranked: U is canonical, no repeats)
        return deg.astype(np.int64), tri
    del rank, out_u
    low, high, mid = oriented_triangles(k, k, uptr, ucol, umult, None)
    return deg.astype(np.int64), low + high + mid


def _rank(k: int, deg: np.ndarray) -> np.ndarray:
    """The rank (degree, row) of every row as one integer (int32 where it fits)."""
    it: Any = np.int32 if k * (int(deg.max(initial=0)) + 1) < 2 ** 31 else np.int64
    rank = deg.astype(it)
    rank *= it(k)
    rank += np.arange(k, dtype=it)
    return rank


def _few_symmetric(k: int, indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``triangle_credits`` of a symmetric CSR whose degrees are at most ``_FEW`` (a grid, a road
    network), its rows in any order: U is each row's entries above its row number, compacted in
    place (no sort, no transpose: at such degrees any order keeps the wedges few), and its wedges
    are checked one by one (``_wedge_triangles``; scipy's lookup scans an unsorted row). None
    where it does not apply: larger degrees, indices past 32 bits, more than ``WEDGE_FACTOR``
    wedges an entry of U, or a repeated entry (then the general path sums repeats). A repeat
    shows as a wedge whose two ends are one vertex, in the row of its lower end, as the matrix is
    symmetric. Grid-18 as the LCC job loads it: ~0.75x the general path's time."""
    n = len(indices)
    if not n or n >= 2 ** 31 or k >= 2 ** 31:
        return None
    ip = indptr.astype(np.int32)  # (a copy: compacted in place below)
    deg = np.diff(ip)  # |N(v)|: the row's entries but its self-loops (a repeat sends it away)
    if int(deg.max()) > _FEW:
        return None
    rows = row_ids(ip)
    col = indices.astype(np.int32)  # a copy, compacted in place below
    mask = np.equal(col, rows)
    if mask.any():
        deg -= np.bincount(rows[mask], minlength=k).astype(np.int32)
    up = np.greater(col, rows, out=mask)
    del rows
    u = _csr_matrix((up, col, ip), shape=(k, k))
    u.eliminate_zeros()  # (compacts col)
    out_u = np.diff(u.indptr)
    # C(n, 2) = 1 + 2 + ... + (n - 1): each row with more than q entries has q wedges ending at its q-th
    wedges = sum(q * int(np.count_nonzero(out_u > q)) for q in range(1, int(out_u.max(initial=0))))
    if wedges > WEDGE_FACTOR * u.indices.size:
        return None
    tri = _wedge_triangles(k, u.indptr, u.indices, None, None, out_u, wedges)
    return None if tri is None else (deg, tri)


def _orient_symmetric(k: int, indptr: np.ndarray, indices: np.ndarray) -> tuple[Any, ...] | None:
    """A symmetric CSR's (deg, rank, uptr, ucol) without sorting it (bounded degrees take
    ``_few_symmetric`` first): the entries going *down* in rank are compacted in place (scipy's
    ``eliminate_zeros``), and their transpose (a counting sort, ``tocsc``) is U with sorted rows,
    since A is its own transpose; self-loops go neither way and |N(v)| = out_U(v) + out_D(v).
    None when there are repeated entries (then U has them too) or the indices do not fit 32 bits:
    the general path (which sorts) runs."""
    if len(indices) >= 2 ** 31 or k >= 2 ** 31 or not len(indices):
        return None
    ip = indptr.astype(np.int32)  # (a copy: compacted in place below)
    raw = np.diff(ip)
    rank = _rank(k, raw)
    col = rank[indices]  # each entry's column's rank: a fresh array, compacted in place below
    down = np.less(col, np.repeat(rank, raw))
    d = _csr_matrix((down, col, ip), shape=(k, k))
    del down, raw
    d.eliminate_zeros()  # (compacts col)
    np.remainder(d.indices, col.dtype.type(k), out=d.indices)  # rank -> column
    u = d.tocsc()  # D^T = U, rows sorted
    if not u.has_canonical_format:  # repeated entries
        return None
    deg = np.diff(u.indptr)
    deg += np.diff(d.indptr)
    return deg, rank, u.indptr, u.indices


def _orient(k: int, indptr: np.ndarray, indices: np.ndarray, symmetric: bool) -> tuple[Any, ...]:
    """(deg, rank, uptr, ucol, umult) of the canonical adjacency (sorted, no repeats, no loops)."""
    a = _csr_matrix((np.ones(indices.size, dtype=bool), indices, indptr), shape=(k, k))
    canonical, loops = a.has_canonical_format, bool(a.nnz) and bool(a.diagonal().any())  # (each one pass)
    if not canonical or loops:
        a = a.copy()  # (both work in place: the caller's arrays stay as they are)
    if not canonical:
        a.sum_duplicates()  # (bools: repeated edges stay True)
    if loops:
        a.setdiag(False)
        a.eliminate_zeros()
    mult = None  # M is 2 on every neighbour pair (every edge both ways)
    if not symmetric:
        a = a.astype(np.int8)
        a = (a + a.T.tocsr()).tocsr()  # 1 or 2 on every neighbour pair, canonical
        mult = a.data
    deg = np.diff(a.indptr)
    rank = _rank(k, deg)
    up = np.flatnonzero(np.greater(rank[a.indices], np.repeat(rank, deg)))  # (faster than a cumsum of bools)
    uptr = np.searchsorted(up, a.indptr)
    ucol = a.indices[up]
    umult = None if mult is None else mult[up].astype(np.int64)
    return deg, rank, uptr, ucol, umult


#: the wedges of the rank-oriented adjacency are checked one by one (``_wedge_triangles``) when
#: there are at most this many per oriented edge; else the masked products (whose cost grows
#: with the length-2 paths, not the wedges) run
WEDGE_FACTOR = 4


def _wedge_triangles(k: int, uptr: np.ndarray, ucol: np.ndarray, umult: np.ndarray | None, rank: np.ndarray | None,
                     out_u: np.ndarray, wedges: int) -> np.ndarray | None:
    """``triangle_credits``' sums by listing the wedges of U: each pair of entries (x, w) of a row
    v (x ranked below w; ``rank`` None: by row number, U's rows in any order), closed when U has
    x -> w (scipy's ``csr_sample_values``: a search in row x, or a scan where rows are unsorted,
    in C); per triangle v gets M[x, w], x M[v, w] and w M[v, x]. Costs the wedges, sum of
    C(out_U(v), 2) (few where degrees are bounded: one per vertex on a grid), in chunks of about
    ``TRIANGLE_CHUNK``; 32-bit indices where they fit (fresh pages are a good part of the time).
    None (by row number only) when a row of U repeats an entry."""
    it: Any = np.int32 if ucol.size < 2 ** 31 and k < 2 ** 31 else np.int64
    uptr, ucol = uptr.astype(it, copy=False), ucol.astype(it, copy=False)
    mult = np.full(ucol.size, 2, dtype=np.int8) if umult is None else umult.astype(np.int8)  # M: 1 or 2
    tri = np.zeros(k, dtype=np.int64)
    for i, j in _wedge_pairs(k, uptr, out_u, wedges, it):
        total = i.size
        a, b = np.take(ucol, i), np.take(ucol, j)  # (take: a third less time than ucol[i] with int32 indices)
        if rank is None:  # ordered by row number
            w = np.maximum(a, b)
            x = np.minimum(a, b, out=a)  # (fresh pages are a good part of the time)
            if np.equal(x, w).any():  # a repeated entry
                return None
            swap = None
        else:
            swap = rank[a] > rank[b]  # x = the lower-ranked of the two
            x, w = np.where(swap, b, a), np.where(swap, a, b)
        del a, b
        mxw = np.zeros(total, dtype=np.int8)
        _sample(k, k, uptr, ucol, mult, total, x, w, mxw)
        found = np.flatnonzero(mxw)
        if not found.size:
            continue
        i, j, x, w = i[found], j[found], x[found], w[found]
        swap = np.take(ucol, i) > np.take(ucol, j) if swap is None else swap[found]
        mvx, mvw = np.where(swap, mult[j], mult[i]), np.where(swap, mult[i], mult[j])
        v = np.searchsorted(uptr, i, side="right") - 1
        tri += np.bincount(v, weights=mxw[found], minlength=k).astype(np.int64)
        tri += np.bincount(x, weights=mvw, minlength=k).astype(np.int64)
        tri += np.bincount(w, weights=mvx, minlength=k).astype(np.int64)
    return tri


#: rows of at most this many U entries take ``_wedge_pairs``' loop over positions
_FEW = 16


def _wedge_pairs(k: int, uptr: np.ndarray, out_u: np.ndarray, wedges: int, it: Any) -> Any:
    """The wedges of U as entry pairs (i, j), i before j in the same row, in chunks of about
    ``TRIANGLE_CHUNK``. Rows of at most ``_FEW`` entries (a grid: at most 4): one k-sized pass per
    position q, pairing every earlier position with it; else per entry its pairs to the row's end."""
    if not wedges:
        return
    top = int(out_u.max())
    if top <= _FEW and wedges <= TRIANGLE_CHUNK:
        i, j = np.empty(wedges, it), np.empty(wedges, it)  # (filled in place: no concatenation)
        e = 0
        for q in range(1, top):
            at = uptr[:-1][out_u > q][:, None]  # rows with an entry at position q: pairs (p, q), p < q
            f = e + q * len(at)
            np.add(at, np.arange(q, dtype=it), out=i[e:f].reshape(-1, q))
            np.add(at, it(q), out=j[e:f].reshape(-1, q))
            e = f
        yield i, j
        return
    for lo, hi in _row_chunks(out_u * (out_u - 1) // 2) if wedges > TRIANGLE_CHUNK else [(0, k)]:
        e0, e1 = int(uptr[lo]), int(uptr[hi])
        per = np.repeat(uptr[lo + 1:hi + 1], out_u[lo:hi])  # pairs (i, j > i) of each entry i: to its row's end
        per -= np.arange(e0 + 1, e1 + 1, dtype=it)
        total = int(per.sum())
        if not total:
            continue
        i = np.repeat(np.arange(e0, e1, dtype=it), per)
        j = np.arange(1, total + 1, dtype=it)
        j -= np.repeat(np.cumsum(per, dtype=it) - per, per)
        j += i
        yield i, j


def oriented_triangles(k: int, c: int, uptr: np.ndarray, ucol: np.ndarray, umult: np.ndarray | None,
                       lrow: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The scipy core of ``triangle_credits``, also for one block of several: ``U`` has ``k`` rows
    (vertices v) and ``c`` columns (their higher-ranked neighbours, by a compact id), entries
    sorted by column within each row (``uptr``, ``ucol``), values M (``umult``; None: 2
    everywhere); ``lrow[e]`` is the row of entry e's neighbour when that neighbour is itself one of
    the k rows, else -1 (None: every column is a row, ``lrow = ucol``). Over the triangles
    v < x < w with v and x among the rows (w anywhere): ``(low, high, mid)``, low[v] += M[x, w],
    high[column of w] += M[v, x], mid[x] += M[v, w]."""
    low, mid = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
    high = np.zeros(c, dtype=np.int64)
    out_u = np.diff(uptr)
    if lrow is None:
        lrow, local = ucol, None
    else:
        local = np.flatnonzero(lrow >= 0)
        if not local.size:
            return low, high, mid
    # the left factor keeps only the edges v -> x that may start a triangle (see _may_close)
    keep = np.flatnonzero(_may_close(k, ucol, uptr, None, ucol)) if local is None else \
        local[_may_close(k, ucol, uptr, local, lrow[local])]
    if not keep.size:  # (a grid: no two higher neighbourhoods meet)
        return low, high, mid
    mask = _csr_matrix((np.ones(ucol.size, dtype=np.int32), ucol, uptr), shape=(k, c))
    closing = np.zeros(ucol.size, dtype=bool)  # the U edges v -> w that close a triangle
    lptr = np.searchsorted(keep, uptr)
    lcol = lrow[keep]

    def left(data: np.ndarray) -> Any:
        return _csr_matrix((data[keep], lcol, lptr), shape=(k, k))

    if umult is None:  # M = 2 everywhere: counts of paths, doubled
        products = [(left(mask.data), mask, "counts")]
    elif 5 * int(out_u.max()) < _PACK:
        # v -> x -> w: left M[v, x] * P + 1, right P + M[x, w]: the sum over x is sum M[v,x] * P^2
        # + sum (M[v,x] M[x,w] + 1) * P + sum M[x,w], every field < P (x: at most out_U(v) terms)
        right = _csr_matrix((umult + _PACK, ucol, uptr), shape=(k, c))
        products = [(left(umult * _PACK + 1), right, "packed")]
    else:  # out of the packing's range (m beyond ~10^10): one product per sum
        mu = _csr_matrix((umult, ucol, uptr), shape=(k, c))
        products = [(left(mask.data), mu, "rows"), (left(umult), mask, "columns")]
    terms = int(out_u[lcol].sum())
    for lft, rgt, kind in products:
        for lo, hi in (_row_chunks(lft @ out_u) if terms > TRIANGLE_CHUNK else [(0, k)]):
            p = (lft[lo:hi] @ rgt).multiply(mask[lo:hi]).tocsr()
            if not p.nnz:
                continue
            p.sum_duplicates()  # (sorted: its entries are U's, in U's order)
            sums = p.data.astype(np.int64)
            closing[uptr[lo] + _positions(mask, lo, hi, p)] = True
            lows = {"counts": 2 * sums, "packed": sums % _PACK, "rows": sums}.get(kind)
            if lows is not None:
                low[lo:hi] += _row_sums(p.indptr, lows)
            highs = {"counts": 2 * sums, "packed": sums // (_PACK * _PACK), "columns": sums}.get(kind)
            if highs is not None:
                high += np.bincount(p.indices, weights=highs, minlength=c).astype(np.int64)
    if not closing.any():
        return low, high, mid
    # x <- v -> w with v -> w closing: the sum over v of M[v, w], credited to x (only the closing
    # edges on the right: the pairs of each v that close nothing cost nothing)
    lt = _csr_matrix((np.ones(keep.size, dtype=np.int32), lcol, lptr), shape=(k, k)).T.tocsr()
    zptr = np.searchsorted(np.flatnonzero(closing), uptr)
    z = _csr_matrix((2 * mask.data[closing] if umult is None else umult[closing], ucol[closing], zptr), shape=(k, c))
    for lo, hi in _row_chunks(lt @ np.diff(zptr)):
        p = (lt[lo:hi] @ z).multiply(mask[lo:hi]).tocsr()
        mid[lo:hi] += _row_sums(p.indptr, p.data.astype(np.int64))
    return low, high, mid


_BITS = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))


def _may_close(k: int, ucol: np.ndarray, uptr: np.ndarray, sel: np.ndarray | None, xrow: np.ndarray) -> np.ndarray:
    """For the entries ``sel`` (v -> x, x = row ``xrow``; None: all) of U, whether U(v) and U(x) may meet (a
    triangle v < x < w needs w in both): a 64-bit signature per row, one hashed bit per entry,
    must overlap. A necessary test only (it cuts the products' work where triangles are rare: on a
    grid to ~6%)."""
    bits = _BITS[(ucol.astype(np.uint32) * np.uint32(0x9E3779B1)) >> np.uint32(26)]  # a multiplicative hash
    out_u = np.diff(uptr)
    sig = np.zeros(k, dtype=np.uint64)
    rows = np.flatnonzero(out_u)
    sig[rows] = np.bitwise_or.reduceat(bits, uptr[rows]) if rows.size else sig[:0]
    vsig = np.repeat(sig, out_u) if sel is None else sig[np.searchsorted(uptr, sel, side="right") - 1]
    return (vsig & sig[xrow]) != 0


def _positions(mask: Any, lo: int, hi: int, p: Any) -> np.ndarray:
    """Where each entry of ``p`` (a sorted subset of ``mask``'s rows lo:hi) sits in those rows."""
    sub = mask[lo:hi]
    rows = np.repeat(np.arange(hi - lo, dtype=np.int64), np.diff(p.indptr))
    key = np.repeat(np.arange(hi - lo, dtype=np.int64), np.diff(sub.indptr)) * mask.shape[1] + sub.indices
    return np.searchsorted(key, rows * mask.shape[1] + p.indices)


def _row_sums(indptr: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per-row sums of a CSR's values (int64, exact)."""
    return np.diff(np.concatenate(([0], np.cumsum(values)))[indptr])


def _triangles_numpy(k: int, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    key = np.unique(np.concatenate((rows * k + cols, cols * k + rows)))  # M's pattern, by (row, col)
    fwd = np.zeros(key.size, dtype=np.int64)
    fwd[np.searchsorted(key, np.unique(rows * k + cols))] = 1
    back = np.zeros(key.size, dtype=np.int64)
    back[np.searchsorted(key, np.unique(cols * k + rows))] = 1
    mult = fwd + back
    mrow, mcol = key // k, key % k
    deg = np.bincount(mrow, minlength=k).astype(np.int64)
    tri = np.zeros(k, dtype=np.float64)  # exact: integer sums < 2^53
    up = np.flatnonzero(_rank_up(k, deg, mrow, mcol))
    urow, ucol, umult = mrow[up], mcol[up], mult[up]
    ukey = urow * k + ucol  # ascending: U's entries by (row, col)
    out_u = np.bincount(urow, minlength=k)
    start = np.concatenate(([0], np.cumsum(out_u)))
    for lo, hi in _row_chunks(out_u * (out_u - 1) // 2):
        e = np.arange(start[lo], start[hi])
        per = start[urow[e] + 1] - e - 1  # pairs (i, j > i) within the row
        i = np.repeat(e, per)
        if not i.size:
            continue
        j = np.arange(i.size) - np.repeat(np.cumsum(per) - per, per) + i + 1
        a, b = np.take(ucol, i), np.take(ucol, j)  # (take: a third less time than ucol[i] with int32 indices)
        a_up = (deg[b] > deg[a]) | ((deg[b] == deg[a]) & (b > a))
        x, w = np.where(a_up, a, b), np.where(a_up, b, a)  # x ranks below w
        mvx, mvw = np.where(a_up, umult[i], umult[j]), np.where(a_up, umult[j], umult[i])
        probe = x * k + w
        at = np.minimum(np.searchsorted(ukey, probe), max(ukey.size - 1, 0))
        found = np.flatnonzero(ukey[at] == probe)
        mxw = umult[at[found]]
        tri += np.bincount(urow[i[found]], weights=mxw, minlength=k)
        tri += np.bincount(x[found], weights=mvw[found], minlength=k)
        tri += np.bincount(w[found], weights=mvx[found], minlength=k)
    return deg, tri.astype(np.int64)
