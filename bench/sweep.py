#!/usr/bin/env python
"""ASHA vs full-budget random search (vs Optuna's TPE, when installed) on the same search.

    python bench/sweep.py              # dnn-dp on digits, 16 trials over lr, batch size, optimizer, 9 epochs each
    python bench/sweep.py --quick      # 4 trials, 3 epochs, a small model: a smoke run in seconds
    python bench/sweep.py --parallel 2 --json
    python bench/sweep.py --hosts 2 --quick  # random+asha on this machine (--parallel 2) vs across 2 worker hosts on loopback

Both mariana sweeps draw the same 16 configurations (same space, same seed) and give each the
same budget (``epochs``); ``fifo`` trains every trial to the end, ``asha`` (grace 1 epoch,
reduction 3: rungs at 1, 3, 9 epochs) stops the ones behind at each rung, ``halving``
(synchronous successive halving, same rungs) keeps the best third of each rung. Optuna, when
installed, draws the same number of trials with its TPE sampler (``--search tpe``) for the same
budget, through the same driver. Figures: the best ``test_accuracy`` found, wall seconds, and the
epochs trained in all (which the load of a shared machine does not change); ratios against the
full random search measured in the same run. Target: ASHA within 0.5 points of the full
search's best in at most 0.4x its time. Progress on stderr, the result on stdout.

``--hosts N`` compares instead ``random+asha`` with ``--parallel K`` (default N) on this machine
with the same sweep across N ``mariana worker --sweep`` hosts started on loopback
(``--listen``): wall seconds, the ratio to the local sweep, and whether the rankings are equal.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from mariana.sweep import Sweep, SweepSpec, parse_space  # noqa: E402

SPACE = ["lr=loguniform(1e-3, 3e-1)", "batch_size=choice(32, 64, 128)", "optimizer=choice(sgd, momentum, adagrad)"]


def _hosts(n: int) -> tuple[str, list[subprocess.Popen]]:
    """``n`` worker hosts (``mariana worker --sweep``) on loopback, waiting for a sweep at the endpoint."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    # the hosts share this machine: each gets cores/N BLAS threads, as each local trial of --parallel N gets
    # (with every host's worker on all cores, OpenBLAS threads spinning on an oversubscribed machine
    # measured 7x slower compute here)
    from mariana.engine.threads import thread_vars

    env = {**os.environ, **thread_vars(n), "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    return endpoint, [subprocess.Popen([sys.executable, "-m", "mariana", "-q", "worker", "--sweep", endpoint], env=env,
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL) for _ in range(n)]


