#!/usr/bin/env python
"""The six LDBC Graphalytics algorithms on the engine vs networkit (1 thread) and igraph.

    python bench/graphalytics.py                 # R-MAT and grid, scale 16, 1 and 2 workers
    python bench/graphalytics.py --scale 18      # the issue's size (minutes on an idle machine)
    python bench/graphalytics.py --quick         # scale 10 smoke run, seconds
    python bench/graphalytics.py --json
    python bench/graphalytics.py --repeat 3           # best of 3 (every block-mode job loads in parts)
    python bench/graphalytics.py --partitioned        # pagerank/sssp/wcc on a plain both-ways edge list, no .v file
    python bench/graphalytics.py --placement range    # the engine's vertices by id ranges instead of a hash

Graphs (written once as Graphalytics files: ``G.e`` each undirected edge once ``src dst weight``,
``G.v`` every vertex, both read with ``directed=false``):
- R-MAT, Graph500 parameters (A=0.57, B=C=0.19, D=0.05, edge factor 16, seeded numpy), self-loops
  and duplicate edges dropped, as Graph500 / Graphalytics' graph500-N data sets;
- a 2-D grid with the same number of vertices (2^scale; side 2^(scale/2)), the high-diameter case
  (BFS and SSSP from a corner need ~2 side supersteps).
Weights are uniform in [0, 1) (seeded). Sources: vertex 0 (the R-MAT hub; the grid corner).

Every measurement runs in a fresh subprocess so its peak memory (max RSS of the process plus its
largest child, i.e. a cluster worker) is its own. Reported per system and algorithm: end-to-end
seconds (read the files, build, run, collect), processing seconds (the run alone: the engine's
supersteps after its loading supersteps, networkit's ``run()``, igraph's call), peak MiB and Graphalytics' EVPS
((V + E) / processing seconds). The engine runs ``mode=block`` on the local runtime for 1 worker
and on the cluster runtime (2 processes) for 2 workers. Ratios are against networkit measured in
the same run. Parameters: PR 10 iterations (tol 0; networkit maxIterations 10, igraph solves
exactly: PRPACK), CDLP 10 iterations (networkit PLP and igraph's label propagation are the
asynchronous variants: same work class, not the same labels).
Target (issue 19): processing time <= 1.0x networkit's with 1 worker.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

ALGORITHMS = ("bfs", "cdlp", "lcc", "pagerank", "sssp", "wcc")
#: what --partitioned runs through the partitioned loader (mariana-format edge lists)
PARTITIONED = ("pagerank", "sssp", "wcc")
ITERATIONS = 10
TARGET = 1.0


# ----------------------------------------------------------------------------------------------
# graphs
# ----------------------------------------------------------------------------------------------
def rmat_edges(scale: int, seed: int, edge_factor: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Graph500 R-MAT (A=0.57, B=C=0.19): undirected, no self-loops, no duplicates, u < v."""
    rng = np.random.default_rng(seed)
    m = edge_factor << scale
    a, b, c = 0.57, 0.19, 0.19
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    for bit in range(scale):
        r = rng.random(m)
        right = (r >= a) & (r < a + b) | (r >= a + b + c)  # quadrants B and D: dst bit set
        down = r >= a + b                                    # quadrants C and D: src bit set
        src |= down.astype(np.int64) << bit
        dst |= right.astype(np.int64) << bit
    perm = rng.permutation(1 << scale)  # Graph500 scrambles the vertex ids
    src, dst = perm[src], perm[dst]
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    keep = lo != hi
    key = np.unique(lo[keep] * (1 << scale) + hi[keep])
    return key >> scale, key & ((1 << scale) - 1)


