"""``mariana.run``: run a graph on a runtime and record it in a run directory."""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..errors import UsageError
from ..storage import RunDir
from ..storage.checkpoint import CheckpointInfo, Checkpoints
from .graph import Graph
from .local import LocalRuntime
from .options import RunOptions
from .result import RunResult
from .tracing import Capture, TraceWriter, rewind

log = logging.getLogger(__name__)

__all__ = ["run", "run_local", "newest_checkpoint", "resume_point"]

def run(graph: Graph, *, workers: int = 1, runtime: str = "local", placement: Any = None,
        max_supersteps: int | None = None, run_dir: Any = None,
        on_superstep: Callable[[dict[str, Any]], None] | None = None,
        checkpoint_every: int | None = None, keep_checkpoints: int = 3, resume: bool = False,
        checkpoint_background: bool = True,
        trace: bool = True, capture: str | None = None, capture_limit_mb: int = 64) -> RunResult:
    """Run ``graph`` to the end in this process and return its ``RunResult``.

    ``placement``: a strategy name (``hash``, ``range``), a ``Strategy``, a mapping or callable
    ``id -> worker``, or a resolved ``Placement``. ``run_dir``: a ``RunDir`` that receives one
    ``metrics.jsonl`` line per superstep and the checkpoints (every ``checkpoint_every``
    supersteps, the newest ``keep_checkpoints`` kept; written in the background from a copy of the
    state unless ``checkpoint_background`` is false). ``resume``: continue from the newest
    valid checkpoint in ``run_dir``. ``trace``: write superstep traces to ``run_dir/trace``;
    ``capture``: store the messages of vertices matching this glob (docs/traces.md).
    (``mariana.run(graph, runtime="cluster")`` runs it on forked worker processes; a job runs by
    name on any runtime with ``mariana.jobs.launch.run_job``.)
    """
    if runtime != "local":
        raise UsageError(f"unknown runtime {runtime!r} here: this runs graphs in this process; "
                         f"mariana.run(graph, runtime='cluster') runs them on worker processes")
    return run_local(graph, RunOptions(
        workers=workers, runtime=runtime, placement=placement, max_supersteps=max_supersteps, run_dir=run_dir,
        on_superstep=on_superstep, checkpoint_every=checkpoint_every, keep_checkpoints=keep_checkpoints,
        resume=resume, checkpoint_background=checkpoint_background, trace=trace, capture=capture,
        capture_limit_mb=capture_limit_mb))


def run_local(graph: Graph, options: RunOptions) -> RunResult:
    """Run ``graph`` on ``LocalRuntime`` with ``options``."""
    run_dir = options.run_dir
    checkpoints = Checkpoints(run_dir, options.keep_checkpoints) if run_dir is not None else None
    tracer = TraceWriter(run_dir) if run_dir is not None and options.trace else None
    start = resume_point(run_dir, options.keep_checkpoints, load=True) if options.resume else None
    spy = (Capture(options.capture, run_dir, options.capture_limit_mb << 20)
           if options.capture and run_dir is not None else None)
    return LocalRuntime(graph, options.workers, options.placement).run(
        options.max_supersteps, options.on_superstep, checkpoints, options.checkpoint_every, start, tracer, spy,
        options.checkpoint_background, run_dir, options.metrics_every_s)


def resume_point(run_dir: RunDir | None, keep: int = 3, load: bool = False) -> CheckpointInfo:
    """The newest valid checkpoint of ``run_dir``, with the run directory rewound to it.

    ``load``: read its parts now (verified in the same pass) for a runtime in this process;
    the cluster's workers read their own parts, so there the checkpoint is only verified.
    """
    start = newest_checkpoint(Checkpoints(run_dir, keep) if run_dir is not None else None, load)
    rewind(run_dir, start.superstep)
    return start


def newest_checkpoint(checkpoints: Checkpoints | None, load: bool = False) -> CheckpointInfo:
    """The newest valid checkpoint, or a ``UsageError`` saying there is none."""
    info = checkpoints.newest_valid(load) if checkpoints is not None else None
    if info is None:
        where = checkpoints.run_dir.url if checkpoints is not None else "(no run directory)"
        raise UsageError(f"no valid checkpoint in {where} to resume from")
    return info
