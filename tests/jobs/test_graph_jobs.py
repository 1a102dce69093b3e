"""pagerank, sssp and wcc against networkx, through the Python API and the ``mariana`` command.

Graphs are small seeded random edge lists with dangling vertices, self-loops, parallel edges,
several components, vertices seen only as destinations, and ids such as 'v17', '10' and '9'
(whose string order differs from numeric order).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import mariana
from mariana.jobs import BuildContext, get_job, resolve_config
from mariana.cli import main
from mariana.storage import graphoutput
from mariana.storage.edgelist import example_graph_url, load_edges
from mariana.jobs.graphjob import collect
from mariana.partitioner.fragment import LOAD_STEPS

pytestmark = pytest.mark.timeout(120)

INF = float("inf")
MODES = ("block", "vertex")
PR_SETS = ("tol=1e-14", "iterations=1000")


# ----------------------------------------------------------------------------------------------
# random graphs
# ----------------------------------------------------------------------------------------------
class RandomGraph:
    """A seeded random edge list: ``text`` (the file) and ``edges`` [(src, dst, weight)]."""

    def __init__(self, seed: int, n: int = 120, components: int = 3, density: float = 2.0) -> None:
        rnd = random.Random(seed)
        names = [str(i) for i in range(n // 2)] + [f"v{i}" for i in range(n // 2, n)]
        rnd.shuffle(names)
        edges: list[tuple[str, str, float]] = []
        lines = [f"# random graph seed={seed}", ""]
        cuts = sorted(rnd.sample(range(1, n), components - 1))
        groups = [names[a:b] for a, b in zip([0, *cuts], [*cuts, n]) if b - a >= 2]
        for group in groups:
            sinks = set(rnd.sample(group, max(1, len(group) // 5)))  # never a source: dangling, dst-only
            sources = [v for v in group if v not in sinks]
            if not sources:
                sources = [group[0]]
            for _ in range(int(density * len(group))):
                s = rnd.choice(sources)
                r = rnd.random()
                d = s if r < 0.05 else rnd.choice(group)  # some self-loops
                self._add(rnd, lines, edges, s, d)
                if rnd.random() < 0.1:  # a parallel edge, maybe with another weight
                    self._add(rnd, lines, edges, s, d)
                if rnd.random() < 0.05:
                    lines.append(rnd.choice(["", "# a comment", "   "]))
            for v in sinks:  # every sink is reachable from its group
                self._add(rnd, lines, edges, rnd.choice(sources), v)
        # a vertex whose only edge is a self-loop, and a tiny component of two vertices
        self._add(rnd, lines, edges, "zz-loop", "zz-loop")
        self._add(rnd, lines, edges, "9", "10") if "9" not in names else self._add(rnd, lines, edges, "w9", "w10")
        self.text = "\n".join(lines) + "\n"
        self.edges = edges
        self.ids = sorted({v for e in edges for v in e[:2]})
        self.out_degree = {v: 0 for v in self.ids}
        for s, _, _ in edges:
            self.out_degree[s] += 1

    @staticmethod
    def _add(rnd: random.Random, lines: list[str], edges: list, s: str, d: str) -> None:
        sep = rnd.choice([" ", "\t", "   "])
        r = rnd.random()
        if r < 0.3:
            lines.append(f"{s}{sep}{d}")
            edges.append((s, d, 1.0))
        else:
            w = 0.0 if r < 0.33 else round(rnd.uniform(0.01, 5.0), 2)
            tail = "  # trailing comment" if rnd.random() < 0.1 else ""
            lines.append(f"{s}{sep}{d}{sep}{w!r}{tail}")
            edges.append((s, d, w))

    def write(self, tmp_path: Path, name: str = "graph.e") -> Path:
        p = tmp_path / name
        p.write_text(self.text)
        return p

    def source(self, rank: int = 0) -> str:
        """A numeric-looking source vertex; rank 0 reaches the most vertices, 1 the next, ..."""
        g = nx.DiGraph()
        g.add_edges_from((s, d) for s, d, _ in self.edges)
        cands = [v for v in self.ids if v[0].isdigit()]
        cands.sort(key=lambda v: (-len(nx.descendants(g, v)), v))
        return cands[rank]


# ----------------------------------------------------------------------------------------------
# references
# ----------------------------------------------------------------------------------------------
def nx_pagerank(edges, damping: float = 0.85) -> dict[str, float]:
    g = nx.MultiDiGraph()
    g.add_edges_from((s, d) for s, d, _ in edges)
    return nx.pagerank(g, alpha=damping, weight=None, tol=1e-14, max_iter=1000)


def nx_sssp(edges, ids, source) -> dict[str, float]:
    g = nx.MultiDiGraph()
    g.add_nodes_from(ids)
    g.add_weighted_edges_from(edges)
    dist = nx.single_source_dijkstra_path_length(g, source)
    return {v: float(dist.get(v, INF)) for v in ids}


def nx_wcc(edges, ids) -> dict[str, str]:
    g = nx.Graph()
    g.add_nodes_from(ids)
    g.add_edges_from((s, d) for s, d, _ in edges)
    labels = {}
    for comp in nx.connected_components(g):
        m = min(comp)
        for v in comp:
            labels[v] = m
    return labels


def power_iteration(edges, ids, damping: float, updates: int) -> tuple[np.ndarray, list[float]]:
    """Hand-written PageRank power iteration: ranks after ``updates`` steps and each step's L1."""
    n = len(ids)
    index = {v: i for i, v in enumerate(ids)}
    src = np.array([index[s] for s, _, _ in edges])
    dst = np.array([index[d] for _, d, _ in edges])
    outdeg = np.bincount(src, minlength=n).astype(float)
    x = np.full(n, 1.0 / n)
    l1s = []
    for _ in range(updates):
        dangling = math.fsum(x[outdeg == 0].tolist())
        incoming = np.zeros(n)
        np.add.at(incoming, dst, x[src] / outdeg[src])
        new = (1.0 - damping) / n + damping * (incoming + dangling / n)
        l1s.append(math.fsum(np.abs(new - x).tolist()))
        x = new
    return x, l1s


