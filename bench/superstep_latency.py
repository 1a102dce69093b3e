#!/usr/bin/env python
"""Empty-superstep latency of the cluster runtime vs raw pyzmq, interleaved in one run.

    python bench/superstep_latency.py             # 2 and 4 workers, 3 rounds, 400 supersteps each
    python bench/superstep_latency.py --quick     # 1 round, 100 supersteps: seconds
    python bench/superstep_latency.py --json

Many-superstep algorithms (BFS and SSSP on high-diameter graphs: thousands of supersteps) pay
this per superstep. Measured with bench/transport.py's pieces, rounds interleaved so the load of
a shared machine hits engine and baselines alike:
- engine: the ``transport_jobs:barrier`` job (vertices never halt, never send) on the cluster
  runtime; the master-measured ``wall_s`` of each superstep (BEGIN sent -> every DONE back)
  after a warm-up;
- raw 3-hop pattern: the same protocol in raw pyzmq (master here, worker processes: BEGIN ->
  one frame to every peer -> one from every peer -> DONE);
- raw round trip: DEALER/ROUTER request/reply between two processes.
- engine as ``mariana run`` runs it: the same job with a run directory and traces (the CLI's
  defaults), timed from one superstep's metrics line to the next (``on_superstep``): the whole
  cycle a many-superstep job pays, metrics.jsonl and trace records included (not in the target).
Medians are pooled over rounds. Target (issue 19): engine <= 3x the raw 3-hop pattern. The
engine itself now runs the 2-hop protocol (BEGIN -> DONE; batches delivered at the next BEGIN,
empty ones not sent: cluster/worker.py); the raw 3-hop pattern stays the reference.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
from typing import Any  # noqa: E402

import tempfile  # noqa: E402
import time  # noqa: E402

from transport import engine_barrier, raw_barrier, raw_rtt  # noqa: E402

from mariana.jobs.launch import run_job  # noqa: E402

TARGET = 3.0


def engine_cycle(workers: int, steps: int, warmup: int) -> list[float]:
    """Seconds from one superstep's metrics line to the next, with a run directory and traces."""
    stamps: list[float] = []
    with tempfile.TemporaryDirectory(prefix="mariana-latency-") as run_dir:
        run_job("transport_jobs:barrier", sets=[f"vertices={max(4, workers)}", f"max_supersteps={warmup + steps}"],
                workers=workers, runtime="cluster", run_dir=run_dir, trace=True,
                on_superstep=lambda record: stamps.append(time.perf_counter()))
    return [b - a for a, b in zip(stamps, stamps[1:])][warmup:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", "--smoke", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--workers", nargs="+", type=int, default=[2, 4])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    steps = args.steps or (100 if args.quick else 400)
    warmup = 20 if args.quick else 50
    pool: dict[str, list[float]] = {}
    for rnd in range(rounds):
        pool.setdefault("rtt", []).extend(raw_rtt(steps * 2, warmup))
        for w in args.workers:
            pool.setdefault(f"engine_{w}", []).extend(engine_barrier(w, steps, warmup))
            pool.setdefault(f"raw_{w}", []).extend(raw_barrier(w, steps, warmup))
            pool.setdefault(f"cycle_{w}", []).extend(engine_cycle(w, steps, warmup))
            print(f"# round {rnd + 1}/{rounds}, {w} workers: engine {statistics.median(pool[f'engine_{w}']) * 1e3:.3f} ms, "
                  f"raw pattern {statistics.median(pool[f'raw_{w}']) * 1e3:.3f} ms", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in pool.items()}
    rep: dict[str, Any] = {"rounds": rounds, "steps": steps, "load": os.getloadavg(), "median_s": med,
           "vs_pattern": {w: med[f"engine_{w}"] / med[f"raw_{w}"] for w in args.workers},
           "vs_rtt": {w: med[f"engine_{w}"] / med["rtt"] for w in args.workers}}
    if args.json:
        print(json.dumps(rep, indent=1))
        return 0
    print(f"empty superstep latency, {rounds} round(s) x {steps} supersteps, load average {rep['load'][0]:.1f}")
    print(f"raw round trip: {med['rtt'] * 1e3:.3f} ms")
    for w in args.workers:
        ratio = rep["vs_pattern"][w]
        print(f"{w} workers: engine {med[f'engine_{w}'] * 1e3:.3f} ms, raw 3-hop pattern {med[f'raw_{w}'] * 1e3:.3f} ms "
              f"-> {ratio:.2f}x the pattern ({'met' if ratio <= TARGET else 'MISSED'} <= {TARGET:g}x), "
              f"{rep['vs_rtt'][w]:.1f}x the round trip; with a run directory and traces, "
              f"{med[f'cycle_{w}'] * 1e3:.3f} ms from one superstep to the next")
    return 0


if __name__ == "__main__":
    sys.exit(main())
