"""One typed record per kind of message that travels between processes.

Each record is a dataclass whose fields are the keys of its msgpack header: ``to_wire(job)``
gives the header dict (``kind`` and the job id added, arrays left in place for the codec's
zero-copy frames) and ``decode(header)`` checks a received header and returns the record, or
raises ``ProtocolError("header", ...)`` naming the missing or mistyped field. Fields with a
default may be absent on the wire. ``check_batch`` and ``DropCounter`` are the receivers' checks
and bookkeeping for malformed traffic (dropped and counted, never fatal).
"""

from __future__ import annotations

import dataclasses
import logging
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import ProtocolError
from .kinds import Kind
from .codec import DEFAULT_LIMITS
from .message import Message
from .payload import containers

log = logging.getLogger(__name__)

__all__ = ["Wire", "Hello", "Welcome", "Refuse", "Ready", "Begin", "Batch", "Done", "Finish", "Result", "Bye",
           "Abort", "Error", "Heartbeat", "Checkpoint", "Checkpointed", "Rollback", "RECORDS", "decode",
           "check_batch", "DropCounter", "PART_MESSAGES", "part_size"]


class Wire:
    """Base of the wire records: ``KIND`` and the conversions to and from a header dict."""

    KIND: ClassVar[Kind]
    _spec: ClassVar[_Spec]

    @classmethod
    def _spec_of(cls) -> _Spec:
        """This record type's fields and checks, worked out once (``dataclasses.fields`` and the
        type hints are slow on every message's path)."""
        spec = cls.__dict__.get("_spec")
        if spec is None:
            spec = cls._spec = _Spec(cls)
        return spec

    def to_wire(self, job: str = "") -> dict[str, Any]:
        """The header dict (shallow: arrays inside stay the caller's, for zero-copy frames)."""
        cls = type(self)
        names = cls._spec_of().names
        fields = self.__dict__
        if len(fields) == len(names):  # the fields alone, in their order (set by __init__): one copy
            return {"kind": int(cls.KIND), "job": job, **fields}
        header = {"kind": int(cls.KIND), "job": job}
        for name in names:
            header[name] = getattr(self, name)
        return header

    @classmethod
    def from_wire(cls, header: dict[str, Any]) -> Any:
        """The record of ``header`` (whose kind is ``cls.KIND``); ``ProtocolError`` if malformed.

        Every field's check depends on its value's type alone (``_check``), so a header whose
        field types (absent ones included) passed before passes again: that is one tuple
        lookup, not a check per field, on every message's path."""
        spec = cls._spec_of()
        values = tuple(map(header.get, spec.names, spec.absent))
        types_ = tuple(map(type, values))
        complete = spec.passed.get(types_)
        if complete is None:
            complete = spec.check(values, types_)
        if complete:
            return cls(*values)
        return cls(**{name: v for name, v in zip(spec.names, values) if v is not _ABSENT})


class _Absent:
    """The value of a field a header lacks (its type marks the field absent in a signature)."""


_ABSENT = _Absent()


class _Spec:
    """One record type's fields and checks, and the type signatures of headers that passed them."""

    MAX_SIGNATURES = 64  # the field types actually seen are few; a peer cannot grow this further

    def __init__(self, cls: type) -> None:
        self.kind = cls.KIND.name  # type: ignore[attr-defined]
        hints = typing.get_type_hints(cls)
        fields = [f for f in dataclasses.fields(cls) if f.init]
        self.names = tuple(f.name for f in fields)
        self.absent = (_ABSENT,) * len(fields)
        #: per field: its predicate, and whether it is required
        self.checks = [(_check(hints[f.name]),
                        f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING) for f in fields]
        self.passed: dict[tuple[type, ...], bool] = {}  # signature -> every field present

    def check(self, values: tuple[Any, ...], types_: tuple[type, ...]) -> bool:
        """Check each field of a header not seen before (``ProtocolError`` naming the first bad
        one); remember its signature. Returns whether every field is present."""
        for name, value, (check, required) in zip(self.names, values, self.checks):
            if value is _ABSENT:
                if required:
                    raise ProtocolError("header", f"{self.kind} without {name!r}")
            elif not check(value):
                raise ProtocolError("header", f"{self.kind} with a bad {name!r}: {type(value).__name__}")
        complete = _Absent not in types_
        if len(self.passed) < self.MAX_SIGNATURES:
            self.passed[types_] = complete
        return complete


