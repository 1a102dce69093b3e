"""Graph input rules both modes share (issue 51): which ids an edge table may hold, a UTF-8
byte-order mark, which of several bad lines an error names, an SSSP distance past float64.

Block mode reads its input in splits on every worker and vertex mode reads it whole: each rule
is checked on both, and on several worker counts with splits small enough to fall everywhere.
"""

from __future__ import annotations

import gzip
import uuid
from pathlib import Path

import numpy as np
import pytest

from mariana.cli import main

pytestmark = pytest.mark.timeout(120)

TINY = "split_mb=0.0004"  # ~420-byte splits


def run(capsys, job: str, graph: str | Path, *sets: str, out: str | Path | None = None,
        workers: int = 1, mode: str = "block") -> tuple[int, str]:
    argv = ["run", job, "--set", f"graph={graph}", "--set", f"mode={mode}", "--workers", str(workers),
            "--run-dir", f"memory://mariana-test-input-rules/{uuid.uuid4().hex}"]
    if out is not None:
        argv += ["--set", f"output={out}"]
    for s in sets:
        argv += ["--set", s]
    rc = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


def error_line(err: str) -> str:
    """The one line an error prints (exit 2)."""
    lines = [line for line in err.splitlines() if line.startswith("mariana: error: ")]
    assert len(lines) == 1, err
    return lines[0].removeprefix("mariana: error: ")


# ----------------------------------------------------------------------------------------------
# .npy / .npz ids: one rule for both modes
# ----------------------------------------------------------------------------------------------
BAD_TABLES = [
    ("bool", np.array([[True, False], [False, True]]), "vertex ids must be integers of at most 63 bits, found dtype bool"),
    ("complex", np.array([[1 + 0j, 2 + 0j], [2 + 0j, 3 + 0j]]),
     "vertex ids must be integers of at most 63 bits, found dtype complex128"),
    ("uint64 2^63", np.array([[1, 2], [2, 2 ** 63]], dtype=np.uint64),
     "vertex ids must be integers of at most 63 bits, found 9223372036854775808 (uint64) in row 1"),
    ("int64 min", np.array([[1, 2], [-2 ** 63, 2]], dtype=np.int64),
     "vertex ids must be integers of at most 63 bits, found -9223372036854775808 (int64) in row 1"),
    ("fractional float", np.array([[1.0, 2.0, 1.0], [2.5, 3.0, 1.0]]),
     "vertex ids must be integers of at most 63 bits, found 2.5 (float64) in row 1"),
    ("float 2^53", np.array([[1.0, 2.0], [2.0, 2.0 ** 53]]),
     "vertex ids must be integers of at most 63 bits, found 9007199254740992.0 (float64) in row 1"),
    ("nan", np.array([[1.0, 2.0], [np.nan, 2.0]]),
     "vertex ids must be integers of at most 63 bits, found nan (float64) in row 1"),
]


@pytest.mark.parametrize("mode", ["block", "vertex"])
@pytest.mark.parametrize("name,table,message", BAD_TABLES, ids=[b[0] for b in BAD_TABLES])
def test_both_modes_refuse_the_same_table_ids_with_one_line(capsys, tmp_path, mode, name, table, message):
    np.save(tmp_path / "g.npy", table)
    rc, err = run(capsys, "wcc", tmp_path / "g.npy", out=tmp_path / "o.tsv", mode=mode)
    assert rc == 2
    assert error_line(err) == f"{tmp_path / 'g.npy'}: {message}"
    assert not (tmp_path / "o.tsv").exists()


@pytest.mark.parametrize("mode", ["block", "vertex"])
def test_both_modes_refuse_npz_ids_by_the_same_rule(capsys, tmp_path, mode):
    np.savez(tmp_path / "g.npz", src=np.array([1, 2], np.uint64), dst=np.array([2, 2 ** 64 - 1], np.uint64))
    rc, err = run(capsys, "wcc", tmp_path / "g.npz", mode=mode)
    assert rc == 2 and error_line(err) == (f"{tmp_path / 'g.npz'}: vertex ids must be integers of at most 63 bits, "
                                           f"found 18446744073709551615 (uint64) in row 1")
    np.savez(tmp_path / "w.npz", src=np.array([1, 2]), dst=np.array([2, 3]), weight=np.array([1 + 1j, 2 + 0j]))
    rc, err = run(capsys, "sssp", tmp_path / "w.npz", "source=1", mode=mode)
    assert rc == 2 and error_line(err) == f"{tmp_path / 'w.npz'}: weights must be numbers, found dtype complex128"


