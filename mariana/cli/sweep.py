"""``mariana sweep JOB --param KEY=DIST ...`` and ``mariana sweep --resume SWEEP``: run a sweep's
trials (through ``mariana.sweep``), then print the ranking (a table, or JSON with ``--json``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from ..errors import UsageError

__all__ = ["add_sweep_parser", "cmd_sweep"]


def add_sweep_parser(sub: Any, job_args: Any) -> None:
    """The ``sweep`` subcommand (called from ``parser.build_parser``)."""
    s = sub.add_parser("sweep", help="search a job's config keys: random/grid search, ASHA early stopping, resumable")
    s.add_argument("job", nargs="?", help="a built-in job (see `mariana jobs`) or package.module:attribute")
    s.add_argument("--param", dest="params", action="append", default=[], metavar="KEY=DIST",
                   help="a key's distribution: uniform(LO,HI), loguniform(LO,HI), int(LO,HI), choice(A,B,...), "
                        "grid(A,B,...); repeat for more keys (also [sweep.params] in --config)")
    s.add_argument("--config", metavar="FILE.toml", help="base config keys (top level or a [JOB] table) and a "
                   "[sweep] table: its options (trials, seed, metric, ...) and [sweep.params]")
    s.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="a base config key every trial gets (VALUE parsed as TOML)")
    s.add_argument("--trials", type=int, default=None, metavar="N",
                   help="random draws (times every grid point); default 10, or 1 when there is a grid")
    s.add_argument("--seed", type=int, default=None, help="seed of the draws (default 0)")
    s.add_argument("--metric", default=None, help="what ranks trials: an aggregate of the job (default test_accuracy)")
    s.add_argument("--mode", choices=["max", "min"], default=None,
                   help="higher or lower is better (default: max for accuracies, min for losses)")
    s.add_argument("--search", default=None, help="random (default; grid keys crossed) or tpe (Optuna's TPE sampler, "
                   "each trial drawn from the results before it; needs mariana-bsp[sweep])")
    s.add_argument("--scheduler", default=None, help="fifo (every trial its full budget), asha (asynchronous successive "
                   "halving, as Ray Tune's ASHAScheduler), halving (synchronous); default fifo")
    s.add_argument("--grace", type=int, default=None, metavar="REPORTS",
                   help="first rung: reports of the metric (epochs for training jobs) before a trial can stop (default 1)")
    s.add_argument("--reduction", type=float, default=None, metavar="ETA",
                   help="rungs at grace x ETA^k; the top 1/ETA go on at each (default 3)")
    s.add_argument("--parallel", type=int, default=None, metavar="K",
                   help="trials at once on this machine, each with cores/K BLAS threads (default 1); with --listen, "
                        "trials at once on the joined hosts (a trial waits while fewer are idle than it needs)")
    s.add_argument("--workers", type=int, default=None, help="partitions of each trial (default 1)")
    s.add_argument("--sweep-dir", metavar="URL", help="where trials go (any fsspec URL); default runs/sweep-JOB-TIMESTAMP")
    s.add_argument("--resume", metavar="SWEEP", help="continue the sweep in SWEEP: finished trials are kept, "
                   "unfinished ones resume from their checkpoints")
    s.add_argument("--listen", metavar="tcp://HOST:PORT",
                   help="run the trials on worker hosts that join this queue (`mariana worker --sweep tcp://HOST:PORT` "
                        "or --master-file) instead of on this machine; each segment's master binds a free port on HOST. "
                        "The sweep directory must be storage every host reaches (s3://, a shared file system)")
    s.add_argument("--keys", metavar="DIR", help="with --listen: CURVE keys from `mariana keys init DIR` on the queue and "
                   "every trial's master (required off loopback, as for `mariana master`)")
    s.add_argument("--insecure", action="store_true", help="with --listen: allow a plaintext queue off loopback "
                   "(only on a network you trust)")
    s.add_argument("--master-file", metavar="FILE", help="with --listen: write the queue's endpoint (+ public key with "
                   "--keys; default DIR/master.json) for `mariana worker --master-file FILE`")
    s.add_argument("--worker-timeout", type=float, default=10.0, metavar="S",
                   help="with --listen: a host silent this long loses its trial's segment, which runs again from its "
                        "newest checkpoint on another host (default 10)")
    s.add_argument("--top", type=int, default=10, metavar="N", help="rows of the ranking printed (default 10)")
    s.add_argument("--json", action="store_true", help="print the ranking as JSON on stdout")


_OPTIONS: dict[str, type | tuple[type, ...]] = {"trials": int, "seed": int, "metric": str, "mode": str, "scheduler": str,
                                                "search": str, "grace": int,
            "reduction": (int, float), "parallel": int, "workers": int}


def _sweep_table(toml: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(options, params table) of the config file's ``[sweep]`` table, checked."""
    table = toml.pop("sweep", None) or {}
    if not isinstance(table, dict):
        raise UsageError(f"{path}: 'sweep' must be a table")
    params = table.pop("params", {}) or {}
    for key, value in table.items():
        kind = _OPTIONS.get(key)
        if kind is None:
            raise UsageError(f"{path}: unknown [sweep] option '{key}' (options: {', '.join(_OPTIONS)}, "
                             f"and the space in [sweep.params])")
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UsageError(f"{path}: [sweep] {key} has the wrong type ({value!r})")
    return table, params


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..jobs.registry import get_job, resolve_config
    from ..storage import default_run_url
    from ..sweep import Sweep, SweepSpec, infer_mode, parse_space
    from .run import _load_toml

    remote = _remote(args)  # refuse a bad --listen before anything is written
    if args.resume:
        if args.job or args.params or args.sets or args.config:
            raise UsageError("--resume continues a sweep as it was defined; JOB, --param, --set and --config cannot change it")
        sweep = Sweep.open(args.resume)
    else:
        if not args.job:
            raise UsageError("mariana sweep needs a JOB (see `mariana jobs`) or --resume SWEEP")
        job = get_job(args.job)
        toml = _load_toml(args.config)
        options, table = _sweep_table(toml, args.config or "")
        opt = {k: getattr(args, k) if getattr(args, k) is not None else options.get(k) for k in _OPTIONS}
        dists = parse_space(args.params, table, args.config or "")
        config = resolve_config(job, toml, args.sets, args.config or "")
        metric = opt["metric"] or "test_accuracy"
        has_grid = any(d.kind == "grid" for d in dists)
        spec = SweepSpec(job=args.job, config=config, space=dists,
                         trials=opt["trials"] if opt["trials"] is not None else (1 if has_grid else 10),
                         seed=opt["seed"] or 0, metric=metric, mode=opt["mode"] or infer_mode(metric),
                         scheduler=opt["scheduler"] or "fifo", grace=opt["grace"] or 1,
                         reduction=float(opt["reduction"] or 3), parallel=opt["parallel"] or 1, workers=opt["workers"] or 1,
                         search=opt["search"] or "random")
        url = args.sweep_dir or default_run_url(f"sweep-{job.name}")
        if remote is not None and "://" not in url:  # the hosts' workers open it too: no path relative to here
            url = os.path.abspath(url)
        sweep = Sweep.create(url, spec)
    spec = sweep.spec
    total = len(sweep.trials)
    t0 = time.perf_counter()
    where = f" on worker hosts joining {args.listen}" if remote is not None else ""
    print(f"mariana sweep: {total} trials of {spec.job} in {sweep.url} ({spec.scheduler}, {spec.metric} {spec.mode}, "
          f"{args.parallel or spec.parallel} at once{where})", file=sys.stderr, flush=True)

    def progress(e: dict[str, Any]) -> None:
        if e["event"] in ("completed", "stop", "failed"):
            done = sum(t.status in ("completed", "stopped", "failed") for t in sweep.trials)
            value = e.get("value")
            shown = f" {spec.metric}={value:.4g}" if isinstance(value, float) else ""
            what = "stopped" if e["event"] == "stop" else e["event"]
            print(f"  [{done}/{total}] trial {e['trial']} {what} after {e['reports']} report(s){shown}"
                  + (f": {e['error']}" if e.get("error") else ""), file=sys.stderr, flush=True)

    sweep.on_event = progress
    sweep.on_note = lambda text: print(f"  {text}", file=sys.stderr, flush=True)
    ranked = sweep.run(parallel=args.parallel, remote=remote)
    wall = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"sweep": sweep.url, "job": spec.job, "metric": spec.metric, "mode": spec.mode,
                          "scheduler": spec.scheduler, "wall_s": round(wall, 3),
                          "trials": [t.to_json() for t in ranked]}, default=str))
        return 0
    print(format_ranking(ranked, spec.metric, args.top))
    print(f"sweep directory: {sweep.url} ({wall:.1f}s; `mariana report {sweep.url}` draws it)", file=sys.stderr)
    return 0


