#!/usr/bin/env python
"""``cnn-hybrid`` (CNN model + data parallelism): memory per partition, partition speedup, input pipeline.

    python bench/cnn_hybrid.py               # full run (~3-5 min on 2 cores, both BLAS variants)
    python bench/cnn_hybrid.py --quick       # smaller model, fewer steps: a smoke run (~1-2 min)
    python bench/cnn_hybrid.py --smoke       # tiny model and data, 2 steps, one BLAS variant: CI smoke run, no figures
    python bench/cnn_hybrid.py --json        # one JSON object on stdout instead of the table
    python bench/cnn_hybrid.py --report F    # the table of a saved --json result

Every figure and its baseline come from the same run, on seeded synthetic data written under
``bench/out/cnn_hybrid/`` (git-ignored), ``test_fraction=0`` (no evaluation pass inside timed steps):

1. **Peak array memory per partition, P=2 vs P=1** (Mariana: 3.99 GB -> 2.15 GB per GPU, 0.54;
   target <= 0.55). CNN "alexnet-ish" on float32 3x32x32 images, batch 64:
   conv 32 5x5 pad 2, maxpool 2, conv 64 3x3 pad 1, maxpool 2, dense 4096, dense 4096, dense 10
   (relu), momentum SGD. The fully connected layers hold 99.8 % of the 33.7 M parameters, as in
   AlexNet. The job runs in this process on LocalRuntime (``mariana.engine.run``, ``workers=P``,
   the job's own placement). ``PartitionVertex.compute`` and ``ParameterShardVertex.compute``
   are wrapped (here, not in the package): at entry of each call the bytes *held* by every
   partition and parameter-shard vertex placed on the same worker are counted (unique arrays
   reachable from ``vertex.state_dict()`` / the shard's value and optimizer state, plus the
   arrays of the call's inbound messages, deduplicated by the memory of their base buffer), and
   ``tracemalloc`` (numpy reports its buffers to it) gives the *transient* peak inside the
   call above the level at entry. A worker's figure is the maximum over its calls of held +
   transient; the P=2 figure is the larger of its two workers. The input pipeline's vertices
   (reader, preprocess: they hold the data set) are left out. Held bytes are split into
   parameters + gradients + optimizer state (partition ``flat``/``grad``, shard ``value``/``state``),
   layer caches (activations, im2col buffers, masks), the batch and transfer pieces / inbound
   messages.
2. **Samples/s, 1 partition vs 2 partitions on 2 worker processes**, 1 BLAS thread per process
   (``OMP/OPENBLAS/MKL_NUM_THREADS=1`` in the environment of the measuring child; the cluster
   workers inherit it), same model and batch as figure 1. P=1 runs on the *cluster* runtime with
   1 worker process (so both sides pay the same runtime: a worker process, the master's barrier,
   heartbeats; LocalRuntime P=1 is printed beside it for reference), P=2 on the cluster runtime
   with 2 workers. Step time = the median interval between the master's ``on_superstep``
   callbacks of the supersteps that report ``loss`` (one per step), after ``warm`` steps
   (process start-up, the data load and the first steps are excluded). Ceiling, same run: one
   plain numpy process doing the whole CNN forward + backward + momentum update at the same
   batch, vs two plain numpy processes at once, each doing half the output channels/units of
   every layer from the whole input (the partition's work: im2col of the whole input, a
   concatenation standing in for each gather and an add for each reduce-scatter, no transfer).
   Reported per round (3) and as the median of the per-round figures: engine speedup, ceiling
   speedup, engine/ceiling (target >= 0.8). Companion figures that survive a loaded machine: the
   same ratios from CPU seconds per step of the busiest process (``/proc/PID/stat`` of each
   worker, all threads; ``time.process_time`` in the numpy processes); they do not see idle
   waiting. The P=2 run's traces (``RUN/trace/worker-K.jsonl``, docs/traces.md) split each
   worker's step into vertex compute (partition / shard / input pipeline), encode + send, wait
   for peers, other, and the time outside its supersteps (barrier, master, idle).
3. **Pipeline overlap**: uint8 3x16x16 images, ``augment=true crop=2 mean=0.5 std=0.25``
   (decode to float32 + random crop + flip per sample in the preprocess vertex), a light CNN
   (conv 8 4x4 stride 4, dense 10), batch 4096, G=1 P=1 on ``--workers 2`` (cluster) so the
   reader and the preprocess vertex sit on the spare worker 1; ``pipeline=2`` vs ``pipeline=0``.
   The preprocessing share of a step is taken from the ``pipeline=0`` run's traces (time of the
   reader + preprocess vertices per step / step time), and cross-checked by timing
   ``mariana.vertices.train.data.decode`` on one batch here. Target: pipelined >= 1.2x the samples/s
   (median of 5 rounds, alternating which depth runs first). Companion: what two otherwise idle
   cores would allow, projected from CPU times (both workers' CPU per on-demand step over the
   busier worker's CPU per pipelined step).

BLAS variants: the measuring children run once with the environment as it is and once with
``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` removed for that child only (``--variants auto``,
the default, runs both only when one of them is set; ``both``/``env``/``unset`` force it). The
memory figure does not depend on BLAS and is measured once. Nothing outside the children's
environment is changed. The machine's load average is printed before and after every figure.

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
import time
from typing import Any

from common import BLAS_VARS, THREAD_VARS, blas_info, run_child, variant_envs

BENCH = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(BENCH))
OUT = os.path.join(ROOT, "bench", "out", "cnn_hybrid")
TARGETS = {"memory_ratio": 0.55, "engine_vs_ceiling": 0.8, "pipeline_speedup": 1.2, "prep_share": 1 / 3}
SEED, LR, MOMENTUM = 0, 0.01, 0.9
_T0 = time.perf_counter()


def progress(msg: str) -> None:
    tag = os.environ.get("CNN_BENCH_TAG", "")
    print(f"[{time.perf_counter() - _T0:7.1f}s]{' ' + tag if tag else ''} {msg}", file=sys.stderr, flush=True)


def sizes(quick: bool, smoke: bool = False) -> dict[str, Any]:
    """Models, batches and step counts of a full, a quick or a smoke run."""
    dense = 128 if smoke else 1024 if quick else 4096
    big = ["conv:32:5:1:2:relu", "maxpool:2", "conv:64:3:1:1:relu", "maxpool:2",
           f"dense:{dense}:relu", f"dense:{dense}:relu", "dense:10"]
    if smoke:  # the CI smoke run (bench/smoke.py): every code path, tiny sizes, figures meaningless
        return dict(
            big=big, image=[3, 32, 32], batch=16, samples=16 * 4, mem_steps=2, warm=1, steps=2, rounds=1, ceiling_steps=2,
            pipe_model=["conv:8:4:4:0:relu", "dense:10"], pipe_image=[3, 16, 16], pipe_batch=64,
            pipe_samples=64 * 4, pipe_warm=1, pipe_steps=2, pipe_rounds=1, crop=2, mean=0.5, std=0.25,
        )
    return dict(
        big=big, image=[3, 32, 32], batch=64, samples=64 * 16,
        mem_steps=3,
        warm=2, steps=5 if quick else 8, rounds=1 if quick else 3, ceiling_steps=5 if quick else 8,
        pipe_model=["conv:8:4:4:0:relu", "dense:10"], pipe_image=[3, 16, 16], pipe_batch=4096,
        pipe_samples=4096 * 6, pipe_warm=3, pipe_steps=8 if quick else 15, pipe_rounds=1 if quick else 5, crop=2, mean=0.5, std=0.25,
    )


def big_config(sz: dict[str, Any], data: str, partitions: int, steps: int) -> dict[str, Any]:
    return {"data": data, "model": sz["big"], "partitions": partitions, "groups": 1, "batch_size": sz["batch"],
            "steps": steps, "test_fraction": 0.0, "optimizer": "momentum", "lr": LR, "momentum": MOMENTUM,
            "seed": SEED}


def pipe_config(sz: dict[str, Any], data: str, depth: int, steps: int) -> dict[str, Any]:
    return {"data": data, "model": sz["pipe_model"], "partitions": 1, "groups": 1, "batch_size": sz["pipe_batch"],
            "steps": steps, "test_fraction": 0.0, "augment": True, "crop": sz["crop"], "mean": sz["mean"],
            "std": sz["std"], "pipeline": depth, "optimizer": "momentum", "lr": LR, "momentum": MOMENTUM,
            "seed": SEED}



def load() -> float:
    return round(os.getloadavg()[0], 2)


# ================================================================================================
# Figure 1: memory (child process, LocalRuntime in-process)
# ================================================================================================
class MemoryProbe:
    """Held + transient bytes around every partition / shard ``compute`` (see the module docstring)."""

    def __init__(self, placement: Any) -> None:
        import tracemalloc

        self.tm = tracemalloc
        self.placement = placement
        self.vertices: dict[int, dict[str, Any]] = {}
        self.peak: dict[Any, dict[str, Any]] = {}  # by worker, and by (worker, 'plan' | 'shard')
        self.calls = 0

    @staticmethod
    def _walk(obj: Any, category: str, seen: dict[int, tuple[str, int]]) -> None:
        import numpy as np

        if isinstance(obj, np.ndarray):
            root = obj
            while isinstance(root.base, np.ndarray):
                root = root.base
            key = root.__array_interface__["data"][0]
            if key not in seen and root.nbytes:
                seen[key] = (category, int(root.nbytes))
        elif isinstance(obj, dict):
            for v in obj.values():
                MemoryProbe._walk(v, category, seen)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                MemoryProbe._walk(v, category, seen)

    def held(self, worker: int, messages: list[Any]) -> dict[str, int]:
        seen: dict[int, tuple[str, int]] = {}
        parts = [v for v in self.vertices.get(worker, {}).values() if hasattr(v, "plan")]
        shards = [v for v in self.vertices.get(worker, {}).values() if not hasattr(v, "plan")]
        for v in parts:  # parameters first: views of flat/grad are the layers' params and grads
            self._walk([v.flat, v.grad], "params", seen)
        for s in shards:
            self._walk([s.value, s.state], "params", seen)
        for v in parts:
            st = v.state_dict()
            self._walk([st.get("layer_caches"), st.get("loss_cache")], "caches", seen)
            self._walk(st.get("batches"), "batch", seen)
            self._walk([st.get("pieces"), st.get("mine"), st.get("act")], "transfer", seen)
            self._walk({k: x for k, x in st.items() if k not in ("flat", "grad", "layer_caches", "loss_cache",
                                                                   "batches", "pieces", "mine", "act")},
                       "other", seen)
        self._walk([m.payload for m in messages], "inbox", seen)
        out: dict[str, int] = {}
        for cat, n in seen.values():
            out[cat] = out.get(cat, 0) + n
        return out

    def wrap(self, cls: Any) -> Any:
        orig = cls.compute
        probe = self

        def compute(vertex: Any, ctx: Any, messages: list[Any]) -> None:
            w = probe.placement.worker_of(vertex.id)
            probe.vertices.setdefault(w, {})[vertex.id] = vertex
            held = probe.held(w, messages)
            level = probe.tm.get_traced_memory()[0]
            probe.tm.reset_peak()
            orig(vertex, ctx, messages)
            transient = max(0, probe.tm.get_traced_memory()[1] - level)
            total = sum(held.values()) + transient
            probe.calls += 1
            rec = {"total": total, "held": held, "transient": transient, "vertex": vertex.id,
                   "superstep": ctx.superstep}
            for key in (w, (w, "plan" if hasattr(vertex, "plan") else "shard")):
                best = probe.peak.get(key)
                if best is None or total > best["total"]:
                    probe.peak[key] = rec

        cls.compute = compute
        return orig


def child_memory(spec: dict[str, Any]) -> dict[str, Any]:
    import tracemalloc

    from mariana.engine import run as mariana_run
    from mariana.jobs import get_job, resolve_config
    from mariana.jobs.registry import BuildContext
    from mariana.vertices.train.exchange import ParameterShardVertex
    from mariana.vertices.train.partition import PartitionVertex

    sz, job = spec["sizes"], get_job("cnn-hybrid")
    out: dict[str, Any] = {"load_start": load()}
    for parts in (1, 2):
        progress(f"fig 1: P={parts}, LocalRuntime workers={parts}, {sz['mem_steps']} steps, tracemalloc on")
        config = resolve_config(job, big_config(sz, spec["data"], parts, sz["mem_steps"]), [])
        graph = job.build(config, BuildContext(workers=parts))
        placement = graph.place(parts)
        probe = MemoryProbe(placement)
        originals = {cls: probe.wrap(cls) for cls in (PartitionVertex, ParameterShardVertex)}
        tracemalloc.start()
        try:
            t = time.perf_counter()
            res = mariana_run(graph, workers=parts)
            wall = time.perf_counter() - t
            process_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            for cls, fn in originals.items():
                cls.compute = fn  # type: ignore[method-assign]
        ids = sorted(graph.vertex_ids())
        workers = sorted(k for k in probe.peak if isinstance(k, int))
        per_worker = {str(w): dict(probe.peak[w], vertices=[v for v in ids if placement.worker_of(v) == w
                                                            and not v.startswith(("reader-", "prep-"))],
                                   in_partition=probe.peak.get((w, "plan")), in_shard=probe.peak.get((w, "shard")))
                      for w in workers}
        out[f"P{parts}"] = {"workers": per_worker, "peak": max(probe.peak[w]["total"] for w in workers),
                            "calls": probe.calls, "supersteps": res.supersteps, "wall_s": wall, "process_peak": process_peak,
                            "num_params": int(sum(v.plan.num_params for w in probe.vertices.values()
                                                  for v in w.values() if hasattr(v, "plan")))}
        del graph, res, probe
    out["ratio"] = out["P2"]["peak"] / out["P1"]["peak"]
    out["load_end"] = load()
    return out


# ================================================================================================
# Figures 2 and 3: timing (child process per BLAS variant; cluster runs and numpy processes)
# ================================================================================================
def engine_run(config: dict[str, Any], workers: int, runtime: str, run_dir: str, warm: int) -> dict[str, Any]:
    """One job run; steady step times from the master's on_superstep stamps at the ``loss`` lines."""
    import shutil

    from mariana.jobs.launch import run_job
    from mariana.storage import RunDir

    shutil.rmtree(run_dir, ignore_errors=True)
    stamps: list[tuple[float, int, list[float]]] = []
    pids: list[int] = []

    def on_superstep(rec: dict[str, Any]) -> None:
        if "loss" in rec:  # one line per step: read the CPU time of the worker processes too
            stamps.append((time.perf_counter(), rec["superstep"], [proc_cpu(pid) for pid in pids] + [self_cpu()]))

    opts: dict[str, Any] = {}
    if runtime == "cluster":
        opts = {"worker_timeout": 120, "on_start": lambda master, procs: pids.extend(p.pid for p in procs)}
    t = time.perf_counter()
    l0 = load()
    res = run_job("cnn-hybrid", dict(config), workers=workers, runtime=runtime, run_dir=RunDir(run_dir),
                  on_superstep=on_superstep, **opts)
    run_s = time.perf_counter() - t
    steps = len(stamps)
    if steps <= warm + 1:
        raise SystemExit(f"only {steps} steps reported a loss; need more than warm={warm}")
    durs = [b[0] - a[0] for a, b in zip(stamps, stamps[1:])]
    window = stamps[-1][0] - stamps[warm][0]
    n = steps - 1 - warm
    step = statistics.median(durs[warm:])
    cpu = [(b - a) / n for a, b in zip(stamps[warm][2], stamps[-1][2])]
    return {"step_s": step, "mean_step_s": window / n, "durs": durs, "steps": steps,
            "window_steps": n, "supersteps_per_step": (stamps[-1][1] - stamps[warm][1]) / n,
            "window": [stamps[warm][1], stamps[-1][1]], "run_s": run_s, "supersteps": res.supersteps,
            "samples_per_s": config["batch_size"] / step, "run_dir": run_dir, "load": [l0, load()],
            # CPU seconds per step: each worker process (all its threads), then this (master) process
            "worker_cpu_s": cpu[:-1] if pids else cpu, "master_cpu_s": cpu[-1] if pids else 0.0}


