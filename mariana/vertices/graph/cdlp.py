"""CDLP, community detection by label propagation (LDBC Graphalytics): synchronous rounds for
``iterations`` rounds; a vertex takes the label most frequent among its neighbours, ties to the
smallest label. Neighbours are in- plus out-neighbours, so a vertex linked both ways counts
twice, as Graphalytics defines it.

``CDLPVertex`` is the classic Pregel vertex (``mode=vertex``, the tests' oracle; the job gives it
the edges in both directions and integer ranks as labels). ``CDLPLoaded`` is the block program
over a graph loaded in parts (``block.LoadedBlock``), with exactly the labels of ``CDLPVertex``.

``CDLPLoaded``: label propagation over in- plus out-neighbours counted per edge (an edge listed
both ways counts twice, a self-loop counts the vertex's own label twice), ties to the smallest
label. Labels are the ids' integer values when every id is an integer (so the smallest label is
the numerically smallest id, Graphalytics' order), else the ids' UTF-8 bytes (string order).

- Step 0: each block sends every other block the out-edges into it (distinct keys once, int32
  indices per edge); edges inside a block need no message. An undirected graph (``directed=false``)
  is loaded both ways, as the other jobs load it, so its out-edges are the neighbour multiset
  already (a self-loop is given its second entry): no message, and no transpose in step 1
  (R-MAT-18's step-1 layout ~610 -> ~320 ms, of ~1.8 -> ~1.5 s of processing).
- Step 1: the neighbour multiset of every row, fixed for the run, is laid out once in row order
  (``ptr``, ``nb``: a stable counting sort): an edge inside the block gives both ends an entry,
  an edge from or to another block one. A neighbour is a local row, or (another block's vertex)
  ``rows`` + its place among the labels that block sends; each block then sends every neighbouring
  block, once per round, the labels of its vertices that have a neighbour there.
- Each round: a row's label is the mode of its entries' labels (``row_modes``: (row, label)
  keys of 32 bits sorted a piece of rows at a time, counted in runs; where no row has more
  than ``ELL_MAX`` entries, a grid's 4, ``ell_modes`` compares the rows' entries as columns, no sort). Only rows next to a
  label that changed last round are recomputed once those rows hold under 3/4 of the entries
  (CDLP settles: on R-MAT-16 the last six rounds touch ~80 of 65536 rows). Inside a block the
  entries are symmetric, so the rows next to a changed row are its own local entries; rows next
  to a changed remote label come from a transpose of the remote entries, made once.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from collections import Counter

from ...engine import Context, Message, Vertex
from ...partitioner.csr import fits_int32, index_type
from ...partitioner.fragment import BLOCK_TAG, LocalGraph
from ...storage.edgelist import EdgeList
from ...storage.graphalytics import label_ranks
from ...storage.ids import Ids, label_counts, pack_keys, unpack_keys
from .algorithm import Algorithm, Param
from .block import GraphIO, LoadedBlock, _by_sender, _concat, _integer_ids
from .kernels import _csr_matrix, first_of_runs, group_by, row_ids, row_pieces

__all__ = ["CDLPVertex", "CDLPLoaded", "both_ways", "ALGORITHM"]


# CDLP
# --------------------------------------------------------------------------------------------
def _most_frequent(labels: Counter) -> int:
    """The most frequent label, ties to the smallest."""
    best, count = -1, -1
    for label, c in labels.items():
        if c > count or (c == count and label < best):
            best, count = label, c
    return best


class CDLPVertex(Vertex):
    """Label propagation; ``edges`` are the neighbour links (both directions), ``label`` the
    vertex's initial label (an integer whose order is the label order); ``names``: the vertex id
    of each label, the result (None: the integer label)."""

    __slots__ = ("iterations", "names")

    state_fields = (*Vertex.state_fields, "iterations")

    def __init__(self, id: str, edges: list[tuple[str, Any]], label: int, iterations: int,
                 names: Sequence[str] | None = None) -> None:
        super().__init__(id, label, edges)
        self.iterations = iterations
        self.names = names

    def result(self) -> Any:
        return self.value if self.names is None else self.names[self.value]

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        s = ctx.superstep
        if s > 0 and messages:
            new = _most_frequent(Counter(m.payload for m in messages))
            if new != self.value:
                ctx.aggregate("updated", 1)
            self.value = new
        if s < self.iterations:
            for dst, _ in self.edges:
                ctx.send(dst, self.value)
        ctx.vote_to_halt()


# --------------------------------------------------------------------------------------------


class CDLPLoaded(LoadedBlock):
    """CDLP for a whole partition; the labels of ``CDLPVertex`` (see the module doc)."""

    state_fields = (*LoadedBlock.state_fields, "iterations", "lo", "moved", "nb", "partial", "prev", "ptr", "rk",
                    "routes", "span", "symmetric", "tptr", "trow")
    #: one block whose rows repeat no neighbour, before its first round; the entries in
    #: ``ell_layout``'s columns (False: a row too long)
    derived_fields = {"_simple": False, "_ell": None}

    def __init__(self, id: str, io: GraphIO, iterations: int, symmetric: bool = False) -> None:
        super().__init__(id, io)
        self.iterations = iterations
        self.symmetric = symmetric  # loaded both ways (an undirected graph): the out-edges are the neighbours
        self.routes: list[tuple[str, np.ndarray, np.ndarray | None]] = []
        self.ptr = np.zeros(1, np.int64)  # CSR over the local rows of the neighbour entries (a multiset)
        self.nb: np.ndarray = np.empty(0, np.int32)  # each entry's neighbour (see the module doc)
        self.rk: np.ndarray | None = None  # remote neighbours' keys (by ``nb`` - rows) until the first labels
        self.tptr: np.ndarray | None = None  # transpose of the remote entries (made once few labels move)
        self.trow: np.ndarray | None = None
        self.prev: np.ndarray | None = None  # the labels received last round (None: next round redoes every row)
        self.moved = np.empty(0, np.int64)  # the local rows whose label changed in the last round
        self.lo, self.span = 0, 0  # integer labels: the range of every id (span 0: rank the labels)
        self.partial = 0  # rounds that recomputed only the rows next to a changed label
        self._simple: bool
        self._ell: Any

    def loaded(self, ctx: Context) -> None:
        g = self.g
        assert g is not None
        self.value = g.own.copy() if g.own.dtype.kind == "S" else _integer_ids(g.own)
        if self.value.dtype.kind == "i" and len(self.value):  # every label is one of these ids
            ctx.aggregate("cdlp_lo", int(self.value.min()))
            ctx.aggregate("cdlp_hi", int(self.value.max()))

    def run(self, ctx: Context, messages: list[Message], step: int) -> None:
        g, label = self.g, self.value
        assert g is not None
        if step == 0:
            if label.dtype.kind == "i":
                self.lo = int(ctx.aggregated("cdlp_lo", 0))
                self.span = int(ctx.aggregated("cdlp_hi", 0)) - self.lo + 1
            if not self.iterations:
                ctx.vote_to_halt()
            elif not self.symmetric:  # edges to other blocks only: a block sees its own in-edges itself
                self._announce(ctx, g)
            return
        s = step - 1  # rounds: labels sent in round s are taken up in round s + 1 (no messages: kept active)
        if s == 0:
            self._entries(g, messages)
            # intp: read by a gather every round (numpy casts int32 indices on the way: R-MAT-18's
            # 7.6M entries 52-57 -> 18 ms a gather, for 4 more bytes an entry)
            self.nb = self.nb.astype(np.intp, copy=False)
        else:
            msgs = _by_sender(messages)
            text = label.dtype.kind == "S"
            if self.rk is not None:  # the first labels: where each remote neighbour's label sits
                ids = _concat(msgs, "ids", g.own.dtype, keys=True)
                order = np.argsort(ids, kind="stable")
                miss = np.flatnonzero(self.nb >= len(label))
                at = order[np.searchsorted(ids[order], self.rk)]  # each remote key's place among the labels
                self.nb[miss] = len(label) + at[self.nb[miss] - len(label)]
                self.rk = None
            far = (_concat(msgs, "label", label.dtype, keys=True) if text else _concat(msgs, "label", np.int64))
            self._adopt(ctx, far)
        if s < self.iterations:
            for i, (block, rows, ids) in enumerate(self.routes):
                payload: dict[str, Any] = {"label": pack_keys(label[rows]) if label.dtype.kind == "S" else label[rows]}
                if ids is not None:
                    payload["ids"] = ids
                    self.routes[i] = (block, rows, None)  # sent once
                ctx.send(block, payload, tag=BLOCK_TAG)
        else:
            ctx.vote_to_halt()

    def _announce(self, ctx: Context, g: LocalGraph) -> None:
        """Send each other block the out-edges into it: its distinct destination keys ``tk`` and
        source keys ``sk`` once, each edge as two int32 indices into them (``ti``, ``si``)."""
        me = g.blocks.index(self.id)
        eb = g.target_block[g.slot]
        far = np.flatnonzero(eb != me)
        if not far.size:
            return
        nblk = len(g.blocks)
        by_t = np.argsort(g.target_block, kind="stable")  # by block, keys ascending inside each
        t_bounds = np.searchsorted(g.target_block[by_t], np.arange(nblk + 1))
        tmap = np.empty(len(g.targets), np.int32)  # a target's place among its block's targets
        for b in range(nblk):
            tmap[by_t[t_bounds[b]:t_bounds[b + 1]]] = np.arange(t_bounds[b + 1] - t_bounds[b], dtype=np.int32)
        fb = eb[far]
        by_b = np.argsort(fb, kind="stable")
        bounds = np.searchsorted(fb[by_b], np.arange(nblk + 1))
        src = g.src_rows()
        for b in range(nblk):
            e = far[by_b[bounds[b]:bounds[b + 1]]]  # ascending: their rows too
            if not e.size:
                continue
            r = src[e]
            new = np.ones(r.size, dtype=bool)
            new[1:] = r[1:] != r[:-1]
            ctx.send(g.blocks[b], {"tk": pack_keys(g.targets[by_t[t_bounds[b]:t_bounds[b + 1]]]), "ti": tmap[g.slot[e]],
                                   "sk": pack_keys(g.own[r[new]]), "si": (np.cumsum(new) - 1).astype(np.int32)},
                     tag=BLOCK_TAG)

    def _entries(self, g: LocalGraph, messages: list[Message]) -> None:
        """The neighbour entries of every row, in row order: an edge inside the block gives both
        ends an entry (out and in), an edge to or from another block one (the announced in-edges);
        loaded both ways, see ``_symmetric_entries``. A remote neighbour is ``n`` + its place in
        ``rk`` (its key) until the first labels come."""
        if self.symmetric:
            self._symmetric_entries(g)
            return
        n = len(g.own)
        index = {b: i for i, b in enumerate(g.blocks)}
        msgs = [m for m in _by_sender(messages) if "ti" in m.payload]
        src, dst, far_t, by_block = self._out_entries(g)
        near = np.flatnonzero(dst < n)
        keys, in_rows, in_nbs = [g.targets[far_t]], [], []
        at = n + far_t.size
        for m in msgs:
            tk, sk = unpack_keys(m.payload["tk"]), unpack_keys(m.payload["sk"])
            rows_m = g.local(tk)[m.payload["ti"]]
            in_rows.append(rows_m)
            in_nbs.append(at + m.payload["si"].astype(np.int64))
            keys.append(sk)
            at += len(sk)
            by_block.setdefault(index[m.src], []).append(rows_m)
        it = index_type(at, len(src) + len(near) + sum(len(r) for r in in_rows))
        if not far_t.size and not msgs:
            # one block: the out-entries are grouped by row already; only the in-entries need the
            # counting sort (the transpose), then each row is its out-entries and its in-entries
            self.ptr, self.nb, transpose = _with_transpose(g.indptr, dst.astype(it), n)
            self._simple = _no_repeats(g.indptr, dst, n, transpose)
            del transpose
        else:
            rows = np.concatenate([src.astype(it), dst[near].astype(it), *[r.astype(it) for r in in_rows]])
            nbs = np.concatenate([dst.astype(it), src[near].astype(it), *[x.astype(it) for x in in_nbs]])
            self.ptr, self.nb = group_by_row(rows, nbs, n)
            del rows, nbs
        self.rk = np.concatenate(keys) if at > n else None
        self._route(g, by_block)

    def _symmetric_entries(self, g: LocalGraph) -> None:
        """``_entries`` of a block loaded both ways: its out-edges hold every neighbour already (a
        remote one as ``n`` + its place among the remote targets), with a second entry per
        self-loop (a loop counts in and out, as when the in-entries join a one-way load). Each
        row's entries are sorted (``sort_rows``, cheaper than the transpose that would show a
        repeat otherwise), so one block is ``_simple`` when no row repeats a neighbour and none
        holds a loop."""
        n = len(g.own)
        src, dst, far_t, by_block = self._out_entries(g)  # (before the sort below, which reorders dst)
        it = dst.dtype.type if fits_int32(len(g.slot)) else np.int64
        if far_t.size:
            self.rk = g.targets[far_t]
        loops = np.flatnonzero(dst == src)
        if loops.size:
            self.ptr, self.nb = group_by_row(np.concatenate([src.astype(it), src[loops].astype(it)]),
                                             np.concatenate([dst, dst[loops]]), n)
        else:
            self.ptr = g.indptr.astype(np.int64)
            self.nb, distinct = sort_rows(self.ptr, dst, n + far_t.size)
            self._simple = not far_t.size and distinct and 0 < len(dst)
        self._route(g, by_block)

    def _out_entries(self, g: LocalGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, list[np.ndarray]]]:
        """The out-edges as entries: (each one's row, its neighbour: a local row or ``n`` + the
        target's place among the remote ``far_t``, int32 where that fits; ``far_t``; per other
        block, the rows with an out-edge into it)."""
        me, n = g.blocks.index(self.id), len(g.own)
        src = g.src_rows()
        far_t = np.flatnonzero(g.target_block != me)
        tmap = np.empty(len(g.targets), dtype=index_type(n + far_t.size))
        near_t = np.flatnonzero(g.target_block == me)
        tmap[near_t] = g.local(g.targets[near_t])
        tmap[far_t] = n + np.arange(far_t.size)
        dst = tmap[g.slot]
        by_block: dict[int, list[np.ndarray]] = {}
        if far_t.size:
            far = np.flatnonzero(dst >= n)
            fb = g.target_block[g.slot[far]]
            for b in np.unique(fb).tolist():
                by_block[b] = [src[far[fb == b]]]
        return src, dst, far_t, by_block

    def _route(self, g: LocalGraph, by_block: dict[int, list[np.ndarray]]) -> None:
        """Each neighbouring block's routes: the rows whose labels it needs (``by_block``), sent
        with their keys the first time."""
        for blk in sorted(by_block):
            r = _distinct(np.concatenate(by_block[blk]), len(g.own))
            self.routes.append((g.blocks[blk], r, pack_keys(g.own[r])))
        g.drop_edges()

    def _dirty(self, ext_len: int, far: np.ndarray) -> np.ndarray | None:
        """The rows whose neighbours' labels changed since the last round; None: all of them (or
        rows holding over 3/4 of the entries: a whole round costs less than picking them out)."""
        n = len(self.value)
        if self.prev is None or len(self.prev) != len(far):
            return None
        farm = np.flatnonzero(far != self.prev) if len(far) else np.empty(0, np.int64)
        if (self.moved.size + farm.size) * 2 > ext_len:
            return None
        # inside the block every entry has its mirror (an edge gives both ends one): the rows
        # next to a local row are its own local neighbours; the remote ones need a transpose
        near = self.nb[_ranges(self.ptr, self.moved)]
        rows = near[near < n]
        if farm.size:
            if self.tptr is None or self.trow is None:  # once: which rows list each remote neighbour
                sel = np.flatnonzero(self.nb >= n)
                row = row_ids(self.ptr, self.nb.dtype)[sel]
                self.tptr, self.trow = group_by_row(self.nb[sel] - n, row, len(far))
            rows = np.concatenate([rows, self.trow[_ranges(self.tptr, farm)]])
        dirty = _distinct(rows, n)
        if int((self.ptr[dirty + 1] - self.ptr[dirty]).sum()) * 4 > len(self.nb) * 3:  # picking out costs ~1/5 of a sort
            return None
        return dirty

    def _adopt(self, ctx: Context, far: np.ndarray) -> None:
        """Every row with neighbours takes their most frequent label, the smallest of a tie; only
        the rows next to a changed label are recomputed (the others would find the same)."""
        label = self.value
        n = len(label)
        ext_len = n + len(far)
        dirty = self._dirty(ext_len, far)
        self.prev = far
        ext = np.concatenate([label, far]) if len(far) else label
        if self.span and 0 < self.span < 2 ** 31 and max(n, 1) * self.span <= 2 ** 62:  # labels - lo: codes in label order
            uniq, u = None, self.span
            code = (ext - self.lo).astype(np.int32 if self.span < 2 ** 31 else np.int64)
        else:  # labels ranked (bytes, or a range too wide)
            uniq, inv = np.unique(ext, return_inverse=True)
            u, code = len(uniq), inv.reshape(-1).astype(np.int64)
        if dirty is None:
            ptr, nb, base = self.ptr, self.nb, None
        else:
            idx = _ranges(self.ptr, dirty)
            counts = self.ptr[dirty + 1] - self.ptr[dirty]
            ptr = np.concatenate(([0], np.cumsum(counts)))
            nb, base = self.nb[idx], dirty
            self.partial += 1
        simple, self._simple = self._simple, False
        if simple and base is None and not len(far):  # the first round: every label distinct, no row
            rows = np.flatnonzero(np.diff(ptr))  # repeats a neighbour: every count is 1, the mode is the smallest
            best = np.minimum.reduceat(code[nb], ptr[rows]).astype(np.int64) if rows.size else rows
        elif base is None and self._ell is None:  # (once: the multiset is fixed)
            self._ell = ell_layout(self.ptr, self.nb) or False
        if simple and base is None and not len(far):
            pass
        elif base is None and self._ell and u + ELL_MAX < 2 ** 31:
            rows, best = ell_modes(self._ell, code, u)
        else:
            rows, best = row_modes(ptr, code[nb], u)
        if base is not None:
            rows = base[rows]
        new = best + self.lo if uniq is None else uniq[best]
        if rows.size == n:  # every row (ascending, distinct): no gathers, a copy
            change = np.flatnonzero(label != new)
            if change.size:
                np.copyto(label, new)
            self.moved = change
        else:
            change = np.flatnonzero(label[rows] != new)
            if change.size:
                label[rows[change]] = new[change]
            self.moved = rows[change]
        if change.size:
            ctx.aggregate("updated", int(change.size))

    def result(self) -> dict[str, Any]:
        g = self.g
        if g is None:
            return {"ids": [], "values": np.zeros(0)}
        return self.out.result(g.own, self.value, labels=self.value.dtype.kind == "S")


def _transpose(indptr: np.ndarray, dst: np.ndarray, n: int) -> Any:
    """The transpose of the CSR (rows ``indptr``, columns ``dst``, n x n) as a CSR with sorted
    rows: one counting sort (scipy's ``tocsc``), index arrays as ``index_type``."""
    it = index_type(len(dst), n)
    t = _csr_matrix((np.ones(len(dst), np.int8), dst.astype(it, copy=False), indptr.astype(it)), shape=(n, n)).tocsc()
    return _csr_matrix((t.data, t.indices, t.indptr), shape=(n, n))


def _with_transpose(indptr: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, Any]:
    """``group_by_row`` of the entries of a CSR (rows ``indptr``, columns ``dst``, all rows) and
    of its transpose: each row's own entries, then its in-entries in source order (the same
    layout), with one counting sort of half the entries; and that transpose (``_transpose``)."""
    m = len(dst)
    t = _transpose(indptr, dst, n)  # in-entries by row, sources ascending
    out_ptr, in_ptr = indptr.astype(np.int64), t.indptr.astype(np.int64)
    ptr = out_ptr + in_ptr
    nb = np.empty(2 * m, dtype=dst.dtype)
    nb[np.arange(m, dtype=np.int64) + np.repeat(in_ptr[:-1], np.diff(out_ptr))] = dst
    nb[np.arange(m, dtype=np.int64) + np.repeat(out_ptr[1:], np.diff(in_ptr))] = t.indices
    return ptr, nb, t


def _no_repeats(indptr: np.ndarray, dst: np.ndarray, n: int, transpose: Any = None) -> bool:
    """Whether one block's out-edges (CSR over its rows, every target a row) give no row a
    neighbour twice: no self-loop, no repeated edge, none listed both ways. With A the edges and
    A^T their ``transpose`` (made here if not given): the transpose of A^T is A with sorted rows
    (a second counting sort), canonical unless an edge repeats; no loop is an empty diagonal, and
    no edge both ways an empty elementwise product of A and A^T (a merge of sorted rows): linear
    passes, no sort. No entries: False (rounds as usual)."""
    if not len(dst):
        return False
    at = transpose if transpose is not None else _transpose(indptr, dst, n)
    t = at.tocsc()
    a = _csr_matrix((t.data, t.indices, t.indptr), shape=(n, n))  # A, rows sorted
    if not a.has_canonical_format or bool(a.diagonal().any()):
        return False
    return int(a.multiply(at).nnz) == 0


def _distinct(idx: np.ndarray, n: int) -> np.ndarray:
    """The distinct values of ``idx`` (all in [0, n)), ascending: a sort when they are few, else a mark array."""
    if idx.size * 16 < n:
        return np.unique(idx)
    mark = np.zeros(n, dtype=bool)
    mark[idx] = True
    return np.flatnonzero(mark)


def _ranges(ptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The positions ``ptr[r]:ptr[r + 1]`` of every row in ``rows``, one after another."""
    starts = ptr[rows]
    counts = ptr[rows + 1] - starts
    total = int(counts.sum())
    if not total:
        return np.empty(0, np.int64)
    return np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts) + np.arange(total)


def group_by_row(rows: np.ndarray, vals: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(ptr, ``vals`` grouped by ``rows`` in [0, n), in their order inside each row): a stable
    counting sort (``kernels.group_by``)."""
    ptr, grouped = group_by(rows, n, vals)
    return ptr.astype(np.int64), grouped.astype(vals.dtype, copy=False)


#: ``row_modes`` and ``sort_rows`` sort the (row, value) keys of at most this many entries at a
#: time (a longer row alone)
MODE_PIECE = 1 << 20


def _sorted_row_keys(ptr: np.ndarray, vals: np.ndarray, width: int) -> Iterator[tuple[int, int, int, np.ndarray, np.ndarray]]:
    """Pieces of rows as sorted keys ``(row - r0) * width + value`` (values in [0, width)): yields
    ``(r0, e0, e1, base, key)``, ``base`` each entry's ``(row - r0) * width``, in row order as
    before the sort (sorting keeps every row's entries in their row's place), ``key`` sorted. A
    piece has at most ``MODE_PIECE`` entries and few enough rows that its keys fit 32 bits
    (64 when ``width`` does not): numpy sorts 32-bit keys with SIMD, and a piece stays in cache."""
    kt: Any = np.uint32 if width < 2 ** 32 else np.uint64
    rows_per = (2 ** (8 * np.dtype(kt).itemsize) - 1) // max(width, 1)
    for r0, r1 in row_pieces(ptr, MODE_PIECE, rows_per):
        e0, e1 = int(ptr[r0]), int(ptr[r1])
        if e1 > e0:
            base = np.repeat(np.arange(0, (r1 - r0) * width, width, dtype=kt), np.diff(ptr[r0:r1 + 1]))
            key = base + vals[e0:e1].astype(kt, copy=False)
            key.sort()
            yield r0, e0, e1, base, key


#: rows of fewer entries than this on average are sorted by scipy, row by row in C, where short
#: rows cost less than the keys (rows of 1-4 entries: a mode 14 vs 35 ms, a sort 11 vs 12 ms a
#: 655k entries; of 1-32: 150 vs 146 ms and 115 vs 63 ms a 4.3M)
SHORT_ROWS = 16


def row_modes(ptr: np.ndarray, lab: np.ndarray, u: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows with entries, for each the smallest of the most frequent values among
    ``lab[ptr[r]:ptr[r + 1]]``); values in [0, u); ``lab`` may be overwritten.

    Each row's values sorted and counted: short rows by scipy (``sum_duplicates``), longer ones as
    sorted (row, value) keys counted in runs (``_sorted_row_keys``); the same result. R-MAT-18's
    second round, 7.6M entries: 176-211 ms as keys, 370-520 ms by scipy, and one sort of 64-bit
    keys 535-545."""
    k = len(ptr) - 1
    if not lab.size:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if lab.size < SHORT_ROWS * k:
        # sum_duplicates rewrites its arrays in place: ptr as a copy, lab as it is
        it = index_type(lab.size, u, k)
        m = _csr_matrix((np.ones(lab.size, np.int32), lab.astype(it, copy=False), ptr.astype(it)), shape=(k, u))
        m.sum_duplicates()
        return _counted_modes(m.indptr, m.indices, m.data, u)
    rows_out: list[np.ndarray] = []
    best_out: list[np.ndarray] = []
    for r0, _, _, base, key in _sorted_row_keys(ptr, lab, u):
        starts = np.flatnonzero(first_of_runs(key))  # each (row, value) once, with its count
        cnt = np.diff(np.append(starts, key.size))
        base = base[starts]
        code = (key[starts] - base).astype(np.int64)
        first = np.flatnonzero(first_of_runs(base))  # each row's first value
        rows_out.append((base[first] // base.dtype.type(u)).astype(np.int64) + r0)
        best_out.append(_best(first, code, cnt, u))
    return np.concatenate(rows_out), np.concatenate(best_out)  # (some piece has the entries)


def _counted_modes(ip: np.ndarray, code: np.ndarray, cnt: np.ndarray, u: int) -> tuple[np.ndarray, np.ndarray]:
    """``row_modes`` from each row's distinct values ascending (``code``) with their counts."""
    full = np.flatnonzero(ip[1:] > ip[:-1])
    # where no value repeats, the first wins
    rep = np.flatnonzero(cnt > 1)
    if rep.size * 8 >= len(full):
        return full, _best(ip[full], code, cnt, u)
    best = code[ip[full]].astype(np.int64)
    if rep.size:
        rows = np.searchsorted(ip, rep, side="right") - 1
        keep = np.ones(rows.size, dtype=bool)
        keep[1:] = rows[1:] != rows[:-1]
        rows = rows[keep]
        idx = _ranges(ip, rows)
        starts = np.concatenate(([0], np.cumsum(ip[rows + 1] - ip[rows])[:-1]))
        best[np.searchsorted(full, rows)] = _best(starts, code[idx], cnt[idx], u)
    return full, best


def sort_rows(ptr: np.ndarray, vals: np.ndarray, width: int) -> tuple[np.ndarray, bool]:
    """Each row's values (in [0, width)) in ascending order, and whether no row repeats a value:
    short rows by scipy (``sort_indices``), longer ones as keys (``_sorted_row_keys``). R-MAT-18's
    7.6M neighbour entries: 118-126 ms as keys, 215-270 by scipy."""
    k = len(ptr) - 1
    if len(vals) < SHORT_ROWS * k:
        it = index_type(len(vals), width, k)
        a = _csr_matrix((np.ones(len(vals), np.int8), vals.astype(it), ptr.astype(it)), shape=(k, width))
        a.sort_indices()  # (in place; a no-op when the rows are sorted already)
        return a.indices.astype(vals.dtype, copy=False), bool(a.has_canonical_format)
    out = np.empty_like(vals)
    distinct = True
    for _, e0, e1, base, key in _sorted_row_keys(ptr, vals, width):
        if distinct:
            distinct = bool(first_of_runs(key).all())
        np.subtract(key, base, out=out[e0:e1], casting="unsafe")
    return out, distinct


#: rows of at most this many entries (every row: a grid's 4) take ``ell_modes``
ELL_MAX = 8


def ell_layout(ptr: np.ndarray, nb: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """Every row's entries as columns (ELLPACK) when no row has more than ``ELL_MAX``: (the rows
    with entries, a (columns, rows) array of ``nb`` values as intp, the flat places without an
    entry and their column numbers); None else. (intp: numpy gathers with int32 indices by casting
    them on the way, ~3x the time of the gather itself on a grid's near-sequential rows.)"""
    k = len(ptr) - 1
    cnt = np.diff(ptr)
    top = int(cnt.max(initial=0))
    if not top or top > ELL_MAX:
        return None
    at = ptr[:-1] + np.arange(top)[:, None]  # (top, k): entry j of every row
    has = np.arange(top)[:, None] < cnt
    cols = nb[np.where(has, at, 0)].astype(np.intp, copy=False)
    pad = np.flatnonzero(~has)
    return np.flatnonzero(cnt), cols, pad, (pad // max(k, 1)).astype(np.int32)


def ell_modes(layout: tuple[np.ndarray, ...], code: np.ndarray, u: int) -> tuple[np.ndarray, np.ndarray]:
    """``row_modes`` over ``ell_layout``'s columns (values ``code[column]``, int32; u + ELL_MAX < 2^31):
    the result of ``row_modes`` without a sort (where a row lacks column j it holds u + j: distinct,
    above every value, so never picked while it has one). A row whose values are all distinct
    takes the smallest; only the rows where some pair of columns is equal (few, while labels
    still spread) are counted, every pair of their columns compared at once."""
    full, cols, pad, pad_col = layout
    lab = code[cols]
    lab.reshape(-1)[pad] = pad_col + u
    top = lab.shape[0]
    rep = np.zeros(lab.shape[1], dtype=bool)
    for i in range(top):
        for j in range(i + 1, top):
            rep |= lab[i] == lab[j]
    best = lab.min(0)
    some = np.flatnonzero(rep)
    if some.size:
        best[some] = _ell_counted(lab[:, some], u)
    return full, (best if full.size == best.size else best[full]).astype(np.int64)


def _ell_counted(lab: np.ndarray, u: int) -> np.ndarray:
    """Per column of ``lab`` (rows of values), the most frequent value, the smallest of a tie."""
    count = (lab[:, None, :] == lab[None, :, :]).sum(1, dtype=np.int8)  # each value's occurrences in its row
    if u + ELL_MAX < 2 ** 27:  # (count, -value) in int32: count * 2^27 - value (count <= 8); half the bytes
        score = count.astype(np.int32)
        score <<= 27
        score -= lab
        return (-score.max(0)) & (2 ** 27 - 1)
    wide = count.astype(np.int64)  # (count, -value): the most frequent, the smallest of a tie
    wide <<= 32
    wide += 0x7FFFFFFF - lab
    return 0x7FFFFFFF - (wide.max(0) & 0xFFFFFFFF)


def _best(starts: np.ndarray, code: np.ndarray, cnt: np.ndarray, u: int) -> np.ndarray:
    """Per segment (from ``starts``) of (value, count) pairs, the most frequent value, the smallest of a tie."""
    score = cnt.astype(np.int64)  # count * u + (u - 1 - value)
    score *= u
    score += u - 1
    score -= code
    return (u - 1) - np.maximum.reduceat(score, starts) % u


# --------------------------------------------------------------------------------------------
# The algorithm as the framework runs it
# --------------------------------------------------------------------------------------------
def both_ways(edges: EdgeList) -> EdgeList:
    """In- plus out-neighbours as a multiset: every edge in both directions, so a pair linked both
    ways counts twice and a self-loop counts the vertex's own label twice (in and out). An
    undirected graph (each edge listed once) gives each neighbour once per edge."""
    return EdgeList(edges.url, edges.ids, np.concatenate([edges.src, edges.dst]), np.concatenate([edges.dst, edges.src]),
                    np.concatenate([edges.weight, edges.weight]), np.concatenate([edges.lineno, edges.lineno]))


def _vertex(edges: EdgeList, config: dict[str, Any]) -> Any:
    rank = label_ranks(edges.ids)  # a vertex's label is its rank in label order, its result the id
    index = {vid: i for i, vid in enumerate(edges.ids)}
    by_rank = [edges.ids[i] for i in rank.argsort().tolist()]
    return lambda vid, adj: CDLPVertex(vid, adj, int(rank[index[vid]]), config["iterations"], by_rank)


def _summarize(config: dict[str, Any], ids: Ids, labels: Ids | np.ndarray) -> dict[str, Any]:
    names, counts = label_counts(labels)
    return {"labels": [str(x) for x in names], "counts": counts}


def _report(count: int, summaries: list[dict[str, Any]], config: dict[str, Any], result: Any,
            loading: int) -> tuple[list[str], dict[str, Any]]:
    sizes_counter: Counter[str] = Counter()
    for s in summaries:
        sizes_counter.update(dict(zip(s["labels"], s["counts"])))
    sizes = sizes_counter.most_common()
    largest = sorted(sizes, key=lambda c: (-c[1], c[0]))[: config["top"]]
    lines = [f"cdlp: {len(sizes)} communit{'y' if len(sizes) == 1 else 'ies'} over {count} vertices "
             f"after {config['iterations']} iteration(s)"]
    lines += [f"{label:<24} {size} vertices" for label, size in largest]
    return lines, {"vertices": count, "communities": len(sizes), "largest": largest}


ALGORITHM = Algorithm(
    name="cdlp",
    description="community detection by synchronous label propagation, ties to the smallest label (Graphalytics CDLP)",
    params=(Param("iterations", 10, "int", "label propagation rounds", 0),),
    # in- plus out-neighbours whatever ``directed`` says; an undirected graph is loaded both ways,
    # so that its out-edges are the neighbours
    block=lambda bid, io, c: CDLPLoaded(bid, io, c["iterations"], not c["directed"]),
    vertex=_vertex,
    edges=lambda edges, c: both_ways(edges),
    collected=lambda rows, c: [(vid, str(label)) for vid, label in rows],  # (block labels: ints for integer ids)
    summarize=_summarize,
    report=_report,
    noun="labels",
    value="label",
    aggregators=(("updated", "sum"), ("cdlp_lo", "min"), ("cdlp_hi", "max")),  # (block mode: the labels' range)
    progress_metric="updated",
)
