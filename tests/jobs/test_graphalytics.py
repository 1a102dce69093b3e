"""The six LDBC Graphalytics algorithms: conformance on the benchmark's own example graphs, by its
validation rules, and bfs/cdlp/lcc against independent references on random graphs.

The conformance data lives in ``shared/conformance/graphalytics`` beside the repository (CI
checks it out there); the conformance tests skip, saying where they looked, when it is absent.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest

from mariana.cli import main
from mariana.vertices.graph.bfs import UNREACHABLE
from test_graph_jobs import RandomGraph, cli_run, memory_run_dir, parse_tsv

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
CONFORMANCE = REPO.parent / "shared" / "conformance" / "graphalytics"
MODES = ("block", "vertex")
ALGORITHMS = ("BFS", "CDLP", "LCC", "PR", "SSSP", "WCC")
JOB = {"BFS": "bfs", "CDLP": "cdlp", "LCC": "lcc", "PR": "pagerank", "SSSP": "sssp", "WCC": "wcc"}
#: parameters from the benchmark's config-template/graphs/example-*.properties (README there)
PARAMS = {
    "directed": {"BFS": ["source=1"], "CDLP": ["iterations=2"], "PR": ["iterations=2", "tol=0", "damping=0.85"],
                 "SSSP": ["source=1"], "LCC": [], "WCC": []},
    "undirected": {"BFS": ["source=2"], "CDLP": ["iterations=2"], "PR": ["iterations=2", "tol=0", "damping=0.85"],
                   "SSSP": ["source=2"], "LCC": [], "WCC": []},
}


def conformance_dir() -> Path:
    if not (CONFORMANCE / "example-directed.e").is_file():
        pytest.skip(f"LDBC Graphalytics examples not found at {CONFORMANCE} (shared/ beside the repository)")
    return CONFORMANCE


def read_pairs(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.strip():
            v, x = line.split(" ")
            out[v] = x
    return out


def validate(algorithm: str, got: dict[str, str], want: dict[str, str]) -> None:
    """Graphalytics' output validation rules for ``algorithm``."""
    assert got.keys() == want.keys()
    if algorithm in ("BFS", "CDLP"):  # exact match
        assert got == want
    elif algorithm == "WCC":  # equivalence: the same partition, labels renamed
        pairs = {(got[v], want[v]) for v in want}
        assert len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs})
    else:  # epsilon match
        for v in want:
            r, s = float(want[v]), float(got[v])
            if math.isinf(r):
                assert got[v] == "Infinity", v
            else:
                assert abs(r - s) <= 1e-4 * abs(r), (v, r, s)


def run_example(capsys, tmp_path: Path, graph: str, algorithm: str, mode: str, workers: int,
                placement: str | None = None, runtime: str = "local") -> str:
    d = conformance_dir()
    text, _ = cli_run(capsys, tmp_path, JOB[algorithm], d / f"example-{graph}.e", f"vertices={d / f'example-{graph}.v'}",
                      f"directed={'true' if graph == 'directed' else 'false'}", f"mode={mode}", *PARAMS[graph][algorithm],
                      workers=workers, placement=placement, runtime=runtime)
    return text


# ----------------------------------------------------------------------------------------------
# conformance: the benchmark's example graphs and reference outputs
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("graph", ("directed", "undirected"))
def test_conformance_local(capsys, tmp_path, graph, algorithm):
    d = conformance_dir()
    want_text = (d / f"example-{graph}-{algorithm}").read_text()
    want = read_pairs(want_text)
    outputs = set()
    for mode, (workers, placement) in itertools.product(MODES, ((1, "hash"), (3, "range"), (4, "hash"))):
        text = run_example(capsys, tmp_path, graph, algorithm, mode, workers, placement)
        validate(algorithm, read_pairs(text), want)
        # Graphalytics order: numeric ids, 'vertex value' with one space
        assert [line.split(" ")[0] for line in text.splitlines()] == [line.split(" ")[0] for line in want_text.splitlines()]
        outputs.add(text)
    assert len(outputs) == 1, "output differs between modes / worker counts"
    if algorithm in ("BFS", "CDLP", "WCC"):  # integer outputs: byte-identical to the reference
        assert outputs.pop() == want_text


