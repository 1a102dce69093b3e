"""The ``mariana`` command. Errors are caught here, once: one line and exit 2 for bad input,
exit 1 with the vertex, superstep and traceback when a vertex program raises."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import tomllib
from typing import Any, Sequence

from .. import __version__
from ..errors import MarianaError, StorageError, UsageError, VertexError
from ..storage import RunDir, default_run_url
from .registry import BUILTIN_JOBS, get_job, resolve_config

log = logging.getLogger("mariana")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 too; keep one line, no usage dump
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="mariana", description="Mariana-BSP: a Bulk Synchronous Parallel vertex/message engine")
    p.add_argument("--version", action="version", version=f"mariana-bsp {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run a job")
    _job_args(r)
    r.add_argument("--resume", metavar="RUN", help="continue the run in RUN from its newest valid checkpoint")
    r.add_argument("--runtime", choices=["local", "cluster"], default=None,
                   help="local: every partition in this process; cluster: one process per worker "
                        "(default: local for 1 worker, cluster for more)")
    r.add_argument("--explain-placement", action="store_true", help="print the placement table and exit")
    r.add_argument("--secure", action="store_true",
                   help="CURVE authentication and encryption on every socket (keys made for this run)")

    m = sub.add_parser("master", help="run a job's master; workers join from any host")
    _job_args(m)
    m.add_argument("--bind", default="tcp://127.0.0.1:0", metavar="tcp://HOST:PORT",
                   help="control endpoint (default: loopback, random port)")
    m.add_argument("--keys", metavar="DIR", help="CURVE keys from `mariana keys init DIR` (required off loopback)")
    m.add_argument("--secure", action="store_true", help="use --keys on loopback too")
    m.add_argument("--insecure", action="store_true",
                   help="allow a plaintext master off loopback (only on a network you trust)")
    m.add_argument("--master-file", metavar="FILE", help="where to write endpoint + public key (default DIR/master.json)")

    w = sub.add_parser("worker", help="join a master as one worker")
    w.add_argument("--master", metavar="tcp://HOST:PORT")
    w.add_argument("--master-file", metavar="FILE", help="the master's endpoint and public key (from `mariana master`)")
    w.add_argument("--server-key", metavar="KEY", help="the master's public key: a .key file or its z85 text "
                   "(write --server-key=KEY: a key may start with '-')")
    w.add_argument("--key", metavar="FILE.key_secret", help="this worker's secret key (`mariana keys add`)")
    w.add_argument("--job", help="refuse to serve a master that runs another job")
    w.add_argument("--host", default="127.0.0.1", help="address to bind this worker's data socket on")
    w.add_argument("--connect-timeout", type=float, default=60.0, metavar="S", help="give up joining after S seconds")
    w.add_argument("--max-message-mb", type=int, default=1024, metavar="MB", help="largest frame accepted (MAXMSGSIZE)")

    k = sub.add_parser("keys", help="CURVE keys for secure multi-host jobs")
    ksub = k.add_subparsers(dest="keys_command", required=True, parser_class=_Parser)
    ki = ksub.add_parser("init", help="the master's keypair and an empty allow-list DIR/allowed/")
    ki.add_argument("dir", metavar="DIR")
    ka = ksub.add_parser("add", help="a worker keypair DIR/NAME.key_secret, its public key allowed")
    ka.add_argument("dir", metavar="DIR")
    ka.add_argument("name", metavar="NAME")

    t = sub.add_parser("trace", help="inspect the superstep traces of a run")
    tsub = t.add_subparsers(dest="trace_command", required=True, parser_class=_Parser)
    ts = tsub.add_parser("summary", help="time by phase, messages, stragglers, slowest superstep, flags")
    ts.add_argument("run", metavar="RUN")
    ts.add_argument("--json", action="store_true")
    tw = tsub.add_parser("show", help="everything known about one superstep (or one worker or vertex in it)")
    tw.add_argument("run", metavar="RUN")
    tw.add_argument("--superstep", type=int, required=True, metavar="S")
    tw.add_argument("--worker", type=int, metavar="K")
    tw.add_argument("--vertex", metavar="ID")
    tw.add_argument("--json", action="store_true")
    te = tsub.add_parser("export", help="one merged Chrome Trace Event file (opens in Perfetto)")
    te.add_argument("run", metavar="RUN")
    te.add_argument("--chrome", required=True, metavar="OUT.json")
    tr = tsub.add_parser("replay", help="rerun one vertex's compute from a checkpoint on its captured messages")
    tr.add_argument("run", metavar="RUN")
    tr.add_argument("--vertex", required=True, metavar="ID")
    tr.add_argument("--superstep", type=int, required=True, metavar="S")
    tr.add_argument("--pdb", action="store_true", help="step through compute at superstep S in pdb")
    tr.add_argument("--json", action="store_true")

    c = sub.add_parser("checkpoint", help="inspect the checkpoints of a run")
    csub = c.add_subparsers(dest="checkpoint_command", required=True, parser_class=_Parser)
    cl = csub.add_parser("list", help="superstep, time, size and validity of every checkpoint")
    cl.add_argument("run", metavar="RUN")
    cl.add_argument("--no-verify", dest="verify", action="store_false",
                    help="read the manifests only (sizes, times), not every part's sha256: fast on big runs")
    cl.add_argument("--json", action="store_true")

    pa = sub.add_parser("params", help="read the model parameters of a run")
    psub = pa.add_subparsers(dest="params_command", required=True, parser_class=_Parser)
    pe = psub.add_parser("export", help="write the model as one .npz of named arrays (0.W, 0.b, ...): the final "
                         "parameters, else the newest snapshot of a run still training")
    pe.add_argument("run", metavar="RUN", help="run directory (any fsspec URL)")
    pe.add_argument("--to", required=True, metavar="FILE.npz")
    pe.add_argument("--checkpoint", type=int, metavar="SUPERSTEP",
                    help="the model as of this checkpoint (its RUN/params snapshot, or the checkpoint itself)")

    j = sub.add_parser("jobs", help="list the jobs and their config keys")
    j.add_argument("--json", action="store_true")
    return p


def _job_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", nargs="?", help="a built-in job (see `mariana jobs`) or package.module:attribute")
    p.add_argument("--config", metavar="FILE.toml", help="config keys (top level or a [JOB] table)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key; VALUE is parsed as TOML, else taken as a string")
    p.add_argument("--workers", type=int, default=None, help="number of partitions (default 1)")
    p.add_argument("--placement", choices=["hash", "range"], default=None, help="how vertices go to workers")
    p.add_argument("--run-dir", metavar="URL", help="run directory (any fsspec URL); default runs/JOB-TIMESTAMP")
    p.add_argument("--max-supersteps", type=int, default=None, metavar="N")
    p.add_argument("--heartbeat-interval", type=float, default=0.5, metavar="S", help="cluster heartbeat period")
    p.add_argument("--worker-timeout", type=float, default=10.0, metavar="S",
                   help="a worker silent this long fails the job (cluster)")
    p.add_argument("--no-trace", dest="trace", action="store_false",
                   help="do not write superstep traces to RUN/trace (they cost < 3%%)")
    p.add_argument("--capture", metavar="VERTEX_GLOB",
                   help="store the messages of matching vertices for `mariana trace replay`")
    p.add_argument("--capture-limit-mb", type=int, default=64, metavar="MB", help="bound on captured data")
    p.add_argument("--superstep-timeout", type=float, default=None, metavar="S",
                   help="a superstep longer than S seconds is a hang: report who is missing, then fail or recover")
    p.add_argument("--max-restarts", type=int, default=3, metavar="N",
                   help="roll back to the newest checkpoint at most N times when a worker is lost (cluster)")
    p.add_argument("--rejoin-timeout", type=float, default=60.0, metavar="S",
                   help="how long a lost remote worker's partition waits for a new `mariana worker`")
    p.add_argument("--max-message-mb", type=int, default=1024, metavar="MB",
                   help="largest frame a socket accepts (ZMQ MAXMSGSIZE); arrays travel in 4 MB frames")
    p.add_argument("--json", action="store_true", help="print the result summary as JSON on stdout")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        chatty = args.command in ("master", "worker") and not args.quiet  # joins and leaves
        base = logging.INFO if chatty else logging.WARNING
        logging.basicConfig(level=base - 10 * min(args.verbose, 2), stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        if args.command == "jobs":
            return cmd_jobs(args)
        if args.command == "params":
            return cmd_params(args)
        if args.command == "checkpoint":
            return cmd_checkpoint(args)
        if args.command == "trace":
            return cmd_trace(args)
        if args.command == "worker":
            return cmd_worker(args)
        if args.command == "keys":
            return cmd_keys(args)
        return cmd_run(args)
    except VertexError as exc:
        print(f"mariana: error: {exc}", file=sys.stderr)
        if exc.traceback_text:
            print(exc.traceback_text, file=sys.stderr, end="")
        return 1
    except MarianaError as exc:
        print(f"mariana: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("mariana: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `mariana trace summary RUN | head`: the reader left, that is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    jobs = [get_job(name) for name in BUILTIN_JOBS]
    if args.json:
        print(json.dumps([{"name": j.name, "description": j.description,
                           "keys": [{"name": k.name, "type": k.type, "default": k.default, "help": k.help,
                                     **({"choices": list(k.choices)} if k.choices else {})} for k in j.keys]}
                          for j in jobs], indent=2))
        return 0
    for j in jobs:
        print(f"{j.name}: {j.description}")
        for k in j.keys:
            choices = f" (one of: {', '.join(map(str, k.choices))})" if k.choices else ""
            print(f"    {k.name} = {json.dumps(k.default)}  [{k.type}]  {k.help}{choices}")
    return 0


def cmd_params(args: argparse.Namespace) -> int:
    """``mariana params export RUN --to FILE.npz [--checkpoint S]``."""
    import io

    import numpy as np

    from ..storage import load_params, write_bytes

    try:
        run_dir = RunDir(args.run, create=False)
        if args.checkpoint is None and run_dir.exists("params/index.json"):
            named, source = load_params(run_dir), "final parameters"
        else:
            named, source = _params_from_checkpoint(run_dir, args.checkpoint)
    except MarianaError as exc:
        raise UsageError(str(exc)) from None
    buf = io.BytesIO()
    np.savez(buf, **dict(named))  # type: ignore[arg-type]  # numpy stubs
    write_bytes(args.to, buf.getvalue())
    print(f"wrote {len(named)} arrays ({', '.join(n for n, _ in named)}) from the {source} to {args.to}")
    return 0


def _params_from_checkpoint(run_dir: RunDir, superstep: int | None) -> tuple[list[tuple[str, Any]], str]:
    """The model from a parameter snapshot (RUN/params/ss-N), else from the checkpoint of that superstep."""
    from ..storage.checkpoint import Checkpoints

    prev = run_dir.read_json("job.json")
    job = get_job(prev["job"])
    if job.export is None:
        raise UsageError(f"job {job.name} has no model parameters to export")
    ck = Checkpoints(run_dir)
    parts, source = None, ""
    for store, what in ((ck.params, "parameter snapshot"), (ck, "checkpoint")):
        if superstep is None:
            info = store.newest_valid(load=True)
            if info is not None:
                parts, source = info.loaded or {}, f"{what} at superstep {info.superstep}"
        elif superstep in store.supersteps():
            try:
                parts, source = store.load(superstep), f"{what} at superstep {superstep}"
            except StorageError as exc:
                log.warning("%s", exc)
        if parts is not None:
            break
    if parts is None:
        which = f"at superstep {superstep}" if superstep is not None else "at all"
        raise UsageError(f"{run_dir.url}: no valid parameter snapshot or checkpoint {which} to export from "
                         "(`mariana checkpoint list` shows what there is)")
    states: dict[str, Any] = {}
    for name, part in sorted(parts.items()):
        if name.startswith("worker-"):
            states.update(part.get("vertices", part))  # a checkpoint part, or a snapshot {vertex: params}
    return job.export(states, resolve_config(job, prev["config"])), source


def _load_toml(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None


class Progress:
    """One status line on stderr, rewritten each superstep; silent when stderr is not a TTY."""

    def __init__(self, metric: str | None) -> None:
        self.metric = metric
        self.enabled = sys.stderr.isatty()
        self.t0 = time.perf_counter()

    def __call__(self, line: dict[str, Any]) -> None:
        if not self.enabled:
            return
        value = line.get(self.metric) if self.metric else None
        shown = f"  {self.metric}={value:.4g}" if isinstance(value, (int, float)) else ""
        sys.stderr.write(f"\rsuperstep {line['superstep']:>5}  {time.perf_counter() - self.t0:7.1f}s"
                         f"  active={line['active']}{shown}\033[K")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            self.enabled = False


def _resolve_run(args: argparse.Namespace) -> tuple[Any, dict[str, Any], int, str | None, RunDir | None]:
    """(job, config, workers, placement, run dir to resume) from the arguments or ``--resume RUN``."""
    resume = getattr(args, "resume", None)
    if not resume:
        if not args.job:
            raise UsageError("mariana run needs a JOB (see `mariana jobs`) or --resume RUN")
        job = get_job(args.job)
        config = resolve_config(job, _load_toml(args.config), args.sets, args.config or "")
        return job, config, 1 if args.workers is None else args.workers, args.placement, None
    try:
        run_dir = RunDir(resume, create=False)
        prev = run_dir.read_json("job.json")
    except (MarianaError, ValueError) as exc:
        raise UsageError(f"--resume {resume}: not a run directory ({exc})") from None
    if args.job and args.job != prev["job"]:
        raise UsageError(f"--resume {resume} continues job {prev['job']!r}, not {args.job!r}")
    if args.sets or args.config:
        raise UsageError("--resume continues a run with its recorded config; --set and --config cannot change it")
    if args.workers not in (None, prev["workers"]):
        raise UsageError(f"--resume {resume}: the run has {prev['workers']} workers; a checkpoint cannot be "
                         f"restored on {args.workers}")
    job = get_job(prev["job"])
    return job, resolve_config(job, prev["config"]), prev["workers"], prev.get("placement_arg"), run_dir


def cmd_run(args: argparse.Namespace) -> int:
    """``mariana run`` and ``mariana master``: options from the arguments, then the one launch path."""
    from ..engine.options import RunOptions
    from .launch import explain_placement, launch

    job, config, workers, placement_arg, resume_dir = _resolve_run(args)
    if workers < 1:
        raise UsageError(f"--workers must be >= 1, got {workers}")
    if args.max_supersteps is not None and args.max_supersteps < 0:
        raise UsageError(f"--max-supersteps must be >= 0, got {args.max_supersteps}")
    if getattr(args, "explain_placement", False):
        print(explain_placement(job, config, workers, placement_arg))
        return 0
    master = args.command == "master"
    security = _master_security(args) if master else None  # refuse a bad bind before anything is written
    run_dir = resume_dir or args.run_dir or default_run_url(job.name)  # a URL is created once the job builds
    progress = Progress(job.progress_metric)
    options = RunOptions.from_config(
        config, workers=workers, runtime="cluster" if master else args.runtime, placement=placement_arg,
        max_supersteps=args.max_supersteps, run_dir=run_dir, on_superstep=progress, resume=resume_dir is not None,
        trace=args.trace, capture=args.capture, capture_limit_mb=args.capture_limit_mb,
        heartbeat_interval=args.heartbeat_interval, worker_timeout=args.worker_timeout,
        superstep_timeout=args.superstep_timeout, max_restarts=args.max_restarts, rejoin_timeout=args.rejoin_timeout,
        max_message_bytes=args.max_message_mb << 20, secure=args.secure, spawn=not master, security=security,
        bind=args.bind if master else "tcp://127.0.0.1:0", on_start=_worker_hint(args, security) if master else None)
    try:
        done = launch(job, config, options, name=args.job or job.name, finish=True)
    finally:
        progress.close()
    result, url = done.result, done.run_dir.url
    if args.json:
        print(json.dumps({"job": job.name, "run_dir": url, "supersteps": result.supersteps,
                          "halt_reason": result.halt_reason, "wall_s": result.wall_s, **done.summary}, default=str))
    else:
        print(done.text)
        print(f"run directory: {url}", file=sys.stderr)
    return 0


def _worker_hint(args: argparse.Namespace, security: Any) -> Any:
    """``mariana master``: once bound, say (and with keys write) how workers join from other hosts."""
    from ..engine.transport import is_loopback, parse_endpoint

    def hint(master: Any, procs: list[Any]) -> None:
        endpoint = master.endpoint
        where = "" if is_loopback(parse_endpoint(args.bind)[0]) else " (reachable from other hosts)"
        if security is not None:
            master_file = args.master_file or os.path.join(args.keys, "master.json")
            with open(master_file, "w") as f:
                json.dump({"endpoint": endpoint, "server_key": security.public.decode(), "job": master.job_name}, f)
            how = f"mariana worker --master-file {master_file} --key {args.keys}/NAME.key_secret"
        else:
            how = f"mariana worker --master {endpoint}"
        print(f"mariana master: waiting for {master.workers} worker(s) at {endpoint}{where}; on each worker host "
              f"run:\n    {how}", file=sys.stderr, flush=True)

    return hint


def _master_security(args: argparse.Namespace) -> Any:
    """CURVE for ``mariana master``: required off loopback unless --insecure; None means plaintext."""
    from ..engine.transport import is_loopback, parse_endpoint

    host, _ = parse_endpoint(args.bind)
    if args.keys and (args.secure or not is_loopback(host)):
        from ..engine.security import Security

        return Security.for_master(args.keys)
    if args.secure:
        raise UsageError("--secure needs --keys DIR (create it with `mariana keys init DIR`)")
    if not is_loopback(host):
        if not args.insecure:
            raise UsageError(f"{args.bind} is not loopback: a reachable master needs CURVE keys (--keys DIR, from "
                             f"`mariana keys init DIR`), or --insecure on a network you trust")
        log.warning("INSECURE: the master at %s accepts any worker and sends everything in plaintext", args.bind)
    return None


def cmd_worker(args: argparse.Namespace) -> int:
    from ..engine.security import Security, load_public
    from ..engine.worker import Worker

    master, server_key = args.master, args.server_key
    if args.master_file:
        try:
            info = json.loads(open(args.master_file).read())
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read master file {args.master_file}: {exc}") from None
        master, server_key = master or info["endpoint"], server_key or info.get("server_key")
    if not master:
        raise UsageError("mariana worker needs --master tcp://HOST:PORT or --master-file FILE")
    security = None
    if server_key or args.key:
        if not (server_key and args.key):
            raise UsageError("a secure worker needs both the master's public key (--server-key or --master-file) "
                             "and its own secret key (--key)")
        security = Security.for_worker(args.key, load_public(server_key))
    from .launch import build_graph

    return Worker(master, build_graph, args.host, args.connect_timeout, args.max_message_mb << 20, security,
                  args.job).run()


def cmd_keys(args: argparse.Namespace) -> int:
    from ..engine.security import add_key, init_keys

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


if __name__ == "__main__":
    sys.exit(main())
