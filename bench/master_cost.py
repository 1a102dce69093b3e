#!/usr/bin/env python
"""The master's CPU per empty superstep at N workers, where it goes, and a raw-pyzmq floor.

    python bench/master_cost.py                    # N = 2 4 8 16 32, 2 rounds, 400 supersteps each
    python bench/master_cost.py --quick            # N = 2 8, 1 round, 100 supersteps (--smoke: the same)
    python bench/master_cost.py --profile          # + the master's main thread under cProfile, by phase
    python bench/master_cost.py --traced           # + the same job with a run directory and traces
    python bench/master_cost.py --json

The job is ``transport_jobs:barrier`` on the cluster runtime (vertices that never halt and never
send: BEGIN -> DONE and nothing else). The master runs in this process, so its CPU is this
process's: ``time.process_time`` over a window of supersteps after a warm-up (every thread, the
zmq IO thread included), split by thread from each thread's own CPU clock (Linux's per-thread
``clock_gettime``, threads named from /proc/self/task/*/comm). The window opens and closes in
``on_superstep`` callbacks, so it holds whole supersteps of the driver's loop.

Floor, in the same run: a raw pyzmq master doing the same N-way barrier (ROUTER, N worker
processes with one DEALER each: one small frame out to every worker, one back from each), its
CPU measured the same way. ``--profile`` runs the engine once more per N with the main thread
under cProfile (timer: the thread's CPU clock) and sums the functions of each phase (recv and
decode of the DONEs, their state bookkeeping, encode and send of the BEGINs, the coordinator's
barrier, liveness, the driver's records ...); cProfile's own overhead inflates every phase alike,
so the shares are what count. BLAS/OpenMP pools are pinned to one thread. The machine may be
shared: CPU time, not wall time, is the figure; rounds are interleaved and the spread is shown.
Target (issue 47): <= 25 us per worker, growing no faster than linearly in N.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import cProfile  # noqa: E402
import json  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if BENCH_DIR not in sys.path:  # workers import transport_jobs through the PYTHONPATH the launcher builds
    sys.path.insert(0, BENCH_DIR)

import zmq  # noqa: E402

from mariana.jobs.launch import run_job  # noqa: E402

TARGET_US_PER_WORKER = 25.0
TIMEOUT_S = 120.0


def progress(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr, flush=True)


# -- CPU clocks of this process's threads ---------------------------------------------------
def _thread_clock(tid: int) -> int:
    """The CPU clock id of thread ``tid`` of this process (Linux: MAKE_THREAD_CPUCLOCK(tid, SCHED))."""
    return ((~tid) << 3) | 6


def thread_cpu() -> dict[int, tuple[str, float]]:
    """Every live thread of this process: tid -> (name, CPU seconds so far)."""
    out: dict[int, tuple[str, float]] = {}
    for entry in os.listdir("/proc/self/task"):
        tid = int(entry)
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            out[tid] = (name, time.clock_gettime(_thread_clock(tid)))
        except (OSError, ValueError):  # the thread ended meanwhile
            continue
    return out


class Window:
    """CPU of this process between ``open()`` and ``close()``: in all, and per thread group."""

    def __init__(self) -> None:
        self.main = threading.get_native_id()
        self.cpu0 = self.wall0 = 0.0
        self.threads0: dict[int, tuple[str, float]] = {}
        self.result: dict[str, float] = {}

    def open(self) -> None:
        self.threads0 = thread_cpu()
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()

    def close(self) -> None:
        cpu, wall = time.process_time() - self.cpu0, time.perf_counter() - self.wall0
        groups: dict[str, float] = {"main": 0.0, "zmq_io": 0.0, "other": 0.0}
        for tid, (name, t) in thread_cpu().items():
            used = t - self.threads0.get(tid, (name, 0.0))[1]
            group = "main" if tid == self.main else "zmq_io" if name.startswith("ZMQbg") else "other"
            groups[group] += used
        self.result = {"cpu_s": cpu, "wall_s": wall, **{f"{k}_s": v for k, v in groups.items()}}


# -- the engine -----------------------------------------------------------------------------
def engine(workers: int, steps: int, warmup: int, traced: bool = False,
           profile: cProfile.Profile | None = None) -> dict[str, Any]:
    """One barrier job: the master's CPU over ``steps`` supersteps after ``warmup``."""
    win = Window()
    seen = [0]

    def on_superstep(record: dict[str, Any]) -> None:
        seen[0] += 1
        if seen[0] == warmup:
            win.open()
            if profile is not None:
                profile.enable()
        elif seen[0] == warmup + steps:
            if profile is not None:
                profile.disable()
            win.close()

    opts: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mariana-master-cost-") as tmp:
        if traced:
            opts = {"run_dir": tmp, "trace": True}
        res = run_job("transport_jobs:barrier", sets=[f"vertices={max(4, workers)}",
                                                      f"max_supersteps={warmup + steps + 1}"],
                      workers=workers, runtime="cluster", on_superstep=on_superstep, **opts)
    if not win.result:
        raise RuntimeError(f"barrier job ended after {res.supersteps} supersteps: {res.halt_reason}")
    walls = [m["wall_s"] for m in res.metrics][warmup:warmup + steps]
    return {**per_step(win.result, steps, workers), "wall_median_s": statistics.median(walls)}


