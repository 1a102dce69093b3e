"""LCC's triangle counts (``vertices.graph.triangles``): every form and path gives the counts by definition."""

from __future__ import annotations

import numpy as np
import pytest

from mariana.vertices.graph import triangles as tr


def _csr(k: int, src: np.ndarray, dst: np.ndarray):
    order = np.argsort(src, kind="stable")
    indptr = np.concatenate(([0], np.cumsum(np.bincount(src, minlength=k))))
    return indptr, dst[order].astype(np.int32)


def _reference_triangles(k, src, dst):
    """LCC's counts by definition: |N(v)| and the directed edges among N(v) (loops, repeats ignored)."""
    edges = {(a, b) for a, b in zip(src.tolist(), dst.tolist()) if a != b}
    nbrs = [set() for _ in range(k)]
    for a, b in edges:
        nbrs[a].add(b)
        nbrs[b].add(a)
    tri = [sum((x, w) in edges for x in nb for w in nb) for nb in nbrs]
    return np.array([len(nb) for nb in nbrs]), np.array(tri)


@pytest.mark.parametrize("extra", ["none", "loop", "repeat"])
def test_triangle_credits_of_a_bounded_degree_graph_in_any_row_order(extra):
    """A triangulated grid (degrees <= 6, triangles everywhere) stored both ways, its vertices
    numbered at random so rows are unsorted and U is not ordered by position: the bounded-degree
    path (no sort, no transpose) gives the counts by definition; with a self-loop, and with one
    edge listed twice (the path declines and the general one sums the repeat)."""
    n = 40
    ids = np.arange(n * n).reshape(n, n)
    pairs = [(ids[:, :-1], ids[:, 1:]), (ids[:-1, :], ids[1:, :]), (ids[:-1, :-1], ids[1:, 1:])]
    a = np.concatenate([p[0].ravel() for p in pairs])
    b = np.concatenate([p[1].ravel() for p in pairs])
    if extra == "loop":
        a, b = np.append(a, 7), np.append(b, 7)
    elif extra == "repeat":
        a, b = np.append(a, a[100]), np.append(b, b[100])
    perm = np.random.default_rng(3).permutation(n * n)
    src, dst = perm[np.concatenate((a, b))], perm[np.concatenate((b, a))]
    shuffle = np.random.default_rng(4).permutation(src.size)
    src, dst = src[shuffle], dst[shuffle]
    indptr, indices = _csr(n * n, src, dst)
    given = indptr.copy(), indices.copy()
    deg, tri = tr.triangle_credits(indptr, indices, symmetric=True)
    np.testing.assert_array_equal(indptr, given[0])  # (the input is left as it was)
    np.testing.assert_array_equal(indices, given[1])
    want_deg, want_tri = _reference_triangles(n * n, src, dst)
    assert want_tri.sum() > 0 and int(np.diff(indptr).max()) <= tr._FEW + 1
    np.testing.assert_array_equal(deg, want_deg)
    np.testing.assert_array_equal(tri, want_tri)
    if extra == "none":  # the path itself ran (and said so by not declining)
        got = tr._few_symmetric(n * n, indptr, indices)
        assert got is not None
        np.testing.assert_array_equal(got[1], want_tri)
    elif extra == "repeat":
        assert tr._few_symmetric(n * n, indptr, indices) is None


@pytest.mark.parametrize("chunk,pack,wedges,few", [(1 << 22, True, 4, 16), (3, True, 4, 16), (5, False, 4, 16),
                                                   (1 << 22, True, -1, 16), (1 << 22, True, 10 ** 6, 0),
                                                   (7, True, 10 ** 6, 0), (1 << 22, True, 10 ** 6, 10 ** 6)])
def test_triangle_credits_count_the_edges_among_each_neighbourhood(form, chunk, pack, wedges, few, monkeypatch):
    """Directed and undirected random graphs with loops and repeats (and, undirected, without
    repeats: the unsorted symmetric path), a hub, rows in small chunks, (pack=False) the scipy path
    without the packed product, the wedge form (wedges: its threshold; -1 never) with pairs by
    position (few: largest such row) or by entry, ordered by rank or by row: the counts by definition."""
    monkeypatch.setattr(tr, "TRIANGLE_CHUNK", chunk)
    monkeypatch.setattr(tr, "WEDGE_FACTOR", wedges)
    monkeypatch.setattr(tr, "_FEW", few)
    if not pack:
        monkeypatch.setattr(tr, "_PACK", 4)
    rng = np.random.default_rng(6)
    for k, m in ((1, 3), (7, 0), (30, 120), (60, 400), (400, 1200)):
        src, dst = rng.integers(0, k, m), rng.integers(0, k, m)
        if k > 2:
            src[: m // 4] = 0  # a hub
        both = np.concatenate((src, dst)), np.concatenate((dst, src))
        key = np.unique(np.minimum(src, dst) * k + np.maximum(src, dst))  # distinct pairs, loops kept
        lo, hi = key // k, key % k
        once = np.concatenate((lo, hi[lo != hi])), np.concatenate((hi, lo[lo != hi]))
        rev = once[0][::-1].copy(), once[1][::-1].copy()  # (rows unsorted)
        for s, d, symmetric in ((src, dst, False), (*both, False), (*both, True), (*once, True), (*rev, True)):
            indptr, indices = _csr(k, s, d)
            deg, tri = tr.triangle_credits(indptr, indices, symmetric=symmetric)
            want_deg, want_tri = _reference_triangles(k, s, d)
            np.testing.assert_array_equal(deg, want_deg)
            np.testing.assert_array_equal(tri, want_tri)
