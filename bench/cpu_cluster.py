#!/usr/bin/env python
"""``cpu-cluster`` (Mariana framework 3): model-parallel speedup on 2 processes against the
machine's own ceiling, and parameter-server bytes per step against the ideal.

    python bench/cpu_cluster.py              # full run, both BLAS variants (~2-4 min on 2 cores)
    python bench/cpu_cluster.py --quick      # 784-512x3-10, batch 128, few steps: a smoke run
    python bench/cpu_cluster.py --smoke      # 784-64x3-10, 2 steps, one BLAS variant: CI smoke run, no figures
    python bench/cpu_cluster.py --json       # one JSON object on stdout instead of the table
    python bench/cpu_cluster.py --report F   # the table of a saved --json result

Everything runs in one invocation, baselines included. Synthetic data (``numpy.random.default_rng(0)``:
x float32 (N, 784) standard normal, y int in [0, 10)) is written to ``bench/out/cpu_cluster/data.npz``
and passed with ``--set data=``; MLP 784-2048-2048-2048-10 (``dense:2048:relu`` x3, ``dense:10``),
global batch 256, ``groups=1``, ``param_servers=1``, momentum SGD (lr 0.001), ``test_fraction=0`` (no
evaluation inside the timed steps), ``steps`` = warm-up + timed steps (fewer than one epoch).
Every engine run is the ``mariana`` command itself (``python -m mariana run cpu-cluster ... --json
--run-dir bench/out/cpu_cluster/...``) in a child process whose environment has
``OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1`` (1 BLAS thread per process; cluster
workers inherit it).

1. **Samples/s, K=1 vs K=2 workers per group.**
   - K=1: ``workers_per_group=1`` on the LocalRuntime (one process: the default for one worker,
     and the fastest way to run K=1: the whole step runs in one ``compute``, nothing is
     serialized, no master round trip). For attribution, once per variant: K=1 on the cluster
     runtime with ``--workers 1`` (a master process + 1 worker process: the runtime's cost), and
     K=2 on the LocalRuntime (both workers' supersteps in turn in one process: whether the sliced
     math adds up to the unsplit model's, independent of how the 2 cores are shared), and K=2 on
     2 processes with ``param_servers=2`` (server s on process s: the optimizer update and the
     gradient traffic split over both processes instead of all on process 0).
   - K=2: ``workers_per_group=2 --workers 2 --runtime cluster``: worker k on process k (one worker
     vertex per process); the coordinator and the parameter server sit on process 0.
   - Step time: from ``RUN/metrics.jsonl``. A step is the run of supersteps that ends with the
     coordinator's receipt of its loss (the superstep carrying ``counter/samples``); step time = sum
     of those supersteps' ``wall_s`` (master-measured, BEGIN -> last DONE); the first ``warm``
     steps are skipped; the figure is the median steady step of the best round (outside load only
     adds time), samples/s = batch / step time. Also shown: the elapsed time between the PS
     supersteps' ends in ``RUN/trace/master.jsonl`` (adds the master's time between supersteps),
     and the counters' ``samples_per_s`` (whole run, warm-up included, as ``mariana run`` prints).
   - Ceiling, same run, same environment: plain numpy processes doing forward + backward of the
     same MLP and batch (x@W+b, relu, softmax cross-entropy, dW/db, d(input) except for the first
     layer; no optimizer update, no communication): one process with every unit of every layer vs
     two concurrent processes (started together through a file barrier) each holding half the
     units of every layer (W slices (in, out/2); each layer's input has the whole width, as after
     the engine's gather). Ceiling speedup = 1-process step / slower of the 2 processes' steps;
     also the half model alone (no concurrency). engine/ceiling = engine speedup / ceiling speedup.
   - CPU time per step, all processes of a run (``getrusage(RUSAGE_CHILDREN)``: user + system of
     the ``mariana`` process and its reaped workers): (CPU of the best timed run - CPU of a run of
     only the warm-up steps) / timed steps, for K=1 local and K=2 cluster. Much less sensitive to
     other processes than wall time; 2 x CPU(K=1) / CPU(K=2) bounds the speedup 2 free cores
     could give if nothing were serial.
   - Where a step goes: the median wall and slowest-worker ``compute_s`` of each superstep position
     in a step (K=2: fwd0..fwd3, loss+bwd3, bwd2, bwd1, bwd0+push, PS update), the per-step sums of
     each worker's trace phases (``RUN/trace/worker-K.jsonl``: compute, combine, encode, send,
     wait, barrier, other = span - phases) over the timed steps of the best round, and the phase
     shares of ``mariana trace summary RUN --json`` (whole run, warm-up and start included).
2. **Bytes per step per parameter server against the ideal**, S = 1, 2, 4 (+ G=2 S=2), K=2, from
   the ``counter/ps-NNN/bytes`` totals / steps (LocalRuntime: counters are computed by the
   vertices, the same on any runtime). Ideal per server = 2 x G x (parameter bytes) / S (its 1/S
   of every member's gradient in, its 1/S of the parameters back to every member); measured/ideal
   should be 1.00; the exact figure from the server's 16-aligned segments is also shown.
   ``adagrad_approx`` adds its per-16-block statistics (expected extra 1/32 of the ideal).
   Also checked: ``counter/g00/bytes`` per step against gradients + transfer messages computed
   from the model, and the wire bytes per step of the K=2 cluster run (``bytes`` in metrics).

BLAS variants: the environment as it is, and with ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE``
removed for every child (``--variants both``, the default when either is set; they pin OpenBLAS's
kernels and slow it down). The OpenBLAS core in use is read from the library in each numpy child.
The load average and, per run, the cores used by other processes (from /proc/stat less this
process tree) are reported: the machine may be shared.

Progress goes to stderr, results to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import common
from common import BLAS_VARS, THREAD_VARS

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.abspath(__file__)
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out", "cpu_cluster")
for _k in THREAD_VARS:  # this process too (it only writes the data, but keep it off the other core)
    os.environ[_k] = "1"
LR, SEED, INPUT, CLASSES = 0.001, 0, 784, 10
_T0 = time.perf_counter()


def progress(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def sizes(quick: bool, smoke: bool = False) -> dict[str, Any]:
    if smoke:  # the CI smoke run (bench/smoke.py): every code path, tiny sizes, figures meaningless
        return dict(hidden=[64, 64, 64], batch=32, n=32 * 8, warm=1, steps=2, rounds=1, ceiling_steps=2, bytes_steps=1,
                    smoke=True)
    if quick:
        return dict(hidden=[512, 512, 512], batch=128, n=128 * 16, warm=1, steps=4, rounds=1, ceiling_steps=6,
                    bytes_steps=2)
    return dict(hidden=[2048, 2048, 2048], batch=256, n=256 * 16, warm=2, steps=10, rounds=2, ceiling_steps=15,
                bytes_steps=3)


def model_spec(hidden: list[int]) -> list[str]:
    return [f"dense:{h}:relu" for h in hidden] + [f"dense:{CLASSES}"]


def dims_of(hidden: list[int]) -> list[int]:
    return [INPUT, *hidden, CLASSES]


def num_params(dims: list[int], parts: int = 1) -> list[int]:
    """Parameters of each of ``parts`` slices (slice k: W (in, out/parts) + b (out/parts) per layer)."""
    return [sum(i * (o // parts) + o // parts for i, o in zip(dims[:-1], dims[1:])) for _ in range(parts)]


# ------------------------------------------------------------------------------------------------
# load from other processes
def cpu_snapshot() -> tuple[float, float, float]:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    own = sum(getattr(resource.getrusage(w), a) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
              for a in ("ru_utime", "ru_stime"))
    return busy, own, time.perf_counter()


def outside_cores(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    return max(0.0, ((b[0] - a[0]) - (b[1] - a[1])) / max(b[2] - a[2], 1e-9))


# ------------------------------------------------------------------------------------------------
# numpy ceiling child (numpy imported here only, after the parent set the environment)
def openblas_core() -> str | None:
    import ctypes

    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and ".so" in line})
        for path in libs:
            lib = ctypes.CDLL(path)
            for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename64_",
                         "openblas_get_corename"):
                fn = getattr(lib, name, None)
                if fn is not None:
                    fn.restype = ctypes.c_char_p
                    return fn().decode()
    except OSError:
        pass
    return None


def child_numpy(spec: dict[str, Any]) -> dict[str, Any]:
    """Forward + backward of the MLP (every unit, or 1/parts of the units of every layer)."""
    import numpy as np

    dims, parts, B = spec["dims"], spec["parts"], spec["batch"]
    rng = np.random.default_rng(SEED)
    L = len(dims) - 1
    f32 = np.float32
    W = [(rng.standard_normal((dims[i], dims[i + 1] // parts), dtype=f32) * f32(np.sqrt(2.0 / dims[i])))
         for i in range(L)]
    b = [np.zeros(dims[i + 1] // parts, f32) for i in range(L)]
    dW = [np.empty_like(w) for w in W]
    db = [np.empty_like(v) for v in b]
    xs = [rng.standard_normal((B, dims[i]), dtype=f32) for i in range(L)]  # every layer's whole input
    xs[1:] = [np.maximum(x, 0) for x in xs[1:]]
    y = rng.integers(0, CLASSES, B)

    def step() -> float:
        zs = []
        for i in range(L):
            z = xs[i] @ W[i]
            z += b[i]
            if i < L - 1:
                np.maximum(z, 0, out=z)
            zs.append(z)
        logits = np.concatenate([zs[-1]] * parts, axis=1) if parts > 1 else zs[-1]  # the gathered logits
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        loss = float(-np.log(p[np.arange(B), y] + 1e-12).mean())
        p[np.arange(B), y] -= 1
        d = np.ascontiguousarray(p[:, :CLASSES // parts]) / f32(B)
        for i in reversed(range(L)):
            if i < L - 1:
                d *= zs[i] > 0
            np.matmul(xs[i].T, d, out=dW[i])
            d.sum(axis=0, out=db[i])
            if i > 0:
                dx = d @ W[i].T  # partial d(whole input); a partition keeps its slice (+ the peers' pieces)
                w = dims[i] // parts
                d = dx[:, :w] + dx[:, w:2 * w] if parts > 1 else dx
        return loss

    for _ in range(2):
        step()
    if spec.get("barrier"):
        open(os.path.join(spec["barrier"], f"ready-{os.getpid()}"), "w").close()
        deadline = time.monotonic() + 60
        while len(os.listdir(spec["barrier"])) < spec["parties"] and time.monotonic() < deadline:
            time.sleep(0.002)
    durs = []
    for _ in range(spec["steps"]):
        t = time.perf_counter()
        step()
        durs.append(time.perf_counter() - t)
    return {"step_s": statistics.median(durs), "min_s": min(durs), "openblas_core": openblas_core()}


def run_numpy(specs: list[dict[str, Any]], env: dict[str, str]) -> list[dict[str, Any]]:
    procs = [subprocess.Popen([sys.executable, BENCH, "--child", json.dumps(s)], stdout=subprocess.PIPE, env=env)
             for s in specs]
    outs = []
    for p in procs:
        stdout, _ = p.communicate(timeout=600)
        if p.returncode:
            raise SystemExit(f"numpy child failed with exit code {p.returncode}")
        outs.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    return outs


def ceiling(sz: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    base = {"dims": dims_of(sz["hidden"]), "batch": sz["batch"], "steps": sz["ceiling_steps"]}
    a = cpu_snapshot()
    one = run_numpy([dict(base, parts=1)], env)[0]
    b = cpu_snapshot()
    with tempfile.TemporaryDirectory(prefix="cpu-cluster-bar-") as bar:
        two = run_numpy([dict(base, parts=2, barrier=bar, parties=2) for _ in range(2)], env)
    c = cpu_snapshot()
    half = run_numpy([dict(base, parts=2)], env)[0]
    worst = max(t["step_s"] for t in two)
    return {"one_s": one["step_s"], "two_s": [t["step_s"] for t in two], "half_alone_s": half["step_s"],
            "speedup": one["step_s"] / worst, "openblas_core": one["openblas_core"],
            "outside_cores": [outside_cores(a, b), outside_cores(b, c)]}


# ------------------------------------------------------------------------------------------------
# engine runs
def engine_cmd(data: str, sz: dict[str, Any], run_dir: str, K: int, steps: int, runtime: str, workers: int,
               S: int = 1, G: int = 1, optimizer: str = "momentum") -> list[str]:
    sets = {"data": os.path.relpath(data, ROOT), "model": json.dumps(model_spec(sz["hidden"])), "batch_size": sz["batch"], "steps": steps,
            "test_fraction": 0, "groups": G, "workers_per_group": K, "param_servers": S, "optimizer": optimizer,
            "lr": LR, "seed": SEED}
    cmd = [sys.executable, "-m", "mariana", "run", "cpu-cluster", "--workers", str(workers), "--runtime", runtime,
           "--run-dir", os.path.relpath(run_dir, ROOT), "--json"]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    return cmd


def shell_line(cmd: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(c) for c in ["mariana", *cmd[3:]])


def read_jsonl(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_engine(cmd: list[str], env: dict[str, str], run_dir: str) -> dict[str, Any]:
    shutil.rmtree(run_dir, ignore_errors=True)
    c0 = children_cpu()
    a = cpu_snapshot()
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, timeout=900)
    wall = time.perf_counter() - t
    if p.returncode:  # once more: the checkout may be mid-edit by someone else (shared working tree)
        progress(f"engine run failed ({p.returncode}), retrying in 10 s: {p.stderr.decode()[-300:].strip()}")
        time.sleep(10)
        shutil.rmtree(run_dir, ignore_errors=True)
        a = cpu_snapshot()
        t = time.perf_counter()
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, timeout=900)
        wall = time.perf_counter() - t
    if p.returncode:
        sys.stderr.write(p.stderr.decode()[-3000:])
        raise SystemExit(f"engine run failed ({p.returncode}): {shell_line(cmd)}")
    out = json.loads(p.stdout.decode().strip().splitlines()[-1])
    out["process_s"] = wall
    out["cpu_s"] = children_cpu() - c0  # the whole process tree (master + workers), user + system
    out["outside_cores"] = outside_cores(a, cpu_snapshot())
    out["metrics"] = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    shutil.rmtree(os.path.join(run_dir, "params"), ignore_errors=True)  # 40 MB per run; metrics + traces stay
    return out


def steps_of(metrics: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Metrics lines grouped into steps: each step ends with the superstep in which its loss reaches
    the coordinator (``counter/samples``: once per step; the servers now update bucket by bucket
    over several supersteps of a step, so their counters no longer mark its end)."""
    steps, cur = [], []
    for line in metrics:
        cur.append(line)
        if "counter/samples" in line:
            steps.append(cur)
            cur = []
    return steps


