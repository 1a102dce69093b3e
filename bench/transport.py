#!/usr/bin/env python
"""Cluster-runtime transport vs raw pyzmq, measured in one run on this machine.

    python bench/transport.py            # full sizes, 2 interleaved rounds (~70-120 s on 2 cores)
    python bench/transport.py --quick    # small sizes, 1 round, smoke run (~15 s)
    python bench/transport.py --smoke    # tiny sizes, 1 round: the CI smoke run (bench/smoke.py), no figures
    python bench/transport.py --json     # one JSON object on stdout
    python bench/transport.py --profile  # + cProfile both workers of one bulk-array run
    python bench/transport.py --rounds 3 # more interleaved rounds of sections 1 and 2 (pooled)

1. Barrier latency: the ``transport_jobs:barrier`` job (vertices never halt, never send) on 2
   and 4 cluster workers; median master-measured ``wall_s`` (BEGIN sent -> every DONE back) over
   the supersteps after a warm-up. Baseline: a raw pyzmq DEALER/ROUTER request/reply round trip
   between two processes (median of many). Also shown, for attribution only: the same barrier
   message pattern in raw pyzmq (master in this process, N worker processes, BEGIN -> one frame to
   every peer -> DONE), i.e. the floor for the engine's protocol on this machine.
2. Bulk throughput: ``transport_jobs:bigarray``: a 16M-element float32 array (64 MiB) from a
   vertex on worker 0 to one on worker 1 in every superstep; superstep 0 (array first touch,
   connection warm-up) is dropped; throughput = bytes / median ``wall_s`` (raw) and
   bytes / (median ``wall_s`` - barrier median, 2 workers) (corrected). Baselines, two child
   processes each: zero-copy PUSH/PULL of (a) one 64 MiB frame, (b) 4 MiB frames as one
   multipart message, and (c), for attribution, (b) plus the receiver reassembling the frames
   into one fresh array the way ``mariana.messages.codec.decode`` does. Each raw transfer is
   timed by the sender from ``send`` to a 1-byte ack sent by the receiver once it holds the
   whole message, so it is a one-shot transfer like a superstep (no pipelining).
   Attribution: an in-process codec encode/decode timing of the same message; the workers'
   per-superstep encode/send/wait timings when the engine version puts them in its DONEs; and,
   with ``--profile``, both workers of one more run under cProfile (master in this process,
   workers started by hand as ``python -m cProfile -o ... -m mariana worker --master ...``).
3. PageRank, 100k vertices / 1M seeded random edges (text edge list in a temp dir, same
   generator as ``graph_local.py``), 30 iterations, tol=0: cluster runtime on 2 workers vs
   LocalRuntime on 1; ``RunResult.wall_s`` of each, plus the end-to-end ``run_job`` time and
   the sum of superstep walls, and a check that both give the same ranks. The cluster run gets
   ``worker_timeout=120``: a worker sends no heartbeat while it builds its partition, and parsing
   the whole edge list in each worker can outlast the default 10 s on a busy 2-core machine.

Sections 1 and 2 run ``--rounds`` times, interleaving engine and raw runs, and pool the samples.
Every section reports how many cores *other* processes kept busy meanwhile (/proc/stat minus
this process tree): the machine may be shared, and figures taken at > 0.3 are contaminated.

Targets (project issues): barrier <= 3x raw round trip; engine 64 MiB throughput >= 0.8x raw
single frame; the project expects chunked frames to beat a single frame.

Results go to stdout (a table, or one JSON object with ``--json``); progress goes to stderr.
"""

from __future__ import annotations

import os

# Fair comparison: pin BLAS/OpenMP pools to one thread before numpy is imported (workers and
# baseline children inherit the environment). OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are printed.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
BLAS_ENV = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import platform  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402
import zmq  # noqa: E402

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if BENCH_DIR not in sys.path:  # workers import transport_jobs through the PYTHONPATH the launcher builds
    sys.path.insert(0, BENCH_DIR)

import mariana  # noqa: E402
from mariana.jobs.launch import run_job  # noqa: E402
from mariana.messages import codec  # noqa: E402

CHUNK = codec.DEFAULT_CHUNK_BYTES  # 4 MiB, the engine's frame size for big arrays
TIMEOUT_S = 120.0  # any baseline child silent this long fails the benchmark
TARGET_BARRIER_X = 3.0
TARGET_THROUGHPUT_FRACTION = 0.8
PAGERANK_WORKER_TIMEOUT_S = 120.0
_T0 = time.perf_counter()


