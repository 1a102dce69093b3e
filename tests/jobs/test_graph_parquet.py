"""Parquet edge tables as graph input (issue 23, the ``parquet`` extra): row groups as splits,
integer and string ids, directories of part files, S3, and the one-line errors.

Every job's output on a Parquet table is compared byte for byte with its output on the same
edges as a text edge list.
"""

from __future__ import annotations

import builtins
import sys
import uuid
from pathlib import Path

import fsspec
import numpy as np
import pytest

from mariana.storage.parquet import read_parquet_split
from mariana.storage.splits import assigned, make_splits
from test_graph_input import run
from test_graph_jobs import RandomGraph

pa = pytest.importorskip("pyarrow", reason="Parquet input needs pyarrow: pip install 'mariana-bsp[parquet]'")
pq = pytest.importorskip("pyarrow.parquet", reason="Parquet input needs pyarrow")

pytestmark = pytest.mark.timeout(120)

JOBS = {"pagerank": ("iterations=20", "tol=0"), "wcc": (), "sssp": None}


def int_graph(seed: int = 9, m: int = 3000) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    rnd = np.random.default_rng(seed)
    src, dst = rnd.integers(0, 400, m), rnd.integers(0, 450, m)
    weight = rnd.integers(1, 20, m) / 4
    text = "".join(f"{a} {b} {w!r}\n" for a, b, w in zip(src.tolist(), dst.tolist(), weight.tolist()))
    return src, dst, weight, text


def sets_of(job: str, source: str) -> tuple[str, ...]:
    sets = JOBS[job]
    return (f"source={source}",) if sets is None else sets


# ----------------------------------------------------------------------------------------------
# results: the text edge list's, byte for byte
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("job", list(JOBS))
def test_a_parquet_table_gives_the_text_results(capsys, tmp_path, job):
    src, dst, weight, text = int_graph()
    (tmp_path / "g.e").write_text(text)
    # int32 and int64 ids, float32 weights (quarters: exact)
    table = pa.table({"src": pa.array(src.astype(np.int32)), "dst": pa.array(dst),
                      "weight": pa.array(weight, pa.float32())})
    pq.write_table(table, tmp_path / "g.parquet", row_group_size=300)  # 10 row groups
    assert pq.ParquetFile(tmp_path / "g.parquet").metadata.num_row_groups == 10
    sets = sets_of(job, str(src[0]))
    want = tmp_path / "want.tsv"
    rc, err = run(capsys, job, tmp_path / "g.e", want, *sets)
    assert rc == 0, err
    for name, workers, extra, runtime in [("vertex", 2, ("mode=vertex",), "local"),
                                          ("one", 1, (), "local"), ("two", 2, (), "local"),
                                          ("tiny-3", 3, ("split_mb=0.004",), "local"),
                                          ("cluster-2", 2, ("split_mb=0.004",), "cluster")]:
        if runtime == "cluster" and job != "sssp":  # one cluster run (weights travel): enough
            continue
        out = tmp_path / f"{name}.tsv"
        rc, err = run(capsys, job, tmp_path / "g.parquet", out, *sets, *extra, workers=workers, runtime=runtime)
        assert rc == 0, (name, err)
        assert out.read_text() == want.read_text(), name


@pytest.mark.parametrize("job", ["wcc", "sssp"])
def test_string_and_dictionary_ids_give_the_text_results(capsys, tmp_path, job):
    rg = RandomGraph(51, 200, 3)  # ids like '17' and 'v120', self-loops, parallel edges, 0 weights
    (tmp_path / "g.e").write_text(rg.text)
    src, dst, w = (list(c) for c in zip(*rg.edges))
    pq.write_table(pa.table({"src": src, "dst": dst, "weight": w}), tmp_path / "s.parquet", row_group_size=64)
    dictionary = pa.table({"src": pa.array(src).dictionary_encode(), "dst": pa.array(dst).dictionary_encode(),
                           "weight": w})
    pq.write_table(dictionary, tmp_path / "d.parquet", row_group_size=100)
    sets = sets_of(job, rg.source(0))
    want = tmp_path / "want.tsv"
    assert run(capsys, job, tmp_path / "g.e", want, *sets, workers=2)[0] == 0
    for name, mode in (("s.parquet", "block"), ("d.parquet", "block"), ("d.parquet", "vertex")):
        out = tmp_path / f"{name}.tsv"
        rc, err = run(capsys, job, tmp_path / name, out, *sets, "split_mb=0.001", f"mode={mode}", workers=2)
        assert rc == 0, err
        assert out.read_text() == want.read_text(), name


