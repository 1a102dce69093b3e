"""The whole-block kernels: with int32 and with int64 index arrays (``form``) they give the same
bits, and the bits of the per-vertex algorithms (Bellman-Ford sums, ascending-source PageRank
sums, min-id components)."""

from __future__ import annotations

import heapq
import subprocess
import sys

import numpy as np
import pytest

from mariana.partitioner import csr
from mariana.vertices.graph import kernels as bk
from mariana.vertices.graph import triangles as tr

def _csr(k: int, src: np.ndarray, dst: np.ndarray, *extra: np.ndarray):
    order = np.argsort(src, kind="stable")
    indptr = np.concatenate(([0], np.cumsum(np.bincount(src, minlength=k))))
    return (indptr, dst[order].astype(np.int32), *(e[order] for e in extra))


def _random_graph(seed: int, k: int, m: int):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, k, m), rng.integers(0, k, m)
    w = np.round(rng.random(m), 3)  # zeros included: 0.0 weights are edges too
    w[:5] = 0.0
    return src, dst, w


def _reference_sssp(k, src, dst, w, start):
    """Label-correcting search in plain Python floats: d[v] = min over paths of ((d0 + w1) + w2)..."""
    adj = [[] for _ in range(k)]
    for a, b, x in zip(src.tolist(), dst.tolist(), w.tolist()):
        adj[a].append((b, x))
    dist = [float("inf")] * k
    heap = []
    for v, d0 in start.items():
        dist[v] = d0
        heap.append((d0, v))
    heapq.heapify(heap)
    while heap:
        d, v = heapq.heappop(heap)
        if d > dist[v]:
            continue
        for b, x in adj[v]:
            if d + x < dist[b]:
                dist[b] = d + x
                heapq.heappush(heap, (d + x, b))
    return np.array(dist)


def _union_find(k: int, src: np.ndarray, dst: np.ndarray):
    """The reference: ``find`` over ``k`` vertices after joining every (src, dst) pair."""
    parent = list(range(k))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in zip(src.tolist(), dst.tolist()):
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)
    return find


def _with_room(indices: np.ndarray, weight: np.ndarray | None, room: int):
    """The CSR's arrays with ``room`` entries more after its own (garbage a relaxation must
    overwrite where it puts a super-source's edges), as SSSP on several blocks gives them."""
    if not room:
        return indices, weight
    return (np.concatenate((indices, np.full(room, 7, indices.dtype))),
            None if weight is None else np.concatenate((weight, np.full(room, 9.75))))


@pytest.mark.parametrize("room", [0, 300])
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("method", [None, "dijkstra", "frontier"])
def test_relax_gives_bellman_ford_sums_from_offset_seeds(form, seed, method, room, monkeypatch):
    monkeypatch.setattr(bk.Relaxer, "ROUNDS", 2)  # the default mix: 2 frontier rounds, then Dijkstra
    k = 300
    src, dst, w = _random_graph(seed, k, 900)
    indptr, indices, weight = _csr(k, src, dst, w)
    relax = bk.relax(indptr, *_with_room(indices, weight, room))
    rng = np.random.default_rng(seed + 10)
    # from one source at 0.0, then news at offsets (as boundary messages bring them)
    dist = np.full(k, np.inf)
    dist[0] = 0.0
    relax(dist, np.array([0]), method)
    np.testing.assert_array_equal(dist, _reference_sssp(k, src, dst, w, {0: 0.0}))
    seeds = rng.choice(k, 7, replace=False)
    offsets = np.round(rng.random(7) * 0.05, 4) + 0.1 / 3
    start = {}
    for v, d0 in zip(seeds.tolist(), offsets.tolist()):
        if d0 < dist[v]:
            dist[v] = d0
        start[v] = min(d0, start.get(v, np.inf))
    news = np.array(sorted(v for v, d0 in start.items() if d0 <= dist[v]))
    before = dist.copy()
    down = relax(dist, news, method)
    ref = np.minimum(before, _reference_sssp(k, src, dst, w, {v: dist[v] for v in news.tolist()}))
    np.testing.assert_array_equal(dist, ref)  # bit for bit
    assert set(down.tolist()) == set(np.flatnonzero(dist < before).tolist())
    np.testing.assert_array_equal(relax.indices, indices)  # the block's own edges untouched
    np.testing.assert_array_equal(relax.weight, weight)



