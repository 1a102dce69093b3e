"""The routed edge tables (``graphbuild.edge_table``) and the block CSR built from them."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from mariana.engine.local import LocalRuntime
from mariana.jobs import BuildContext, get_job, resolve_config
from mariana.partitioner import graphbuild
from mariana.storage.ids import unpack_keys
from mariana.vertices.graph.block import LoadedBlock

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_edge_table_sends_each_sources_edges_as_one_run_in_file_order(seed):
    rng = np.random.default_rng(seed)
    keys = rng.choice(10 ** 9, 60, replace=False).astype(np.int64)  # a piece's ids, unsorted
    owner = rng.integers(0, 3, 60).astype(np.int16)
    src, dst = rng.integers(0, 40, 300), rng.integers(0, 60, 300)
    weight = rng.random(300)
    both = (rng.integers(30, 60, 20), rng.integers(0, 60, 20))
    table, used = graphbuild.edge_table(keys, owner, src, dst, both, weight)
    kt, role = unpack_keys(table["kt"]), table["kr"]
    assert (np.diff(kt) > 0).all() and sorted(kt.tolist()) == sorted(keys[used].tolist())
    np.testing.assert_array_equal(table["ko"], owner[used])
    ends = set(both[0].tolist()) | set(both[1].tolist())
    for i, key in enumerate(kt.tolist()):  # the roles of each key
        j = int(np.flatnonzero(keys == key)[0])
        assert bool(role[i] & 1) == (j in set(src.tolist()) | ends)
        assert bool(role[i] & 2) == (j in set(dst.tolist()) | ends)
        assert bool(role[i] & 4) == (j in set(src.tolist()))
    # the one-way edges again, from the runs: by source key, each source's in file order
    sources = np.repeat(kt[(role & 4).view(bool)], table["sn"])
    got = list(zip(sources.tolist(), kt[table["di"]].tolist(), table["w"].tolist()))
    want = sorted(zip(keys[src].tolist(), keys[dst].tolist(), weight.tolist()), key=lambda e: e[0])  # (stable)
    assert got == want
    assert list(zip(kt[table["bi"]].tolist(), kt[table["bj"]].tolist())) == list(zip(keys[both[0]].tolist(),
                                                                                        keys[both[1]].tolist()))


def _blocks(tmp_path: Path, job_name: str, sets: list[str], workers: int) -> list[LoadedBlock]:
    job = get_job(job_name)
    g = job.build(resolve_config(job, None, [f"graph={tmp_path / 'g.e'}", "split_mb=0.002", *sets]),
                  BuildContext(workers=workers))
    LocalRuntime(g, workers).run()
    return [g.instantiate(vid) for vid in g.vertex_ids()]  # type: ignore[misc]


@pytest.mark.parametrize("directed", [True, False])
def test_the_block_csr_is_the_graph_and_the_same_in_any_stripes_and_pieces(tmp_path, monkeypatch, directed):
    """Every row's out-edges are the graph's (weights with them); stripes of rows and pieces of
    edges place them in the same order (one stripe, whole messages: the order of the messages)."""
    rnd = random.Random(5)
    edges = [(rnd.randrange(400), rnd.randrange(400), rnd.randrange(1, 9) / 4) for _ in range(3000)]
    (tmp_path / "g.e").write_text("".join(f"{a} {b} {w}\n" for a, b, w in edges))
    sets = ["source=0", "directed=" + str(directed).lower()]
    want: dict[str, list[tuple[str, float]]] = {}
    for a, b, w in edges:
        want.setdefault(str(a), []).append((str(b), w))
        if not directed and a != b:
            want.setdefault(str(b), []).append((str(a), w))
    forms = []
    for stripes, piece in [(1, 1 << 20), (3, 7), (16, 1 << 20), (5, 1)]:
        monkeypatch.setattr(graphbuild, "STRIPES", stripes)
        monkeypatch.setattr(graphbuild, "BUILD_PIECE", piece)
        csr = []
        for b in _blocks(tmp_path, "sssp", sets, workers=3):
            g = b.g
            assert g is not None and b._split is not None
            slot, weight = b._split.whole(g)  # (the split holds the edges from the first step on)
            ids = b.out.result(g.own, np.zeros(len(g.own)), labels=False)["ids"]
            names = b.out.result(g.targets, np.zeros(len(g.targets)), labels=False)["ids"]
            for r, vid in enumerate(ids):
                row = [(names[s], float(w)) for s, w in zip(slot[g.indptr[r]:g.indptr[r + 1]],
                                                            weight[g.indptr[r]:g.indptr[r + 1]])]
                assert sorted(row) == sorted(want.get(vid, [])), vid
            assert np.unique(slot).tolist() == list(range(len(names)))  # the targets: the destinations, no more
            csr.append((g.indptr.copy(), slot, weight))
        forms.append(csr)
    for other in forms[1:]:
        for (p0, s0, w0), (p1, s1, w1) in zip(forms[0], other):
            np.testing.assert_array_equal(p0, p1)
            np.testing.assert_array_equal(s0, s1)
            np.testing.assert_array_equal(w0, w1)
