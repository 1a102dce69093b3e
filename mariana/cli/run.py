"""``mariana run``, ``mariana master`` and ``mariana worker``: resolve the job and its config, start
the runtime (through ``jobs.launch``), show progress, attach the run's hooks (live page, TensorBoard)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import tomllib
from typing import Any

from ..errors import MarianaError, UsageError
from ..jobs.registry import get_job, resolve_config
from ..storage import RunDir, default_run_url
from ..storage.rundir import check_writable

log = logging.getLogger("mariana")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that a run records ``interrupted`` and stops its workers."""


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


def _resolve_run(args: argparse.Namespace) -> tuple[Any, dict[str, Any], int, str | None, RunDir | None, RunDir | None]:
    """(job, config, workers, placement, run dir to resume, run dir to start afresh in) from the
    arguments or ``--resume RUN``. Either run dir comes with its lease taken (``RunDir.take_lease``:
    refused while another run holds it); the caller releases it."""
    resume, afresh = _resume_if_possible(args) if not getattr(args, "resume", None) else (None, None)
    if resume is None and not getattr(args, "resume", None):
        if not args.job:
            raise UsageError("mariana run needs a JOB (see `mariana jobs`) or --resume RUN")
        job = get_job(args.job)
        config = resolve_config(job, _load_toml(args.config), args.sets, args.config or "")
        if afresh is None and args.run_dir:
            _refuse_used(args.run_dir)
            check_writable(args.run_dir, "run directory")  # (before the job builds: its data may take long)
        return job, config, 1 if args.workers is None else args.workers, args.placement, None, afresh
    try:
        return _resolve_resume(args, resume)
    except BaseException:
        if resume is not None:
            resume.release_lease()
        raise


def _resolve_resume(args: argparse.Namespace, resume: RunDir | None) -> tuple[Any, dict[str, Any], int, str | None,
                                                                            RunDir | None, RunDir | None]:
    """``_resolve_run`` of ``--resume RUN``, or of the run directory ``--resume-if-possible`` found (``resume``)."""
    url = getattr(args, "resume", None) or args.run_dir  # (`mariana master --from-env` has no --resume)
    try:
        run_dir = resume or RunDir(url, create=False)
        prev = run_dir.read_json("job.json")
    except (MarianaError, ValueError) as exc:
        raise UsageError(f"--resume {url}: not a run directory ({exc})") from None
    if args.job and args.job != prev["job"]:
        raise UsageError(f"--resume {url} continues job {prev['job']!r}, not {args.job!r}")
    if args.sets or args.config:
        raise UsageError("--resume continues a run with its recorded config; --set and --config cannot change it")
    if args.workers not in (None, prev["workers"]):
        raise UsageError(f"--resume {url}: the run has {prev['workers']} workers; a checkpoint cannot be "
                         f"restored on {args.workers}")
    job = get_job(prev["job"])
    config = resolve_config(job, prev["config"])
    if run_dir.lease is None:
        run_dir.take_lease()  # before anything reads the run to continue it: refused while it runs
    return job, config, prev["workers"], prev.get("placement_arg"), run_dir, None


def _refuse_used(url: str) -> None:
    """A fresh run refuses a ``--run-dir`` that holds another run (``jobs.launch.refuse_used_run_dir``),
    before the job builds; the launch checks again under the lease."""
    from ..jobs.launch import refuse_used_run_dir

    try:
        run_dir = RunDir(url, create=False)
    except MarianaError:
        return  # none yet
    refuse_used_run_dir(run_dir)