def test_an_integer_and_a_string_id_column_mix(capsys, tmp_path):
    (tmp_path / "g.e").write_text("1 2\n2 3\n3 1\n4 x\n10 5\n")
    pq.write_table(pa.table({"src": [1, 2, 3, 4, 10], "dst": ["2", "3", "1", "x", "5"]}), tmp_path / "g.parquet")
    want, out = tmp_path / "want.tsv", tmp_path / "out.tsv"
    assert run(capsys, "wcc", tmp_path / "g.e", want)[0] == 0
    rc, err = run(capsys, "wcc", tmp_path / "g.parquet", out, workers=2)
    assert rc == 0, err
    assert out.read_text() == want.read_text() == "1\t1\n10\t10\n2\t1\n3\t1\n4\t4\n5\t10\nx\t4\n"


def test_a_directory_of_part_files_as_spark_writes_it(capsys, tmp_path):
    src, dst, weight, text = int_graph(10, 2000)
    (tmp_path / "g.e").write_text(text)
    parts = tmp_path / "edges.parquet"  # Spark names the directory like a file
    parts.mkdir()
    for i in range(4):
        sel = slice(i * 500, (i + 1) * 500)
        pq.write_table(pa.table({"src": src[sel], "dst": dst[sel], "weight": weight[sel]}),
                       parts / f"part-{i:05d}-{uuid.UUID(int=i)}-c000.snappy.parquet", row_group_size=200)
        (parts / f".part-{i:05d}-{uuid.UUID(int=i)}-c000.snappy.parquet.crc").write_bytes(b"crc")
    (parts / "_SUCCESS").write_bytes(b"")
    want = tmp_path / "want.tsv"
    assert run(capsys, "wcc", tmp_path / "g.e", want)[0] == 0
    for graph, workers in ((parts, 3), (f"{parts}/part-*.parquet", 2)):
        out = tmp_path / "out.tsv"
        rc, err = run(capsys, "wcc", graph, out, "split_mb=0.002", workers=workers)
        assert rc == 0, err
        assert out.read_text() == want.read_text()


