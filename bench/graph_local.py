#!/usr/bin/env python
"""PageRank on LocalRuntime vs networkx (and a scipy.sparse floor), same graph, same run.

    python bench/graph_local.py                      # 100k vertices, 1M edges, 30 iterations
    python bench/graph_local.py --workers 1 2 4 --repeat 5 --json
    python bench/graph_local.py --profile            # + cProfile top 10 (block mode, 1 worker)
    python bench/graph_local.py --smoke              # 2k vertices, 10k edges, 3 iterations, once: CI smoke run

A seeded random directed graph (numpy ``default_rng(seed)``: ``src``/``dst`` uniform in
``[0, V)``, self-loops and parallel edges kept) is written as an edge-list text file, so the
engine's real parser runs; build (read + parse + block cut) is timed apart from the run. The
``pagerank`` job runs with ``mode=block`` (one numpy block vertex per LocalRuntime partition)
for every ``--workers`` count; networkx's ``pagerank`` and a pure scipy.sparse power iteration
(the floor) run the same 30 updates on the same edges. A smaller graph (``--vertex-mode-sample``
vertices, 10x edges) also runs in ``mode=vertex`` (one engine vertex per graph vertex).

Target (project issue): the engine run within 3x of ``networkx.pagerank``.

Results go to stdout (text, or one JSON object with ``--json``); progress goes to stderr.
"""

from __future__ import annotations

import os

# Fair single-core comparison: pin every BLAS/OpenMP pool to one thread *before* numpy/scipy
# are imported (the pools are sized at import time). The engine's LocalRuntime runs all
# partitions on one Python thread; letting scipy/networkx (or numpy's BLAS) spread over all
# cores would compare one core against many, and thread start-up adds noise on small kernels.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
# OpenBLAS tuning knobs that some environments set (they pick the kernel family and cache
# blocking); printed so two runs can be compared. Unset means OpenBLAS auto-detects.
BLAS_ENV = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}

import argparse  # noqa: E402
import cProfile  # noqa: E402
import gc  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import networkx as nx  # noqa: E402

import mariana  # noqa: E402
from mariana.jobs import BuildContext, get_job, resolve_config  # noqa: E402
from mariana.storage.edgelist import parse_edges  # noqa: E402
from mariana.storage import read_text  # noqa: E402

ALPHA = 0.85
TARGET_RATIO = 3.0
_T0 = time.perf_counter()