# ----------------------------------------------------------------------------------------------
# running ours
# ----------------------------------------------------------------------------------------------
def memory_run_dir() -> str:
    return f"memory://mariana-test-graph-jobs/{uuid.uuid4().hex}"


def api_rows(job_name: str, sets: list[str], workers: int = 1, placement: str | None = None):
    """(rows, RunResult) through the Python API; wcc block labels mapped back to ids."""
    job = get_job(job_name)
    cfg = resolve_config(job, None, sets)
    g = job.build(cfg, BuildContext(workers=workers, placement=placement))
    result = mariana.run(g, workers=workers)
    rows = collect(result)
    if job_name == "wcc":
        ids = [v for v, _ in rows]
        rows = [(v, ids[lab] if isinstance(lab, int) else lab) for v, lab in rows]
    return rows, result


def cli_run(capsys, tmp_path: Path, job: str, graph: Path | str, *sets: str, workers: int = 1,
            placement: str | None = None, json_out: bool = False, runtime: str = "local") -> tuple[str, str]:
    """Run ``mariana run JOB`` in-process on LocalRuntime; (OUT.tsv text, stdout)."""
    out = tmp_path / f"out-{uuid.uuid4().hex}.tsv"
    argv = ["run", job, "--set", f"graph={graph}", "--set", f"output={out}", "--workers", str(workers),
            "--runtime", runtime, "--run-dir", memory_run_dir()]
    for s in sets:
        argv += ["--set", s]
    if placement:
        argv += ["--placement", placement]
    if json_out:
        argv.append("--json")
    rc = main(argv)
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "Traceback" not in cap.err
    return out.read_text(), cap.out