def proc_cpu(pid: int) -> float:
    """utime + stime of process ``pid`` (all threads), seconds; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu() -> float:
    t = os.times()
    return t.user + t.system


def trace_breakdown(run_dir: str, window: list[int], steps: int, step_s: float) -> dict[str, Any]:
    """Per worker, seconds per step in each phase over supersteps (window[0], window[1]]."""
    lo, hi = window
    tdir = os.path.join(run_dir, "trace")
    master = [json.loads(line) for line in open(os.path.join(tdir, "master.jsonl"))]
    master = [r for r in master if "event" not in r and lo < r["superstep"] <= hi]
    out: dict[str, Any] = {"master_wall_s": sum(r["wall_s"] for r in master) / steps, "workers": {}}
    stragglers: dict[str, int] = {}
    for r in master:
        stragglers[str(r.get("straggler"))] = stragglers.get(str(r.get("straggler")), 0) + 1
    out["straggler_counts"] = stragglers
    for name in sorted(os.listdir(tdir)):
        if not name.startswith("worker-"):
            continue
        recs = [json.loads(line) for line in open(os.path.join(tdir, name))]
        recs = [r for r in recs if lo < r["superstep"] <= hi]
        ph = {k: sum(r.get(k, 0.0) for r in recs) / steps
              for k in ("compute_s", "combine_s", "encode_s", "send_s", "wait_s", "barrier_s")}
        ph["span_s"] = sum(r["end"] - r["start"] for r in recs) / steps
        ph["other_s"] = ph["span_s"] - sum(ph[k] for k in ("compute_s", "combine_s", "encode_s", "send_s", "wait_s"))
        ph["outside_s"] = step_s - ph["span_s"]  # between DONE and the next BEGIN: barrier, master, idle
        kinds: dict[str, float] = {}
        for r in recs:
            for vid, s in r.get("slowest", []):
                kind = vid.split("-")[0]
                kinds[kind] = kinds.get(kind, 0.0) + s / steps
        ph["vertex_s"] = kinds
        ph["bytes_out"] = sum(sum(r.get("bytes_out", {}).values()) for r in recs) / steps
        out["workers"][name[len("worker-"):-len(".jsonl")]] = ph
    return out


def run_procs(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Start children at once (inheriting this env) and collect their JSON answers."""
    procs = [subprocess.Popen([sys.executable, BENCH, "--child", json.dumps(s)], stdout=subprocess.PIPE)
             for s in specs]
    outs = []
    for p in procs:
        stdout, _ = p.communicate(timeout=600)
        if p.returncode:
            raise RuntimeError(f"numpy child failed with code {p.returncode}")
        outs.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    return outs