#: the origins of ``X | Y`` and ``Optional[X]`` annotations
_UNIONS = (typing.Union, types.UnionType)


def _check(tp: Any) -> Any:
    """A predicate for values of the annotation ``tp`` (the few shapes the records use). Each
    depends on the value's type alone: ``Wire.from_wire`` relies on it."""
    if tp is Any:
        return lambda v: True
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in _UNIONS:
        checks = [_check(a) for a in args]
        return lambda v: any(c(v) for c in checks)
    if tp is type(None):
        return lambda v: v is None
    if tp is int:
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if tp is float:
        return lambda v: isinstance(v, float) or (isinstance(v, int) and not isinstance(v, bool))
    if tp is bool:
        return lambda v: isinstance(v, bool)
    base = origin or tp
    return lambda v: isinstance(v, base)


# -- control plane: worker -> master --------------------------------------------------------------
@dataclass
class Hello(Wire):
    """A worker joins: its version, host, pid and data endpoint (resent until answered)."""

    KIND = Kind.HELLO
    version: str
    data: str
    pid: int
    host: str = "?"
    want_job: str | None = None
    key: str | None = None  # its CURVE public key (z85) in a secure job
    token: str | None = None  # the job's token (MARIANA_JOB_TOKEN) of a local launch


@dataclass
class Ready(Wire):
    """The worker built (or restored) its partition for generation ``gen``."""

    KIND = Kind.READY
    gen: int
    src: int = -1


@dataclass
class Done(Wire):
    """The worker's barrier report for superstep ``ss``."""

    KIND = Kind.DONE
    ss: int
    partials: dict
    active: int
    computed: int
    sent: int
    out_messages: list
    compute_s: float
    src: int = -1
    slowest: list = field(default_factory=list)
    trace: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)  # bytes_out per peer, dropped per kind
    to: list | None = None  # the peers it sent a batch of ``ss`` to (None: every peer)


@dataclass
class Checkpointed(Wire):
    """The worker's parts of the checkpoint of ``ss`` are written (``parts``), or ``error``."""

    KIND = Kind.CHECKPOINTED
    ss: int
    src: int = -1
    parts: list | None = None
    error: str | None = None


@dataclass
class Result(Wire):
    """The worker's vertex results at the end of the job, and its drop counts."""

    KIND = Kind.RESULT
    values: dict
    src: int = -1
    dropped: dict = field(default_factory=dict)


@dataclass
class Error(Wire):
    """The worker failed: ``where`` is ``compute`` (a vertex raised), ``setup`` or ``restore``."""

    KIND = Kind.ERROR
    where: str
    message: str
    src: int = -1
    vertex: str | None = None
    ss: int | None = None
    traceback: str = ""


@dataclass
class Heartbeat(Wire):
    """Liveness, both ways: the sender's clock ``t``, the echoed ``t`` of the other side, and
    (worker -> master) what the worker is doing."""

    KIND = Kind.HEARTBEAT
    t: float | None = None
    echo: float | None = None
    src: int = -1
    state: dict | None = None


# -- control plane: master -> worker --------------------------------------------------------------
@dataclass
class Welcome(Wire):
    """The master accepts a worker: its index, the job, its peers, timeouts, run options."""

    KIND = Kind.WELCOME
    index: int
    workers: int
    job_name: str
    config: dict
    peers: list
    heartbeat_interval: float
    worker_timeout: float
    placement: str | None = None
    run_dir: str | None = None
    restore: int | None = None  # load the checkpoint taken before this superstep
    gen: int = 0
    trace: bool = True
    capture: str | None = None
    capture_limit: int = 64 << 20
    peer_keys: list = field(default_factory=list)
    checkpoint_background: bool = True  # write checkpoint parts from a copy while supersteps go on
    shm: bool = False  # big frames to same-host peers through shared memory (comm/shm.py)
    shm_cap_mb: int = 1024
    shm_min_kb: int = 64


