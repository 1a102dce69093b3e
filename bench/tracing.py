"""Tracing overhead: wall time with superstep traces on vs off, in the same run.

PageRank (block mode, 100k vertices / 1M edges, 30 iterations) and dnn-dp (digits, the default
MLP and a 1024-1024 one) on LocalRuntime, run alternately ``--rounds`` times each way; the figure is the ratio of the
median wall times (target <= 1.03). Tracing on means: per-worker records with phase times and
per-peer counts, NaN/Inf scans of vertex state and messages, and buffered writes to RUN/trace.

    python bench/tracing.py [--rounds 5] [--json]
    python bench/tracing.py --smoke      # 2k vertices / 10k edges, short dnn-dp runs, 1 round: CI smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # one core each way: the comparison is about the engine, not BLAS

import numpy as np  # noqa: E402

from mariana.jobs.launch import run_job  # noqa: E402
from mariana.storage import RunDir  # noqa: E402


def write_graph(path: str, n: int, m: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    with open(path, "w") as f:
        f.write("".join(f"{a} {b}\n" for a, b in zip(src.tolist(), dst.tolist())))


def timed(job: str, sets: list[str], trace: bool, tmp: str, tag: str) -> float:
    run_dir = RunDir(os.path.join(tmp, f"{tag}-{time.perf_counter_ns()}"))
    res = run_job(job, sets=sets, run_dir=run_dir, trace=trace)
    return res.wall_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=None, help="default 5 (--smoke 1)")
    ap.add_argument("--vertices", type=int, default=None, help="default 100000 (--smoke 2000)")
    ap.add_argument("--edges", type=int, default=None, help="default 1000000 (--smoke 10000)")
    ap.add_argument("--smoke", action="store_true", help="tiny graph, short dnn-dp runs, 1 round: the CI smoke run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.rounds = args.rounds or (1 if args.smoke else 5)
    args.vertices = args.vertices or (2_000 if args.smoke else 100_000)
    args.edges = args.edges or (10_000 if args.smoke else 1_000_000)
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')} "
          f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', '(unset)')}", file=sys.stderr)
    out: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="mariana-tracing-") as tmp:
        graph = os.path.join(tmp, "g.e")
        write_graph(graph, args.vertices, args.edges)
        jobs = {"pagerank": ("pagerank", [f"graph={graph}", f"iterations={3 if args.smoke else 30}", "tol=0"]),
                # the default MLP on digits: ~0.5 ms supersteps, so this is the per-superstep cost
                "dnn-dp": ("dnn-dp", ["steps=5"] if args.smoke else ["epochs=5"]),
                "dnn-dp-1024": ("dnn-dp", ['model=["dense:1024:relu", "dense:1024:relu", "dense:10"]',
                                           f"steps={3 if args.smoke else 60}"])}
        for name, (job, sets) in jobs.items():
            times: dict[bool, list[float]] = {True: [], False: []}
            timed(job, sets, True, tmp, "warm")
            for r in range(args.rounds):
                for trace in (False, True) if r % 2 == 0 else (True, False):
                    times[trace].append(timed(job, sets, trace, tmp, name))
                print(f"{name} round {r + 1}: off {times[False][-1]:.3f}s on {times[True][-1]:.3f}s", file=sys.stderr)
            on, off = statistics.median(times[True]), statistics.median(times[False])
            out[name] = {"off_s": off, "on_s": on, "ratio": on / off, "target_met": on / off <= 1.03}
    if args.json:
        print(json.dumps(out))
    else:
        for name, row in out.items():
            print(f"{name:11} tracing off {row['off_s']:.3f}s  on {row['on_s']:.3f}s  ratio {row['ratio']:.3f} "
                  f"(target <= 1.03: {'met' if row['target_met'] else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