# -- the plain numpy CNN (the ceiling) -----------------------------------------------------------
def parse_entry(entry: str) -> dict[str, Any]:
    f = entry.split(":")
    act = f[-1] if f[-1] in ("relu",) else None
    nums = [int(v) for v in f[1:] if v.isdigit()]
    if f[0] == "conv":
        out, k = nums[0], nums[1]
        stride = nums[2] if len(nums) > 2 else 1
        pad = nums[3] if len(nums) > 3 else 0
        return {"kind": "conv", "out": out, "k": k, "stride": stride, "pad": pad, "act": act}
    if f[0] == "maxpool":
        return {"kind": "maxpool", "k": nums[0]}
    if f[0] == "dense":
        return {"kind": "dense", "out": nums[0], "act": act}
    raise ValueError(f"the ceiling knows conv, maxpool and dense, not {entry!r}")


class NumpyCNN:
    """Slice ``part`` of ``parts`` of every conv/dense layer from the whole input, forward + backward
    + momentum SGD; a concatenation stands in for every gather and an add for every reduce-scatter."""

    def __init__(self, model: list[str], image: list[int], parts: int, batch: int) -> None:
        import numpy as np

        self.np, self.parts = np, parts
        rng = np.random.default_rng(SEED)
        shape = tuple(image)  # (C, H, W) or (F,), of the whole activation
        self.layers: list[dict[str, Any]] = []
        first = True
        for entry in model:
            e = parse_entry(entry)
            if e["kind"] == "maxpool":
                c, h, w = shape
                shape = (c, h // e["k"], w // e["k"])
                self.layers.append(e)
                continue
            out = e["out"] // parts
            if e["kind"] == "conv":
                c, h, w = shape
                k, s, p = e["k"], e["stride"], e["pad"]
                oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
                e["W"] = (rng.standard_normal((out, c * k * k)) * np.sqrt(2 / (c * k * k))).astype(np.float32)
                whole_out: tuple[int, ...] = (e["out"], oh, ow)
            else:
                fan_in = int(np.prod(shape))
                e["W"] = (rng.standard_normal((fan_in, out)) * np.sqrt(2 / fan_in)).astype(np.float32)
                whole_out = (e["out"],)
            e["b"] = np.zeros(out, np.float32)
            e["vW"], e["vb"] = np.zeros_like(e["W"]), np.zeros_like(e["b"])
            e["first"] = first
            # stand-ins for the other partitions' pieces of this layer's (whole) input
            e["in_shape"] = shape
            if not first and parts > 1:
                own = (shape[0] // parts, *shape[1:])
                e["others"] = (0.1 * rng.standard_normal((batch, shape[0] - own[0], *shape[1:]))).astype(np.float32)
                e["others_grad"] = [(1e-4 * rng.standard_normal((batch, *own))).astype(np.float32)
                                    for _ in range(parts - 1)]
            first = False
            shape = whole_out
            self.layers.append(e)
        self.classes = shape[0]
        if parts > 1:
            self.other_logits = 0.1 * rng.standard_normal((batch, self.classes - self.classes // parts)).astype(np.float32)

    def step(self, x: Any, y: Any) -> float:
        np = self.np
        for e in self.layers:
            if e["kind"] == "maxpool":
                n, c, h, w = x.shape
                k = e["k"]
                xr = x.reshape(n, c, h // k, k, w // k, k)
                out = xr.max(axis=(3, 5))
                e["mask"] = xr == out[:, :, :, None, :, None]
                x = out
                continue
            if not e["first"] and self.parts > 1:  # gather: own slice + the others' pieces
                own = x.reshape(x.shape[0], -1) if len(e["in_shape"]) == 1 else x
                x = np.concatenate([own, e["others"].reshape(own.shape[0], -1) if own.ndim == 2 else e["others"]],
                                   axis=1)
            if e["kind"] == "conv":
                n, c, h, w = x.shape
                k, s, p = e["k"], e["stride"], e["pad"]
                xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p))) if p else x
                win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::s, ::s]
                oh, ow = win.shape[2:4]
                cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * k * k)
                out = cols @ e["W"].T + e["b"]
                e["cache"] = (cols, xp.shape, x.shape, oh, ow)
                x = np.ascontiguousarray(out.reshape(n, oh, ow, -1).transpose(0, 3, 1, 2))
            else:
                x = x.reshape(x.shape[0], -1)
                e["cache"] = x
                x = x @ e["W"] + e["b"]
            if e["act"] == "relu":
                e["relu"] = x > 0
                x = x * e["relu"]
        logits = np.concatenate([x, self.other_logits], axis=1) if self.parts > 1 else x
        z = logits - logits.max(axis=1, keepdims=True)
        pz = np.exp(z)
        pz /= pz.sum(axis=1, keepdims=True)
        n = len(y)
        loss = float(-np.log(pz[np.arange(n), y] + 1e-12).mean())
        pz[np.arange(n), y] -= 1
        d = pz[:, : x.shape[1]] / n
        for e in reversed(self.layers):
            if e["kind"] == "maxpool":
                n_, c, oh, ow = d.shape
                k = e["k"]
                d = (e["mask"] * d[:, :, :, None, :, None]).reshape(n_, c, oh * k, ow * k)
                continue
            if e["act"] == "relu":
                d = d * e["relu"]
            if e["kind"] == "conv":
                cols, pshape, xshape, oh, ow = e["cache"]
                n_, o = d.shape[:2]
                d2 = d.transpose(0, 2, 3, 1).reshape(-1, o)
                gW, gb = d2.T @ cols, d2.sum(axis=0)
                if not e["first"]:
                    k, s, p = e["k"], e["stride"], e["pad"]
                    dcols = (d2 @ e["W"]).reshape(n_, oh, ow, xshape[1], k, k)
                    dxp = np.zeros(pshape, np.float32)
                    for i in range(k):
                        for j in range(k):
                            dxp[:, :, i:i + s * (oh - 1) + 1:s, j:j + s * (ow - 1) + 1:s] += \
                                dcols[:, :, :, :, i, j].transpose(0, 3, 1, 2)
                    dx = dxp[:, :, p:p + xshape[2], p:p + xshape[3]] if p else dxp
            else:
                xin = e["cache"]
                gW, gb = xin.T @ d, d.sum(axis=0)
                if not e["first"]:
                    dx = d @ e["W"].T
            for key, g in (("W", gW), ("b", gb)):  # momentum SGD: v = m v + g; p -= lr v
                v = e["v" + key]
                v *= MOMENTUM
                v += g
                e[key] -= LR * v
            if e["first"]:
                break
            if self.parts > 1:  # reduce-scatter: own slice of the partial d(input) + the others' partials
                width = dx.shape[1] // self.parts
                d = dx[:, :width].copy()
                for other in e["others_grad"]:
                    d += other.reshape(d.shape)
            else:
                d = dx
            if len(e["in_shape"]) == 3 and d.ndim == 2:
                d = d.reshape(d.shape[0], -1, *e["in_shape"][1:])
        return loss


