#!/usr/bin/env python
"""``dnn-dp`` training throughput vs a hand-written numpy loop, PyTorch and itself on 2 workers.

    python bench/dnn_dp.py               # full run (~2-5 min per BLAS variant on 2 cores)
    python bench/dnn_dp.py --quick       # 784-512x3-10, few steps: a smoke run (~30-60 s)
    python bench/dnn_dp.py --smoke       # 784-64x3-10, 2 steps, no torch, one BLAS variant: CI smoke run, no figures
    python bench/dnn_dp.py --json        # one JSON object on stdout instead of the table
    python bench/dnn_dp.py --report F    # the table of a saved --json result

Every figure comes from one run, on synthetic data (``numpy.random.default_rng(0)``: x float32
(N, 784) standard normal, y int in [0, 10)) written to a temporary ``.npz`` that the job reads
through ``data=``; MLP 784-2048-2048-2048-10 (relu), global batch 256, float32, momentum SGD
(lr 0.01, momentum 0.9), ``test_fraction=0`` (no evaluation pass inside the timed steps). The
loops start from the engine's own initial weights and batch order, so their first losses must
match the engine's (the table shows the relative gap):

1. ``dnn-dp``, 1 replica, LocalRuntime vs a hand-written numpy loop of the same math (x@W+b, relu,
   softmax cross-entropy mean, backward without d(input), momentum SGD) in the same process,
   BLAS threads as the library defaults (all cores). Target engine/numpy >= 0.9. Attribution:
   the engine's layer math and optimizer path vs the loop's, timed piece by piece, and the cost
   of the first layer's d(input), which only the engine computes.
2. the same MLP in PyTorch CPU (``torch.set_num_threads(2)``, same init and batches, SGD
   momentum) in its own process, when torch is installed. No target.
3. 2 replicas on 2 cluster worker processes vs 1 replica on LocalRuntime, 1 BLAS thread
   everywhere (OMP/OPENBLAS/MKL_NUM_THREADS=1 in the environment of the measuring child before
   numpy is imported; the workers inherit it), global batch 256 in both. Target speedup >= 1.7.
   Attribution: the speedup the machine allows right now (two concurrent 1-thread numpy-loop
   processes at batch 128 vs one at 256), the per-worker ``compute_s`` of the metrics, and one
   extra cluster run with a run directory, whose superstep traces (docs/traces.md) split each
   worker's superstep into compute / encode / send / wait / barrier.
4. wire bytes per step counted by the engine (``bytes`` of the cluster metrics, summed over the
   two supersteps of a steady step; workers=2, replicas=2) with sgd, adagrad_dp and adagrad_approx
   (block 16), and (adagrad_dp - sgd) / (adagrad_approx - sgd).
5. MLP 64-256-256-10, batch 128, ``data=digits``: engine (LocalRuntime, 1 replica) vs numpy loop,
   ms per step (target ratio >= 0.8); also with 1 BLAS thread, for reference.

Steady state: the engine's step k is the interval between the ``on_superstep`` callbacks that
close supersteps 2k and 2k+2 (the replicas' compute superstep + the shards' update superstep),
skipping the first ``warm`` steps. Figures 1 and 5 are paired: one numpy-loop step runs inside
the callback that closes superstep 2k (its time is excluded from the engine's), so engine step k
and loop step k run back to back under the same outside load, and the ratio is the median of the
per-step ratios. Step times are the best round's median (outside load only ever adds time).
This machine is shared: the table gives, per round, the cores other processes used meanwhile
(from /proc/stat, less this process tree's CPU time); ``--quiet-wait S`` waits up to S s before
each round for them to use < 0.25 core.

BLAS variants: the measuring runs happen in child processes, once with the environment as it is
and once with ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` removed (``--variants auto``, the
default, skips the second when neither is set: it would be the same run). Each child reports
threadpoolctl's view of its BLAS (internal_api, architecture, num_threads).

Progress goes to stderr, results to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, cast

from common import BLAS_VARS, THREAD_VARS, blas_info, run_child, variant_envs

BLAS_KEYS = ("internal_api", "architecture", "num_threads", "version", "filepath")

BENCH = os.path.abspath(__file__)
TARGETS = {"engine_vs_numpy": 0.9, "cluster_speedup": 1.7, "small_engine_vs_numpy": 0.8}
LR, MOMENTUM, SEED = 0.01, 0.9, 0
_T0 = time.perf_counter()


def progress(msg: str) -> None:
    tag = os.environ.get("DNN_BENCH_TAG", "")
    print(f"[{time.perf_counter() - _T0:7.1f}s]{' ' + tag if tag else ''} {msg}", file=sys.stderr, flush=True)


def sizes(quick: bool, smoke: bool = False) -> dict[str, Any]:
    """Model and step counts of a full, a quick or a smoke run."""
    if smoke:  # the CI smoke run (bench/smoke.py): every code path, tiny sizes, figures meaningless
        return dict(hidden=[64, 64, 64], batch=64, n=64 * 4, warm=1, steps=2, rounds=1, cl_steps=2,
                    bytes_steps=2, small_warm=2, small_steps=5, small_rounds=1, ceiling_steps=2,
                    anatomy_reps=1)
    if quick:
        return dict(hidden=[512, 512, 512], batch=256, n=256 * 8, warm=2, steps=6, rounds=1, cl_steps=5,
                    bytes_steps=3, small_warm=20, small_steps=100, small_rounds=1, ceiling_steps=6,
                    anatomy_reps=4)
    return dict(hidden=[2048, 2048, 2048], batch=256, n=256 * 32, warm=2, steps=10, rounds=4, cl_steps=10,
                bytes_steps=4, small_warm=50, small_steps=500, small_rounds=3, ceiling_steps=15,
                anatomy_reps=8)


# ================================================================================================
# Measuring side (child processes). numpy is imported only here, after the parent set the env.
# ================================================================================================

def spec_of(hidden: list[int]) -> list[str]:
    return [f"dense:{h}:relu" for h in hidden] + ["dense:10"]


def dataset(data: str):
    """The engine's own train split (test_fraction 0), so loops and engine see the same samples."""
    from mariana.vertices.train.data import load_dataset

    return load_dataset(data, 0.0, SEED)