def parse_tsv(text: str, value=float) -> list[tuple[str, object]]:
    rows = []
    for line in text.splitlines():
        fields = line.split("\t")
        assert len(fields) == 2, f"bad output line {line!r}"
        rows.append((fields[0], value(fields[1])))
    assert [r[0] for r in rows] == sorted(r[0] for r in rows), "output not sorted by vertex id"
    assert text.endswith("\n") or not text
    return rows


SEEDS = [
    # seed, n, components, workers, placement
    (1, 60, 2, 1, None),
    (2, 200, 3, 3, "range"),
    (3, 400, 5, 4, "hash"),
]


def _graph_cases():
    for seed, n, comps, workers, placement in SEEDS:
        for mode in MODES:
            yield pytest.param(seed, n, comps, workers, placement, mode, id=f"seed{seed}-{mode}-w{workers}")


# ----------------------------------------------------------------------------------------------
# against networkx
# ----------------------------------------------------------------------------------------------
def test_random_graphs_have_the_intended_features():
    for seed, n, comps, _, _ in SEEDS:
        rg = RandomGraph(seed, n, comps)
        srcs = {s for s, _, _ in rg.edges}
        assert any(s == d for s, d, _ in rg.edges), "no self-loop"
        assert len({(s, d) for s, d, _ in rg.edges}) < len(rg.edges), "no parallel edge"
        assert set(rg.ids) - srcs, "no destination-only (dangling) vertex"
        assert len(set(nx_wcc(rg.edges, rg.ids).values())) >= 3, "not several components"
        assert "10" in rg.ids and "9" in rg.ids and any(v.startswith("v") for v in rg.ids)
        # parallel edges matter: networkx on a simple DiGraph gives other ranks
        simple = nx.pagerank(nx.DiGraph([(s, d) for s, d, _ in rg.edges]), weight=None, tol=1e-14, max_iter=1000)
        multi = nx_pagerank(rg.edges)
        assert max(abs(simple[v] - multi[v]) for v in rg.ids) > 1e-6
        # the sssp sources reach a good part of their component, and not everything
        dist = nx_sssp(rg.edges, rg.ids, rg.source(0))
        assert 10 < sum(d < INF for d in dist.values()) < len(rg.ids)


@pytest.mark.parametrize("seed,n,comps,workers,placement,mode", list(_graph_cases()))
def test_pagerank_api_matches_networkx(tmp_path, seed, n, comps, workers, placement, mode):
    rg = RandomGraph(seed, n, comps)
    path = rg.write(tmp_path)
    rows, result = api_rows("pagerank", [f"graph={path}", f"mode={mode}", *PR_SETS], workers, placement)
    want = nx_pagerank(rg.edges)
    assert [v for v, _ in rows] == rg.ids
    for v, rank in rows:
        assert rank == pytest.approx(want[v], abs=1e-8), v
    assert math.fsum(r for _, r in rows) == pytest.approx(1.0, abs=1e-10)
    assert result.halt_reason.startswith("converged")


@pytest.mark.parametrize("seed,n,comps,workers,placement,mode", list(_graph_cases()))
def test_pagerank_cli_matches_networkx(capsys, tmp_path, seed, n, comps, workers, placement, mode):
    rg = RandomGraph(seed, n, comps)
    path = rg.write(tmp_path)
    damping = 0.85 if seed % 2 else 0.6
    text, _ = cli_run(capsys, tmp_path, "pagerank", path, f"mode={mode}", f"damping={damping}", *PR_SETS,
                      workers=workers, placement=placement)
    rows = parse_tsv(text)
    want = nx_pagerank(rg.edges, damping)
    assert [v for v, _ in rows] == rg.ids
    for v, rank in rows:
        assert rank == pytest.approx(want[v], abs=1e-8), v


