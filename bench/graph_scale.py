#!/usr/bin/env python
"""Whole-process graph jobs on R-MAT graphs: mariana with 1, 2, 4 workers vs networkit, igraph
and a scipy.sparse loop, same graph file, same run (project issue 23).

    python bench/graph_scale.py                       # scales 16 17 18, pagerank wcc sssp, workers 1 2 4
    python bench/graph_scale.py --scales 19 --jobs pagerank --workers 1 2
    python bench/graph_scale.py --quick               # scale 12, seconds
    python bench/graph_scale.py --json
    python bench/graph_scale.py --scales 18 --jobs pagerank --workers 1 2 --peers --formats text npy parquet

Graph: R-MAT with the Graph500 parameters (A=0.57, B=C=0.19, D=0.05), 16 edges per vertex,
seeded (``--seed``), vertex ids permuted (as Graph500 does), written once as a text edge list
``src dst`` (cached under ``--cache``). Every measurement is one whole process (or process tree):
read the file, run, write every vertex's value. PageRank runs 10 iterations; SSSP starts at the
source of the first edge (unit weights); WCC reads edges as undirected.

- mariana: ``mariana run JOB --workers W`` (1 worker: LocalRuntime in one process; more: the
  cluster runtime, one process per worker plus the master), output as parts (``OUT/``). From
  its run directory: the loading supersteps (load time, MB/s per worker) and the algorithm's
  supersteps.
- networkit (one thread), igraph, and a scipy.sparse loop (``scipy.sparse.csgraph`` for WCC and
  SSSP, a CSR power iteration for PageRank): the same file, the same output format.
- Peak memory: the largest VmHWM of any process of the tree (``wait4``'s ``ru_maxrss``: no sampling).
- ``--formats npy parquet``: the same edges also as a binary table, ``.npy`` (rows x 2, int64)
  and Parquet (int64 columns ``src``, ``dst``, pyarrow's defaults: dictionary encoding + snappy,
  row groups of 2^18 rows so that workers have row groups to share); mariana runs each format
  with every worker count, and the report gives load time, load MB/s and file size against the
  text edge list of the same run.

- Each job's memory floor (``--no-floor`` skips it): its peak on a scale-10 graph (16K edges)
  with 1 and W workers, the interpreter, libraries and engine that a second worker cannot split.
  Each W-worker memory ratio is printed next to the best a perfect split could give:
  ``(floor[W] + (peak[1] - floor[1]) / W) / peak[1]``.
- The machine's ceiling (``--no-ceiling`` skips it): W plain numpy processes started together,
  each on its 1/W of the file (parse, CSR by source, 10 sparse sums), against one process on the
  whole file: how far this machine lets the same split go (cores, memory bandwidth, page
  faults) with no engine in the way; each W-worker time ratio is printed next to it.

Ratios printed against peers measured in the same run (the machine is shared: absolute times
move, ratios less). Targets at scale 19 (issue 23): 2 workers <= 0.65x one worker's time and
<= 0.6x its peak memory per process; 1 worker <= 1.0x networkit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

A, B, C = 0.57, 0.19, 0.19
EDGE_FACTOR = 16
PEERS = ("networkit", "igraph", "scipy")
JOBS = ("pagerank", "wcc", "sssp")
ITERATIONS = 10
#: the scale of the graph that measures each job's memory floor (16K edges)
FLOOR_SCALE = 10
ROOT = Path(__file__).resolve().parents[1]


def log(msg: str) -> None:
    print(f"[graph_scale] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# the graph
# ------------------------------------------------------------------------------------------------
def rmat(scale: int, seed: int, edge_factor: int = EDGE_FACTOR) -> tuple[np.ndarray, np.ndarray]:
    """R-MAT edges (Graph500 parameters), ids permuted by a seeded permutation."""
    rng = np.random.default_rng(seed)
    m = edge_factor << scale
    src = np.zeros(m, np.int64)
    dst = np.zeros(m, np.int64)
    for bit in range(scale):
        r = rng.random(m)
        down = r >= A + B  # quadrants c, d
        right = ((r >= A) & (r < A + B)) | (r >= A + B + C)  # quadrants b, d
        src |= down.astype(np.int64) << bit
        dst |= right.astype(np.int64) << bit
    perm = rng.permutation(1 << scale)
    return perm[src], perm[dst]


def graph_file(scale: int, seed: int, cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"rmat-{scale}-seed{seed}.e"
    if not path.exists():
        t = time.perf_counter()
        src, dst = rmat(scale, seed)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            step = 1 << 20
            for a in range(0, len(src), step):
                s, d = src[a:a + step].astype(str), dst[a:a + step].astype(str)
                f.write("\n".join(np.char.add(np.char.add(s, " "), d).tolist()) + "\n")
        tmp.rename(path)
        log(f"wrote {path} ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f}s")
    return path


FORMATS = ("text", "npy", "parquet")
ROW_GROUP = 1 << 18


def table_file(fmt: str, scale: int, seed: int, cache: Path) -> Path:
    """The graph of ``graph_file`` (same edges, same order) as a ``.npy`` or Parquet edge table."""
    path = cache / f"rmat-{scale}-seed{seed}.{fmt}"
    if not path.exists():
        t = time.perf_counter()
        src, dst = rmat(scale, seed)
        tmp = path.with_name(path.name + ".tmp")
        if fmt == "npy":
            with open(tmp, "wb") as f:
                np.save(f, np.stack([src, dst], axis=1))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"src": src, "dst": dst}), tmp, row_group_size=ROW_GROUP)
        tmp.rename(path)
        log(f"wrote {path} ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f}s")
    return path


def first_source(path: Path) -> str:
    with open(path) as f:
        return f.readline().split()[0]


# ------------------------------------------------------------------------------------------------
# measuring a process tree
# ------------------------------------------------------------------------------------------------
#: Runs argv[2:] and writes its exit code and ``wait4``'s ``ru_maxrss`` (KB) to the file argv[1].
#: A child's ru_maxrss includes the memory its parent had when it forked (exec keeps the
#: high-water mark), so the measured command is started by this small interpreter, not by the
#: benchmark's own process (~120 MB once its graphs are made).
_SPAWN = """import os, sys
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def measure(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 1800,
            cwd: Path = ROOT) -> dict[str, Any]:
    """Run ``cmd``; wall time, exit code, and the peak memory of the largest process of its tree:
    ``wait4``'s ``ru_maxrss``, the largest high-water mark (VmHWM) of the process and of every
    descendant it waited for (a cluster's forked workers are). Read once at the end: sampling
    /proc every 20 ms, as this did before, took a core's time that a 2-worker run does not have
    spare (~0.05-0.1 s of each whole run on this 2-core machine) and could miss a short peak."""
    with tempfile.NamedTemporaryFile("r", suffix=".rusage") as report:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _SPAWN, report.name, *cmd], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
        wall = time.perf_counter() - t0
        rc, maxrss_kb = (int(x) for x in (report.read().split() or [str(proc.returncode or -9), "0"]))
    if rc != 0:
        log(f"FAILED ({rc}): {' '.join(cmd)}\n{err[-2000:]}")
    return {"wall_s": wall, "rc": rc, "peak_mb": maxrss_kb * 1024 / 1e6, "stdout": out}


