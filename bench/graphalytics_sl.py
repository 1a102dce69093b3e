#!/usr/bin/env python
"""LDBC Graphalytics classes S to L (graph500-22, 23, 24) on this machine: mariana against
SuiteSparse:GraphBLAS, networkit and a scipy CSR loop, all six algorithms (issue 49).

    python bench/graphalytics_sl.py                          # scale 22, all six, 1 and 2 workers, all peers
    python bench/graphalytics_sl.py --scales 23 --algorithms pagerank wcc
    python bench/graphalytics_sl.py --scales 24 --workers 2 --peers graphblas --threads 2
    python bench/graphalytics_sl.py --blas-env set unset     # also with OPENBLAS_CORETYPE/L2_SIZE unset
    python bench/graphalytics_sl.py --smoke                  # scale 10, seconds
    python bench/graphalytics_sl.py --json

Graphs (made once, cached under ``--cache``: ``$MARIANA_BENCH_CACHE`` or ``bench/out/graphalytics``):
Graph500 R-MAT with Graphalytics' graph500 parameters (A=0.57, B=C=0.19, D=0.05, edge factor 16,
2^scale ids scrambled by a seeded permutation), generated in seeded chunks; then as Graphalytics
made graph500-N: self loops dropped, each undirected edge kept once (u < v, duplicates removed)
and only the vertices with an edge listed (so V < 2^scale). Weights: uniform multiples of 1e-6
in (0, 1), seeded (SSSP). Written as Graphalytics files ``G.e`` (``src dst weight``, each edge once,
``directed=false``) and ``G.v``, and as ``G.npy`` (rows x 3 float64: src, dst, weight), written
under a temporary name and renamed. mariana reads ``--formats`` (text, npy or both); the peers
read ``G.npy`` (their own text readers would dominate: issue 49 measured networkit's reader).

Every measurement is one fresh process tree: peak memory per process is the largest ``ru_maxrss``
of the tree (``wait4``), a watchdog kills a tree above ``--max-gb`` (summed RSS) and ``--timeout``
bounds each run. Reported as Graphalytics does: load seconds (mariana: its loading supersteps;
peers: reading G.npy and building their structure), processing seconds (mariana: the supersteps
after loading; peers: the algorithm call), EVPS ((V + E) / processing seconds), peak MB per
process and bytes per edge (peak x processes / E). Every output is checked against the scipy
loop's (GraphBLAS' for LCC) as Graphalytics validates: exact for BFS, WCC (the same partition)
and CDLP, SSSP within 1e-12 relative (path sums), PageRank and LCC within 1e-4 relative.
networkit's PLP is asynchronous label propagation (timed, not validated); scipy has no masked
sparse product, so LCC runs on GraphBLAS, networkit and mariana only.

Parameters as Graphalytics' graph500 runs: PageRank 10 iterations, damping 0.85; CDLP 10
iterations (synchronous, most frequent label, ties to the smallest); BFS and SSSP from the vertex
of largest degree (every run the same). Peers run with OMP/BLAS threads = 1 and their own thread
count (``--threads``); mariana's workers with OMP/BLAS threads = 1. The machine's ceiling for a
W-way split: W plain numpy processes, each parsing its 1/W of G.e, building a CSR both ways and
running 10 sparse sums, against one process on the whole file, in the same run.
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

ALGORITHMS = ("bfs", "pagerank", "wcc", "sssp", "cdlp", "lcc")
PEERS = ("scipy", "graphblas", "networkit")
ITERATIONS = 10
DAMPING = 0.85
A, B, C = 0.57, 0.19, 0.19
EDGE_FACTOR = 16
CHUNK = 1 << 22
ROOT = Path(__file__).resolve().parents[1]
BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
BFS_UNREACHABLE = 9223372036854775807


def log(msg: str) -> None:
    print(f"[graphalytics_sl {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# the graphs
# ------------------------------------------------------------------------------------------------
def graph500_keys(scale: int, seed: int) -> np.ndarray:
    """The sorted unique keys ``lo << scale | hi`` (lo < hi) of a Graph500 R-MAT edge list, made in
    seeded chunks of CHUNK edges (memory: a few chunks plus the keys, not 10x the edge list)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(1 << scale)  # Graph500 scrambles the vertex ids
    m = EDGE_FACTOR << scale
    keys = []
    for at in range(0, m, CHUNK):
        k = min(CHUNK, m - at)
        src = np.zeros(k, np.int64)
        dst = np.zeros(k, np.int64)
        for bit in range(scale):
            r = rng.random(k)
            src |= (r >= A + B).astype(np.int64) << bit                             # quadrants C, D
            dst |= (((r >= A) & (r < A + B)) | (r >= A + B + C)).astype(np.int64) << bit  # B, D
        src, dst = perm[src], perm[dst]
        lo, hi = np.minimum(src, dst), np.maximum(src, dst)
        keep = lo != hi
        keys.append(np.unique((lo[keep] << scale) | hi[keep]))
    out = np.concatenate(keys)
    del keys
    out.sort()  # np.unique's result, sorted in place (it would hold two more copies at scale 24)
    first = np.empty(out.size, bool)
    first[:1] = True
    np.not_equal(out[1:], out[:-1], out=first[1:])
    return out[first]