@pytest.mark.parametrize("seed,n,comps,workers,placement,mode", list(_graph_cases()))
def test_sssp_api_matches_networkx(tmp_path, seed, n, comps, workers, placement, mode):
    rg = RandomGraph(seed, n, comps)
    path = rg.write(tmp_path)
    source = rg.source(0)
    rows, _ = api_rows("sssp", [f"graph={path}", f"mode={mode}", f"source={source}"], workers, placement)
    want = nx_sssp(rg.edges, rg.ids, source)
    assert dict(rows) == want
    assert [v for v, _ in rows] == rg.ids
    assert any(d == INF for _, d in rows)  # several components: some unreachable


@pytest.mark.parametrize("seed,n,comps,workers,placement,mode", list(_graph_cases()))
def test_sssp_cli_matches_networkx(capsys, tmp_path, seed, n, comps, workers, placement, mode):
    rg = RandomGraph(seed, n, comps)
    path = rg.write(tmp_path)
    source = rg.source(1)
    text, _ = cli_run(capsys, tmp_path, "sssp", path, f"mode={mode}", f"source={source}",
                      workers=workers, placement=placement)
    rows = parse_tsv(text)
    assert dict(rows) == nx_sssp(rg.edges, rg.ids, source)
    assert [v for v, _ in rows] == rg.ids
    unreachable = [line for line in text.splitlines() if line.endswith("\tinf")]
    assert unreachable, "unreachable vertices print as inf"


@pytest.mark.parametrize("mode", MODES)
def test_sssp_from_a_destination_only_vertex(capsys, tmp_path, mode):
    rg = RandomGraph(11, 80, 2)
    path = rg.write(tmp_path)
    sink = next(v for v in rg.ids if rg.out_degree[v] == 0)
    text, _ = cli_run(capsys, tmp_path, "sssp", path, f"mode={mode}", f"source={sink}", workers=3)
    rows = dict(parse_tsv(text))
    assert rows == {v: (0.0 if v == sink else INF) for v in rg.ids}


@pytest.mark.parametrize("seed,n,comps,workers,placement,mode", list(_graph_cases()))
def test_wcc_api_matches_networkx(tmp_path, seed, n, comps, workers, placement, mode):
    rg = RandomGraph(seed, n, comps)
    path = rg.write(tmp_path)
    rows, _ = api_rows("wcc", [f"graph={path}", f"mode={mode}"], workers, placement)
    assert dict(rows) == nx_wcc(rg.edges, rg.ids)
    assert [v for v, _ in rows] == rg.ids


@pytest.mark.parametrize("seed,n,comps,workers,placement,mode", list(_graph_cases()))
def test_wcc_cli_matches_networkx(capsys, tmp_path, seed, n, comps, workers, placement, mode):
    rg = RandomGraph(seed, n, comps)
    path = rg.write(tmp_path)
    text, _ = cli_run(capsys, tmp_path, "wcc", path, f"mode={mode}", workers=workers, placement=placement)
    rows = parse_tsv(text, str)
    want = nx_wcc(rg.edges, rg.ids)
    assert dict(rows) == want
    assert [v for v, _ in rows] == rg.ids
    # string order, not numeric: the component of "9" and "10" is labelled "10"
    if "9" in want and want["9"] in ("9", "10"):
        assert want["9"] == "10"


def test_wcc_reads_edges_as_undirected(capsys, tmp_path):
    path = tmp_path / "g.e"
    path.write_text("b a\nc b\nd c\n9 10\nx x\n")  # a chain pointing the "wrong" way
    for mode in MODES:
        text, _ = cli_run(capsys, tmp_path, "wcc", path, f"mode={mode}", workers=2)
        assert text == "10\t10\n9\t10\na\ta\nb\ta\nc\ta\nd\ta\nx\tx\n"