def child_numpy(spec: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    sz = spec["sizes"]
    net = NumpyCNN(sz["big"], sz["image"], spec["parts"], sz["batch"])
    rng = np.random.default_rng(SEED + spec.get("rank", 0))
    x = rng.standard_normal((sz["batch"], *sz["image"])).astype(np.float32)
    y = rng.integers(0, net.classes, sz["batch"])
    if spec.get("barrier"):  # start together: both files exist
        open(os.path.join(spec["barrier"], str(spec["rank"])), "w").close()
        while len(os.listdir(spec["barrier"])) < spec["parties"]:
            time.sleep(0.001)
    durs, cpus = [], []
    for _ in range(sz["warm"] + spec["steps"]):
        t, c = time.perf_counter(), time.process_time()
        net.step(x, y)
        durs.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    steady = durs[sz["warm"]:]
    return {"step_s": statistics.median(steady), "mean_step_s": sum(steady) / len(steady), "durs": durs,
            "cpu_s": sum(cpus[sz["warm"]:]) / len(steady)}


def ceiling(sz: dict[str, Any]) -> dict[str, Any]:
    import tempfile

    base = {"role": "numpy", "sizes": sz, "steps": sz["ceiling_steps"]}
    l0 = load()
    one = run_procs([dict(base, parts=1)])[0]
    with tempfile.TemporaryDirectory() as bar:
        two = run_procs([dict(base, parts=2, rank=r, barrier=bar, parties=2) for r in range(2)])
    worst = max(t["step_s"] for t in two)
    return {"one_s": one["step_s"], "two_s": [t["step_s"] for t in two], "speedup": one["step_s"] / worst,
            "one_cpu_s": one["cpu_s"], "two_cpu_s": [t["cpu_s"] for t in two],
            "cpu_speedup": one["cpu_s"] / max(t["cpu_s"] for t in two), "load": [l0, load()]}


def median_index(xs: list[float]) -> int:
    """Index of the median element (the lower middle one for an even count)."""
    order = sorted(range(len(xs)), key=xs.__getitem__)
    return order[(len(xs) - 1) // 2]


def child_timing(spec: dict[str, Any]) -> dict[str, Any]:
    sz, tag = spec["sizes"], spec["tag"]
    out: dict[str, Any] = {"blas": blas_info(), "threads": {k: os.environ.get(k) for k in THREAD_VARS}}
    steps = sz["warm"] + sz["steps"] + 1
    rounds: list[dict[str, Any]] = []
    for r in range(sz["rounds"] if 2 in spec["figures"] else 0):
        rd: dict[str, Any] = {}
        progress(f"fig 2 round {r + 1}/{sz['rounds']}: P=1, cluster, 1 worker, {steps} steps")
        rd["p1"] = engine_run(big_config(sz, spec["data"], 1, steps), 1, "cluster",
                              os.path.join(OUT, f"run-{tag}-p1"), sz["warm"])
        progress(f"fig 2 round {r + 1}/{sz['rounds']}: P=2, cluster, 2 workers, {steps} steps")
        rd["p2"] = engine_run(big_config(sz, spec["data"], 2, steps), 2, "cluster",
                              os.path.join(OUT, f"run-{tag}-p2"), sz["warm"])
        rd["p2"]["trace"] = trace_breakdown(rd["p2"]["run_dir"], rd["p2"]["window"], rd["p2"]["window_steps"],
                                           rd["p2"]["mean_step_s"])
        rd["p1"]["trace"] = trace_breakdown(rd["p1"]["run_dir"], rd["p1"]["window"], rd["p1"]["window_steps"],
                                           rd["p1"]["mean_step_s"])
        progress(f"fig 2 round {r + 1}/{sz['rounds']}: ceiling, plain numpy 1 process (whole) then 2 (halves)")
        rd["ceiling"] = ceiling(sz)
        rd["engine_speedup"] = rd["p1"]["step_s"] / rd["p2"]["step_s"]
        rd["engine_vs_ceiling"] = rd["engine_speedup"] / rd["ceiling"]["speedup"]
        # load-robust companion: CPU seconds per step of the busiest process instead of wall time
        rd["engine_cpu_speedup"] = max(rd["p1"]["worker_cpu_s"]) / max(rd["p2"]["worker_cpu_s"])
        rd["engine_vs_ceiling_cpu"] = rd["engine_cpu_speedup"] / rd["ceiling"]["cpu_speedup"]
        rounds.append(rd)
    if rounds:
        progress(f"fig 2 reference: P=1 on LocalRuntime, {steps} steps")
        out["p1_local"] = engine_run(big_config(sz, spec["data"], 1, steps), 1, "local",
                                     os.path.join(OUT, f"run-{tag}-p1-local"), sz["warm"])
        out["fig2"] = {"rounds": rounds, "median_round": median_index([rd["engine_vs_ceiling"] for rd in rounds]),
                       "engine_vs_ceiling": statistics.median(rd["engine_vs_ceiling"] for rd in rounds),
                       "engine_speedup": statistics.median(rd["engine_speedup"] for rd in rounds),
                       "ceiling_speedup": statistics.median(rd["ceiling"]["speedup"] for rd in rounds),
                       "engine_cpu_speedup": statistics.median(rd["engine_cpu_speedup"] for rd in rounds),
                       "ceiling_cpu_speedup": statistics.median(rd["ceiling"]["cpu_speedup"] for rd in rounds),
                       "engine_vs_ceiling_cpu": statistics.median(rd["engine_vs_ceiling_cpu"] for rd in rounds)}
    if 3 not in spec["figures"]:
        return out

    # -- figure 3 ------------------------------------------------------------------------------
    psteps = sz["pipe_warm"] + sz["pipe_steps"] + 1
    prounds: list[dict[str, Any]] = []
    for r in range(sz["pipe_rounds"]):
        prd: dict[str, Any] = {}
        for depth in ((0, 2) if r % 2 == 0 else (2, 0)):  # alternate which goes first
            progress(f"fig 3 round {r + 1}/{sz['pipe_rounds']}: pipeline={depth}, G=1 P=1, cluster 2 workers "
                     f"(input pipeline on worker 1), {psteps} steps")
            run = engine_run(pipe_config(sz, spec["pipe_data"], depth, psteps), 2, "cluster",
                             os.path.join(OUT, f"run-{tag}-pipe{depth}"), sz["pipe_warm"])
            run["trace"] = trace_breakdown(run["run_dir"], run["window"], run["window_steps"], run["mean_step_s"])
            prd[f"pipeline{depth}"] = run
        p0 = prd["pipeline0"]
        prd["prep_s_trace"] = sum(p0["trace"]["workers"].get("1", {}).get("vertex_s", {}).get(k, 0.0)
                                 for k in ("reader", "prep"))
        prd["prep_share"] = prd["prep_s_trace"] / p0["step_s"]
        prd["speedup"] = prd["pipeline2"]["samples_per_s"] / p0["samples_per_s"]
        # what two free cores would allow (a projection from CPU times, not the measured figure):
        # on demand the workers take turns, pipelined they overlap
        c0, c2 = p0["worker_cpu_s"], prd["pipeline2"]["worker_cpu_s"]
        prd["cpu_projection"] = sum(c0) / max(c2) if max(c2) > 0 else float("nan")  # 0: too short to measure
        prounds.append(prd)
    fig3: dict[str, Any] = {"rounds": prounds, "median_round": median_index([rd["speedup"] for rd in prounds]),
                            "speedup": statistics.median(rd["speedup"] for rd in prounds),
                            "prep_share": statistics.median(rd["prep_share"] for rd in prounds),
                            "cpu_projection": statistics.median(rd["cpu_projection"] for rd in prounds)}
    fig3["decode_s_direct"] = time_decode(sz, spec["pipe_data"])
    fig3["decode_share_direct"] = fig3["decode_s_direct"] / statistics.median(
        rd["pipeline0"]["step_s"] for rd in prounds)
    out["fig3"] = fig3
    return out


def time_decode(sz: dict[str, Any], data: str, reps: int = 7) -> float:
    """``decode`` of one batch as the preprocess vertex calls it, best of ``reps``."""
    import numpy as np

    from mariana.vertices.train.data import decode

    with np.load(data) as npz:
        x = npz["x"][: sz["pipe_batch"]]
    best = float("inf")
    for i in range(reps):
        t = time.perf_counter()
        decode(x, 1 / 255, sz["mean"], sz["std"], sz["crop"], np.random.default_rng([SEED, i]), True,
               np.arange(len(x)), len(x))
        best = min(best, time.perf_counter() - t)
    return best


def child_main(spec: dict[str, Any]) -> None:
    os.environ["CNN_BENCH_TAG"] = spec.get("tag", "")
    fn = {"memory": child_memory, "timing": child_timing, "numpy": child_numpy}[spec["role"]]
    sys.stdout.write(json.dumps(fn(spec)) + "\n")


# ================================================================================================
# Orchestrating side
# ================================================================================================
def write_data(sz: dict[str, Any]) -> tuple[str, str]:
    import numpy as np

    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(SEED)
    big = os.path.join(OUT, "cifar-like-f32.npz")
    np.savez(big, x=rng.standard_normal((sz["samples"], *sz["image"]), dtype=np.float32),
             y=rng.integers(0, 10, sz["samples"]))
    pipe = os.path.join(OUT, "images-u8.npz")
    np.savez(pipe, x=rng.integers(0, 256, (sz["pipe_samples"], *sz["pipe_image"]), dtype=np.uint8),
             y=rng.integers(0, 10, sz["pipe_samples"]))
    return big, pipe



def one_thread(env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in env.items() if k not in THREAD_VARS}
    env.update({k: "1" for k in THREAD_VARS})
    return env


def measure(args: argparse.Namespace) -> dict[str, Any]:
    sz = sizes(args.quick, args.smoke)
    result: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_avg_start": list(os.getloadavg())},
        "config": dict(sz, quick=args.quick, smoke=args.smoke, lr=LR, momentum=MOMENTUM),
        "blas_env": {k: os.environ.get(k) for k in BLAS_VARS},
        "variants": {},
    }
    progress(f"writing synthetic data under {OUT}")
    big, pipe = write_data(sz)
    envs = variant_envs(args.variants or ("env" if args.smoke else "auto"))
    figures = {int(f) for f in args.figures.split(",")}
    result["figures"] = sorted(figures)
    if 1 in figures:
        result["memory"] = run_child(BENCH, {"role": "memory", "sizes": sz, "data": big, "tag": "mem"}, one_thread(envs[0][1]))
    for name, env in envs if figures & {2, 3} else []:
        progress(f"variant {name}: " + ", ".join(f"{k}={env.get(k, '<unset>')}" for k in BLAS_VARS))
        v = run_child(BENCH, {"role": "timing", "sizes": sz, "data": big, "pipe_data": pipe, "tag": name,
                           "figures": sorted(figures)}, one_thread(env))
        v["env"] = {k: env.get(k) for k in BLAS_VARS}
        result["variants"][name] = v
    result["machine"]["load_avg_end"] = list(os.getloadavg())
    result["total_s"] = time.perf_counter() - _T0
    return result


# ------------------------------------------------------------------------------------------------
def _mb(n: float) -> str:
    return f"{n / 2**20:.1f}"


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f}"


