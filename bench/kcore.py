#!/usr/bin/env python
"""k-core (core numbers) written by a user, both ways: vertex mode and block mode vs networkx.

    python bench/kcore.py                        # R-MAT scale 13 (~100K undirected edges), best of 3
    python bench/kcore.py --scale 14 --workers 1 2 4 --repeat 5 --json
    python bench/kcore.py --runtime cluster      # more than one worker: one process each
    python bench/kcore.py --smoke                # scale 8, once: CI smoke run

The job is the guide's worked example, ``examples/kcore.py`` (docs/block-centric.md): ``CoreVertex``
(one engine vertex per graph vertex, Montresor's h-index estimates) and ``CoreBlock`` (one
block vertex per worker peeling its whole fragment with numpy). Graph: Graph500 R-MAT
(A=0.57, B=C=0.19, D=0.05, 16 edges per vertex, ids permuted, seeded numpy), written once as a
text edge list; self-loops and repeated edges stay in the file and count for neither side.

- mariana: ``build`` + ``mariana.run`` of the job, from the file: the whole job (read, parse,
  build the vertices or load the blocks, run); and its algorithm's supersteps alone (block mode:
  after the loading supersteps; vertex mode: every superstep, the vertices built before).
- networkx: ``core_number`` on a ``networkx.Graph`` of the same edges (self-loops removed), and
  that plus building the graph from the parsed edges.

Every result is checked against networkx's. Ratios are against ``networkx.core_number`` measured
in the same run (the machine is shared: absolute times move, ratios less). BLAS/OpenMP pools are
pinned to one thread: the local runtime runs every partition on one Python thread.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy is imported: the pools are sized then

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402

import importlib.util  # noqa: E402

import mariana  # noqa: E402
from mariana.jobs import BuildContext, resolve_config  # noqa: E402
from mariana.jobs.graphjob import collect  # noqa: E402
from mariana.partitioner.fragment import LOAD_STEPS  # noqa: E402


def _example() -> Any:
    """The guide's module, ``examples/kcore.py``, by its path (this file has its name)."""
    path = Path(__file__).resolve().parent.parent / "examples" / "kcore.py"
    spec = importlib.util.spec_from_file_location("kcore", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kcore = _example()

_T0 = time.perf_counter()


def progress(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def rmat(scale: int, seed: int, edge_factor: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """R-MAT edges (Graph500 parameters), ids permuted by a seeded permutation; loops and repeats kept."""
    rng = np.random.default_rng(seed)
    m = edge_factor << scale
    src, dst = np.zeros(m, dtype=np.int64), np.zeros(m, dtype=np.int64)
    for bit in range(scale):
        r = rng.random(m)
        src |= (r >= 0.76).astype(np.int64) << bit  # quadrants C and D
        dst |= (((r >= 0.57) & (r < 0.76)) | (r >= 0.95)).astype(np.int64) << bit  # quadrants B and D
    perm = rng.permutation(1 << scale)
    return perm[src], perm[dst]


def run_mariana(path: str, mode: str, workers: int, runtime: str) -> tuple[dict[str, Any], dict[str, int]]:
    """One run of the example job from the file: (timings, core numbers)."""
    config = resolve_config(kcore.JOB, {"graph": path, "mode": mode})
    gc.collect()
    t = time.perf_counter()
    g = kcore.JOB.build(config, BuildContext(workers=workers))
    result = mariana.run(g, workers=workers, runtime=runtime)
    total = time.perf_counter() - t
    steps = [m["wall_s"] for m in result.metrics]
    algo = sum(steps[LOAD_STEPS:]) if mode == "block" else sum(steps)
    return {"total_s": total, "algorithm_s": algo, "supersteps": result.supersteps}, dict(collect(result))


def run_networkx(src: np.ndarray, dst: np.ndarray) -> tuple[dict[str, Any], dict[str, int]]:
    t = time.perf_counter()
    G = nx.Graph()
    G.add_edges_from(zip(map(str, src.tolist()), map(str, dst.tolist())))
    G.remove_edges_from(nx.selfloop_edges(G))
    built = time.perf_counter() - t
    gc.collect()
    t = time.perf_counter()
    cores = nx.core_number(G)
    algo = time.perf_counter() - t
    return {"total_s": built + algo, "algorithm_s": algo, "edges": G.number_of_edges(),
            "vertices": G.number_of_nodes(), "max_core": max(cores.values(), default=0)}, cores


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {**runs[0], "total_s": min(r["total_s"] for r in runs), "algorithm_s": min(r["algorithm_s"] for r in runs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=13, help="R-MAT scale: 2^scale vertices (default 13)")
    ap.add_argument("--edge-factor", type=int, default=16, help="edges per vertex before dedup (default 16)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts (default 1 2)")
    ap.add_argument("--runtime", default="local", choices=("local", "cluster"),
                    help="runtime for more than one worker (default local: one process)")
    ap.add_argument("--vertex-workers", type=int, nargs="+", default=[1], help="worker counts in vertex mode (default 1)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each, best kept (default 3)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the table")
    ap.add_argument("--smoke", action="store_true", help="scale 8, one run of each: CI smoke run")
    args = ap.parse_args(argv)
    if args.smoke:
        args.scale, args.repeat = 8, 1
    src, dst = rmat(args.scale, args.seed, args.edge_factor)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kcore-bench-") as tmp:
        path = str(Path(tmp) / "rmat.txt")
        Path(path).write_text("".join(f"{a} {b}\n" for a, b in zip(src.tolist(), dst.tolist())))
        progress(f"R-MAT scale {args.scale}: {len(src)} edge lines in {path}")
        nx_runs = []
        for _ in range(args.repeat):
            r, want = run_networkx(src, dst)
            nx_runs.append(r)
        ref = best(nx_runs)
        progress(f"networkx: {ref['edges']} edges, {ref['vertices']} vertices, largest core {ref['max_core']}")
        cases = [("vertex", w) for w in args.vertex_workers] + [("block", w) for w in args.workers]
        for mode, w in cases:
            runtime = args.runtime if w > 1 else "local"
            runs = []
            for _ in range(args.repeat):
                r, got = run_mariana(path, mode, w, runtime)
                if got != want:
                    wrong = sorted(v for v in want if got.get(v) != want[v])
                    raise SystemExit(f"{mode} mode, {w} worker(s): {len(wrong)} core numbers differ from networkx's "
                                     f"(first: vertex {wrong[0]!r}: {got.get(wrong[0])} vs {want[wrong[0]]})")
                runs.append(r)
            row = {"mode": mode, "workers": w, "runtime": runtime, **best(runs)}
            row["vs_networkx"] = row["total_s"] / ref["algorithm_s"]
            rows.append(row)
            progress(f"{mode} mode, {w} worker(s): {row['total_s']:.3f} s")
    out = {"scale": args.scale, "seed": args.seed, "edges": ref["edges"], "vertices": ref["vertices"],
           "max_core": ref["max_core"], "repeat": args.repeat, "networkx": ref, "mariana": rows,
           "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "networkx": nx.__version__,
                       "load_average": os.getloadavg()[0]}}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"k-core on R-MAT scale {args.scale}: {ref['edges']} undirected edges, {ref['vertices']} vertices, "
          f"largest core {ref['max_core']}; best of {args.repeat}; every result equal to networkx's")
    print(f"{'':34} {'whole job s':>12} {'algorithm s':>12} {'supersteps':>10} {'x nx core_number':>17}")
    print(f"{'networkx core_number':34} {ref['total_s']:12.3f} {ref['algorithm_s']:12.3f} {'':>10} {1.0:17.2f}")
    for r in rows:
        name = f"mariana {r['mode']}, {r['workers']} worker{'s' if r['workers'] > 1 else ''}"
        name += f" ({r['runtime']})" if r["workers"] > 1 else ""
        print(f"{name:34} {r['total_s']:12.3f} {r['algorithm_s']:12.3f} {r['supersteps']:10d} {r['vs_networkx']:17.2f}")
    vertex = [r for r in rows if r["mode"] == "vertex" and r["workers"] == 1]
    block = [r for r in rows if r["mode"] == "block" and r["workers"] == 1]
    if vertex and block:
        print(f"block mode vs vertex mode, 1 worker, whole job: {vertex[0]['total_s'] / block[0]['total_s']:.1f}x faster")
    print("(whole job: read the file, build or load, run; networkx's: build the Graph from parsed edges, core_number;"
          " ratios: whole job over networkx's core_number alone)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