@pytest.mark.parametrize("job", ["wcc", "cdlp"])
def test_block_labels_are_written_and_counted_a_piece_at_a_time(capsys, tmp_path, monkeypatch, job):
    """Block mode holds labels as keys, as it holds ids: a part decodes them a few rows at a time
    as it is written, and the summary counts them by key, decoding each distinct one once. The
    same lines and the same largest components or communities as the vertex mode."""
    monkeypatch.setattr(graphoutput, "OUTPUT_ROWS", 3)
    rg = RandomGraph(31, 90, 4)
    path = rg.write(tmp_path)
    runs = {mode: cli_run(capsys, tmp_path, job, path, f"mode={mode}", "top=10", workers=2, json_out=True)
            for mode in MODES}
    (text, stdout), (vertex_text, vertex_stdout) = runs["block"], runs["vertex"]
    assert text == vertex_text
    if job == "wcc":
        assert dict(parse_tsv(text, str)) == nx_wcc(rg.edges, rg.ids)
    summary = json.loads(stdout)
    assert summary["largest"] == json.loads(vertex_stdout)["largest"]
    assert sum(size for _, size in summary["largest"]) <= len(rg.ids) and len(summary["largest"]) >= 2


def test_pagerank_and_sssp_read_edges_as_directed(capsys, tmp_path):
    path = tmp_path / "g.e"
    path.write_text("a b 2\nb c 3\nd a 1\n")
    for mode in MODES:
        text, _ = cli_run(capsys, tmp_path, "sssp", path, f"mode={mode}", "source=b")
        assert text == "a\tinf\nb\t0.0\nc\t3.0\nd\tinf\n"
        text, _ = cli_run(capsys, tmp_path, "pagerank", path, f"mode={mode}", *PR_SETS)
        want = nx_pagerank([("a", "b", 1), ("b", "c", 1), ("d", "a", 1)])
        for v, r in parse_tsv(text):
            assert r == pytest.approx(want[v], abs=1e-8)


# ----------------------------------------------------------------------------------------------
# placement and worker count do not change a single byte
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("job,sets", [
    ("pagerank", ("tol=1e-12", "iterations=60")),
    ("sssp", None),
    ("wcc", ()),
])
def test_outputs_byte_identical_for_every_placement_worker_count_and_mode(capsys, tmp_path, job, sets):
    rg = RandomGraph(7, 200, 3)
    path = rg.write(tmp_path)
    if sets is None:
        sets = (f"source={rg.source(0)}",)
    outputs = {}
    for placement, workers, mode in itertools.product(("hash", "range"), (1, 2, 3, 5), MODES):
        text, _ = cli_run(capsys, tmp_path, job, path, f"mode={mode}", *sets, workers=workers, placement=placement)
        outputs[(placement, workers, mode)] = text
    reference = outputs[("hash", 1, "vertex")]
    assert reference.count("\n") == len(rg.ids)
    differing = [k for k, v in outputs.items() if v != reference]
    assert not differing, f"{job}: output differs from hash/1/vertex for {differing}"


def test_pagerank_blocks_in_small_pieces_give_the_same_bytes(capsys, tmp_path, monkeypatch):
    """The summation order fixed and the sums taken a few in-edges at a time: the same bytes."""
    import mariana.vertices.graph.kernels as bk
    import mariana.vertices.graph.pagerank as gb

    rg = RandomGraph(8, 300, 3)
    path = rg.write(tmp_path)
    sets = ("tol=0", "iterations=15")
    want, _ = cli_run(capsys, tmp_path, "pagerank", path, "mode=vertex", *sets, workers=1)
    monkeypatch.setattr(gb, "ORDER_PIECE", 7)
    monkeypatch.setattr(bk, "SUM_PIECE", 5)
    for workers in (1, 3):
        got, _ = cli_run(capsys, tmp_path, "pagerank", path, "mode=block", *sets, workers=workers)
        assert got == want, workers