def ok(x: float, target: float, below: bool = False) -> str:
    return "ok" if (x <= target if below else x >= target) else "MISSED"


def report(res: dict[str, Any]) -> str:
    lines: list[str] = []
    m, c = res["machine"], res["config"]
    lines.append(f"cnn-hybrid benchmark ({'smoke' if c.get('smoke') else 'quick' if c['quick'] else 'full'}), python {m['python']}, "
                 f"{m['cpus']} cpus, load average start {m['load_avg_start'][0]:.2f} / end {m['load_avg_end'][0]:.2f} "
                 f"(1-min), total {res['total_s']:.0f} s")
    lines.append("environment: " + ", ".join(f"{k}={v}" for k, v in res["blas_env"].items()))
    lines.append(f"model (figures 1-2): {' '.join(c['big'])}; input {'x'.join(map(str, c['image']))} float32, "
                 f"batch {c['batch']}, momentum SGD")
    mem = res.get("memory")
    if mem:
        lines.append("")
        lines.append(f"1. peak array memory per worker (partition + its shards), MiB  "
                     f"[load {mem['load_start']} -> {mem['load_end']}]")
        cats = ("params", "caches", "transfer", "batch", "inbox", "other")
        lines.append(f"   {'':16} {'peak':>8} {'held':>8} " + " ".join(f"{k:>9}" for k in cats)
                     + f" {'transient':>9}  at")
        for parts in (1, 2):
            r = mem[f"P{parts}"]
            for w, p in r["workers"].items():
                for label, q in (("", p), (" in part", p.get("in_partition")), (" in shard", p.get("in_shard"))):
                    if not q or (label and q["vertex"] == p["vertex"] and q["superstep"] == p["superstep"]):
                        continue
                    held = q["held"]
                    lines.append(f"   {f'P={parts} w{w}{label}':<16} {_mb(q['total']):>8} {_mb(sum(held.values())):>8} "
                                 + " ".join(f"{_mb(held.get(k, 0)):>9}" for k in cats)
                                 + f" {_mb(q['transient']):>9}  {q['vertex']} ss {q['superstep']}")
        lines.append(f"   params per partition: P=1 {mem['P1']['num_params']:,}, P=2 {mem['P2']['num_params'] // 2:,} "
                     f"each")
        lines.append(f"   peak P=2 / P=1 = {_mb(mem['P2']['peak'])} / {_mb(mem['P1']['peak'])} MiB = "
                     f"{mem['ratio']:.3f}  (target <= {TARGETS['memory_ratio']}: {ok(mem['ratio'], TARGETS['memory_ratio'], True)};"
                     f" Mariana 0.54)")
    for name, v in res["variants"].items():
        lines.append("")
        lines.append(f"== BLAS variant '{name}': " + ", ".join(f"{k}={x}" for k, x in v["env"].items())
                     + "; threads " + ",".join(f"{k}={x}" for k, x in v["threads"].items() if x))
        for b in v["blas"]:
            lines.append(f"   blas: {b}")
        f2 = v.get("fig2")
        if f2:
            lines.extend(_fig2_lines(v, f2, c))
        f3 = v.get("fig3")
        if f3:
            lines.extend(_fig3_lines(f3, c))
    lines.append("")
    lines.extend(summary(res))
    return "\n".join(lines)