@pytest.mark.parametrize("dtype", [np.uint64, np.int64, np.int32, np.uint8, np.float64, np.float32])
def test_valid_table_ids_give_one_output_in_both_modes(capsys, tmp_path, dtype):
    top = {np.uint64: 2 ** 63 - 1, np.int64: 2 ** 63 - 1, np.int32: 2 ** 31 - 1, np.uint8: 255,
           np.float64: 2 ** 53 - 1, np.float32: 2 ** 24}[dtype]
    np.save(tmp_path / "g.npy", np.array([[1, 2], [2, top], [7, 7]], dtype=dtype))
    outs = {}
    for mode in ("block", "vertex"):
        rc, err = run(capsys, "wcc", tmp_path / "g.npy", out=tmp_path / f"{mode}.tsv", mode=mode)
        assert rc == 0, err
        outs[mode] = (tmp_path / f"{mode}.tsv").read_text()
    want = {"1": "1", "2": "1", str(top): "1", "7": "7"}
    assert outs["block"] == outs["vertex"] == "".join(f"{k}\t{want[k]}\n" for k in sorted(want))


# ----------------------------------------------------------------------------------------------
# a UTF-8 byte-order mark
# ----------------------------------------------------------------------------------------------
BOM = b"\xef\xbb\xbf"


def edge_text(n: int, first: int = 1) -> str:
    return "".join(f"{i} {i + 1 if i % 7 else first} {1 + i % 3}\n" for i in range(first, first + n))


@pytest.mark.parametrize("job,sets", [("wcc", ()), ("sssp", ("source=1",))])
def test_a_byte_order_mark_is_no_part_of_the_first_id(capsys, tmp_path, job, sets):
    plain, marked = tmp_path / "plain", tmp_path / "marked"
    for d in (plain, marked):
        d.mkdir()
    for k, first in enumerate((1, 300)):  # a directory of two files, each starting with a BOM
        text = edge_text(250, first).encode()
        (plain / f"part-{k}.e").write_bytes(text)
        (marked / f"part-{k}.e").write_bytes(BOM + text)
    (plain / "one.e").write_bytes(edge_text(250).encode())
    (marked / "one.e").write_bytes(BOM + edge_text(250).encode())
    (marked / "one.e.gz").write_bytes(gzip.compress(BOM + edge_text(250).encode()))
    cases = [(plain / "one.e", marked / "one.e"), (plain / "one.e", marked / "one.e.gz"),
             (plain / "part-*.e", marked / "part-*.e")]
    for want_graph, graph in cases:
        want = tmp_path / "want.tsv"
        assert run(capsys, job, want_graph, *sets, out=want)[0] == 0
        for mode, workers, split in (("block", 1, "split_mb=64"), ("block", 2, TINY), ("vertex", 1, "split_mb=64")):
            out = tmp_path / "out.tsv"
            rc, err = run(capsys, job, graph, *sets, split, out=out, mode=mode, workers=workers)
            assert rc == 0, err
            assert out.read_text() == want.read_text(), (graph, mode, workers)


@pytest.mark.parametrize("mode,workers", [("block", 1), ("block", 2), ("vertex", 1)])
def test_a_vertices_file_with_a_byte_order_mark(capsys, tmp_path, mode, workers):
    (tmp_path / "g.e").write_text("1 2\n2 3\n")
    (tmp_path / "g.v").write_bytes(BOM + b"1\n2\n3\n4\n")
    (tmp_path / "plain.v").write_bytes(b"1\n2\n3\n4\n")
    outs = []
    for v in ("g.v", "plain.v"):
        out = tmp_path / f"{v}.out"
        rc, err = run(capsys, "wcc", tmp_path / "g.e", f"vertices={tmp_path / v}", out=out, mode=mode,
                      workers=workers)
        assert rc == 0, err
        outs.append(out.read_text())
    assert outs[0] == outs[1] == "1 1\n2 1\n3 1\n4 4\n"