def progress(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


class ForeignCpu:
    """Average number of cores busy with *other* work (not this process or its reaped children)
    between ``start()`` and ``stop()``: /proc/stat busy time minus our own CPU time. The machine
    may be shared; a value well above 0 means the figures of that section are contaminated."""

    def __init__(self) -> None:
        self.t0 = self.busy0 = self.own0 = 0.0

    @staticmethod
    def _busy() -> float:
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
        except OSError:
            return float("nan")
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def start(self) -> "ForeignCpu":
        self.t0, self.busy0, self.own0 = time.perf_counter(), self._busy(), self._own()
        return self

    def stop(self) -> float:
        wall = time.perf_counter() - self.t0
        return max(0.0, ((self._busy() - self.busy0) - (self._own() - self.own0)) / wall) if wall > 0 else 0.0


def summary(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"n": len(s), "median": statistics.median(s), "min": s[0], "max": s[-1],
            "p10": s[len(s) // 10], "p90": s[min(len(s) - 1, (9 * len(s)) // 10)]}


# ------------------------------------------------------------------------------------------
# raw pyzmq baselines (children started with the spawn method: fresh interpreters, like the
# engine's worker processes; the functions below run in those children)
# ------------------------------------------------------------------------------------------
def _sock(ctx: zmq.Context, kind: int) -> zmq.Socket:
    s = ctx.socket(kind)
    s.linger = 0
    return s


def _rtt_server(conn: Any) -> None:
    ctx = zmq.Context()
    s = _sock(ctx, zmq.ROUTER)
    conn.send(s.bind_to_random_port("tcp://127.0.0.1"))
    while True:
        ident, msg = s.recv_multipart()
        s.send_multipart([ident, msg])
        if msg == b"stop":
            break
    s.close()
    ctx.term()


def _rtt_client(conn: Any, port: int, n: int, warmup: int, size: int) -> None:
    ctx = zmq.Context()
    d = _sock(ctx, zmq.DEALER)
    d.connect(f"tcp://127.0.0.1:{port}")
    payload = b"x" * size
    clock = time.perf_counter
    ts = []
    for _ in range(warmup + n):
        t = clock()
        d.send(payload)
        d.recv()
        ts.append(clock() - t)
    d.send(b"stop")
    d.recv()
    conn.send(ts[warmup:])
    d.close()
    ctx.term()


def _barrier_worker(conn: Any, master_port: int, index: int) -> None:
    """BEGIN on the control socket -> one frame to every peer -> one frame from every peer -> DONE."""
    ctx = zmq.Context()
    ctl = _sock(ctx, zmq.DEALER)
    ctl.setsockopt(zmq.IDENTITY, b"w%d" % index)
    ctl.connect(f"tcp://127.0.0.1:{master_port}")
    data = _sock(ctx, zmq.ROUTER)
    port = data.bind_to_random_port("tcp://127.0.0.1")
    ctl.send_multipart([b"hello", b"%d" % port])
    ports = [int(p) for p in ctl.recv_multipart()]
    peers = []
    for p, pport in enumerate(ports):
        if p != index:
            s = _sock(ctx, zmq.DEALER)
            s.setsockopt(zmq.IDENTITY, b"%d" % index)
            s.connect(f"tcp://127.0.0.1:{pport}")
            peers.append(s)
    ctl.send(b"ready")
    while ctl.recv() != b"stop":
        for s in peers:
            s.send(b"batch")
        for _ in peers:
            data.recv_multipart()
        ctl.send(b"done")
    for s in (*peers, data, ctl):
        s.close()
    ctx.term()
    conn.send("ok")


def _tput_receiver(conn: Any, reps: int, reassemble: bool) -> None:
    ctx = zmq.Context()
    pull = _sock(ctx, zmq.PULL)
    ack = _sock(ctx, zmq.PUSH)
    conn.send((pull.bind_to_random_port("tcp://127.0.0.1"), ack.bind_to_random_port("tcp://127.0.0.1")))
    copy_s = []
    for _ in range(reps):
        frames = pull.recv_multipart(copy=False)
        if reassemble:  # what codec.decode does with a multi-frame array, then the frames are freed
            t = time.perf_counter()
            total = sum(len(f) for f in frames)
            flat = np.empty(total, dtype=np.uint8)
            pos = 0
            for f in frames:
                b = f.buffer
                flat[pos:pos + b.nbytes] = np.frombuffer(b, dtype=np.uint8)
                pos += b.nbytes
            del frames, b, f
            copy_s.append(time.perf_counter() - t)
            ack.send(b"k")
            del flat
        else:
            ack.send(b"k")
            del frames
    conn.send(copy_s)
    pull.close()
    ack.close()
    ctx.term()


def _tput_sender(conn: Any, ports: tuple[int, int], nbytes: int, chunk: int | None, reps: int) -> None:
    ctx = zmq.Context()
    push = _sock(ctx, zmq.PUSH)
    ack = _sock(ctx, zmq.PULL)
    push.connect(f"tcp://127.0.0.1:{ports[0]}")
    ack.connect(f"tcp://127.0.0.1:{ports[1]}")
    arr = np.arange(nbytes // 4, dtype=np.float32)  # touched once, like the engine's source array
    mv = memoryview(arr.view(np.uint8))
    frames = [mv] if chunk is None else [mv[i:i + chunk] for i in range(0, len(mv), chunk)]
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        push.send_multipart(frames, copy=False)
        ack.recv()
        ts.append(time.perf_counter() - t)
    conn.send(ts)
    push.close()
    ack.close()
    ctx.term()


class Children:
    """Spawned baseline processes; every result arrives on a pipe within TIMEOUT_S."""

    def __init__(self) -> None:
        self.mp = mp.get_context("spawn")
        self.procs: list[Any] = []

    def start(self, target: Callable[..., None], *args: Any) -> Any:
        here, there = self.mp.Pipe()
        p = self.mp.Process(target=target, args=(there, *args), daemon=True)
        p.start()
        self.procs.append(p)
        return here

    @staticmethod
    def get(conn: Any, what: str) -> Any:
        if not conn.poll(TIMEOUT_S):
            raise RuntimeError(f"baseline child gave no {what} within {TIMEOUT_S:.0f}s")
        return conn.recv()

    def __enter__(self) -> "Children":
        return self

    def __exit__(self, *exc: Any) -> None:
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join()


def raw_rtt(n: int, warmup: int, size: int = 128) -> list[float]:
    with Children() as ch:
        server = ch.start(_rtt_server)
        port = ch.get(server, "port")
        client = ch.start(_rtt_client, port, n, warmup, size)
        return ch.get(client, "round trips")


def raw_barrier(workers: int, steps: int, warmup: int) -> list[float]:
    """The engine's barrier message pattern in raw pyzmq: master here, workers in children."""
    ctx = zmq.Context()
    r = _sock(ctx, zmq.ROUTER)
    port = r.bind_to_random_port("tcp://127.0.0.1")

    def recv() -> list[bytes]:
        if not r.poll(int(TIMEOUT_S * 1000)):
            raise RuntimeError("raw barrier: a worker went silent")
        return r.recv_multipart()

    try:
        with Children() as ch:
            conns = [ch.start(_barrier_worker, port, i) for i in range(workers)]
            data_ports: dict[bytes, bytes] = {}
            for _ in range(workers):
                ident, _hello, dport = recv()
                data_ports[ident] = dport
            idents = [b"w%d" % i for i in range(workers)]
            for ident in idents:
                r.send_multipart([ident, *[data_ports[i] for i in idents]])
            for _ in range(workers):
                recv()  # ready
            ts = []
            clock = time.perf_counter
            for _ in range(warmup + steps):
                t = clock()
                for ident in idents:
                    r.send_multipart([ident, b"begin"])
                for _ in range(workers):
                    recv()
                ts.append(clock() - t)
            for ident in idents:
                r.send_multipart([ident, b"stop"])
            for c in conns:
                ch.get(c, "exit")
            return ts[warmup:]
    finally:
        r.close()
        ctx.term()


def raw_throughput(nbytes: int, chunk: int | None, reps: int, warmup: int,
                   reassemble: bool = False) -> tuple[list[float], list[float]]:
    """(sender-timed transfer seconds, receiver reassembly seconds) after ``warmup`` transfers."""
    with Children() as ch:
        receiver = ch.start(_tput_receiver, warmup + reps, reassemble)
        ports = ch.get(receiver, "ports")
        sender = ch.start(_tput_sender, ports, nbytes, chunk, warmup + reps)
        ts = ch.get(sender, "transfer times")[warmup:]
        copy_s = ch.get(receiver, "reassembly times")[warmup:]
    return ts, copy_s


# ------------------------------------------------------------------------------------------
# engine
# ------------------------------------------------------------------------------------------
class StatsTap:
    """Collects the workers' per-superstep timings (encode_s, send_s, wait_s) from their DONEs.

    Reads ``Master._dones`` from the ``on_superstep`` hook (the master's metrics lines carry no
    per-worker phase timings). Depending on the engine version the timings sit in the DONE's
    ``trace`` (only filled when tracing is on, i.e. with a run directory) or ``stats``; when
    neither has them the breakdown is simply not reported. Best effort: private attribute.
    """

    def __init__(self) -> None:
        self.master: Any = None
        self.rows: list[list[dict[str, Any]]] = []

    def on_start(self, master: Any, procs: Any) -> None:
        self.master = master

    def on_superstep(self, record: dict[str, Any]) -> None:
        dones = getattr(self.master, "_dones", None) or {}
        self.rows.append([{**(_field(dones[i], "stats") or {}), **(_field(dones[i], "trace") or {}),
                           "compute_s": _field(dones[i], "compute_s") or 0.0} for i in sorted(dones)])


def _field(done: Any, name: str) -> Any:
    """``name`` of a DONE: a typed wire record (``wire.Done``) or, in older engines, a dict."""
    return done.get(name) if isinstance(done, dict) else getattr(done, name, None)


def engine_barrier(workers: int, steps: int, warmup: int, secure: bool = False) -> list[float]:
    """Master-measured wall_s of the empty supersteps after ``warmup`` (``secure``: CURVE on)."""
    res = run_job("transport_jobs:barrier", sets=[f"vertices={max(4, workers)}", f"max_supersteps={warmup + steps}"],
                  workers=workers, runtime="cluster", secure=secure)
    if res.supersteps != warmup + steps:
        raise RuntimeError(f"barrier job stopped early: {res.halt_reason}")
    return [m["wall_s"] for m in res.metrics][warmup:]


def engine_bigarray(elements: int, steps: int, warmup: int, secure: bool = False) -> dict[str, Any]:
    """Superstep walls after ``warmup``, the workers' send/wait stats, the receiver's check."""
    tap = StatsTap()
    res = run_job("transport_jobs:bigarray", sets=[f"elements={elements}", f"supersteps={warmup + steps}"],
                  workers=2, runtime="cluster", on_superstep=tap.on_superstep, on_start=tap.on_start, secure=secure)
    sink = res.values["dst"]
    rows = [r for r in tap.rows[warmup:] if len(r) == 2]
    return {
        "walls": [m["wall_s"] for m in res.metrics][warmup:],
        "bytes": [m["bytes"] for m in res.metrics][warmup:],
        "first_superstep_s": res.metrics[0]["wall_s"],
        # the array sent in the last superstep is never computed on: warmup + steps - 1 receipts
        "received": sink["received"], "bad_shape": sink["bad"],
        "check_ok": sink["bad"] == 0 and sink["received"] == warmup + steps - 1,
        # encode (+ queue to zmq, in engines that time them together), worker 0's wait for worker 1's
        # empty batch, worker 1's wait = receive + decode of the array
        "w0_send": [r[0].get("encode_s", 0.0) + r[0]["send_s"] + r[0].get("prev_send_s", 0.0) for r in rows
                    if "send_s" in r[0]],  # prev_send_s: the last part, sent after DONE (a superstep late)
        "w0_wait": [r[0]["wait_s"] for r in rows if "wait_s" in r[0]],
        "w1_wait": [r[1]["wait_s"] for r in rows if "wait_s" in r[1]],
    }


def codec_timing(elements: int, reps: int = 5) -> dict[str, Any]:
    """In-process encode/decode of the BATCH header carrying the array (no sockets)."""
    arr = np.arange(elements, dtype=np.float32)
    header = {"kind": 0, "job": "x", "ss": 1, "src": 0, "msgs": [["src", "dst", None, arr]]}
    out: dict[str, Any] = {}
    for name, chunk in (("chunked_4MiB", CHUNK), ("single_frame", 1 << 40)):
        enc, dec = [], []
        for _ in range(reps + 1):
            t = time.perf_counter()
            frames = codec.encode(header, chunk_bytes=chunk)
            enc.append(time.perf_counter() - t)
            frames = [bytes(frames[0]), *frames[1:]]
            t = time.perf_counter()
            got = codec.decode(frames)
            dec.append(time.perf_counter() - t)
            assert got["msgs"][0][3].shape == arr.shape
            del got
        out[name] = {"frames": len(frames) - 1, "encode_s": statistics.median(enc[1:]),
                     "decode_s": statistics.median(dec[1:]), "decode_first_s": dec[0]}
    return out


def engine_pagerank(path: str, iterations: int, workers: int, runtime: str) -> tuple[dict[str, Any], Any]:
    # worker_timeout: a cluster worker sends no heartbeat while it builds its partition, and each
    # worker parses the whole 1M-edge list (4-6 s here, more under load); the default 10 s
    # would fail the job as "worker stopped answering at superstep -1" (see bench/README.md).
    extra: dict[str, Any] = {"worker_timeout": PAGERANK_WORKER_TIMEOUT_S} if runtime == "cluster" else {}
    t = time.perf_counter()
    res = run_job("pagerank", sets=[f"graph={path}", f"iterations={iterations}", "tol=0"],
                  workers=workers, runtime=runtime, **extra)
    total = time.perf_counter() - t
    steps = sum(m["wall_s"] for m in res.metrics)
    return ({"wall_s": res.wall_s, "run_job_s": total, "supersteps_sum_s": steps,
             "outside_supersteps_s": res.wall_s - steps, "supersteps": res.supersteps,
             "bytes": sum(m.get("bytes", 0) for m in res.metrics)}, res)


def ranks(res: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for value in res.values.values():
        out.update(zip(value["ids"], np.asarray(value["values"]).tolist()))
    return out


# ------------------------------------------------------------------------------------------
# --profile: both workers of one bigarray run under cProfile
# ------------------------------------------------------------------------------------------
def profile_bigarray(elements: int, steps: int, outdir: str) -> dict[str, Any]:
    """Master in this process (as ``run_cluster`` does), workers as ``python -m cProfile ... worker``."""
    from mariana.cluster.launch import stop_processes
    from mariana.cluster.master import Master
    from mariana.engine.options import RunOptions
    from mariana.jobs.registry import BuildContext, get_job, resolve_config

    name = "transport_jobs:bigarray"
    job = get_job(name)
    cfg = resolve_config(job, None, [f"elements={elements}", f"supersteps={steps}"])
    master = Master(name, cfg, job.build(cfg, BuildContext(2, None)), RunOptions(workers=2))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    procs: list[subprocess.Popen] = []
    try:
        endpoint = master.start()
        for i in range(2):
            procs.append(subprocess.Popen([sys.executable, "-m", "cProfile", "-o", os.path.join(outdir, f"launch{i}.prof"),
                                           "-m", "mariana", "worker", "--master", endpoint],
                                          env=env, stdin=subprocess.DEVNULL))
        res = master.run(children=procs)
        by_pid = {w.pid: w.index for w in master.by_index}
        for p in procs:  # let cProfile write its file after BYE before anything is stopped
            p.wait(timeout=30)
    finally:
        stop_processes(procs)
        master.close()
    del res
    out: dict[str, Any] = {}
    for i, p in enumerate(procs):
        out[f"worker{by_pid.get(p.pid)}"] = _profile_summary(os.path.join(outdir, f"launch{i}.prof"), steps)
    return dict(sorted(out.items()))


# (file suffix, function name, tottime or cumtime) -> bucket, per superstep
_BUCKETS = (
    ("transport.py", "send", "ct", "transport.send: encode + send_multipart (cum)"),
    ("codec.py", "encode", "ct", "codec.encode (cum)"),
    ("transport.py", "send_frames", "ct", "transport.send_frames (cum)"),
    ("transport.py", "recv", "ct", "transport.recv: recv_multipart + decode (cum)"),
    ("socket.py", "recv_multipart", "ct", "  zmq recv_multipart (cum)"),
    ("codec.py", "decode", "ct", "  codec.decode (cum)"),
    ("codec.py", "__call__", "tt", "    array reassembly: _ArrayBuilder.__call__ (own)"),
    ("worker.py", "_drain_data", "tt", "worker._drain_data own time (frees the received frames)"),
    ("superstep.py", "compute", "ct", "Partition.compute (cum)"),
    ("superstep.py", "deliver", "ct", "Partition.deliver (cum)"),
    ("poll.py", "poll", "tt", "zmq Poller.poll own time (idle between + waiting in)"),
    ("worker.py", "_superstep", "ct", "worker._superstep (cum)"),
)


def _profile_summary(path: str, steps: int) -> dict[str, Any]:
    st: Any = pstats.Stats(path)  # .stats and .total_tt are not in the stubs
    per_ss: dict[str, float] = {}
    for fname, func, col, label in _BUCKETS:  # functions this engine version does not have are left out
        hits = [tt if col == "tt" else ct for (file, _line, fn), (_cc, _nc, tt, ct, _callers) in st.stats.items()
                if file.endswith(fname) and fn == func]
        if hits:
            per_ss[label] = sum(hits) / steps
    top = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:8]
    return {"per_superstep_s": per_ss, "total_s": st.total_tt,
            "top_tottime": [{"function": f"{os.path.basename(k[0])}:{k[1]}({k[2]})", "calls": v[1], "tottime_s": v[2],
                             "cumtime_s": v[3]} for k, v in top]}


# ------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------
SIZES = {
    "full": {"barrier_steps": 250, "barrier_warmup": 50, "rtt_n": 5000, "rtt_warmup": 500,
             "raw_barrier_steps": 1000, "raw_barrier_warmup": 100,
             "elements": 16 * 1024 * 1024, "array_steps": 10, "raw_reps": 10, "raw_warmup": 2,
             "pr_vertices": 100_000, "pr_edges": 1_000_000, "pr_iterations": 30},
    "quick": {"barrier_steps": 60, "barrier_warmup": 10, "rtt_n": 1000, "rtt_warmup": 100,
              "raw_barrier_steps": 200, "raw_barrier_warmup": 20,
              "elements": 4 * 1024 * 1024, "array_steps": 5, "raw_reps": 5, "raw_warmup": 1,
              "pr_vertices": 10_000, "pr_edges": 100_000, "pr_iterations": 10},
    "smoke": {"barrier_steps": 10, "barrier_warmup": 2, "rtt_n": 100, "rtt_warmup": 10,
              "raw_barrier_steps": 20, "raw_barrier_warmup": 5,
              "elements": 256 * 1024, "array_steps": 2, "raw_reps": 2, "raw_warmup": 1,
              "pr_vertices": 1_000, "pr_edges": 5_000, "pr_iterations": 3},
}


def write_edge_list(path: str, n: int, m: int, seed: int) -> None:
    rng = np.random.default_rng(seed)  # same generator as graph_local.py
    src = rng.integers(0, n, size=m, dtype=np.int64)
    dst = rng.integers(0, n, size=m, dtype=np.int64)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{s} {d}\n" for s, d in zip(src.tolist(), dst.tolist())))


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    z = SIZES[mode]
    env = {"python": platform.python_version(), "pyzmq": zmq.__version__, "libzmq": zmq.zmq_version(),
           "numpy": np.__version__, "mariana": mariana.__version__, "cpus": os.cpu_count(),
           "OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"], "OPENBLAS_NUM_THREADS": os.environ["OPENBLAS_NUM_THREADS"],
           **{k: (v if v is not None else "(unset)") for k, v in BLAS_ENV.items()}}
    progress(f"OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']} OPENBLAS_L2_SIZE={env['OPENBLAS_L2_SIZE']} "
             f"({env['cpus']} CPUs, pyzmq {env['pyzmq']} / libzmq {env['libzmq']})")
    report: dict[str, Any] = {"mode": mode, "rounds": args.rounds, "sizes": z, "env": env}

    rounds = args.rounds
    report["load_before"] = os.getloadavg()

    # 1. barrier (rounds interleave engine and raw runs; samples are pooled) -------------------
    pool: dict[str, list[float]] = {}
    per_round: dict[str, list[float]] = {}

    def add(key: str, xs: list[float]) -> None:
        pool.setdefault(key, []).extend(xs)
        per_round.setdefault(key, []).append(statistics.median(xs))

    meter = ForeignCpu().start()
    for rnd in range(rounds):
        add("raw_rtt", raw_rtt(z["rtt_n"], z["rtt_warmup"]))
        progress(f"[round {rnd + 1}/{rounds}] raw DEALER/ROUTER round trip: median {per_round['raw_rtt'][-1] * 1e6:.1f} us")
        for w in (2, 4):
            add(f"engine_{w}w", engine_barrier(w, z["barrier_steps"], z["barrier_warmup"]))
            progress(f"[round {rnd + 1}/{rounds}] engine empty superstep, {w} workers: "
                     f"median {per_round[f'engine_{w}w'][-1] * 1e3:.3f} ms")
            add(f"raw_pattern_{w}w", raw_barrier(w, z["raw_barrier_steps"], z["raw_barrier_warmup"]))
            progress(f"[round {rnd + 1}/{rounds}] raw barrier pattern, {w} workers: "
                     f"median {per_round[f'raw_pattern_{w}w'][-1] * 1e3:.3f} ms")
    b: dict[str, Any] = {k: {**summary(v), "round_medians": per_round[k]} for k, v in pool.items()}
    b["foreign_cores"] = meter.stop()
    report["barrier"] = b

    # 2. bulk array ------------------------------------------------------------------------
    nbytes = z["elements"] * 4
    pool.clear()
    per_round.clear()
    checks: list[dict[str, Any]] = []
    meter.start()
    for rnd in range(rounds):
        e = engine_bigarray(z["elements"], z["array_steps"], 1)
        checks.append({k: e[k] for k in ("first_superstep_s", "received", "bad_shape", "check_ok")})
        add("engine", e["walls"])
        for k in ("w0_send", "w0_wait", "w1_wait"):
            if e[k]:
                add(k, e[k])
        if len(set(e["bytes"])) != 1:
            progress(f"note: bytes per superstep varied: {sorted(set(e['bytes']))}")
        progress(f"[round {rnd + 1}/{rounds}] engine {nbytes / 2**20:.0f} MiB superstep: "
                 f"median {per_round['engine'][-1] * 1e3:.1f} ms (check {'ok' if e['check_ok'] else 'FAILED'})")
        for key, chunk, reassemble in (("raw_single", None, False), ("raw_chunked", CHUNK, False),
                                       ("raw_chunked_reassembled", CHUNK, True)):
            ts, copy_s = raw_throughput(nbytes, chunk, z["raw_reps"], z["raw_warmup"], reassemble)
            add(key, ts)
            if copy_s:
                add("raw_reassembly_copy", copy_s)
            progress(f"[round {rnd + 1}/{rounds}] {key}: median {per_round[key][-1] * 1e3:.1f} ms "
                     f"= {nbytes / per_round[key][-1] / 1e9:.3f} GB/s")
    a: dict[str, Any] = {"bytes": nbytes, "bytes_per_superstep_metric": e["bytes"][0] if e["bytes"] else None,
                         "checks": checks}
    for k, v in pool.items():
        a[k] = {"s": {**summary(v), "round_medians": per_round[k]}}
        if k in ("engine", "raw_single", "raw_chunked", "raw_chunked_reassembled"):
            a[k]["gbps"] = nbytes / a[k]["s"]["median"] / 1e9
            a[k]["frames"] = 1 if k == "raw_single" else -(-nbytes // CHUNK)
    a["foreign_cores"] = meter.stop()
    a["codec_in_process"] = codec_timing(z["elements"])
    barrier2 = b["engine_2w"]["median"]
    wall = a["engine"]["s"]["median"]
    a["engine"]["gbps_corrected"] = nbytes / (wall - barrier2) / 1e9 if wall > barrier2 else None
    report["bigarray"] = a

    # 2b. the same with CURVE on every socket (--secure), in the same run ------------------------
    pool.clear()
    per_round.clear()
    meter.start()
    for rnd in range(rounds):
        add("barrier_2w_plain", engine_barrier(2, z["barrier_steps"], z["barrier_warmup"]))
        add("barrier_2w_secure", engine_barrier(2, z["barrier_steps"], z["barrier_warmup"], secure=True))
        add("array_plain", engine_bigarray(z["elements"], z["array_steps"], 1)["walls"])
        add("array_secure", engine_bigarray(z["elements"], z["array_steps"], 1, secure=True)["walls"])
        progress(f"[round {rnd + 1}/{rounds}] CURVE: barrier {per_round['barrier_2w_secure'][-1] * 1e3:.3f} ms "
                 f"(plain {per_round['barrier_2w_plain'][-1] * 1e3:.3f}), array superstep "
                 f"{per_round['array_secure'][-1] * 1e3:.1f} ms (plain {per_round['array_plain'][-1] * 1e3:.1f})")
    sec: dict[str, Any] = {k: summary(v) for k, v in pool.items()}
    sec["barrier_secure_vs_plain"] = sec["barrier_2w_secure"]["median"] / sec["barrier_2w_plain"]["median"]
    sec["array_gbps_plain"] = nbytes / sec["array_plain"]["median"] / 1e9
    sec["array_gbps_secure"] = nbytes / sec["array_secure"]["median"] / 1e9
    sec["array_secure_vs_plain_throughput"] = sec["array_gbps_secure"] / sec["array_gbps_plain"]
    sec["foreign_cores"] = meter.stop()
    report["secure"] = sec

    # 3. pagerank -------------------------------------------------------------------------
    pr: dict[str, Any] = {"vertices": z["pr_vertices"], "edges": z["pr_edges"], "iterations": z["pr_iterations"],
                          "seed": args.seed}
    with tempfile.TemporaryDirectory(prefix="mariana-transport-") as tmp:
        meter.start()
        path = os.path.join(tmp, "graph.e")
        t = time.perf_counter()
        write_edge_list(path, z["pr_vertices"], z["pr_edges"], args.seed)
        pr["write_s"] = time.perf_counter() - t
        progress(f"wrote {z['pr_edges']} edges in {pr['write_s']:.1f}s")
        pr["local_1w"], res_local = engine_pagerank(path, z["pr_iterations"], 1, "local")
        progress(f"pagerank local 1 worker: wall_s {pr['local_1w']['wall_s']:.2f}s (run_job {pr['local_1w']['run_job_s']:.2f}s)")
        pr["cluster_2w"], res_cluster = engine_pagerank(path, z["pr_iterations"], 2, "cluster")
        progress(f"pagerank cluster 2 workers: wall_s {pr['cluster_2w']['wall_s']:.2f}s "
                 f"(run_job {pr['cluster_2w']['run_job_s']:.2f}s)")
    pr["foreign_cores"] = meter.stop()
    rl, rc = ranks(res_local), ranks(res_cluster)
    pr["same_vertices"] = rl.keys() == rc.keys()
    pr["max_abs_rank_diff"] = max((abs(rl[k] - rc[k]) for k in rl), default=0.0) if pr["same_vertices"] else None
    report["pagerank"] = pr

    # ratios --------------------------------------------------------------------------------
    rtt_med = b["raw_rtt"]["median"]
    single, chunked = a["raw_single"]["gbps"], a["raw_chunked"]["gbps"]
    report["ratios"] = {
        "barrier_2w_vs_rtt": b["engine_2w"]["median"] / rtt_med,
        "barrier_4w_vs_rtt": b["engine_4w"]["median"] / rtt_med,
        "barrier_2w_vs_raw_pattern": b["engine_2w"]["median"] / b["raw_pattern_2w"]["median"],
        "barrier_4w_vs_raw_pattern": b["engine_4w"]["median"] / b["raw_pattern_4w"]["median"],
        "engine_raw_vs_single": a["engine"]["gbps"] / single,
        "engine_corrected_vs_single": (a["engine"]["gbps_corrected"] or 0.0) / single,
        "engine_raw_vs_chunked": a["engine"]["gbps"] / chunked,
        "engine_corrected_vs_chunked": (a["engine"]["gbps_corrected"] or 0.0) / chunked,
        "chunked_vs_single": chunked / single,
        "pagerank_cluster_vs_local_wall_s": pr["cluster_2w"]["wall_s"] / pr["local_1w"]["wall_s"],
        "pagerank_cluster_vs_local_supersteps": pr["cluster_2w"]["supersteps_sum_s"] / pr["local_1w"]["supersteps_sum_s"],
        "pagerank_cluster_vs_local_run_job": pr["cluster_2w"]["run_job_s"] / pr["local_1w"]["run_job_s"],
    }
    r = report["ratios"]
    report["targets"] = {
        f"barrier_vs_rtt<={TARGET_BARRIER_X:g}x (2 workers)": r["barrier_2w_vs_rtt"] <= TARGET_BARRIER_X,
        f"barrier_vs_rtt<={TARGET_BARRIER_X:g}x (4 workers)": r["barrier_4w_vs_rtt"] <= TARGET_BARRIER_X,
        f"engine_vs_raw_single>={TARGET_THROUGHPUT_FRACTION:g} (uncorrected)": r["engine_raw_vs_single"] >= TARGET_THROUGHPUT_FRACTION,
        f"engine_vs_raw_single>={TARGET_THROUGHPUT_FRACTION:g} (corrected)": r["engine_corrected_vs_single"] >= TARGET_THROUGHPUT_FRACTION,
        "raw chunked beats raw single frame": r["chunked_vs_single"] > 1.0,
    }

    if args.profile:
        with tempfile.TemporaryDirectory(prefix="mariana-transport-prof-") as tmp:
            progress("profiling the bulk-array job (both workers under cProfile) ...")
            report["profile"] = profile_bigarray(z["elements"], z["array_steps"] + 1, tmp)
    report["load_after"] = os.getloadavg()
    report["total_s"] = time.perf_counter() - _T0
    return report


def ms(x: float) -> str:
    return f"{x * 1e3:9.3f} ms"


def print_text(rep: dict[str, Any]) -> None:
    e, b, a, pr, r, z = rep["env"], rep["barrier"], rep["bigarray"], rep["pagerank"], rep["ratios"], rep["sizes"]
    p = print

    def rounds(xs: list[float]) -> str:
        return "/".join(f"{x * 1e3:.3f}" for x in xs) if len(xs) > 1 else ""

    p(f"mariana transport benchmark ({rep['mode']}, {rep['rounds']} round(s))  mariana {e['mariana']}, "
      f"python {e['python']}, pyzmq {e['pyzmq']} / libzmq {e['libzmq']}, numpy {e['numpy']}, {e['cpus']} CPUs")
    p(f"OMP_NUM_THREADS={e['OMP_NUM_THREADS']} OPENBLAS_NUM_THREADS={e['OPENBLAS_NUM_THREADS']} "
      f"OPENBLAS_CORETYPE={e['OPENBLAS_CORETYPE']} OPENBLAS_L2_SIZE={e['OPENBLAS_L2_SIZE']}  "
      f"load average before {rep['load_before'][0]:.2f}, after {rep['load_after'][0]:.2f}")
    p()
    p(f"1. barrier latency: empty superstep ({z['barrier_steps']} per run after {z['barrier_warmup']} warm-up) "
      f"vs raw round trip ({z['rtt_n']} per run)")
    p(f"   {'':42}{'median':>12}{'p10':>12}{'p90':>12}   per-round medians (ms)")
    rows = [("engine empty superstep, 2 workers", "engine_2w"), ("engine empty superstep, 4 workers", "engine_4w"),
            ("raw pyzmq DEALER/ROUTER round trip", "raw_rtt"),
            ("raw pyzmq barrier pattern, 2 workers *", "raw_pattern_2w"),
            ("raw pyzmq barrier pattern, 4 workers *", "raw_pattern_4w")]
    for label, k in rows:
        s_ = b[k]
        p(f"   {label:42}{ms(s_['median'])}{ms(s_['p10'])}{ms(s_['p90'])}   {rounds(s_['round_medians'])}")
    p("   * attribution only: master here + N processes; BEGIN -> 1 frame to each peer -> DONE; no codec, no poller")
    p(f"   other work on the machine meanwhile: {b['foreign_cores']:.2f} cores busy on average")
    p(f"   ratio engine / raw round trip: 2 workers {r['barrier_2w_vs_rtt']:.1f}x, 4 workers {r['barrier_4w_vs_rtt']:.1f}x "
      f"(target <= {TARGET_BARRIER_X:g}x)")
    p(f"   ratio engine / raw barrier pattern: 2 workers {r['barrier_2w_vs_raw_pattern']:.1f}x, "
      f"4 workers {r['barrier_4w_vs_raw_pattern']:.1f}x")
    p()
    mib = a["bytes"] / 2**20
    en = a["engine"]
    p(f"2. {mib:.0f} MiB float32 array, worker 0 -> worker 1 ({z['array_steps']} supersteps per run after 1 warm-up; "
      f"raw: {z['raw_reps']} transfers per run after {z['raw_warmup']})")
    p(f"   {'':42}{'median':>12}{'min':>12}{'GB/s':>9}   per-round medians (ms)")
    p(f"   {'engine superstep wall_s (raw)':42}{ms(en['s']['median'])}{ms(en['s']['min'])}{en['gbps']:9.3f}   "
      f"{rounds(en['s']['round_medians'])}")
    corr = en["gbps_corrected"]
    p(f"   {'engine minus 2-worker barrier (corrected)':42}{ms(en['s']['median'] - b['engine_2w']['median'])}"
      f"{'':12}{corr if corr is not None else float('nan'):9.3f}")
    for key, label in (("raw_single", "raw PUSH/PULL (a) single frame"), ("raw_chunked", "raw PUSH/PULL (b) 4 MiB frames"),
                       ("raw_chunked_reassembled", "raw (b) + receiver reassembly *")):
        s_ = a[key]["s"]
        label = f"{label} x{a[key]['frames']}"
        p(f"   {label:42}{ms(s_['median'])}{ms(s_['min'])}{a[key]['gbps']:9.3f}   {rounds(s_['round_medians'])}")
    p(f"   other work on the machine meanwhile: {a['foreign_cores']:.2f} cores busy on average")
    p("   * attribution only: (b), then the receiver copies the frames into one fresh array as codec.decode does")
    p(f"   engine / raw single frame: {r['engine_raw_vs_single']:.2f} raw, {r['engine_corrected_vs_single']:.2f} corrected "
      f"(target >= {TARGET_THROUGHPUT_FRACTION:g})")
    p(f"   engine / raw chunked:      {r['engine_raw_vs_chunked']:.2f} raw, {r['engine_corrected_vs_chunked']:.2f} corrected")
    p(f"   raw chunked / raw single:  {r['chunked_vs_single']:.2f} (project expects > 1)")
    chk = a["checks"]
    p(f"   first superstep (source array first touch + warm-up): "
      f"{', '.join(ms(c['first_superstep_s']).strip() for c in chk)}; receiver check: "
      f"{'ok' if all(c['check_ok'] for c in chk) else 'FAILED'} ({chk[0]['received']} arrays per run, "
      f"{sum(c['bad_shape'] for c in chk)} bad); BATCH bytes per superstep {a['bytes_per_superstep_metric']:,}")
    if "w1_wait" in a:
        p(f"   worker DONE stats (median per superstep): w0 send (encode + queue) {ms(a['w0_send']['s']['median']).strip()}, "
          f"w0 wait for w1's empty batch {ms(a['w0_wait']['s']['median']).strip()}, "
          f"w1 wait (receive + decode) {ms(a['w1_wait']['s']['median']).strip()}")
    if "raw_reassembly_copy" in a:
        p(f"   raw receiver reassembly copy alone (fresh array per message): "
          f"{ms(a['raw_reassembly_copy']['s']['median']).strip()}")
    c = a["codec_in_process"]
    p(f"   codec in-process: encode {ms(c['chunked_4MiB']['encode_s']).strip()}; decode of {c['chunked_4MiB']['frames']} "
      f"frames {ms(c['chunked_4MiB']['decode_s']).strip()} (first call {ms(c['chunked_4MiB']['decode_first_s']).strip()}); "
      f"decode of 1 frame {ms(c['single_frame']['decode_s']).strip()}")
    p()
    sec = rep["secure"]
    p("2b. CURVE (--secure: authentication + encryption on every socket) vs plaintext, 2 workers, same run")
    p(f"   empty superstep: {ms(sec['barrier_2w_secure']['median']).strip()} secure vs "
      f"{ms(sec['barrier_2w_plain']['median']).strip()} plain = {sec['barrier_secure_vs_plain']:.2f}x")
    p(f"   {mib:.0f} MiB array superstep: {sec['array_gbps_secure']:.3f} GB/s secure vs {sec['array_gbps_plain']:.3f} "
      f"GB/s plain = {sec['array_secure_vs_plain_throughput']:.2f} of plaintext throughput")
    p()
    lo, cl = pr["local_1w"], pr["cluster_2w"]
    p(f"3. pagerank {pr['vertices']:,} vertices / {pr['edges']:,} edges (seed {pr['seed']}), {pr['iterations']} iterations, tol=0")
    p(f"   {'':28}{'wall_s':>10}{'supersteps':>12}{'outside':>10}{'run_job':>10}{'bytes sent':>14}")
    for label, x in (("LocalRuntime, 1 worker", lo), ("cluster, 2 workers", cl)):
        sent = f"{x['bytes']:14,}" if label.startswith("cluster") else f"{'-':>14}"
        p(f"   {label:28}{x['wall_s']:9.2f}s{x['supersteps_sum_s']:11.2f}s{x['outside_supersteps_s']:9.2f}s"
          f"{x['run_job_s']:9.2f}s{sent}")
    p(f"   ratio cluster / local: wall_s {r['pagerank_cluster_vs_local_wall_s']:.2f}x, sum of superstep walls "
      f"{r['pagerank_cluster_vs_local_supersteps']:.2f}x, run_job end to end {r['pagerank_cluster_vs_local_run_job']:.2f}x")
    p("   wall_s is not like for like: local starts after the graph is built; cluster includes the workers starting,")
    p("   joining and each parsing the whole edge list. run_job also includes the caller's own build in both.")
    p(f"   other work on the machine meanwhile: {pr['foreign_cores']:.2f} cores busy on average")
    p(f"   same ranks: vertex sets equal {pr['same_vertices']}, max |local - cluster| = {pr['max_abs_rank_diff']}")
    p()
    p("targets:")
    for k, ok in rep["targets"].items():
        p(f"   {'met   ' if ok else 'MISSED'}  {k}")
    if "profile" in rep:
        p()
        p(f"profile of one {mib:.0f} MiB run ({z['array_steps'] + 1} supersteps incl. the warm-up), both workers under "
          f"cProfile (per superstep; cProfile adds overhead):")
        for w, prof in rep["profile"].items():
            p(f"   {w}:")
            for label, v in prof["per_superstep_s"].items():
                p(f"      {label:58}{ms(v)}")
            p("      top by own time (whole process, including start-up):")
            for t in prof["top_tottime"]:
                p(f"        {t['tottime_s']:8.3f}s own {t['cumtime_s']:8.3f}s cum {t['calls']:7d}x  {t['function']}")
    p()
    p(f"total benchmark time {rep['total_s']:.1f}s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 1 round: the CI smoke run, figures meaningless")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ap.add_argument("--profile", action="store_true",
                    help="also run the bulk-array job with both workers under cProfile and summarise")
    ap.add_argument("--rounds", type=int, default=None,
                    help="interleaved rounds of sections 1 and 2, samples pooled (default 2, --quick 1)")
    ap.add_argument("--seed", type=int, default=0, help="edge-list generator seed (default 0, as graph_local.py)")
    args = ap.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.quick or args.smoke else 2
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    rep = run_all(args)
    if args.json:
        print(json.dumps(rep, indent=2, default=str))
    else:
        print_text(rep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