def grid_edges(scale: int) -> tuple[np.ndarray, np.ndarray]:
    """A side x (2^scale / side) grid, 4-neighbour links, vertex r*cols + c."""
    rows = 1 << (scale // 2)
    cols = (1 << scale) // rows
    idx = np.arange(rows * cols).reshape(rows, cols)
    src = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    dst = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    return src, dst


def write_graph(folder: Path, name: str, n: int, src: np.ndarray, dst: np.ndarray, seed: int,
                both: bool = False) -> dict[str, Any]:
    w = np.round(np.random.default_rng(seed + 1).random(src.size), 6)
    e, v = folder / f"{name}.e", folder / f"{name}.v"
    with open(e, "w") as f:
        f.write("".join(f"{a} {b} {x!r}\n" for a, b, x in zip(src.tolist(), dst.tolist(), w.tolist())))
    v.write_text("".join(f"{i}\n" for i in range(n)))
    graph = {"name": name, "e": str(e), "v": str(v), "vertices": n, "edges": int(src.size), "source": "0"}
    if both:  # each edge in both directions (a directed edge list of the same undirected graph)
        b = folder / f"{name}-both.e"
        with open(b, "w") as f:
            f.write("".join(f"{a} {c} {x!r}\n{c} {a} {x!r}\n" for a, c, x in zip(src.tolist(), dst.tolist(), w.tolist())))
        graph["both"] = str(b)
        graph["vertices_with_edges"] = int(np.unique(np.concatenate((src, dst))).size)
    return graph


# ----------------------------------------------------------------------------------------------
# one measurement (in a subprocess)
# ----------------------------------------------------------------------------------------------
def peak_mib() -> float:
    """This process's peak RSS (VmHWM: ru_maxrss would carry the parent's over exec) plus the
    largest child's (cluster workers; forked, so their figure includes pages shared with us)."""
    own = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                own = int(line.split()[1])
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + child) / 1024.0


def one_mariana(graph: dict[str, Any], algorithm: str, workers: int) -> dict[str, Any]:
    from mariana.jobs.launch import run_job
    from mariana.vertices.graph.block import LOAD_STEPS

    partitioned = graph.get("both") and algorithm in PARTITIONED
    if partitioned:  # --partitioned: both directions listed, read by the partitioned loader
        sets = [f"graph={graph['both']}", "mode=block"]
    else:
        sets = [f"graph={graph['e']}", f"vertices={graph['v']}", "directed=false", "mode=block"]
    if algorithm in ("bfs", "sssp"):
        sets.append(f"source={graph['source']}")
    if algorithm == "pagerank":
        sets += [f"iterations={ITERATIONS}", "tol=0"]
    if algorithm == "cdlp":
        sets.append(f"iterations={ITERATIONS}")
    t0 = time.perf_counter()
    extra: dict[str, Any] = {} if workers == 1 else {"worker_timeout": 300.0}
    result = run_job(algorithm, sets=sets, workers=workers, runtime="local" if workers == 1 else "cluster",
                     trace=False, placement=graph.get("placement", "hash"), **extra)
    from mariana.jobs.graphjob import collect


    rows = collect(result)
    total = time.perf_counter() - t0
    assert len(rows) == (graph["vertices_with_edges"] if partitioned else graph["vertices"])
    # a job that loads in parts spends its first LOAD_STEPS supersteps reading and building the
    # graph (its metrics lines carry the loading aggregates): processing is what comes after
    if any("load_numeric" in m for m in result.metrics):
        proc = sum(m["wall_s"] for m in result.metrics if m["superstep"] >= LOAD_STEPS)
        load = sum(m["wall_s"] for m in result.metrics if m["superstep"] < LOAD_STEPS)
        return {"total_s": total, "proc_s": proc, "load_s": load, "supersteps": result.supersteps, "loaded": True}
    return {"total_s": total, "proc_s": result.wall_s, "supersteps": result.supersteps}