def _digits(x: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-aligned ASCII digits of non-negative ints (rows x width) and the mask of the digits
    to keep (no leading zeros; "0" keeps one)."""
    out = np.empty((x.size, width), np.uint8)
    v = x.astype(np.int64).copy()
    for col in range(width - 1, -1, -1):
        out[:, col] = 48 + v % 10
        v //= 10
    ndig = np.maximum(1, np.floor(np.log10(np.maximum(x, 1))).astype(np.int64) + 1)
    keep = np.arange(width)[None, :] >= (width - ndig)[:, None]
    return out, keep


def write_lines(f: Any, columns: list[np.ndarray], micro: np.ndarray | None = None) -> None:
    """Write integer columns separated by spaces (and a last ``0.dddddd`` column from integer
    millionths) as text lines, formatted with numpy in pieces (Python's formatting would take
    minutes for 10^8 lines)."""
    n = columns[0].size
    width = max(1, len(str(int(max((c.max() for c in columns if c.size), default=0)))))
    for at in range(0, n, 1 << 20):
        parts, masks = [], []
        rows = min(1 << 20, n - at)
        for i, c in enumerate(columns):
            d, k = _digits(c[at:at + rows], width)
            parts.append(d)
            masks.append(k)
            sep = np.full((rows, 1), 32 if (i + 1 < len(columns) or micro is not None) else 10, np.uint8)
            parts.append(sep)
            masks.append(np.ones((rows, 1), bool))
        if micro is not None:
            d, _ = _digits(micro[at:at + rows], 6)
            parts += [np.tile(np.frombuffer(b"0.", np.uint8), (rows, 1)), d, np.full((rows, 1), 10, np.uint8)]
            masks += [np.ones((rows, 8), bool), np.ones((rows, 1), bool)]
        f.write(np.hstack(parts)[np.hstack(masks)].tobytes())


def make_graph(scale: int, seed: int, cache: Path) -> dict[str, Any]:
    """The cached graph500-``scale`` files (made once): paths, V, E and the BFS/SSSP source."""
    name = f"graph500-{scale}-seed{seed}"
    cache = cache.resolve()  # the paths it records are absolute (a run from another tree reads them)
    meta_path = cache / f"{name}.json"
    if meta_path.exists():
        return dict(json.loads(meta_path.read_text()))
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    dst = graph500_keys(scale, seed)
    src = dst >> scale
    dst &= (1 << scale) - 1  # in place: the keys become the destinations
    micro = np.random.default_rng(seed + 1).integers(1, 1_000_000, src.size)
    # the degrees without concatenating src and dst (2 x 4.3 GB more at scale 24, then a sort)
    deg = np.bincount(src, minlength=1 << scale) + np.bincount(dst, minlength=1 << scale)
    ids = np.flatnonzero(deg)
    source = int(np.argmax(deg))
    files = {"e": cache / f"{name}.e", "v": cache / f"{name}.v", "npy": cache / f"{name}.npy"}
    tmp = {k: p.with_name(p.name + ".tmp") for k, p in files.items()}
    with open(tmp["e"], "wb") as f:
        write_lines(f, [src, dst], micro)
    with open(tmp["v"], "wb") as f:
        write_lines(f, [ids])
    table = np.lib.format.open_memmap(tmp["npy"], mode="w+", dtype=np.float64, shape=(src.size, 3))
    for at in range(0, src.size, CHUNK):  # in pieces: no whole-graph float temporaries
        piece = slice(at, at + CHUNK)
        table[piece, 0], table[piece, 1], table[piece, 2] = src[piece], dst[piece], micro[piece] / 1e6
    table.flush()
    del table
    for k in files:
        tmp[k].rename(files[k])
    meta = {"name": name, "scale": scale, "seed": seed, "vertices": int(ids.size), "edges": int(src.size),
            "source": source, **{k: str(p) for k, p in files.items()},
            "text_mb": files["e"].stat().st_size / 1e6, "npy_mb": files["npy"].stat().st_size / 1e6}
    meta_path.write_text(json.dumps(meta))
    log(f"made {name}: V={meta['vertices']} E={meta['edges']} in {time.perf_counter() - t0:.0f} s "
        f"({meta['text_mb']:.0f} MB text, {meta['npy_mb']:.0f} MB npy)")
    return meta


# ------------------------------------------------------------------------------------------------
# measuring a process tree: wait4's peak, a memory watchdog, a timeout
# ------------------------------------------------------------------------------------------------
#: Runs argv[2:] and writes its exit code, ru_maxrss (KB, the largest process of the tree) and CPU
#: seconds (the tree's) to argv[1]; started by this small interpreter so that the high-water mark
#: is not ours.
_SPAWN = """import os, sys
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}")
"""


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (``/proc/stat``, all cores)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def _session_rss_gb(sid: int) -> float:
    """The summed RSS of every process in session ``sid`` (GB)."""
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:
                total += int(fields[21])
        except (OSError, IndexError, ValueError):
            continue
    return total * os.sysconf("SC_PAGE_SIZE") / 1e9


def measure(cmd: list[str], env: dict[str, str], timeout: float, max_gb: float, cwd: Path = ROOT) -> dict[str, Any]:
    """Run ``cmd`` as its own session: wall seconds, exit code, peak MB of its largest process,
    its stdout; killed (and said why) past ``timeout`` seconds or ``max_gb`` summed RSS."""
    with tempfile.NamedTemporaryFile("r", suffix=".rusage") as report:
        t0, busy0, load0 = time.perf_counter(), busy_cpu_s(), os.getloadavg()[0]
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _SPAWN, report.name, *cmd], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                                start_new_session=True)
        why, top = "", 0.0
        while True:
            try:
                out, err = proc.communicate(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                rss = _session_rss_gb(proc.pid)
                top = max(top, rss)
                if rss > max_gb or time.perf_counter() - t0 > timeout:
                    why = (f"killed at {rss:.1f} GB RSS (cap {max_gb:g} GB)" if rss > max_gb
                           else f"timeout after {timeout:.0f} s")
                    os.killpg(proc.pid, 9)
                    out, err = proc.communicate()
                    break
        try:
            os.killpg(proc.pid, 9)  # anything the tree left behind
        except ProcessLookupError:
            pass
        wall, busy = time.perf_counter() - t0, busy_cpu_s() - busy0
        fields = report.read().split()
    rc, maxrss_kb, cpu = ((int(fields[0]), int(fields[1]), float(fields[2])) if len(fields) == 3
                          else (proc.returncode or -9, 0, busy))
    # others_cores: the cores other work on the machine held on average while this ran (the
    # machine's busy CPU seconds less the tree's own, per wall second); load_before: the 1-minute
    # load average as it started (it lags, and counts this bench's previous run)
    rec = {"wall_s": wall, "rc": rc, "peak_mb": maxrss_kb * 1024 / 1e6, "tree_rss_gb_sampled": top, "stdout": out,
           "cpu_s": cpu, "others_cores": max(0.0, busy - cpu) / wall, "load_before": load0}
    if why or rc:
        rec["error"] = why or ((err.strip().splitlines() or [f"exit {rc}"])[-1])[:300]
    return rec


def child_env(threads: int, blas: str) -> dict[str, str]:
    env = dict(os.environ, **{v: str(threads) for v in THREAD_VARS})
    if blas == "unset":
        for v in BLAS_VARS:
            env.pop(v, None)
    return env


# ------------------------------------------------------------------------------------------------
# mariana (whole process: ``mariana run``)
# ------------------------------------------------------------------------------------------------
def run_mariana(g: dict[str, Any], algorithm: str, workers: int, fmt: str, tmp: Path, args: argparse.Namespace,
                blas: str) -> dict[str, Any]:
    from mariana.vertices.graph.block import LOAD_STEPS

    tag = f"{algorithm}-{workers}-{fmt}-{time.time_ns()}"
    run_dir, out = tmp / f"run-{tag}", tmp / f"out-{tag}"
    sets = [f"graph={g['e'] if fmt == 'text' else g['npy']}", f"vertices={g['v']}", "directed=false",
            f"output={out}/", "format=graphalytics"]
    if algorithm in ("bfs", "sssp"):
        sets.append(f"source={g['source']}")
    if algorithm in ("pagerank", "cdlp"):
        sets.append(f"iterations={ITERATIONS}")
    if algorithm == "pagerank":
        sets.append("tol=0")
    cmd = [sys.executable, "-m", "mariana", "run", algorithm, "--workers", str(workers), "--run-dir", str(run_dir),
           "--no-trace", *(x for s in sets for x in ("--set", s))]
    if workers > 1:
        cmd += ["--worker-timeout", str(args.timeout)]
    env = child_env(1, blas)
    src = args.mariana_src or ROOT
    if args.mariana_src:  # another copy of the engine (`-m` imports from the cwd first)
        env["PYTHONPATH"] = str(src)
    r = measure(cmd, env, args.timeout, args.max_gb, cwd=src)
    metrics_file = run_dir / "metrics.jsonl"
    metrics = [json.loads(line) for line in metrics_file.read_text().splitlines()] if metrics_file.exists() else []
    r["load_s"] = sum(m["wall_s"] for m in metrics if m["superstep"] < LOAD_STEPS)
    r["proc_s"] = sum(m["wall_s"] for m in metrics if m["superstep"] >= LOAD_STEPS)
    r["supersteps"] = len(metrics)
    if "error" not in r:
        r["values"] = read_output(out, g)
    subprocess.run(["rm", "-rf", str(run_dir), str(out)], check=False)
    return r


def read_output(folder: Path, g: dict[str, Any]) -> np.ndarray:
    """A Graphalytics output (``vertex value`` lines, in parts) as values in vertex-id order."""
    data = b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.startswith(("_", ".")))
    tok = np.array(data.split())
    ids = tok[0::2].astype(np.int64)
    vals = tok[1::2].astype(np.float64)  # "Infinity" and 9223372036854775807 included
    order = np.argsort(ids)
    if ids.size != g["vertices"]:
        raise RuntimeError(f"{folder}: {ids.size} output lines for {g['vertices']} vertices")
    return vals[order]


# ------------------------------------------------------------------------------------------------
# peers (in a child: ``--peer NAME``); each reads G.npy, ids to 0..V-1 in id order
# ------------------------------------------------------------------------------------------------
def load_table(g: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    t = np.load(g["npy"], mmap_mode="r")
    raw_src, raw_dst = t[:, 0].astype(np.int64), t[:, 1].astype(np.int64)
    w = np.ascontiguousarray(t[:, 2])
    ids = np.unique(np.concatenate((raw_src, raw_dst)))
    return ids, np.searchsorted(ids, raw_src), np.searchsorted(ids, raw_dst), w


def cdlp_step(rows: np.ndarray, labels_of_cols: np.ndarray, n: int, current: np.ndarray) -> np.ndarray:
    """One synchronous CDLP step from every (vertex, neighbour's label) pair: each vertex's most
    frequent label, ties to the smallest (a vertex with no neighbour keeps its label)."""
    key = rows * n + labels_of_cols
    key.sort()
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    counts = np.diff(np.r_[starts, key.size])
    urow, ulab = key[starts] // n, key[starts] % n
    order = np.lexsort((ulab, -counts, urow))  # per row: largest count first, then smallest label
    first = order[np.r_[True, urow[order][1:] != urow[order][:-1]]]
    out = current.copy()
    out[urow[first]] = ulab[first]
    return out


def peer_scipy(g: dict[str, Any], algorithm: str, threads: int) -> tuple[float, float, np.ndarray]:
    import scipy.sparse as sp
    from scipy.sparse import csgraph

    t0 = time.perf_counter()
    ids, s, d, w = load_table(g)
    n = ids.size
    rows, cols = np.concatenate((s, d)), np.concatenate((d, s))
    weights = np.concatenate((w, w)) if algorithm == "sssp" else np.ones(rows.size)
    mat = sp.csr_matrix((weights, (rows, cols)), shape=(n, n))
    src = int(np.searchsorted(ids, g["source"]))
    t1 = time.perf_counter()
    if algorithm == "bfs":
        vals = csgraph.shortest_path(mat, indices=src, unweighted=True, method="D")
        vals[np.isinf(vals)] = BFS_UNREACHABLE
    elif algorithm == "sssp":
        vals = csgraph.dijkstra(mat, indices=src)
    elif algorithm == "wcc":
        _, vals = csgraph.connected_components(mat, directed=False)
    elif algorithm == "pagerank":
        deg = np.diff(mat.indptr).astype(np.float64)
        dangling = deg == 0
        x = np.full(n, 1.0 / n)
        for _ in range(ITERATIONS):
            x = (1 - DAMPING) / n + DAMPING * (mat @ (x / np.maximum(deg, 1)) + x[dangling].sum() / n)
        vals = x
    elif algorithm == "cdlp":
        coo_rows = np.repeat(np.arange(n), np.diff(mat.indptr))
        labels = ids.copy()  # labels are vertex ids, as Graphalytics'
        rank = np.arange(n)  # work on label ranks (ids are sorted): same order, dense
        for _ in range(ITERATIONS):
            rank = cdlp_step(coo_rows, rank[mat.indices], n, rank)
        vals = labels[rank]
    else:
        raise ValueError("scipy has no masked sparse product: no LCC")
    return t1 - t0, time.perf_counter() - t1, np.asarray(vals, np.float64)


def peer_graphblas(g: dict[str, Any], algorithm: str, threads: int) -> tuple[float, float, np.ndarray]:
    import graphblas as gb
    import graphblas_algorithms as ga
    from graphblas import binary, monoid, semiring

    gb.ss.config["nthreads"] = threads
    t0 = time.perf_counter()
    ids, s, d, w = load_table(g)
    n = ids.size
    rows, cols = np.concatenate((s, d)), np.concatenate((d, s))
    vals_in = np.concatenate((w, w)) if algorithm == "sssp" else np.ones(rows.size)
    del s, d, w
    mat = gb.Matrix.from_coo(rows, cols, vals_in, nrows=n, ncols=n, dtype=gb.dtypes.FP64)
    del rows, cols, vals_in
    src = int(np.searchsorted(ids, g["source"]))
    t1 = time.perf_counter()
    if algorithm == "bfs":
        level = gb.Vector(gb.dtypes.INT64, n)
        frontier = gb.Vector(bool, n)
        frontier[src] = True
        depth = 0
        while frontier.nvals:
            level(mask=frontier.S) << depth
            frontier = semiring.any_pair(frontier @ mat).new(mask=~level.S)
            depth += 1
        out = np.full(n, float(BFS_UNREACHABLE))
        i, v = level.to_coo()
        out[i] = v
    elif algorithm in ("sssp", "wcc"):
        # Bellman-Ford (min_plus) / min-label propagation (min_first) over the changed vertices
        if algorithm == "sssp":
            best = gb.Vector(gb.dtypes.FP64, n)
            best[src] = 0.0
            ring = semiring.min_plus
        else:
            best = gb.Vector.from_coo(np.arange(n), np.arange(n, dtype=np.float64), size=n)
            ring = semiring.min_first
        frontier = best.dup()
        while frontier.nvals:
            cand = ring(frontier @ mat).new()
            lower = binary.lt(cand & best).new()  # where both exist: the candidate is smaller
            frontier = gb.Vector(gb.dtypes.FP64, n)
            frontier(mask=~best.S) << cand
            frontier(mask=lower.V) << cand
            best(mask=frontier.S) << frontier
        out = np.full(n, np.inf)
        i, v = best.to_coo()
        out[i] = v
    elif algorithm == "pagerank":
        deg = mat.reduce_rowwise(monoid.plus).new().to_dense(fill_value=0.0)
        inv = gb.Vector.from_dense(1.0 / np.maximum(deg, 1.0))
        dangling = np.flatnonzero(deg == 0)
        x = gb.Vector.from_dense(np.full(n, 1.0 / n))
        for _ in range(ITERATIONS):
            share = binary.times(x & inv).new()
            y = semiring.plus_first(share @ mat).new()  # (symmetric: A^T = A)
            lost = float(x.to_dense(fill_value=0.0)[dangling].sum()) / n if dangling.size else 0.0
            x = gb.Vector.from_dense(np.full(n, (1 - DAMPING) / n + DAMPING * lost))
            x(accum=binary.plus) << y.apply(binary.times, right=DAMPING)
        out = x.to_dense(fill_value=0.0)
    elif algorithm == "cdlp":
        r, c, _ = mat.to_coo()
        r, c = r.astype(np.int64), c.astype(np.int64)
        rank = np.arange(n)
        for _ in range(ITERATIONS):  # LAGraph's CDLP: the per-row mode by sorting the label pairs
            rank = cdlp_step(r, rank[c], n, rank)
        out = ids[rank].astype(np.float64)
    else:
        out = ga.clustering(ga.Graph(mat)).to_dense(fill_value=0.0)
    return t1 - t0, time.perf_counter() - t1, np.asarray(out, np.float64)


def peer_networkit(g: dict[str, Any], algorithm: str, threads: int) -> tuple[float, float, np.ndarray]:
    import networkit as nk

    nk.setNumberOfThreads(threads)
    t0 = time.perf_counter()
    ids, s, d, w = load_table(g)
    n = ids.size
    weighted = algorithm == "sssp"
    graph = nk.GraphFromCoo((w, (s, d)) if weighted else (s, d), n=n, weighted=weighted, directed=False)
    del s, d, w
    src = int(np.searchsorted(ids, g["source"]))
    t1 = time.perf_counter()
    if algorithm == "bfs":
        algo: Any = nk.distance.BFS(graph, src, storePaths=False)
    elif algorithm == "sssp":
        algo = nk.distance.Dijkstra(graph, src, storePaths=False)
    elif algorithm == "wcc":
        algo = nk.components.ConnectedComponents(graph)
    elif algorithm == "pagerank":
        algo = nk.centrality.PageRank(graph, DAMPING, 1e-300)
        algo.maxIterations = ITERATIONS
    elif algorithm == "cdlp":
        algo = nk.community.PLP(graph, maxIterations=ITERATIONS)
    else:
        algo = nk.centrality.LocalClusteringCoefficient(graph, turbo=False)
    algo.run()
    t2 = time.perf_counter()
    if algorithm in ("bfs", "sssp"):
        out = np.asarray(algo.getDistances(), np.float64)
        out[out > 1e300] = BFS_UNREACHABLE if algorithm == "bfs" else np.inf
    elif algorithm == "wcc":
        out = np.asarray(algo.getPartition().getVector(), np.float64)
    elif algorithm == "cdlp":
        out = np.asarray(algo.getPartition().getVector(), np.float64)
    else:
        out = np.asarray(algo.scores(), np.float64)
    return t1 - t0, t2 - t1, out


def run_peer_child(args: argparse.Namespace) -> None:
    g = json.loads(args.peer_graph)
    fn = {"scipy": peer_scipy, "graphblas": peer_graphblas, "networkit": peer_networkit}[args.peer]
    load, proc, vals = fn(g, args.peer_algorithm, args.peer_threads)
    np.save(args.peer_out, vals)
    print(json.dumps({"load_s": load, "proc_s": proc}))


def run_peer(g: dict[str, Any], peer: str, algorithm: str, threads: int, tmp: Path, args: argparse.Namespace,
             blas: str) -> dict[str, Any]:
    out = tmp / f"{peer}-{algorithm}-{threads}-{time.time_ns()}.npy"
    cmd = [sys.executable, __file__, "--peer", peer, "--peer-algorithm", algorithm, "--peer-threads", str(threads),
           "--peer-graph", json.dumps(g), "--peer-out", str(out)]
    r = measure(cmd, child_env(1, blas), args.timeout, args.max_gb)
    if "error" not in r:
        r.update(json.loads(r["stdout"].strip().splitlines()[-1]))
        r["values"] = np.load(out)
        out.unlink()
    return r


# ------------------------------------------------------------------------------------------------
# validation (Graphalytics' rules) and the machine's ceiling
# ------------------------------------------------------------------------------------------------
def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two labelings group the vertices alike (WCC: components, names aside)."""
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    pairs = np.unique(ia.astype(np.int64) * (ib.max() + 1) + ib)
    return bool(pairs.size == ia.max() + 1 == ib.max() + 1)


def validate(algorithm: str, ref: np.ndarray, got: np.ndarray) -> str:
    """'ok' or what differs, as Graphalytics checks an output against the reference."""
    if ref.shape != got.shape:
        return f"{got.size} values for {ref.size}"
    if algorithm == "wcc":
        return "ok" if same_partition(ref, got) else "other partition"
    if algorithm in ("bfs", "cdlp"):
        bad = int((ref != got).sum())
        return "ok" if bad == 0 else f"{bad} differ"
    eps = 1e-12 if algorithm == "sssp" else 1e-4
    both_inf = np.isinf(ref) & np.isinf(got)
    with np.errstate(invalid="ignore"):  # inf - inf where both are unreachable: set to 0 below
        rel = np.abs(got - ref) / np.maximum(np.abs(ref), 1e-300)
    rel[both_inf] = 0
    bad = int((rel > eps).sum())
    return "ok" if bad == 0 else f"{bad} beyond {eps:g} (max rel {float(rel.max()):.2g})"


def ceiling_part(g: dict[str, Any], part: int, parts: int) -> None:
    """One of ``parts`` plain numpy processes: parse its 1/parts of G.e (byte range moved to line
    starts), CSR both ways, 10 sparse sums: the loading and a PageRank's worth, with no engine."""
    path = g["e"]
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        def line_start(at: int) -> int:
            if at <= 0:
                return 0
            f.seek(at - 1)
            f.readline()
            return f.tell()
        lo, hi = line_start(size * part // parts), line_start(size * (part + 1) // parts)
        f.seek(lo)
        data = f.read(hi - lo)
    t = np.fromstring(data, dtype=np.float64, sep=" ").reshape(-1, 3)  # noqa: NPY201 - the engine's parser
    del data
    s, d = t[:, 0].astype(np.int64), t[:, 1].astype(np.int64)
    del t
    rows, cols = np.concatenate((s, d)), np.concatenate((d, s))
    order = np.argsort(rows, kind="stable")
    rows, cols = rows[order], cols[order]
    n = 1 << g["scale"]
    deg = np.bincount(rows, minlength=n)
    x = np.full(n, 1.0 / n)
    for _ in range(ITERATIONS):
        x = 0.15 / n + 0.85 * np.bincount(cols, weights=(x / np.maximum(deg, 1))[rows], minlength=n)
    print(json.dumps({"edges": int(s.size), "checksum": float(x.sum())}))


def measure_ceiling(g: dict[str, Any], counts: list[int], blas: str) -> dict[int, float]:
    """Wall seconds of n plain numpy processes started together on the n shares of G.e."""
    out: dict[int, float] = {}
    for n in counts:
        t0 = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, __file__, "--ceiling-part", str(i), "--ceiling-parts", str(n),
                                   "--peer-graph", json.dumps(g)], env=child_env(1, blas),
                                  stdout=subprocess.DEVNULL) for i in range(n)]
        if any(p.wait() for p in procs):
            raise RuntimeError("a ceiling process failed")
        out[n] = time.perf_counter() - t0
    return out


