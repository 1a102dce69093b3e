"""LocalRuntime: every partition in this process; messages are passed as objects, never copied.

It keeps one ``Partition`` per worker of the placement, so per-worker metrics mean the same
as on the cluster runtime; it is the reference semantics for every other runtime.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ..errors import StorageError
from ..storage.checkpoint import CheckpointInfo, Checkpoints
from .graph import Graph
from .result import RunResult
from .superstep import Coordinator, Partition

log = logging.getLogger(__name__)

__all__ = ["LocalRuntime", "write_checkpoint"]


class LocalRuntime:
    """Run a ``Graph`` on ``workers`` in-process partitions."""

    def __init__(self, graph: Graph, workers: int = 1, placement: Any = None) -> None:
        self.graph = graph
        self.placement = placement if hasattr(placement, "worker_of") else graph.place(workers, placement)

    def run(self, max_supersteps: int | None = None,
            on_superstep: Callable[[dict[str, Any]], None] | None = None,
            checkpoints: Checkpoints | None = None, checkpoint_every: int | None = None,
            resume: CheckpointInfo | None = None) -> RunResult:
        """Run to the end; ``on_superstep(metrics_line)`` is called after every barrier.

        With ``checkpoints``, a checkpoint is written every ``checkpoint_every`` supersteps and
        whenever master compute asks; ``resume`` restarts from a verified checkpoint.
        """
        pl = self.placement
        started = time.perf_counter()
        partitions = [Partition(self.graph, pl, w) for w in range(pl.num_workers)]
        coord = Coordinator(self.graph, len(pl.worker), max_supersteps)
        if resume is not None:
            for p in partitions:
                p.restore(checkpoints.read(resume.superstep, f"worker-{p.worker}"))
            coord.restore(checkpoints.read(resume.superstep, "master")["coordinator"])
            log.info("resumed %s from the checkpoint at superstep %d", self.graph.name, resume.superstep)
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
            if checkpoints is not None and coord.checkpoint_due(checkpoint_every):
                parts = lambda: [checkpoints.write_part(coord.superstep, f"worker-{p.worker}", p.snapshot())  # noqa: E731
                                 for p in partitions]
                write_checkpoint(checkpoints, coord, parts, record)
            metrics.append(record)
            if on_superstep is not None:
                on_superstep(record)
        log.info("job %s ended after %d supersteps: %s", self.graph.name, coord.superstep, coord.halt_reason)
        values = {vid: v.result() for p in partitions for vid, v in p.vertices.items()}
        return RunResult(coord.superstep, coord.halt_reason, values, coord.aggregates, metrics,
                         time.perf_counter() - started, pl)


def write_checkpoint(checkpoints: Checkpoints, coord: Coordinator, write_parts: Callable[[], list[dict[str, Any]]],
                     record: dict[str, Any]) -> bool:
    """Write the workers' parts (``write_parts()``), the master part, then commit the manifest.

    A storage failure is reported in the metrics line and the log; the job goes on and the
    previous checkpoint stays the newest valid one.
    """
    ss = coord.superstep
    try:
        parts = write_parts()
        parts.append(checkpoints.write_part(ss, "master", {"coordinator": coord.snapshot()}))
        checkpoints.commit(ss, parts, workers=len(parts) - 1)
    except StorageError as exc:
        log.warning("checkpoint at superstep %d failed, the job goes on: %s", ss, exc)
        record["checkpoint_failed"] = str(exc)
        return False
    record["checkpoint"] = ss
    return True
