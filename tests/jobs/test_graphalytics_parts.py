"""The six Graphalytics jobs in block mode read the graph in parts (issue 23 for issue 19's jobs):
conformance with 1, 2 and 3 workers on every runtime, Graphalytics' output order across parts,
``directed=false`` and ``vertices=`` on the partitioned path, and no block holding the graph.
"""

from __future__ import annotations

import itertools
import random
import uuid
from pathlib import Path

import numpy as np
import pytest

from mariana.cli import main
from mariana.jobs import BuildContext, get_job, resolve_config
from mariana.vertices.graph.cdlp import CDLPLoaded
from mariana.vertices.graph.block import LoadedBlock
from mariana.vertices.graph.bfs import BFSLoaded
from mariana.vertices.graph.lcc import LCCLoaded
from test_graph_jobs import RandomGraph, cli_run, memory_run_dir
from test_graphalytics import ALGORITHMS, JOB, PARAMS, conformance_dir, read_pairs, run_example, validate

pytestmark = pytest.mark.timeout(120)

TINY = "split_mb=0.0002"  # splits of ~200 bytes: the example graphs cut into several


def conformance(capsys, tmp_path: Path, graph: str, algorithm: str, workers: int, runtime: str = "local") -> str:
    """One example run in block mode (tiny splits), validated by Graphalytics' rules; its output."""
    d = conformance_dir()
    want_text = (d / f"example-{graph}-{algorithm}").read_text()
    text, _ = cli_run(capsys, tmp_path, JOB[algorithm], d / f"example-{graph}.e", f"vertices={d / f'example-{graph}.v'}",
                      f"directed={'true' if graph == 'directed' else 'false'}", "mode=block", TINY,
                      *PARAMS[graph][algorithm], workers=workers, runtime=runtime)
    validate(algorithm, read_pairs(text), read_pairs(want_text))
    assert [line.split(" ")[0] for line in text.splitlines()] == [line.split(" ")[0] for line in want_text.splitlines()]
    if algorithm in ("BFS", "CDLP", "WCC"):  # integers: the reference's bytes
        assert text == want_text
    return text


@pytest.mark.parametrize("graph", ("directed", "undirected"))
def test_conformance_in_parts_with_1_2_3_workers_equals_vertex_mode(capsys, tmp_path, graph):
    for algorithm in ALGORITHMS:
        texts = {conformance(capsys, tmp_path, graph, algorithm, workers) for workers in (1, 2, 3)}
        texts.add(run_example(capsys, tmp_path, graph, algorithm, "vertex", 2))
        assert len(texts) == 1, algorithm


@pytest.mark.parametrize("runtime", ("cluster", "inproc"))
def test_conformance_in_parts_on_the_wire(capsys, tmp_path, runtime):
    """BFS, CDLP, LCC (the new block classes: every kind of message they send) over the wire."""
    for graph, algorithm, workers in (("directed", "LCC", 3), ("undirected", "CDLP", 2), ("directed", "BFS", 2)):
        local = conformance(capsys, tmp_path, graph, algorithm, workers)
        assert conformance(capsys, tmp_path, graph, algorithm, workers, runtime=runtime) == local


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ("cluster", "inproc"))
@pytest.mark.parametrize("graph", ("directed", "undirected"))
def test_conformance_in_parts_every_job_every_runtime(capsys, tmp_path, graph, runtime):
    for algorithm, workers in itertools.product(ALGORITHMS, (1, 2, 3)):
        local = conformance(capsys, tmp_path, graph, algorithm, workers)
        assert conformance(capsys, tmp_path, graph, algorithm, workers, runtime=runtime) == local, (algorithm, workers)


# ----------------------------------------------------------------------------------------------
# Graphalytics output in parts
# ----------------------------------------------------------------------------------------------
def _integer_graph(tmp_path: Path, seed: int = 3, n: int = 300) -> tuple[Path, Path]:
    """Integer ids of 1 to 4 digits (string order != numeric order), a few isolated vertices."""
    rnd = random.Random(seed)
    ids = rnd.sample(range(1, 5000), n)
    edges = [(rnd.choice(ids), rnd.choice(ids), rnd.randrange(1, 9)) for _ in range(3 * n)]
    (tmp_path / "g.e").write_text("".join(f"{a} {b} {w}\n" for a, b, w in edges))
    (tmp_path / "g.v").write_text("".join(f"{v}\n" for v in rnd.sample(ids, n)))  # shuffled, every vertex
    return tmp_path / "g.e", tmp_path / "g.v"


JOBS_SETS = {"pagerank": ("iterations=5", "tol=0"), "sssp": ("source=@",), "bfs": ("source=@",), "wcc": (),
             "cdlp": ("iterations=4",), "lcc": ()}


def _sets(job: str, source: str) -> tuple[str, ...]:
    return tuple(s.replace("@", source) for s in JOBS_SETS[job])