def test_conformance_cluster_runtime_bit_identical(capsys, tmp_path):
    """One cluster run in the fast tier: LCC (every superstep kind of message) on 2 workers."""
    local = run_example(capsys, tmp_path, "directed", "LCC", "block", 2)
    cluster = run_example(capsys, tmp_path, "directed", "LCC", "block", 2, runtime="cluster")
    assert cluster == local


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("graph", ("directed", "undirected"))
def test_conformance_cluster(capsys, tmp_path, graph, algorithm):
    want = read_pairs((conformance_dir() / f"example-{graph}-{algorithm}").read_text())
    local = run_example(capsys, tmp_path, graph, algorithm, "block", 1)
    for mode, workers in itertools.product(MODES, (2, 3)):
        text = run_example(capsys, tmp_path, graph, algorithm, mode, workers, runtime="cluster")
        validate(algorithm, read_pairs(text), want)
        assert text == local, (mode, workers)


# ----------------------------------------------------------------------------------------------
# independent references on random graphs (self-loops, parallel edges, string ids)
# ----------------------------------------------------------------------------------------------
def ref_bfs(rg: RandomGraph, source: str, directed: bool) -> dict[str, int]:
    g = nx.MultiDiGraph() if directed else nx.MultiGraph()
    g.add_nodes_from(rg.ids)
    g.add_edges_from((s, d) for s, d, _ in rg.edges)
    depth = nx.single_source_shortest_path_length(g, source)
    return {v: depth.get(v, UNREACHABLE) for v in rg.ids}


def ref_cdlp(rg: RandomGraph, iterations: int) -> dict[str, str]:
    """Synchronous label propagation over in- plus out-neighbours (a multiset: parallel edges and
    both directions count), ties to the smallest label (string order: these ids are not all
    numbers)."""
    label = {v: v for v in rg.ids}
    for _ in range(iterations):
        seen: dict[str, list[str]] = {v: [] for v in rg.ids}
        for s, d, _ in rg.edges:
            seen[d].append(label[s])
            seen[s].append(label[d])
        new = {}
        for v, labels in seen.items():
            if labels:
                counts = Counter(labels)
                top = max(counts.values())
                new[v] = min(lab for lab, c in counts.items() if c == top)
            else:
                new[v] = label[v]
        label = new
    return label


def ref_lcc(rg: RandomGraph, directed: bool) -> dict[str, float]:
    arcs = {(s, d) for s, d, _ in rg.edges if s != d}
    if not directed:
        arcs |= {(d, s) for s, d in arcs}
    nbrs: dict[str, set[str]] = {v: set() for v in rg.ids}
    for s, d in arcs:
        nbrs[s].add(d)
        nbrs[d].add(s)
    out = {}
    for v, nb in nbrs.items():
        k = len(nb)
        links = sum(1 for a in nb for b in nb if a != b and (a, b) in arcs)
        out[v] = links / (k * (k - 1)) if k > 1 else 0.0
    return out


RANDOM = [(1, 60, 2, 1, None), (2, 150, 3, 3, "range"), (3, 200, 4, 4, "hash")]


@pytest.mark.parametrize("seed,n,comps,workers,placement", RANDOM)
@pytest.mark.parametrize("directed", (True, False))
def test_bfs_cdlp_lcc_match_references(capsys, tmp_path, seed, n, comps, workers, placement, directed):
    rg = RandomGraph(seed, n, comps, density=3.0)
    path = rg.write(tmp_path)
    source = rg.source(0)
    flag = f"directed={'true' if directed else 'false'}"
    for mode in MODES:
        text, _ = cli_run(capsys, tmp_path, "bfs", path, f"mode={mode}", f"source={source}", flag,
                          workers=workers, placement=placement)
        want = {v: ("inf" if d == UNREACHABLE else str(d)) for v, d in ref_bfs(rg, source, directed).items()}
        assert dict(parse_tsv(text, str)) == want
        text, _ = cli_run(capsys, tmp_path, "cdlp", path, f"mode={mode}", "iterations=3", flag,
                          workers=workers, placement=placement)
        assert dict(parse_tsv(text, str)) == ref_cdlp(rg, 3)  # both ways regardless of directed
        text, _ = cli_run(capsys, tmp_path, "lcc", path, f"mode={mode}", flag, workers=workers, placement=placement)
        got = dict(parse_tsv(text))
        want_lcc = ref_lcc(rg, directed)
        assert got == want_lcc  # exact: integer counts divided once
        assert 0 < sum(1 for x in got.values() if x > 0) < len(got)