def per_step(r: dict[str, float], steps: int, workers: int) -> dict[str, Any]:
    out: dict[str, Any] = {k.replace("_s", "_us"): v / steps * 1e6 for k, v in r.items()}
    out["cpu_us_per_worker"] = out["cpu_us"] / workers
    return out


def engine_child(workers: int, steps: int, warmup: int, traced: bool = False, tree: str | None = None) -> dict[str, Any]:
    """``engine`` in a fresh interpreter (``tree``: a checkout whose ``mariana`` it imports, e.g. a
    worktree of the commit before a change), so that two versions interleave in one run."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(tree), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [sys.executable, os.path.abspath(__file__), "--child", str(workers), "--steps", str(steps),
           "--warmup", str(warmup), *(["--traced"] if traced else [])]
    out = subprocess.run(cmd, env=env, cwd=tree or None, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"engine child ({tree or 'this tree'}, {workers} workers) failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


# -- the floor: a raw pyzmq master ----------------------------------------------------------
_RAW_WORKER = """
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.DEALER)
s.linger = 0
s.connect(sys.argv[1])
s.send(b"hello")
while s.recv() != b"stop":
    s.send(b"done")
s.close()
ctx.term()
"""


def raw(workers: int, steps: int, warmup: int) -> dict[str, Any]:
    """BEGIN to N workers, one DONE from each, in raw pyzmq: the master's CPU per barrier."""
    ctx = zmq.Context()
    r = ctx.socket(zmq.ROUTER)
    r.linger = 0
    port = r.bind_to_random_port("tcp://127.0.0.1")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    procs = [subprocess.Popen([sys.executable, "-c", _RAW_WORKER, f"tcp://127.0.0.1:{port}"], env=env)
             for _ in range(workers)]

    def recv() -> list[bytes]:
        if not r.poll(int(TIMEOUT_S * 1000)):
            raise RuntimeError("raw barrier: a worker went silent")
        return r.recv_multipart()

    try:
        idents = [recv()[0] for _ in range(workers)]
        win = Window()
        for step in range(warmup + steps):
            if step == warmup:
                win.open()
            for ident in idents:
                r.send_multipart([ident, b"begin"])
            for _ in range(workers):
                recv()
        win.close()
        for ident in idents:
            r.send_multipart([ident, b"stop"])
        for p in procs:
            p.wait(timeout=TIMEOUT_S)
        return per_step(win.result, steps, workers)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        r.close()
        ctx.term()