def test_more_workers_than_vertices(capsys, tmp_path):
    path = tmp_path / "g.e"
    path.write_text("b a 2\na c\n")
    for job, extra in (("pagerank", PR_SETS), ("sssp", ("source=b",)), ("wcc", ())):
        outs = {cli_run(capsys, tmp_path, job, path, f"mode={mode}", *extra, workers=w, placement=p)[0]
                for mode in MODES for w in (1, 5) for p in ("hash", "range")}
        assert len(outs) == 1, job


# ----------------------------------------------------------------------------------------------
# iterations and tol
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("damping", [0.85, 0.5])
def test_iterations_2_tol_0_is_exactly_two_updates(capsys, tmp_path, mode, damping):
    rg = RandomGraph(21, 70, 2)
    path = rg.write(tmp_path)
    text, stdout = cli_run(capsys, tmp_path, "pagerank", path, f"mode={mode}", "iterations=2", "tol=0",
                           f"damping={damping}", workers=3, json_out=True)
    summary = json.loads(stdout)
    assert summary["updates"] == 2
    want, _ = power_iteration(rg.edges, rg.ids, damping, 2)
    got = parse_tsv(text)
    assert [v for v, _ in got] == rg.ids
    np.testing.assert_allclose([r for _, r in got], want, rtol=1e-12, atol=0)
    # and it is not what one or three updates give
    for k in (1, 3):
        other, _ = power_iteration(rg.edges, rg.ids, damping, k)
        assert not np.allclose([r for _, r in got], other, rtol=1e-9, atol=0)


@pytest.mark.parametrize("mode", MODES)
def test_iterations_cap_and_zero_iterations(tmp_path, mode):
    rg = RandomGraph(22, 50, 2)
    path = rg.write(tmp_path)
    for k in (0, 1, 5):
        rows, result = api_rows("pagerank", [f"graph={path}", f"mode={mode}", f"iterations={k}", "tol=0"], 2)
        loading = LOAD_STEPS if mode == "block" else 0  # block mode loads the graph in supersteps first
        assert result.supersteps - 1 - loading == k
        want, _ = power_iteration(rg.edges, rg.ids, 0.85, k)
        np.testing.assert_allclose([r for _, r in rows], want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tol", [1e-2, 1e-4, 1e-7])
def test_tol_stops_at_the_first_update_whose_l1_change_is_below_tol(capsys, tmp_path, mode, tol):
    rg = RandomGraph(23, 60, 2)
    path = rg.write(tmp_path)
    _, l1s = power_iteration(rg.edges, rg.ids, 0.85, 300)
    expected = next(k for k, l1 in enumerate(l1s, 1) if l1 < tol)
    assert all(abs(l1 - tol) > 1e-6 * tol for l1 in l1s[:expected])  # no borderline case
    text, stdout = cli_run(capsys, tmp_path, "pagerank", path, f"mode={mode}", f"tol={tol}", "iterations=1000",
                           workers=2, json_out=True)
    assert json.loads(stdout)["updates"] == expected
    want, _ = power_iteration(rg.edges, rg.ids, 0.85, expected)
    np.testing.assert_allclose([r for _, r in parse_tsv(text)], want, rtol=1e-11, atol=0)


# ----------------------------------------------------------------------------------------------
# LDBC Graphalytics example
# ----------------------------------------------------------------------------------------------
GRAPHALYTICS = Path(__file__).resolve().parents[3] / "shared" / "conformance" / "graphalytics"


def graphalytics_dir() -> Path:
    if not (GRAPHALYTICS / "example-directed.e").is_file():
        pytest.skip(f"LDBC Graphalytics example not found at {GRAPHALYTICS} (expected shared/ beside the repo)")
    return GRAPHALYTICS


def read_reference(path: Path) -> dict[str, float]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            v, x = line.split()
            out[v] = INF if x == "Infinity" else float(x)
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("workers,placement", [(1, "hash"), (3, "range")])
def test_graphalytics_pagerank(capsys, tmp_path, mode, workers, placement):
    d = graphalytics_dir()
    text, _ = cli_run(capsys, tmp_path, "pagerank", d / "example-directed.e", f"mode={mode}", "damping=0.85",
                      "iterations=2", "tol=0", workers=workers, placement=placement)
    got = dict(parse_tsv(text))
    want = read_reference(d / "example-directed-PR")
    assert got.keys() == want.keys()
    for v in want:
        assert got[v] == pytest.approx(want[v], rel=1e-4), v  # the Graphalytics tolerance
        assert got[v] == pytest.approx(want[v], rel=1e-12), v  # what we actually achieve


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("workers,placement", [(1, "hash"), (3, "range")])
def test_graphalytics_sssp(capsys, tmp_path, mode, workers, placement):
    d = graphalytics_dir()
    text, _ = cli_run(capsys, tmp_path, "sssp", d / "example-directed.e", f"mode={mode}", "source=1",
                      workers=workers, placement=placement)
    got = dict(parse_tsv(text))
    want = read_reference(d / "example-directed-SSSP")
    assert got.keys() == want.keys()
    for v in want:
        if math.isinf(want[v]):
            assert math.isinf(got[v]) and got[v] > 0, v
        else:
            assert got[v] == pytest.approx(want[v], rel=1e-12), v


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("workers,placement", [(1, "hash"), (3, "range")])
def test_graphalytics_wcc(capsys, tmp_path, mode, workers, placement):
    d = graphalytics_dir()
    text, _ = cli_run(capsys, tmp_path, "wcc", d / "example-directed.e", f"mode={mode}",
                      workers=workers, placement=placement)
    got = dict(parse_tsv(text, str))
    want = {v: str(int(x)) for v, x in read_reference(d / "example-directed-WCC").items()}
    assert got.keys() == want.keys()
    # equal up to renaming: a bijection between our labels and theirs
    pairs = {(got[v], want[v]) for v in want}
    assert len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs})
    for v in want:  # and ours are the smallest id of each component
        assert got[v] == min((u for u in want if want[u] == want[v]))