def _remote(args: argparse.Namespace) -> Any:
    """The ``--listen`` placement, checked (keys, a bind off loopback), or None to run trials here."""
    if not args.listen:
        for flag in ("keys", "insecure", "master_file"):
            if getattr(args, flag):
                raise UsageError(f"--{flag.replace('_', '-')} goes with --listen tcp://HOST:PORT")
        return None
    from ..sweep.remote import Remote

    master_file = args.master_file or (os.path.join(args.keys, "master.json") if args.keys else None)
    remote = Remote(args.listen, keys=args.keys, insecure=args.insecure, host_timeout=args.worker_timeout,
                    master_file=master_file)
    remote.check()
    return remote


def format_ranking(ranked: list[Any], metric: str, top: int = 10) -> str:
    """The ranking as a text table: rank, trial, metric, status, reports, time, parameters."""
    rows = [f"{'rank':>4} {'trial':>5} {metric:>14} {'status':>9} {'reports':>7} {'time_s':>7}  params"]
    for rank, t in enumerate(ranked[:top], 1):
        value = f"{t.last:.6g}" if t.last is not None else "-"
        params = ", ".join(f"{k}={v}" for k, v in t.params.items())
        rows.append(f"{rank:>4} {t.index:>5} {value:>14} {t.status:>9} {t.reports:>7} {t.time_s:>7.1f}  {params}")
    if len(ranked) > top:
        rows.append(f"({len(ranked) - top} more: --top N, or --json)")
    return "\n".join(rows)