@dataclass
class Refuse(Wire):
    KIND = Kind.REFUSE
    reason: str = ""


@dataclass
class Begin(Wire):
    """Run superstep ``ss`` of generation ``gen`` with these aggregates and broadcasts."""

    KIND = Kind.BEGIN
    ss: int
    gen: int
    aggregates: dict
    broadcasts: dict
    #: every worker's ``Done.to`` of the barrier just closed, in worker order: whose batches of
    #: ``ss - 1`` a worker waits for (None: every peer's). Also on CHECKPOINT and FINISH.
    sent_to: list | None = None


@dataclass
class Checkpoint(Wire):
    """Write your part of the checkpoint taken before superstep ``ss``."""

    KIND = Kind.CHECKPOINT
    ss: int
    sent_to: list | None = None  # as Begin's


@dataclass
class Rollback(Wire):
    """A worker was lost: reload the checkpoint before ``ss``, generation ``gen``, new peers."""

    KIND = Kind.ROLLBACK
    ss: int
    gen: int
    peers: list
    peer_keys: list = field(default_factory=list)


@dataclass
class Finish(Wire):
    KIND = Kind.FINISH
    sent_to: list | None = None  # as Begin's


@dataclass
class Bye(Wire):
    KIND = Kind.BYE


@dataclass
class Abort(Wire):
    KIND = Kind.ABORT
    reason: str = ""


# -- data plane -----------------------------------------------------------------------------------
@dataclass
class Batch(Wire):
    """One worker's messages for one peer in superstep ``ss``: ``[[src, dst, tag, payload], ...]``.

    A batch may travel in parts (a worker streams a peer's messages while its vertices compute):
    ``part`` 0, 1, ... in order, the last one with ``last`` true; the receiver concatenates them.

    Same-host peers move big buffer frames through shared memory (comm/shm.py): ``shm`` and
    ``shm_pool`` say where this part's emptied frames are (read before the frames are decoded);
    ``shm_notes`` is that layer's own record (``comm.shm.ShmNotes``: offers, acks, freed extents
    about the two workers' arenas and pools), riding on whatever part goes next.
    """

    KIND = Kind.BATCH
    ss: int
    src: int
    msgs: list
    gen: int = 0
    part: int = 0
    last: bool = True
    shm: list | None = None  # [arena id, [[frame, segment, offset, length], ...]]
    shm_pool: list | None = None  # [pool id, [[frame, segment, offset, length], ...]]: send buffers, no copy
    shm_notes: dict | None = None  # comm.shm.ShmNotes.to_wire()


RECORDS: dict[int, type[Wire]] = {cls.KIND: cls for cls in (
    Hello, Welcome, Refuse, Ready, Begin, Batch, Done, Finish, Result, Bye, Abort, Error, Heartbeat, Checkpoint,
    Checkpointed, Rollback)}


