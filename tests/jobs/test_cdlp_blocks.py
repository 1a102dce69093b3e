"""CDLP in block mode (``vertices.graph.cdlp``): the per-row mode and grouping kernels give the
same result with int32 and int64 index arrays (``partitioner.csr.INT32_ENTRIES`` lowered), by
scipy's loops (short rows) and as sorted keys, and the rounds that recompute only the rows next
to a changed label (and the remote transpose behind them) give vertex mode's labels."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from mariana.engine.local import LocalRuntime
from mariana.jobs import BuildContext, get_job, resolve_config
from mariana.vertices.graph import cdlp as cdlp_mod
from mariana.vertices.graph.cdlp import (ELL_MAX, CDLPLoaded, _no_repeats, _with_transpose, ell_layout, ell_modes,
                                          group_by_row, row_modes, sort_rows)
from test_graph_jobs import cli_run

pytestmark = pytest.mark.timeout(120)



def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """The same values in the same order, whatever the width of their integer type."""
    return a.shape == b.shape and a.astype(np.int64).tobytes() == b.astype(np.int64).tobytes()


#: how ``row_modes`` and ``sort_rows`` order rows: scipy's loops (rows shorter than ``SHORT_ROWS``
#: on average, as in these tests) or sorted keys (``SHORT_ROWS`` 0)
ROWS_BY = {"scipy": 16, "keys": 0}


def _modes_by_hand(ptr: np.ndarray, lab: np.ndarray) -> dict[int, int]:
    out = {}
    for r in range(len(ptr) - 1):
        vals = lab[ptr[r]:ptr[r + 1]].tolist()
        if vals:
            out[r] = min(vals, key=lambda v: (-vals.count(v), v))
    return out


@pytest.mark.parametrize("rows_by", tuple(ROWS_BY))
@pytest.mark.parametrize("u", (17, 200000, 2 ** 33))
@pytest.mark.parametrize("piece", (1 << 20, 50))
def test_row_modes_and_group_by_row_match_a_plain_count(monkeypatch, in_both_forms, rows_by, u, piece):
    """u = 17: many repeats and ties in every row; 200000: a value repeats in a few rows only (16
    rows' keys fit 32 bits at a time: pieces); 2^33: 64-bit keys (scipy: int64 columns whatever
    the limit). ``piece``: entries sorted at once. int64 index arrays give int32's results."""
    monkeypatch.setattr(cdlp_mod, "SHORT_ROWS", ROWS_BY[rows_by])
    monkeypatch.setattr(cdlp_mod, "MODE_PIECE", piece)
    rng = np.random.default_rng(5)
    n = 300
    rows = rng.integers(0, n, 4000).astype(np.int32)
    vals = rng.integers(0, u, rows.size).astype(np.int32 if u < 2 ** 31 else np.int64)
    if u > 2 ** 32:  # values near the top of the range, some repeating
        vals[::7] = u - 1 - vals[::7] % 3
    (ptr, grouped), (ptr64, grouped64) = in_both_forms(lambda: group_by_row(rows, vals, n))
    assert _same(ptr, ptr64) and _same(grouped, grouped64) and grouped.dtype == grouped64.dtype == vals.dtype
    order = np.argsort(rows, kind="stable")
    assert np.array_equal(ptr, np.searchsorted(rows[order], np.arange(n + 1)))
    assert np.array_equal(grouped, vals[order])  # stable: each row's values in their first order
    (got_rows, best), wide = in_both_forms(lambda: row_modes(ptr, grouped.copy(), u))  # (it overwrites its values)
    assert _same(got_rows, wide[0]) and _same(best, wide[1])
    want = _modes_by_hand(ptr, grouped)
    repeats = sum(len(set(grouped[ptr[r]:ptr[r + 1]].tolist())) < ptr[r + 1] - ptr[r] for r in range(n))
    assert (repeats > n // 2) if u == 17 else (0 < repeats < n // 8) if u < 2 ** 32 else repeats > n // 8
    assert got_rows.tolist() == sorted(want) and best.tolist() == [want[r] for r in sorted(want)]
    empty_rows, empty_best = row_modes(np.zeros(4, np.int64), np.empty(0, np.int32), u)
    assert empty_rows.size == 0 and empty_best.size == 0


@pytest.mark.parametrize("rows_by", tuple(ROWS_BY))
@pytest.mark.parametrize("width", (50, 300, 2 ** 32 + 5))
@pytest.mark.parametrize("piece", (1 << 20, 40))
def test_sort_rows_sorts_each_row_and_finds_a_repeat(monkeypatch, in_both_forms, rows_by, width, piece):
    """Rows sorted by scipy (short rows) or as keys in pieces (of 40 entries; width 300: 14
    million rows' keys fit 32 bits, 2^32 + 5: 64-bit keys), empty rows anywhere; a single
    repeated value in one row is found; int64 index arrays give int32's results."""
    monkeypatch.setattr(cdlp_mod, "SHORT_ROWS", ROWS_BY[rows_by])
    monkeypatch.setattr(cdlp_mod, "MODE_PIECE", piece)
    rng = np.random.default_rng(7)
    n = 200
    counts = rng.integers(0, 9, n)
    counts[[0, 17, n - 1]] = 0
    counts[5] = 45  # a row longer than a piece
    ptr = np.concatenate(([0], np.cumsum(counts)))
    spread = max(width // 10 ** 6, 1)  # values up to near the top of a wide range
    vals = np.concatenate([rng.choice(min(width, 10 ** 6), c, replace=False) * spread for c in counts])
    (got, distinct), wide = in_both_forms(lambda: sort_rows(ptr, vals, width))
    assert got.tobytes() == wide[0].tobytes() and wide[0].dtype == vals.dtype and wide[1] is distinct
    want = np.concatenate([np.sort(vals[ptr[r]:ptr[r + 1]]) for r in range(n)])
    assert np.array_equal(got, want) and got.dtype == vals.dtype
    assert distinct is True
    twice = vals.copy()
    twice[ptr[5] + 1] = twice[ptr[5] + 30]  # one value twice in row 5
    (got, distinct), wide = in_both_forms(lambda: sort_rows(ptr, twice, width))
    assert distinct is False and wide[1] is False and got.tobytes() == wide[0].tobytes()
    assert np.array_equal(got[ptr[5]:ptr[6]], np.sort(twice[ptr[5]:ptr[6]]))


@pytest.mark.parametrize("u", (3, 17, 2 ** 27 - ELL_MAX - 1, 2 ** 27 - ELL_MAX, 2 ** 31 - ELL_MAX - 1))  # int32 scores up to 2^27
def test_ell_modes_match_a_plain_count(u):
    """Rows of 0..ELL_MAX entries (ties, repeats, empty rows, values up to the largest allowed):
    the per-column form gives the plain count's modes; a longer row: no layout."""
    rng = np.random.default_rng(9)
    n = 500
    cnt = rng.integers(0, ELL_MAX + 1, n)
    ptr = np.concatenate(([0], np.cumsum(cnt)))
    nb = rng.integers(0, 1000, int(ptr[-1])).astype(np.int32)
    code = rng.integers(max(u - 6, 0), u, 1000).astype(np.int64 if u > 2 ** 30 else np.int32)
    layout = ell_layout(ptr, nb)
    assert layout is not None
    rows, best = ell_modes(layout, code, u)
    want = _modes_by_hand(ptr, code[nb])
    assert len(want) < n and rows.tolist() == sorted(want) and best.tolist() == [want[r] for r in sorted(want)]
    assert ell_layout(np.array([0, ELL_MAX + 1]), np.zeros(ELL_MAX + 1, np.int32)) is None


def test_grid_rows_take_the_column_form_and_give_vertex_mode_labels(capsys, tmp_path):
    """A grid (every row at most 4 entries, so every full round takes ``ell_modes``), with a few
    diagonals so that ties and repeats occur: block mode on 1 and 2 workers gives vertex mode's labels."""
    side, lines = 12, []
    for r in range(side):
        for c in range(side):
            v = r * side + c
            if c + 1 < side:
                lines.append(f"{v} {v + 1}\n")
            if r + 1 < side:
                lines.append(f"{v} {v + side}\n")
            if (r + c) % 5 == 0 and r + 1 < side and c + 1 < side:
                lines.append(f"{v} {v + side + 1}\n")
    path = tmp_path / "grid.e"
    path.write_text("".join(lines))
    want = cli_run(capsys, tmp_path, "cdlp", path, "mode=vertex", "iterations=6")[0]
    for workers in (1, 2):
        assert cli_run(capsys, tmp_path, "cdlp", path, "mode=block", "iterations=6", workers=workers)[0] == want


def test_one_blocks_layout_by_its_transpose_is_group_by_rows(form):
    """One block's entries (out-edges grouped by row, then the in-edges from a transpose) are laid
    out as ``group_by_row`` lays out the out- and in-entries together, to the element (int32 or
    int64 index arrays)."""
    rng = np.random.default_rng(1)
    for n, m in ((1, 0), (5, 7), (300, 2000)):
        src = np.sort(rng.integers(0, n, m)).astype(np.int32)
        dst = rng.integers(0, n, m).astype(np.int32)
        indptr = np.concatenate(([0], np.cumsum(np.bincount(src, minlength=n))))
        ptr, nb, _ = _with_transpose(indptr, dst, n)
        want_ptr, want_nb = group_by_row(np.concatenate([src, dst]), np.concatenate([dst, src]), n)
        assert np.array_equal(ptr, want_ptr) and np.array_equal(nb, want_nb)


def test_no_repeats_finds_loops_repeated_edges_and_edges_listed_both_ways(form):
    """One block's first round takes each row's smallest label only where no row lists a neighbour
    twice (found by scipy's sparse loops, with int32 or int64 index arrays); no entries: no claim."""
    assert not _no_repeats(np.array([0, 0, 0]), np.array([], np.int64), 2)
    assert _no_repeats(np.array([0, 1, 1]), np.array([1]), 2)

    def check(rows, dst, n=5):
        indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=n))))
        return _no_repeats(indptr, np.asarray(dst, dtype=np.int64), n)

    assert check([0, 0, 1, 3], [1, 2, 2, 0])
    assert check([0, 0, 1], [3, 4, 4]) and check([1, 2, 4], [0, 0, 0])
    assert not check([0, 0, 1], [1, 2, 0])  # 0-1 listed both ways
    assert not check([0, 0], [1, 1])  # repeated
    assert not check([2], [2])  # a loop
    rng = np.random.default_rng(2)
    for _ in range(20):
        rows = np.sort(rng.integers(0, 300, 600))
        dst = rng.integers(0, 300, 600)
        pairs = {(min(a, b), max(a, b)) for a, b in zip(rows.tolist(), dst.tolist())}
        want = len(pairs) == 600 and all(a != b for a, b in pairs)
        assert check(rows, dst, 300) == want
        keep = np.flatnonzero(rows != dst)
        key = np.minimum(rows, dst) * 300 + np.maximum(rows, dst)
        _, first = np.unique(key[keep], return_index=True)
        sel = np.sort(keep[first])
        assert check(rows[sel], dst[sel], 300)


