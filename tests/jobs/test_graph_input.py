"""Partitioned graph input and output (issue 23): splits, loading supersteps, parts, merge.

Every worker reads only its own splits; these tests cut small graphs into many tiny splits
(``split_mb``) so that split boundaries fall everywhere, and check the outputs against the
single-file, one-worker and vertex-mode results byte for byte.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import time
import random
import sys
import uuid
from pathlib import Path

import fsspec
import networkx as nx
import numpy as np
import pytest
import zstandard

from mariana.errors import StorageError
from mariana.cli import main
from mariana.jobs import BuildContext, get_job, resolve_config
from mariana.partitioner.graphbuild import _Distinct
from mariana.storage.ids import decode_keys, intkeys, strkeys
from mariana.storage.parts import merge_sorted
from mariana.storage.splits import iter_text_split, lines_before, make_splits, read_text_split
from mariana.partitioner.fragment import LOAD_STEPS
from mariana.vertices.graph.block import LoadedBlock
from test_graph_jobs import RandomGraph, nx_pagerank, nx_wcc, parse_tsv

pytestmark = pytest.mark.timeout(120)

TINY = "split_mb=0.0004"  # ~420-byte splits: dozens per test graph


def run(capsys, job: str, graph: str | Path, out: str | Path, *sets: str, workers: int = 1,
        runtime: str = "local", placement: str | None = None) -> tuple[int, str]:
    argv = ["run", job, "--set", f"graph={graph}", "--set", f"output={out}", "--workers", str(workers),
            "--runtime", runtime, "--run-dir", f"memory://mariana-test-graph-input/{uuid.uuid4().hex}"]
    for s in sets:
        argv += ["--set", s]
    if placement:
        argv += ["--placement", placement]
    rc = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


# ----------------------------------------------------------------------------------------------
# splits
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_text_splits_hold_every_line_exactly_once(seed):
    rnd = random.Random(seed)
    lines = [rnd.choice(["", "# c", "1 2", "10 200 3.5", "abc def", "x" * rnd.randint(1, 90)]) for _ in range(120)]
    text = rnd.choice(["\n", "\r\n"]).join(lines) + rnd.choice(["", "\n"])
    url = f"memory://mariana-test-splits-{uuid.uuid4().hex}/g.e"
    fsspec.filesystem("memory").pipe(url, text.encode())
    for size in (1, 2, 7, 64, 333, len(text) - 1, len(text), 10 * len(text)):
        splits = make_splits([(url, len(text))], size)
        pieces = [read_text_split(s) for s in splits]
        assert b"".join(pieces) == text.encode(), size
        for block in (1, 5, 40, 10 ** 6):  # read in blocks of whole lines: the same bytes
            blocks = [list(iter_text_split(s, block)) for s in splits]
            assert [b"".join(x) for x in blocks] == pieces, (size, block)
            assert all(x.endswith(b"\n") for xs in blocks for x in xs[:-1]), (size, block)
        for s, piece in zip(splits, pieces):
            if piece:  # its first line's number in the whole file
                before = b"".join(pieces[:splits.index(s)])
                assert lines_before(s) == before.count(b"\n"), (size, s)


@pytest.mark.parametrize("seed", [0, 1])
def test_distinct_keys_merged_as_they_come_are_the_sorted_union(seed):
    """The build's union of every message's sorted key table, merged as the parts come (several
    merges: more keys than a merge waits for), is ``np.unique`` of them all, for int and byte keys."""
    rng = np.random.default_rng(seed)
    for make in (lambda a: a, lambda a: np.char.encode(a.astype(str)).astype("S12")):
        parts = [np.unique(make(rng.integers(0, 300_000, int(rng.integers(0, 40_000))))) for _ in range(30)]
        d = _Distinct(make(np.empty(0, np.int64)))
        merges = 0
        for p in parts:
            held = d.held
            d.add(p)
            merges += d.held < held + len(p)
        assert merges >= 3
        assert np.array_equal(d.result(), np.unique(np.concatenate(parts)))


def test_strkeys_sort_like_the_id_strings_and_decode_back():
    rnd = random.Random(5)
    ids = sorted({str(rnd.randint(-10**15, 10**16)) for _ in range(2000)} | {"0", "9", "10", "-1", "-10", "99999999999999999"})
    keys = strkeys(np.array(ids))
    assert np.all(np.diff(keys) > 0)  # string order == key order
    assert decode_keys(keys).tolist() == ids


def test_intkeys_are_the_strkeys_of_the_numbers_strings():
    """Every length from 1 to 17 characters, both signs, 0 and the ends of each length."""
    rng = np.random.default_rng(7)
    parts = [rng.integers(-10**(d - 1), 10**d, 500) for d in range(1, 17)]
    ends = [x for d in range(1, 17) for x in (10**(d - 1), 10**d - 1, -(10**(d - 1)), -(10**d - 1))]
    values = np.concatenate([*parts, np.array([0, 10**16, 10**17 - 1, *ends], dtype=np.int64)])
    values = values[np.char.str_len(values.astype("U21")) <= 17]
    assert np.array_equal(intkeys(values), strkeys(values.astype("U21")))
    assert intkeys(np.empty(0, np.int64)).dtype == np.int64


# ----------------------------------------------------------------------------------------------
# inputs: many splits, directories, globs, .gz, vertices=
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("job,sets", [("pagerank", ("tol=1e-12", "iterations=60")), ("wcc", ()), ("sssp", None)])
def test_tiny_splits_directories_globs_and_gz_give_the_same_bytes(capsys, tmp_path, job, sets):
    rg = RandomGraph(41, 300, 4)
    if sets is None:
        sets = (f"source={rg.source(0)}",)
    single = tmp_path / "g.e"
    single.write_text(rg.text)
    parts = tmp_path / "parts"
    parts.mkdir()
    lines = rg.text.splitlines(keepends=True)
    for i in range(3):
        (parts / f"part-{i}.e").write_text("".join(lines[i::3]))
    (parts / "_SUCCESS").write_text("not an edge list")  # skipped, as Hadoop writes it
    gz = tmp_path / "g.e.gz"
    gz.write_bytes(gzip.compress(rg.text.encode()))
    outputs = {}
    for name, graph, workers, extra in [
        ("vertex", single, 1, ("mode=vertex",)),
        ("one", single, 1, ()),
        ("tiny-3", single, 3, (TINY,)),
        ("tiny-5-range", single, 5, (TINY,)),
        ("dir", parts, 2, (TINY,)),
        ("glob", f"{parts}/part-*.e", 4, ()),
        ("gz", gz, 2, ()),
        ("dir-vertex", parts, 2, ("mode=vertex",)),
    ]:
        out = tmp_path / f"{name}.tsv"
        rc, err = run(capsys, job, graph, out, *sets, *extra, workers=workers,
                      placement="range" if "range" in name else None)
        assert rc == 0, (name, err)
        outputs[name] = out.read_text()
    assert len(outputs["one"].splitlines()) == len(rg.ids)
    assert {k for k, v in outputs.items() if v != outputs["vertex"]} == set()


@pytest.mark.parametrize("mode", ["block", "vertex"])
def test_a_vertices_file_adds_isolated_vertices(capsys, tmp_path, mode):
    (tmp_path / "g.e").write_text("1 2\n2 3\n3 1\n4 1\n")
    (tmp_path / "g.v").write_text("1\n2\n3\n4\n5\n10\n")  # Graphalytics .v: 5 and 10 have no edges
    out = tmp_path / "pr.tsv"
    # format=mariana: vertex<TAB>value lines (vertices= alone implies Graphalytics' format), so block
    # mode reads the graph in parts
    rc, err = run(capsys, "pagerank", tmp_path / "g.e", out, f"vertices={tmp_path / 'g.v'}", f"mode={mode}",
                  "tol=1e-14", "iterations=1000", "format=mariana", workers=2)
    assert rc == 0, err
    g = nx.MultiDiGraph([(1, 2), (2, 3), (3, 1), (4, 1)])
    g.add_nodes_from([5, 10])
    want = nx.pagerank(g, tol=1e-14, max_iter=1000)
    got = dict(parse_tsv(out.read_text()))
    assert got.keys() == {str(v) for v in want}
    assert all(got[str(v)] == pytest.approx(r, abs=1e-10) for v, r in want.items())
    rc, err = run(capsys, "wcc", tmp_path / "g.e", out, f"vertices={tmp_path / 'g.v'}", f"mode={mode}", "format=mariana",
                  workers=3)
    assert dict(parse_tsv(out.read_text(), str)) == {"1": "1", "2": "1", "3": "1", "4": "1", "5": "5", "10": "10"}


# ----------------------------------------------------------------------------------------------
# bad input: file:line in the whole file, exit 2, no output
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("runtime", ["local", "cluster"])
def test_a_malformed_line_in_a_late_split_is_named_by_its_line_in_the_whole_file(capsys, tmp_path, runtime):
    lines = [f"{i} {i + 1}" for i in range(300)]
    lines[236] = "236 237 238 239"  # line 237
    path = tmp_path / "g.e"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.tsv"
    rc, err = run(capsys, "wcc", path, out, TINY, workers=3, runtime=runtime)
    assert rc == 2, err
    assert f"{path}:237: expected 'src dst [weight]', found 4 fields" in err
    assert len(err.strip().splitlines()) == 1 or "run directory" in err
    assert not out.exists() and not list(tmp_path.glob("out.tsv*"))


def test_a_negative_weight_in_a_late_split_is_named_for_sssp(capsys, tmp_path):
    lines = [f"v{i} v{i + 1} 1.5" for i in range(200)]
    lines[150] = "v150 v151 -2"
    path = tmp_path / "g.e"
    path.write_text("# header\n" + "\n".join(lines) + "\n")
    rc, err = run(capsys, "sssp", path, tmp_path / "o.tsv", TINY, "source=v0", workers=2)
    assert rc == 2 and f"{path}:152: negative weight -2" in err
    lines[150] = "v150 v151 2"
    path.write_text("# header\n" + "\n".join(lines) + "\n")
    rc, err = run(capsys, "sssp", path, tmp_path / "o.tsv", TINY, "source=nowhere", workers=2)
    assert rc == 2 and "source vertex 'nowhere' is not in" in err and "201 vertices" in err


# ----------------------------------------------------------------------------------------------
# output in parts and the k-way merge
# ----------------------------------------------------------------------------------------------
def test_output_directory_gets_one_sorted_part_per_worker(capsys, tmp_path):
    rg = RandomGraph(43, 200, 3)
    (tmp_path / "g.e").write_text(rg.text)
    single = tmp_path / "single.tsv"
    assert run(capsys, "wcc", tmp_path / "g.e", single, workers=3)[0] == 0
    outdir = tmp_path / "outdir"
    for workers in (4, 2):  # a rerun with fewer workers leaves no stale part behind
        rc, err = run(capsys, "wcc", tmp_path / "g.e", f"{outdir}/", TINY, workers=workers)
        assert rc == 0, err
        names = sorted(p.name for p in outdir.iterdir())
        assert names == [f"part-{i:05d}.tsv" for i in range(workers)]
        rows = []
        for name in names:
            part = parse_tsv((outdir / name).read_text(), str)  # sorted within the part
            rows += part
        assert sorted(rows) == sorted(parse_tsv(single.read_text(), str))
        assert dict(rows) == nx_wcc(rg.edges, rg.ids)
    assert not list(tmp_path.glob("*.tmp-parts"))


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
@pytest.mark.parametrize("order", ["string", "graphalytics", "numeric"])
def test_merge_sorted_reads_a_bounded_number_of_bytes(chunk, order):
    """Parts of lines sorted by id (as strings, tab or space after the id; or as numbers, negative
    ones too), read ``chunk`` bytes at a time (1: a byte; 7: lines cut across reads): the merge is
    every line once, sorted, byte for byte; ids long enough for the wide-key and long-line paths; a part with no
    last newline; an empty part; one part alone."""
    rnd = random.Random(chunk)
    if order == "numeric":
        ids = sorted({rnd.randint(-500, 10 ** 6) for _ in range(400)})
        names = [str(v) for v in ids]
    else:
        names = sorted({f"{rnd.choice('abc')}{rnd.randint(0, 500)}" for _ in range(400)} | {"x" * 70, "x" * 70 + "1", "y" * 300})
    sep = "\t" if order == "string" else " "
    parts: list[list[str]] = [[] for _ in range(4)]
    for v in names:
        parts[rnd.randrange(4)].append(f"{v}{sep}{rnd.random()!r}\n")
    texts = ["".join(p) for p in parts] + [""]  # an empty part
    texts[0] = texts[0][:-1]  # no last newline
    out = io.BytesIO()
    n = merge_sorted([io.BytesIO(t.encode()) for t in texts], out, chunk_bytes=chunk, order=order)
    got = out.getvalue().decode().splitlines()
    assert n == len(names) and [line.split(sep)[0] + sep for line in got] == [f"{v}{sep}" for v in names]
    assert sorted(got) == sorted("".join(t + "\n" if t and not t.endswith("\n") else t for t in texts).splitlines())
    one = io.BytesIO()  # the merged file is itself one sorted part
    assert merge_sorted([io.BytesIO(out.getvalue())], one, chunk_bytes=chunk, order=order) == len(names)
    assert one.getvalue() == out.getvalue()


def test_merge_sorted_names_a_line_without_its_separator():
    with pytest.raises(StorageError, match="no tab after its id"):
        merge_sorted([io.BytesIO(b"a\t1\nb 2\n"), io.BytesIO(b"c\t3\n")], io.BytesIO())


def test_pagerank_to_one_file_merges_parts_sorted_by_id(capsys, tmp_path):
    rg = RandomGraph(44, 250, 3)
    (tmp_path / "g.e").write_text(rg.text)
    out = tmp_path / "pr.tsv"
    rc, err = run(capsys, "pagerank", tmp_path / "g.e", out, TINY, "tol=1e-14", "iterations=1000", workers=4)
    assert rc == 0, err
    rows = parse_tsv(out.read_text())
    want = nx_pagerank(rg.edges)
    assert [v for v, _ in rows] == rg.ids
    assert all(r == pytest.approx(want[v], abs=1e-8) for v, r in rows)


PACK = {".gz": (gzip.compress, gzip.decompress), ".bz2": (bz2.compress, bz2.decompress),
        ".xz": (lzma.compress, lzma.decompress),
        ".zst": (zstandard.ZstdCompressor().compress,
                 lambda b: zstandard.ZstdDecompressor().stream_reader(io.BytesIO(b)).read())}


@pytest.mark.parametrize("ext", sorted(PACK))
def test_compressed_inputs_and_outputs_by_their_names(capsys, tmp_path, ext):
    """An edge list, a vertices file and an output named .gz, .bz2, .xz or .zst are read and written in
    that format, in block mode (parts merged, or one worker's file) and in vertex mode alike."""
    pack, unpack = PACK[ext]
    rg = RandomGraph(45, 200, 3)
    ids = "".join(f"{v}\n" for v in [*rg.ids, "99999"])  # one isolated vertex
    (tmp_path / "g.e").write_text(rg.text)
    (tmp_path / "g.v").write_text(ids)
    (tmp_path / f"g.e{ext}").write_bytes(pack(rg.text.encode()))
    (tmp_path / f"g.v{ext}").write_bytes(pack(ids.encode()))
    want = tmp_path / "want.tsv"
    assert run(capsys, "wcc", tmp_path / "g.e", want, f"vertices={tmp_path / 'g.v'}", workers=2)[0] == 0
    assert "99999 99999\n" in want.read_text()
    for mode, workers in (("block", 2), ("block", 1), ("vertex", 1)):
        out = tmp_path / f"{mode}-{workers}.tsv{ext}"
        rc, err = run(capsys, "wcc", tmp_path / f"g.e{ext}", out, f"vertices={tmp_path / f'g.v{ext}'}",
                      f"mode={mode}", workers=workers)
        assert rc == 0, (mode, workers, err)
        assert unpack(out.read_bytes()).decode() == want.read_text(), (mode, workers)
    assert sorted(p.name for p in tmp_path.iterdir() if "tmp" in p.name) == []


@pytest.mark.parametrize("mode", ["block", "vertex"])
def test_a_zst_output_without_zstandard_fails_before_the_run(capsys, tmp_path, monkeypatch, mode):
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if the [zstd] extra were not installed
    rg = RandomGraph(49, 50, 2)
    (tmp_path / "g.e").write_text(rg.text)
    rc = main(["run", "wcc", "--set", f"graph={tmp_path / 'g.e'}", "--set", f"output={tmp_path / 'labels.tsv.zst'}",
               "--set", f"mode={mode}", "--workers", "2", "--runtime", "local", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2 and "labels.tsv.zst: reading or writing .zst files needs the 'zstandard' package" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # said before any superstep ran
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "run") == ["g.e"]


@pytest.mark.parametrize("job", ["wcc", "pagerank"])
def test_routed_edges_leave_piece_by_piece_with_a_combiner_too(capsys, tmp_path, job):
    """The route flushes after each piece: on the cluster the edges for the other worker leave in
    parts while it routes, for WCC (which has a combiner) as for PageRank, not all at the end."""
    from mariana.storage import RunDir

    rg = RandomGraph(50, 200, 3)
    (tmp_path / "g.e").write_text(rg.text)
    rc = main(["run", job, "--set", f"graph={tmp_path / 'g.e'}", "--set", TINY, "--workers", "2",
               "--runtime", "cluster", "--run-dir", str(tmp_path / "run")])
    assert rc == 0, capsys.readouterr().err
    route = [rec for w in range(2) for rec in RunDir(str(tmp_path / "run")).read_jsonl(f"trace/worker-{w}.jsonl")
             if rec.get("superstep") == 1]
    assert len(route) == 2 and all(max(rec.get("parts_out", {}).values(), default=0) > 3 for rec in route), route


def test_a_corrupt_compressed_input_fails_with_its_name_and_no_output(capsys, tmp_path):
    rg = RandomGraph(46, 100, 3)
    (tmp_path / "g.e.gz").write_bytes(gzip.compress(rg.text.encode())[:-30])  # its end cut off
    for mode in ("block", "vertex"):
        out = tmp_path / f"{mode}.tsv"
        rc, err = run(capsys, "pagerank", tmp_path / "g.e.gz", out, f"mode={mode}", workers=2)
        assert rc == 2 and "g.e.gz" in err, (mode, err)
        assert not out.exists()


# ----------------------------------------------------------------------------------------------
# nothing whole-graph sized on any worker
# ----------------------------------------------------------------------------------------------
def test_each_block_holds_only_its_own_vertices_and_edges(tmp_path):
    rnd = random.Random(8)
    edges = [(rnd.randrange(3000), rnd.randrange(3000)) for _ in range(12000)]
    (tmp_path / "g.e").write_text("".join(f"{a} {b}\n" for a, b in edges))
    job = get_job("pagerank")
    cfg = resolve_config(job, None, [f"graph={tmp_path / 'g.e'}", "iterations=2", "tol=0", TINY])
    workers = 4
    g = job.build(cfg, BuildContext(workers=workers))
    from mariana.engine.local import LocalRuntime

    result = LocalRuntime(g, workers).run()
    assert result.supersteps > 3
    blocks: list[LoadedBlock] = [g.instantiate(vid) for vid in g.vertex_ids()]  # type: ignore[misc]
    n = len({v for e in edges for v in e})
    owned = [len(b.g.own) for b in blocks if b.g is not None]
    assert sum(owned) == n and max(owned) < 0.4 * n  # split, about evenly
    for b in blocks:
        assert b.g is not None and not hasattr(b, "sub")
        assert len(b.g.indptr) == len(b.g.own) + 1
        assert b.g.own.dtype == np.int64


# ----------------------------------------------------------------------------------------------
# binary edge tables
# ----------------------------------------------------------------------------------------------
def test_npy_and_npz_edge_tables_give_the_text_results(capsys, tmp_path):
    rnd = np.random.default_rng(9)
    src, dst = rnd.integers(0, 400, 3000), rnd.integers(0, 450, 3000)
    weight = rnd.integers(1, 20, 3000) / 4
    (tmp_path / "g.e").write_text("".join(f"{a} {b} {w!r}\n" for a, b, w in zip(src.tolist(), dst.tolist(), weight.tolist())))
    np.save(tmp_path / "g.npy", np.stack([src, dst, weight], axis=1))  # one float table
    np.savez(tmp_path / "g.npz", src=src.astype(np.int32), dst=dst, weight=weight)
    np.savez_compressed(tmp_path / "gc.npz", src=src, dst=dst, weight=weight)
    for name, want in (("g.npy", 30), ("g.npz", 30), ("gc.npz", 1)):  # 100 rows of 24 / 20 bytes
        p = tmp_path / name
        n = len(make_splits([(str(p), p.stat().st_size)], 2000 if name != "g.npy" else 2400))
        assert n == want, (name, n)  # row ranges; a compressed .npz is one split (like .gz)
    source = str(src[0])
    for job, sets in (("sssp", (f"source={source}",)), ("wcc", ()), ("pagerank", ("iterations=20", "tol=0"))):
        outs = {}
        for name in ("g.e", "g.npy", "g.npz", "gc.npz"):
            out = tmp_path / f"{job}-{name}.tsv"
            rc, err = run(capsys, job, tmp_path / name, out, *sets, "split_mb=0.004", workers=3)
            assert rc == 0, err
            outs[name] = out.read_text()
        assert len({*outs.values()}) == 1, job


def test_a_table_with_fractional_ids_is_refused(capsys, tmp_path):
    np.save(tmp_path / "g.npy", np.array([[1.0, 2.0, 1.0], [2.5, 3.0, 1.0]]))
    rc, err = run(capsys, "wcc", tmp_path / "g.npy", tmp_path / "o.tsv", workers=2)
    assert rc == 2 and "g.npy: vertex ids must be integers" in err


def test_splits_parsed_in_small_pieces_give_the_same_bytes_and_line_numbers(capsys, tmp_path, monkeypatch):
    import mariana.partitioner.graphload as graphload

    rg = RandomGraph(45, 200, 3)
    (tmp_path / "g.e").write_text(rg.text)
    want = tmp_path / "want.tsv"
    assert run(capsys, "wcc", tmp_path / "g.e", want, "mode=vertex")[0] == 0
    monkeypatch.setattr(graphload, "PIECE", 50)  # a few lines per piece (and lines longer than one)
    got = tmp_path / "got.tsv"
    assert run(capsys, "wcc", tmp_path / "g.e", got, "split_mb=0.001", workers=2)[0] == 0
    assert got.read_text() == want.read_text()
    lines = rg.text.splitlines()
    bad = len(lines) - 7
    lines[bad] = "a b c d"
    (tmp_path / "bad.e").write_text("\n".join(lines) + "\n")
    rc, err = run(capsys, "wcc", tmp_path / "bad.e", got, "split_mb=0.001", workers=2)
    assert rc == 2 and f"bad.e:{bad + 1}: expected" in err


# ----------------------------------------------------------------------------------------------
# long loads and the failure detector
# ----------------------------------------------------------------------------------------------
def test_the_master_reads_no_graph_to_build_the_job(tmp_path, monkeypatch):
    import mariana.partitioner.graphload as graphload

    (tmp_path / "g.e").write_text("1 2\n2 3\n")

    def refuse(*args, **kwargs):
        raise AssertionError("the build read the graph")

    for name in ("read_text_split", "iter_text_split", "read_table_split", "numeric_edges", "_parse_lines"):
        monkeypatch.setattr(graphload, name, refuse)
    for job in ("pagerank", "wcc", "sssp"):
        j = get_job(job)
        sets = [f"graph={tmp_path / 'g.e'}"] + (["source=1"] if job == "sssp" else [])
        g = j.build(resolve_config(j, None, sets), BuildContext(workers=3))
        assert len(g) == 3  # one lazy block per worker, nothing loaded


@pytest.mark.timeout(60)
@pytest.mark.parametrize("job,traversals", [("wcc", True), ("sssp", True), ("bfs", True), ("pagerank", False)])
def test_the_build_imports_the_traversals_its_blocks_use(tmp_path, job, traversals):
    """Workers forked after the build inherit scipy's traversals instead of each importing them
    (in a fresh interpreter: what the build imports is what it checks); PageRank needs none."""
    import subprocess

    (tmp_path / "g.e").write_text("1 2\n2 3\n")
    sets = [f"graph={tmp_path / 'g.e'}"] + (["source=1"] if job in ("sssp", "bfs") else [])
    code = "\n".join([
        "from mariana.jobs import BuildContext, get_job, resolve_config",
        "from mariana.vertices.graph import kernels as bk",
        f"j = get_job({job!r})",
        f"j.build(resolve_config(j, None, {sets!r}), BuildContext(workers=2))",
        f"assert (bk._CSGRAPH is not None) == {traversals}, bk._CSGRAPH",
    ])
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.slow
def test_a_load_longer_than_worker_timeout_is_not_a_lost_worker(tmp_path):
    from mariana.jobs.launch import run_job
    import slow_graph_input

    rg = RandomGraph(46, 150, 2)
    (tmp_path / "g.e").write_text(rg.text)
    sets = ["iterations=3", "tol=0"]
    want = run_job("pagerank", sets=[f"graph={tmp_path / 'g.e'}", *sets], workers=2, runtime="local")
    t0 = time.monotonic()
    got = run_job("slow_graph_input:JOB", sets=[f"graph=slowfile://{tmp_path / 'g.e'}", *sets], workers=2,
                  runtime="cluster", worker_timeout=1.0, heartbeat_interval=0.1)
    assert time.monotonic() - t0 > slow_graph_input.SLEEP_S  # the load did outlast worker_timeout
    assert {k: v["values"].tolist() for k, v in got.values.items()} == \
        {k: v["values"].tolist() for k, v in want.values.items()}


def test_no_checkpoint_is_taken_while_loading_and_resume_says_so(capsys, tmp_path):
    """The state while a graph loads is its input in flight: checkpoints start after loading."""
    (tmp_path / "g.e").write_text("1 2\n2 3\n3 1\n")
    run_dir = tmp_path / "run"
    argv = ["run", "pagerank", "--set", f"graph={tmp_path / 'g.e'}", "--set", "checkpoint_every=1",
            "--set", "iterations=3", "--set", "tol=0", "--run-dir", str(run_dir), "--max-supersteps", str(LOAD_STEPS - 1)]
    assert main(argv) == 0
    capsys.readouterr()
    assert not (run_dir / "checkpoints").exists()
    assert main(["run", "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "no valid checkpoint" in err and "Traceback" not in err


# ----------------------------------------------------------------------------------------------
# S3: range reads of part files, parts written back
# ----------------------------------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_graph_parts_on_s3_in_and_out(capsys, tmp_path, s3_url):
    rg = RandomGraph(47, 200, 3)
    fs, _ = fsspec.core.url_to_fs(s3_url)
    lines = rg.text.splitlines(keepends=True)
    for i in range(3):
        fs.pipe(f"{s3_url}/graph/part-{i:05d}.e".split("://", 1)[1], "".join(lines[i::3]).encode())
    local = tmp_path / "g.e"
    local.write_text(rg.text)
    want = tmp_path / "want.tsv"
    assert run(capsys, "wcc", local, want, "mode=vertex")[0] == 0
    for runtime, workers, out in [("local", 3, f"{s3_url}/out/labels.tsv"), ("cluster", 2, f"{s3_url}/parts/")]:
        rc, err = run(capsys, "wcc", f"{s3_url}/graph/", out, TINY, workers=workers, runtime=runtime)
        assert rc == 0, err
        if out.endswith("/"):
            names = sorted(fs.ls(out.split("://", 1)[1]))
            assert [n.rsplit("/", 1)[1] for n in names] == ["part-00000.tsv", "part-00001.tsv"]
            got = sorted(line for n in names for line in fs.cat(n).decode().splitlines(keepends=True))
            assert "".join(got) == want.read_text()
        else:
            assert fs.cat(out.split("://", 1)[1]).decode() == want.read_text()
    assert not [k for k in fs.find(s3_url.split("://", 1)[1]) if "tmp-parts" in k]


@pytest.mark.timeout(180)
def test_a_compressed_graph_and_output_on_s3(capsys, tmp_path, s3_url):
    rg = RandomGraph(48, 200, 3)
    fs, _ = fsspec.core.url_to_fs(s3_url)
    fs.pipe(f"{s3_url}/graph/g.e.bz2".split("://", 1)[1], bz2.compress(rg.text.encode()))
    (tmp_path / "g.e").write_text(rg.text)
    want = tmp_path / "want.tsv"
    assert run(capsys, "wcc", tmp_path / "g.e", want)[0] == 0
    rc, err = run(capsys, "wcc", f"{s3_url}/graph/g.e.bz2", f"{s3_url}/out/labels.tsv.gz", workers=2, runtime="cluster")
    assert rc == 0, err
    assert gzip.decompress(fs.cat(f"{s3_url}/out/labels.tsv.gz".split("://", 1)[1])).decode() == want.read_text()