# ----------------------------------------------------------------------------------------------
# of several bad lines, the first of the input
# ----------------------------------------------------------------------------------------------
def lines_with(bad: dict[int, str], n: int = 400) -> str:
    """``n`` good lines, line ``k`` (1-based) replaced by ``bad[k]``."""
    return "".join(bad.get(k, f"{k} {k + 1} 1.5") + "\n" for k in range(1, n + 1))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_of_several_bad_lines_the_first_is_named_on_any_worker_count(capsys, tmp_path, workers):
    (tmp_path / "g.e").write_text(lines_with({120: "lone", 260: "1 2 3 4", 390: "x y z"}))
    rc, err = run(capsys, "wcc", tmp_path / "g.e", TINY, workers=workers)
    assert rc == 2 and error_line(err) == f"{tmp_path / 'g.e'}:120: expected 'src dst [weight]', found only one field: 'lone'"


@pytest.mark.parametrize("mode,workers,split", [("block", 1, "split_mb=64"), ("block", 1, TINY), ("block", 2, TINY),
                                                ("block", 3, TINY), ("vertex", 1, TINY)])
def test_the_first_bad_line_whatever_its_kind(capsys, tmp_path, mode, workers, split):
    # a negative weight (a well-formed line) before a malformed line and an undecodable one
    text = lines_with({150: "7 8 -2", 200: "lone", 310: "x y"}).encode().replace(b"x y", b"x \xff")
    (tmp_path / "g.e").write_bytes(text)
    rc, err = run(capsys, "sssp", tmp_path / "g.e", "source=1", split, workers=workers, mode=mode)
    assert rc == 2 and error_line(err) == f"{tmp_path / 'g.e'}:150: negative weight -2 (sssp needs weights >= 0)"
    # an undecodable line before a malformed one, in one piece or two
    (tmp_path / "u.e").write_bytes(lines_with({200: "lone"}).encode().replace(b"99 100", b"9\xff 100"))
    rc, err = run(capsys, "wcc", tmp_path / "u.e", split, workers=workers, mode=mode)
    assert rc == 2 and error_line(err) == f"{tmp_path / 'u.e'}:99: not UTF-8 text (invalid start byte)"


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_first_file_of_the_input_is_named_first(capsys, tmp_path, workers):
    d = tmp_path / "g"
    d.mkdir()
    (d / "a.e").write_text(lines_with({300: "lone"}))
    (d / "b.e").write_text(lines_with({5: "1 2 3 4"}))  # an earlier line, of a later file
    rc, err = run(capsys, "wcc", d, TINY, workers=workers)
    assert rc == 2 and error_line(err) == f"{d / 'a.e'}:300: expected 'src dst [weight]', found only one field: 'lone'"


@pytest.mark.parametrize("mode,workers,split", [("block", 1, "split_mb=64"), ("block", 1, "split_mb=0.001"),
                                                ("block", 2, "split_mb=0.001"), ("block", 3, "split_mb=0.001"),
                                                ("vertex", 1, "split_mb=64")])
def test_of_several_bad_table_rows_the_first_is_named(capsys, tmp_path, mode, workers, split):
    table = np.stack([np.arange(300.0), np.arange(1.0, 301.0), np.ones(300)], axis=1)
    table[40, 2] = -1.0  # a negative weight before
    table[210, 1] = 0.5  # ... a fractional destination id (the source ids are checked first)
    table[250, 0] = 1.5
    np.save(tmp_path / "g.npy", table)
    rc, err = run(capsys, "sssp", tmp_path / "g.npy", "source=1", split, workers=workers, mode=mode)
    assert rc == 2 and error_line(err) == f"{tmp_path / 'g.npy'}: row 40: negative weight -1 (sssp needs weights >= 0)"


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_of_several_bad_vertices_lines_the_first_is_named(capsys, tmp_path, workers):
    (tmp_path / "g.e").write_text("v1 v2\n")
    ids = [f"v{k}" for k in range(1, 301)]
    ids[99] = "v100 v101"  # line 100: two fields, before an undecodable line and another of two fields
    ids[249] = "v\udcff"
    ids[279] = "v280 v281"
    (tmp_path / "g.v").write_bytes("\n".join(ids).encode("utf-8", "surrogateescape") + b"\n")
    rc, err = run(capsys, "wcc", tmp_path / "g.e", f"vertices={tmp_path / 'g.v'}", TINY, workers=workers)
    assert rc == 2 and error_line(err) == f"{tmp_path / 'g.v'}:100: expected one vertex id per line, found 2 fields: 'v100 v101'"