# ------------------------------------------------------------------------------------------------
# the run and its report
# ------------------------------------------------------------------------------------------------
def row_text(r: dict[str, Any]) -> str:
    who = f"{r['system']:<9} {('w' if r['system'] == 'mariana' else 't')}{r['par']} {r.get('fmt', ''):<4}"
    if "error" in r:
        return f"{r['algorithm']:<8} {who}  FAILED: {r['error']}  (peak {r['peak_mb']:.0f} MB)"
    ratios = "".join(f" {r[k]:6.2f}" if k in r else "      -" for k in ("vs_scipy", "vs_graphblas2"))
    return (f"{r['algorithm']:<8} {who} {r['load_s']:8.2f} {r['proc_s']:8.2f} {r['wall_s']:8.1f} {r['evps']:9.3g} "
            f"{r['peak_mb']:8.0f} {r['bytes_per_edge']:7.1f} {ratios} {r.get('others_cores', 0):5.2f}  {r['valid']}")


HEADER = (f"{'algo':<8} {'system':<9} {'par':<2} {'fmt':<4} {'load s':>8} {'proc s':>8} {'total s':>8} {'EVPS':>9} "
          f"{'MB/proc':>8} {'B/edge':>7} {'/scipy':>6} {'/gb t2':>6} {'other':>5}  valid")


