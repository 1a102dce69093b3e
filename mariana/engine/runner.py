"""``mariana.run``: run a graph on a runtime and record it in a run directory."""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..errors import UsageError
from ..storage import RunDir
from ..storage.checkpoint import CheckpointInfo, Checkpoints
from .graph import Graph
from .local import LocalRuntime
from .result import RunResult
from .tracing import Capture, TraceWriter, rewind

log = logging.getLogger(__name__)

__all__ = ["run", "RUNTIMES", "newest_checkpoint", "resume_point"]

RUNTIMES = ("local",)


def run(graph: Graph, *, workers: int = 1, runtime: str = "local", placement: Any = None,
        max_supersteps: int | None = None, run_dir: Any = None,
        on_superstep: Callable[[dict[str, Any]], None] | None = None,
        checkpoint_every: int | None = None, keep_checkpoints: int = 3, resume: bool = False,
        checkpoint_background: bool = True,
        trace: bool = True, capture: str | None = None, capture_limit_mb: int = 64) -> RunResult:
    """Run ``graph`` to the end and return its ``RunResult``.

    ``placement``: a strategy name (``hash``, ``range``), a ``Strategy``, a mapping or callable
    ``id -> worker``, or a resolved ``Placement``. ``run_dir``: a ``RunDir`` that receives one
    ``metrics.jsonl`` line per superstep and the checkpoints (every ``checkpoint_every``
    supersteps, the newest ``keep_checkpoints`` kept; written in the background from a copy of the
    state unless ``checkpoint_background`` is false). ``resume``: continue from the newest
    valid checkpoint in ``run_dir``. ``trace``: write superstep traces to ``run_dir/trace``;
    ``capture``: store the messages of vertices matching this glob (docs/traces.md).
    """
    if workers < 1:
        raise UsageError(f"workers must be >= 1, got {workers}")
    if runtime not in RUNTIMES:
        raise UsageError(f"unknown runtime {runtime!r}; available: {', '.join(RUNTIMES)}")

    checkpoints = Checkpoints(run_dir, keep_checkpoints) if run_dir is not None else None
    tracer = TraceWriter(run_dir) if run_dir is not None and trace else None
    start = resume_point(run_dir, keep_checkpoints, load=True) if resume else None
    spy = Capture(capture, run_dir, capture_limit_mb << 20) if capture and run_dir is not None else None
    return LocalRuntime(graph, workers, placement).run(max_supersteps, on_superstep, checkpoints, checkpoint_every,
                                                       start, tracer, spy, checkpoint_background, run_dir)


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