def step_times(res: dict[str, Any], warm: int, run_dir: str) -> dict[str, Any]:
    steps = steps_of(res["metrics"])
    timed = steps[warm:]
    durs = [sum(x["wall_s"] for x in st) for st in timed]
    out = {"durs": durs, "step_s": statistics.median(durs), "min_s": min(durs), "steps": len(steps),
           "supersteps_per_step": statistics.median(len(st) for st in timed),
           "samples_per_s_counter": res["counters"].get("samples_per_s")}
    master = os.path.join(run_dir, "trace", "master.jsonl")
    if os.path.exists(master):
        ends = {r["superstep"]: r["end"] for r in read_jsonl(master) if "superstep" in r and "end" in r}
        anchors = [st[-1]["superstep"] for st in steps]
        el = [ends[anchors[i]] - ends[anchors[i - 1]] for i in range(max(warm, 1), len(anchors))
              if anchors[i] in ends and anchors[i - 1] in ends]
        out["elapsed_step_s"] = statistics.median(el) if el else None
    return out


def positions(res: dict[str, Any], warm: int) -> list[dict[str, Any]]:
    """Median wall and slowest-worker compute of each superstep position in a steady step."""
    timed = steps_of(res["metrics"])[warm:]
    n = min(len(st) for st in timed)
    out = []
    for i in range(n):
        rows = [st[i] for st in timed if len(st) == n]
        out.append({"wall_s": statistics.median(r["wall_s"] for r in rows),
                    "compute_max_s": statistics.median(max(w["compute_s"] for w in r["workers"]) for r in rows),
                    "compute_min_s": statistics.median(min(w["compute_s"] for w in r["workers"]) for r in rows)})
    return out


