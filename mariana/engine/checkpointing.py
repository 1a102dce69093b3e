"""Checkpoints from the superstep loop: what a worker writes, the commit, the background writer.

A checkpoint of superstep S is the state after S's barrier: every worker's part (vertex states,
halted set, next inbox) plus its parameter snapshot, then the master's part, then the manifest
(``storage.checkpoint``). LocalRuntime writes it on a background thread from a copy of the state
(``BackgroundWriter``) so the next supersteps run while the disk works; the cluster's master
asks its workers for their parts and commits when all are in (``write_checkpoint``).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from ..errors import StorageError
from ..storage.checkpoint import Checkpoints
from .state import detached
from .superstep import Coordinator, Partition

log = logging.getLogger(__name__)

__all__ = ["capture", "write_worker", "worker_parts", "commit", "write_checkpoint", "BackgroundWriter"]


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


def worker_parts(checkpoints: Checkpoints, superstep: int, partition: Partition) -> list[dict[str, Any]]:
    """``write_worker`` of the partition as it is now (the caller does not change it meanwhile)."""
    return write_worker(checkpoints, superstep, partition.worker, *capture(partition))


def commit(checkpoints: Checkpoints, superstep: int, entries: list[dict[str, Any]], coordinator: dict[str, Any]) -> None:
    """Write the master's part, then the manifests (the commit point)."""
    entries = entries + [checkpoints.write_part(superstep, "master", {"coordinator": coordinator})]
    workers = sum(1 for e in entries if e["name"].startswith("worker-") and "store" not in e)
    checkpoints.commit(superstep, entries, workers=workers)


def write_checkpoint(checkpoints: Checkpoints, coord: Coordinator, write_parts: Callable[[], list[dict[str, Any]]],
                     record: dict[str, Any]) -> bool:
    """Write the workers' parts (``write_parts()``) and commit, now.

    A storage failure is reported in the metrics line and the log; the job goes on and the
    previous checkpoint stays the newest valid one.
    """
    ss = coord.superstep
    try:
        commit(checkpoints, ss, write_parts(), coord.snapshot())
    except StorageError as exc:
        log.warning("checkpoint at superstep %d failed, the job goes on: %s", ss, exc)
        record["checkpoint_failed"] = f"superstep {ss}: {exc}"
        return False
    record["checkpoint"] = ss
    return True


class BackgroundWriter:
    """Writes checkpoints on one background thread, one at a time.

    ``submit`` takes a function that writes and commits a checkpoint from copies of the state;
    it first waits for the previous one, so at most one copy of the state is in flight. The
    outcome goes into the metrics line of the superstep in which it is known (``settle``):
    ``"checkpoint": S`` once committed, or ``"checkpoint_failed": "superstep S: why"``.
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mariana-checkpoint")
        self._pending: tuple[int, Future] | None = None

    def submit(self, superstep: int, job: Callable[[], None], record: dict[str, Any]) -> None:
        self.settle(record, wait=True)
        self._pending = (superstep, self._pool.submit(job))

    def settle(self, record: dict[str, Any] | None, wait: bool = False) -> None:
        """Report the checkpoint in flight into ``record`` if it has ended (or once it has, with ``wait``)."""
        if self._pending is None or not (wait or self._pending[1].done()):
            return
        ss, done = self._pending
        self._pending = None
        try:
            done.result()
        except StorageError as exc:
            log.warning("checkpoint at superstep %d failed, the job goes on: %s", ss, exc)
            if record is not None:
                record["checkpoint_failed"] = f"superstep {ss}: {exc}"
            return
        log.debug("checkpoint at superstep %d committed", ss)
        if record is not None:
            record["checkpoint"] = ss

    def close(self) -> None:
        """Wait for the checkpoint in flight (its outcome is logged), then stop the thread."""
        try:
            self.settle(None, wait=True)
        finally:
            self._pool.shutdown(wait=True)