# ------------------------------------------------------------------------------------------------
# mariana
# ------------------------------------------------------------------------------------------------
def run_mariana(job: str, graph: Path, workers: int, tmp: Path, source: str) -> dict[str, Any]:
    from mariana.vertices.graph.block import LOAD_STEPS

    run_dir = tmp / f"run-{job}-{workers}-{time.time_ns()}"
    out = tmp / f"out-{job}-{workers}/"
    cmd = [sys.executable, "-m", "mariana", "run", job, "--set", f"graph={graph}", "--set", f"output={out}",
           "--set", "top=0", "--workers", str(workers), "--run-dir", str(run_dir)]
    if job == "pagerank":
        cmd += ["--set", f"iterations={ITERATIONS}", "--set", "tol=0"]
    if job == "sssp":
        cmd += ["--set", f"source={source}"]
    r = measure(cmd)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()] \
        if (run_dir / "metrics.jsonl").exists() else []
    r["peak_at"] = peak_at(run_dir, LOAD_STEPS)
    load = sum(m["wall_s"] for m in metrics[:LOAD_STEPS])
    parse = metrics[0]["wall_s"] if metrics else 0.0  # superstep 0: list, read and parse the splits
    steps = sum(m["wall_s"] for m in metrics[LOAD_STEPS:])
    mb = graph.stat().st_size / 1e6
    r.update(load_s=load, parse_s=parse, supersteps_s=steps, supersteps=len(metrics),
             load_mb_s_per_worker=(mb / workers / load) if load else None)
    r.pop("stdout", None)
    return r