def one_networkit(graph: dict[str, Any], algorithm: str) -> dict[str, Any]:
    import networkit as nk

    nk.setNumberOfThreads(1)
    t0 = time.perf_counter()
    g = nk.graphio.EdgeListReader(" ", 0, "#", continuous=True, directed=False).read(graph["e"])
    if g.numberOfNodes() < graph["vertices"]:
        g.addNodes(graph["vertices"] - g.numberOfNodes())
    s = int(graph["source"])
    t1 = time.perf_counter()
    if algorithm == "bfs":
        algo: Any = nk.distance.BFS(g, s, storePaths=False)
    elif algorithm == "sssp":
        algo = nk.distance.Dijkstra(g, s, storePaths=False)
    elif algorithm == "pagerank":
        algo = nk.centrality.PageRank(g, 0.85, 1e-300)
        algo.maxIterations = ITERATIONS
    elif algorithm == "wcc":
        algo = nk.components.ConnectedComponents(g)
    elif algorithm == "cdlp":
        algo = nk.community.PLP(g, maxIterations=ITERATIONS)
    else:
        algo = nk.centrality.LocalClusteringCoefficient(g, turbo=False)
    algo.run()
    t2 = time.perf_counter()
    _ = algo.getPartition() if algorithm == "cdlp" else (
        algo.getComponents() if algorithm == "wcc" else (algo.getDistances() if algorithm in ("bfs", "sssp")
                                                          else algo.scores()))
    t3 = time.perf_counter()
    return {"total_s": t3 - t0, "proc_s": t2 - t1, "weighted": g.isWeighted()}


def one_igraph(graph: dict[str, Any], algorithm: str) -> dict[str, Any]:
    import igraph as ig

    t0 = time.perf_counter()
    g = ig.Graph.Read_Ncol(graph["e"], names=True, weights="if_present", directed=False)
    if g.vcount() < graph["vertices"]:
        g.add_vertices(graph["vertices"] - g.vcount())
    s = g.vs.find(name=graph["source"]).index
    t1 = time.perf_counter()
    if algorithm == "bfs":
        out: Any = g.distances(source=[s])
    elif algorithm == "sssp":
        out = g.distances(source=[s], weights="weight")
    elif algorithm == "pagerank":
        out = g.pagerank(damping=0.85)
    elif algorithm == "wcc":
        out = g.connected_components(mode="weak").membership
    elif algorithm == "cdlp":
        out = g.community_label_propagation().membership
    else:
        out = g.transitivity_local_undirected(mode="zero")
    t2 = time.perf_counter()
    assert out is not None
    return {"total_s": t2 - t0, "proc_s": t2 - t1}


def run_one(args: argparse.Namespace) -> None:
    graph = json.loads(args.one_graph)
    system, algorithm, workers = args.one
    if system == "mariana":
        rec = one_mariana(graph, algorithm, int(workers))
    elif system == "networkit":
        rec = one_networkit(graph, algorithm)
    else:
        rec = one_igraph(graph, algorithm)
    rec["peak_mib"] = peak_mib()
    print(json.dumps(rec))


def measure(graph: dict[str, Any], system: str, algorithm: str, workers: int, timeout: float,
            inprocess: bool = False) -> dict[str, Any]:
    if inprocess:  # --quick: no subprocess start-up; peak memory is then the whole run's
        rec = (one_mariana(graph, algorithm, workers) if system == "mariana" else
               one_networkit(graph, algorithm) if system == "networkit" else one_igraph(graph, algorithm))
        rec["peak_mib"] = peak_mib()
        rec["evps"] = (graph["vertices"] + graph["edges"]) / rec["proc_s"] if rec["proc_s"] > 0 else float("inf")
        return rec
    cmd = [sys.executable, __file__, "--one", system, algorithm, str(workers), "--one-graph", json.dumps(graph)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f}s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    rec["evps"] = (graph["vertices"] + graph["edges"]) / rec["proc_s"] if rec["proc_s"] > 0 else float("inf")
    return rec