# ----------------------------------------------------------------------------------------------
# the shipped example graph
# ----------------------------------------------------------------------------------------------
def run_cli_subprocess(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, "-m", "mariana", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=100)


@pytest.mark.parametrize("job", ["pagerank", "sssp", "wcc"])
def test_default_example_graph_with_no_args(tmp_path, job):
    proc = run_cli_subprocess(["run", job], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) >= 3, proc.stdout
    example = load_edges(example_graph_url())
    edges = [(example.ids[s], example.ids[d], w)
             for s, d, w in zip(example.src.tolist(), example.dst.tolist(), example.weight.tolist())]
    n = example.n
    if job == "pagerank":
        assert lines[0].startswith(f"pagerank: {n} vertices")
        pr = nx_pagerank(edges)
        best = max(pr, key=lambda v: (pr[v], [-ord(c) for c in v]))
        assert lines[1].split()[:2] == ["1", best]
        assert float(lines[1].split()[2]) == pytest.approx(pr[best], abs=1e-6)
        assert len(lines) == 1 + min(10, n)
    elif job == "sssp":
        dist = nx_sssp(edges, example.ids, "amsterdam")
        reachable = sum(1 for d in dist.values() if d != INF)
        assert lines[0].startswith(f"sssp from amsterdam: {reachable} of {n} vertices reachable")
        assert lines[1].split() == ["amsterdam", "0"]
    else:
        comps = set(nx_wcc(edges, example.ids).values())
        assert lines[0].startswith(f"wcc: {len(comps)} component(s) over {n} vertices")
        assert {line.split()[0] for line in lines[1:]} == comps
    # the default run directory lands in the working directory
    runs = list((tmp_path / "runs").glob(f"{job}-*/job.json"))
    assert len(runs) == 1
    assert json.loads(runs[0].read_text())["status"] == "finished"