# -- where the main thread's time goes ------------------------------------------------------
#: phase -> (module path suffix, function name) of the functions whose cumulative time it is;
#: nested phases are listed under their parents (``_receive`` holds recv+decode and handle)
PHASES: list[tuple[str, list[tuple[str, str]]]] = [
    ("wait loop (Master._wait, all of it)", [("cluster/master.py", "_wait")]),
    ("  poll", [("zmq/sugar/poll.py", "poll")]),
    ("  receive: drain + handle (Master._receive)", [("cluster/master.py", "_receive")]),
    ("    recv + decode (comm recv)", [("comm/zmqcomm.py", "recv")]),
    ("    state: DONE / heartbeat bookkeeping (MasterState.handle)", [("cluster/control.py", "_arrived"),
                                                                     ("cluster/control.py", "_beat")]),
    ("  liveness: ticks, child polls, heartbeats out", [("cluster/control.py", "_tick"),
                                                       ("subprocess.py", "poll"),
                                                       ("cluster/master.py", "_kill_stuck")]),
    ("BEGIN: state + encode + send (MasterState.begin, Master._do)", [("cluster/control.py", "begin"),
                                                                     ("messages/codec.py", "encode"),
                                                                     ("comm/zmqcomm.py", "send_frames")]),
    ("barrier merge (Coordinator.barrier)", [("engine/superstep.py", "barrier")]),
    ("Done records + inbound trace (Master.superstep, own)", [("cluster/master.py", "superstep#own"),
                                                             ("cluster/control.py", "inbound_trace")]),
    ("metrics annotate (Master.annotate)", [("cluster/master.py", "annotate")]),
    ("traces (Driver._trace)", [("engine/driver.py", "_trace")]),
    ("metrics.jsonl (Driver.write_metrics)", [("engine/driver.py", "write_metrics")]),
    ("driver loop (Driver._run, all of it)", [("engine/driver.py", "_run")]),
]


def phases(prof: cProfile.Profile, steps: int) -> dict[str, float]:
    """Per-superstep microseconds of each phase of ``PHASES`` (and the profile's total)."""
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for label, funcs in PHASES:
        total = 0.0
        for suffix, name in funcs:
            own = name.endswith("#own")
            name = name.removesuffix("#own")
            for (path, _line, fn), (_cc, _nc, tt, ct, _callers) in stats.items():
                if fn == name and path.replace(os.sep, "/").endswith(suffix):
                    total += tt if own else ct
        out[label] = total / steps * 1e6
    out["profiled total"] = sum(tt for (_cc, _nc, tt, _ct, _c) in stats.values()) / steps * 1e6
    return out


