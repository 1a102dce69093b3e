"""A block's graph cut into its internal and boundary edges (``vertices.graph.block._Split``)."""

from __future__ import annotations

import numpy as np
import pytest

from mariana.vertices.graph import block as gb

pytestmark = pytest.mark.timeout(60)


def _graph(seed: int, k: int = 300, m: int = 5000, blocks: int = 3) -> gb.LocalGraph:
    """Block 0 of a random graph: its rows (keys 0, 3, 6, ...: every third key is its own), each
    row's out-edges (rows with none among them) to sorted distinct targets, any block's."""
    rng = np.random.default_rng(seed)
    own = np.arange(0, blocks * k, blocks, dtype=np.int64)
    counts = rng.integers(0, 2 * m // k, k)
    counts[rng.choice(k, k // 10, replace=False)] = 0
    dst_keys = rng.integers(0, blocks * k, int(counts.sum()))
    targets = np.unique(dst_keys)
    return gb.LocalGraph(own, np.concatenate(([0], np.cumsum(counts))), np.searchsorted(targets, dst_keys).astype(np.int32),
                         targets, (targets % blocks).astype(np.int16), None, [f"b{i}" for i in range(blocks)])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("piece", [3, 64, 1 << 18])
def test_a_split_in_the_graphs_own_slots_is_the_split(seed, piece, monkeypatch):
    monkeypatch.setattr(gb, "EDGE_PIECE", piece)  # (row counts and lookups in pieces)
    g = _graph(seed)
    src = np.repeat(np.arange(len(g.own)), np.diff(g.indptr))
    inside = g.target_block[g.slot] == 0
    want_rows = np.searchsorted(g.own, g.targets[g.slot[inside]])
    split = gb._Split(g, 0)
    np.testing.assert_array_equal(split.indptr, np.concatenate(([0], np.cumsum(np.bincount(src[inside], minlength=len(g.own))))))
    np.testing.assert_array_equal(split.indices, want_rows)
    np.testing.assert_array_equal(split.b_slot, g.slot[~inside])
    slot = g.slot.copy()
    mine = gb._Split(g, 0, consume=True)  # the split made in g.slot itself
    for name in ("indptr", "indices", "b_indptr", "b_slot"):
        np.testing.assert_array_equal(getattr(mine, name), getattr(split, name), err_msg=name)
    assert np.shares_memory(mine.indices, g.slot) and np.shares_memory(mine.b_slot, g.slot)
    g.slot = slot  # ... from which ``whole`` gives the graph's slots back
    np.testing.assert_array_equal(mine.whole(g)[0], split.whole(g)[0])
