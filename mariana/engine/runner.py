"""``mariana.run``: run a graph on a runtime and record it in a run directory."""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..errors import UsageError
from .graph import Graph
from .local import LocalRuntime
from .result import RunResult

log = logging.getLogger(__name__)

__all__ = ["run", "RUNTIMES"]

RUNTIMES = ("local",)


def run(graph: Graph, *, workers: int = 1, runtime: str = "local", placement: Any = None,
        max_supersteps: int | None = None, run_dir: Any = None,
        on_superstep: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    """Run ``graph`` to the end and return its ``RunResult``.

    ``placement``: a strategy name (``hash``, ``range``), a ``Strategy``, a mapping or callable
    ``id -> worker``, or a resolved ``Placement``. ``run_dir``: a ``RunDir`` that receives one
    ``metrics.jsonl`` line per superstep.
    """
    if workers < 1:
        raise UsageError(f"workers must be >= 1, got {workers}")
    if runtime not in RUNTIMES:
        raise UsageError(f"unknown runtime {runtime!r}; available: {', '.join(RUNTIMES)}")

    def record(line: dict[str, Any]) -> None:
        if run_dir is not None:
            run_dir.append_jsonl("metrics.jsonl", [line])
        if on_superstep is not None:
            on_superstep(line)

    return LocalRuntime(graph, workers, placement).run(max_supersteps, record)
