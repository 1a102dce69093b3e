"""The one launch path: resolve a job's config, build its graph, record the run in ``RUN/job.json``,
run it on the runtime the ``RunOptions`` pick, record the outcome.

``mariana run``, ``mariana master`` and ``run_job`` all come through ``launch``; cluster workers
build the same graph through ``build_graph``.
"""

from __future__ import annotations

import logging
import os
import platform
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from .. import __version__
from ..engine import RunResult
from ..engine.graph import Graph
from ..engine.options import RUNTIMES, RunOptions
from ..engine.runner import run_local
from ..errors import MarianaError, UsageError
from ..storage import RunDir
from .registry import LOCAL_JOBS, BuildContext, Job, get_job, resolve_config

log = logging.getLogger(__name__)

__all__ = ["run_job", "run_graph", "launch", "Launched", "build_graph", "explain_placement", "RUNTIMES"]


def run_job(job: str | Job, config: dict[str, Any] | None = None, sets: Sequence[str] = (), *,
            workers: int = 1, runtime: str | None = None, **options: Any) -> RunResult:
    """Run ``job`` (a built-in name or ``package.module:JOB``) and return its ``RunResult``.

    ``config`` and ``sets`` (``KEY=VALUE`` strings) override the job's defaults, in that order.
    ``runtime``: ``local`` (one process) or ``cluster`` (one process per worker); the default is
    local for one worker and cluster for more. Every other keyword is a ``RunOptions`` field
    (``run_dir``, ``on_superstep``, ``resume``, ``trace``, ``heartbeat_interval``,
    ``worker_timeout``, ``on_start``, ``max_restarts``, ``secure``, ...). Checkpoints follow the
    config keys ``checkpoint_every``, ``keep_checkpoints`` and ``checkpoint_background``.
    """
    name = job if isinstance(job, str) else job.name
    job = get_job(job) if isinstance(job, str) else job
    resolved = resolve_config(job, config, list(sets))
    run_options = RunOptions.from_config(resolved, workers=workers, runtime=runtime, **options)
    return launch(job, resolved, run_options, name=name, refuse_used=not run_options.resume).result


def run_graph(graph: Graph, *, workers: int = 1, runtime: str = "local", **options: Any) -> RunResult:
    """``mariana.run``: run a ``Graph`` object on the local runtime, or with ``runtime="cluster"`` on
    ``workers`` worker processes forked from this one (they inherit the graph; nothing executable
    travels), or with ``runtime="inproc"`` on the cluster runtime's threads in this process. Where
    this process cannot fork safely (threads running, a zmq context open, no ``os.fork``), write
    the graph as a ``Job`` and run it by name (``run_job("module:JOB", ...)``)."""
    if runtime == "local":
        from ..engine.runner import run

        return run(graph, workers=workers, runtime=runtime, **options)
    if runtime not in ("cluster", "inproc"):
        raise UsageError(f"unknown runtime {runtime!r}; choose one of: {', '.join(RUNTIMES)}")
    from ..cluster.forking import fork_is_safe

    why = None if runtime == "inproc" else fork_is_safe() if options.get("fork", True) else "fork=False"
    if why is not None:
        raise UsageError(f"runtime='cluster' runs a Graph object on workers forked from this process, which it cannot "
                         f"do now ({why}); write the graph as a mariana.jobs.Job and run it by name: "
                         f"run_job('module:JOB', workers={workers}) or `mariana run module:JOB --workers {workers}`")
    name = f"graph:{graph.name}:{os.getpid()}:{id(graph)}"
    job = Job(name, "a Graph object given to mariana.run", (), lambda config, bctx: graph)
    config: dict[str, Any] = {k: options.pop(k) for k in ("checkpoint_every", "keep_checkpoints", "checkpoint_background")
              if k in options}
    resolved = resolve_config(job, config)
    LOCAL_JOBS[name] = job
    try:
        return launch(job, resolved, RunOptions.from_config(resolved, workers=workers, runtime=runtime, **options),
                      name=name).result
    finally:
        del LOCAL_JOBS[name]


