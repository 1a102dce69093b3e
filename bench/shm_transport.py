#!/usr/bin/env python
"""Same-host shared memory (comm/shm.py) vs zmq over tcp loopback.

    python bench/shm_transport.py                  # (a) transport rounds, (b) dnn-dp 784-2048x3-10
    python bench/shm_transport.py --skip-run       # (a) only
    python bench/shm_transport.py --quick          # fewer rounds, dnn-dp 784-512x3-10, 20 steps
    python bench/shm_transport.py --smoke          # 3 rounds, dnn-dp 784-64x3-10, 3 steps, once: CI smoke run

(a) Two processes each send the other 40 MB (ten 4 MB float32 arrays in one BATCH record) per
round and receive the other's, through the engine's path: ``Shm.encode`` (or ``codec.encode``),
``send_frames`` to a DEALER, ``recv`` on a ROUTER with the shm resolver, ``codec.decode``, the
shm notes piggy-backed both ways; the received arrays are dropped unread (only the transport is
timed). CPU seconds per round of each process (``time.process_time``, zmq's I/O thread included)
= sender + receiver CPU per 40 MB; wall per round.

(b) ``mariana run dnn-dp --workers 2`` (784-2048x3-10, batch 256, 60 steps, synthetic data, one
BLAS thread) with shared memory (the default) and with ``--no-shm``, interleaved ``--rounds``
times: process wall and superstep wall (medians), ratio off/on. Both with the environment as it
is and with ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` removed (bench/common.py).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import THREAD_VARS, variant_envs  # noqa: E402

MB = 1 << 20


def _side(me: int, ports: list[int], use_shm: bool, rounds: int, warmup: int, q: Any) -> None:
    import numpy as np
    import zmq

    from mariana.comm.shm import Shm
    from mariana.comm import Transport, recv, send_frames
    from mariana.messages import codec, wire

    peer, job = 1 - me, "b" * 32
    t = Transport()
    router, _ = t.router(f"tcp://127.0.0.1:{ports[me]}", mandatory=False)
    dealer = t.dealer(f"tcp://127.0.0.1:{ports[peer]}", f"{job}/{me}".encode())
    shm = Shm(job, me, enabled=use_shm)
    payload = [np.full(MB, float(i), np.float32) for i in range(10)]  # 10 x 4 MB
    msgs = [[f"v{me}", f"v{peer}", None, a] for a in payload]

    def resolve(identity: Any, frames: Any) -> list:
        return shm.resolve(peer, frames)

    poll = zmq.Poller()
    poll.register(router, zmq.POLLIN)
    placed_total = 0
    for r in range(warmup + rounds):
        if r == warmup:
            cpu0, wall0, placed_total = time.process_time(), time.perf_counter(), 0
        header = wire.Batch(r, me, msgs).to_wire(job)
        notes = shm.notes(peer)  # (None: nothing to tell the peer)
        header["shm_notes"] = notes.to_wire() if notes else None
        frames, placed = shm.encode(peer, header) if use_shm else (codec.encode(header), 0)
        placed_total += placed
        send_frames(dealer, frames)
        while not poll.poll(10_000):
            raise SystemExit("no message from the peer")
        _, got, _ = recv(router, True, resolve=resolve)
        shm.notes_in(peer, got.get("shm_notes"))
        assert got["msgs"][3][3][0] == 3.0
        del got
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    q.put({"me": me, "cpu_ms": 1000 * cpu / rounds, "wall_ms": 1000 * wall / rounds,
           "shm_mb": placed_total / rounds / MB})
    time.sleep(0.2)  # the peer's last message out first
    shm.close()
    t.close()


def _results(q: Any, procs: list[Any], timeout: float = 300.0) -> list[dict[str, Any]]:
    """One result per side; a side that dies ends the wait at once (not after ``timeout``)."""
    import queue

    deadline = time.monotonic() + timeout
    out: list[dict[str, Any]] = []
    while len(out) < len(procs):
        try:
            out.append(q.get(timeout=1.0))
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise SystemExit(f"a side of the transport run exited with code {dead[0]}") from None
            if time.monotonic() > deadline:
                raise SystemExit(f"no result from the transport run after {timeout:.0f} s") from None
    return out


def transport(rounds: int, warmup: int) -> dict[str, Any]:
    import socket

    out: dict[str, Any] = {}
    ctx = mp.get_context("spawn")
    for name, use_shm in (("tcp", False), ("shm", True)):
        ports = []
        for _ in range(2):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
        q = ctx.Queue()
        procs = [ctx.Process(target=_side, args=(me, ports, use_shm, rounds, warmup, q)) for me in (0, 1)]
        for p in procs:
            p.start()
        res = sorted(_results(q, procs), key=lambda d: d["me"])
        for p in procs:
            p.join(timeout=30)
        out[name] = {"cpu_ms_per_40mb": [round(d["cpu_ms"], 2) for d in res],
                     "wall_ms_per_round": round(max(d["wall_ms"] for d in res), 2),
                     "shm_mb_per_round": [round(d["shm_mb"], 1) for d in res]}
    return out


def run_dnn(env: dict[str, str], data: str, hidden: list[int], steps: int, shm: bool, tmp: str) -> dict[str, float]:
    model = json.dumps([f"dense:{h}:relu" for h in hidden] + ["dense:10"])
    cmd = [sys.executable, "-m", "mariana", "run", "dnn-dp", "--workers", "2", "--json",
           "--run-dir", tempfile.mkdtemp(dir=tmp), "--set", f"data={data}", "--set", f"model={model}",
           "--set", "batch_size=256", "--set", f"steps={steps}", "--set", "test_fraction=0", "--set", "lr=0.01"]
    if not shm:
        cmd.append("--no-shm")
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    process_s = time.perf_counter() - t
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    return {"process_s": process_s, "supersteps_s": out["wall_s"]}


def dnn(rounds: int, hidden: list[int], steps: int, variants: str = "auto") -> dict[str, Any]:
    import numpy as np

    base = {**os.environ, **{k: "1" for k in THREAD_VARS}}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        data = os.path.join(tmp, "data.npz")
        np.savez(data, x=rng.standard_normal((256 * steps, 784)).astype(np.float32),
                 y=rng.integers(0, 10, 256 * steps))
        for name, env in variant_envs(variants, base):
            runs: dict[str, list[dict[str, float]]] = {"shm": [], "no-shm": []}
            for r in range(rounds):
                for key in ("shm", "no-shm"):
                    print(f"[{time.strftime('%H:%M:%S')}] {name} round {r + 1}/{rounds}: {key}", file=sys.stderr)
                    runs[key].append(run_dnn(env, data, hidden, steps, key == "shm", tmp))
            med = {k: {m: statistics.median(x[m] for x in v) for m in ("process_s", "supersteps_s")}
                   for k, v in runs.items()}
            results[name] = {**med, "ratio_supersteps_off_over_on":
                             med["no-shm"]["supersteps_s"] / med["shm"]["supersteps_s"],
                             "ratio_process_off_over_on": med["no-shm"]["process_s"] / med["shm"]["process_s"]}
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="3 transport rounds, one tiny dnn-dp run each way: the CI smoke run")
    ap.add_argument("--rounds", type=int, default=None, help="dnn-dp runs per setting (interleaved; default 3, --smoke 1)")
    ap.add_argument("--transport-rounds", type=int, default=None)
    ap.add_argument("--skip-run", action="store_true", help="only (a)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tr = args.transport_rounds or (3 if args.smoke else 20 if args.quick else 100)
    rounds = args.rounds or (1 if args.smoke else 3)
    result: dict[str, Any] = {"cores": len(os.sched_getaffinity(0)), "transport": transport(tr, 1 if args.smoke else 5)}
    if not args.skip_run:
        hidden = [64] * 3 if args.smoke else [512] * 3 if args.quick else [2048] * 3
        steps = 3 if args.smoke else 20 if args.quick else 60
        result["dnn_dp"] = {"model": [784, *hidden, 10], "steps": steps,
                            **dnn(rounds, hidden, steps, "env" if args.smoke else "auto")}
    if args.json:
        print(json.dumps(result))
        return 0
    for name, d in result["transport"].items():
        print(f"(a) {name}: CPU per 40 MB out + 40 MB in, per process {d['cpu_ms_per_40mb']} ms; "
              f"wall per round {d['wall_ms_per_round']} ms; through shm {d['shm_mb_per_round']} MB/round")
    for name, d in result.get("dnn_dp", {}).items():
        if isinstance(d, dict):
            print(f"(b) {name}: shm supersteps {d['shm']['supersteps_s']:.2f} s, process {d['shm']['process_s']:.2f} s; "
                  f"--no-shm supersteps {d['no-shm']['supersteps_s']:.2f} s, process {d['no-shm']['process_s']:.2f} s; "
                  f"ratio off/on supersteps {d['ratio_supersteps_off_over_on']:.3f}, "
                  f"process {d['ratio_process_off_over_on']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