@pytest.mark.parametrize("directed", ("true", "false"))
def test_graphalytics_output_in_parts_equals_vertex_mode_byte_for_byte(capsys, tmp_path, directed):
    """Every job, Graphalytics' format, integer ids: the merged file is numerically ordered and the
    bytes of vertex mode (which orders whole rows in one process), for 1 and 3 workers."""
    edges, verts = _integer_graph(tmp_path)
    source = edges.read_text().split()[0]
    for job in JOBS_SETS:
        sets = (f"vertices={verts}", f"directed={directed}", *_sets(job, source))
        want = cli_run(capsys, tmp_path, job, edges, "mode=vertex", *sets, workers=2)[0]
        ids = [int(line.split(" ")[0]) for line in want.splitlines()]
        assert ids == sorted(ids) and len(ids) == 300 and " " in want and "\t" not in want
        for workers in (1, 3):
            got = cli_run(capsys, tmp_path, job, edges, "mode=block", TINY, *sets, workers=workers)[0]
            assert got == want, (job, workers)


def test_graphalytics_parts_in_a_directory_are_each_numerically_ordered(capsys, tmp_path):
    edges, verts = _integer_graph(tmp_path, seed=4)
    out = tmp_path / "out"
    argv = ["run", "wcc", "--set", f"graph={edges}", "--set", f"vertices={verts}", "--set", f"output={out}/",
            "--workers", "3", "--runtime", "local", "--run-dir", memory_run_dir()]
    assert main(argv) == 0, capsys.readouterr().err
    rows = []
    for part in sorted(out.glob("part-*.tsv")):
        ids = [int(line.split(" ")[0]) for line in part.read_text().splitlines()]
        assert ids == sorted(ids) and ids
        rows += [tuple(line.split(" ")) for line in part.read_text().splitlines()]
    assert len(rows) == 300
    # each component is named by its numerically smallest member
    members: dict[str, list[int]] = {}
    for v, label in rows:
        members.setdefault(label, []).append(int(v))
    assert all(int(label) == min(vs) for label, vs in members.items())


@pytest.mark.parametrize("job", ("bfs", "cdlp", "lcc", "wcc", "sssp"))
def test_string_ids_in_graphalytics_format_equal_vertex_mode(capsys, tmp_path, job):
    """Ids that are not all integers: string order, in parts as whole."""
    rg = RandomGraph(11, 160, 3, density=3.0)
    path = rg.write(tmp_path)
    sets = ("format=graphalytics", *_sets(job, rg.source(0)))
    want = cli_run(capsys, tmp_path, job, path, "mode=vertex", *sets)[0]
    ids = [line.split(" ")[0] for line in want.splitlines()]
    assert ids == sorted(ids)
    assert cli_run(capsys, tmp_path, job, path, "mode=block", TINY, *sets, workers=3)[0] == want


@pytest.mark.parametrize("job", ("pagerank", "sssp", "bfs", "lcc"))
def test_undirected_input_in_parts_equals_vertex_mode(capsys, tmp_path, job):
    """directed=false follows each listed edge both ways: the loader routes it to both ends."""
    rg = RandomGraph(12, 160, 3, density=3.0)
    path = rg.write(tmp_path)
    sets = ("directed=false", "format=mariana", *_sets(job, rg.source(0)))
    want = cli_run(capsys, tmp_path, job, path, "mode=vertex", *sets)[0]
    for workers in (1, 2):
        assert cli_run(capsys, tmp_path, job, path, "mode=block", TINY, *sets, workers=workers)[0] == want
    directed = cli_run(capsys, tmp_path, job, path, "mode=block", "format=mariana", *_sets(job, rg.source(0)))[0]
    assert directed != want


# ----------------------------------------------------------------------------------------------
# vertices=: every endpoint listed, checked before any output
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("runtime", ("local", "cluster"))
def test_an_edge_endpoint_missing_from_the_vertices_file_is_one_clear_error(capsys, tmp_path, runtime):
    edges, verts = _integer_graph(tmp_path, seed=5)
    listed = verts.read_text().split()
    gone = listed.pop(17)
    verts.write_text("".join(f"{v}\n" for v in listed))
    assert gone in edges.read_text().split()[::3] + edges.read_text().split()[1::3]
    out = tmp_path / "out.txt"
    argv = ["run", "lcc", "--set", f"graph={edges}", "--set", f"vertices={verts}", "--set", f"output={out}",
            "--set", TINY, "--workers", "3", "--runtime", runtime, "--run-dir", memory_run_dir()]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert f"{edges}: vertex '{gone}' is not in {verts}" in last
    assert not out.exists() and not list(tmp_path.glob("out.txt*"))