@pytest.mark.parametrize("job,sets", [("bfs", None), ("cdlp", ("iterations=5",)), ("lcc", ())])
def test_outputs_byte_identical_for_every_placement_worker_count_and_mode(capsys, tmp_path, job, sets):
    rg = RandomGraph(7, 200, 3, density=3.0)
    path = rg.write(tmp_path)
    sets = sets if sets is not None else (f"source={rg.source(0)}",)
    outputs = {}
    for placement, workers, mode in itertools.product(("hash", "range"), (1, 2, 5), MODES):
        outputs[(placement, workers, mode)] = cli_run(capsys, tmp_path, job, path, f"mode={mode}", *sets,
                                                      workers=workers, placement=placement)[0]
    assert len(set(outputs.values())) == 1, job


def test_cdlp_labels_order_numerically_for_integer_ids(capsys, tmp_path):
    """Ties go to the smallest label: 2 < 10 for the integer ids of Graphalytics graphs."""
    path = tmp_path / "g.e"
    path.write_text("1 2\n1 10\n")  # vertex 1 sees labels 2 and 10 once each
    text, _ = cli_run(capsys, tmp_path, "cdlp", path, "iterations=1", "format=graphalytics")
    assert read_pairs(text)["1"] == "2"
    text, _ = cli_run(capsys, tmp_path, "cdlp", path, "iterations=1")
    assert dict(parse_tsv(text, str))["1"] == "2"


# ----------------------------------------------------------------------------------------------
# input and output conventions
# ----------------------------------------------------------------------------------------------
def test_vertices_file_adds_isolated_vertices_and_implies_graphalytics_format(capsys, tmp_path):
    edges = tmp_path / "g.e"
    edges.write_text("1 2 0.5\n2 10 1.5\n")
    verts = tmp_path / "g.v"
    verts.write_text("1\n2\n10\n7\n")
    text, _ = cli_run(capsys, tmp_path, "sssp", edges, f"vertices={verts}", "source=1")
    assert text == "1 0.0\n2 0.5\n7 Infinity\n10 2.0\n"
    text, _ = cli_run(capsys, tmp_path, "bfs", edges, f"vertices={verts}", "source=1")
    assert text == f"1 0\n2 1\n7 {UNREACHABLE}\n10 2\n"
    text, _ = cli_run(capsys, tmp_path, "bfs", edges, f"vertices={verts}", "source=1", "format=mariana")
    assert text == "1\t0\n10\t2\n2\t1\n7\tinf\n"
    text, _ = cli_run(capsys, tmp_path, "wcc", edges, f"vertices={verts}")
    assert text == "1 1\n2 1\n7 7\n10 1\n"
    text, _ = cli_run(capsys, tmp_path, "pagerank", edges, f"vertices={verts}", "iterations=1", "tol=0")
    assert len(text.splitlines()) == 4  # the isolated vertex takes part (N = 4)
    # undirected: each edge listed once, followed both ways
    text, _ = cli_run(capsys, tmp_path, "bfs", edges, f"vertices={verts}", "source=10", "directed=false")
    assert text == f"1 2\n2 1\n7 {UNREACHABLE}\n10 0\n"