def _resume_if_possible(args: argparse.Namespace) -> tuple[RunDir | None, RunDir | None]:
    """``--resume-if-possible`` (on by default with ``--from-env``): (the run directory to resume,
    None) when ``--run-dir`` holds a valid checkpoint of the same job, config and worker count;
    (None, the run directory) to start afresh where an earlier attempt left no checkpoint (its
    records are dropped then); (None, None) for a first start. A run directory returned has its
    lease taken: the same command started twice, or while the run goes on, is refused."""
    wanted = args.resume_if_possible
    if wanted is None:
        wanted = getattr(args, "from_env", None) is not None
    if not wanted or not args.run_dir or not args.job:
        if wanted and not args.run_dir:
            raise UsageError("--resume-if-possible needs --run-dir: the run directory a restarted job continues")
        return None, None
    from ..engine.tracing import rewind
    from ..storage.checkpoint import Checkpoints

    try:
        run_dir = RunDir(args.run_dir, create=False)
    except MarianaError:
        return None, None  # a first start
    if not run_dir.exists("job.json"):
        return None, None
    prev = run_dir.read_json("job.json")
    job = get_job(args.job)
    config = json.loads(json.dumps(resolve_config(job, _load_toml(args.config), args.sets, args.config or ""),
                                   default=str))
    workers = 1 if args.workers is None else args.workers
    differs = [what for what, mine, theirs in (("job", args.job, prev.get("job")), ("config", config, prev.get("config")),
                                              ("workers", workers, prev.get("workers"))) if mine != theirs]
    if differs:
        raise UsageError(f"--resume-if-possible: {args.run_dir} holds another run (its {', '.join(differs)} "
                         f"differ); give another --run-dir")
    run_dir.take_lease()  # before the checkpoints are looked at or the records dropped
    try:
        if Checkpoints(run_dir).newest_valid() is None:
            log.warning("%s: no valid checkpoint to resume from; starting the job afresh", args.run_dir)
            rewind(run_dir, 0)
            return None, run_dir
    except BaseException:
        run_dir.release_lease()
        raise
    log.warning("%s holds a checkpoint of this job: resuming from it (--resume-if-possible)", args.run_dir)
    args.sets, args.config = [], None  # the run's recorded config, checked equal above
    return run_dir, None


def cmd_run(args: argparse.Namespace) -> int:
    """``mariana run`` and ``mariana master``: options from the arguments, then the one launch path."""
    job, config, workers, placement_arg, resume_dir, afresh_dir = _resolve_run(args)
    try:
        return _run_resolved(args, job, config, workers, placement_arg, resume_dir, afresh_dir)
    finally:
        for held in (resume_dir, afresh_dir):
            if held is not None:
                held.release_lease()