def test_a_vertex_listed_twice_in_two_splits_is_refused(capsys, tmp_path):
    edges, verts = _integer_graph(tmp_path, seed=6)
    listed = verts.read_text().split()
    verts.write_text("".join(f"{v}\n" for v in listed + [listed[0]]))  # far apart: two splits
    argv = ["run", "bfs", "--set", f"graph={edges}", "--set", f"vertices={verts}", "--set", TINY,
            "--set", f"source={listed[1]}", "--workers", "2", "--runtime", "local", "--run-dir", memory_run_dir()]
    assert main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"vertex '{listed[0]}' listed twice" in last and str(verts) in last


# ----------------------------------------------------------------------------------------------
# nothing whole-graph sized on any worker
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("job,cls", [("bfs", BFSLoaded), ("cdlp", CDLPLoaded), ("lcc", LCCLoaded)])
def test_each_block_holds_only_its_own_vertices(tmp_path, job, cls):
    rnd = random.Random(8)
    edges = [(rnd.randrange(2000), rnd.randrange(2000)) for _ in range(6000)]
    (tmp_path / "g.e").write_text("".join(f"{a} {b}\n" for a, b in edges))
    sets = [f"graph={tmp_path / 'g.e'}", "split_mb=0.002", "source=0" if job == "bfs" else "top=3"]
    if job == "cdlp":
        sets.append("iterations=3")
    g = get_job(job).build(resolve_config(get_job(job), None, sets), BuildContext(workers=4))
    from mariana.engine.local import LocalRuntime

    result = LocalRuntime(g, 4).run()
    assert result.supersteps > 3
    blocks: list[LoadedBlock] = [g.instantiate(vid) for vid in g.vertex_ids()]  # type: ignore[misc]
    n = len({v for e in edges for v in e})
    owned = [b.g.own for b in blocks if b.g is not None]
    assert all(isinstance(b, cls) for b in blocks)
    assert sum(len(o) for o in owned) == n and max(len(o) for o in owned) < 0.4 * n
    assert len(np.unique(np.concatenate(owned))) == n  # disjoint
    for b in blocks:
        assert b.g is not None and not hasattr(b, "sub")
        assert len(b.value) == len(b.g.own)
        # per-block arrays: its own rows and neighbours, never one entry per graph vertex
        for name, a in vars(b).items():
            if isinstance(a, np.ndarray) and name not in ("value",):
                assert a.size <= 2 * len(edges), name


def test_loaded_classes_checkpoint_and_resume_to_the_same_output(capsys, tmp_path):
    """A run cut after a checkpoint in the middle of LCC's, CDLP's, WCC's, SSSP's and BFS's steps
    resumes to the same bytes (SSSP and BFS on several blocks keep their edges only as the split
    into internal and boundary ones: a checkpoint puts the block's CSR back together)."""
    rg = RandomGraph(13, 80, 2, density=3.0)
    path = rg.write(tmp_path)
    source = f"source={rg.source(0)}"
    for job, sets in (("lcc", ()), ("cdlp", ("iterations=4",)), ("wcc", ("format=graphalytics",)),
                      ("sssp", (source,)), ("bfs", (source,))):
        want = cli_run(capsys, tmp_path, job, path, *sets, workers=2)[0]
        run_dir = str(tmp_path / f"rd-{uuid.uuid4().hex}")
        out = tmp_path / f"{job}.tsv"
        argv = ["run", job, "--set", f"graph={path}", "--set", f"output={out}", "--workers", "2", "--runtime", "local",
                "--run-dir", run_dir, "--set", "checkpoint_every=1"]
        for s in sets:
            argv += ["--set", s]
        assert main(argv + ["--max-supersteps", "6"]) == 0, capsys.readouterr().err
        assert main(["run", "--resume", run_dir]) == 0, capsys.readouterr().err
        capsys.readouterr()
        assert out.read_text() == want, job


@pytest.mark.parametrize("job", ("cdlp", "wcc"))
def test_integer_ids_negative_and_far_apart_equal_vertex_mode(capsys, tmp_path, job):
    """Labels as integers: a range too wide for one (row, label) key (CDLP ranks them then), and
    negative ids, still order numerically."""
    rnd = random.Random(21)
    ids = rnd.sample(range(-10 ** 16 + 1, 10 ** 16), 600)  # 17 characters at most: int64 keys
    (tmp_path / "g.e").write_text("".join(f"{rnd.choice(ids)} {rnd.choice(ids)}\n" for _ in range(1500)))
    sets = ("format=graphalytics", "iterations=3") if job == "cdlp" else ("format=graphalytics",)
    want = cli_run(capsys, tmp_path, job, tmp_path / "g.e", "mode=vertex", *sets)[0]
    got = [int(line.split(" ")[0]) for line in want.splitlines()]
    assert got == sorted(got) and got[0] < 0
    for workers in (1, 3):  # 600 rows x a span of 2e16 > 2^62: CDLP ranks the labels on one worker
        assert cli_run(capsys, tmp_path, job, tmp_path / "g.e", "mode=block", TINY, *sets, workers=workers)[0] == want