# -- the report -----------------------------------------------------------------------------
def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.0f} [{min(xs):.0f}-{max(xs):.0f}]" if len(xs) > 1 else f"{xs[0]:.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", "--smoke", action="store_true")
    ap.add_argument("--workers", nargs="+", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--traced", action="store_true", help="also with a run directory and traces (the CLI's defaults)")
    ap.add_argument("--base", metavar="TREE", default=None,
                    help="also the engine of this checkout (e.g. a git worktree of the base commit), interleaved")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.child is not None:  # one engine run for engine_child: its figures as JSON
        print(json.dumps(engine(args.child, args.steps, args.warmup, traced=args.traced)))
        return 0
    workers = args.workers or ([2, 8] if args.quick else [2, 4, 8, 16, 32])
    rounds = args.rounds or (1 if args.quick else 2)
    steps = args.steps or (100 if args.quick else 400)
    warmup = args.warmup or (20 if args.quick else 50)
    load0 = os.getloadavg()
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {"engine": {}, "raw": {}, "traced": {}, "base": {},
                                                        "base_traced": {}}
    kinds: list[tuple[str, Callable[[int], dict[str, Any]]]] = [
        ("engine", lambda n: engine_child(n, steps, warmup)), ("raw", lambda n: raw(n, steps, warmup))]
    if args.base:
        kinds.append(("base", lambda n: engine_child(n, steps, warmup, tree=args.base)))
    if args.traced:
        kinds.append(("traced", lambda n: engine_child(n, steps, warmup, traced=True)))
        if args.base:
            kinds.append(("base_traced", lambda n: engine_child(n, steps, warmup, traced=True, tree=args.base)))
    for rnd in range(rounds):
        for n in workers:
            for kind, fn in kinds:
                r = fn(n)
                runs[kind].setdefault(n, []).append(r)
                progress(f"round {rnd + 1}/{rounds}, {n} workers, {kind}: {r['cpu_us']:.0f} us CPU per superstep "
                         f"(main {r['main_us']:.0f}, zmq IO {r['zmq_io_us']:.0f}), load {os.getloadavg()[0]:.1f}")
    profiles: dict[int, dict[str, float]] = {}
    if args.profile:
        for n in workers:
            prof = cProfile.Profile(time.thread_time)
            engine(n, steps, warmup, profile=prof)
            profiles[n] = phases(prof, steps)
    load1 = os.getloadavg()
    rep: dict[str, Any] = {"steps": steps, "warmup": warmup, "rounds": rounds, "load_before": load0,
                           "load_after": load1, "runs": {k: {str(n): v for n, v in d.items()} for k, d in runs.items() if d},
                           "profiles": {str(n): p for n, p in profiles.items()}}
    if args.json:
        print(json.dumps(rep, indent=1))
        return 0
    print(f"master CPU per empty superstep, {rounds} round(s) x {steps} supersteps; load average "
          f"{load0[0]:.1f} -> {load1[0]:.1f}; median [min-max] over rounds, microseconds")
    print("| N | engine CPU | main thread | zmq IO | per worker | raw pyzmq CPU | raw per worker | engine - raw, per worker | wall |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in workers:
        eng, raw_runs = runs["engine"][n], runs["raw"][n]
        ec = [float(x["cpu_us"]) for x in eng]
        rc = [float(x["cpu_us"]) for x in raw_runs]
        print(f"| {n} | {spread(ec)} | {spread([x['main_us'] for x in eng])} | {spread([x['zmq_io_us'] for x in eng])} | "
              f"**{statistics.median(ec) / n:.1f}** | {spread(rc)} | {statistics.median(rc) / n:.1f} | "
              f"{(statistics.median(ec) - statistics.median(rc)) / n:.1f} | "
              f"{statistics.median([x['wall_median_s'] for x in eng]) * 1e3:.2f} ms |")
    if args.base:
        print(f"\nthe same engine run from {args.base}, interleaved (before / after, CPU us per superstep):")
        for n in workers:
            b = [float(x["cpu_us"]) for x in runs["base"][n]]
            a = [float(x["cpu_us"]) for x in runs["engine"][n]]
            bm = [float(x["main_us"]) for x in runs["base"][n]]
            em = [float(x["main_us"]) for x in runs["engine"][n]]
            print(f"  {n} workers: {spread(b)} -> {spread(a)} ({statistics.median(a) / statistics.median(b):.2f}x); "
                  f"main thread {spread(bm)} -> {spread(em)}")
    if args.traced:
        print("\nwith a run directory and traces (the CLI's defaults), CPU us per superstep:")
        for n in workers:
            t = [x["cpu_us"] for x in runs["traced"][n]]
            before = (f"; {args.base}: {spread([x['cpu_us'] for x in runs['base_traced'][n]])}"
                      if args.base else "")
            print(f"  {n} workers: {spread(t)}, {statistics.median(t) / n:.1f} per worker{before}")
    for n, p in profiles.items():
        print(f"\nmain thread under cProfile, {n} workers (us per superstep, CPU clock of the thread):")
        for label, us in p.items():
            print(f"  {label:<66} {us:8.1f}")
    big = max(workers)
    per = statistics.median([x["cpu_us"] for x in runs["engine"][big]]) / big
    print(f"\ntarget <= {TARGET_US_PER_WORKER:g} us per worker at {big} workers: {per:.1f} "
          f"({'met' if per <= TARGET_US_PER_WORKER else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
