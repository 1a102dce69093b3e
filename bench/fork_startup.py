#!/usr/bin/env python
"""Forked vs spawned local workers: whole-process seconds of ``mariana run dnn-dp --workers 2``.

    python bench/fork_startup.py --data /tmp/syn.npz            # 5 interleaved rounds, 784-2048x3-10, 60 steps
    python bench/fork_startup.py --data /tmp/syn.npz --rounds 3 --steps 20 --json
    python bench/fork_startup.py --smoke                         # CI smoke run: tiny data and model, 1 round

Each round runs the job once with forked workers (the default) and once with ``--no-fork`` (fresh
interpreters), with ``--one`` also once with ``--workers 1`` (one process), reversing the order
every other round, one BLAS/OpenMP thread per process
(``OMP/OPENBLAS/MKL_NUM_THREADS=1``), both with the environment as it is and with
``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` removed (when set). Figures per run: ``process_s``
(start to exit), ``first_s`` (start to the master's first superstep, from RUN/trace/master.jsonl),
``outside_s`` (process_s minus the supersteps' ``wall_s``). Medians go to stdout with the load
average; progress to stderr. The data set is any ``.npz`` with ``x`` (N, 784) float32 and ``y``;
``--smoke`` (no figures) writes a tiny one itself when ``--data`` is not given and runs 784-64x3-10, 3
steps, 1 round, the environment as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from common import THREAD_VARS, first_superstep, variant_envs
MODEL = '["dense:2048:relu","dense:2048:relu","dense:2048:relu","dense:10"]'
SMOKE_MODEL = '["dense:64:relu","dense:64:relu","dense:64:relu","dense:10"]'


def write_smoke_data(path: str, n: int = 1024) -> str:
    """A tiny synthetic data set for ``--smoke`` (x float32 (n, 784), y in [0, 10), seeded)."""
    import numpy as np

    rng = np.random.default_rng(0)
    np.savez(path, x=rng.standard_normal((n, 784), dtype=np.float32), y=rng.integers(0, 10, n))
    return path


def run_once(env: dict[str, str], data: str, steps: int, fork: bool, tmp: str, workers: int = 2,
             model: str = MODEL) -> dict[str, float]:
    run_dir = tempfile.mkdtemp(dir=tmp)
    cmd = [sys.executable, "-m", "mariana", "run", "dnn-dp", "--workers", str(workers), "--json", "--run-dir", run_dir,
           "--set", f"data={data}", "--set", f"model={model}", "--set", "batch_size=256", "--set", f"steps={steps}",
           "--set", "test_fraction=0", "--set", "lr=0.01", "--set", "exchange=allreduce", *([] if fork else ["--no-fork"])]
    t0, c0 = time.time(), time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    process_s = time.perf_counter() - c0
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    first = first_superstep(os.path.join(run_dir, "trace", "master.jsonl"))["start"]
    return {"process_s": process_s, "first_s": first - t0, "outside_s": process_s - out["wall_s"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="an .npz with x (N, 784) float32 and y (required unless --smoke)")
    ap.add_argument("--rounds", type=int, default=None, help="default 5 (--smoke 1)")
    ap.add_argument("--steps", type=int, default=None, help="default 60 (--smoke 3)")
    ap.add_argument("--one", action="store_true", help="also time --workers 1 (one process, LocalRuntime)")
    ap.add_argument("--smoke", action="store_true", help="tiny data (unless --data) and model, 3 steps, 1 round, "
                    "environment as is: the CI smoke run, no figures")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.data is None and not args.smoke:
        ap.error("--data is required (or --smoke)")
    args.rounds = args.rounds or (1 if args.smoke else 5)
    args.steps = args.steps or (3 if args.smoke else 60)
    model = SMOKE_MODEL if args.smoke else MODEL
    base = {k: v for k, v in os.environ.items() if k not in THREAD_VARS and k != "MARIANA_NO_FORK"}
    base.update({k: "1" for k in THREAD_VARS})
    variants = dict(variant_envs("env" if args.smoke else "auto", base, label="env as is"))
    result: dict[str, Any] = {"load_start": os.getloadavg(), "cores": len(os.sched_getaffinity(0)),
                                 "rounds": args.rounds, "steps": args.steps}
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or write_smoke_data(os.path.join(tmp, "smoke.npz"))
        for name, env in variants.items():
            runs: dict[str, list[dict[str, float]]] = {"fork": [], "spawn": [], **({"one": []} if args.one else {})}
            for r in range(args.rounds):
                order = list(runs) if r % 2 == 0 else list(runs)[::-1]
                for how in order:
                    runs[how].append(run_once(env, data, args.steps, how != "spawn", tmp, 1 if how == "one" else 2, model))
                    print(f"[{time.strftime('%H:%M:%S')}] {name} round {r} {how}: {runs[how][-1]}", file=sys.stderr)
            result[name] = {how: {k: round(statistics.median(x[k] for x in rs), 3) for k in rs[0]} for how, rs in runs.items()}
    result["load_end"] = os.getloadavg()
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['cores']} cores, {args.rounds} interleaved rounds, {args.steps} steps, load "
              f"{result['load_start'][0]:.2f} -> {result['load_end'][0]:.2f} (1-min)")
        for name in variants:
            print(f"{name}:")
            for how, med in result[name].items():
                print(f"  {how:5}  first superstep {med['first_s']:.3f} s  outside supersteps {med['outside_s']:.3f} s  "
                      f"process {med['process_s']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
