#!/usr/bin/env python
"""Whole-process figures of ``mariana run dnn-dp`` (issue #13): 1 replica vs a numpy loop, 2 replicas
on 2 worker processes vs the ceiling, per exchange topology and optimizer; seconds to the first superstep.

    python bench/dnn_dp_process.py                       # 784-2048x3-10, batch 256, 60 steps, allreduce + linear
    python bench/dnn_dp_process.py --quick               # 784-512x3-10, 20 steps (a smoke run)
    python bench/dnn_dp_process.py --smoke               # 784-64x3-10, 3 steps, 1 round, allreduce: CI smoke run
    python bench/dnn_dp_process.py --exchanges allreduce linear tree ps --optimizers sgd adagrad_approx --json

Every figure is a whole process timed from its start to its exit, with one BLAS/OpenMP thread
(``OMP/OPENBLAS/MKL/BLIS_NUM_THREADS=1`` in its environment): ``mariana run dnn-dp`` with
``--workers 1`` (one replica, LocalRuntime) and ``--workers 2`` (two replicas on two worker
processes, the cluster runtime), global batch 256, synthetic data (``default_rng(0)``, x float32
(N, 784), y in [0, 10)) from a temporary ``.npz``, ``test_fraction=0``; and a plain numpy loop
process of the same MLP and SGD step (import, load, 60 steps, exit), alone at batch 256 and two
at once at batch 128 (the ceiling of two processes on this machine). Ratios: numpy loop time /
engine time (1 replica; target >= 0.95), speedup = 1-worker time / 2-worker time, and speedup /
ceiling (target >= 0.9); "outside supersteps" is the process time minus the supersteps' wall
time (start-up to the first superstep, plus writing the results and exiting); "first
superstep" is the time from launch to superstep 0's start (from the run's trace). The package is
byte-compiled first, as a regular pip install leaves it. Each configuration runs ``--rounds``
times, interleaved; the median is reported. Both with the environment as it is and with ``OPENBLAS_CORETYPE`` /
``OPENBLAS_L2_SIZE`` removed (when set). Progress goes to stderr, results to stdout.
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

from common import BLAS_VARS, THREAD_VARS, first_superstep, variant_envs

NUMPY_LOOP = r"""
import sys, time
import numpy as np
path, hidden = sys.argv[1], [int(h) for h in sys.argv[2].split(",")]
batch, steps, lr = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
d = np.load(path)
x, y = d["x"], d["y"]
rng = np.random.default_rng(0)
sizes = [x.shape[1], *hidden, 10]
params = [((rng.standard_normal((a, b)) * np.sqrt(2 / a)).astype(np.float32), np.zeros(b, np.float32))
          for a, b in zip(sizes, sizes[1:])]
n = len(x)
t0 = time.perf_counter()
for step in range(steps):
    lo = (step * batch) % (n - batch + 1)
    xb, yb = x[lo:lo + batch], y[lo:lo + batch]
    acts = [xb]
    for i, (W, b) in enumerate(params):
        z = acts[-1] @ W + b
        acts.append(np.maximum(z, 0) if i < len(params) - 1 else z)
    z = acts[-1] - acts[-1].max(axis=1, keepdims=True)
    p = np.exp(z); p /= p.sum(axis=1, keepdims=True)
    p[np.arange(batch), yb] -= 1.0
    g = p / batch
    for i in range(len(params) - 1, -1, -1):
        W, b = params[i]
        gW, gb = acts[i].T @ g, g.sum(axis=0)
        if i > 0:
            g = (g @ W.T) * (acts[i] > 0)
        W -= lr * gW
        b -= lr * gb