# ----------------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=16)
    ap.add_argument("--quick", "--smoke", action="store_true", help="scale 10, measured in this process: a smoke run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--graphs", nargs="+", default=["rmat", "grid"], choices=["rmat", "grid"])
    ap.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--systems", nargs="+", default=["networkit", "igraph"], choices=["networkit", "igraph"])
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per measurement")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--partitioned", action="store_true",
                    help="engine: pagerank/sssp/wcc read a both-directions edge list without .v file (the "
                         "mariana convention; isolated vertices absent) instead of the Graphalytics files; every "
                         "block-mode run loads in parts either way (processing = the supersteps after loading)")
    ap.add_argument("--placement", choices=["hash", "range"], default="hash",
                    help="where the engine's vertices go (range: strips of the grid's row-major ids, far fewer "
                         "supersteps for bfs/sssp/wcc with 2 workers)")
    ap.add_argument("--repeat", type=int, default=1, help="measure each (system, workers) this many times; keep the best")
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--one-graph", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        run_one(args)
        return 0
    scale = 10 if args.quick else args.scale
    missing = [s for s in args.systems if importlib.util.find_spec(s) is None]
    for system in missing:  # the peers are the `bench` extra: pip install 'mariana-bsp[bench]'
        print(f"# peer {system} is not installed (pip install 'mariana-bsp[bench]'): skipped", file=sys.stderr)
    args.systems = [s for s in args.systems if s not in missing]
    results: dict[str, Any] = {"scale": scale, "graphs": [], "runs": []}
    with tempfile.TemporaryDirectory(prefix="bench-graphalytics-") as tmp:
        folder = Path(tmp)
        for name in args.graphs:
            src, dst = rmat_edges(scale, args.seed) if name == "rmat" else grid_edges(scale)
            graph = write_graph(folder, f"{name}-{scale}", 1 << scale, src, dst, args.seed, both=args.partitioned)
            graph["placement"] = args.placement
            results["graphs"].append(graph)
            print(f"# {graph['name']}: {graph['vertices']} vertices, {graph['edges']} edges", file=sys.stderr)
            for algorithm in args.algorithms:
                base = None
                for system, workers in [*((s, 1) for s in args.systems), *(("mariana", w) for w in args.workers)]:
                    recs = [measure(graph, system, algorithm, workers, args.timeout, inprocess=args.quick)
                            for _ in range(max(args.repeat, 1))]
                    ok = [r for r in recs if "error" not in r]
                    rec = min(ok, key=lambda r: r["proc_s"]) if ok else recs[0]
                    rec.update(graph=graph["name"], algorithm=algorithm, system=system, workers=workers)
                    if system == "networkit" and "error" not in rec:
                        base = rec
                    if base and "error" not in rec:
                        rec["proc_vs_networkit"] = rec["proc_s"] / base["proc_s"]
                        rec["total_vs_networkit"] = rec["total_s"] / base["total_s"]
                    results["runs"].append(rec)
                    print(f"#   {algorithm:<8} {system:<9} w={workers} {_row(rec)}", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print(report(results))
    return 0


def _row(rec: dict[str, Any]) -> str:
    if "error" in rec:
        return f"error: {rec['error']}"
    ratio = f"  proc x{rec['proc_vs_networkit']:.2f} of networkit" if "proc_vs_networkit" in rec else ""
    return (f"total {rec['total_s']:8.3f}s  proc {rec['proc_s']:8.4f}s  peak {rec['peak_mib']:7.0f} MiB  "
            f"EVPS {rec['evps']:10.3g}{ratio}")


def report(results: dict[str, Any]) -> str:
    lines = [f"Graphalytics benchmark, scale {results['scale']} (machine load affects absolute figures; "
             "ratios are against networkit in the same run)"]
    for g in results["graphs"]:
        lines.append(f"\n{g['name']}: V={g['vertices']} E={g['edges']}")
        lines.append(f"{'algorithm':<9} {'system':<10} {'w':>1}  {'total s':>8} {'proc s':>9} {'peak MiB':>8} "
                     f"{'EVPS':>10} {'proc/nk':>8} {'target':>7}")
        for r in results["runs"]:
            if r["graph"] != g["name"]:
                continue
            if "error" in r:
                lines.append(f"{r['algorithm']:<9} {r['system']:<10} {r['workers']:>1}  {r['error']}")
                continue
            ratio = r.get("proc_vs_networkit")
            met = "" if r["system"] != "mariana" or r["workers"] != 1 or ratio is None else (
                "met" if ratio <= TARGET else "MISSED")
            lines.append(f"{r['algorithm']:<9} {r['system']:<10} {r['workers']:>1}  {r['total_s']:8.3f} {r['proc_s']:9.4f} "
                         f"{r['peak_mib']:8.0f} {r['evps']:10.3g} {'' if ratio is None else f'{ratio:8.2f}'} {met:>7}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
