"""Whole-block kernels of the block-centric graph algorithms: one call does what would take one
superstep per hop or one Python-level pass per edge.

The kernels run scipy's compiled loops (``scipy.sparse``'s CSR matvec and counting sorts,
``csgraph``'s components, breadth-first search and Dijkstra). Their index arrays are int32 while
every size involved is below ``partitioner.csr.INT32_ENTRIES`` and int64 above (``index_type``),
with the same results bit for bit; csgraph's own loops are int32 only, so above the limit its
public calls run (which take int64 index arrays).

- ``csr_sum``: per row, the sum of ``x[indices]`` over the row's entries *in stored order*,
  sequentially from 0.0: scipy's ``csr_matvec`` with unit data (``1.0 * x`` is exact) adds in
  that order, so PageRank keeps its ascending-source summation (bit-identical to
  ``PageRankVertex``); ~5x faster than a gather and ``np.bincount`` (which adds the same way).
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
- LCC's triangle counts live in ``triangles``.

A block-sized selection by a mask goes through ``select``: ``np.compress`` a piece at a time.
``a[mask]`` branches per element (slow on a mask with no pattern), and ``np.compress`` of a
whole array first makes the int64 position of every entry it keeps (8 bytes each).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from typing import Any, Iterator

import numpy as np

from ...partitioner.csr import (_ST, first_of_runs, fits_int32, group_by, index_type, row_ids,
                                stable_argsort, transpose)

_matvec = _ST.csr_matvec  # the CSR matvec (``csr_matrix @ x``): ``csr_sum`` by row pieces


def _csr_matrix(*args: Any, **kwargs: Any) -> Any:
    """``scipy.sparse.csr_matrix``, the package imported on first use (not by PageRank)."""
    _import_scipy_sparse()
    from scipy.sparse import csr_matrix

    return csr_matrix(*args, **kwargs)


__all__ = ["import_traversals", "row_ids", "row_pieces", "row_edges", "row_edge_pieces", "first_of_runs",
           "select", "csr_sum", "transpose", "group_by", "stable_argsort", "components", "relax"]


_CSGRAPH: Any = None
_CSGRAPH_LOCK = threading.Lock()


def _csgraph() -> Any:
    """scipy's ``connected_components``, ``breadth_first_order`` and ``dijkstra``, imported by the
    jobs that use them (``import_traversals``), not by PageRank, CDLP or LCC. Only their two
    compiled modules are imported (``csgraph._traversal``, ``csgraph._shortest_path``), not the
    package's ``__init__``, which also imports ``scipy.sparse.linalg`` for its Laplacian: ~11 MiB
    of every WCC, BFS and SSSP process and ~40 ms of its start-up (``_DeferredPackage``)."""
    global _CSGRAPH
    with _CSGRAPH_LOCK:  # (blocks made on several threads: one package in sys.modules)
        if _CSGRAPH is None:
            _CSGRAPH = _load_csgraph()
    return _CSGRAPH


class _DeferredPackage(types.ModuleType):
    """A package in ``sys.modules`` whose ``__init__`` has not run: its submodules import as usual,
    and the first use of any other name runs the ``__init__`` (then it is the package as imported),
    so code that imports the package later in this process gets all of it."""

    def __getattr__(self, name: str) -> Any:
        self.__class__ = types.ModuleType  # type: ignore[assignment]
        self.__spec__.loader.exec_module(self)  # type: ignore[union-attr]
        return getattr(self, name)


class _Forward(types.ModuleType):
    """Stands for a module not imported yet: reading any name of it imports the module (as usual,
    into ``sys.modules``) and reads the name there."""

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module(self.__name__), name)


#: numpy's subpackages that ``import scipy.sparse`` would load only to copy them: its vendored
#: ``array_api_compat.numpy`` copies every name of ``dir(numpy)``, and numpy imports a lazy
#: subpackage when its name is read. f2py, testing (with unittest, email, importlib.metadata),
#: ma, polynomial and ctypeslib: the import took 12.3 MiB and ~85 ms with them, 6.0 MiB and ~35 ms
#: without (every WCC, BFS and SSSP process). None is used. (scipy itself uses random, fft, typing.)
NUMPY_UNUSED = ("f2py", "testing", "ma", "polynomial", "ctypeslib")
_SPARSE_LOCK = threading.Lock()


def _import_scipy_sparse() -> None:
    """``import scipy.sparse`` with ``NUMPY_UNUSED`` not yet imported standing as ``_Forward``s
    for that import only: the copy gets the stand-ins, numpy itself stays as it was."""
    if "scipy.sparse" in sys.modules:
        return
    with _SPARSE_LOCK:
        standing = {n: _Forward(f"numpy.{n}") for n in NUMPY_UNUSED if f"numpy.{n}" not in sys.modules}
        vars(np).update(standing)
        try:
            import scipy.sparse  # noqa: F401
        finally:
            for n, module in standing.items():
                if vars(np).get(n) is module:
                    del vars(np)[n]


def _load_csgraph() -> Any:
    name = "scipy.sparse.csgraph"
    try:
        _import_scipy_sparse()  # the parent package, imported as it is

        if name not in sys.modules:
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None or spec.submodule_search_locations is None:
                raise ImportError(name)
            package = importlib.util.module_from_spec(spec)
            package.__class__ = _DeferredPackage
            sys.modules[name] = package
        traversal = importlib.import_module(name + "._traversal")
        paths = importlib.import_module(name + "._shortest_path")
        return types.SimpleNamespace(connected_components=traversal.connected_components,
                                     breadth_first_order=traversal.breadth_first_order, dijkstra=paths.dijkstra)
    except (ImportError, AttributeError):  # pragma: no cover - another scipy layout: the whole package
        if isinstance(sys.modules.get(name), _DeferredPackage):
            del sys.modules[name]
        import scipy.sparse.csgraph as csgraph

        return csgraph


def import_traversals() -> None:
    """Import scipy's graph traversals now: WCC, BFS and SSSP call this as their blocks are made,
    so that the first processing superstep does not pay the import (~0.1-0.2 s)."""
    _csgraph()


def row_pieces(ptr: np.ndarray, size: int, max_rows: int | None = None) -> list[tuple[int, int]]:
    """Consecutive row ranges ``(r0, r1)`` of a CSR's row pointers ``ptr`` holding at most ``size``
    entries each (a longer row is a range of its own), and at most ``max_rows`` rows: the pieces
    that bound a kernel's temporaries whatever the degrees."""
    k = len(ptr) - 1
    top = np.iinfo(ptr.dtype).max
    out, r0 = [], 0
    while r0 < k:  # (the bound in ptr's own type: searchsorted would copy ptr to a wider one)
        r1 = int(np.searchsorted(ptr, ptr.dtype.type(min(int(ptr[r0]) + size, top)), side="right")) - 1
        if max_rows is not None:
            r1 = min(r1, r0 + max_rows)
        r1 = min(max(r1, r0 + 1), k)
        out.append((r0, r1))
        r0 = r1
    return out