def run_sweep(root: str, search: str, scheduler: str, trials: int, config: dict[str, Any], seed: int,
              parallel: int, hosts: int = 0) -> dict[str, Any]:
    from mariana.jobs.registry import get_job, resolve_config
    from mariana.sweep.remote import Remote

    spec = SweepSpec(job="dnn-dp", config=resolve_config(get_job("dnn-dp"), config), space=parse_space(SPACE),
                     trials=trials, seed=seed, metric="test_accuracy", mode="max", scheduler=scheduler,
                     grace=1, reduction=3, parallel=parallel, search=search)
    procs: list[subprocess.Popen] = []
    remote = None
    if hosts:
        endpoint, procs = _hosts(hosts)
        remote = Remote(endpoint)
        remote.check()
    t0 = time.perf_counter()
    try:
        ranked = Sweep.create(os.path.join(root, f"{search}-{scheduler}-{hosts}"), spec).run(remote=remote)
    finally:
        for p in procs:  # the sweep ended them (exit 0); a failed sweep's are killed
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    wall = time.perf_counter() - t0
    best = ranked[0]
    where = f" across {hosts} hosts" if hosts else (f" --parallel {parallel}" if parallel > 1 else "")
    return {"search": f"{search}+{scheduler}{where}", "wall_s": round(wall, 3),
            "ranking": [(t.index, t.status, t.reports, t.last) for t in ranked], "best": best.last, "best_trial": best.index,
            "best_params": best.params, "epochs_trained": sum(t.reports for t in ranked),
            "stopped": sum(t.status == "stopped" for t in ranked), "failed": sum(t.status == "failed" for t in ranked),
            "reports": {t.index: t.reports for t in ranked}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", "--smoke", action="store_true", help="4 trials, 3 epochs, a small model (seconds)")
    ap.add_argument("--trials", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parallel", type=int, default=1, help="trials at once (both mariana searches)")
    ap.add_argument("--no-optuna", action="store_true")
    ap.add_argument("--hosts", type=int, default=0, metavar="N",
                    help="random+asha here (--parallel K, default N) vs across N worker hosts on loopback")
    ap.add_argument("--data", default=None, metavar="NAME",
                    help="dnn-dp's data set (default: the bundled digits); e.g. fashion-mnist, whose 10,000 "
                         "test images make 0.5 points 50 images rather than 2")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.hosts:
        return hosts_main(args)
    trials = args.trials or (4 if args.quick else 16)
    config: dict[str, Any] = {"epochs": args.epochs or (3 if args.quick else 9)}
    if args.quick:
        config["model"] = ["dense:32:relu", "dense:10"]
    if args.data:
        config["data"] = args.data
    data = args.data or "digits"
    try:
        import optuna  # noqa: F401
        searches = [("random", "fifo"), ("random", "asha"), ("random", "halving"), ("tpe", "fifo")]
    except ImportError:
        print("sweep: optuna is not installed: the TPE row is left out", file=sys.stderr)
        searches = [("random", "fifo"), ("random", "asha"), ("random", "halving")]
    if args.no_optuna:
        searches = searches[:3]
    rows = []
    with tempfile.TemporaryDirectory(prefix="mariana-bench-sweep-") as root:
        for search, scheduler in searches:
            print(f"sweep: {search}+{scheduler}, {trials} trials x {config['epochs']} epochs ...", file=sys.stderr,
                  flush=True)
            rows.append(run_sweep(root, search, scheduler, trials, config, args.seed, args.parallel))
    full = rows[0]
    for r in rows:
        r["time_ratio"] = round(r["wall_s"] / full["wall_s"], 3)
        r["epochs_ratio"] = round(r["epochs_trained"] / full["epochs_trained"], 3)
        r["points_behind"] = round(100 * (full["best"] - r["best"]), 3)
    asha = rows[1]
    # the full search's best trial is the same configuration in the ASHA sweep (same space, same seed)
    asha["full_best_trial"] = full["best_trial"]
    asha["full_best_epochs_under_asha"] = asha["reports"][full["best_trial"]]
    verdict = {"target": "ASHA within 0.5 points of the full search's best in <= 0.4x its time",
               "met": asha["points_behind"] <= 0.5 and asha["time_ratio"] <= 0.4}
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    if args.json:
        print(json.dumps({"data": data, "trials": trials, "epochs": config["epochs"], "parallel": args.parallel, "rows": rows,
                          "verdict": verdict, "load": load}))
        return 0
    print(f"dnn-dp on {data}, {trials} trials over {', '.join(SPACE)}; {config['epochs']} epochs each at most; "
          f"load average {load}")
    print(f"{'search':>12} {'best acc':>9} {'behind':>7} {'wall s':>8} {'x full':>7} {'epochs':>7} {'x full':>7} "
          f"{'stopped':>7}  best params")
    for r in rows:
        print(f"{r['search']:>12} {r['best']:>9.4f} {r['points_behind']:>6.2f}p {r['wall_s']:>8.2f} {r['time_ratio']:>7.3f} "
              f"{r['epochs_trained']:>7} {r['epochs_ratio']:>7.3f} {r['stopped']:>7}  {r['best_params']}")
    print(f"the full search's best, trial {full['best_trial']}, trained {asha['full_best_epochs_under_asha']} "
          f"epoch(s) under ASHA")
    print(f"{verdict['target']}: {'met' if verdict['met'] else 'NOT met'}")
    return 0


def hosts_main(args: argparse.Namespace) -> int:
    """``--hosts N``: the same ASHA sweep on this machine and across N loopback worker hosts."""
    trials = args.trials or (4 if args.quick else 16)
    config: dict[str, Any] = {"epochs": args.epochs or (3 if args.quick else 9)}
    if args.quick:
        config["model"] = ["dense:32:relu", "dense:10"]
    k = args.parallel if args.parallel > 1 else args.hosts
    rows = []
    with tempfile.TemporaryDirectory(prefix="mariana-bench-sweep-") as root:
        for hosts in (0, args.hosts):
            print(f"sweep: random+asha, {trials} trials x {config['epochs']} epochs, {k} at once"
                  f"{f' across {hosts} hosts' if hosts else ' here'} ...", file=sys.stderr, flush=True)
            rows.append(run_sweep(root, "random", "asha", trials, config, args.seed, k, hosts))
    local, remote = rows
    remote["time_ratio"] = round(remote["wall_s"] / local["wall_s"], 3)
    same = remote["ranking"] == local["ranking"]
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    if args.json:
        print(json.dumps({"trials": trials, "epochs": config["epochs"], "parallel": k, "hosts": args.hosts,
                          "rows": rows, "same_ranking": same, "load": load}))
        return 0
    print(f"dnn-dp on digits, random+asha, {trials} trials, {config['epochs']} epochs at most, {k} at once; "
          f"load average {load}")
    for r in rows:
        print(f"{r['search']:>32} best {r['best']:.4f} wall {r['wall_s']:8.2f} s  epochs {r['epochs_trained']}")
    print(f"across hosts / here: {remote['time_ratio']:.3f}x wall; same ranking: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
