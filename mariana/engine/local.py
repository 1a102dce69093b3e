"""LocalRuntime: every partition in this process; messages are passed as objects, never copied.

It keeps one ``Partition`` per worker of the placement, so per-worker metrics mean the same
as on the cluster runtime; it is the reference semantics for every other runtime.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from typing import Any, Callable

from ..errors import MarianaError, StorageError
from ..storage import RunDir
from ..storage.checkpoint import CheckpointInfo, Checkpoints
from . import checkpointing
from .graph import Graph
from ..memory import TraceMemory
from .result import RunResult
from .driver import Driver
from .superstep import Begin, Coordinator, Done, Partition
from .tracing import PHASES, Capture, TraceWriter

log = logging.getLogger(__name__)
_HOST = socket.gethostname()

__all__ = ["LocalRuntime", "LocalBackend"]


class LocalBackend:
    """The in-process ``Backend``: partitions run one after another, batches are handed over as
    lists of ``Message`` objects (never copied), checkpoints are written on a background thread."""

    def __init__(self, partitions: list[Partition], checkpoints: Checkpoints | None = None,
                 tracer: TraceWriter | None = None, background: bool = True) -> None:
        self.partitions = partitions
        self.checkpoints, self.background = checkpoints, background
        self.writer = checkpointing.BackgroundWriter(tracer) if checkpoints is not None else None
        self.trace = tracer is not None
        self.memory = TraceMemory()

    def superstep(self, begin: Begin) -> list[Done]:
        outs, dones = [], []
        for p in self.partitions:
            start = time.time()
            batches, done = p.compute(begin)
            stop = time.time()
            done.arrival = stop - start  # as if the partitions had run side by side
            if self.trace:
                done.trace = {"host": _HOST, "pid": os.getpid(), "start": start, "end": stop,
                              **{f"{k}_s": 0.0 for k in PHASES}, **done.trace,
                              "bytes_out": {}, "bytes_in": {}, "dropped": {}, "clock_offset_s": 0.0}
            outs.append(batches)
            dones.append(done)
        n = len(self.partitions)
        memory = self.memory() if self.trace else {}  # (one process: every worker's)
        for w, p in enumerate(self.partitions):
            p.deliver([outs[src][w] for src in range(n)])
            if self.trace:
                dones[w].trace["messages_in"] = {str(src): len(outs[src][w]) for src in range(n) if outs[src][w]}
                dones[w].trace.update(memory)
        return dones

    def annotate(self, record: dict[str, Any]) -> None:
        pass

    def start_checkpoint(self, superstep: int, coordinator: dict[str, Any]) -> None:
        assert self.writer is not None and self.checkpoints is not None
        job = _checkpoint_job(self.checkpoints, superstep, coordinator, self.partitions, copy=self.background)
        self.writer.submit(superstep, job, None)

    def settle_checkpoint(self, record: dict[str, Any] | None, wait: bool) -> None:
        if self.writer is not None:
            self.writer.settle(record, wait=wait)

    def results(self) -> dict[str, Any]:
        return {vid: v.result() for p in self.partitions for vid, v in p.vertices.items()}

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()  # the last checkpoint is on storage before run() returns


class LocalRuntime:
    """Run a ``Graph`` on ``workers`` in-process partitions."""

    def __init__(self, graph: Graph, workers: int = 1, placement: Any = None) -> None:
        self.graph = graph
        self.placement = placement if hasattr(placement, "worker_of") else graph.place(workers, placement)

    def run(self, max_supersteps: int | None = None,
            on_superstep: Callable[[dict[str, Any]], None] | None = None,
            checkpoints: Checkpoints | None = None, checkpoint_every: int | None = None,
            resume: CheckpointInfo | None = None, tracer: TraceWriter | None = None,
            capture: Capture | None = None, checkpoint_background: bool = True,
            run_dir: RunDir | None = None, metrics_every_s: float = 0.2) -> RunResult:
        """Run to the end; ``on_superstep(metrics_line)`` is called after every barrier.

        With ``checkpoints``, a checkpoint is written every ``checkpoint_every`` supersteps and
        whenever master compute asks: from a copy of the state on a background thread, or with
        ``checkpoint_background=False`` right there, before the next superstep (no extra memory).
        ``resume`` restarts from a verified checkpoint. ``tracer`` receives the trace records
        (docs/traces.md); ``capture`` stores matching vertices' messages; ``run_dir`` gets one
        ``metrics.jsonl`` line per superstep.
        """
        pl = self.placement
        started = time.perf_counter()
        partitions = [Partition(self.graph, pl, w) for w in range(pl.num_workers)]
        for p in partitions:
            p.trace, p.capture = tracer is not None, capture
        coord = Coordinator(self.graph, len(pl.worker), max_supersteps)
        if resume is not None:
            assert checkpoints is not None
            parts = resume.loaded if resume.loaded is not None else checkpoints.load(resume.superstep)
            for p in partitions:
                p.restore(_part(parts, f"worker-{p.worker}", resume))
            coord.restore(_part(parts, "master", resume)["coordinator"])
            resume.loaded = None  # the arrays now live in the vertices
            log.info("resumed %s from the checkpoint at superstep %d", self.graph.name, resume.superstep)
        backend = LocalBackend(partitions, checkpoints, tracer, checkpoint_background)
        driver = Driver(backend, coord, run_dir=run_dir, on_superstep=on_superstep, tracer=tracer,
                        checkpoints=checkpoints is not None, checkpoint_every=checkpoint_every,
                        background=checkpoint_background, started=started, metrics_every_s=metrics_every_s)
        try:
            with blas_threads_of(pl.num_workers):
                driver.run()
        finally:
            backend.close()
        return driver.finish(pl, self.graph.name)


def blas_threads_of(workers: int) -> Any:
    """BLAS thread pools capped at what each of ``workers`` cluster workers gets on this machine.

    OpenBLAS sums in a different order with a different number of threads, so the in-process
    reference uses the cluster's per-worker count: the same placement then gives bit-identical
    results on both runtimes (docs/design.md, superstep contract point 9). Thread variables the user set win everywhere.
    """
    from threadpoolctl import threadpool_limits

    from .threads import THREAD_VARS, blas_threads

    if workers <= 1 or any(var in os.environ for var in THREAD_VARS):
        return contextlib.nullcontext()
    return threadpool_limits(blas_threads(workers), user_api="blas")


def _checkpoint_job(checkpoints: Checkpoints, ss: int, master: dict[str, Any], partitions: list[Partition],
                    copy: bool) -> Callable[[], None]:
    """The state after this barrier (``copy``: copied now); the returned function writes and commits it."""
    states = [(p.worker, *checkpointing.capture(p, copy=copy)) for p in partitions]

    def job() -> None:
        try:
            entries = [e for w, snap, params in states
                       for e in checkpointing.write_worker(checkpoints, ss, w, snap, params)]
            checkpointing.commit(checkpoints, ss, entries, master)
        except MarianaError:
            checkpoints.discard(ss)  # its parts would only take the space the next one needs
            raise

    return job


def _part(parts: dict[str, Any], name: str, info: CheckpointInfo) -> Any:
    if name not in parts:
        raise StorageError(f"{info.path}: no part {name!r}: resume with the worker count of the checkpoint "
                           f"({sum(n.startswith('worker-') for n in parts)} workers)")
    return parts[name]