def _run_resolved(args: argparse.Namespace, job: Any, config: dict[str, Any], workers: int,
                  placement_arg: str | None, resume_dir: RunDir | None, afresh_dir: RunDir | None) -> int:
    """``cmd_run`` once the run is resolved (and its run directory's lease taken where it exists)."""
    from ..engine.options import RunOptions
    from ..jobs.launch import explain_placement, launch

    if workers < 1:
        raise UsageError(f"--workers must be >= 1, got {workers}")
    if args.max_supersteps is not None and args.max_supersteps < 0:
        raise UsageError(f"--max-supersteps must be >= 0, got {args.max_supersteps}")
    if getattr(args, "explain_placement", False):
        print(explain_placement(job, config, workers, placement_arg))
        return 0
    master = args.command == "master"
    security = _master_security(args) if master else None  # refuse a bad bind before anything is written
    run_dir = resume_dir or afresh_dir or args.run_dir or default_run_url(job.name)  # a URL is created once the job builds
    progress = Progress(job.progress_metric)
    hooks = _run_hooks(args, run_dir if isinstance(run_dir, str) else run_dir.url, config, args.job or job.name)
    page = hooks.start()  # --ui, --tensorboard: bad values failed above, before anything is written
    if page:
        print(f"mariana: job page at {page} (JSON: {page}api/state)", file=sys.stderr, flush=True)

    def record(line: dict[str, Any]) -> None:  # the runtimes append each line to RUN/metrics.jsonl themselves
        progress(line)
        hooks(line)

    hint = _worker_hint(args, security) if master else None

    def on_start(master_: Any, procs: list[Any]) -> None:
        if hint is not None:
            hint(master_, procs)
        hooks.attach(master_)
        if getattr(args, "launch", None) is not None:  # --from-env: rank 0's own worker, reaped with the others
            procs += _spawn_rank0_worker(args, master_.endpoint, security)

    options = RunOptions.from_config(
        config, workers=workers, runtime="cluster" if master else args.runtime, placement=placement_arg,
        max_supersteps=args.max_supersteps, run_dir=run_dir, on_superstep=record, resume=resume_dir is not None,
        trace=args.trace, capture=args.capture, capture_limit_mb=args.capture_limit_mb,
        heartbeat_interval=args.heartbeat_interval, worker_timeout=args.worker_timeout,
        superstep_timeout=args.superstep_timeout, max_restarts=args.max_restarts, rejoin_timeout=args.rejoin_timeout,
        max_message_bytes=args.max_message_mb << 20, secure=args.secure,
        shm=getattr(args, "shm", True), shm_cap_mb=getattr(args, "shm_cap_mb", 1024), spawn=not master, security=security,
        fork=getattr(args, "fork", True),
        bind=args.bind if master else "tcp://127.0.0.1:0", on_start=on_start)
    status, error, interrupted = "interrupted", None, None
    try:
        done = launch(job, config, options, name=args.job or job.name, finish=True,
                      refuse_used=afresh_dir is None)
        status = "finished"
    except MarianaError as exc:
        status, error = "failed", str(exc)
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the launch has stopped its workers on the way out
        interrupted = exc
    finally:
        progress.close()
        hooks.finish(status, error)
    if interrupted is not None:
        return _interrupted(interrupted, run_dir if isinstance(run_dir, str) else run_dir.url, master)
    result, url = done.result, done.run_dir.url
    if args.json:
        print(json.dumps({"job": job.name, "run_dir": url, "supersteps": result.supersteps,
                          "halt_reason": result.halt_reason, "wall_s": result.wall_s, **done.summary}, default=str))
    else:
        print(done.text)
        print(f"run directory: {url}", file=sys.stderr)
    return 0


def _interrupted(exc: KeyboardInterrupt, url: str, master: bool) -> int:
    """An interrupted run: one line on stderr saying how to resume it; exit 130 (SIGINT) or 143 (SIGTERM)."""
    what, code = ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
    hint = _resume_hint(url, master)
    print(f"mariana: {what}" + (f"; {hint}" if hint else ""), file=sys.stderr, flush=True)
    return code


def _resume_hint(url: str, master: bool) -> str | None:
    """How to continue the run in ``url``: the command that resumes it from its newest committed
    checkpoint, or that it has none; None when it wrote nothing yet."""
    import shlex

    from ..storage.checkpoint import Checkpoints

    try:
        run_dir = RunDir(url, create=False)
        if not run_dir.exists("job.json"):
            return None
        checkpoints = Checkpoints(run_dir)
        newest = next((ss for ss in checkpoints.supersteps() if checkpoints.exists_committed(ss)), None)
    except MarianaError:
        return None
    if newest is None:
        return f"{url} holds no checkpoint to resume from (--set checkpoint_every=N makes a run resumable)"
    if master:
        return (f"resume it from the checkpoint at superstep {newest} with the same `mariana master` command "
                f"and --run-dir {shlex.quote(url)} --resume-if-possible")
    return f"resume it from the checkpoint at superstep {newest} with: mariana run --resume {shlex.quote(url)}"


def _run_hooks(args: argparse.Namespace, run_url: str, config: dict[str, Any], job_name: str) -> Any:
    """The live page (--ui) and TensorBoard writer (--tensorboard) of this run, not started yet."""
    from ..report.hooks import RunHooks

    return RunHooks(run_url, ui=args.ui, tensorboard=args.tensorboard, config=config, job=job_name)