def batch_indices(n: int, batch: int, step: int):
    """DataReader's batch order for one replica (same permutation per epoch, sorted indices)."""
    import numpy as np

    spe = n // batch
    epoch, k = divmod(step, spe)
    perm = np.random.default_rng([SEED, epoch]).permutation(n)
    return np.sort(perm[k * batch:(k + 1) * batch])


def init_params(hidden: list[int], input_dim: int, classes: int):
    """The engine's initial weights (He normal, same seeds), as (W (in, out), b) float32 pairs."""
    from mariana.vertices.train.model import build_model

    named = dict(build_model(spec_of(hidden), (input_dim,), classes, SEED).named_params())
    layers = len(hidden) + 1
    return [(named[f"{i}.W"].copy(), named[f"{i}.b"].copy()) for i in range(layers)]


class NumpyMLP:
    """The hand-written loop: relu MLP, softmax cross-entropy mean, backward, momentum SGD."""

    def __init__(self, params) -> None:
        import numpy as np

        self.np = np
        self.params = params
        self.vel = [(np.zeros_like(W), np.zeros_like(b)) for W, b in params]

    def step(self, x, y) -> tuple[float, float]:
        """One training step; returns (loss, seconds spent in the optimizer update)."""
        np = self.np
        acts = [x]
        h = x
        last = len(self.params) - 1
        for i, (W, b) in enumerate(self.params):
            z = h @ W
            z += b
            if i < last:
                np.maximum(z, 0, out=z)
            acts.append(z)
            h = z
        n = len(y)
        rows = np.arange(n)
        z = h - h.max(axis=1, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)
        loss = float(np.mean(np.log(s[:, 0]) - z[rows, y]))
        d = e / s
        d[rows, y] -= 1.0
        d /= n
        grads: list[Any] = [None] * len(self.params)
        for i in range(last, -1, -1):
            W = self.params[i][0]
            grads[i] = (acts[i].T @ d, d.sum(axis=0))
            if i > 0:  # no gradient for the input
                d = d @ W.T
                d *= acts[i] > 0
        t = time.perf_counter()
        for (W, b), (vW, vb), (gW, gb) in zip(self.params, self.vel, grads):
            vW *= MOMENTUM
            vW += gW
            W -= LR * vW
            vb *= MOMENTUM
            vb += gb
            b -= LR * vb
        return loss, time.perf_counter() - t


def numpy_loop(ds, hidden: list[int], batch: int, steps: int) -> dict[str, Any]:
    net = NumpyMLP(init_params(hidden, ds.x_train.shape[1], ds.classes))
    durs, losses, updates = [], [], []
    for k in range(steps):
        t = time.perf_counter()
        idx = batch_indices(len(ds.x_train), batch, k)
        loss, upd = net.step(ds.x_train[idx], ds.y_train[idx])
        durs.append(time.perf_counter() - t)
        losses.append(loss)
        updates.append(upd)
    return {"durs": durs, "losses": losses, "update_s": updates}


def engine_config(data: str, hidden: list[int], batch: int, steps: int, replicas: int = 1,
                  optimizer: str = "momentum") -> dict[str, Any]:
    return {"data": data, "model": spec_of(hidden), "batch_size": batch, "steps": steps, "replicas": replicas,
            "optimizer": optimizer, "lr": LR, "momentum": MOMENTUM, "seed": SEED, "test_fraction": 0.0,
            "exchange": "linear"}


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of one process by thread kind: the main thread, ZeroMQ's threads, other threads."""
    out = {"main": 0.0, "zmq": 0.0, "other": 0.0}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            kind = "main" if int(tid) == pid else "zmq" if name.startswith("ZMQ") else "other"
            out[kind] += (int(fields[11]) + int(fields[12])) / tick
    except OSError:
        pass
    return out


