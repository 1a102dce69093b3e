"""Run a job by name: resolve its config, build its graph, run it on a runtime."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..engine import RunResult
from ..engine import run as engine_run
from ..errors import UsageError
from .registry import BuildContext, Job, get_job, resolve_config

__all__ = ["run_job", "build_graph", "RUNTIMES"]

RUNTIMES = ("local", "cluster")


def run_job(job: str | Job, config: dict[str, Any] | None = None, sets: Sequence[str] = (), *,
            workers: int = 1, runtime: str | None = None, placement: str | None = None,
            max_supersteps: int | None = None, run_dir: Any = None,
            on_superstep: Callable[[dict[str, Any]], None] | None = None, resume: bool = False,
            trace: bool = True, capture: str | None = None, capture_limit_mb: int = 64,
            **cluster_options: Any) -> RunResult:
    """Run ``job`` (a built-in name or ``package.module:JOB``) and return its ``RunResult``.

    ``config`` and ``sets`` (``KEY=VALUE`` strings) override the job's defaults, in that order.
    ``runtime``: ``local`` (one process) or ``cluster`` (one process per worker); the default is
    local for one worker and cluster for more. ``cluster_options`` go to ``run_cluster``
    (``heartbeat_interval``, ``worker_timeout``, ``bind``, ``on_start``, ``max_restarts``, ...).
    Checkpoints (config keys ``checkpoint_every``, ``keep_checkpoints``, ``checkpoint_background``)
    go to ``run_dir``;
    ``resume`` continues from its newest valid checkpoint.
    """
    runtime = runtime or ("cluster" if workers > 1 else "local")
    if runtime not in RUNTIMES:
        raise UsageError(f"unknown runtime {runtime!r}; choose one of: {', '.join(RUNTIMES)}")
    name = job if isinstance(job, str) else job.name
    job = get_job(job) if isinstance(job, str) else job
    resolved = resolve_config(job, config, list(sets))
    graph = job.build(resolved, BuildContext(workers, placement))
    every, keep = resolved.get("checkpoint_every") or None, resolved.get("keep_checkpoints", 3)
    if runtime == "local":
        return engine_run(graph, workers=workers, max_supersteps=max_supersteps, run_dir=run_dir,
                          on_superstep=on_superstep, checkpoint_every=every, keep_checkpoints=keep, resume=resume,
                          checkpoint_background=resolved.get("checkpoint_background", True),
                          trace=trace, capture=capture, capture_limit_mb=capture_limit_mb)
    from ..engine.cluster import run_cluster
    from ..engine.runner import resume_point

    start = resume_point(run_dir, keep) if resume else None

    return run_cluster(name, resolved, graph, workers=workers, placement=placement, max_supersteps=max_supersteps,
                       on_superstep=on_superstep, run_dir=run_dir, checkpoint_every=every, keep_checkpoints=keep,
                       resume=start, trace=trace, capture=capture, capture_limit_mb=capture_limit_mb,
                       **cluster_options)


def build_graph(job_name: str, config: dict[str, Any], workers: int, placement: Any = None) -> Any:
    """The graph of job ``job_name`` for ``workers`` partitions: what a cluster worker builds
    from its WELCOME (``engine.worker.GraphBuilder``)."""
    job = get_job(job_name)
    return job.build(resolve_config(job, config), BuildContext(workers, placement))