def _worker_hint(args: argparse.Namespace, security: Any) -> Any:
    """``mariana master``: once bound, say (and with keys write) how workers join from other hosts."""
    from ..comm import is_loopback, parse_endpoint

    def hint(master: Any, procs: list[Any]) -> None:
        endpoint = master.endpoint
        where = "" if is_loopback(parse_endpoint(args.bind)[0]) else " (reachable from other hosts)"
        if security is not None:
            master_file = args.master_file or os.path.join(args.keys, "master.json")
            with open(master_file, "w") as f:
                json.dump({"endpoint": endpoint, "server_key": security.public.decode(), "job": master.job_name}, f)
            how = f"mariana worker --master-file {master_file} --key {os.path.join(args.keys, 'NAME.key_secret')}"
        else:
            how = f"mariana worker --master {endpoint}"
            if args.master_file:  # endpoint only: the workers speak plaintext
                with open(args.master_file, "w") as f:
                    json.dump({"endpoint": endpoint, "job": master.job_name}, f)
        print(f"mariana master: waiting for {master.workers} worker(s) at {endpoint}{where}; on each worker host "
              f"run:\n    {how}", file=sys.stderr, flush=True)

    return hint


def _master_security(args: argparse.Namespace) -> Any:
    """CURVE for ``mariana master``: required off loopback unless --insecure; None means plaintext.
    ``--keys DIR`` always means CURVE (also on loopback), so that workers following the printed
    command (``--master-file DIR/master.json``) can join."""
    from ..comm import is_loopback, parse_endpoint

    host, _ = parse_endpoint(args.bind)
    if args.keys:
        from ..comm.security import Security

        return Security.for_master(args.keys)
    if args.secure:
        raise UsageError("--secure needs --keys DIR (create it with `mariana keys init DIR`)")
    if not is_loopback(host):
        if not args.insecure:
            raise UsageError(f"{args.bind} is not loopback: a reachable master needs CURVE keys (--keys DIR, from "
                             f"`mariana keys init DIR`), or --insecure on a network you trust")
        log.warning("INSECURE: the master at %s accepts any worker and sends everything in plaintext", args.bind)
    return None


def cmd_master_from_env(args: argparse.Namespace) -> int:
    """``mariana master JOB --from-env slurm|torchrun`` on every rank: rank 0 runs the master (for
    WORLD_SIZE workers, bound at MASTER_ADDR:MASTER_PORT) and one worker; every other rank a worker."""
    from .envlaunch import from_env

    launch = from_env(args.from_env)
    if args.workers not in (None, launch.world_size):
        raise UsageError(f"--workers {args.workers} disagrees with the world size {launch.world_size} "
                         f"from --from-env {args.from_env}")
    args.workers = launch.world_size
    if launch.rank != 0:
        log.info("%s: joining as a worker", launch.describe())
        return _env_worker(launch, args, None, args.job)
    args.bind = args.bind or launch.master_bind()
    args.launch = launch
    log.info("%s: running the master at %s and one worker", launch.describe(), args.bind)
    return cmd_run(args)


def _env_worker(launch: Any, args: argparse.Namespace, master: str | None, job: str | None) -> int:
    """Run a worker joining the master named by the environment (``--keys DIR``: CURVE with DIR/master.key)."""
    from ..cluster.entry import WorkerSpec, run_worker
    from ..cluster.forking import apply_thread_vars
    from ..engine.threads import thread_vars
    from ..jobs.launch import build_graph

    apply_thread_vars(thread_vars(launch.local_size))  # as a spawned worker beside local_size - 1 others
    keys = getattr(args, "keys", None)
    spec = WorkerSpec(master or launch.master_endpoint, getattr(args, "host", None) or launch.local_address(),
                      args.connect_timeout, args.max_message_mb, job=job,
                      server_key=os.path.join(keys, "master.key") if keys else None,
                      key=_worker_key(args, launch.rank) if keys else None, insecure=getattr(args, "insecure", False),
                      advertise=getattr(args, "advertise", None))
    return run_worker(spec, build_graph)