@dataclass
class Launched:
    """What ``launch`` hands back: the result and, with ``finish``, the job's summary text and fields."""

    result: RunResult
    run_dir: RunDir | None = None
    text: str = ""
    summary: dict[str, Any] = field(default_factory=dict)


def launch(job: Job, config: dict[str, Any], options: RunOptions, *, name: str | None = None,
           finish: bool = False, refuse_used: bool = False) -> Launched:
    """Build ``job``'s graph with ``config``, run it as ``options`` say and record it in ``options.run_dir``.

    ``name``: how the job is referred to (a built-in name or ``package.module:JOB``: the cluster
    workers build it from that). ``finish``: also run the job's ``finish`` (write outputs, summary).
    ``RUN/job.json`` says ``running`` before the first superstep, then ``finished``, ``failed`` or
    ``interrupted`` (Ctrl-C, SIGTERM);
    ``options.run_dir`` may be a URL, created once the graph is built (a job that cannot build
    leaves nothing behind). The run holds the run directory's lease (``storage.lease``) from then
    until it has recorded its outcome: a second run on the same directory is refused (``UsageError``
    naming the holder), and every write of this one checks the lease first. A ``RunDir`` given
    with its lease taken already (``RunDir.take_lease``: ``mariana run --resume``) keeps it: its
    caller releases it. ``refuse_used``: a fresh run refuses a run directory that holds a run
    (its ``job.json``) instead of mixing the two runs' records.
    """
    name = name or job.name
    if options.runtime_name == "cluster" and options.spawn:
        from ..cluster.launch import LocalCluster

        with LocalCluster(_job_ref(options, name), config, options, build_graph) as cluster:
            if cluster.forks():  # forked workers inherit what the build loaded (the data set): build first
                graph = job.build(config, BuildContext(options.workers, options.placement))
                cluster.start()
            else:  # fresh interpreters import while this process builds the graph (start-up time)
                cluster.start()
                graph = job.build(config, BuildContext(options.workers, options.placement))
            return _launch(job, config, options, name, finish, cluster, graph, refuse_used)
    return _launch(job, config, options, name, finish, None,
                   job.build(config, BuildContext(options.workers, options.placement)), refuse_used)


def _launch(job: Job, config: dict[str, Any], options: RunOptions, name: str, finish: bool,
            cluster: Any, graph: Graph, refuse_used: bool) -> Launched:
    placement = graph.place(options.workers)
    if isinstance(options.run_dir, str):  # created only now that the job has built
        options = options.replace(run_dir=RunDir(options.run_dir))
    run_dir: RunDir | None = options.run_dir
    if run_dir is None:
        return _run(job, config, options, name, finish, cluster, graph, placement, None)
    log.info("run directory: %s", run_dir.url)
    mine = run_dir.lease is None
    if mine:
        run_dir.take_lease()
    try:
        if refuse_used and not options.resume:
            refuse_used_run_dir(run_dir)
        return _run(job, config, options, name, finish, cluster, graph, placement, run_dir)
    finally:
        if mine:
            run_dir.release_lease()


def refuse_used_run_dir(run_dir: RunDir) -> None:
    """``UsageError`` when ``run_dir`` holds a run already (its ``job.json``): a fresh run there
    would mix its records (metrics, traces, checkpoints) with the other run's."""
    if not run_dir.exists("job.json"):
        return
    try:
        prev = run_dir.read_json("job.json")
    except MarianaError:
        prev = {}
    prev = prev if isinstance(prev, dict) else {}
    what = ", ".join(str(x) for x in (f"job {prev['job']}" if prev.get("job") else None, prev.get("status"),
                                       f"started {prev['started']}" if prev.get("started") else None) if x)
    raise UsageError(f"{run_dir.url} holds another run ({what or 'its job.json'}); give a new --run-dir, "
                     f"--resume {run_dir.url} to continue that run, or remove the directory to start over")


