"""LCC's triangle counts over a block's CSR (``triangle_credits``, and ``oriented_triangles`` for
one block of several): degrees and triangle sums as exact integers, ranked by (degree, row) so
that the work follows the low end of each edge, not the square of the largest degree.

Forms, the same integers whichever runs: scipy's masked sparse products over the rank-oriented
adjacency; the wedges of that adjacency checked one by one where they are few (scipy's lookup of
given entries, ``csr_sample_values``); on a bounded-degree symmetric graph (a grid) the wedges
oriented by row number, with no sort or transpose. Index arrays are int32 below
``partitioner.csr.INT32_ENTRIES`` (``index_type``); above it the two symmetric shortcuts decline
and the general path runs with int64 ones. ``vertices.graph.lcc`` says what each costs with the
degree distribution.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...partitioner.csr import fits_int32, index_type
from .kernels import _ST, _csr_matrix, row_ids, row_pieces

#: scipy's C lookup of given (row, column) entries of a CSR (private; the wedge form needs it;
#: other scipy versions: the masked products instead)
_sample = getattr(_ST, "csr_sample_values", None)

__all__ = ["triangle_credits", "oriented_triangles", "TRIANGLE_CHUNK"]

#: at most about this many length-2 paths (products) or wedges (one by one) per chunk of rows: bounds
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
    rows go in chunks of about ``TRIANGLE_CHUNK`` terms; where there are few wedges, each wedge
    of U checked one by one instead (``_wedge_triangles``); the same integers.
    ``symmetric``: every edge is stored both ways (an undirected graph as loaded), so M is 2 on
    every neighbour pair and needs no transpose."""
    k = len(indptr) - 1
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


def _row_chunks(work: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive row ranges of about ``TRIANGLE_CHUNK`` work each (at least one row)."""
    return row_pieces(np.concatenate(([0], np.cumsum(work, dtype=np.int64))), TRIANGLE_CHUNK)


#: the packing of two sums in one int64 product term: (a * _PACK + 1) * (_PACK + b)
_PACK = 1 << 20


def _rank(k: int, deg: np.ndarray) -> np.ndarray:
    """The rank (degree, row) of every row as one integer (int32 where it fits)."""
    it: Any = index_type(k * (int(deg.max(initial=0)) + 1))  # (ranks are column indices of a matrix)
    rank = deg.astype(it)
    rank *= it(k)
    rank += np.arange(k, dtype=it)
    return rank


def _few_symmetric(k: int, indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``triangle_credits`` of a symmetric CSR whose degrees are at most ``_FEW`` (a grid, a road
    network), its rows in any order: U is each row's entries above its row number, compacted in
    place (no sort, no transpose: at such degrees any order keeps the wedges few), and its wedges
    are checked one by one (``_wedge_triangles``; scipy's lookup scans an unsorted row). None
    where it does not apply: larger degrees, sizes past ``INT32_ENTRIES``, more than ``WEDGE_FACTOR``
    wedges an entry of U, or a repeated entry (then the general path sums repeats). A repeat
    shows as a wedge whose two ends are one vertex, in the row of its lower end, as the matrix is
    symmetric. Grid-18 as the LCC job loads it: ~0.75x the general path's time."""
    n = len(indices)
    if not n or not fits_int32(n, k):
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
    None when there are repeated entries (then U has them too) or the sizes reach ``INT32_ENTRIES``:
    the general path (which sorts) runs."""
    if not len(indices) or not fits_int32(len(indices), k):
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
    it: Any = index_type(ucol.size, k)
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
