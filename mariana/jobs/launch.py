"""Run a job by name: resolve its config, build its graph, run it on a runtime."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..engine import RunResult
from ..engine import run as engine_run
from ..errors import UsageError
from .registry import BuildContext, Job, get_job, resolve_config

__all__ = ["run_job", "RUNTIMES"]

RUNTIMES = ("local", "cluster")


def run_job(job: str | Job, config: dict[str, Any] | None = None, sets: Sequence[str] = (), *,
            workers: int = 1, runtime: str | None = None, placement: str | None = None,
            max_supersteps: int | None = None, run_dir: Any = None,
            on_superstep: Callable[[dict[str, Any]], None] | None = None, **cluster_options: Any) -> RunResult:
    """Run ``job`` (a built-in name or ``package.module:JOB``) and return its ``RunResult``.

    ``config`` and ``sets`` (``KEY=VALUE`` strings) override the job's defaults, in that order.
    ``runtime``: ``local`` (one process) or ``cluster`` (one process per worker); the default is
    local for one worker and cluster for more. ``cluster_options`` go to ``run_cluster``
    (``heartbeat_interval``, ``worker_timeout``, ``bind``, ``on_start``).
    """
    runtime = runtime or ("cluster" if workers > 1 else "local")
    if runtime not in RUNTIMES:
        raise UsageError(f"unknown runtime {runtime!r}; choose one of: {', '.join(RUNTIMES)}")
    name = job if isinstance(job, str) else job.name
    job = get_job(job) if isinstance(job, str) else job
    resolved = resolve_config(job, config, list(sets))
    graph = job.build(resolved, BuildContext(workers, placement))
    if runtime == "local":
        return engine_run(graph, workers=workers, max_supersteps=max_supersteps, run_dir=run_dir,
                          on_superstep=on_superstep)
    from ..engine.cluster import run_cluster

    def record(line: dict[str, Any]) -> None:
        if run_dir is not None:
            run_dir.append_jsonl("metrics.jsonl", [line])
        if on_superstep is not None:
            on_superstep(line)

    return run_cluster(name, resolved, graph, workers=workers, placement=placement, max_supersteps=max_supersteps,
                       on_superstep=record, **cluster_options)