def _phases(ph: dict[str, Any]) -> str:
    verts = ", ".join(f"{k} {_ms(x)}" for k, x in sorted(ph["vertex_s"].items()))
    return (f"compute {_ms(ph['compute_s'])} ({verts}), encode+send {_ms(ph['encode_s'] + ph['send_s'])}, "
            f"wait for peers {_ms(ph['wait_s'])}, other {_ms(ph['other_s'])}, outside supersteps (barrier, idle) "
            f"{_ms(ph['outside_s'])}")


def _fig2_lines(v: dict[str, Any], f2: dict[str, Any], c: dict[str, Any]) -> list[str]:
    lines = [f"2. samples/s, 1 BLAS thread per process, batch {c['batch']} (median step after {c['warm']} warm-up "
             f"steps; engine: master on_superstep stamps at the loss lines)"]
    for i, rd in enumerate(f2["rounds"]):
        p1, p2, ce = rd["p1"], rd["p2"], rd["ceiling"]
        lines.append(f"   round {i + 1}: engine P=1 (cluster, 1 worker) {_ms(p1['step_s'])} ms/step = "
                     f"{p1['samples_per_s']:.1f} samples/s [load {p1['load'][0]}->{p1['load'][1]}]; "
                     f"P=2 (cluster, 2 workers) {_ms(p2['step_s'])} ms = {p2['samples_per_s']:.1f} samples/s "
                     f"[load {p2['load'][0]}->{p2['load'][1]}]")
        lines.append(f"            ceiling: numpy 1 process (whole) {_ms(ce['one_s'])} ms, 2 processes (halves) "
                     + " / ".join(_ms(t) for t in ce["two_s"]) + f" ms [load {ce['load'][0]}->{ce['load'][1]}]")
        lines.append(f"            engine speedup {rd['engine_speedup']:.3f}, ceiling speedup {ce['speedup']:.3f}, "
                     f"engine/ceiling {rd['engine_vs_ceiling']:.3f}")
        lines.append("            CPU s/step of the busiest process: engine P=1 "
                     + "/".join(_ms(x) for x in p1["worker_cpu_s"]) + " ms, P=2 "
                     + "/".join(_ms(x) for x in p2["worker_cpu_s"]) + f" ms (master {_ms(p2['master_cpu_s'])}); "
                     f"numpy {_ms(ce['one_cpu_s'])} vs " + "/".join(_ms(x) for x in ce["two_cpu_s"])
                     + f" ms; CPU speedups engine {rd['engine_cpu_speedup']:.3f}, ceiling {ce['cpu_speedup']:.3f}, "
                     f"ratio {rd['engine_vs_ceiling_cpu']:.3f}")
    med = f2["rounds"][f2["median_round"]]
    t = TARGETS["engine_vs_ceiling"]
    lines.append(f"   MEDIAN over rounds: engine speedup {f2['engine_speedup']:.3f}, ceiling speedup "
                 f"{f2['ceiling_speedup']:.3f}, engine/ceiling {f2['engine_vs_ceiling']:.3f} "
                 f"(target >= {t}: {ok(f2['engine_vs_ceiling'], t)})")
    lines.append(f"   MEDIAN by CPU time instead of wall time (load-robust, ignores idle waiting): engine "
                 f"{f2['engine_cpu_speedup']:.3f}, ceiling {f2['ceiling_cpu_speedup']:.3f}, engine/ceiling "
                 f"{f2['engine_vs_ceiling_cpu']:.3f}")
    lines.append(f"   reference: P=1 on LocalRuntime {_ms(v['p1_local']['step_s'])} ms/step; engine P=1 (cluster) / "
                 f"numpy whole, time ratio {med['p1']['step_s'] / med['ceiling']['one_s']:.3f} (median round)")
    for label, run in (("P=2", med["p2"]), ("P=1", med["p1"])):
        tr = run["trace"]
        lines.append(f"   where a {label} step goes (median round, traces, ms/step; {run['supersteps_per_step']:.1f} "
                     f"supersteps/step, step {_ms(run['step_s'])} median / {_ms(run['mean_step_s'])} mean; stragglers "
                     f"{tr['straggler_counts']}):")
        for w, ph in tr["workers"].items():
            lines.append(f"     worker {w}: {_phases(ph)}; sent {_mb(ph['bytes_out'])} MiB/step")
    return lines


