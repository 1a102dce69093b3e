"""The commands that read a run or the job registry: ``jobs``, ``params``, ``checkpoint``, ``trace``,
``report``, ``ui``, and ``keys``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from ..errors import MarianaError, StorageError, UsageError
from ..jobs.registry import BUILTIN_JOBS, get_job
from ..storage import RunDir

log = logging.getLogger("mariana")


def cmd_jobs(args: argparse.Namespace) -> int:
    """``mariana jobs [JOB] [--json]``: every built-in job with its config keys, or one job's keys
    (a built-in name or ``package.module:attribute``; an unknown name: one line listing the jobs)."""
    one = getattr(args, "job", None)
    jobs = [get_job(one)] if one else [get_job(name) for name in BUILTIN_JOBS]
    if args.json:
        docs = [_job_doc(j) for j in jobs]
        print(json.dumps(docs[0] if one else docs, indent=2, default=str))
        return 0
    for j in jobs:
        print(f"{j.name}: {j.description}")
        for k in j.keys:
            print(f"    {_key_line(k)}")
    if one:
        print(f"set a key with --set KEY=VALUE, or in --config FILE.toml (top level or a [{jobs[0].name}] table)")
    return 0


def _job_doc(job: Any) -> dict[str, Any]:
    """One job and its keys as ``mariana jobs --json`` prints them."""
    return {"name": job.name, "description": job.description,
            "keys": [{"name": k.name, "type": k.type, "default": k.default, "help": k.help,
                      **({"choices": list(k.choices)} if k.choices else {}),
                      **({"minimum": k.minimum} if k.minimum is not None else {})} for k in job.keys]}


def _key_line(k: Any) -> str:
    """``name = default  [type]  help (one of: ...) (>= minimum)``."""
    choices = f" (one of: {', '.join(map(str, k.choices))})" if k.choices else ""
    minimum = f" (>= {k.minimum:g})" if k.minimum is not None else ""
    return f"{k.name} = {json.dumps(k.default, default=str)}  [{k.type}]  {k.help}{choices}{minimum}"


def cmd_params(args: argparse.Namespace) -> int:
    """``mariana params export RUN --to FILE.npz [--checkpoint S]``."""
    import io

    import numpy as np

    from ..jobs.export import run_params
    from ..storage import write_bytes
    from ..storage.rundir import check_writable

    check_writable(args.to, "--to", inside=False)  # before the parameters are read, not after
    try:
        named, source = run_params(args.run, args.checkpoint)
    except MarianaError as exc:
        raise UsageError(str(exc)) from None
    buf = io.BytesIO()
    np.savez(buf, **dict(named))  # type: ignore[arg-type]  # numpy stubs
    write_bytes(args.to, buf.getvalue())
    print(f"wrote {len(named)} arrays ({', '.join(n for n, _ in named)}) from the {source} to {args.to}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """``mariana report RUN --out FILE.html`` (a sweep directory: the sweep's page, issue 21)."""
    from ..report import write_report
    from ..sweep import is_sweep

    if is_sweep(args.run):
        from ..report.sweep import write_sweep_report

        info = write_sweep_report(args.run, args.out)
        if args.json:
            print(json.dumps(info, default=str))
        else:
            print(f"wrote {args.out}: sweep of {len(info['trials'])} trials ({info['status']}), "
                  f"{len(info['figures'])} plots ({info['bytes'] // 1024} KiB, opens without a network)")
        return 0

    if args.out is None:  # beside the run it describes, not in the current directory
        args.out = RunDir(args.run, create=False).url.rstrip("/") + "/report.html"
    doc = write_report(args.run, args.out)
    if args.json:
        print(json.dumps(doc))
    else:
        print(f"wrote {args.out}: {doc['status']} run, {doc['supersteps']} supersteps, "
              f"{len(doc['figures'])} plots ({doc['bytes'] // 1024} KiB, opens without a network)")
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    """``mariana ui RUN``: serve the job page of a run directory until interrupted."""
    import threading

    from ..report import collect
    from ..report.live import LiveServer

    from ..sweep import is_sweep

    if is_sweep(args.run):  # a sweep directory: the sweep's page (issue 21)
        from ..report.sweep import SweepServer

        server: Any = SweepServer(args.run, args.bind)
    else:
        collect(args.run)  # not a run directory: one line, exit 2, before anything is served
        server = LiveServer(args.run, args.bind)
    url = server.start()
    print(url, flush=True)
    print(f"mariana ui: serving {args.run} at {url} (JSON: {url}api/state); Ctrl-C stops", file=sys.stderr, flush=True)
    try:
        threading.Event().wait()
    finally:
        server.close()
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from ..comm.security import add_key, init_keys

    if args.keys_command == "init":
        secret = init_keys(args.dir)
        print(f"master keypair: {secret} (secret, mode 600) and {args.dir}/master.key; allow-list: {args.dir}/allowed/")
    else:
        secret = add_key(args.dir, args.name)
        print(f"worker key: {secret} (copy it to the worker host, keep it mode 600); "
              f"its public key is allowed in {args.dir}/allowed/{args.name}.key")
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    """``mariana trace summary|show|export|replay``: thin shells over ``mariana.trace``."""
    from .. import trace

    if args.trace_command == "export":
        n = trace.export_chrome(args.run, args.chrome)
        print(f"wrote {n} trace events to {args.chrome} (open it in https://ui.perfetto.dev or chrome://tracing)")
        return 0
    if args.trace_command == "replay":
        from ..trace.replay import format_replay, replay

        r = replay(args.run, args.vertex, args.superstep, pdb=args.pdb)
        if args.json:
            print(json.dumps({k: v for k, v in r.items() if k not in ("sent", "original", "aggregated")}))
        else:
            print(format_replay(r))
        return 0 if r["matches"] else 1
    if args.trace_command == "summary":
        text, doc = trace.cmd_summary(args.run)  # with the run's counters, if any
        print(json.dumps(doc, default=str) if args.json else text)
        return 0
    data = trace.load_trace(args.run)
    doc = trace.show(data, args.superstep, worker=args.worker, vertex=args.vertex, run=args.run)
    print(json.dumps(doc, default=str) if args.json else trace.format_show(doc))
    return 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    """``mariana checkpoint list RUN``: every checkpoint with its superstep, time, size, validity."""
    from ..storage.checkpoint import Checkpoints

    try:
        ck = Checkpoints(RunDir(args.run, create=False))
    except StorageError as exc:
        raise UsageError(str(exc)) from None
    infos = [ck.inspect(ss, args.verify) for ss in ck.supersteps()]
    snapshots = set(ck.params.supersteps())
    params = {i.superstep: ck.params.inspect(i.superstep, args.verify) if i.superstep in snapshots else None
              for i in infos}

    ok = "valid" if args.verify else "committed"  # without verifying, a manifest is all we know of

    def status(info: Any) -> str:
        return "-" if info is None else ok if info.valid else f"INVALID: {info.why}"

    if args.json:
        print(json.dumps([{k: v for k, v in vars(i).items() if k != "loaded"}
                          | {"verified": args.verify, "params": status(params[i.superstep])} for i in infos]))
        return 0
    if not infos:
        print(f"no checkpoints in {args.run}")
        return 0
    print(f"{'superstep':>9}  {'time':<24}  {'bytes':>12}  {'params snapshot':<15}  status")
    for i in infos:
        print(f"{i.superstep:>9}  {i.time or '-':<24}  {i.size:>12}  {status(params[i.superstep]):<15}  {status(i)}")
    return 0
