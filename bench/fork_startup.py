#!/usr/bin/env python
"""Forked vs spawned local workers: whole-process seconds of ``mariana run dnn-dp --workers 2``.

    python bench/fork_startup.py --data /tmp/syn.npz            # 5 interleaved rounds, 784-2048x3-10, 60 steps
    python bench/fork_startup.py --data /tmp/syn.npz --rounds 3 --steps 20 --json

Each round runs the job once with forked workers (the default) and once with ``--no-fork`` (fresh
interpreters), with ``--one`` also once with ``--workers 1`` (one process), reversing the order
every other round, one BLAS/OpenMP thread per process
(``OMP/OPENBLAS/MKL_NUM_THREADS=1``), both with the environment as it is and with
``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` removed (when set). Figures per run: ``process_s``
(start to exit), ``first_s`` (start to the master's first superstep, from RUN/trace/master.jsonl),
``outside_s`` (process_s minus the supersteps' ``wall_s``). Medians go to stdout with the load
average; progress to stderr. The data set is any ``.npz`` with ``x`` (N, 784) float32 and ``y``.
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

from common import THREAD_VARS, variant_envs
MODEL = '["dense:2048:relu","dense:2048:relu","dense:2048:relu","dense:10"]'


def run_once(env: dict[str, str], data: str, steps: int, fork: bool, tmp: str, workers: int = 2) -> dict[str, float]:
    run_dir = tempfile.mkdtemp(dir=tmp)
    cmd = [sys.executable, "-m", "mariana", "run", "dnn-dp", "--workers", str(workers), "--json", "--run-dir", run_dir,
           "--set", f"data={data}", "--set", f"model={MODEL}", "--set", "batch_size=256", "--set", f"steps={steps}",
           "--set", "test_fraction=0", "--set", "lr=0.01", "--set", "exchange=allreduce", *([] if fork else ["--no-fork"])]
    t0, c0 = time.time(), time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    process_s = time.perf_counter() - c0
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    with open(os.path.join(run_dir, "trace", "master.jsonl")) as f:
        first = json.loads(f.readline())["start"]
    return {"process_s": process_s, "first_s": first - t0, "outside_s": process_s - out["wall_s"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--one", action="store_true", help="also time --workers 1 (one process, LocalRuntime)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if k not in THREAD_VARS and k != "MARIANA_NO_FORK"}
    base.update({k: "1" for k in THREAD_VARS})
    variants = dict(variant_envs("auto", base, label="env as is"))
    result: dict[str, Any] = {"load_start": os.getloadavg(), "cores": len(os.sched_getaffinity(0)),
                                 "rounds": args.rounds, "steps": args.steps}
    with tempfile.TemporaryDirectory() as tmp:
        for name, env in variants.items():
            runs: dict[str, list[dict[str, float]]] = {"fork": [], "spawn": [], **({"one": []} if args.one else {})}
            for r in range(args.rounds):
                order = list(runs) if r % 2 == 0 else list(runs)[::-1]
                for how in order:
                    runs[how].append(run_once(env, args.data, args.steps, how != "spawn", tmp, 1 if how == "one" else 2))
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