def one_algorithm(g: dict[str, Any], algorithm: str, args: argparse.Namespace, blas: str, tmp: Path) -> list[dict[str, Any]]:
    """Every system on one graph and algorithm, validated against the reference, ratios filled."""
    recs: list[dict[str, Any]] = []
    for w in args.workers:
        for fmt in args.formats:
            log(f"{g['name']} {algorithm}: mariana {w} worker(s), {fmt}")
            recs.append(dict(run_mariana(g, algorithm, w, fmt, tmp, args, blas), system="mariana", par=w, fmt=fmt))
    for peer in args.peers:
        if peer == "scipy" and algorithm == "lcc":
            continue
        for t in ([1] if peer == "scipy" else args.threads):
            log(f"{g['name']} {algorithm}: {peer} {t} thread(s)")
            recs.append(dict(run_peer(g, peer, algorithm, t, tmp, args, blas), system=peer, par=t, fmt="npy"))
    ok = [r for r in recs if "error" not in r]
    ref = next((r for name in ("scipy", "graphblas", "mariana") for r in ok if r["system"] == name), None)
    base = {name: next((r for r in ok if r["system"] == name and r["par"] == par), None)
            for name, par in (("scipy", 1), ("graphblas", 2))}
    for r in recs:
        r.update(algorithm=algorithm, graph=g["name"], scale=g["scale"], blas=blas, load_avg=os.getloadavg()[0])
        if "error" in r:
            continue
        procs = r["par"] if r["system"] == "mariana" else 1
        r["evps"] = (g["vertices"] + g["edges"]) / r["proc_s"] if r["proc_s"] > 0 else float("inf")
        r["bytes_per_edge"] = r["peak_mb"] * 1e6 * procs / g["edges"]
        if r["system"] == "networkit" and algorithm == "cdlp":
            r["valid"] = "not checked (PLP: asynchronous)"
        else:
            r["valid"] = "reference" if r is ref else validate(algorithm, ref["values"], r["values"]) if ref else "?"
        if base["scipy"] is not None:
            r["vs_scipy"] = r["proc_s"] / base["scipy"]["proc_s"]
        if base["graphblas"] is not None:
            r["vs_graphblas2"] = r["proc_s"] / base["graphblas"]["proc_s"]
    for r in recs:
        r.pop("values", None)
        r.pop("stdout", None)
        print(row_text(r), flush=True)
        if args.record:
            with open(args.record, "a") as f:
                f.write(json.dumps(r) + "\n")
    return recs