def peak_at(run_dir: Path, load_steps: int) -> str:
    """Where the largest process's peak came, from the run's trace: a loading superstep's name
    (parse, route, build) or the algorithm's step ("step N"); "?" without a trace."""
    from mariana.errors import MarianaError
    from mariana.trace import load_trace, summary

    try:
        memory = summary(load_trace(str(run_dir)))["memory"]
    except MarianaError:
        return "?"
    s = memory[0]["peak_superstep"] if memory else None
    if not isinstance(s, int):
        return "?"
    return ("parse", "route", "build")[s] if s < load_steps else f"step {s - load_steps}"


def compile_package(folder: Path) -> None:
    """Byte-compile a mariana checkout once, as an installed package is (pip compiles a wheel's
    modules at install; the peers' packages are). An editable install under
    PYTHONDONTWRITEBYTECODE=1 (this machine's environment) never writes them, and every measured
    process compiled ~100 modules from source again: ~70 ms of each whole-process time, ~30 ms
    more where the cluster runtime is imported."""
    import compileall

    if not compileall.compile_dir(str(folder), quiet=1):
        log(f"could not byte-compile {folder}: its modules compile in every measured process")


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeated runs of one configuration: each time its minimum (the least disturbed by other
    load on the machine), the peak memory its maximum."""
    if len(runs) == 1:
        return runs[0]
    least: dict[str, Any] = min(runs, key=lambda r: r.get("load_s") or r["wall_s"])  # (another checkout's: no loads)
    out = dict(least)
    for key in ("wall_s", "parse_s", "supersteps_s"):
        if key in out:
            out[key] = min(r[key] for r in runs)
    top = max(runs, key=lambda r: r["peak_mb"])
    out["peak_mb"], out["peak_at"] = top["peak_mb"], top.get("peak_at", "?")
    return out


def run_before(repo: Path, job: str, graph: Path, workers: int, tmp: Path, source: str) -> dict[str, Any]:
    """The same job with another checkout's mariana (``--before``: e.g. the code before issue 23,
    which reads the whole graph in every process and writes one file)."""
    out = tmp / f"before-{job}-{workers}.tsv"
    cmd = [sys.executable, "-m", "mariana", "run", job, "--set", f"graph={graph}", "--set", f"output={out}",
           "--set", "top=0", "--workers", str(workers), "--run-dir", str(tmp / f"before-run-{time.time_ns()}")]
    if job == "pagerank":
        cmd += ["--set", f"iterations={ITERATIONS}", "--set", "tol=0"]
    if job == "sssp":
        cmd += ["--set", f"source={source}"]
    r = measure(cmd, env=dict(os.environ, PYTHONPATH=str(repo)), cwd=repo)  # `-m` imports from the cwd first
    r.pop("stdout", None)
    return r


# ------------------------------------------------------------------------------------------------
# peers (run in a child: ``--peer NAME``)
# ------------------------------------------------------------------------------------------------
def read_edges(path: str) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as f:
        data = f.read()
    a = np.array(data.split(), dtype=np.int64)  # bytes tokens -> ints
    return a[0::2], a[1::2]


def write_rows(path: str, ids: np.ndarray, values: np.ndarray) -> None:
    with open(path, "w") as f:
        f.write("".join(f"{i}\t{v!r}\n" for i, v in zip(ids.tolist(), values.tolist())))


def peer_scipy(job: str, graph: str, out: str, source: str) -> None:
    import scipy.sparse as sp
    from scipy.sparse import csgraph

    src, dst = read_edges(graph)
    ids, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)
    n, m = len(ids), len(src)
    s, d = inv[:m], inv[m:]
    if job == "pagerank":
        outdeg = np.bincount(s, minlength=n).astype(float)
        mat = sp.csr_matrix((np.ones(m), (d, s)), shape=(n, n))
        x = np.full(n, 1.0 / n)
        dangling = outdeg == 0
        for _ in range(ITERATIONS):
            x = (1 - 0.85) / n + 0.85 * (mat @ (x / np.maximum(outdeg, 1)) + x[dangling].sum() / n)
        vals = x
    elif job == "wcc":
        mat = sp.csr_matrix((np.ones(m), (s, d)), shape=(n, n))
        _, labels = csgraph.connected_components(mat, directed=True, connection="weak")
        vals = labels
    else:
        mat = sp.csr_matrix((np.ones(m), (s, d)), shape=(n, n))
        vals = csgraph.dijkstra(mat, indices=int(np.searchsorted(ids, int(source))), unweighted=True)
    write_rows(out, ids, vals)


def peer_networkit(job: str, graph: str, out: str, source: str) -> None:
    import networkit as nk

    nk.setNumberOfThreads(1)
    reader = nk.graphio.EdgeListReader(" ", 0, directed=True, continuous=False)
    g = reader.read(graph)
    ids_map = reader.getNodeMap()  # original id (str) -> node
    ids = np.array([int(k) for k in ids_map.keys()])
    nodes = np.array(list(ids_map.values()))
    if job == "pagerank":
        pr = nk.centrality.PageRank(g, damp=0.85, tol=0.0)
        pr.maxIterations = ITERATIONS
        pr.norm = nk.centrality.Norm.L1_NORM
        pr.run()
        vals = np.asarray(pr.scores())[nodes]
    elif job == "wcc":
        cc = nk.components.WeaklyConnectedComponents(g)
        cc.run()
        vals = np.asarray(cc.getPartition().getVector())[nodes]
    else:
        bfs = nk.distance.BFS(g, ids_map[source], storePaths=False)
        bfs.run()
        vals = np.asarray(bfs.getDistances())[nodes]
    write_rows(out, ids, vals)


def peer_igraph(job: str, graph: str, out: str, source: str) -> None:
    import igraph as ig

    src, dst = read_edges(graph)
    ids, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)
    m = len(src)
    g = ig.Graph(n=len(ids), edges=np.stack([inv[:m], inv[m:]], axis=1), directed=True)
    if job == "pagerank":
        vals = np.asarray(g.pagerank(damping=0.85))  # PRPACK: solved exactly, not 10 iterations
    elif job == "wcc":
        vals = np.asarray(g.connected_components(mode="weak").membership)
    else:
        vals = np.asarray(g.distances(source=[int(np.searchsorted(ids, int(source)))], mode="out")[0], dtype=float)
    write_rows(out, ids, vals)


def run_peer(peer: str, job: str, graph: Path, tmp: Path, source: str) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, __file__, "--peer", peer, "--job", job, "--graph", str(graph),
           "--out", str(tmp / f"{peer}-{job}.tsv"), "--source", source]
    r = measure(cmd, env=env)
    r.pop("stdout", None)
    return r


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------
# ------------------------------------------------------------------------------------------------
# the machine's ceiling: plain numpy processes doing the same split (no engine, no messages)
# ------------------------------------------------------------------------------------------------
def ceiling_part(graph: str, part: int, parts: int) -> None:
    """One of ``parts`` plain numpy processes: read this process's share of the file (byte range
    moved to line starts), parse it, sort its edges by source into a CSR, and run 10 sparse sums
    over them: the loading work and a PageRank's worth of compute, split as the workers split it."""
    from mariana.memory import avoid_hugepage_stalls

    avoid_hugepage_stalls()  # as a loading worker does
    size = os.path.getsize(graph)
    with open(graph, "rb") as f:
        def line_start(at: int) -> int:
            if at <= 0:
                return 0
            f.seek(at - 1)
            f.readline()  # to the end of the line that holds byte at - 1
            return f.tell()
        lo, hi = line_start(size * part // parts), line_start(size * (part + 1) // parts)
        f.seek(lo)
        data = f.read(hi - lo)
    pairs = np.fromstring(data, dtype=np.int64, sep=" ").reshape(-1, 2)  # noqa: NPY201 - the parser the engine uses
    del data
    lo = int(pairs.min())  # ids to 0..n-1 by a table (the engine's way for dense integer ids)
    table = np.zeros(int(pairs.max()) - lo + 1, np.int64)
    table[pairs.reshape(-1) - lo] = 1
    n = int(table.sum())
    table[table > 0] = np.arange(n)
    src, dst = table[pairs[:, 0] - lo], table[pairs[:, 1] - lo]
    del table
    order = np.argsort(src, kind="stable")
    deg = np.bincount(src, minlength=n)
    rows, cols = src[order], dst[order]
    del order, src, dst
    x = np.full(n, 1.0 / n)
    for _ in range(ITERATIONS):
        x = 0.15 / n + 0.85 * np.bincount(cols, weights=(x / np.maximum(deg, 1))[rows], minlength=n)
    print(json.dumps({"edges": len(pairs), "vertices": n, "checksum": float(x.sum())}))


def measure_ceiling(graph: Path, counts: list[int], repeat: int) -> dict[int, float]:
    """Wall seconds of ``n`` plain numpy processes started together on the ``n`` shares of the file
    (best of ``repeat``), for each ``n`` in ``counts``: how far this machine lets the same work
    split (cores, memory bandwidth, page faults), with no engine in the way."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out: dict[int, float] = {}
    for n in counts:
        best_s = float("inf")
        for _ in range(max(repeat, 1)):
            t0 = time.perf_counter()
            procs = [subprocess.Popen([sys.executable, __file__, "--ceiling-part", str(i), "--ceiling-parts", str(n),
                                       "--graph", str(graph)], env=env, stdout=subprocess.DEVNULL) for i in range(n)]
            codes = [p.wait() for p in procs]
            if any(codes):
                raise RuntimeError(f"ceiling processes failed: {codes}")
            best_s = min(best_s, time.perf_counter() - t0)
        out[n] = best_s
    return out


def measure_floor(job: str, workers: list[int], tmp: Path, cache: Path, seed: int, repeat: int) -> dict[int, float]:
    """The peak MB of the largest process of ``job`` on a tiny graph (scale ``FLOOR_SCALE``), per
    worker count (least of ``repeat``): the interpreter, its libraries and the engine, which a
    second worker does not split. With them, the best a W-worker run can do against one worker
    is ``(floor[W] + (peak[1] - floor[1]) / W) / peak[1]``: every byte above the floor split
    evenly (``split_bound``), the memory counterpart of the machine's time ceiling."""
    graph = graph_file(FLOOR_SCALE, seed, cache)
    source = first_source(graph)
    return {w: min(run_mariana(job, graph, w, tmp, source)["peak_mb"] for _ in range(max(repeat, 1)))
            for w in sorted(set(workers) | {1})}


def split_bound(floor: dict[str, float], one_mb: float, w: int) -> float | None:
    """The memory ratio of ``w`` workers to one if all of one worker's peak above its floor were
    split evenly and nothing else added (``measure_floor``); None without the floors."""
    if str(w) not in floor or "1" not in floor or not one_mb:
        return None
    return (floor[str(w)] + max(one_mb - floor["1"], 0.0) / w) / one_mb


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[16, 17, 18])
    ap.add_argument("--jobs", nargs="+", default=list(JOBS), choices=JOBS)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--peers", nargs="*", default=list(PEERS), choices=PEERS)
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each mariana configuration N times (worker counts, formats and --before interleaved); "
                         "report the minimum times and the largest peak")
    ap.add_argument("--formats", nargs="+", choices=FORMATS,
                    help="mariana also on the same graph as .npy / Parquet tables (text always runs: the baseline; "
                         "default text, with --quick all three)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "mariana-graph-scale")
    ap.add_argument("--quick", "--smoke", action="store_true", help="scale 12, workers 1 2: a smoke test in seconds")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--before", type=Path,
                    help="also run another checkout's mariana (PYTHONPATH=BEFORE), 1 and 2 workers, --repeat times")
    ap.add_argument("--no-ceiling", action="store_true",
                    help="skip the machine's ceiling (plain numpy processes doing the same split)")
    ap.add_argument("--no-floor", action="store_true",
                    help="skip each job's memory floor (its peak on a tiny graph: what a second worker cannot split)")
    ap.add_argument("--ceiling-part", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ceiling-parts", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--graph", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--source", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ceiling_part is not None:
        ceiling_part(args.graph, args.ceiling_part, args.ceiling_parts)
        return 0
    if args.peer:
        {"scipy": peer_scipy, "networkit": peer_networkit, "igraph": peer_igraph}[args.peer](
            args.job, args.graph, args.out, args.source)
        return 0
    if args.quick:
        args.scales, args.workers = [12], [1, 2]
        if args.formats is None:
            args.formats = list(FORMATS)
    available = []
    for p in args.peers:
        try:
            __import__({"scipy": "scipy", "networkit": "networkit", "igraph": "igraph"}[p])
            available.append(p)
        except ImportError:
            log(f"peer {p} is not installed (pip install 'mariana-bsp[bench]'): skipped")
    formats = [f for f in FORMATS if f in (args.formats or ()) and f != "text"]
    if "parquet" in formats:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            log("pyarrow is not installed (pip install 'mariana-bsp[parquet]'): Parquet skipped")
            formats.remove("parquet")
    for repo in [ROOT, *([args.before] if args.before else [])]:
        compile_package(repo / "mariana")
    results: list[dict[str, Any]] = []
    floors: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory(prefix="mariana-graph-scale-") as t:
        tmp = Path(t)
        for scale in args.scales:
            graph = graph_file(scale, args.seed, args.cache)
            source = first_source(graph)
            mb = graph.stat().st_size / 1e6
            tables = {fmt: table_file(fmt, scale, args.seed, args.cache) for fmt in formats}
            ceiling: dict[int, float] = {}
            if not args.no_ceiling:
                log(f"scale {scale}: the machine's ceiling, plain numpy processes on {args.workers} shares")
                ceiling = measure_ceiling(graph, sorted(set(args.workers) | {1}), args.repeat)
                print(f"scale {scale}: machine ceiling, plain numpy processes doing the same split (parse, CSR, "
                      f"10 sparse sums): " + ", ".join(f"{n} x{ceiling[n] / ceiling[1]:.2f}" for n in sorted(ceiling))
                      + f" of 1 ({ceiling[1]:.2f} s)", flush=True)
            for job in args.jobs:
                if not args.no_floor and job not in floors:
                    log(f"{job}: the memory floor, mariana on a scale-{FLOOR_SCALE} graph")
                    floors[job] = measure_floor(job, args.workers, tmp, args.cache, args.seed, args.repeat)
                    print(f"{job}: memory floor (peak on a scale-{FLOOR_SCALE} graph): "
                          + ", ".join(f"{w}w {mb:.0f} MB" for w, mb in floors[job].items()), flush=True)
                row: dict[str, Any] = {"scale": scale, "edges": EDGE_FACTOR << scale, "mb": mb, "job": job,
                                       "ceiling_s": {str(n): t for n, t in ceiling.items()},
                                       "floor_mb": {str(n): v for n, v in floors.get(job, {}).items()}}
                # worker counts, formats and the other checkout interleaved in every repetition: a
                # machine that slows down for a minute slows them alike, not one worker count's runs
                runs: dict[str, list[dict[str, Any]]] = {}
                for rep in range(args.repeat):
                    for w in args.workers:
                        for fmt, path in [("text", graph), *tables.items()]:
                            log(f"scale {scale} {job}: mariana {w} worker(s), {fmt}, run {rep + 1}/{args.repeat}")
                            runs.setdefault(f"mariana-{w}" if fmt == "text" else f"mariana-{w}-{fmt}", []).append(
                                dict(run_mariana(job, path, w, tmp, source), file_mb=path.stat().st_size / 1e6))
                        if args.before and w in (1, 2):
                            log(f"scale {scale} {job}: before ({args.before}) {w} worker(s), run {rep + 1}/{args.repeat}")
                            runs.setdefault(f"before-{w}", []).append(run_before(args.before, job, graph, w, tmp, source))
                row.update({name: best(rs) for name, rs in runs.items()})
                for p in available:
                    log(f"scale {scale} {job}: {p}")
                    row[p] = run_peer(p, job, graph, tmp, source)
                results.append(row)
                report_row(row, args.workers, available, bool(args.before), formats)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


def report_row(row: dict[str, Any], workers: list[int], peers: list[str], before: bool = False,
               formats: list[str] | tuple[str, ...] = ()) -> None:
    one = row.get("mariana-1")
    head = f"scale {row['scale']} ({row['edges'] / 1e6:.1f}M edges, {row['mb']:.0f} MB) {row['job']}"
    print(head, flush=True)
    for w in workers:
        r = row[f"mariana-{w}"]
        line = (f"  mariana {w}w   {r['wall_s']:7.2f} s  peak {r['peak_mb']:7.0f} MB ({r.get('peak_at', '?')})  "
                f"load {r['load_s']:6.2f} s "
                f"({(r['load_mb_s_per_worker'] or 0):5.1f} MB/s/worker"
                + (f", {row['edges'] / 1e6 / w / r['load_s'] if r['load_s'] else 0:4.2f}M edges/s/worker; "
                   f"parse {r['parse_s']:5.2f} s" if formats else "") + f")  supersteps {r['supersteps_s']:6.2f} s")
        if one and w != 1:
            line += f"  time x{r['wall_s'] / one['wall_s']:.2f}  memory x{r['peak_mb'] / one['peak_mb']:.2f} of 1w"
            cs = row.get("ceiling_s", {})
            if str(w) in cs and "1" in cs:
                line += f" (machine ceiling x{cs[str(w)] / cs['1']:.2f})"
            bound = split_bound(row.get("floor_mb", {}), one["peak_mb"], w)
            if bound is not None:
                line += f" (memory split evenly above the floor: x{bound:.2f})"
        print(line, flush=True)
        for fmt in formats:
            t = row[f"mariana-{w}-{fmt}"]
            line = (f"    {fmt:<8} {t['wall_s']:7.2f} s  peak {t['peak_mb']:7.0f} MB  load {t['load_s']:6.2f} s "
                    f"(parse {t['parse_s']:5.2f} s x{t['parse_s'] / max(r['parse_s'], 1e-9):.2f} of text) "
                    f"({(t['load_mb_s_per_worker'] or 0):5.1f} MB/s/worker, "
                    f"{row['edges'] / 1e6 / w / t['load_s'] if t['load_s'] else 0:4.2f}M edges/s/worker)  "
                    f"file {t['file_mb']:5.1f} MB "
                    f"(x{t['file_mb'] / row['mb']:.2f} of text)")
            if r["load_s"] and t["load_s"]:
                line += f"  load x{t['load_s'] / r['load_s']:.2f}  time x{t['wall_s'] / r['wall_s']:.2f} of text"
            print(line, flush=True)
    for w in (1, 2) if before else ():
        r = row[f"before-{w}"]
        line = f"  before {w}w    {r['wall_s']:7.2f} s  peak {r['peak_mb']:7.0f} MB"
        if one:
            line += f"  now / before: time x{row[f'mariana-{w}']['wall_s'] / r['wall_s']:.2f}" \
                    f"  memory x{row[f'mariana-{w}']['peak_mb'] / r['peak_mb']:.2f}" if f"mariana-{w}" in row else ""
        print(line, flush=True)
    for p in peers:
        r = row[p]
        line = f"  {p:<12}{r['wall_s']:7.2f} s  peak {r['peak_mb']:7.0f} MB"
        if one:
            line += f"  mariana 1w / {p}: time x{one['wall_s'] / r['wall_s']:.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