def engine_run(config: dict[str, Any], workers: int = 1, runtime: str = "local", between: Any = None,
               run_dir: str | None = None, thread_window: tuple[int, int] | None = None) -> dict[str, Any]:
    """Run dnn-dp; per-step durations from the on_superstep timestamps, plus per-superstep details.

    ``between(k)``, if given, runs inside the callback that closes superstep 2k (just before the
    engine's step k); its time is excluded from the engine's step times. ``run_dir``: record the
    run there (with the engine's superstep traces). ``thread_window=(s0, s1)`` (cluster): CPU
    seconds each worker's threads used between the ends of supersteps s0 and s1 (from /proc).
    """
    from mariana.jobs.launch import run_job

    t_in: list[float] = []
    t_out: list[float] = []
    details: list[dict[str, Any]] = []
    steps = config["steps"]

    def on_superstep(record: dict[str, Any]) -> None:
        t_in.append(time.perf_counter())
        details.append({"wall_s": record["wall_s"], "bytes": record.get("bytes"), "loss": record.get("loss"),
                        "compute_s": [w["compute_s"] for w in record["workers"]]})
        s = record["superstep"]
        if between is not None and s % 2 == 0 and s // 2 < steps:
            between(s // 2)
        if thread_window is not None and s in thread_window:
            own = os.times()
            threads[s] = ({p.pid: thread_cpu(p.pid) for p in procs}, time.perf_counter(), own.user + own.system)
        t_out.append(time.perf_counter())

    procs: list[Any] = []
    threads: dict[int, Any] = {}
    extra: dict[str, Any] = {}
    if thread_window is not None:
        extra["on_start"] = lambda master, children: procs.extend(children)
    if run_dir is not None:
        from mariana.storage import RunDir

        extra["run_dir"] = RunDir(run_dir)
    t = time.perf_counter()
    res = run_job("dnn-dp", config=config, workers=workers, runtime=runtime, on_superstep=on_superstep, **extra)
    total = time.perf_counter() - t
    if len(t_in) < 2 * steps + 1:
        raise RuntimeError(f"expected >= {2 * steps + 1} supersteps for {steps} steps, got {len(t_in)}")
    durs = [t_in[2 * k + 2] - t_out[2 * k] - (t_out[2 * k + 1] - t_in[2 * k + 1]) for k in range(steps)]
    losses = [details[2 * k + 1]["loss"] for k in range(steps)]
    out = {"durs": durs, "losses": losses, "details": details, "run_s": total, "wall_s": res.wall_s,
           "supersteps": res.supersteps, "outside_s": sum(b - a for a, b in zip(t_in, t_out))}
    if thread_window is not None and all(w in threads for w in thread_window):
        (a, ta, ma), (b, tb, mb) = threads[thread_window[0]], threads[thread_window[1]]
        out["thread_cpu"] = {"wall_s": tb - ta, "master_s": mb - ma, "workers": [
            {k: b[pid][k] - a[pid][k] for k in ("main", "zmq", "other")} for pid in a if pid in b]}
    return out


def paired_run(config: dict[str, Any], ds: Any, hidden: list[int], batch: int) -> dict[str, Any]:
    """One engine run (LocalRuntime) with one numpy-loop step between each two engine steps.

    Engine step k and numpy step k run back to back, so both see the same load from whatever
    else runs on the machine; their ratio is taken per pair.
    """
    net = NumpyMLP(init_params(hidden, ds.x_train.shape[1], ds.classes))
    loop: dict[str, list[float]] = {"durs": [], "losses": [], "update_s": []}

    def numpy_step(k: int) -> None:
        t = time.perf_counter()
        idx = batch_indices(len(ds.x_train), batch, k)
        loss, upd = net.step(ds.x_train[idx], ds.y_train[idx])
        loop["durs"].append(time.perf_counter() - t)
        loop["losses"].append(loss)
        loop["update_s"].append(upd)

    eng = engine_run(config, between=numpy_step)
    return {"engine": eng, "numpy": loop, "run_s": eng["run_s"] - eng["outside_s"]}


# -- load from other processes on this machine (it is shared: other tests may run meanwhile) -----
QUIET = {"wait_s": 0.0, "threshold": 0.25}


def _cpu_snapshot() -> tuple[float, float, float]:
    """(machine busy CPU seconds, this process tree's CPU seconds, wall clock)."""
    import resource

    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # minus idle, iowait
    own = sum(getattr(resource.getrusage(w), a) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
              for a in ("ru_utime", "ru_stime"))
    return busy, own, time.perf_counter()


def outside_cores(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """Average cores used by processes other than this one and its reaped children, between a and b."""
    return max(0.0, ((b[0] - a[0]) - (b[1] - a[1])) / max(b[2] - a[2], 1e-9))


def wait_quiet() -> float:
    """Wait (at most QUIET['wait_s']) for a 0.5 s window with little outside load; returns the wait."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < QUIET["wait_s"]:
        a = _cpu_snapshot()
        time.sleep(0.5)
        if outside_cores(a, _cpu_snapshot()) < QUIET["threshold"]:
            break
    return time.perf_counter() - t0


def timed(fn, *args, **kwargs) -> dict[str, Any]:
    """Run one measured round; attach the outside load seen during it (cores) and any quiet wait."""
    waited = wait_quiet()
    a = _cpu_snapshot()
    out = fn(*args, **kwargs)
    out["outside_cores"] = outside_cores(a, _cpu_snapshot())
    out["quiet_wait_s"] = waited
    return out


def steady(durs: list[float], warm: int) -> list[float]:
    return durs[warm:] if len(durs) > warm else durs


def best_median(runs: list[dict[str, Any]], warm: int) -> dict[str, Any]:
    """Best round by median steady step time; keeps all rounds' medians."""
    meds = [statistics.median(steady(r["durs"], warm)) for r in runs]
    i = min(range(len(runs)), key=meds.__getitem__)
    st = steady(runs[i]["durs"], warm)
    fastest = min(min(steady(r["durs"], warm)) for r in runs)
    return {"step_s": meds[i], "mean_s": statistics.fmean(st), "min_s": fastest, "round_medians_s": meds,
            "steps_timed": len(st), "outside_cores": [r.get("outside_cores") for r in runs]}


def loss_gap(a: list[float], b: list[float], n: int = 5) -> float:
    """Max relative difference of the first ``n`` per-step losses (same init and batches)."""
    pairs = [(x, y) for x, y in list(zip(a, b))[:n] if x is not None and y is not None]
    return max((abs(x - y) / max(abs(y), 1e-12) for x, y in pairs), default=float("nan"))


def split(details: list[dict[str, Any]], steps: int, warm: int) -> dict[str, Any]:
    """Median per-step split into the compute superstep (2k+1) and the update superstep (2k+2)."""
    out = {}
    for name, off in (("compute_ss", 1), ("update_ss", 2)):
        rows = [details[2 * k + off] for k in range(warm, steps)]
        out[name] = {"wall_s": statistics.median(r["wall_s"] for r in rows),
                     "compute_s_max": statistics.median(max(r["compute_s"]) for r in rows),
                     "compute_s_min": statistics.median(min(r["compute_s"]) for r in rows),
                     "bytes": statistics.median(r["bytes"] for r in rows) if rows[0].get("bytes") is not None else None}
    return out


# mariana.engine.tracing.PHASES + "_s" (spelled out: numpy may not be imported yet at this point)
TRACE_PHASES = ("compute_s", "combine_s", "encode_s", "send_s", "wait_s", "barrier_s")


def trace_breakdown(run_dir: str, steps: int, warm: int, workers: int) -> dict[str, Any]:
    """Per worker, median seconds of each phase of the engine's superstep traces (docs/traces.md),
    for the replicas' compute supersteps (2k+1) and the shards' update supersteps (2k+2)."""
    out: dict[str, Any] = {}
    rows: dict[int, dict[int, dict[str, Any]]] = {}
    for w in range(workers):
        path = os.path.join(run_dir, "trace", f"worker-{w}.jsonl")
        if not os.path.exists(path):
            return {"error": f"no trace at {path}"}
        with open(path) as f:
            rows[w] = {r["superstep"]: r for r in map(json.loads, f) if "superstep" in r and "event" not in r}
    for name, off in (("compute_ss", 1), ("update_ss", 2)):
        ss = [2 * k + off for k in range(warm, steps)]
        out[name] = {}
        for w in range(workers):
            recs = [rows[w][s] for s in ss if s in rows[w]]
            if not recs:
                continue
            ph = {k: statistics.median(r.get(k, 0.0) for r in recs) for k in TRACE_PHASES}
            ph["wait_min_s"] = min(r.get("wait_s", 0.0) for r in recs)
            ph["span_s"] = statistics.median(r["end"] - r["start"] + r.get("barrier_s", 0.0) for r in recs)
            ph["other_s"] = statistics.median(r["end"] - r["start"] + r.get("barrier_s", 0.0)
                                              - sum(r.get(k, 0.0) for k in TRACE_PHASES) for r in recs)
            out[name][str(w)] = ph
    return out


def time_first_layer_dx(hidden: list[int], batch: int, input_dim: int = 784, reps: int = 9) -> float:
    """What the engine's Dense.backward spends on d(input) of the first layer (no one needs it);
    the fastest of ``reps`` (a lone GEMM: outside load only adds time)."""
    import numpy as np

    rng = np.random.default_rng(1)
    dy = rng.standard_normal((batch, hidden[0])).astype(np.float32)
    W = rng.standard_normal((input_dim, hidden[0])).astype(np.float32)
    dy @ W.T
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        dy @ W.T
        ts.append(time.perf_counter() - t)
    return min(ts)


def paired_figure(data: str, hidden: list[int], batch: int, warm: int, steps: int, rounds: int,
                  label: str) -> dict[str, Any]:
    """Rounds of paired engine/numpy steps; figures from the best round and from all pairs."""
    ds = dataset(data)
    cfg = engine_config(data, hidden, batch, warm + steps)
    runs = []
    for r in range(rounds):
        progress(f"{label} round {r + 1}/{rounds}: dnn-dp LocalRuntime 1 replica with a numpy-loop step "
                 f"between its steps, {warm + steps} steps")
        runs.append(timed(paired_run, cfg, ds, hidden, batch))
    for run in runs:
        for side in ("engine", "numpy"):
            run[side]["outside_cores"] = run["outside_cores"]
    eng = [r["engine"] for r in runs]
    loop = [r["numpy"] for r in runs]
    e, n = best_median(eng, warm), best_median(loop, warm)
    be = e["round_medians_s"].index(e["step_s"])
    bn = n["round_medians_s"].index(n["step_s"])
    pairs = [nd / ed for r in runs
             for ed, nd in zip(steady(r["engine"]["durs"], warm), steady(r["numpy"]["durs"], warm))]
    return {"engine": e, "numpy": n, "ratio": statistics.median(pairs), "ratio_best_rounds": n["step_s"] / e["step_s"],
            "pairs": len(pairs), "engine_split": split(eng[be]["details"], warm + steps, warm),
            "numpy_update_s": statistics.median(steady(loop[bn]["update_s"], warm)),
            "engine_setup_s": eng[0]["run_s"] - sum(eng[0]["durs"]) - eng[0]["outside_s"],
            "loss_gap": loss_gap(eng[0]["losses"], loop[0]["losses"]),
            "losses": {"engine": eng[0]["losses"][:5], "numpy": loop[0]["losses"][:5]}}


def anatomy(hidden: list[int], batch: int, reps: int) -> dict[str, Any]:
    """Where the engine's step differs from the loop's, piece by piece, interleaved, same thread:
    the engine's layer math (``Model.loss_and_grad`` on flat-bound params) vs the loop's forward +
    backward, and the engine's optimizer path (the shard's ``np.array`` copy of the summed gradient,
    ``SGD.step``, the replica copying the fresh slice into its flat buffer) vs the loop's update."""
    import numpy as np

    from mariana.vertices.train.model import build_model
    from mariana.vertices.train.optim import make_optimizer

    rng = np.random.default_rng(2)
    x = rng.standard_normal((batch, 784), dtype=np.float32)
    y = rng.integers(0, 10, batch)
    model = build_model(spec_of(hidden), (784,), 10, SEED)
    flat = np.zeros(model.num_params, np.float32)
    grad = np.zeros_like(flat)
    model.bind_flat(flat, grad)
    shard_p = flat.copy()
    opt = make_optimizer("momentum", LR, MOMENTUM)
    state = opt.init_state(shard_p)
    net = NumpyMLP(init_params(hidden, 784, 10))
    t: dict[str, list[float]] = {k: [] for k in ("engine_layers", "loop_fwd_bwd", "engine_opt_path", "loop_update",
                                                "shard_copy", "sgd_step", "replica_copy")}
    clock = time.perf_counter
    for _ in range(reps):
        a = clock()
        model.loss_and_grad(x, y)
        b = clock()
        g = np.array(grad, dtype=np.float32)  # ParameterShardVertex.compute, one replica
        c = clock()
        opt.step(shard_p, g, state, None)  # type: ignore[attr-defined]  # every optimizer has step()
        d = clock()
        flat[:] = shard_p  # ReplicaVertex.compute: the "param" slice into its flat buffer
        e = clock()
        _, upd = net.step(x, y)
        f = clock()
        t["engine_layers"].append(b - a)
        t["shard_copy"].append(c - b)
        t["sgd_step"].append(d - c)
        t["replica_copy"].append(e - d)
        t["engine_opt_path"].append(e - b)
        t["loop_fwd_bwd"].append(f - e - upd)
        t["loop_update"].append(upd)
    return {k: statistics.median(v[1:] if len(v) > 2 else v) for k, v in t.items()}


def child_default(spec: dict[str, Any]) -> dict[str, Any]:
    """Figures 1 and 5 (5 again in the 1-thread child): engine vs numpy loop, paired, in one process."""
    sz, out = spec["sizes"], cast(dict[str, Any], {"blas": blas_info(BLAS_KEYS)})
    if spec.get("big", True):
        out["big"] = paired_figure(spec["data"], sz["hidden"], sz["batch"], sz["warm"], sz["steps"], sz["rounds"],
                                   "fig 1")
        out["big"]["first_layer_dx_s"] = time_first_layer_dx(sz["hidden"], sz["batch"])
        progress("fig 1 anatomy: engine layer math and optimizer path vs the loop's, interleaved")
        out["big"]["anatomy"] = timed(anatomy, sz["hidden"], sz["batch"], sz["anatomy_reps"])
    out["small"] = paired_figure("digits", [256, 256], 128, sz["small_warm"], sz["small_steps"], sz["small_rounds"],
                                 "fig 5")
    return out


def child_torch(spec: dict[str, Any]) -> dict[str, Any]:
    """Figure 2: the same MLP in PyTorch (2 threads), same init and batches."""
    try:
        import torch
    except ImportError:
        return {"available": False}

    torch.set_num_threads(2)
    sz = spec["sizes"]
    ds = dataset(spec["data"])
    params = init_params(sz["hidden"], ds.x_train.shape[1], ds.classes)
    layers: list[Any] = []
    for i, (W, b) in enumerate(params):
        lin = torch.nn.Linear(W.shape[0], W.shape[1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(W.T.copy()))
            lin.bias.copy_(torch.from_numpy(b))
        layers.append(lin)
        if i < len(params) - 1:
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    lossf = torch.nn.CrossEntropyLoss()
    x_all, y_all = torch.from_numpy(ds.x_train), torch.from_numpy(ds.y_train)
    steps = sz["warm"] + sz["steps"]

    def train() -> dict[str, Any]:
        durs, losses = [], []
        for k in range(steps):
            t = time.perf_counter()
            idx = torch.from_numpy(batch_indices(len(ds.x_train), sz["batch"], k))
            x, y = x_all[idx], y_all[idx]
            opt.zero_grad(set_to_none=False)
            loss = lossf(net(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            durs.append(time.perf_counter() - t)
        return {"durs": durs, "losses": losses}

    runs = []
    for r in range(sz["rounds"]):
        progress(f"fig 2 round {r + 1}/{sz['rounds']}: PyTorch {torch.__version__}, {steps} steps")
        runs.append(timed(train))  # later rounds continue training; only round 1's losses are comparable
    return {"available": True, "version": torch.__version__, "threads": torch.get_num_threads(),
            "blas": blas_info(BLAS_KEYS), "torch": best_median(runs, sz["warm"]), "losses": runs[0]["losses"][:5]}


def child_numpy_proc(spec: dict[str, Any]) -> dict[str, Any]:
    """One numpy-loop process (for the hardware ceiling of figure 3); optional file barrier."""
    sz = spec["sizes"]
    ds = dataset(spec["data"])
    net = NumpyMLP(init_params(sz["hidden"], ds.x_train.shape[1], ds.classes))
    x, y = ds.x_train[:spec["batch"]], ds.y_train[:spec["batch"]]
    for _ in range(2):
        net.step(x, y)
    if spec.get("barrier"):
        open(os.path.join(spec["barrier"], f"ready-{os.getpid()}"), "w").close()
        deadline = time.monotonic() + 60
        while len(os.listdir(spec["barrier"])) < spec["parties"] and time.monotonic() < deadline:
            time.sleep(0.005)
    durs = []
    for _ in range(spec["steps"]):
        t = time.perf_counter()
        net.step(x, y)
        durs.append(time.perf_counter() - t)
    return {"step_s": statistics.median(durs)}


def run_child_procs(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Start children at once (inheriting this env) and collect their JSON answers."""
    procs = [subprocess.Popen([sys.executable, BENCH, "--child", json.dumps(s)], stdout=subprocess.PIPE)
             for s in specs]
    outs = []
    for p in procs:
        stdout, _ = p.communicate(timeout=300)
        if p.returncode:
            raise RuntimeError(f"numpy-loop child failed with code {p.returncode}")
        outs.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    return outs


def child_one_thread(spec: dict[str, Any]) -> dict[str, Any]:
    """Figures 3 and 4 (1 BLAS thread everywhere), plus figure 5 with 1 thread."""
    sz, out = spec["sizes"], cast(dict[str, Any], {"blas": blas_info(BLAS_KEYS)})
    steps = sz["warm"] + sz["cl_steps"]
    local, cluster = [], []
    for r in range(sz["rounds"]):
        progress(f"fig 3 round {r + 1}/{sz['rounds']}: LocalRuntime 1 replica, 1 thread, {steps} steps")
        local.append(timed(engine_run, engine_config(spec["data"], sz["hidden"], sz["batch"], steps)))
        progress(f"fig 3 round {r + 1}/{sz['rounds']}: cluster 2 workers x 2 replicas, 1 thread each, {steps} steps")
        cluster.append(timed(engine_run, engine_config(spec["data"], sz["hidden"], sz["batch"], steps, replicas=2),
                                  workers=2, runtime="cluster"))
    lo, cl = best_median(local, sz["warm"]), best_median(cluster, sz["warm"])
    best_lo = lo["round_medians_s"].index(lo["step_s"])
    best_cl = cl["round_medians_s"].index(cl["step_s"])
    out["scale"] = {"local": lo, "cluster": cl, "speedup": lo["step_s"] / cl["step_s"],
                    "local_split": split(local[best_lo]["details"], steps, sz["warm"]),
                    "cluster_split": split(cluster[best_cl]["details"], steps, sz["warm"]),
                    "cluster_setup_s": cluster[0]["run_s"] - sum(cluster[0]["durs"]),
                    "loss_gap_cluster_vs_local": loss_gap(cluster[0]["losses"], local[0]["losses"])}
    progress(f"fig 3 attribution: one more cluster run with a run directory (engine superstep traces), {steps} steps")
    with tempfile.TemporaryDirectory(prefix="dnn-dp-trace-") as run_dir:
        traced = timed(engine_run, engine_config(spec["data"], sz["hidden"], sz["batch"], steps, replicas=2),
                       workers=2, runtime="cluster", run_dir=run_dir, thread_window=(2 * sz["warm"], 2 * steps))
        out["scale"]["trace"] = trace_breakdown(run_dir, steps, sz["warm"], 2)
    out["scale"]["trace"]["step_s"] = statistics.median(steady(traced["durs"], sz["warm"]))
    out["scale"]["trace"]["outside_cores"] = traced["outside_cores"]
    out["scale"]["trace"]["thread_cpu"] = traced.get("thread_cpu")
    progress("fig 3 ceiling: numpy loop, 1 process at batch 256, then 2 concurrent processes at batch 128")
    base = {"role": "numpy-proc", "data": spec["data"], "sizes": sz, "steps": sz["ceiling_steps"]}
    one = run_child_procs([dict(base, batch=sz["batch"])])[0]

    def concurrent() -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as bar:
            return {"procs": run_child_procs([dict(base, batch=sz["batch"] // 2, barrier=bar, parties=2)
                                              for _ in range(2)])}

    two = timed(concurrent)
    half_alone = run_child_procs([dict(base, batch=sz["batch"] // 2)])[0]
    worst = max(t["step_s"] for t in two["procs"])
    out["ceiling"] = {"one_proc_256_s": one["step_s"], "one_proc_128_s": half_alone["step_s"],
                      "two_procs_128_s": [t["step_s"] for t in two["procs"]], "speedup": one["step_s"] / worst,
                      "outside_cores": two["outside_cores"]}
    bytes_out: dict[str, Any] = {}
    for opt in ("sgd", "adagrad_dp", "adagrad_approx"):
        progress(f"fig 4: cluster 2 workers x 2 replicas, optimizer={opt}, {sz['bytes_steps']} steps")
        run = engine_run(engine_config(spec["data"], sz["hidden"], sz["batch"], sz["bytes_steps"], replicas=2,
                                       optimizer=opt), workers=2, runtime="cluster")
        d = run["details"]
        per_step = [d[2 * k + 1]["bytes"] + d[2 * k + 2]["bytes"] for k in range(1, sz["bytes_steps"])]
        bytes_out[opt] = {"per_step": per_step, "bytes_per_step": statistics.median(per_step),
                          "constant": len(set(per_step)) == 1,
                          "step_s_median": statistics.median(run["durs"][1:])}
    out["bytes"] = bytes_out
    progress("fig 5 with 1 BLAS thread")
    out["small_1thread"] = child_default(dict(spec, big=False))["small"]
    return out


def child_main(spec: dict[str, Any]) -> None:
    role = spec["role"]
    QUIET["wait_s"] = float(spec.get("quiet_wait", 0.0))
    os.environ["DNN_BENCH_TAG"] = spec.get("tag", "")
    fn = {"default": child_default, "torch": child_torch, "one-thread": child_one_thread,
          "numpy-proc": child_numpy_proc}[role]
    result = fn(spec)
    sys.stdout.write(json.dumps(result) + "\n")


# ================================================================================================
# Orchestrating side
# ================================================================================================
def write_data(path: str, n: int) -> None:
    import numpy as np

    rng = np.random.default_rng(SEED)
    np.savez(path, x=rng.standard_normal((n, 784), dtype=np.float32), y=rng.integers(0, 10, n))



def with_threads(env: dict[str, str], threads: int | None) -> dict[str, str]:
    env = {k: v for k, v in env.items() if k not in THREAD_VARS}
    if threads:
        env.update({k: str(threads) for k in THREAD_VARS})
    return env


def measure(args: argparse.Namespace) -> dict[str, Any]:
    sz = sizes(args.quick, args.smoke)
    result: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_avg_start": list(os.getloadavg())},
        "config": {"model": [784, *sz["hidden"], 10], "batch": sz["batch"], "samples": sz["n"], "lr": LR,
                   "momentum": MOMENTUM, "quick": args.quick,
                   "smoke": args.smoke, **sz},
        "blas_env": {k: os.environ.get(k) for k in BLAS_VARS},
        "variants": {},
    }
    with tempfile.TemporaryDirectory(prefix="dnn-dp-bench-") as tmp:
        data = os.path.join(tmp, "synthetic.npz")
        write_data(data, sz["n"])
        for name, env in variant_envs(args.variants or ("env" if args.smoke else "auto")):
            progress(f"variant {name}: " + ", ".join(f"{k}={env.get(k, '<unset>')}" for k in BLAS_VARS))
            base = {"data": data, "sizes": sz, "tag": name, "quiet_wait": args.quiet_wait}
            v: dict[str, Any] = {"env": {k: env.get(k) for k in BLAS_VARS}}
            v["default"] = run_child(BENCH, dict(base, role="default"), with_threads(env, None))
            if not (args.no_torch or args.smoke):  # the smoke run needs no optional package
                v["torch"] = run_child(BENCH, dict(base, role="torch"), with_threads(env, None))
            v["one_thread"] = run_child(BENCH, dict(base, role="one-thread"), with_threads(env, 1))
            result["variants"][name] = v
    result["machine"]["load_avg_end"] = list(os.getloadavg())
    result["total_s"] = time.perf_counter() - _T0
    return result


# ------------------------------------------------------------------------------------------------
def _fmt(x: Any, spec: str = ".3f") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and x != x:
        return "nan"
    return format(x, spec)


def _blas(entries: list[dict[str, Any]]) -> str:
    return "; ".join(f"{e.get('internal_api')} {e.get('architecture') or ''} x{e.get('num_threads')}".replace("  ", " ")
                     for e in entries) or "none reported"


def _loads(fig: dict[str, Any]) -> str:
    vals = fig.get("outside_cores") or []
    return "/".join("-" if v is None else f"{v:.1f}" for v in vals) or "-"


def report(res: dict[str, Any]) -> str:
    names = list(res["variants"])
    cols = [res["variants"][n] for n in names]
    w = 26
    lines = []
    cfg = res["config"]
    lines.append(f"dnn-dp training benchmark: MLP {'-'.join(map(str, cfg['model']))}, batch {cfg['batch']}, float32, "
                 f"momentum SGD; {res['machine']['cpus']} CPUs; load avg {res['machine']['load_avg_start'][0]:.2f} "
                 f"(start) / {res['machine']['load_avg_end'][0]:.2f} (end); total {res['total_s']:.0f}s")
    lines.append("step time = median steady step of the best round; samples/s = batch / step time; 'paired' = median "
                 "of per-step ratios,\nengine step k and loop step k run back to back; 'outside load' = cores used by "
                 "other processes during each round")
    lines.append("")
    lines.append("BLAS variants (threadpoolctl: internal_api architecture xthreads)")
    for n, c in zip(names, cols):
        env = ", ".join(f"{k}={v if v is not None else '<unset>'}" for k, v in c["env"].items())
        lines.append(f"  {n}: {env}")
        lines.append(f"    default threads: {_blas(c['default']['blas'])}")
        lines.append(f"    1-thread child : {_blas(c['one_thread']['blas'])}")
        if c.get("torch", {}).get("available"):
            lines.append(f"    torch child    : {_blas(c['torch']['blas'])}")
    lines.append("")
    lines.append(f"{'':<56}" + "".join(f"{n:>{w}}" for n in names) + f"{'target':>9}")

    def row(label: str, vals: list[Any], target: str = "") -> None:
        lines.append(f"{label:<56}" + "".join(f"{v:>{w}}" for v in vals) + f"{target:>9}")

    def ok(x: float, t: float) -> str:
        return f"{x:.3f} {'ok' if x >= t else 'MISS'}"

    def ms(x: Any, spec: str = ".0f") -> str:
        return "-" if x is None else format(x * 1e3, spec)

    B = cfg["batch"]
    if all("big" in c["default"] for c in cols):
        big = [c["default"]["big"] for c in cols]
        row("1. engine LocalRuntime 1 replica, samples/s", [_fmt(B / b["engine"]["step_s"], ".0f") for b in big])
        row("   numpy loop, samples/s", [_fmt(B / b["numpy"]["step_s"], ".0f") for b in big])
        row("   engine / numpy (paired)", [ok(b["ratio"], TARGETS["engine_vs_numpy"]) for b in big],
            f">={TARGETS['engine_vs_numpy']}")
        row("   engine / numpy (best-round medians | fastest steps)", [
            f"{b['ratio_best_rounds']:.3f} | {b['numpy']['min_s'] / b['engine']['min_s']:.3f}" for b in big])
        row("   engine ms/step = replica ss + shard ss", [
            f"{ms(b['engine']['step_s'])} = {ms(b['engine_split']['compute_ss']['wall_s'])} + "
            f"{ms(b['engine_split']['update_ss']['wall_s'])}" for b in big])
        row("   numpy ms/step, of which momentum update", [
            f"{ms(b['numpy']['step_s'])}, {ms(b['numpy_update_s'], '.1f')}" for b in big])
        row("   first-layer dX (only the engine computes it), ms", [ms(b["first_layer_dx_s"], ".1f") for b in big])
        an = [b.get("anatomy") for b in big]
        row("   anatomy: engine layers | loop fwd+bwd, ms", [
            f"{ms(a['engine_layers'], '.1f')} | {ms(a['loop_fwd_bwd'], '.1f')}" if a else "-" for a in an])
        row("   anatomy: engine optimizer path | loop update, ms", [
            f"{ms(a['engine_opt_path'], '.1f')} | {ms(a['loop_update'], '.1f')}" if a else "-" for a in an])
        row("     shard np.array copy | SGD.step | replica copy, ms", [
            f"{ms(a['shard_copy'], '.1f')} | {ms(a['sgd_step'], '.1f')} | {ms(a['replica_copy'], '.1f')}" if a else "-"
            for a in an])
        row("   anatomy: outside load, cores", [f"{a.get('outside_cores', 0):.1f}" if a else "-" for a in an])
        row("   anatomy: (loop total) / (engine layers + opt path)", [
            _fmt((a["loop_fwd_bwd"] + a["loop_update"]) / (a["engine_layers"] + a["engine_opt_path"])) if a else "-"
            for a in an])
        row("   round medians engine | numpy, ms", [
            "/".join(ms(x) for x in b["engine"]["round_medians_s"]) + " | " +
            "/".join(ms(x) for x in b["numpy"]["round_medians_s"]) for b in big])
        row("   outside load per round, cores", [_loads(b["engine"]) for b in big])
        row("   loss rel. gap, first 5 steps (engine vs numpy)", [f"{b['loss_gap']:.1e}" for b in big])
    tor = [c.get("torch", {}) for c in cols]
    if any(t.get("available") for t in tor):
        def vs(t: dict[str, Any], c: dict[str, Any], side: str) -> str:
            if not t.get("available") or "big" not in c["default"]:
                return "-"
            return _fmt(t["torch"]["step_s"] / c["default"]["big"][side]["step_s"])

        row("2. PyTorch (2 threads, own process), samples/s",
            [_fmt(B / t["torch"]["step_s"], ".0f") if t.get("available") else "-" for t in tor])
        row("   engine / torch | numpy / torch", [f"{vs(t, c, 'engine')} | {vs(t, c, 'numpy')}"
                                                 for t, c in zip(tor, cols)])
        row("   round medians, ms", ["/".join(ms(x) for x in t["torch"]["round_medians_s"]) if t.get("available")
                                     else "-" for t in tor])
        row("   outside load per round, cores", [_loads(t["torch"]) if t.get("available") else "-" for t in tor])
        row("   loss rel. gap, first 5 steps (torch vs numpy)", [
            f"{loss_gap(t['losses'], c['default']['big']['losses']['numpy']):.1e}" if t.get("available") and "big" in
            c["default"] else "-" for t, c in zip(tor, cols)])
    else:
        row("2. PyTorch", ["skipped" if args_no_torch(res) else "not installed"] * len(cols))
    sc = [c["one_thread"]["scale"] for c in cols]
    row("3. 1 thread: LocalRuntime 1 replica, samples/s", [_fmt(B / s["local"]["step_s"], ".0f") for s in sc])
    row("   cluster 2 workers x 2 replicas, samples/s", [_fmt(B / s["cluster"]["step_s"], ".0f") for s in sc])
    row("   speedup (best-round medians)", [ok(s["speedup"], TARGETS["cluster_speedup"]) for s in sc],
        f">={TARGETS['cluster_speedup']}")
    row("   speedup from the fastest steps", [_fmt(s["local"]["min_s"] / s["cluster"]["min_s"]) for s in sc])
    row("   round medians local | cluster, ms", [
        "/".join(ms(x) for x in s["local"]["round_medians_s"]) + " | " +
        "/".join(ms(x) for x in s["cluster"]["round_medians_s"]) for s in sc])
    row("   outside load per round, cores: local | cluster", [
        _loads(s["local"]) + " | " + _loads(s["cluster"]) for s in sc])
    ce = [c["one_thread"]["ceiling"] for c in cols]
    row("   hardware ceiling: numpy 1 proc@256 / 2 procs@128", [_fmt(x["speedup"]) for x in ce])
    row("     outside load during the 2-process run, cores", [_fmt(x.get("outside_cores"), ".1f") for x in ce])
    row("     numpy ms: 1 proc@256 | 1 proc@128 | 2 procs@128", [
        f"{ms(x['one_proc_256_s'])} | {ms(x['one_proc_128_s'])} | "
        + "/".join(ms(t) for t in x["two_procs_128_s"]) for x in ce])
    row("   local ms/step = replica ss + shard ss", [
        f"{ms(s['local']['step_s'])} = {ms(s['local_split']['compute_ss']['wall_s'])} + "
        f"{ms(s['local_split']['update_ss']['wall_s'])}" for s in sc])
    row("   cluster ms/step = replica ss + shard ss", [
        f"{ms(s['cluster']['step_s'])} = {ms(s['cluster_split']['compute_ss']['wall_s'])} + "
        f"{ms(s['cluster_split']['update_ss']['wall_s'])}" for s in sc])
    for which, label in (("compute_ss", "replica ss"), ("update_ss", "shard ss")):
        row(f"     {label}: compute_s of w0-w1 (metrics), ms", [
            f"{ms(s['cluster_split'][which]['compute_s_min'])}-{ms(s['cluster_split'][which]['compute_s_max'])}"
            for s in sc])
    tr = [s.get("trace", {}) for s in sc]
    row("   traced cluster run (run dir): ms/step | outside load", [
        f"{ms(t.get('step_s'))} | {t.get('outside_cores', 0):.1f}" if t.get("step_s") else "-" for t in tr])
    for which, label in (("compute_ss", "replica ss"), ("update_ss", "shard ss")):
        for k in ("compute_s", "encode_s", "send_s", "wait_s", "wait_min_s", "barrier_s", "other_s"):
            row(f"     {label} {k[:-2]} w0 | w1, ms", [
                " | ".join(ms(t[which][str(i)][k], ".1f") for i in range(2)) if t.get(which) and len(t[which]) == 2
                else "-" for t in tr])
    tc = [t.get("thread_cpu") for t in tr]
    row("   traced run, CPU share per worker thread kind", [""] * len(cols))
    row("     master process (this one), cores", [
        f"{c['master_s'] / c['wall_s']:.2f}" if c and "master_s" in c else "-" for c in tc])
    row("     main | zmq IO | other threads, w0 ; w1, cores", [
        " ; ".join(" | ".join(f"{wk[k] / c['wall_s']:.2f}" for k in ("main", "zmq", "other")) for wk in c["workers"])
        if c else "-" for c in tc])
    row("   loss rel. gap cluster vs local, first 5 steps", [f"{s['loss_gap_cluster_vs_local']:.1e}" for s in sc])
    by = [c["one_thread"]["bytes"] for c in cols]
    for opt in ("sgd", "adagrad_dp", "adagrad_approx"):
        row(f"4. wire bytes/step {opt}, MB", [
            f"{b[opt]['bytes_per_step'] / 1e6:.3f}{'' if b[opt]['constant'] else ' (varies)'}" for b in by])
    row("   (dp - sgd) / (approx - sgd)", [
        _fmt((b["adagrad_dp"]["bytes_per_step"] - b["sgd"]["bytes_per_step"])
             / max(b["adagrad_approx"]["bytes_per_step"] - b["sgd"]["bytes_per_step"], 1), ".2f") for b in by])
    row("   cluster ms/step sgd | dp | approx (3 steps, noisy)", [
        " | ".join(ms(b[o]["step_s_median"]) for o in ("sgd", "adagrad_dp", "adagrad_approx")) for b in by])
    for key, title in (("small", "5. digits 64-256-256-10 b128, default threads"),
                       ("small_1thread", "   same, 1 BLAS thread")):
        sm = [c["default"]["small"] if key == "small" else c["one_thread"]["small_1thread"] for c in cols]
        row(title + ":", [""] * len(cols))
        row("   engine | numpy ms/step", [f"{ms(s['engine']['step_s'], '.2f')} | {ms(s['numpy']['step_s'], '.2f')}"
                                          for s in sm])
        row("   engine / numpy (paired)", [ok(s["ratio"], TARGETS["small_engine_vs_numpy"]) for s in sm],
            f">={TARGETS['small_engine_vs_numpy']}" if key == "small" else "")
        row("   engine / numpy (best-round medians | fastest steps)", [
            f"{s['ratio_best_rounds']:.3f} | {s['numpy']['min_s'] / s['engine']['min_s']:.3f}" for s in sm])
        row("   engine replica ss + shard ss, ms", [
            f"{ms(s['engine_split']['compute_ss']['wall_s'], '.2f')} + "
            f"{ms(s['engine_split']['update_ss']['wall_s'], '.2f')}" for s in sm])
        row("   outside load per round, cores", [_loads(s["engine"]) for s in sm])
    return "\n".join(lines)


def args_no_torch(res: dict[str, Any]) -> bool:
    return all("torch" not in v for v in res["variants"].values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="784-512x3-10 and few steps: a smoke run")
    ap.add_argument("--smoke", action="store_true", help="784-64x3-10, 2 steps, 1 round, no torch: the CI smoke run")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the table")
    ap.add_argument("--variants", choices=("auto", "both", "env", "unset"), default=None,
                    help="BLAS environment variants (default auto: both when OPENBLAS_CORETYPE or OPENBLAS_L2_SIZE "
                         "is set; --smoke: env)")
    ap.add_argument("--no-torch", action="store_true", help="skip figure 2")
    ap.add_argument("--quiet-wait", type=float, default=0.0, metavar="S",
                    help="before each timed round wait up to S seconds for the other processes on this machine to "
                         "use < 0.25 core (default 0: do not wait; the load seen is reported either way)")
    ap.add_argument("--report", metavar="FILE", help="print the table of a saved --json result and exit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_main(json.loads(args.child))
        return
    if args.report:
        with open(args.report) as f:
            print(report(json.load(f)))
        return
    res = measure(args)
    print(json.dumps(res, indent=1) if args.json else report(res))


if __name__ == "__main__":
    main()