def _fig3_lines(f3: dict[str, Any], c: dict[str, Any]) -> list[str]:
    lines = [f"3. input pipeline: uint8 {'x'.join(map(str, c['pipe_image']))}, augment crop={c['crop']} + flip, "
             f"model {' '.join(c['pipe_model'])}, batch {c['pipe_batch']}, G=1 P=1, cluster 2 workers "
             f"(reader + preprocess on worker 1)"]
    for i, rd in enumerate(f3["rounds"]):
        p0, p2 = rd["pipeline0"], rd["pipeline2"]
        lines.append(f"   round {i + 1}: pipeline=0 {_ms(p0['step_s'])} ms/step = {p0['samples_per_s']:.0f} samples/s "
                     f"({p0['supersteps_per_step']:.1f} supersteps/step) [load {p0['load'][0]}->{p0['load'][1]}]; "
                     f"pipeline=2 {_ms(p2['step_s'])} ms/step = {p2['samples_per_s']:.0f} samples/s "
                     f"({p2['supersteps_per_step']:.1f} supersteps/step) [load {p2['load'][0]}->{p2['load'][1]}]")
        lines.append(f"            reader+prep {_ms(rd['prep_s_trace'])} ms/step = {rd['prep_share']:.2f} of the "
                     f"pipeline=0 step; pipelined / on demand samples/s {rd['speedup']:.3f}; CPU ms/step of workers "
                     f"0/1: pipeline=0 " + "/".join(_ms(x) for x in p0["worker_cpu_s"]) + ", pipeline=2 "
                     + "/".join(_ms(x) for x in p2["worker_cpu_s"]) + f" (projection {rd['cpu_projection']:.2f})")
    lines.append(f"   MEDIAN: preprocessing share of a pipeline=0 step {f3['prep_share']:.2f} (target >= 1/3: "
                 f"{ok(f3['prep_share'], TARGETS['prep_share'])}; decode() of one batch timed here: "
                 f"{_ms(f3['decode_s_direct'])} ms = {f3['decode_share_direct']:.2f}); pipelined / on demand samples/s "
                 f"{f3['speedup']:.3f} (target >= {TARGETS['pipeline_speedup']}: {ok(f3['speedup'], TARGETS['pipeline_speedup'])})")
    lines.append(f"   projection for two otherwise idle cores (CPU of both workers per pipeline=0 step / CPU of the "
                 f"busier worker per pipeline=2 step; not measured wall time): {f3['cpu_projection']:.2f}")
    med = f3["rounds"][f3["median_round"]]
    for label in ("pipeline0", "pipeline2"):
        for w, ph in med[label]["trace"]["workers"].items():
            lines.append(f"     {label} worker {w} (ms/step): {_phases(ph)}")
    return lines


