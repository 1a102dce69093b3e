"""The worker's decisions as pure state: which control message to act on, and its inbox.

``WorkerControl`` takes each control message a worker receives and says what to do with it, as
a typed instruction (``Compute`` a superstep, ``WriteCheckpoint``, ``RollBack``, ``Report`` the
results, ``Leave`` with an exit code), or None when it is dropped and counted (another job's, a
BEGIN of a stale generation or out of order, an unexpected kind). ``Inbox`` assembles the data
plane's batches, sent in parts, per superstep and peer, and refuses malformed ones
(``messages/wire.check_batch``). ``worker.py`` is the I/O shell that carries the instructions
out; ``tests/cluster/test_workerstate.py`` drives both with no network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from ..errors import ProtocolError
from ..messages import wire
from ..messages.kinds import Kind
from ..messages.message import Message
from ..messages.wire import DropCounter, check_batch

__all__ = ["WorkerControl", "Inbox", "Compute", "WriteCheckpoint", "RollBack", "Report", "Leave", "Instruction"]


@dataclass
class Compute:
    begin: wire.Begin


@dataclass
class WriteCheckpoint:
    superstep: int


@dataclass
class RollBack:
    rollback: wire.Rollback


@dataclass
class Report:
    """FINISH: send the vertices' results."""


@dataclass
class Leave:
    code: int
    why: str


Instruction = Union[Compute, WriteCheckpoint, RollBack, Report, Leave]


class WorkerControl:
    """The worker's control plane: its job, generation and superstep, and what each message means."""

    def __init__(self, drops: DropCounter) -> None:
        self.drops = drops
        self.job_id = ""
        self.gen = 0
        self.current = -1  # the last superstep begun

    def parse(self, header: dict[str, Any]) -> wire.Wire | None:
        """The record of a control message of this job, or None (dropped and counted)."""
        if header.get("job") != self.job_id:
            self.drops.drop("job", f"control message for job {header.get('job')!r}")
            return None
        try:
            return wire.decode(header)
        except ProtocolError as exc:
            self.drops.drop(exc.kind, exc.detail)
            return None

    def interrupts(self, header: dict[str, Any]) -> bool:
        """Whether a message that arrives while this worker waits for its peers' batches ends the
        wait (a ROLLBACK or ABORT of this job); the worker acts on any other after the wait."""
        return header.get("kind") in (Kind.ROLLBACK, Kind.ABORT) and header.get("job") == self.job_id

    def command(self, msg: wire.Wire) -> Instruction | None:
        """What to do about ``msg`` (already of this job); None: nothing (dropped or a heartbeat)."""
        if isinstance(msg, wire.Begin):
            if msg.gen != self.gen:
                self.drops.drop("generation", f"BEGIN of generation {msg.gen} while at {self.gen}")
                return None
            if msg.ss != self.current + 1:
                self.drops.drop("superstep", f"BEGIN {msg.ss} while at {self.current}")
                return None
            self.current = msg.ss
            return Compute(msg)
        if isinstance(msg, wire.Checkpoint):
            return WriteCheckpoint(msg.ss)
        if isinstance(msg, wire.Rollback):
            self.gen = msg.gen
            return RollBack(msg)
        if isinstance(msg, wire.Finish):
            return Report()
        if isinstance(msg, wire.Bye):
            return Leave(0, "job finished")
        if isinstance(msg, wire.Abort):
            return Leave(1, f"master aborted the job: {msg.reason}")
        if not isinstance(msg, wire.Heartbeat):
            self.drops.drop("kind", f"unexpected control message kind {msg.KIND}")
        return None

    def restored(self, superstep: int) -> None:
        """State restored from the checkpoint taken before ``superstep``: it begins next."""
        self.current = superstep - 1


class Inbox:
    """Batches from the peers, per superstep: complete ones, and those whose last part is to come."""

    def __init__(self) -> None:
        self.complete: dict[int, dict[int, list[Message]]] = {}  # {ss: {peer: messages}}
        self.bytes: dict[int, dict[int, int]] = {}
        self.arriving: dict[int, dict[int, list[Message]]] = {}  # batches whose last part is still to come
        self.parts: dict[int, dict[int, int]] = {}  # {ss: {peer: next part expected}}

    def add(self, header: dict[str, Any], peer: int | None, job_id: str, current: int, gen: int, size: int) -> None:
        """Take one batch or part of one; ``ProtocolError`` (to be dropped and counted) if it is malformed."""
        msgs = check_batch(header, peer, job_id, current, self.complete, gen, self.parts)
        ss, src = header["ss"], header["src"]
        sizes = self.bytes.setdefault(ss, {})
        sizes[src] = sizes.get(src, 0) + size
        arriving = self.arriving.setdefault(ss, {})
        if src in arriving:
            arriving[src].extend(msgs)
            msgs = arriving[src]
        if header.get("last", True):
            arriving.pop(src, None)
            self.parts.get(ss, {}).pop(src, None)
            self.complete.setdefault(ss, {})[src] = msgs
        else:
            arriving[src] = msgs
            self.parts.setdefault(ss, {})[src] = header.get("part", 0) + 1

    def missing(self, ss: int, peers: Any) -> list[int]:
        """The peers whose batch of ``ss`` is not complete yet."""
        have = self.complete.get(ss, {})
        return sorted(p for p in peers if p not in have)

    def take(self, ss: int) -> tuple[dict[int, list[Message]], dict[int, int]]:
        """The complete batches of ``ss`` and their bytes per peer; forgotten here."""
        self.arriving.pop(ss, None)
        self.parts.pop(ss, None)
        return self.complete.pop(ss, {}), self.bytes.pop(ss, {})

    def clear(self) -> None:
        for d in (self.complete, self.bytes, self.arriving, self.parts):
            d.clear()