def decode(header: dict[str, Any]) -> Wire:
    """The typed record of a decoded header; ``ProtocolError("kind" | "header", ...)`` if malformed."""
    cls = RECORDS.get(header.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise ProtocolError("kind", f"unknown message kind {header.get('kind')!r}")
    return cls.from_wire(header)


#: messages in one part of a batch at most; fewer where payloads hold lists or maps (``part_size``)
PART_MESSAGES = 1 << 18


def part_size(msgs: list[Message]) -> int:
    """How many of ``msgs`` one batch part may carry: each message is a list on the wire, plus the
    lists and maps of its payload (sampled at the first, middle and last message), and a part
    stays within half the receiver's container budget (``codec.Limits.max_containers``)."""
    if len(msgs) <= 1:
        return PART_MESSAGES
    per = 1 + max(containers(msgs[i].payload) for i in (0, len(msgs) // 2, -1))
    return max(1, min(PART_MESSAGES, DEFAULT_LIMITS.max_containers // 2 // per))


def check_batch(header: dict[str, Any], peer: int | None, job_id: str, current: int,
                inbound: dict[int, dict[int, Any]], gen: int = 0,
                parts: dict[int, dict[int, int]] | None = None) -> list[Message]:
    """The messages of a valid data-plane batch (or part of one); ``ProtocolError(kind, detail)`` otherwise.

    ``peer`` is the index the sending socket's identity maps to (None: unknown identity);
    ``current`` the last superstep this worker began; batches for it and the next are valid.
    ``inbound[ss]`` holds the peers whose batch of ``ss`` is complete, ``parts[ss][peer]`` the
    next part expected of a batch still arriving (0 when none has).
    """
    if peer is None:
        raise ProtocolError("sender", "batch from an unknown identity")
    if header.get("kind") != Kind.BATCH:
        raise ProtocolError("kind", f"kind {header.get('kind')!r} on the data plane")
    if header.get("job") != job_id:
        raise ProtocolError("job", f"batch for job {header.get('job')!r}")
    if header.get("src") != peer:
        raise ProtocolError("sender", f"batch claims src {header.get('src')!r} from peer {peer}")
    if header.get("gen", 0) != gen:  # sent before a rollback
        raise ProtocolError("generation", f"batch of generation {header.get('gen')!r} while at {gen}")
    ss = header.get("ss")
    if not isinstance(ss, int) or isinstance(ss, bool) or ss not in (current, current + 1):
        raise ProtocolError("superstep", f"batch for superstep {ss!r} while at {current}")
    if peer in inbound.get(ss, {}):
        raise ProtocolError("duplicate", f"second batch from peer {peer} for superstep {ss}")
    part, last = header.get("part", 0), header.get("last", True)
    expected = (parts or {}).get(ss, {}).get(peer, 0)
    if not isinstance(last, bool) or not isinstance(part, int) or isinstance(part, bool) or part != expected:
        raise ProtocolError("batch", f"part {part!r} (last {last!r}) from peer {peer} for superstep {ss}, "
                                     f"expected part {expected}")
    msgs = messages(header.get("msgs"))
    if msgs is None:
        raise ProtocolError("batch", f"malformed message list from peer {peer}")
    return msgs


def messages(raw: Any) -> list[Message] | None:
    """Wire ``[[src, dst, tag, payload], ...]`` -> ``Message`` tuples, or None if malformed."""
    if not isinstance(raw, list):
        return None
    out = []
    for m in raw:
        if not (isinstance(m, list) and len(m) == 4 and isinstance(m[0], str) and isinstance(m[1], str)
                and (m[2] is None or isinstance(m[2], str))):
            return None
        out.append(Message(m[0], m[1], m[2], m[3]))
    return out


class DropCounter:
    """Counts dropped messages per kind (logging the first of each kind) and bans a peer that
    sends more than ``max_malformed`` malformed messages: it is ignored from then on."""

    def __init__(self, who: str, max_malformed: int = 1000) -> None:
        self.who = who
        self.counts: dict[str, int] = {}
        self.max_malformed = max_malformed
        self._malformed: dict[bytes, int] = {}

    def drop(self, kind: str, detail: str) -> None:
        n = self.counts.get(kind, 0)
        self.counts[kind] = n + 1
        if n == 0:
            log.warning("%s: dropped a malformed message (%s: %s); further drops of this kind are only counted",
                        self.who, kind, detail)

    def malformed(self, identity: bytes | None, kind: str, detail: str) -> None:
        """Count a malformed message from ``identity`` towards its ban."""
        self.drop(kind, f"{detail} (from {(identity or b'?')[:40]!r})")
        if identity is None:
            return
        n = self._malformed[identity] = self._malformed.get(identity, 0) + 1
        if n == self.max_malformed:
            log.error("%s: peer %r sent %d malformed messages: ignoring it from now on", self.who, identity[:40], n)

    def banned(self, identity: bytes) -> bool:
        """Whether ``identity`` is banned (its message is then dropped and counted as such)."""
        if self._malformed.get(identity, 0) < self.max_malformed:
            return False
        self.drop("banned", f"message from banned peer {identity[:40]!r}")
        return True

    @property
    def total(self) -> int:
        return sum(self.counts.values())
