#!/usr/bin/env python
"""BLAS threads of the workers ``mariana run --workers N`` starts: superstep time of dnn-dp.

    python bench/blas_threads.py                 # 150 steps of the default dnn-dp on 2 workers
    python bench/blas_threads.py --steps 300 --workers 2 --json
    python bench/blas_threads.py --smoke         # 3 steps, 1 round, environment as is: CI smoke run, no figures

Runs ``run_job("dnn-dp", steps=S, workers=N, runtime="cluster")`` in child processes: with the
BLAS/OpenMP thread variables unset (the launcher then gives each worker ``cores // N`` threads),
with all of them set to the core count (what the launcher gave each worker before the fix, when
it sized the pool for a lone process) and with ``OPENBLAS_NUM_THREADS=1`` (the reference),
interleaved, ``--rounds`` times each; it prints the median of the summed superstep ``wall_s``. Each variant runs
with the environment as it is and with ``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` removed
(when set). Progress goes to stderr, results to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from common import BLAS_VARS, THREAD_VARS

CHILD = """
import json, sys, time
from mariana.jobs.launch import run_job
steps, workers = int(sys.argv[1]), int(sys.argv[2])
t = time.perf_counter()
res = run_job("dnn-dp", sets=[f"steps={steps}"], workers=workers, runtime="cluster")
print(json.dumps({"supersteps_s": sum(m["wall_s"] for m in res.metrics), "process_s": time.perf_counter() - t}))
"""


def child(steps: int, workers: int, variant: str, unset_openblas_env: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    if variant == "one_thread":
        env["OPENBLAS_NUM_THREADS"] = "1"
    elif variant == "all_cores":
        env.update({v: str(len(os.sched_getaffinity(0))) for v in THREAD_VARS})
    if unset_openblas_env:
        for var in BLAS_VARS:
            env.pop(var, None)
    out = subprocess.run([sys.executable, "-c", CHILD, str(steps), str(workers)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=None, help="dnn-dp steps (default 150, --smoke 3)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=None, help="default 3 (--smoke 1)")
    ap.add_argument("--smoke", action="store_true", help="3 steps, 1 round, environment as is: the CI smoke run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.steps = args.steps or (3 if args.smoke else 150)
    args.rounds = args.rounds or (1 if args.smoke else 3)
    envs = [False] + ([True] if any(os.environ.get(v) for v in BLAS_VARS) and not args.smoke else [])
    result = {"cores": len(os.sched_getaffinity(0)), "steps": args.steps, "workers": args.workers,
              "openblas_env": {v: os.environ.get(v) for v in BLAS_VARS},
              "load_start": os.getloadavg()[0], "variants": {}}
    for unset in envs:
        runs: dict[str, list[float]] = {"launcher": [], "all_cores": [], "one_thread": []}
        for r in range(args.rounds):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for name in order:
                runs[name].append(child(args.steps, args.workers, name, unset)["supersteps_s"])
                print(f"[{'unset' if unset else 'as is'} round {r + 1}] {name}: {runs[name][-1]:.3f} s",
                      file=sys.stderr)
        med = {k: statistics.median(v) for k, v in runs.items()}
        result["variants"]["openblas env unset" if unset else "env as is"] = {
            "launcher_s": med["launcher"], "all_cores_s": med["all_cores"], "one_thread_s": med["one_thread"],
            "ratio": med["launcher"] / med["one_thread"], "before_ratio": med["all_cores"] / med["one_thread"],
            "rounds": runs}
    result["load_end"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.steps} dnn-dp steps on {args.workers} cluster workers, {result['cores']} cores, "
          f"load {result['load_start']:.2f} -> {result['load_end']:.2f}")
    for name, v in result["variants"].items():
        print(f"  {name:20} launcher {v['launcher_s']:.3f} s | all cores each (before the fix) {v['all_cores_s']:.3f} s"
              f" | 1 thread {v['one_thread_s']:.3f} s; launcher / 1 thread {v['ratio']:.2f}, "
              f"before / 1 thread {v['before_ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