print(time.perf_counter() - t0)
"""


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_engine(env: dict[str, str], data: str, hidden: list[int], steps: int, workers: int, exchange: str,
               optimizer: str, tmp: str) -> dict[str, float]:
    model = json.dumps([f"dense:{h}:relu" for h in hidden] + ["dense:10"])
    run_dir = os.path.join(tempfile.mkdtemp(dir=tmp), "run")
    cmd = [sys.executable, "-m", "mariana", "run", "dnn-dp", "--workers", str(workers), "--json",
           "--run-dir", run_dir, "--set", f"data={data}", "--set", f"model={model}",
           "--set", "batch_size=256", "--set", f"steps={steps}", "--set", "test_fraction=0",
           "--set", f"optimizer={optimizer}", "--set", "lr=0.01", "--set", f"exchange={exchange}"]
    launched, t = time.time(), time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    process_s = time.perf_counter() - t
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    first = first_superstep(os.path.join(run_dir, "trace", "master.jsonl" if workers > 1 else "worker-0.jsonl"))
    return {"process_s": process_s, "supersteps_s": out["wall_s"], "outside_s": process_s - out["wall_s"],
            "first_superstep_s": first["start"] - launched}


def run_numpy(env: dict[str, str], data: str, hidden: list[int], steps: int, batch: int,
              parties: int = 1) -> list[float]:
    cmd = [sys.executable, "-c", NUMPY_LOOP, data, ",".join(map(str, hidden)), str(batch), str(steps), "0.01"]
    t = time.perf_counter()
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE) for _ in range(parties)]
    times = []
    for p in procs:
        p.communicate(timeout=1800)
        if p.returncode:
            raise SystemExit(f"numpy loop failed ({p.returncode})")
        times.append(time.perf_counter() - t)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--smoke", action="store_true",
                    help="784-64x3-10, 3 steps, 1 round, allreduce, one BLAS variant: the CI smoke run, no figures")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None, help="default 3 (--smoke: 1)")
    ap.add_argument("--exchanges", nargs="+", default=None, choices=["linear", "tree", "ps", "allreduce"],
                    help="default allreduce linear (--smoke: allreduce)")
    ap.add_argument("--optimizers", nargs="+", default=["sgd"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.rounds is None:
        args.rounds = 1 if args.smoke else 3
    if args.exchanges is None:
        args.exchanges = ["allreduce"] if args.smoke else ["allreduce", "linear"]
    import numpy as np

    import mariana

    # Byte-compile the package first, as a (non-editable) pip install does: with an editable
    # install and PYTHONDONTWRITEBYTECODE set (as here), every `mariana run` would otherwise
    # compile ~120 modules from source (~65 ms) in each process, which the numpy loop never does.
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.dirname(mariana.__file__)], check=True)
    hidden = [64] * 3 if args.smoke else [512] * 3 if args.quick else [2048] * 3
    steps = args.steps or (3 if args.smoke else 20 if args.quick else 60)
    one_thread = {**os.environ, **{k: "1" for k in THREAD_VARS}}
    result: dict[str, Any] = {"model": [784, *hidden, 10], "batch": 256, "steps": steps, "cores": len(os.sched_getaffinity(0)),
                              "blas_env": {v: os.environ.get(v) for v in BLAS_VARS}, "load_start": os.getloadavg()[0],
                              "variants": {}}
    with tempfile.TemporaryDirectory(prefix="dnn-dp-process-") as tmp:
        data = os.path.join(tmp, "synthetic.npz")
        n = 1024 if args.smoke else max(8192, 256 * steps)
        rng = np.random.default_rng(0)
        np.savez(data, x=rng.standard_normal((n, 784), dtype=np.float32), y=rng.integers(0, 10, n))
        for variant, env in variant_envs("env" if args.smoke else "auto", one_thread):
            name = "openblas env unset" if variant == "unset" else "env as is"
            runs: dict[str, list[Any]] = {}
            for r in range(args.rounds):
                progress(f"{name}, round {r + 1}/{args.rounds}: numpy loops")
                runs.setdefault("numpy_256", []).append(run_numpy(env, data, hidden, steps, 256)[0])
                runs.setdefault("numpy_2x128", []).append(max(run_numpy(env, data, hidden, steps, 128, parties=2)))
                for ex in args.exchanges:
                    for opt in args.optimizers:
                        for w in (1, 2) if r % 2 == 0 else (2, 1):
                            progress(f"{name}, round {r + 1}: mariana run dnn-dp --workers {w} exchange={ex} "
                                     f"optimizer={opt}")
                            runs.setdefault(f"{ex}/{opt}/w{w}", []).append(
                                run_engine(env, data, hidden, steps, w, ex, opt, tmp))
            med = {k: statistics.median(v) for k, v in runs.items() if k.startswith("numpy")}
            v: dict[str, Any] = {"numpy_256_s": med["numpy_256"], "numpy_2x128_s": med["numpy_2x128"],
                                 "ceiling": med["numpy_256"] / med["numpy_2x128"], "configs": {}}
            for ex in args.exchanges:
                for opt in args.optimizers:
                    one = {k: statistics.median(x[k] for x in runs[f"{ex}/{opt}/w1"]) for k in runs[f"{ex}/{opt}/w1"][0]}
                    two = {k: statistics.median(x[k] for x in runs[f"{ex}/{opt}/w2"]) for k in runs[f"{ex}/{opt}/w2"][0]}
                    speedup = one["process_s"] / two["process_s"]
                    v["configs"][f"{ex}/{opt}"] = {
                        "w1": one, "w2": two, "numpy_vs_engine_1": med["numpy_256"] / one["process_s"],
                        "speedup": speedup, "speedup_vs_ceiling": speedup / v["ceiling"],
                        "superstep_speedup": one["supersteps_s"] / two["supersteps_s"]}
            v["rounds"] = runs
            result["variants"][name] = v
    result["load_end"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"mariana run dnn-dp, whole process, MLP {'-'.join(map(str, result['model']))}, batch 256, {steps} steps, "
          f"1 BLAS thread per process, {result['cores']} cores, load {result['load_start']:.2f} -> {result['load_end']:.2f}")
    for name, v in result["variants"].items():
        print(f"  {name}: numpy loop 1x256 {v['numpy_256_s']:.2f} s, 2x128 at once {v['numpy_2x128_s']:.2f} s, "
              f"ceiling {v['ceiling']:.2f}x")
        for cfg, c in v["configs"].items():
            print(f"    {cfg:22} 1 worker {c['w1']['process_s']:.2f} s (outside supersteps {c['w1']['outside_s']:.2f}, "
                  f"first superstep at {c['w1']['first_superstep_s']:.2f}) | 2 workers {c['w2']['process_s']:.2f} s "
                  f"(outside {c['w2']['outside_s']:.2f}, first at {c['w2']['first_superstep_s']:.2f}) | numpy/engine(1) "
                  f"{c['numpy_vs_engine_1']:.3f} (>= 0.95) | speedup {c['speedup']:.3f}, / ceiling "
                  f"{c['speedup_vs_ceiling']:.3f} (>= 0.9) | superstep speedup {c['superstep_speedup']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