def _worker_key(args: argparse.Namespace, rank: int) -> str:
    """The secret key of rank ``rank``'s worker: every worker needs its own (peers accept only the others')."""
    pattern = args.worker_key or os.path.join(args.keys, "worker-{rank}.key_secret")
    return pattern.replace("{rank}", str(rank))


def _spawn_rank0_worker(args: argparse.Namespace, endpoint: str, security: Any) -> list[Any]:
    """Rank 0's own worker process, beside the master (``--from-env``)."""
    from ..cluster.launch import local_spec, spawn_workers
    from ..comm import parse_endpoint

    host, port = parse_endpoint(endpoint)
    connect = {"0.0.0.0": f"tcp://127.0.0.1:{port}", "::": f"tcp://[::1]:{port}"}.get(host, endpoint)
    secure = security is not None
    spec = local_spec(connect, args.launch.local_address(), connect_timeout=args.connect_timeout,
                      max_message_mb=args.max_message_mb, job=args.job,
                      server_key=os.path.join(args.keys, "master.key") if secure else None,
                      key=_worker_key(args, 0) if secure else None)
    return spawn_workers(spec, sharing=args.launch.local_size)


def cmd_worker(args: argparse.Namespace) -> int:
    from ..cluster.entry import WorkerSpec, run_worker
    from ..jobs.launch import build_graph

    threads = getattr(args, "threads", None)
    if threads is not None:  # every path below (--from-env, --sweep) sizes its pools from these
        if threads < 1:
            raise UsageError(f"--threads must be >= 1, got {threads}")
        from ..engine.threads import THREAD_VARS, apply_thread_vars

        apply_thread_vars({var: str(threads) for var in THREAD_VARS})
    if args.from_env:
        from .envlaunch import from_env

        launch = from_env(args.from_env)
        if not (args.master or args.master_file or args.server_key or args.key):
            return _env_worker(launch, args, None, args.job)
        args.master = args.master or (None if args.master_file else launch.master_endpoint)
        args.host = args.host or launch.local_address()
    first_contact = getattr(args, "first_contact_timeout", None)
    if first_contact is None and not args.from_env:  # (ranks started together wait for rank 0's master)
        from ..cluster.joining import FIRST_CONTACT_S

        first_contact = FIRST_CONTACT_S
    master, server_key, sweep = args.master, args.server_key, getattr(args, "sweep", None)
    if args.master_file:
        from ..sweep.remote import read_sweep_file

        info = read_sweep_file(args.master_file)
        if info.get("sweep") and not master:  # issue 21: the file of `mariana sweep --listen`
            sweep = sweep or info["endpoint"]
        else:
            master = master or info["endpoint"]
        server_key = server_key or info.get("server_key")
    if sweep and master:
        raise UsageError("a worker joins either a master (--master) or a sweep (--sweep), not both")
    if not args.host and (master or sweep):  # bound and told to peers: reachable from the other hosts
        from ..cluster.joining import route_address

        args.host = route_address(master or sweep)
    if sweep:
        from ..sweep.remote import serve_sweep

        return serve_sweep(WorkerSpec("", args.host, args.connect_timeout, args.max_message_mb, server_key=server_key,
                                      key=args.key, job=args.job, verbosity=-1 if args.quiet else args.verbose,
                                      insecure=args.insecure, threads=threads), sweep)
    if not master:
        raise UsageError("mariana worker needs --master tcp://HOST:PORT or --master-file FILE")
    spec = WorkerSpec(master, args.host, args.connect_timeout, args.max_message_mb, server_key=server_key, key=args.key,
                      job=args.job, verbosity=-1 if args.quiet else args.verbose, insecure=args.insecure,
                      threads=threads, first_contact=first_contact, advertise=args.advertise)
    return run_worker(spec, build_graph)