def _communities(tmp_path: Path, text_ids: bool) -> Path:
    """Dense clusters with a few links between them: labels settle after a few rounds, so the
    later rounds recompute few rows (some of them next to another block's vertices)."""
    rnd = random.Random(17)
    ids = rnd.sample(range(10, 90000), 400)
    names = [f"v{i}" for i in ids] if text_ids else [str(i) for i in ids]
    lines = []
    for c in range(16):
        members = names[c * 25:(c + 1) * 25]
        lines += [f"{a} {b}\n" for a in members for b in members if a < b and rnd.random() < 0.4]
    lines += [f"{rnd.choice(names)} {rnd.choice(names)}\n" for _ in range(30)]
    path = tmp_path / ("text.e" if text_ids else "ints.e")
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("text_ids,directed", ((False, "true"), (True, "true"), (False, "false")))
def test_partial_rounds_give_vertex_mode_labels(capsys, tmp_path, text_ids, directed, form):
    """directed=false: loaded both ways, the out-edges are the entries (no in-edges announced);
    with int32 and int64 index arrays alike."""
    path = _communities(tmp_path, text_ids)
    sets = ("iterations=10", f"directed={directed}")
    want = cli_run(capsys, tmp_path, "cdlp", path, "mode=vertex", *sets)[0]
    for workers in (1, 3):
        got = cli_run(capsys, tmp_path, "cdlp", path, "mode=block", *sets, "split_mb=0.002", workers=workers)[0]
        assert got == want, workers
    # the same run, its blocks looked at: some rounds were partial, across blocks too
    job = get_job("cdlp")
    g = job.build(resolve_config(job, None, [f"graph={path}", *sets, "split_mb=0.002"]), BuildContext(workers=3))
    LocalRuntime(g, 3).run()
    blocks = [g.instantiate(vid) for vid in g.vertex_ids()]
    assert all(isinstance(b, CDLPLoaded) for b in blocks)
    assert all(b.partial > 0 for b in blocks)  # type: ignore[attr-defined]
    assert any(b.tptr is not None for b in blocks)  # type: ignore[attr-defined]