def summary(recs: list[dict[str, Any]], ceiling: dict[int, float]) -> list[str]:
    """Per algorithm: mariana 2 workers against 1 (time, total, memory per process) and the ceiling."""
    lines = []
    for algorithm in dict.fromkeys(r["algorithm"] for r in recs):
        m = {(r["par"], r["fmt"]): r for r in recs if r["algorithm"] == algorithm and r["system"] == "mariana"
             and "error" not in r}
        for fmt in dict.fromkeys(f for _, f in m):
            one, two = m.get((1, fmt)), m.get((2, fmt))
            if one and two:
                line = (f"  {algorithm:<8} {fmt:<4} 2w/1w: proc x{two['proc_s'] / one['proc_s']:.2f}, "
                        f"total x{two['wall_s'] / one['wall_s']:.2f}, memory per process x{two['peak_mb'] / one['peak_mb']:.2f}")
                if 1 in ceiling and 2 in ceiling:
                    line += f" (ceiling x{ceiling[2] / ceiling[1]:.2f})"
                lines.append(line)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", type=int, nargs="+", default=[22])
    ap.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--formats", nargs="+", default=["text"], choices=["text", "npy"],
                    help="what mariana reads (the peers read G.npy)")
    ap.add_argument("--peers", nargs="*", default=list(PEERS), choices=PEERS)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="GraphBLAS' and networkit's threads")
    ap.add_argument("--blas-env", nargs="+", default=["set"], choices=["set", "unset"],
                    help="run with OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE as set, and/or with both unset")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("MARIANA_BENCH_CACHE") or ROOT / "bench" / "out" / "graphalytics"))
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds per run")
    ap.add_argument("--max-gb", type=float, default=14.0, help="kill a run whose process tree holds more (GB RSS)")
    ap.add_argument("--no-ceiling", action="store_true")
    ap.add_argument("--mariana-src", type=Path,
                    help="run the engine from this copy (e.g. `git archive HEAD mariana | tar -x -C DIR`): a "
                         "checkout that others edit while it runs")
    ap.add_argument("--record", type=Path, help="append every record to this JSON-lines file as it comes")
    ap.add_argument("--smoke", action="store_true", help="scale 10, text and npy, seconds")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    ap.add_argument("--peer-algorithm", help=argparse.SUPPRESS)
    ap.add_argument("--peer-threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--peer-graph", help=argparse.SUPPRESS)
    ap.add_argument("--peer-out", help=argparse.SUPPRESS)
    ap.add_argument("--ceiling-part", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ceiling-parts", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer:
        run_peer_child(args)
        return 0
    if args.ceiling_part is not None:
        ceiling_part(json.loads(args.peer_graph), args.ceiling_part, args.ceiling_parts)
        return 0
    if args.mariana_src:  # this process reads LOAD_STEPS from the same copy the runs use
        sys.path.insert(0, str(args.mariana_src.resolve()))
    scratch = tempfile.TemporaryDirectory(prefix="graphalytics-sl-")
    if args.smoke:
        args.scales, args.formats, args.cache = [10], ["text", "npy"], Path(scratch.name) / "cache"
    import importlib.util

    for p in [p for p in args.peers if importlib.util.find_spec(p) is None]:
        log(f"peer {p} is not installed (pip install -e '.[bench]'): skipped")
        args.peers.remove(p)
    from graph_scale import compile_package

    compile_package((args.mariana_src or ROOT) / "mariana")
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
                               "blas_vars": {v: os.environ.get(v) for v in BLAS_VARS}, "runs": [], "ceilings": []}
    with scratch:
        tmp = Path(scratch.name)
        for blas in args.blas_env:
            for scale in args.scales:
                g = make_graph(scale, args.seed, args.cache)
                ceiling = {} if args.no_ceiling else measure_ceiling(g, sorted(set(args.workers) | {1}), blas)
                results["ceilings"].append({"scale": scale, "blas": blas, **{str(k): v for k, v in ceiling.items()}})
                print(f"\n{g['name']}: V={g['vertices']} E={g['edges']} source={g['source']}; BLAS vars {blas}; "
                      f"load average {os.getloadavg()[0]:.2f}; ceiling: "
                      + (", ".join(f"{n} x{ceiling[n] / ceiling[1]:.2f}" for n in sorted(ceiling)) + f" of 1 "
                         f"({ceiling[1]:.1f} s)" if ceiling else "not measured"), flush=True)
                print(HEADER, flush=True)
                recs: list[dict[str, Any]] = []
                for algorithm in args.algorithms:
                    recs += one_algorithm(g, algorithm, args, blas, tmp)
                print("\n".join(summary(recs, ceiling)), flush=True)
                results["runs"] += recs
    if args.json:
        print(json.dumps(results, indent=1))
    failed = [r for r in results["runs"] if "error" in r or r.get("valid", "ok") not in ("ok", "reference")
              and not r["valid"].startswith("not checked")]
    return 1 if args.smoke and failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