@pytest.mark.parametrize("mode", MODES)
def test_example_graph_results_match_networkx(capsys, tmp_path, mode):
    example = load_edges(None)
    edges = [(example.ids[s], example.ids[d], w)
             for s, d, w in zip(example.src.tolist(), example.dst.tolist(), example.weight.tolist())]
    url = example_graph_url()
    rows = dict(parse_tsv(cli_run(capsys, tmp_path, "pagerank", url, f"mode={mode}", *PR_SETS, workers=2)[0]))
    pr = nx_pagerank(edges)
    assert rows.keys() == pr.keys()
    assert all(rows[v] == pytest.approx(pr[v], abs=1e-8) for v in pr)
    rows = dict(parse_tsv(cli_run(capsys, tmp_path, "sssp", url, f"mode={mode}", "source=amsterdam")[0]))
    assert rows == nx_sssp(edges, example.ids, "amsterdam")
    rows = dict(parse_tsv(cli_run(capsys, tmp_path, "wcc", url, f"mode={mode}", workers=3)[0], str))
    assert rows == nx_wcc(edges, example.ids)


# ----------------------------------------------------------------------------------------------
# fsspec URLs, damping extremes
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_graph_and_output_at_memory_urls(capsys, tmp_path, mode):
    import fsspec

    rg = RandomGraph(31, 60, 2)
    base = f"memory://mariana-test-graph-jobs-io/{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    fs.pipe(f"{base}/in/graph.e", rg.text.encode())
    for job, extra, value, want in [
        ("wcc", [], str, nx_wcc(rg.edges, rg.ids)),
        ("sssp", [f"source={rg.source(0)}"], float, nx_sssp(rg.edges, rg.ids, rg.source(0))),
    ]:
        out_url = f"{base}/out/{job}/result.tsv"
        argv = ["run", job, "--set", f"graph={base}/in/graph.e", "--set", f"output={out_url}", "--set", f"mode={mode}",
                "--workers", "2", "--runtime", "local", "--run-dir", f"{base}/run-{job}"]
        for s in extra:
            argv += ["--set", s]
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 0, err
        assert dict(parse_tsv(fs.cat(out_url).decode(), value)) == want


def test_output_into_a_new_nested_directory(capsys, tmp_path):
    rg = RandomGraph(32, 40, 2)
    path = rg.write(tmp_path)
    out = tmp_path / "new" / "nested" / "dir" / "labels.tsv"
    rc = main(["run", "wcc", "--set", f"graph={path}", "--set", f"output={out}", "--run-dir", memory_run_dir()])
    assert rc == 0, capsys.readouterr().err
    assert dict(parse_tsv(out.read_text(), str)) == nx_wcc(rg.edges, rg.ids)


@pytest.mark.parametrize("mode", MODES)
def test_damping_zero_gives_uniform_ranks(tmp_path, mode):
    rg = RandomGraph(33, 50, 2)
    path = rg.write(tmp_path)
    rows, _ = api_rows("pagerank", [f"graph={path}", f"mode={mode}", "damping=0", "tol=0", "iterations=3"], 2)
    assert [r for _, r in rows] == [1.0 / len(rg.ids)] * len(rg.ids)


@pytest.mark.parametrize("seed", range(3))
def test_row_counts_count_marked_entries_per_row_with_empty_rows_anywhere(seed):
    from mariana.vertices.graph.block import _row_counts

    rng = np.random.default_rng(seed)
    for _ in range(300):
        k, m = int(rng.integers(1, 30)), int(rng.integers(0, 60))
        indptr = np.concatenate(([0], np.sort(rng.integers(0, m + 1, k - 1)), [m]))
        mask = rng.random(m) < 0.5
        rows = np.repeat(np.arange(k), np.diff(indptr))
        np.testing.assert_array_equal(_row_counts(indptr, mask), np.bincount(rows[mask], minlength=k))