def test_in_one_split_of_vertices_a_repeated_id_before_a_bad_line_is_named(capsys, tmp_path):
    (tmp_path / "g.e").write_text("v1 v2\n")
    ids = [f"v{k}" for k in range(1, 301)]
    ids[99] = "v3"  # line 100: listed twice, before a line of two fields and an undecodable one
    ids[249] = "v250 v251"
    ids[279] = "v\udcff"
    (tmp_path / "g.v").write_bytes("\n".join(ids).encode("utf-8", "surrogateescape") + b"\n")
    rc, err = run(capsys, "wcc", tmp_path / "g.e", f"vertices={tmp_path / 'g.v'}")
    assert rc == 2 and error_line(err) == f"{tmp_path / 'g.v'}:100: vertex 'v3' listed twice (first at line 3)"


# ----------------------------------------------------------------------------------------------
# an SSSP distance past float64's range is no unreachable vertex
# ----------------------------------------------------------------------------------------------
OVERFLOW = float(np.finfo(np.float64).max)
RUNS = [("block", 1), ("block", 2), ("block", 3), ("vertex", 1), ("vertex", 2)]


def capped_dijkstra(edges: list[tuple[str, str, float]], source: str) -> dict[str, float]:
    """Shortest distances with every sum past float64's range as float64's largest value."""
    import heapq

    adj: dict[str, list[tuple[str, float]]] = {}
    for a, b, w in edges:
        adj.setdefault(a, []).append((b, w))
        adj.setdefault(b, [])
    dist = {v: float("inf") for v in adj}
    dist[source] = 0.0
    heap = [(0.0, source)]
    while heap:
        d, v = heapq.heappop(heap)
        if d > dist[v]:
            continue
        for u, w in adj[v]:
            c = min(d + w, OVERFLOW)
            if c < dist[u]:
                dist[u] = c
                heapq.heappush(heap, (c, u))
    return dist


@pytest.mark.parametrize("mode,workers", RUNS)
def test_an_sssp_distance_past_float64_is_refused(capsys, tmp_path, mode, workers):
    (tmp_path / "g.e").write_text("a b 1e308\nb c 1e308\nc e 0\na d 1\nx a 1\n")
    out = tmp_path / "out"
    rc, err = run(capsys, "sssp", tmp_path / "g.e", "source=a", out=f"{out}/", mode=mode, workers=workers)
    assert rc == 2
    assert error_line(err) == ("sssp: the distance to vertex 'c' overflows float64: the weights of its shortest "
                               "path add up to 1.79769e+308 or more (scale the weights down)")
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("mode,workers", RUNS)
def test_a_sum_past_float64_off_the_shortest_path_is_no_error(capsys, tmp_path, mode, workers):
    edges = [("a", "b", 1e308), ("b", "c", 1e308), ("a", "c", 5.0), ("b", "d", 7e307), ("c", "e", 1.7e308),
             ("e", "f", 1e300), ("x", "a", 1.0)]
    (tmp_path / "g.e").write_text("".join(f"{a} {b} {w!r}\n" for a, b, w in edges))
    out = tmp_path / "out.tsv"
    rc, err = run(capsys, "sssp", tmp_path / "g.e", "source=a", out=out, mode=mode, workers=workers)
    assert rc == 0, err
    want = capped_dijkstra(edges, "a")
    assert OVERFLOW not in want.values()
    assert out.read_text() == "".join(f"{v}\t{'inf' if d == float('inf') else repr(d)}\n" for v, d in sorted(want.items()))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_vertex_named_past_float64_is_the_same_in_every_run(capsys, tmp_path, seed):
    rnd = np.random.default_rng(seed)
    n = 200
    weights = rnd.choice([0.0, 1.0, 2.5, 1e307, 6e307, 9e307], size=2 * n, p=[0.1, 0.05, 0.05, 0.2, 0.3, 0.3])
    edges = [(f"v{i}", f"v{int(j)}", float(w)) for (i, j), w in zip(
        ((i, j) for i in range(n) for j in rnd.integers(0, n, 2)), weights)]
    (tmp_path / "g.e").write_text("".join(f"{a} {b} {w!r}\n" for a, b, w in edges))
    want = capped_dijkstra(edges, "v0")
    over = sorted(v for v, d in want.items() if d == OVERFLOW)
    assert over
    for mode, workers in RUNS:
        rc, err = run(capsys, "sssp", tmp_path / "g.e", "source=v0", TINY, mode=mode, workers=workers)
        assert rc == 2 and f"the distance to vertex {over[0]!r} overflows float64" in error_line(err), (mode, workers)