def test_row_group_splits_hold_every_row_exactly_once(tmp_path):
    rows = np.arange(5000)
    path = tmp_path / "g.parquet"
    pq.write_table(pa.table({"src": rows, "dst": rows[::-1], "weight": rows / 2}), path, row_group_size=400)
    size = path.stat().st_size
    for split_bytes, workers in ((size, 1), (size // 2 + 1, 2), (size // 3 + 1, 3), (1, 4)):
        splits = make_splits([(str(path), size)], split_bytes)
        assert all(s.kind == "parquet" for s in splits)
        assert len(splits) == (13 if split_bytes == 1 else workers)  # one split per worker; 13 row groups
        seen = []
        for w in range(workers):
            for _, s in assigned(splits, w, workers):
                for t, first in read_parquet_split(s.url, (s.start, s.end), weights=w % 2 == 0, rows=150):
                    assert t["src"][0] == first and ("weight" in t) == (w % 2 == 0) and len(t["src"]) <= 150
                    seen.append(t["src"])
        assert np.array_equal(np.sort(np.concatenate(seen)), rows)


@pytest.mark.parametrize("fmt", ["npy", "npz", "parquet"])
def test_tables_read_in_small_pieces_give_the_text_results(capsys, tmp_path, monkeypatch, fmt):
    import mariana.partitioner.graphload as graphload

    src, dst, weight, text = int_graph(12, 1500)
    (tmp_path / "g.e").write_text(text)
    want = tmp_path / "want.tsv"
    sets = (f"source={src[0]}",)
    assert run(capsys, "sssp", tmp_path / "g.e", want, *sets)[0] == 0
    if fmt == "npy":
        np.save(tmp_path / "g.npy", np.stack([src, dst, weight], axis=1))
    elif fmt == "npz":
        np.savez(tmp_path / "g.npz", src=src, dst=dst, weight=weight)
    else:
        pq.write_table(pa.table({"src": src, "dst": dst, "weight": weight}), tmp_path / "g.parquet",
                       row_group_size=400)
    monkeypatch.setattr(graphload, "TABLE_PIECE", 7)
    out = tmp_path / "out.tsv"
    rc, err = run(capsys, "sssp", tmp_path / f"g.{fmt}", out, *sets, "split_mb=0.01", workers=2)
    assert rc == 0, err
    assert out.read_text() == want.read_text()


def test_a_float_npy_table_in_vertex_mode_has_the_block_mode_ids(capsys, tmp_path):
    np.save(tmp_path / "g.npy", np.array([[1.0, 2.0, 0.5], [2.0, 3.0, 1.5], [10.0, 3.0, 1.0]]))
    outs = {}
    for mode in ("block", "vertex"):
        rc, err = run(capsys, "wcc", tmp_path / "g.npy", tmp_path / f"{mode}.tsv", f"mode={mode}")
        assert rc == 0, err
        outs[mode] = (tmp_path / f"{mode}.tsv").read_text()
    assert outs["vertex"] == outs["block"] == "1\t1\n10\t1\n2\t1\n3\t1\n"


@pytest.mark.timeout(180)
def test_a_parquet_table_on_s3(capsys, tmp_path, s3_url):
    src, dst, weight, text = int_graph(11, 2000)
    (tmp_path / "g.e").write_text(text)
    pq.write_table(pa.table({"src": src, "dst": dst, "weight": weight}), tmp_path / "g.parquet", row_group_size=250)
    fs, _ = fsspec.core.url_to_fs(s3_url)
    fs.put_file(str(tmp_path / "g.parquet"), f"{s3_url}/graph/g.parquet".split("://", 1)[1])
    want = tmp_path / "want.tsv"
    sets = (f"source={src[0]}",)
    assert run(capsys, "sssp", tmp_path / "g.e", want, *sets)[0] == 0
    rc, err = run(capsys, "sssp", f"{s3_url}/graph/g.parquet", f"{s3_url}/out/d.tsv", *sets, "split_mb=0.004",
                  workers=2, runtime="cluster")
    assert rc == 0, err
    assert fs.cat(f"{s3_url}/out/d.tsv".split("://", 1)[1]).decode() == want.read_text()


# ----------------------------------------------------------------------------------------------
# bad input: one line naming the file (and row), exit 2, no output
# ----------------------------------------------------------------------------------------------
BAD = [
    ("missing column", {"src": [1, 2], "to": [2, 3]}, "wcc",
     "g.parquet: a Parquet edge table has columns 'src', 'dst' and optionally 'weight', found ['src', 'to']"),
    ("fractional id", {"src": [1.0, 2.0, 2.5], "dst": [2.0, 3.0, 1.0]}, "wcc",
     "g.parquet: vertex ids must be integers of at most 63 bits, found 2.5 (float64) in row 502"),
    ("null id", {"src": pa.array([1, None, 3]), "dst": [2, 3, 1]}, "wcc", "g.parquet: row 501: 'src' is null"),
    ("negative weight", {"src": [1, 2, 3], "dst": [2, 3, 1], "weight": [1.0, 1.0, -0.5]}, "sssp",
     "g.parquet: row 502: negative weight -0.5 (sssp needs weights >= 0)"),
    ("infinite weight", {"src": [1, 2, 3], "dst": [2, 3, 1], "weight": [1.0, float("inf"), 1.0]}, "sssp",
     "g.parquet: row 501: weight must be a finite number"),
    ("boolean ids", {"src": [True, False], "dst": [False, True]}, "wcc",
     "g.parquet: column 'src' has type bool; it must be an integer or string"),
    ("string weight", {"src": [1, 2], "dst": [2, 3], "weight": ["a", "b"]}, "sssp",
     "g.parquet: column 'weight' has type string; it must be a number"),
    ("tab in a string id", {"src": ["a", "b", "c"], "dst": ["b", "c\td", "a"]}, "wcc",
     "g.parquet: row 501: vertex id 'b' -> 'c\\td': ids must be non-empty, without tabs or line breaks"),
    ("huge uint64 id", {"src": pa.array([1, 2, 2 ** 63], pa.uint64()), "dst": pa.array([2, 3, 1], pa.uint64())},
     "wcc", "found 9223372036854775808 (uint64) in row 502"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_tables_are_one_line_with_file_and_row(capsys, tmp_path, monkeypatch, case):
    import mariana.partitioner.graphload as graphload

    monkeypatch.setattr(graphload, "TABLE_PIECE", 100)  # row groups read in pieces: rows still named right
    _, columns, job, message = case
    bad = pa.table({k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in columns.items()})
    good = pa.table({k: pa.array([1 + i % 7 for i in range(500)]).cast(bad.schema.field(k).type) for k in columns})
    pq.write_table(pa.concat_tables([good, bad]), tmp_path / "g.parquet", row_group_size=250)  # the bad row
    out = tmp_path / "o.tsv"                                                                  # is in a late group
    rc, err = run(capsys, job, tmp_path / "g.parquet", out, *(("source=1",) if job == "sssp" else ()),
                  "split_mb=0.001", workers=2)
    assert rc == 2, err
    assert message in err, err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob("o.tsv*"))


def test_not_a_parquet_file(capsys, tmp_path):
    (tmp_path / "g.parquet").write_text("1 2\n2 3\n")
    rc, err = run(capsys, "wcc", tmp_path / "g.parquet", tmp_path / "o.tsv", workers=2)
    assert rc == 2 and f"{tmp_path / 'g.parquet'}: not a readable Parquet edge table" in err, err


def test_without_pyarrow_the_error_says_which_extra(capsys, tmp_path, monkeypatch):
    pq.write_table(pa.table({"src": [1], "dst": [2]}), tmp_path / "g.parquet")
    real = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.split(".")[0] == "pyarrow":
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    for mod in [m for m in sys.modules if m.split(".")[0] == "pyarrow"]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    rc, err = run(capsys, "wcc", tmp_path / "g.parquet", tmp_path / "o.tsv")
    assert rc == 2 and "pip install 'mariana-bsp[parquet]'" in err, err


def test_the_parquet_module_imports_no_pyarrow():
    import subprocess

    code = "import sys, mariana.partitioner.graphload, mariana.storage.splits; print('pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"