def _bits(*arrays: np.ndarray) -> list[bytes]:
    """Values in order, whatever the width of their integer type (floats: their own bits)."""
    return [(a if a.dtype.kind == "f" else a.astype(np.int64)).tobytes() for a in arrays]


@pytest.mark.parametrize("seed", [1, 2])
def test_the_int64_form_gives_the_int32_forms_bits(seed, monkeypatch, in_both_forms):
    """Every kernel with int64 index arrays (the limit lowered to 1) against the same with int32:
    the same values in the same order, floats to the bit, and the rows that went down in the
    same order; the int64 form runs with int64 arrays (the pieces a sum reads)."""
    monkeypatch.setattr(bk.Relaxer, "ROUNDS", 2)
    k = 300
    src, dst, w = _random_graph(seed, k, 1200)
    indptr, indices, weight = _csr(k, src, dst, w)
    both_s, both_d = np.concatenate((src, dst)), np.concatenate((dst, src))
    sptr, sind = _csr(k, both_s, both_d)
    perm = np.random.default_rng(seed).permutation(k)
    slots = np.argsort(perm)[sind].astype(np.int32)
    x = np.random.default_rng(seed).random(k) * 10.0 ** np.arange(-6, 6).repeat(25)

    def run():
        out = []
        f = bk.csr_sum(indptr, indices)
        out.append(f(x))
        out.append(np.array([p[2].dtype.itemsize for p in f._pieces]))  # (the form itself: int32 or int64)
        out += [bk.components(indptr, indices), bk.components(sptr, sind, symmetric=True),
                bk.components(sptr, slots, symmetric=True, cols=perm)]
        for method in (None, "dijkstra", "frontier"):
            for wt in (weight, None):
                relax = bk.relax(indptr, *_with_room(indices, wt, 50))
                for start in ({0: 0.0}, {3: 1.5, 17: 1.5, 40: 1.5}, {3: 0.25, 17: 0.125, 40: 2.0}):
                    dist = np.full(k, np.inf)
                    seeds = np.array(sorted(start))
                    dist[seeds] = [start[v] for v in seeds.tolist()]
                    out += [relax(dist, seeds, method), dist]
        for symmetric, (p, i) in ((False, (indptr, indices)), (True, (sptr, sind))):
            out += list(tr.triangle_credits(p, i, symmetric=symmetric))
        return out

    narrow, wide = in_both_forms(run)
    assert narrow[1].tolist() == [4] and wide[1].tolist() == [8]
    assert _bits(*narrow[:1] + narrow[2:]) == _bits(*wide[:1] + wide[2:])
    assert narrow[0].any() and narrow[-1].any()  # (sums and triangles there to compare)


@pytest.mark.parametrize("room", [0, 400])
@pytest.mark.parametrize("seed", [1, 2])
def test_unit_weights_give_hop_counts_from_one_or_several_seeds(form, seed, room):
    """``weight=None`` (BFS): one seed, several seeds at one depth (the breadth-first path), and
    seeds at different depths (frontier rounds and Dijkstra) all give the reference hop counts."""
    k = 400
    src, dst, _ = _random_graph(seed, k, 1600)
    indptr, indices = _csr(k, src, dst)
    ones = np.ones(len(src))
    for start in ({0: 0.0}, {3: 5.0, 17: 5.0, 40: 5.0}, {3: 2.0, 17: 4.0, 40: 7.0}):
        relax = bk.relax(indptr, *_with_room(indices, None, room))
        dist = np.full(k, np.inf)
        seeds = np.array(sorted(start))
        dist[seeds] = [start[v] for v in seeds.tolist()]
        before = dist.copy()
        down = relax(dist, seeds)
        np.testing.assert_array_equal(dist, _reference_sssp(k, src, dst, ones, start))
        assert set(down.tolist()) == set(np.flatnonzero(dist < before).tolist()) and down.size > 50