def position_labels(n: int, layers: int, K: int) -> list[str]:
    if K == 1 and n == 2:
        return ["fwd+loss+bwd+push", "PS update"]
    labels = ([f"fwd{i}" for i in range(layers)] + [f"loss+bwd{layers - 1}"]
              + [f"bwd{i}" for i in range(layers - 2, 0, -1)] + ["bwd0+push", "PS update"])
    return labels if len(labels) == n else [f"ss{i}" for i in range(n)]


PHASES = ("compute_s", "combine_s", "encode_s", "send_s", "wait_s", "barrier_s")


def trace_phases(run_dir: str, res: dict[str, Any], warm: int, workers: int) -> dict[str, Any]:
    """Per worker, seconds per steady step in each trace phase (median over the timed steps)."""
    steps = steps_of(res["metrics"])[warm:]
    out: dict[str, Any] = {}
    for w in range(workers):
        path = os.path.join(run_dir, "trace", f"worker-{w}.jsonl")
        if not os.path.exists(path):
            return {}
        recs = {r["superstep"]: r for r in read_jsonl(path) if "superstep" in r and "event" not in r}
        per_step: dict[str, list[float]] = {k: [] for k in (*PHASES, "span_s", "other_s")}
        for st in steps:
            rs = [recs[x["superstep"]] for x in st if x["superstep"] in recs]
            span = sum(r["end"] - r["start"] + r.get("barrier_s", 0.0) for r in rs)
            for k in PHASES:
                per_step[k].append(sum(r.get(k, 0.0) for r in rs))
            per_step["span_s"].append(span)
            per_step["other_s"].append(span - sum(r.get(k, 0.0) for r in rs for k in PHASES))
        out[str(w)] = {k: statistics.median(v) for k, v in per_step.items()}
    return out


