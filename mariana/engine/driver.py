"""The superstep driver: the one loop every runtime runs, over a ``Backend``.

    while the coordinator says go on:            (halting, max_supersteps, master compute)
        dones = backend.superstep(begin)         (compute -> combine -> exchange -> deliver)
        record = coordinator.barrier(dones)      (aggregates, active, in flight)
        trace records, runtime metrics, checkpoint timing, metrics.jsonl, on_superstep

A ``Backend`` is what makes a runtime: it runs one superstep on every partition and moves
their batches, in this process (``LocalBackend``) or over ZeroMQ between worker processes
(the cluster ``Master``); it writes checkpoint parts and collects results. Everything else, the
order of the steps above included, lives here once, so the runtimes cannot drift apart.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Protocol

from ..errors import StorageError
from ..storage import RunDir
from .result import RunResult
from .state import detached
from .superstep import Begin, Coordinator, Done
from .tracing import TraceWriter, master_record

log = logging.getLogger(__name__)

__all__ = ["Backend", "Driver"]


class Backend(Protocol):
    """What a runtime gives the driver."""

    def superstep(self, begin: Begin) -> list[Done]:
        """Run ``begin`` on every partition: compute, send every batch, deliver the next inbox.

        Returns every worker's ``Done`` in worker order, each with ``arrival`` (seconds from the
        start of the superstep to its report) and, when tracing, ``trace``: the worker's trace
        record (docs/traces.md) without ``superstep``, ``worker`` and ``barrier_s``.
        """
        ...

    def annotate(self, record: dict[str, Any]) -> None:
        """Add the runtime's own keys to a superstep's metrics line (bytes on the wire, drops)."""
        ...

    def start_checkpoint(self, superstep: int, coordinator: dict[str, Any]) -> None:
        """Write the state after this barrier (``coordinator``: a copy of the master's part);
        the supersteps may go on while it is written."""
        ...

    def settle_checkpoint(self, record: dict[str, Any] | None, wait: bool) -> None:
        """Commit and report the checkpoint being written if it is complete (``wait``: once it
        is) into the metrics line ``record`` (``checkpointing.report``); no-op when none is."""
        ...

    def results(self) -> dict[str, Any]:
        """Every vertex's ``result()`` at the end of the job."""
        ...


class Driver:
    """Runs a job's supersteps over ``backend`` from the state ``coordinator`` holds.

    ``checkpoint_every``: a checkpoint every N supersteps (None: only when master compute asks;
    ``checkpoints`` False: never); ``background`` False waits for each one before the next
    superstep. ``run_dir`` receives one ``metrics.jsonl`` line per superstep, ``tracer`` the
    trace records, ``on_superstep`` every metrics line.

    Metrics lines are written in batches, at most ``metrics_every_s`` apart (the first at once):
    one append per superstep cost ~0.07 ms of every superstep (bench/superstep_latency.py). They
    are written before a checkpoint is taken (a resume finds every line before it), when the job
    ends, fails or rolls back; a killed process loses at most that interval. 0 writes each line at
    once (a sweep: its scheduler reads the lines of the trials still running).
    """

    def __init__(self, backend: Backend, coordinator: Coordinator, *, run_dir: RunDir | None = None,
                 on_superstep: Callable[[dict[str, Any]], None] | None = None, tracer: TraceWriter | None = None,
                 checkpoints: bool = False, checkpoint_every: int | None = None, background: bool = True,
                 started: float | None = None, metrics_every_s: float = 0.2) -> None:
        self.backend, self.coord = backend, coordinator
        self.run_dir, self.on_superstep, self.tracer = run_dir, on_superstep, tracer
        self.checkpoints, self.checkpoint_every, self.background = checkpoints, checkpoint_every, background
        self.metrics: list[dict[str, Any]] = []
        self._unwritten: list[dict[str, Any]] = []  # metrics lines not in metrics.jsonl yet
        self._write_due = 0.0
        self.metrics_every_s = metrics_every_s
        self.started = time.perf_counter() if started is None else started  # RunResult.wall_s counts from here

    def run(self) -> None:
        """Run supersteps until the job ends (whatever the backend raises propagates, after the
        metrics lines so far are written)."""
        try:
            self._run()
        except BaseException:
            self.write_metrics(quiet=True)
            raise
        self.write_metrics()

    def write_metrics(self, quiet: bool = False) -> None:
        """Append the metrics lines not written yet to ``metrics.jsonl`` (``quiet``: a storage
        error is logged, not raised: the job is failing already)."""
        self._write_due = time.monotonic() + self.metrics_every_s
        if self.run_dir is None or not self._unwritten:
            return
        lines, self._unwritten = self._unwritten, []
        try:
            self.run_dir.append_jsonl("metrics.jsonl", lines)
        except StorageError as exc:
            if not quiet:
                raise
            log.warning("%d metrics lines not written: %s", len(lines), exc)

    def _run(self) -> None:
        coord, backend = self.coord, self.backend
        while (begin := coord.next_begin()) is not None:
            t0, wall0 = time.perf_counter(), time.time()
            dones = backend.superstep(begin)
            record = coord.barrier(dones, time.perf_counter() - t0)
            if self.tracer is not None:
                self._trace(begin.superstep, wall0, dones)
            backend.annotate(record)
            checkpoint = False
            if self.checkpoints:
                backend.settle_checkpoint(record, wait=False)
                if coord.checkpoint_due(self.checkpoint_every):
                    checkpoint = True
                    self.write_metrics()  # every line before the checkpoint is stored before it can commit
                    backend.settle_checkpoint(record, wait=True)  # one at a time: its buffers are free again
                    backend.start_checkpoint(coord.superstep, detached(coord.snapshot()))
                    if not self.background:
                        backend.settle_checkpoint(record, wait=True)  # written before the state changes
            self.metrics.append(record)
            if self.run_dir is not None:
                self._unwritten.append(record)
                if checkpoint or time.monotonic() >= self._write_due:
                    self.write_metrics()
            if self.on_superstep is not None:
                self.on_superstep(record)

    def rewind(self, superstep: int) -> None:
        """Forget the metrics of ``superstep`` and later (a rollback replays them); the lines
        before it are written first (the caller then truncates metrics.jsonl at ``superstep``)."""
        self.write_metrics()
        del self.metrics[superstep:]

    def finish(self, placement: Any, name: str = "") -> RunResult:
        """The last checkpoint committed, the results collected, the traces flushed."""
        if self.checkpoints:
            self.backend.settle_checkpoint(None, wait=True)
        values = self.backend.results()
        if self.tracer is not None:
            self.tracer.flush()
        coord = self.coord
        log.info("job %s ended after %d supersteps: %s", name, coord.superstep, coord.halt_reason)
        return RunResult(coord.superstep, coord.halt_reason, values, coord.aggregates, self.metrics,
                         time.perf_counter() - self.started, placement)

    def _trace(self, superstep: int, wall0: float, dones: list[Done]) -> None:
        """Every worker's record (with its wait at the barrier) and the master's line."""
        tracer = self.tracer
        assert tracer is not None
        end = time.time()
        for d in dones:
            if d.trace:
                tracer.worker({"superstep": superstep, "worker": d.worker, **d.trace,
                               "barrier_s": max(0.0, end - d.trace["end"])})
        arrivals = {d.worker: d.arrival for d in dones}
        busy = {d.worker: d.arrival - d.trace.get("wait_s", 0.0) for d in dones}
        tracer.master(master_record(superstep, wall0, end, arrivals, self.coord.aggregates, busy))
        tracer.end_superstep()