def test_breadth_first_search_without_a_matrix_is_scipys_public_one(monkeypatch):
    """The search over the pattern alone gives the order and predecessors of scipy's public call
    (which wants a matrix with data), and a unit-weight relaxation that only searches breadth
    first makes no array of weights; where the internal function is missing, or past
    ``INT32_ENTRIES`` (it takes int32 only), the public call."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order

    k = 500
    src, dst, _ = _random_graph(4, k, 2000)
    indptr, indices = _csr(k, src, dst)
    m = csr_matrix((np.ones(len(indices)), indices, indptr), shape=(k, k))
    for root in (0, 7, 499):
        got = bk._breadth_first(root, indptr, indices)
        assert got is not None
        want = breadth_first_order(m, root, directed=True, return_predecessors=True)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    results = []
    for internal in (True, False):
        if not internal:
            monkeypatch.setattr(bk, "_breadth_first", lambda *a: None)
        for seeds in ([0], [3, 17, 40]):
            relax = bk.relax(indptr, *_with_room(indices, None, 300))
            dist = np.full(k, np.inf)
            dist[seeds] = 2.0
            relax(dist, np.array(seeds))
            results.append(dist)
            assert (relax._room_weight is None) == internal
    for a, b in zip(results[:2], results[2:]):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(csr, "INT32_ENTRIES", len(indices))
    assert bk._breadth_first(0, indptr, indices) is None


@pytest.mark.parametrize("sample_degree", (0, 10 ** 9))
def test_components_from_a_sample_and_through_a_column_map(form, sample_degree, monkeypatch):
    """A dense part (a giant component whose rows are never read past their first entries), small
    components and isolated rows, given through a column map (slots to rows): the same labels
    whether the sample runs (sample_degree 0: always; its fallback on the sparse graph) or not."""
    monkeypatch.setattr(bk, "SAMPLE_DEGREE", sample_degree)
    rng = np.random.default_rng(8)
    k = 600
    src, dst = rng.integers(0, 300, 4000), rng.integers(0, 300, 4000)  # dense: rows 0..299
    c2s, c2d = rng.integers(300, 340, 400), rng.integers(300, 340, 400)  # a second dense cluster
    small = rng.integers(340, 560, 120)  # sparse pairs among 340..559; 560.. isolated
    # the clusters meet by one edge listed last (past every sampled entry of its two rows)
    src, dst = np.r_[src, c2s, small[:60], 7], np.r_[dst, c2d, small[60:], 333]
    for s_, d_ in ((src, dst), (small[:60], small[60:])):
        both_s, both_d = np.concatenate((s_, d_)), np.concatenate((d_, s_))
        indptr, rows = _csr(k, both_s, both_d)
        perm = rng.permutation(k)  # slot -> row: the kernel reads rows through it
        slots = np.argsort(perm)[rows].astype(np.int32)
        want = bk.components(indptr, rows) if sample_degree else None
        got = bk.components(indptr, slots, symmetric=True, cols=perm)
        find = _union_find(k, both_s, both_d)
        ref = np.array([find(v) for v in range(k)])
        np.testing.assert_array_equal(got, ref)
        if want is not None:
            np.testing.assert_array_equal(want, ref)


def test_components_label_each_row_with_its_components_smallest_row(form):
    k = 500
    rng = np.random.default_rng(4)
    src, dst = rng.integers(0, k, 300), rng.integers(0, k, 300)
    both_s, both_d = np.concatenate((src, dst)), np.concatenate((dst, src))
    indptr, indices = _csr(k, both_s, both_d)
    got = bk.components(indptr, indices)
    np.testing.assert_array_equal(bk.components(indptr, indices, symmetric=True), got)
    find = _union_find(k, src, dst)  # reference
    want = np.array([min(r for r in range(k) if find(r) == find(v)) for v in range(k)])
    np.testing.assert_array_equal(got, want)
    # a long path (high diameter): one call, whatever the length
    n = 4000
    indptr, indices = _csr(n, np.r_[np.arange(n - 1), np.arange(1, n)], np.r_[np.arange(1, n), np.arange(n - 1)])
    assert not bk.components(indptr, indices).any()
    assert not bk.components(indptr, indices, symmetric=True).any()


@pytest.mark.parametrize("piece", [1 << 18, 64, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_csr_sum_adds_in_stored_order(form, monkeypatch, piece, dtype):
    monkeypatch.setattr(bk, "SUM_PIECE", piece)  # rows summed in pieces: one, many, a row longer than one
    rng = np.random.default_rng(5)
    k, m = 50, 2000
    rows = np.sort(np.concatenate((rng.integers(0, k, m - 300), np.full(300, 7))))  # row 7: > 64 entries
    cols = rng.integers(0, 3 * m, m).astype(dtype)
    x = rng.random(3 * m) * 10.0 ** rng.integers(-8, 8, 3 * m)  # magnitudes that make the order matter
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=k))))
    got = bk.csr_sum(indptr, cols)(x)
    want = np.zeros(k)
    for r, c in zip(rows.tolist(), cols.tolist()):
        want[r] += x[c]  # sequential, from 0.0
    np.testing.assert_array_equal(got, want)
    assert not got[np.diff(indptr) == 0].any()
    empty = bk.csr_sum(np.zeros(4, np.int64), np.empty(0, dtype))(x)  # rows without entries
    np.testing.assert_array_equal(empty, np.zeros(3))



@pytest.mark.parametrize("k, ncols, m", [(40, 90, 3000), (5, 3, 0), (1, 7, 50)])
def test_transpose_lists_each_columns_rows_ascending_with_duplicates(form, k, ncols, m):
    rng = np.random.default_rng(k + m)
    rows = np.sort(rng.integers(0, k, m))
    cols = rng.integers(0, ncols // 2 + 1, m).astype(np.int32)  # duplicates, and columns without entries
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=k))))
    tptr, trows = bk.transpose(indptr, cols, ncols)
    assert len(tptr) == ncols + 1 and tptr[-1] == m
    for c in range(ncols):
        assert trows[tptr[c]:tptr[c + 1]].tolist() == rows[cols == c].tolist()

@pytest.mark.parametrize("n, nkeys", [(5000, 300), (0, 4), (70000, 3)])
def test_group_by_is_a_stable_counting_sort(form, n, nkeys):
    keys = np.random.default_rng(n).integers(0, nkeys, n).astype(np.int32)
    indptr, order = bk.group_by(keys, nkeys)
    np.testing.assert_array_equal(order, np.argsort(keys, kind="stable"))
    np.testing.assert_array_equal(np.diff(indptr), np.bincount(keys, minlength=nkeys))


@pytest.mark.parametrize("n, piece", [(0, 4), (1, 4), (37, 4), (40, 8), (70000, 1 << 16)])
@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_select_keeps_what_a_mask_keeps_in_order_across_pieces(n, piece, dtype, monkeypatch):
    monkeypatch.setattr(bk, "SELECT_PIECE", piece)
    rng = np.random.default_rng(n)
    a, mask = rng.integers(-50, 50, n).astype(dtype), rng.random(n) < 0.5
    np.testing.assert_array_equal(bk.select(mask, a), a[mask])
    out = np.full(int(mask.sum()) + 3, -7, dtype)  # into a given array's head
    bk.select(mask, a, out=out[:int(mask.sum())])
    np.testing.assert_array_equal(out[:int(mask.sum())], a[mask])
    assert (out[int(mask.sum()):] == -7).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_row_edge_pieces_give_every_entry_of_the_rows_in_bounded_pieces(seed):
    """The entries of some rows (row, index), in row order; in pieces of at most ``size`` entries,
    a longer row in a piece of its own, no empty piece."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 9, 400)
    counts[7] = 50  # longer than a piece
    indptr = np.concatenate(([0], np.cumsum(counts)))
    rows = np.union1d(rng.choice(400, 150, replace=False), [7])
    src, e = bk.row_edges(indptr, rows)
    assert e.tolist() == [i for r in rows.tolist() for i in range(indptr[r], indptr[r + 1])]
    assert src.tolist() == [r for r in rows.tolist() for _ in range(counts[r])]
    pieces = list(bk.row_edge_pieces(indptr, rows, size=20))
    assert np.concatenate([p[0] for p in pieces]).tolist() == src.tolist()
    assert np.concatenate([p[1] for p in pieces]).tolist() == e.tolist()
    for piece_rows, _ in pieces:
        assert 0 < len(piece_rows) <= 20 or np.unique(piece_rows).tolist() == [7]
    assert list(bk.row_edge_pieces(indptr, rows[:0])) == []