def progress(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------
# graph generation
# ------------------------------------------------------------------------------------------
def make_graph(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=m, dtype=np.int64), rng.integers(0, n, size=m, dtype=np.int64)


def write_edge_list(path: str, src: np.ndarray, dst: np.ndarray) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{s} {d}\n" for s, d in zip(src.tolist(), dst.tolist())))


# ------------------------------------------------------------------------------------------
# engine
# ------------------------------------------------------------------------------------------
class GcCounter:
    """Counts garbage-collector passes per generation while active (they cost engine time)."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]

    def _cb(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.counts[info["generation"]] += 1

    def __enter__(self) -> "GcCounter":
        gc.callbacks.append(self._cb)
        return self

    def __exit__(self, *exc: Any) -> None:
        gc.callbacks.remove(self._cb)


def engine_ranks(res: Any, n: int) -> np.ndarray:
    """Ranks indexed by integer vertex id (NaN where the engine has no such vertex)."""
    out = np.full(n, np.nan)
    for vid, value in res.values.items():
        if isinstance(value, dict) and "ids" in value:  # block vertex
            out[np.asarray(value["ids"]).astype(np.int64)] = value["values"]
        else:  # one engine vertex per graph vertex
            out[int(vid)] = value
    return out


def run_engine(path: str, iterations: int, mode: str, workers: int, profile: bool = False) -> dict[str, Any]:
    """Build the pagerank job from the edge-list file and run it on LocalRuntime."""
    job = get_job("pagerank")
    cfg = resolve_config(job, None, [f"graph={path}", f"iterations={iterations}", "tol=0", f"mode={mode}"])
    gc.collect()
    t = time.perf_counter()
    g = job.build(cfg, BuildContext(workers=workers, placement="hash"))
    build_s = time.perf_counter() - t
    prof = cProfile.Profile() if profile else None
    with GcCounter() as gcc:
        t = time.perf_counter()
        if prof is not None:
            prof.enable()
        res = mariana.run(g, workers=workers)
        if prof is not None:
            prof.disable()
        run_s = time.perf_counter() - t
    steps = [m["wall_s"] for m in res.metrics]
    out = {
        "build_s": build_s, "run_s": run_s, "result_wall_s": res.wall_s, "supersteps": res.supersteps,
        "halt_reason": res.halt_reason,
        "engine_computes": sum(m["computed"] for m in res.metrics),
        "engine_messages": sum(m["messages"] for m in res.metrics),
        # run_s minus the supersteps: partitions and (lazy) vertex construction, result collection
        "setup_s": run_s - sum(steps),
        "superstep1_s": steps[1] if len(steps) > 1 else None,  # block mode: fixes the sum order once
        "steady_superstep_s": statistics.median(steps[2:]) if len(steps) > 2 else None,
        "gc_collections": gcc.counts,
        "_res": res,
    }
    if prof is not None:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(10)
        out["profile"] = buf.getvalue()
    return out


# ------------------------------------------------------------------------------------------
# baselines
# ------------------------------------------------------------------------------------------
def nx_pagerank(G: Any, iterations: int) -> tuple[float, np.ndarray | None]:
    """Time ``networkx.pagerank`` for exactly ``iterations`` updates; its ranks in ``list(G)`` order.

    With tol=0 networkx never converges, so it runs all ``max_iter`` updates and raises
    ``PowerIterationFailedConvergence`` right after the loop: the timing covers exactly
    ``iterations`` updates (plus its graph -> sparse matrix conversion, part of the call). The
    ranks of that last update are read back from the raising frame (networkx does not return
    them); None if that is not possible with this networkx version.
    """
    t = time.perf_counter()
    try:
        ranks = nx.pagerank(G, alpha=ALPHA, max_iter=iterations, tol=0.0, weight=None)
    except nx.PowerIterationFailedConvergence as exc:
        dt = time.perf_counter() - t
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        x = tb.tb_frame.f_locals.get("x") if tb is not None else None
        nodelist = tb.tb_frame.f_locals.get("nodelist") if tb is not None else None
        del exc, tb
        if isinstance(x, np.ndarray) and nodelist == list(G):
            return dt, x.copy()
        return dt, None
    dt = time.perf_counter() - t  # converged early (cannot happen with tol=0)
    return dt, np.array([ranks[v] for v in G], dtype=np.float64)


def scipy_floor(present: np.ndarray, src: np.ndarray, dst: np.ndarray, iterations: int,
                repeat: int) -> tuple[float, list[float], np.ndarray]:
    """networkx's update rule as a plain scipy.sparse power iteration.

    Returns (matrix build s, seconds of each of ``repeat`` runs of ``iterations`` updates, ranks).
    """
    t = time.perf_counter()
    n = len(present)
    s, d = np.searchsorted(present, src), np.searchsorted(present, dst)
    outdeg = np.bincount(s, minlength=n).astype(np.float64)
    inv = np.divide(1.0, outdeg, out=np.zeros(n), where=outdeg > 0)
    PT = sp.csr_array((inv[s], (d, s)), shape=(n, n))  # duplicates summed: parallel edges each count
    dangling = np.flatnonzero(outdeg == 0)
    build_s = time.perf_counter() - t
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        x = np.full(n, 1.0 / n)
        for _ in range(iterations):
            x = ALPHA * (PT @ x + x[dangling].sum() / n) + (1.0 - ALPHA) / n
        times.append(time.perf_counter() - t)
    return build_s, times, x


# ------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------
def best(xs: list[float]) -> float:
    return min(xs)


def maxdiff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)))


def maxreldiff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a-b| relative to |b| (ranks are ~1/N, so absolute diffs look tiny)."""
    return float(np.max(np.abs(a - b) / np.abs(b)))


def timed(label: str, fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t
    progress(f"{label}: {dt:.3f}s")
    return dt, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vertices", type=int, default=None, help="graph vertices (default 100000, --smoke 2000)")
    ap.add_argument("--edges", type=int, default=None, help="graph edges (default 1000000, --smoke 10000)")
    ap.add_argument("--iterations", type=int, default=None, help="PageRank updates (default 30, --smoke 3)")
    ap.add_argument("--seed", type=int, default=0, help="numpy default_rng seed (default 0)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                    help="LocalRuntime partition counts to run in block mode (default: 1 2)")
    ap.add_argument("--vertex-mode-sample", type=int, default=None,
                    help="also run mode=vertex on a graph of this many vertices and 10x edges (default 10000, "
                         "--smoke 200; 0: skip)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="timed repetitions of each engine run, networkx call and scipy floor; best is reported "
                         "(default 3, --smoke 1)")
    ap.add_argument("--smoke", action="store_true", help="tiny graph, 3 iterations, 1 repetition: the CI smoke run")
    ap.add_argument("--profile", action="store_true",
                    help="also cProfile one block-mode run on 1 worker and print the top 10 by cumtime")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = ap.parse_args(argv)
    for name, full, smoke in (("vertices", 100_000, 2_000), ("edges", 1_000_000, 10_000), ("iterations", 30, 3),
                              ("vertex_mode_sample", 10_000, 200), ("repeat", 3, 1)):
        if getattr(args, name) is None:
            setattr(args, name, smoke if args.smoke else full)
    if args.vertices < 1 or args.edges < 1 or args.iterations < 1 or args.repeat < 1 or min(args.workers) < 1:
        ap.error("--vertices, --edges, --iterations, --repeat and --workers must be >= 1")

    V, E, it = args.vertices, args.edges, args.iterations
    env = {
        "python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
        "networkx": nx.__version__, "mariana": mariana.__version__, "cpus": os.cpu_count(),
        **{k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
        **{k: (v if v is not None else "(unset)") for k, v in BLAS_ENV.items()},
    }
    progress(f"OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']} OPENBLAS_L2_SIZE={env['OPENBLAS_L2_SIZE']}")
    report: dict[str, Any] = {"config": {"vertices": V, "edges": E, "iterations": it, "seed": args.seed,
                                         "workers": args.workers, "repeat": args.repeat,
                                         "vertex_mode_sample": args.vertex_mode_sample, "damping": ALPHA},
                              "env": env}

    with tempfile.TemporaryDirectory(prefix="mariana-bench-") as tmp:
        # -- graph ---------------------------------------------------------------------------
        src, dst = make_graph(V, E, args.seed)
        present = np.unique(np.concatenate([src, dst]))  # an edge list cannot name isolated vertices
        path = os.path.join(tmp, "graph.e")
        gen_s, _ = timed(f"generate + write {V} vertices / {E} edges", lambda: write_edge_list(path, src, dst))
        parse_s, edges = timed("read + parse (mariana parse_edges)", lambda: parse_edges(read_text(path), path))
        assert edges.n == len(present), (edges.n, len(present))
        del edges
        report["graph"] = {"vertices_in_edge_list": int(len(present)), "isolated_omitted": int(V - len(present)),
                           "write_s": gen_s, "parse_s": parse_s, "file_bytes": os.path.getsize(path)}
        n = len(present)

        # -- engine, block mode --------------------------------------------------------------
        block_runs: dict[int, dict[str, Any]] = {}
        ranks_by_workers: dict[int, np.ndarray] = {}
        for w in args.workers:
            reps = []
            for r in range(args.repeat):
                out = run_engine(path, it, "block", w)
                progress(f"engine block workers={w} rep {r + 1}/{args.repeat}: build {out['build_s']:.3f}s "
                         f"run {out['run_s']:.3f}s ({out['supersteps']} supersteps)")
                res = out.pop("_res")
                if r == 0:
                    ranks_by_workers[w] = engine_ranks(res, V)[present]
                del res
                reps.append(out)
            runs = [o["run_s"] for o in reps]
            builds = [o["build_s"] for o in reps]
            first = reps[0]
            block_runs[w] = {
                "build_s": best(builds), "build_s_all": builds,
                "run_s": best(runs), "run_s_median": statistics.median(runs), "run_s_all": runs,
                "supersteps": first["supersteps"], "halt_reason": first["halt_reason"],
                "engine_computes": first["engine_computes"], "engine_messages": first["engine_messages"],
                "setup_s": min(o["setup_s"] for o in reps),
                "superstep1_s": min(o["superstep1_s"] for o in reps),
                "steady_superstep_s": min(o["steady_superstep_s"] for o in reps),
                "gc_collections": first["gc_collections"],
            }
        gc.collect()

        # -- engine, vertex mode on the sample graph (before networkx: GC cost grows with the heap)
        sample: dict[str, Any] | None = None
        if args.vertex_mode_sample > 0:
            Vs, Es = args.vertex_mode_sample, 10 * args.vertex_mode_sample
            ssrc, sdst = make_graph(Vs, Es, args.seed)
            spresent = np.unique(np.concatenate([ssrc, sdst]))
            spath = os.path.join(tmp, "sample.e")
            write_edge_list(spath, ssrc, sdst)
            vout = run_engine(spath, it, "vertex", 1)
            progress(f"engine vertex mode {Vs} vertices / {Es} edges: build {vout['build_s']:.3f}s "
                     f"run {vout['run_s']:.3f}s")
            vranks = engine_ranks(vout.pop("_res"), Vs)[spresent]
            bout = run_engine(spath, it, "block", 1)
            branks = engine_ranks(bout.pop("_res"), Vs)[spresent]
            Gs = nx.MultiDiGraph()
            Gs.add_nodes_from(spresent.tolist())
            Gs.add_edges_from(zip(ssrc.tolist(), sdst.tolist()))
            _, sx = nx_pagerank(Gs, it)
            del Gs
            sample = {
                "vertices": Vs, "edges": Es, "vertices_in_edge_list": int(len(spresent)),
                "build_s": vout["build_s"], "run_s": vout["run_s"], "supersteps": vout["supersteps"],
                "engine_computes": vout["engine_computes"], "engine_messages": vout["engine_messages"],
                "steady_superstep_s": vout["steady_superstep_s"], "gc_collections": vout["gc_collections"],
                "graph_vertex_updates_per_s": len(spresent) * it / vout["run_s"],
                "graph_messages_per_s": Es * it / vout["run_s"],
                "engine_computes_per_s": vout["engine_computes"] / vout["run_s"],
                "engine_messages_per_s": vout["engine_messages"] / vout["run_s"],
                "block_run_s": bout["run_s"], "vertex_over_block": vout["run_s"] / bout["run_s"],
                "max_abs_diff_vertex_vs_block": maxdiff(vranks, branks),
                "max_abs_diff_vertex_vs_networkx": maxdiff(vranks, sx) if sx is not None else None,
            }
            gc.collect()

        # -- scipy floor ---------------------------------------------------------------------
        sp_build_s, sp_times, sp_x = scipy_floor(present, src, dst, it, args.repeat)
        sp_iter_s = best(sp_times)
        progress(f"scipy.sparse floor: matrix {sp_build_s:.3f}s, {it} iterations {sp_iter_s:.3f}s")

        # -- networkx --------------------------------------------------------------------------
        def nx_build() -> Any:
            G = nx.MultiDiGraph()
            G.add_nodes_from(present.tolist())  # every vertex the edge list names, in id order
            G.add_edges_from(zip(src.tolist(), dst.tolist()))
            return G

        nx_build_s, G = timed("networkx MultiDiGraph construction", nx_build)
        nx_times, nx_x = [], None
        for r in range(args.repeat):
            dt, x = nx_pagerank(G, it)
            nx_times.append(dt)
            nx_x = x if nx_x is None else nx_x
            progress(f"networkx.pagerank rep {r + 1}/{args.repeat}: {dt:.3f}s")
        del G
        gc.collect()

        profile_text = None
        if args.profile:
            pout = run_engine(path, it, "block", 1, profile=True)
            pout.pop("_res")
            profile_text = pout["profile"]
            progress(f"profiled engine run (block, 1 worker): {pout['run_s']:.3f}s under cProfile")

    # -- results ---------------------------------------------------------------------------------
    nx_s = best(nx_times)
    ref = nx_x if nx_x is not None else sp_x
    report["networkx"] = {"graph_build_s": nx_build_s, "pagerank_s": nx_s,
                          "pagerank_s_median": statistics.median(nx_times), "pagerank_s_all": nx_times,
                          "ranks_recovered": nx_x is not None}
    report["scipy_floor"] = {"matrix_build_s": sp_build_s, "iterations_s": sp_iter_s, "iterations_s_all": sp_times,
                             "max_abs_diff_vs_networkx": maxdiff(sp_x, nx_x) if nx_x is not None else None}
    report["block"] = {}
    for w, b in block_runs.items():
        run_s, build_s = b["run_s"], b["build_s"]
        b.update({
            "graph_vertex_updates_per_s": n * it / run_s,
            "graph_messages_per_s": E * it / run_s,
            "engine_computes_per_s": b["engine_computes"] / run_s,
            "engine_messages_per_s": b["engine_messages"] / run_s,
            "run_over_networkx": run_s / nx_s,
            "build_plus_run_over_networkx": (build_s + run_s) / nx_s,
            "run_over_scipy_floor": run_s / sp_iter_s,
            "max_abs_diff_vs_networkx": maxdiff(ranks_by_workers[w], ref),
            "max_rel_diff_vs_networkx": maxreldiff(ranks_by_workers[w], ref),
            "max_abs_diff_vs_workers_1st": maxdiff(ranks_by_workers[w], ranks_by_workers[args.workers[0]]),
            "within_target": run_s / nx_s <= TARGET_RATIO,
        })
        report["block"][str(w)] = b
    report["vertex_mode_sample"] = sample
    report["target"] = {"ratio": TARGET_RATIO,
                        "met": all(b["within_target"] for b in block_runs.values())}
    if profile_text is not None:
        report["profile_block_workers1"] = profile_text

    if args.json:
        print(json.dumps(report, indent=None, default=float))
    else:
        print_text(report, args, nx_x is not None)
    return 0


def print_text(r: dict[str, Any], args: argparse.Namespace, recovered: bool) -> None:
    c, e, g = r["config"], r["env"], r["graph"]
    p = print
    p(f"PageRank, {c['iterations']} iterations, damping {c['damping']}, seed {c['seed']}: "
      f"{c['vertices']:,} vertices ({g['vertices_in_edge_list']:,} in the edge list), {c['edges']:,} edges")
    p(f"python {e['python']}, numpy {e['numpy']}, scipy {e['scipy']}, networkx {e['networkx']}, "
      f"mariana {e['mariana']}, {e['cpus']} cpu(s)")
    p(f"OMP_NUM_THREADS={e['OMP_NUM_THREADS']} OPENBLAS_NUM_THREADS={e['OPENBLAS_NUM_THREADS']} "
      f"MKL_NUM_THREADS={e['MKL_NUM_THREADS']}  OPENBLAS_CORETYPE={e['OPENBLAS_CORETYPE']} "
      f"OPENBLAS_L2_SIZE={e['OPENBLAS_L2_SIZE']}")
    p(f"timings: best of {c['repeat']} (engine runs, networkx calls, scipy floor)")
    p("")
    nxr, fl = r["networkx"], r["scipy_floor"]
    p(f"edge list: write {g['write_s']:.3f}s ({g['file_bytes'] / 1e6:.1f} MB), "
      f"mariana read+parse {g['parse_s']:.3f}s")
    p(f"networkx:  MultiDiGraph construction {nxr['graph_build_s']:.3f}s, "
      f"pagerank({c['iterations']} it) {nxr['pagerank_s']:.3f}s (median {nxr['pagerank_s_median']:.3f}s)")
    p(f"scipy floor: matrix {fl['matrix_build_s']:.3f}s, {c['iterations']} iterations {fl['iterations_s']:.4f}s"
      + (f", max|floor-nx| {fl['max_abs_diff_vs_networkx']:.2e}" if fl["max_abs_diff_vs_networkx"] is not None else ""))
    p("")
    p("LocalRuntime, mode=block:")
    hdr = (f"{'workers':>7} {'build_s':>8} {'run_s':>7} {'median':>7} {'steps':>5} {'vupd/s':>10} {'msg/s':>10} "
           f"{'eng.cmp/s':>9} {'eng.msg/s':>9} {'run/nx':>7} {'(b+r)/nx':>8} {'run/floor':>9} {'max|d| nx':>9}")
    p(hdr)
    for w, b in r["block"].items():
        p(f"{w:>7} {b['build_s']:8.3f} {b['run_s']:7.3f} {b['run_s_median']:7.3f} {b['supersteps']:5d} "
          f"{b['graph_vertex_updates_per_s']:10.3g} {b['graph_messages_per_s']:10.3g} "
          f"{b['engine_computes_per_s']:9.3g} {b['engine_messages_per_s']:9.3g} {b['run_over_networkx']:7.3f} "
          f"{b['build_plus_run_over_networkx']:8.3f} {b['run_over_scipy_floor']:9.1f} "
          f"{b['max_abs_diff_vs_networkx']:9.2e}")
    for w, b in r["block"].items():
        p(f"  workers={w}: engine computes {b['engine_computes']} and messages {b['engine_messages']} "
          f"(block vertices); run = setup {b['setup_s']:.3f}s + superstep 1 (sum order) "
          f"{b['superstep1_s']:.3f}s + steady {b['steady_superstep_s'] * 1e3:.1f} ms/superstep; "
          f"GC passes {b['gc_collections']}")
        p(f"    ranks: max|d| vs networkx {b['max_abs_diff_vs_networkx']:.2e} (relative "
          f"{b['max_rel_diff_vs_networkx']:.2e}), vs workers={c['workers'][0]} "
          f"{b['max_abs_diff_vs_workers_1st']:.1e}")
    if not recovered:
        p("  (networkx ranks could not be read back; rank diffs are against the scipy floor)")
    s = r["vertex_mode_sample"]
    if s is not None:
        p("")
        p(f"LocalRuntime, mode=vertex (1 worker), {s['vertices']:,} vertices / {s['edges']:,} edges:")
        p(f"  build {s['build_s']:.3f}s, run {s['run_s']:.3f}s, {s['supersteps']} supersteps, "
          f"steady {s['steady_superstep_s'] * 1e3:.0f} ms/superstep, GC passes {s['gc_collections']}")
        p(f"  graph vertex updates/s {s['graph_vertex_updates_per_s']:.3g}, graph messages/s "
          f"{s['graph_messages_per_s']:.3g}; engine computes/s {s['engine_computes_per_s']:.3g} "
          f"({s['engine_computes']}), engine messages/s {s['engine_messages_per_s']:.3g} ({s['engine_messages']})")
        nxd = s["max_abs_diff_vertex_vs_networkx"]
        p(f"  block mode on the same graph: run {s['block_run_s']:.3f}s -> vertex/block = "
          f"{s['vertex_over_block']:.0f}x; max|vertex-block| {s['max_abs_diff_vertex_vs_block']:.1e}"
          + (f", max|vertex-nx| {nxd:.2e}" if nxd is not None else ""))
    p("")
    t = r["target"]
    p(f"target: engine run within {t['ratio']:g}x of networkx.pagerank -> {'MET' if t['met'] else 'NOT MET'}")
    if "profile_block_workers1" in r:
        p("")
        p("cProfile, block mode, workers=1, top 10 by cumulative time:")
        p(r["profile_block_workers1"].rstrip())


if __name__ == "__main__":
    sys.exit(main())