def _run(job: Job, config: dict[str, Any], options: RunOptions, name: str, finish: bool, cluster: Any,
         graph: Graph, placement: Any, run_dir: RunDir | None) -> Launched:
    """``_launch`` once the run directory (if any) is this run's: run, record the outcome."""
    info = _job_info(run_dir, name, config, graph, placement, options) if run_dir is not None else None
    try:
        if options.runtime_name == "local":
            result = run_local(graph, options.replace(placement=placement))
        elif cluster is not None:
            result = cluster.run(graph, run_dir)
        else:
            from ..cluster.launch import run_cluster

            result = run_cluster(info["job"] if info else name, config, graph, options, build_graph)
        text, summary = job.finish(result, config, run_dir) if finish and job.finish else ("", {})
    except BaseException as exc:  # job.json never stays "running" after the job has ended
        if info is not None:
            why = str(exc) if isinstance(exc, MarianaError) else f"{type(exc).__name__}: {exc}"
            info.update(status="interrupted" if isinstance(exc, KeyboardInterrupt) else "failed", error=why)
            try:
                run_dir.write_json("job.json", info)  # type: ignore[union-attr]
            except MarianaError as also:  # the storage that failed the job may fail this too: keep the first error
                log.warning("could not record the failure in job.json: %s", also)
        raise
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, or SIGTERM (the command turns it into KeyboardInterrupt)
        if info is not None:
            info.update(status="interrupted", error="stopped by a signal (Ctrl-C or SIGTERM)")
            run_dir.write_json("job.json", info)  # type: ignore[union-attr]
        raise
    if info is not None:
        info.update(status="finished", supersteps=result.supersteps, halt_reason=result.halt_reason,
                    wall_s=round(result.wall_s, 6))
        run_dir.write_json("job.json", info)  # type: ignore[union-attr]
    return Launched(result, run_dir, text, summary)


def _job_ref(options: RunOptions, name: str) -> str:
    """How workers name the job: ``name``, or for a resumed run the reference its job.json recorded."""
    run_dir = options.run_dir
    if options.resume and isinstance(run_dir, RunDir) and run_dir.exists("job.json"):
        return run_dir.read_json("job.json")["job"]
    return name


def _job_info(run_dir: RunDir, name: str, config: dict[str, Any], graph: Graph, placement: Any,
              options: RunOptions) -> dict[str, Any]:
    """``RUN/job.json`` of a run that starts now (a resumed run keeps its job reference)."""
    info = {"job": name, "config": config, "workers": options.workers, "runtime": options.runtime_name,
            "placement_arg": options.placement, "graph": {"name": graph.name, "vertices": len(graph)},
            "placement": placement.summary(), "versions": versions(), "host": socket.gethostname(),
            "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "status": "running"}
    if options.resume and run_dir.exists("job.json"):
        info["resumed"] = True
        info["job"] = run_dir.read_json("job.json")["job"]
    run_dir.write_json("job.json", info)
    return info


def versions() -> dict[str, str]:
    import msgpack
    import numpy

    from .._versions import installed_version  # (pyzmq and fsspec: not imported for this)

    return {"mariana": __version__, "python": platform.python_version(), "numpy": numpy.__version__,
            "pyzmq": installed_version("zmq", "pyzmq"), "msgpack": ".".join(map(str, msgpack.version)),
            "fsspec": installed_version("fsspec", "fsspec")}


def explain_placement(job: Job, config: dict[str, Any], workers: int, placement: str | None = None) -> str:
    """The vertex -> worker table of ``job`` on ``workers`` (``--explain-placement``)."""
    return job.build(config, BuildContext(workers, placement)).place(workers).explain()


def build_graph(job_name: str, config: dict[str, Any], workers: int, placement: Any = None) -> Graph:
    """The graph of job ``job_name`` for ``workers`` partitions: what a cluster worker builds
    from its WELCOME (``cluster.worker.GraphBuilder``)."""
    job = get_job(job_name)
    return job.build(resolve_config(job, config), BuildContext(workers, placement))
