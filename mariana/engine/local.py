"""LocalRuntime: every partition in this process; messages are passed as objects, never copied.

It keeps one ``Partition`` per worker of the placement, so per-worker metrics mean the same
as on the cluster runtime; it is the reference semantics for every other runtime.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from .graph import Graph
from .result import RunResult
from .superstep import Coordinator, Partition

log = logging.getLogger(__name__)

__all__ = ["LocalRuntime"]


class LocalRuntime:
    """Run a ``Graph`` on ``workers`` in-process partitions."""

    def __init__(self, graph: Graph, workers: int = 1, placement: Any = None) -> None:
        self.graph = graph
        self.placement = placement if hasattr(placement, "worker_of") else graph.place(workers, placement)

    def run(self, max_supersteps: int | None = None,
            on_superstep: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
        """Run to the end; ``on_superstep(metrics_line)`` is called after every barrier."""
        pl = self.placement
        started = time.perf_counter()
        partitions = [Partition(self.graph, pl, w) for w in range(pl.num_workers)]
        coord = Coordinator(self.graph, len(pl.worker), max_supersteps)
        metrics: list[dict[str, Any]] = []
        while (begin := coord.next_begin()) is not None:
            t0 = time.perf_counter()
            outs, dones = [], []
            for p in partitions:
                batches, done = p.compute(begin)
                outs.append(batches)
                dones.append(done)
            for w, p in enumerate(partitions):
                p.deliver([outs[src][w] for src in range(len(partitions))])
            record = coord.barrier(dones, time.perf_counter() - t0)
            metrics.append(record)
            if on_superstep is not None:
                on_superstep(record)
        log.info("job %s ended after %d supersteps: %s", self.graph.name, coord.superstep, coord.halt_reason)
        values = {vid: v.result() for p in partitions for vid, v in p.vertices.items()}
        return RunResult(coord.superstep, coord.halt_reason, values, coord.aggregates, metrics,
                         time.perf_counter() - started, pl)