@pytest.mark.parametrize("directed", ("true", "false"))
def test_loops_duplicates_and_more_workers_than_vertices_give_vertex_mode_labels(capsys, tmp_path, directed):
    """Self-loops (the own label twice), an edge listed twice and both ways (counted per listing),
    and 40 workers for 39 vertices (empty blocks, every edge between blocks)."""
    rnd = random.Random(3)
    lines = [f"{rnd.randrange(1, 40)} {rnd.randrange(1, 40)}\n" for _ in range(150)]
    lines += ["5 5\n", "5 5\n", "7 8\n", "8 7\n", "7 8\n"]
    path = tmp_path / "g.e"
    path.write_text("".join(lines))
    sets = (f"directed={directed}", "iterations=10")
    want = cli_run(capsys, tmp_path, "cdlp", path, "mode=vertex", *sets)[0]
    for workers in (1, 2, 40):
        assert cli_run(capsys, tmp_path, "cdlp", path, "mode=block", "split_mb=0.0002", *sets, workers=workers)[0] == want


def test_an_undirected_edge_listed_twice_counts_twice_in_the_first_round(capsys, tmp_path, form):
    """One block, no self-loop, one edge listed both ways: vertex 1's first round sees 2, 3, 3 and
    takes 3, not its smallest neighbour (the row repeats a neighbour, so no min-only round); the
    same graph without the repeat takes 2."""
    for text, want in (("1 2\n1 3\n3 1\n", "1\t3\n2\t1\n3\t1\n"), ("1 2\n1 3\n", "1\t2\n2\t1\n3\t1\n")):
        path = tmp_path / "g.e"
        path.write_text(text)
        for mode in ("vertex", "block"):
            got = cli_run(capsys, tmp_path, "cdlp", path, f"mode={mode}", "directed=false", "iterations=1")[0]
            assert got == want, (text, mode)
