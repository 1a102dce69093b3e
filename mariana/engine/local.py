"""LocalRuntime: every partition in this process; messages are passed as objects, never copied.

It keeps one ``Partition`` per worker of the placement, so per-worker metrics mean the same
as on the cluster runtime; it is the reference semantics for every other runtime.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any, Callable

from ..errors import StorageError
from ..storage.checkpoint import CheckpointInfo, Checkpoints
from . import checkpointing
from .graph import Graph
from .result import RunResult
from .state import detached
from .superstep import Coordinator, Partition
from .tracing import PHASES, Capture, TraceWriter, master_record

log = logging.getLogger(__name__)
_HOST = socket.gethostname()

__all__ = ["LocalRuntime"]


class LocalRuntime:
    """Run a ``Graph`` on ``workers`` in-process partitions."""

    def __init__(self, graph: Graph, workers: int = 1, placement: Any = None) -> None:
        self.graph = graph
        self.placement = placement if hasattr(placement, "worker_of") else graph.place(workers, placement)

    def run(self, max_supersteps: int | None = None,
            on_superstep: Callable[[dict[str, Any]], None] | None = None,
            checkpoints: Checkpoints | None = None, checkpoint_every: int | None = None,
            resume: CheckpointInfo | None = None, tracer: TraceWriter | None = None,
            capture: Capture | None = None, checkpoint_background: bool = True) -> RunResult:
        """Run to the end; ``on_superstep(metrics_line)`` is called after every barrier.

        With ``checkpoints``, a checkpoint is written every ``checkpoint_every`` supersteps and
        whenever master compute asks: from a copy of the state on a background thread, or with
        ``checkpoint_background=False`` right there, before the next superstep (no extra memory).
        ``resume`` restarts from a verified checkpoint. ``tracer``
        receives the trace records (docs/traces.md); ``capture`` stores matching vertices' messages.
        """
        pl = self.placement
        started = time.perf_counter()
        partitions = [Partition(self.graph, pl, w) for w in range(pl.num_workers)]
        for p in partitions:
            p.trace, p.capture = tracer is not None, capture
        coord = Coordinator(self.graph, len(pl.worker), max_supersteps)
        if resume is not None:
            parts = resume.loaded if resume.loaded is not None else checkpoints.load(resume.superstep)
            for p in partitions:
                p.restore(_part(parts, f"worker-{p.worker}", resume))
            coord.restore(_part(parts, "master", resume)["coordinator"])
            resume.loaded = None  # the arrays now live in the vertices
            log.info("resumed %s from the checkpoint at superstep %d", self.graph.name, resume.superstep)
        metrics: list[dict[str, Any]] = []
        writer = checkpointing.BackgroundWriter(tracer) if checkpoints is not None else None
        try:
            while (begin := coord.next_begin()) is not None:
                t0, wall0 = time.perf_counter(), time.time()
                outs, dones, spans = [], [], []
                for p in partitions:
                    start = time.time()
                    batches, done = p.compute(begin)
                    outs.append(batches)
                    dones.append(done)
                    spans.append((start, time.time()))
                for w, p in enumerate(partitions):
                    p.deliver([outs[src][w] for src in range(len(partitions))])
                record = coord.barrier(dones, time.perf_counter() - t0)
                if tracer is not None:
                    self._trace(tracer, begin.superstep, wall0, dones, outs, spans, coord.aggregates)
                if writer is not None:
                    if coord.checkpoint_due(checkpoint_every):
                        writer.settle(record, wait=True)  # the previous one's buffers are free again
                        job = _checkpoint_job(checkpoints, coord, partitions, copy=checkpoint_background)
                        writer.submit(coord.superstep, job, record)
                    writer.settle(record, wait=not checkpoint_background)
                metrics.append(record)
                if on_superstep is not None:
                    on_superstep(record)
        finally:
            if writer is not None:
                writer.close()  # the last checkpoint is on storage before run() returns
        if tracer is not None:
            tracer.flush()
        log.info("job %s ended after %d supersteps: %s", self.graph.name, coord.superstep, coord.halt_reason)
        values = {vid: v.result() for p in partitions for vid, v in p.vertices.items()}
        return RunResult(coord.superstep, coord.halt_reason, values, coord.aggregates, metrics,
                         time.perf_counter() - started, pl)


    def _trace(self, tracer: TraceWriter, superstep: int, wall0: float, dones: list, outs: list, spans: list,
               aggregates: dict[str, Any]) -> None:
        """One record per partition and the master's line; partitions run one after another here."""
        end = time.time()
        host, pid = _HOST, os.getpid()
        for w, (done, (start, stop)) in enumerate(zip(dones, spans)):
            rec = {"superstep": superstep, "worker": w, "host": host, "pid": pid, "start": start, "end": stop,
                   **{k: 0.0 for k in PHASES}, **done.trace, "barrier_s": end - stop,
                   "bytes_out": {}, "bytes_in": {}, "dropped": {}, "clock_offset_s": 0.0,
                   "messages_in": {str(src): len(outs[src][w]) for src in range(len(outs)) if outs[src][w]}}
            tracer.worker(rec)
        # partitions run one after another here: arrivals are as if they had run side by side
        tracer.master(master_record(superstep, wall0, end, {w: stop - start for w, (start, stop) in enumerate(spans)},
                                    aggregates))
        tracer.end_superstep()


def _checkpoint_job(checkpoints: Checkpoints, coord: Coordinator, partitions: list[Partition],
                    copy: bool) -> Callable[[], None]:
    """The state after this barrier (``copy``: copied now); the returned function writes and commits it."""
    ss, master = coord.superstep, detached(coord.snapshot())
    states = [(p.worker, *checkpointing.capture(p, copy=copy)) for p in partitions]

    def job() -> None:
        entries = [e for w, snap, params in states for e in checkpointing.write_worker(checkpoints, ss, w, snap, params)]
        checkpointing.commit(checkpoints, ss, entries, master)

    return job


def _part(parts: dict[str, Any], name: str, info: CheckpointInfo) -> Any:
    if name not in parts:
        raise StorageError(f"{info.path}: no part {name!r}: resume with the worker count of the checkpoint "
                           f"({sum(n.startswith('worker-') for n in parts)} workers)")
    return parts[name]