def trace_summary(run_dir: str, env: dict[str, str]) -> dict[str, Any]:
    p = subprocess.run([sys.executable, "-m", "mariana", "trace", "summary", run_dir, "--json"], env=env, cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if p.returncode:
        return {"error": p.stderr.decode()[-500:]}
    s = json.loads(p.stdout)
    return {"phases": {k: v["share"] for k, v in s.get("phases", {}).items()}, "wall_s": s.get("wall_s"),
            "supersteps": s.get("supersteps")}


# ------------------------------------------------------------------------------------------------
def variant_envs(mode: str) -> list[tuple[str, dict[str, str]]]:
    """The BLAS variants (``common.variant_envs``), every child with 1 BLAS thread and this checkout
    importable."""
    base = {k: v for k, v in os.environ.items()}
    base.update({k: "1" for k in THREAD_VARS})
    base["PYTHONPATH"] = ROOT + (os.pathsep + base["PYTHONPATH"] if base.get("PYTHONPATH") else "")
    return common.variant_envs(mode, base, label="as set")


def write_data(path: str, n: int) -> None:
    import numpy as np

    rng = np.random.default_rng(SEED)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.savez(path, x=rng.standard_normal((n, INPUT), dtype=np.float32), y=rng.integers(0, CLASSES, n))


def speed_variant(name: str, env: dict[str, str], data: str, sz: dict[str, Any]) -> dict[str, Any]:
    tag = "env" if name == "as set" else "unset"
    steps = sz["warm"] + sz["steps"]
    runs: dict[str, list[dict[str, Any]]] = {"k1": [], "k2": []}
    ceils = []
    cmds = {}
    for r in range(sz["rounds"]):
        for key, K, runtime, workers in (("k1", 1, "local", 1), ("k2", 2, "cluster", 2)):
            rd = os.path.join(OUT, f"{tag}-{key}-r{r}")
            cmd = engine_cmd(data, sz, rd, K, steps, runtime, workers)
            cmds[key] = shell_line(cmd)
            progress(f"[{name}] round {r + 1}/{sz['rounds']}: K={K} {runtime} --workers {workers}, {steps} steps")
            res = run_engine(cmd, env, rd)
            st = step_times(res, sz["warm"], rd)
            st.update(run_dir=rd, outside_cores=res["outside_cores"], process_s=res["process_s"], cpu_s=res["cpu_s"],
                      supersteps=res["supersteps"], counters=res["counters"], positions=positions(res, sz["warm"]),
                      first_loss=next((m["loss"] for m in res["metrics"] if "loss" in m), None),
                      last_loss=[m["loss"] for m in res["metrics"] if "loss" in m][-1],
                      wire_bytes_per_step=statistics.median(sum(x.get("bytes") or 0 for x in s)
                                                            for s in steps_of(res["metrics"])[sz["warm"]:]),
                      group_bytes_per_step=statistics.median(sum(x.get("counter/g00/bytes", 0) for x in s)
                                                             for s in steps_of(res["metrics"])[sz["warm"]:]),
                      trace=trace_phases(rd, res, sz["warm"], workers))
            runs[key].append(st)
        progress(f"[{name}] round {r + 1}/{sz['rounds']}: numpy ceiling (1 process all units; 2 processes half each)")
        ceils.append(ceiling(sz, env))
    cpu: dict[str, Any] = {}
    for key, K, runtime, workers in (("k1", 1, "local", 1), ("k2", 2, "cluster", 2)):
        rd = os.path.join(OUT, f"{tag}-{key}-short")
        progress(f"[{name}] K={K} {runtime}, {sz['warm']} steps only (CPU time of start-up + warm-up)")
        short = run_engine(engine_cmd(data, sz, rd, K, sz["warm"], runtime, workers), env, rd)
        long_cpu = min(x["cpu_s"] for x in runs[key])
        cpu[key] = {"short_s": short["cpu_s"], "long_s": long_cpu, "per_step_s": (long_cpu - short["cpu_s"]) / sz["steps"]}
    cpu["k2_over_k1"] = _div(cpu["k2"]["per_step_s"], cpu["k1"]["per_step_s"])
    cpu["parallel_bound"] = _div(2 * cpu["k1"]["per_step_s"], cpu["k2"]["per_step_s"])
    rd = os.path.join(OUT, f"{tag}-k1cluster")
    progress(f"[{name}] K=1 cluster --workers 1 (attribution), {steps} steps")
    res = run_engine(engine_cmd(data, sz, rd, 1, steps, "cluster", 1), env, rd)
    k1c = step_times(res, sz["warm"], rd)
    k1c.update(outside_cores=res["outside_cores"], positions=positions(res, sz["warm"]))
    rd = os.path.join(OUT, f"{tag}-k2local")
    progress(f"[{name}] K=2 local (1 process, both workers in turn; attribution), {steps} steps")
    res = run_engine(engine_cmd(data, sz, rd, 2, steps, "local", 1), env, rd)
    k2l = step_times(res, sz["warm"], rd)
    k2l.update(outside_cores=res["outside_cores"], positions=positions(res, sz["warm"]))
    rd = os.path.join(OUT, f"{tag}-k2s2")
    progress(f"[{name}] K=2 cluster --workers 2 with param_servers=2 (one server per process; attribution)")
    res = run_engine(engine_cmd(data, sz, rd, 2, steps, "cluster", 2, S=2), env, rd)
    k2s2 = step_times(res, sz["warm"], rd)
    k2s2.update(outside_cores=res["outside_cores"], positions=positions(res, sz["warm"]))
    best = {k: min(v, key=lambda x: x["step_s"]) for k, v in runs.items()}
    ce = max(ceils, key=lambda c: c["speedup"])
    summaries = {k: trace_summary(best[k]["run_dir"], env) for k in best}
    speedup = best["k1"]["step_s"] / best["k2"]["step_s"]
    return {"env": {k: env.get(k) for k in BLAS_VARS}, "commands": cmds, "k1": best["k1"], "k2": best["k2"],
            "k1_cluster": k1c, "k2_local": k2l, "k2_s2": k2s2, "cpu": cpu, "rounds": {k: [x["step_s"] for x in v] for k, v in runs.items()},
            "round_outside_cores": {k: [x["outside_cores"] for x in v] for k, v in runs.items()},
            "ceiling": ce, "ceiling_rounds": [c["speedup"] for c in ceils], "speedup": speedup,
            "speedup_fastest": best["k1"]["min_s"] / best["k2"]["min_s"],
            "engine_vs_ceiling": speedup / ce["speedup"], "trace_summary": summaries}


def _div(a: float, b: float) -> float:
    """``a / b``, NaN where ``b`` is 0 (CPU time differences of runs too short to measure)."""
    return a / b if b else float("nan")


def bytes_figure(env: dict[str, str], data: str, sz: dict[str, Any]) -> list[dict[str, Any]]:
    from mariana.vertices.train.exchange import shard_ranges

    dims = dims_of(sz["hidden"])
    steps, K, out = sz["bytes_steps"], 2, []
    slices = num_params(dims, K)
    P = sum(slices)
    configs: tuple[tuple[int, int, str], ...] = (
        (1, 1, "momentum"), (2, 1, "momentum"), (4, 1, "momentum"), (2, 2, "momentum"),
        (1, 1, "adagrad_approx"), (2, 1, "adagrad_approx"), (4, 1, "adagrad_approx"))
    if sz.get("smoke"):  # one of each kind: several servers, two groups, the approximate optimizer
        configs = ((2, 1, "momentum"), (2, 2, "momentum"), (2, 1, "adagrad_approx"))
    for S, G, opt in configs:
        rd = os.path.join(OUT, f"bytes-S{S}-G{G}-{opt}")
        progress(f"bytes: K=2 G={G} S={S} optimizer={opt}, {steps} steps (LocalRuntime)")
        res = run_engine(engine_cmd(data, sz, rd, K, steps, "local", 1, S=S, G=G, optimizer=opt), env, rd)
        ideal = 2 * G * P * 4 / S
        servers = []
        for s in range(S):
            measured = res["counters"].get(f"ps-{s:03d}/bytes", 0) / steps
            seg = [shard_ranges(n, S)[s] for n in slices]
            exact = sum(2 * G * (hi - lo) * 4 for lo, hi in seg)
            stats = sum(G * -(-(hi - lo) // 16) * 4 for lo, hi in seg) if opt == "adagrad_approx" else 0
            servers.append({"measured": measured, "ideal": ideal, "ratio": measured / ideal,
                            "exact_segments": exact + stats, "ratio_exact": measured / (exact + stats)})
        out.append({"S": S, "G": G, "optimizer": opt, "param_bytes": P * 4, "servers": servers,
                    "group_bytes_per_step": res["counters"].get("g00/bytes", 0) / steps})
    return out


def expected_group_bytes(sz: dict[str, Any], K: int) -> int:
    """counter/g00/bytes per step: gradients (every slice) + forward gathers + backward scatters."""
    dims, B = dims_of(sz["hidden"]), sz["batch"]
    grads = sum(num_params(dims, K)) * 4
    if K == 1:
        return grads
    gathers = B * 4 * (K - 1) * sum(dims[1:])  # every stage's output slice to K-1 peers, K workers
    scatters = B * 4 * (K - 1) * sum(dims[1:-1])  # d(input) pieces of stages 1..L-1
    return grads + gathers + scatters


def measure(args: argparse.Namespace) -> dict[str, Any]:
    sz = sizes(args.quick, args.smoke)
    os.makedirs(OUT, exist_ok=True)
    data = os.path.join(OUT, "data.npz")
    write_data(data, sz["n"])
    res: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_avg_start": list(os.getloadavg()), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())},
        "config": {"model": model_spec(sz["hidden"]), "dims": dims_of(sz["hidden"]), "params": sum(num_params(
            dims_of(sz["hidden"]))), "lr": LR, "quick": args.quick, "smoke": args.smoke, "data": os.path.relpath(data, ROOT), **sz},
        "variants": {},
    }
    envs = variant_envs(args.variants or ("env" if args.smoke else "auto"))
    for name, env in envs:
        progress(f"variant '{name}': " + ", ".join(f"{k}={env.get(k, '<unset>')}" for k in BLAS_VARS))
        res["variants"][name] = speed_variant(name, env, data, sz)
        if not args.smoke:  # a smoke run leaves the results of the last real run alone
            with open(os.path.join(OUT, "partial.json"), "w") as f:  # kept if a later part fails
                json.dump(res, f, indent=1)
    if not args.no_bytes:
        res["bytes"] = bytes_figure(envs[0][1], data, sz)
    res["expected_group_bytes"] = {"1": expected_group_bytes(sz, 1), "2": expected_group_bytes(sz, 2)}
    res["machine"]["load_avg_end"] = list(os.getloadavg())
    res["total_s"] = time.perf_counter() - _T0
    return res


# ------------------------------------------------------------------------------------------------
def report(res: dict[str, Any]) -> str:
    cfg, names = res["config"], list(res["variants"])
    cols = [res["variants"][n] for n in names]
    B, w = cfg["batch"], 30
    m = res["machine"]
    lines = [f"cpu-cluster benchmark ({m['date_utc']} UTC): MLP {'-'.join(map(str, cfg['dims']))} "
             f"({cfg['params']:,} parameters), batch {B}, groups=1, S=1, momentum; {m['cpus']} CPUs; load avg "
             f"{m['load_avg_start'][0]:.2f} (start) / {m['load_avg_end'][0]:.2f} (end); total {res['total_s']:.0f}s",
             f"steady step = median over {cfg['steps']} steps after {cfg['warm']} warm-up of the best of "
             f"{cfg['rounds']} round(s): sum of the step's superstep wall_s (metrics.jsonl); 1 BLAS thread/process",
             ""]

    def row(label: str, vals: list[Any]) -> None:
        lines.append(f"{label:<58}" + "".join(f"{str(v):>{w}}" for v in vals))

    def ms(x: Any, spec: str = ".1f") -> str:
        return "-" if x is None else format(x * 1e3, spec)

    row("BLAS variant", names)
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        row(f"  {k}", [c["env"].get(k) or "<unset>" for c in cols])
    row("  OpenBLAS core in use (numpy child)", [c["ceiling"].get("openblas_core") or "?" for c in cols])
    lines.append("")
    row("1. K=1 local (1 process), samples/s", [f"{B / c['k1']['step_s']:.0f}" for c in cols])
    row("   K=2 cluster --workers 2 (2 processes), samples/s", [f"{B / c['k2']['step_s']:.0f}" for c in cols])
    row("   engine speedup K=2 / K=1", [f"{c['speedup']:.3f}" for c in cols])
    row("   ceiling speedup: numpy 1 proc / 2 procs x half units", [f"{c['ceiling']['speedup']:.3f}" for c in cols])
    row("   engine / ceiling", [f"{c['engine_vs_ceiling']:.3f}" for c in cols])
    row("   speedup from the fastest steps", [f"{c['speedup_fastest']:.3f}" for c in cols])
    row("   ms/step K=1 | K=2 (metrics wall_s, best round)", [
        f"{ms(c['k1']['step_s'])} | {ms(c['k2']['step_s'])}" for c in cols])
    row("   round medians K=1 | K=2, ms", [
        "/".join(ms(x, ".0f") for x in c["rounds"]["k1"]) + " | " + "/".join(ms(x, ".0f") for x in c["rounds"]["k2"])
        for c in cols])
    row("   outside load per round K=1 | K=2, cores", [
        "/".join(f"{x:.1f}" for x in c["round_outside_cores"]["k1"]) + " | "
        + "/".join(f"{x:.1f}" for x in c["round_outside_cores"]["k2"]) for c in cols])
    row("   ms/step elapsed (master trace) K=1 | K=2", [
        f"{ms(c['k1'].get('elapsed_step_s'))} | {ms(c['k2'].get('elapsed_step_s'))}" for c in cols])
    row("   counters samples_per_s (whole run) K=1 | K=2", [
        f"{c['k1']['samples_per_s_counter']} | {c['k2']['samples_per_s_counter']}" for c in cols])
    row("   CPU ms/step, all processes: K=1 | K=2 | K=2/K=1", [
        f"{ms(c['cpu']['k1']['per_step_s'])} | {ms(c['cpu']['k2']['per_step_s'])} | {c['cpu']['k2_over_k1']:.2f}"
        for c in cols])
    row("   CPU bound on the speedup: 2 x CPU(K=1) / CPU(K=2)", [f"{c['cpu']['parallel_bound']:.2f}" for c in cols])
    row("   K=1 cluster --workers 1: ms/step | samples/s", [
        f"{ms(c['k1_cluster']['step_s'])} | {B / c['k1_cluster']['step_s']:.0f}" for c in cols])
    row("   K=2 local (1 process): ms/step | / K=1 local", [
        f"{ms(c['k2_local']['step_s'])} | {c['k2_local']['step_s'] / c['k1']['step_s']:.2f}" for c in cols])
    row("   K=2 cluster S=2: ms/step | samples/s | PS superstep ms", [
        f"{ms(c['k2_s2']['step_s'])} | {B / c['k2_s2']['step_s']:.0f} | {ms(c['k2_s2']['positions'][-1]['wall_s'])}"
        for c in cols])
    row("   outside load: K=1 cluster | K=2 local | K=2 S=2, cores", [
        f"{c['k1_cluster']['outside_cores']:.1f} | {c['k2_local']['outside_cores']:.1f} | "
        f"{c['k2_s2']['outside_cores']:.1f}" for c in cols])
    row("   numpy ms/step: 1 proc | 2 procs half | half alone", [
        f"{ms(c['ceiling']['one_s'])} | " + "/".join(ms(t) for t in c["ceiling"]["two_s"])
        + f" | {ms(c['ceiling']['half_alone_s'])}" for c in cols])
    row("   ceiling rounds | outside load (1 proc / 2 procs)", [
        "/".join(f"{x:.2f}" for x in c["ceiling_rounds"]) + " | "
        + "/".join(f"{x:.1f}" for x in c["ceiling"]["outside_cores"]) for c in cols])
    row("   engine K=1 / numpy 1 proc (step time)", [f"{c['k1']['step_s'] / c['ceiling']['one_s']:.2f}" for c in cols])
    row("   supersteps per step K=1 | K=2", [
        f"{c['k1']['supersteps_per_step']:.0f} | {c['k2']['supersteps_per_step']:.0f}" for c in cols])
    row("   loss first -> last step, K=1 | K=2", [
        f"{c['k1']['first_loss']:.3f}->{c['k1']['last_loss']:.3f} | {c['k2']['first_loss']:.3f}->"
        f"{c['k2']['last_loss']:.3f}" for c in cols])
    lines.append("")
    layers = len(cfg["dims"]) - 1
    for key, K in (("k1", 1), ("k2", 2)):
        pos = cols[0][key]["positions"]
        labels = position_labels(len(pos), layers, K)
        row(f"   K={K} step by superstep: wall | slowest compute, ms", [""] * len(cols))
        for i, lab in enumerate(labels):
            row(f"     {i}: {lab}", [f"{ms(c[key]['positions'][i]['wall_s'])} | "
                                    f"{ms(c[key]['positions'][i]['compute_max_s'])}"
                                    if i < len(c[key]["positions"]) else "-" for c in cols])
    for key, K in (("k1", 1), ("k2", 2)):
        row(f"   K={K} trace phases per step, ms (worker 0 | worker 1)", [""] * len(cols))
        for ph in (*PHASES, "other_s", "span_s"):
            row(f"     {ph[:-2]}", [" | ".join(ms(c[key]["trace"][wk][ph]) for wk in sorted(c[key]["trace"]))
                                   if c[key]["trace"] else "-" for c in cols])
    for key, K in (("k1", 1), ("k2", 2)):
        row(f"   K={K} `mariana trace summary --json` shares (whole run)", [""] * len(cols))
        for ph in ("compute", "combine", "encode", "send", "wait", "barrier"):
            row(f"     {ph}", [f"{100 * c['trace_summary'][key]['phases'].get(ph, 0):.1f}%"
                              if "phases" in c["trace_summary"][key] else "-" for c in cols])
    lines.append("")
    eg = res["expected_group_bytes"]
    row("   counter g00/bytes per step, measured / expected K=1 | K=2", [
        f"{c['k1']['group_bytes_per_step'] / eg['1']:.4f} | {c['k2']['group_bytes_per_step'] / eg['2']:.4f}"
        for c in cols])
    row("   wire bytes per step K=2 (metrics 'bytes'), MB", [f"{c['k2']['wire_bytes_per_step'] / 1e6:.2f}"
                                                            for c in cols])
    if res.get("bytes"):
        lines.append("")
        lines.append(f"2. parameter-server bytes per step, K=2 workers per group (counter/ps-NNN/bytes / "
                     f"{cfg['bytes_steps']} steps); parameter bytes {res['bytes'][0]['param_bytes']:,}")
        lines.append(f"   {'S':>2} {'G':>2} {'optimizer':<15} {'server':>7} {'measured MB':>12} {'ideal MB':>10} "
                     f"{'meas/ideal':>11} {'meas/exact segments':>20}")
        for b in res["bytes"]:
            for s, sv in enumerate(b["servers"]):
                lines.append(f"   {b['S']:>2} {b['G']:>2} {b['optimizer']:<15} {'ps-%03d' % s:>7} "
                             f"{sv['measured'] / 1e6:>12.3f} {sv['ideal'] / 1e6:>10.3f} {sv['ratio']:>11.4f} "
                             f"{sv['ratio_exact']:>20.6f}")
    lines.append("")
    lines.append("commands (variant 'as set'; the bench adds OMP/OPENBLAS/MKL_NUM_THREADS=1):")
    for k, cmd in cols[0]["commands"].items():
        lines.append(f"  {k}: {cmd}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="784-512x3-10, batch 128, few steps: a smoke run")
    ap.add_argument("--smoke", action="store_true", help="784-64x3-10, 2 steps, 1 round: the CI smoke run (no last.json)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the table")
    ap.add_argument("--variants", choices=("auto", "both", "env", "unset"), default=None,
                    help="BLAS environment variants (default auto: both when OPENBLAS_CORETYPE or OPENBLAS_L2_SIZE "
                         "is set; --smoke: env)")
    ap.add_argument("--no-bytes", action="store_true", help="skip figure 2")
    ap.add_argument("--report", metavar="FILE", help="print the table of a saved --json result and exit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sys.stdout.write(json.dumps(child_numpy(json.loads(args.child))) + "\n")
        return
    if args.report:
        with open(args.report) as f:
            print(report(json.load(f)))
        return
    res = measure(args)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print(report(res))
    if not args.smoke:
        with open(os.path.join(OUT, "last.json"), "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