def summary(res: dict[str, Any]) -> list[str]:
    """The three headline figures, one line each per BLAS variant."""
    lines = ["SUMMARY"]
    mem = res.get("memory")
    if mem:
        lines.append(f"  1. peak array memory per worker P=2 / P=1: {_mb(mem['P2']['peak'])} / {_mb(mem['P1']['peak'])} MiB"
                     f" = {mem['ratio']:.3f} (target <= {TARGETS['memory_ratio']}: "
                     f"{ok(mem['ratio'], TARGETS['memory_ratio'], True)})")
    for name, v in res["variants"].items():
        f2, f3 = v.get("fig2"), v.get("fig3")
        if f2:
            lines.append(f"  2. [{name}] samples/s speedup P=2 on 2 workers: engine {f2['engine_speedup']:.3f}, "
                         f"ceiling {f2['ceiling_speedup']:.3f}, engine/ceiling {f2['engine_vs_ceiling']:.3f} "
                         f"(target >= {TARGETS['engine_vs_ceiling']}: {ok(f2['engine_vs_ceiling'], TARGETS['engine_vs_ceiling'])}); "
                         f"by CPU time {f2['engine_vs_ceiling_cpu']:.3f}")
        if f3:
            lines.append(f"  3. [{name}] pipeline=2 / pipeline=0 samples/s {f3['speedup']:.3f} (target >= "
                         f"{TARGETS['pipeline_speedup']}: {ok(f3['speedup'], TARGETS['pipeline_speedup'])}), "
                         f"preprocessing share {f3['prep_share']:.2f}")
    m = res["machine"]
    lines.append(f"  load average (1 min) start {m['load_avg_start'][0]:.2f}, end {m['load_avg_end'][0]:.2f} on "
                 f"{m['cpus']} cpus")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="dense 1024 instead of 4096, fewer steps, 1 round")
    ap.add_argument("--smoke", action="store_true", help="tiny model and data, 2 steps, 1 round: the CI smoke run")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the table")
    ap.add_argument("--report", metavar="FILE", help="print the table of a saved --json result and exit")
    ap.add_argument("--variants", default=None, choices=("auto", "both", "env", "unset"),
                    help="BLAS environment variants (default auto: both when OPENBLAS_CORETYPE or OPENBLAS_L2_SIZE "
                         "is set; --smoke: env)")
    ap.add_argument("--figures", default="1,2,3", help="comma-separated figures to run (default: 1,2,3)")
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
