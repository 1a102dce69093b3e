"""Checkpoints from the superstep loop: what a worker writes, the commit, the background writer.

A checkpoint of superstep S is the state after S's barrier: every worker's part (vertex states,
halted set, next inbox) plus its parameter snapshot, then the master's part, then the manifest
(``storage.checkpoint``). LocalRuntime writes it on a background thread from a copy of the state
(``BackgroundWriter``) so the next supersteps run while the disk works. On the cluster each
worker does the same with its part and answers CHECKPOINTED when it is written; the master
commits once every part is in, while the supersteps go on (cluster/master.py).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from ..errors import MarianaError
from ..storage.checkpoint import Checkpoints
from .state import detached
from .superstep import Partition

log = logging.getLogger(__name__)

__all__ = ["capture", "write_worker", "commit", "report", "BackgroundWriter"]


def capture(partition: Partition, copy: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state snapshot, parameter snapshot) of a partition; ``copy``: arrays owned by the copy."""
    snap, params = partition.snapshot(), partition.params_snapshot()
    if copy:
        memo: dict[tuple, Any] = {}  # one memo: an array in both stays one copy
        snap, params = detached(snap, memo), detached(params, memo)
    return snap, params


def write_worker(checkpoints: Checkpoints, superstep: int, worker: int, snap: dict[str, Any],
                 params: dict[str, Any]) -> list[dict[str, Any]]:
    """A worker's part of a checkpoint, and its parameter snapshot when its vertices hold parameters."""
    name = f"worker-{worker}"
    entries = [checkpoints.write_part(superstep, name, snap)]
    if params:
        entries.append(checkpoints.params.write_part(superstep, name, params))
    return entries


def commit(checkpoints: Checkpoints, superstep: int, entries: list[dict[str, Any]], coordinator: dict[str, Any]) -> None:
    """Write the master's part, then the manifest (the commit point), then the parameter
    snapshot's manifest: ``entries`` are the workers' parts of both stores."""
    parts = [e for e in entries if e["store"] == checkpoints.root]
    parts.append(checkpoints.write_part(superstep, "master", {"coordinator": coordinator}))
    checkpoints.commit(superstep, parts, workers=len(parts) - 1)
    snapshot = [e for e in entries if e["store"] == checkpoints.params.root]
    if snapshot:
        checkpoints.params.commit(superstep, snapshot)


def report(superstep: int, error: MarianaError | None, record: dict[str, Any] | None, tracer: Any = None) -> None:
    """The outcome of the checkpoint of ``superstep``: the log, the trace events and the metrics
    line ``record`` (``"checkpoint": S``, or ``"checkpoint_failed": "superstep S: why"``)."""
    if error is not None:
        log.warning("checkpoint at superstep %d failed, the job goes on: %s", superstep, error)
    else:
        log.debug("checkpoint at superstep %d committed", superstep)
    if tracer is not None:
        tracer.event("checkpoint", superstep=superstep, ok=error is None,
                     **({"error": str(error)} if error is not None else {}))
    if record is not None:
        if error is not None:
            record["checkpoint_failed"] = f"superstep {superstep}: {error}"
        else:
            record["checkpoint"] = superstep


class BackgroundWriter:
    """Writes checkpoints on one background thread, one at a time.

    ``submit`` takes a function that writes (and commits) a checkpoint from copies of the state;
    it first waits for the previous one, so at most one copy of the state is in flight. The
    outcome is reported (``report``) into the metrics line of the superstep in which it is
    known: ``settle`` looks without waiting, ``close`` waits for the last one.
    """

    def __init__(self, tracer: Any = None) -> None:
        self.tracer = tracer
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mariana-checkpoint")
        self._pending: tuple[int, Future] | None = None

    @property
    def pending(self) -> int | None:
        """The superstep of the checkpoint in flight, if any."""
        return None if self._pending is None else self._pending[0]

    def submit(self, superstep: int, job: Callable[[], Any], record: dict[str, Any] | None) -> None:
        self.settle(record, wait=True)
        self._pending = (superstep, self._pool.submit(job))

    def settle(self, record: dict[str, Any] | None, wait: bool = False,
               quiet: bool = False) -> tuple[int, Any] | None:
        """Report the checkpoint in flight into ``record`` if it has ended (or once it has, with
        ``wait``). Returns (superstep, what its job returned or the MarianaError it raised), or
        None when none has ended. ``quiet``: leave the reporting to the caller."""
        if self._pending is None or not (wait or self._pending[1].done()):
            return None
        ss, done = self._pending
        self._pending = None
        try:
            result = done.result()
        except MarianaError as exc:
            if not quiet:
                report(ss, exc, record, self.tracer)
            return ss, exc
        if not quiet:
            report(ss, None, record, self.tracer)
        return ss, result

    def close(self) -> None:
        """Wait for the checkpoint in flight (its outcome is logged), then stop the thread."""
        try:
            self.settle(None, wait=True)
        finally:
            self._pool.shutdown(wait=True)