def bad_run(capsys, argv: list[str]) -> str:
    rc = main(argv + ["--run-dir", memory_run_dir()])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def test_bad_vertices_files(capsys, tmp_path):
    edges = tmp_path / "g.e"
    edges.write_text("1 2\n2 3\n")
    verts = tmp_path / "g.v"
    verts.write_text("1\n2\n")
    err = bad_run(capsys, ["run", "lcc", "--set", f"graph={edges}", "--set", f"vertices={verts}", "--set", "mode=vertex"])
    assert f"{edges}:2" in err and "'3'" in err and str(verts) in err  # the whole file: its line
    err = bad_run(capsys, ["run", "lcc", "--set", f"graph={edges}", "--set", f"vertices={verts}"])
    assert f"{edges}: vertex '3' is not in {verts}" in err  # in parts: the vertex and both files
    verts.write_text("1\n2\n3\n2\n")
    err = bad_run(capsys, ["run", "bfs", "--set", f"graph={edges}", "--set", f"vertices={verts}", "--set", "source=1"])
    assert f"{verts}:4" in err and "twice" in err
    verts.write_text("1 x\n")
    err = bad_run(capsys, ["run", "cdlp", "--set", f"graph={edges}", "--set", f"vertices={verts}"])
    assert f"{verts}:1" in err
    err = bad_run(capsys, ["run", "bfs", "--set", f"graph={edges}", "--set", f"vertices={tmp_path / 'nope.v'}",
                           "--set", "source=1"])
    assert "cannot read vertices file" in err
    err = bad_run(capsys, ["run", "bfs", "--set", f"graph={edges}"])
    assert "source" in err
    err = bad_run(capsys, ["run", "bfs", "--set", f"graph={edges}", "--set", "source=9"])
    assert "'9'" in err
    err = bad_run(capsys, ["run", "cdlp", "--set", f"graph={edges}", "--set", "iterations=-1"])
    assert "iterations" in err
    err = bad_run(capsys, ["run", "lcc", "--set", f"graph={edges}", "--set", "format=csv"])
    assert "format" in err


@pytest.mark.parametrize("job", ("bfs", "cdlp", "lcc"))
def test_example_graph_with_no_args(capsys, job):
    rc = main(["run", job, "--run-dir", memory_run_dir(), "--runtime", "local"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.startswith(job)


def test_output_at_a_memory_url(capsys, tmp_path):
    import fsspec

    rg = RandomGraph(5, 60, 2)
    path = rg.write(tmp_path)
    url = f"memory://mariana-test-graphalytics/{uuid.uuid4().hex}/lcc.txt"
    rc = main(["run", "lcc", "--set", f"graph={path}", "--set", f"output={url}", "--set", "format=graphalytics",
               "--run-dir", memory_run_dir()])
    assert rc == 0
    got = {v: float(x) for v, x in read_pairs(fsspec.filesystem("memory").cat(url).decode()).items()}
    assert got == ref_lcc(rg, True)


def test_lcc_wedges_in_many_chunks(capsys, tmp_path, monkeypatch):
    """Superstep 2 cuts the wedges into messages of at most WEDGE_CHUNK (one block: the kernel's
    rows into chunks of about TRIANGLE_CHUNK terms): the result is the same."""
    import mariana.vertices.graph.lcc as ga
    import mariana.vertices.graph.triangles as tr

    rg = RandomGraph(9, 150, 2, density=4.0)
    path = rg.write(tmp_path)
    whole = cli_run(capsys, tmp_path, "lcc", path, workers=2)[0]
    monkeypatch.setattr(ga, "WEDGE_CHUNK", 3)
    monkeypatch.setattr(tr, "TRIANGLE_CHUNK", 3)
    for workers in (1, 3):
        assert cli_run(capsys, tmp_path, "lcc", path, workers=workers)[0] == whole
    assert dict(parse_tsv(whole)) == ref_lcc(rg, True)


@pytest.mark.parametrize("directed", (True, False))
def test_lcc_on_one_block_takes_one_step_without_messages(tmp_path, directed):
    """One worker: every neighbour is local, so LCC is one processing step that sends nothing."""
    from mariana.engine.local import LocalRuntime
    from mariana.jobs import BuildContext, get_job, resolve_config
    from mariana.partitioner.fragment import LOAD_STEPS

    rg = RandomGraph(4, 80, 2, density=3.0)
    path = rg.write(tmp_path)
    job = get_job("lcc")
    sets = [f"graph={path}", f"directed={'true' if directed else 'false'}"]
    result = LocalRuntime(job.build(resolve_config(job, None, sets), BuildContext(workers=1)), 1).run()
    assert result.supersteps == LOAD_STEPS + 1
    assert sum(m["messages"] for m in result.metrics if m["superstep"] >= LOAD_STEPS) == 0