#: ``row_edge_pieces`` yields at most about this many entries at a time
EDGE_PIECE = 1 << 18


def row_edges(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the row of each entry, the entry's index) of the CSR entries of ``rows``, in row order."""
    starts = indptr[rows]
    counts = indptr[rows + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return rows[:0], np.empty(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return np.repeat(rows, counts), offsets + np.arange(total)


def row_edge_pieces(indptr: np.ndarray, rows: np.ndarray,
                    size: int = EDGE_PIECE) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``row_edges`` of consecutive slices of ``rows`` holding at most ``size`` entries each (a
    row with more is a slice of its own): their ~36 bytes an entry of temporaries for a whole
    block's rows were a two-worker SSSP's peak (scale 19: ~190 MB a worker)."""
    ptr = np.concatenate(([0], np.cumsum(indptr[rows + 1] - indptr[rows])))  # the rows' own pointers
    for lo, hi in row_pieces(ptr, size):
        if ptr[hi] > ptr[lo]:
            yield row_edges(indptr, rows[lo:hi])


def entry_value_pieces(indptr: np.ndarray, entries: np.ndarray, values: np.ndarray, rows: np.ndarray,
                       size: int = EDGE_PIECE) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(entries[e], values[row of e])`` over the CSR entries ``e`` of ``rows`` (sorted, distinct),
    a bounded piece at a time as ``row_edge_pieces``. Every row (a first step): slices of
    ``entries`` and repeats of ``values``, with no index per entry (a two-worker WCC's first step
    spent ~35 ms on those indices)."""
    if len(rows) == len(indptr) - 1:
        for lo, hi in row_pieces(indptr, size):
            if indptr[hi] > indptr[lo]:
                yield entries[indptr[lo]:indptr[hi]], np.repeat(values[lo:hi], np.diff(indptr[lo:hi + 1]))
        return
    for src, e in row_edge_pieces(indptr, rows, size):
        yield entries[e], values[src]


#: ``select`` keeps entries of this many at a time (its positions: 512 KB)
SELECT_PIECE = 1 << 16


def select(mask: np.ndarray, a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``a[mask]`` (1-D), into ``out`` if given (exactly the size kept; ``a``'s own head too: a
    compaction in place), by ``np.compress`` of a piece at a time. Half of a scale-19 worker's
    8.3M slots in a fresh process: 15-17 ms and +16 MiB (the result), where ``a[mask]`` took
    20 ms and ``np.compress`` of the whole +47 MiB."""
    if out is None:
        out = np.empty(int(np.count_nonzero(mask)), dtype=a.dtype)
    at = 0
    for lo in range(0, len(a), SELECT_PIECE):
        m = mask[lo:lo + SELECT_PIECE]
        n = int(np.count_nonzero(m))
        np.compress(m, a[lo:lo + SELECT_PIECE], out=out[at:at + n])
        at += n
    return out


#: ``csr_sum`` sums its rows in pieces of about this many entries, so that the unit data its matvec
#: reads is one small array (2 MB) for every piece, not 8 bytes an entry for the job's life
SUM_PIECE = 1 << 18


class CSRSum:
    """A fixed sparse pattern (rows ``indptr``, columns ``indices``) to sum vectors over, many times.

    scipy's C matvec over row pieces of ~``SUM_PIECE`` entries, every piece reading the same
    array of ones (a piece's row pointers rebased, 4 bytes a row). A ``csr_matrix`` with unit
    data held 8 bytes an entry more: 33 MB of each scale-19 PageRank worker on two. As fast.
    A piece's index arrays are int32 where ``indices`` are and the piece and the columns fit
    (``fits_int32``), else int64 (int64 ``indices``: slices of them, no copy)."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray) -> None:
        self.indptr, self.indices = indptr, indices
        self._pieces: list[tuple[int, int, np.ndarray, np.ndarray]] | None = None
        self._ones: np.ndarray | None = None
        self._cols = -1  # the number of columns the pieces were cut for

    def _cut(self, ncols: int) -> None:
        """Row pieces of at most ``SUM_PIECE`` entries (a longer row is a piece of its own)."""
        indptr, narrow = self.indptr, self.indices.dtype == np.int32
        self._pieces = []
        for r0, r1 in row_pieces(indptr, SUM_PIECE):
            e0, e1 = int(indptr[r0]), int(indptr[r1])
            it = np.int32 if narrow and fits_int32(e1 - e0, ncols) else np.int64
            self._pieces.append((r0, r1, (indptr[r0:r1 + 1] - e0).astype(it),
                                 self.indices[e0:e1].astype(it, copy=False)))
        self._ones = np.ones(max((len(p[3]) for p in self._pieces), default=0))
        self._cols = ncols

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self._pieces is None or self._cols != len(x):
            self._cut(len(x))
        x = np.ascontiguousarray(x, dtype=np.float64)
        y = np.zeros(len(self.indptr) - 1)
        for r0, r1, ptr, cols in self._pieces:  # type: ignore[union-attr]
            _matvec(r1 - r0, len(x), ptr, cols, self._ones, x, y[r0:r1])
        return y


def csr_sum(indptr: np.ndarray, indices: np.ndarray) -> CSRSum:
    """``f(x)[r] = sum(x[indices[indptr[r]:indptr[r+1]]])``, added in stored order."""
    return CSRSum(indptr, indices)


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


def _sampled_labels(k: int, indptr: np.ndarray, indices: np.ndarray, cols: np.ndarray | None) -> np.ndarray | None:
    """Component labels of a symmetric graph from few of its entries (Afforest, Sutton et al. 2018):
    label the graph of every row's first ``SAMPLE`` entries; the largest component found keeps the
    rest of its rows' entries unread, every other row adds them (joining the sample's components:
    labelled as a graph over those), and the labels of the sample plus those are the graph's.
    Exact because the graph is symmetric: an unread entry u -> v has u in the largest component,
    and if v is not, v's own row adds v -> u. A dense graph with a giant
    component (R-MAT) is then labelled from a fraction of its entries; None where the rows to add
    hold over half the entries (then the whole graph is labelled instead)."""
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
    it = index_type(len(src), k)
    src, dst = src.astype(it, copy=False), dst.astype(it, copy=False)
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
    None where that internal function is not there as expected (other scipy versions), or past
    ``INT32_ENTRIES`` (it takes int32 indices only; the public call then runs)."""
    if not fits_int32(len(indptr) - 1, len(indices)):
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


class Relaxer:
    """Shortest distances over one block's internal edges (CSR: ``indptr``, ``indices`` local
    rows, ``weight``), from seeds with start distances; see the module note on bit-identity.

    ``indices`` (and ``weight``) may be longer than the CSR's ``indptr[-1]`` entries: the rest is
    room where a relaxation from several seeds puts a super-source's edges (row k, one to each
    seed), so that it copies none of the block's edges."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, weight: np.ndarray | None) -> None:
        self.unit = weight is None  # every edge weighs 1.0: hop counts
        n = int(indptr[-1]) if len(indptr) else 0
        self.indptr, self.k = indptr, len(indptr) - 1
        self._room_indices = indices
        # unit weights: no array until scipy's Dijkstra needs one (``_ones``); the breadth-first
        # search and the frontier rounds read none (an array of ones was 8 bytes an edge: 67 MB,
        # a third of a one-worker scale-19 SSSP's peak)
        self._room_weight = weight
        self.indices = indices[:n]  # the CSR's own
        self.weight = None if weight is None else weight[:n]

    def _ones(self) -> None:
        """Unit weights as an array, made on first use (scipy's Dijkstra reads its matrix's data)."""
        if self._room_weight is None:
            self._room_weight = np.ones(len(self._room_indices))
            self.weight = self._room_weight[:len(self.indices)]

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
            method = "auto"
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
        self._ones()
        k = self.k
        start = dist[seeds]
        if not start.any():  # every seed at 0.0: 0.0 + w == w, plain multi-source Dijkstra
            return _csgraph().dijkstra(self._matrix(), directed=True, indices=seeds, min_only=True)
        # a super-source (row k) with an edge of weight d0 to each seed: 0.0 + d0 == d0 exactly
        m = self._with_source(seeds, start)
        return _csgraph().dijkstra(m, directed=True, indices=k, min_only=True)[:k]

    def _with_source(self, seeds: np.ndarray, weight: np.ndarray | float) -> Any:
        """The block's matrix with one more row, k: an edge to each seed, of ``weight``. In the
        room after the block's edges where there is enough (nothing else of them is copied),
        else a copy of them all with the seeds' edges after."""
        self._ones()
        assert self._room_weight is not None and self.weight is not None
        k, n, s = self.k, len(self.indices), seeds.size
        indptr, indices = self._pattern_with_source(seeds)
        if len(self._room_indices) >= n + s:
            weights = self._room_weight[:n + s]
            weights[n:] = weight
        else:
            weights = np.concatenate((self.weight, np.broadcast_to(np.asarray(weight, np.float64), (s,))))
        return _csr_matrix((weights, indices, indptr), shape=(k + 1, k + 1))

    def _pattern_with_source(self, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``_with_source``'s pattern alone: (row pointers, columns) with row k's edge to each seed."""
        n, s = len(self.indices), seeds.size
        indptr = np.append(self.indptr, n + s)
        if len(self._room_indices) >= n + s:
            indices = self._room_indices[:n + s]
            indices[n:] = seeds
            return indptr, indices
        return indptr, np.concatenate((self.indices, seeds.astype(self.indices.dtype)))

    def _bfs(self, dist: np.ndarray, seeds: np.ndarray, d0: float) -> np.ndarray:
        """Unit weights, every seed at depth ``d0``: one breadth-first traversal (from a
        super-source, row k, when there are several seeds), depths from the predecessor tree."""
        k = self.k
        if seeds.size == 1:
            (indptr, indices), root, base = (self.indptr, self.indices), int(seeds[0]), d0
        else:
            (indptr, indices), root, base = self._pattern_with_source(seeds), k, d0 - 1.0
        found = _breadth_first(root, indptr, indices)
        if found is None:  # scipy's public call (it reads a matrix: unit data, 8 bytes an edge)
            m = self._matrix() if seeds.size == 1 else self._with_source(seeds, 1.0)
            found = _csgraph().breadth_first_order(m, root, directed=True, return_predecessors=True)
        order, pred = found
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
            self._ones()
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
            best = None  # (a block-sized copy and scan per round measured 2.5x faster on a 2-block
            for src, e in row_edge_pieces(indptr, rows):  # grid than sorting the offers)
                if best is None:
                    best = cand.copy()
                np.minimum.at(best, indices[e], cand[src] + (1.0 if weight is None else weight[e]))
            if best is None:
                return cand, rows[:0]
            rows = np.flatnonzero(best < cand)
            cand = best
        return cand, rows


def _breadth_first(root: int, indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``csgraph.breadth_first_order(csr, root, directed=True, return_predecessors=True)`` of the
    pattern (``indptr``, ``indices``) by scipy's own loop, with no matrix: the public call wants
    one with data (unit weights: 8 bytes an edge) and checks and converts it on every call. None
    where that internal function is not there as expected (other scipy versions), or past
    ``INT32_ENTRIES`` (it takes int32 indices only; the public call then runs)."""
    n = len(indptr) - 1
    if not fits_int32(n, len(indices)):
        return None
    try:
        from scipy.sparse.csgraph._traversal import _breadth_first_directed as search
    except ImportError:
        return None
    ip, ix = indptr.astype(np.int32, copy=False), np.ascontiguousarray(indices, dtype=np.int32)
    order, pred = np.full(n, -9999, np.int32), np.full(n, -9999, np.int32)  # (scipy's NULL_IDX)
    try:
        length = search(root, ix, ip, order, pred)
    except (TypeError, ValueError):
        return None
    return order[:length], pred


def _levels(order: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """The hop count of each node in ``order`` (a breadth-first order from ``order[0]``, with the
    predecessors): parents are taken in queue order, so the position of a node's parent never
    goes down along ``order`` and each level ends where the previous one's children do: one
    ``searchsorted`` per level (pointer jumping measured 1.3x slower on a grid)."""
    n = len(order)
    it: Any = index_type(len(pred))  # (32 bits: the scatter takes a third of the time)
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