@pytest.mark.parametrize("seed", [0, 1])
def test_entry_value_pieces_pair_each_entry_with_its_rows_value(seed):
    """(entry, its row's value) for the entries of some rows or of every row (the slices), in
    row order, in pieces of at most ``size`` entries (a longer row alone), none empty."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 9, 300)
    counts[5], counts[-1] = 40, 0  # longer than a piece; an empty last row
    indptr = np.concatenate(([0], np.cumsum(counts)))
    entries = rng.integers(0, 10**6, int(indptr[-1]))
    values = rng.random(300)
    for rows in (np.arange(300), np.union1d(rng.choice(300, 120, replace=False), [5])):
        pieces = list(bk.entry_value_pieces(indptr, entries, values, rows, size=16))
        want = [(int(entries[i]), float(values[r])) for r in rows.tolist() for i in range(indptr[r], indptr[r + 1])]
        assert [(int(a), float(b)) for es, vs in pieces for a, b in zip(es, vs)] == want
        assert all(0 < len(es) <= 16 or len(es) == 40 for es, _ in pieces)
    assert list(bk.entry_value_pieces(indptr, entries, values, np.arange(0))) == []


def test_the_sparse_loops_come_without_the_scipy_sparse_package():
    """PageRank's kernels call scipy's compiled loops without importing ``scipy.sparse`` (~19 MB
    and ~0.1 s of every process), with the results by definition; nothing on PageRank's path
    imports the package."""
    code = "\n".join([
        "import sys, numpy as np",
        "import mariana.cli, mariana.jobs.graphjob, mariana.vertices.graph.pagerank, mariana.cluster.master, mariana.cluster.worker",
        "from mariana.vertices.graph import kernels as bk",
        "ptr, order = bk.group_by(np.array([2, 0, 1, 2, 0], np.int32), 3)",
        "assert ptr.tolist() == [0, 2, 3, 5] and order.tolist() == [1, 4, 2, 0, 3], (ptr, order)",
        "tp, rows = bk.transpose(np.array([0, 2, 3]), np.array([1, 0, 1], np.int32), 2)",
        "assert tp.tolist() == [0, 1, 3] and rows.tolist() == [0, 0, 1], (tp, rows)",
        "assert bk.csr_sum(np.array([0, 2, 3]), np.array([1, 0, 1], np.int32))(np.array([1.5, 2.0])).tolist() == [3.5, 2.0]",
        "assert 'scipy.sparse' not in sys.modules, sorted(m for m in sys.modules if m.startswith('scipy'))",
    ])
    _fresh_interpreter(code)


def _fresh_interpreter(code: str) -> None:
    """Run ``code`` in a new interpreter (what it imports is what it checks)."""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.timeout(60)
def test_the_traversals_come_without_the_csgraph_package_init():
    """WCC, BFS and SSSP import scipy's two compiled graph modules, not ``scipy.sparse.csgraph``'s
    ``__init__`` (it imports ``scipy.sparse.linalg``: ~11 MiB of every process); code that imports
    the package afterwards in the same process still gets all of it, the same functions included."""
    code = "\n".join([
        "import sys, numpy as np",
        "from mariana.vertices.graph import kernels as bk",
        "bk.import_traversals()",
        "cg = bk._csgraph()",
        "assert 'scipy.sparse.linalg' not in sys.modules, sorted(m for m in sys.modules if 'linalg' in m)",
        "labels = bk.components(np.array([0, 1, 2, 3, 4]), np.array([1, 0, 3, 2], np.int32))",
        "assert labels.tolist() == [0, 0, 2, 2], labels",
        "import scipy.sparse.csgraph as full",
        "assert full.connected_components is cg.connected_components and full.dijkstra is cg.dijkstra",
        "assert full.breadth_first_order is cg.breadth_first_order and callable(full.laplacian)",
        "assert 'scipy.sparse.linalg' in sys.modules and full._traversal.connected_components is cg.connected_components",
        "from scipy.sparse.csgraph import minimum_spanning_tree",
    ])
    _fresh_interpreter(code)


@pytest.mark.timeout(60)
def test_the_traversals_leave_numpys_unused_subpackages_unimported():
    """Importing ``scipy.sparse`` for the traversals does not load numpy's f2py, testing, ma,
    polynomial or ctypeslib (~8 MiB, ~60 ms); numpy keeps every one of them as it was (its own
    lazy import on first use), and scipy's copy of numpy's names reads through to the same."""
    code = "\n".join([
        "import sys, numpy as np",
        "from mariana.vertices.graph import kernels as bk",
        "bk.import_traversals()",
        "assert 'scipy.sparse' in sys.modules",
        "gone = [f'numpy.{n}' for n in bk.NUMPY_UNUSED]",
        "assert not [m for m in gone if m in sys.modules], [m for m in gone if m in sys.modules]",
        "assert not [n for n in bk.NUMPY_UNUSED if n in vars(np)]",
        "assert np.ma.masked_array([1, 2], [0, 1]).sum() == 1 and 'numpy.ma' in sys.modules",
        "import numpy.polynomial.polynomial as P",
        "assert P.polyval(2, [1, 1]) == 3.0 and type(np.polynomial) is type(sys)",
        "from numpy.testing import assert_equal",
        "import scipy._lib.array_api_compat.numpy as xp",
        "assert xp.testing.assert_equal is assert_equal and xp.f2py.__name__ == 'numpy.f2py'",
        "assert np.f2py is sys.modules['numpy.f2py']",
    ])
    _fresh_interpreter(code)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int16])
@pytest.mark.parametrize("counts", [[3, 0, 2, 0, 0, 1], [], [0, 0], [5]])
def test_row_ids_repeat_each_row_by_its_count(form, dtype, counts):
    """The row of every entry, in the dtype asked for (a CSR's row pointers as int32 or int64);
    a pointer array that does not start at 0 is counted from its start, as np.repeat does."""
    indptr = np.concatenate(([0], np.cumsum(np.asarray(counts, dtype=np.int64)))).astype(np.int64)
    for ptr in (indptr, indptr.astype(np.int32), indptr + 4):
        got = bk.row_ids(ptr, dtype)
        assert got.dtype == np.dtype(dtype)
        assert got.tolist() == [r for r, c in enumerate(counts) for _ in range(c)]


def test_levels_give_tree_depths_in_any_order_where_parents_come_first():
    """``_levels`` takes the breadth-first fast path in queue order and pointer jumping otherwise
    (a depth-first order here): both give each node's depth in its predecessor tree."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order, depth_first_order

    src, dst, _ = _random_graph(5, 300, 900)
    indptr, indices = _csr(300, src, dst)
    m = csr_matrix((np.ones(len(indices)), indices, indptr), shape=(300, 300))
    for walk in (breadth_first_order, depth_first_order):
        order, pred = walk(m, 0, directed=True, return_predecessors=True)
        want = [0]
        at = {0: 0}
        for v in order[1:].tolist():
            at[v] = at[int(pred[v])] + 1
            want.append(at[v])
        assert order.size > 100
        np.testing.assert_array_equal(bk._levels(order, pred), want)
