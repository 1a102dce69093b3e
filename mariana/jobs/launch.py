"""Run a job by name: resolve its config, build its graph, run it on a runtime."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..engine import RunResult
from ..engine import run as engine_run
from .registry import BuildContext, Job, get_job, resolve_config

__all__ = ["run_job"]


def run_job(job: str | Job, config: dict[str, Any] | None = None, sets: Sequence[str] = (), *,
            workers: int = 1, runtime: str = "local", placement: str | None = None,
            max_supersteps: int | None = None, run_dir: Any = None,
            on_superstep: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    """Run ``job`` (a ``Job`` or its name, e.g. ``pagerank`` or ``pkg.module:JOB``).

    ``config`` and ``sets`` (``KEY=VALUE`` strings) override the job's defaults, in that order.
    """
    job = get_job(job) if isinstance(job, str) else job
    resolved = resolve_config(job, config, list(sets))
    graph = job.build(resolved, BuildContext(workers, placement))
    return engine_run(graph, workers=workers, runtime=runtime, max_supersteps=max_supersteps,
                      run_dir=run_dir, on_superstep=on_superstep)
