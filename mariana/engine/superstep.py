"""The superstep loop: deliver -> compute -> combine -> exchange -> barrier.

Two pure state machines, shared by every runtime:

- ``Partition``: one worker's vertices. ``compute(begin)`` runs every active vertex (or one
  with messages) once, in sorted id order, and returns the outgoing batches, one per worker,
  combined sender-side, plus a ``Done`` report. With a ``stream`` callback (the cluster worker)
  a remote worker's messages are handed over early, in order, as parts of its batch: after a
  vertex's compute once they hold ``stream_bytes`` of arrays, and when a vertex calls
  ``ctx.flush()``, unless a message with a combiner waits among them (combining needs the whole
  batch); the batch returned is then the rest. ``deliver(batches)`` builds the next inbox in
  the deterministic order (source vertex id, send order) and combines receiver-side.
- ``Coordinator``: the master's side. ``next_begin()`` decides whether the job goes on (halt
  conditions, ``max_supersteps``, master compute) and ``barrier(dones)`` reduces aggregates.

``LocalRuntime`` drives N partitions in one process; the cluster runtime drives one partition
per worker process and moves ``Begin``/``Done`` and the batches over ZeroMQ.
"""

from __future__ import annotations

import gc
import heapq
import logging
import time
import traceback
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np

from ..errors import MarianaError, UsageError, VertexError
from ..messages.payload import PayloadError, wire_value
from . import tracing
from .graph import Graph, MasterContext
from .state import load_vertex_state, plain, vertex_state
from .vertex import Context, Message

log = logging.getLogger(__name__)

__all__ = ["Begin", "Done", "Partition", "Coordinator", "gc_paused"]

_by_src = attrgetter("src")


@dataclass
class Begin:
    """Master -> workers: run superstep ``superstep`` with last superstep's aggregates."""

    superstep: int
    aggregates: dict[str, Any]
    broadcasts: dict[str, Any]


@dataclass
class Done:
    """Worker -> master at the barrier."""

    superstep: int
    worker: int
    partials: dict[str, Any]
    active: int
    computed: int
    sent: int
    out_messages: list[int]
    compute_s: float
    slowest: list[tuple[str, float]] = field(default_factory=list)
    trace: dict[str, Any] = field(default_factory=dict)
    arrival: float = 0.0  # seconds from the start of the superstep to this report (set by the runtime)

    @property
    def in_flight(self) -> int:
        return sum(self.out_messages)


class UnknownVertex(MarianaError):
    """A vertex sent a message to an id that is not in the graph."""


class Partition:
    """The vertices of one worker and everything the engine keeps about them."""

    def __init__(self, graph: Graph, placement: Any, worker: int, slowest: int = 5) -> None:
        self.worker = worker
        self.num_workers = placement.num_workers
        self.order = placement.vertices_of(worker)
        self.vertices = {vid: graph.instantiate(vid) for vid in self.order}
        self.devices = {vid: placement.device_of(vid) for vid in self.order}
        self.owner = placement.worker
        self.combiners = graph.combiners
        self.aggregators = graph.aggregators
        self.halted: set[str] = set()
        self.inbox: dict[str, list[Message]] = {}
        self.ctx = Context(self, len(placement.worker), worker, placement.num_workers)
        self.keep_slowest = slowest
        self._out: list[list[Message]] = [[] for _ in range(self.num_workers)]
        self._partials: dict[str, Any] = {}
        self.trace = True  # scan for NaN/Inf and time the phases (docs/traces.md)
        self.capture: Any = None  # a tracing.Capture for --capture GLOB
        self._sends: list[Message] | None = None
        #: ``stream(worker, messages)``: hand a remote worker's messages over before the end of compute
        self.stream: Any = None
        self.stream_bytes = 1 << 20
        #: ``(size, dtype) -> array`` for ``Context.send_buffer``; a worker with shared memory sets it
        self.send_buffers: Any = None
        #: each worker's host (``Context.host_of``), in worker order; None: every worker on this one
        self.hosts: list[str] | None = None
        self._pending = [0] * self.num_workers  # array bytes queued per worker since its last part
        self._combinable = [0] * self.num_workers  # queued messages with a combiner: that queue waits
        self._flush_due = False  # some worker's queue holds stream_bytes: flush after this vertex
        self._streamed = [0] * self.num_workers  # messages handed over early, per worker (not kept)
        self._flags: list[dict[str, Any]] = []  # this superstep's NaN/Inf findings (``trace``)
        self._scanned: set[int] = set()

    # -- called by Context while a vertex computes -------------------------------------------
    def send(self, src: str, dst: str, tag: str | None, payload: Any) -> None:
        try:
            w = self.owner[dst]
        except KeyError:
            raise UnknownVertex(f"message to unknown vertex {dst!r}") from None
        except TypeError:
            raise UnknownVertex(f"message to a non-string vertex id {dst!r}") from None
        t = type(payload)  # the one payload rule (messages/payload.py); a float or an int costs a test here
        if t not in _PLAIN and not (t is int and _INT_MIN <= payload <= _INT_MAX):
            payload = _payload(payload, "ctx.send to %r", dst)
        m = _new_message(Message, (src, dst, tag, payload))
        self._out[w].append(m)
        if self._sends is not None:
            self._sends.append(m)
        if self.stream is not None and w != self.worker:
            if self.combiners and tag in self.combiners:
                self._combinable[w] += 1
            pending = self._pending[w] = self._pending[w] + _array_bytes(payload)
            if pending >= self.stream_bytes:
                self._flush_due = True

    def send_buffer(self, size: int, dtype: Any) -> Any:
        if self.send_buffers is None:
            return np.zeros(size, dtype=dtype)
        return self.send_buffers(size, dtype)

    def flush(self, threshold: int = 0) -> None:
        """Hand every remote worker's queued messages (holding at least ``threshold`` bytes of
        arrays) to ``stream`` now; a no-op without a stream (LocalRuntime). A queue holding a
        message with a combiner waits for the end of compute, whole: combining needs the whole
        batch (a graph job's loading supersteps, whose messages have none, stream all the same:
        held to the end, a scale-21 route was a worker's peak, the ~120 MiB it sent the other
        worker on top of the ~280 MiB it kept)."""
        if self.stream is None:
            return
        for w, queued in enumerate(self._out):
            if queued and w != self.worker and self._pending[w] >= threshold and not self._combinable[w]:
                self._out[w] = []
                self._pending[w] = 0
                self._streamed[w] += len(queued)
                if self.trace:  # scanned now: a streamed payload is let go once it is sent
                    self._scan(queued)
                self.stream(w, queued)

    def _scan(self, batch: list[Message]) -> None:
        """Record the first NaN/Inf of each sender's messages in ``batch`` (``trace``)."""
        seen = {f["vertex"] for f in self._flags}
        for m in batch:
            if m.src not in seen:
                hit = tracing.nonfinite(m.payload, skip=self._scanned)
                if hit:
                    seen.add(m.src)
                    self._flags.append({"flag": hit[0], "vertex": m.src, "where": "message", "key": hit[1]})

    def halt(self, vertex_id: str) -> None:
        self.halted.add(vertex_id)

    def aggregate(self, vertex_id: str, name: str, value: Any) -> None:
        agg = self.aggregators.get(name)
        if agg is None:
            known = ", ".join(sorted(self.aggregators)) or "none"
            raise MarianaError(f"unknown aggregator {name!r} (registered: {known})")
        if type(value) not in _PLAIN:  # it travels to the master in DONE: the payload rule
            value = _payload(value, "ctx.aggregate(%r)", name)
        acc = self._partials.get(name)
        self._partials[name] = agg.add(agg.identity() if acc is None else acc, value)

    # -- the superstep ------------------------------------------------------------------------
    def compute(self, begin: Begin) -> tuple[list[list[Message]], Done]:
        """Run one superstep; return one (combined) batch per worker and the barrier report."""
        with gc_paused():
            return self._compute(begin)

    def _compute(self, begin: Begin) -> tuple[list[list[Message]], Done]:
        s = begin.superstep
        ctx = self.ctx
        ctx.begin(s, begin.aggregates, begin.broadcasts)
        inbox, self.inbox = self.inbox, {}
        halted, vertices, devices = self.halted, self.vertices, self.devices
        computed = 0
        timings: list[tuple[float, str]] = []
        flags: list[dict[str, Any]] = []
        scanned: set[int] = set()
        self._flags, self._scanned = flags, scanned
        trace, capture = self.trace, self.capture
        clock = time.perf_counter
        t_start = clock()
        for vid in self.order:
            msgs = inbox.get(vid)
            if msgs is None:
                if vid in halted:
                    continue
                msgs = []
            elif vid in halted:
                halted.discard(vid)
            ctx._vertex_id = vid
            ctx._device = devices[vid]
            captured = capture is not None and capture.matches(vid)
            if captured:
                self._sends = []
            t0 = clock()
            try:
                vertices[vid].compute(ctx, msgs)
            except UsageError:  # bad input found while loading it: one clear line, exit 2
                raise
            except Exception as exc:  # noqa: BLE001 - re-raised with the vertex and superstep named
                raise VertexError(vid, s, f"{type(exc).__name__}: {exc}", traceback.format_exc()) from exc
            timings.append((clock() - t0, vid))
            computed += 1
            if trace:
                hit = tracing.state_flags(vertices[vid], scanned)
                if hit:
                    flags.append({"flag": hit[0], "vertex": vid, "where": "state", "key": hit[1]})
            if self._flush_due:  # after the state scan: a vertex flagged there is not again
                self._flush_due = False
                self.flush(self.stream_bytes)
            if captured:
                capture.store(vid, s, msgs, self._sends, begin.aggregates, begin.broadcasts)
                self._sends = None
        compute_s = clock() - t_start
        streamed = self._streamed
        if trace:
            for batch in self._out:
                self._scan(batch)
        t_combine = clock()
        sent = sum(streamed) + sum(map(len, self._out))  # (counted here, not on each send: vertex mode's hot path)
        batches = [self._combine(batch) if self.combiners else batch for batch in self._out]
        slowest = heapq.nlargest(self.keep_slowest, timings)  # (= sorted(..., reverse=True)[:n], without sorting all)
        out = [a + len(b) for a, b in zip(streamed, batches)]
        done = Done(s, self.worker, self._partials, len(self.order) - len(halted), computed, sent,
                    out, compute_s, [(vid, t) for t, vid in slowest])
        if trace:
            done.trace = {"compute_s": compute_s, "combine_s": clock() - t_combine, "vertices_run": computed,
                          "messages_out": {str(w): n for w, n in enumerate(out) if n},
                          "slowest": [[vid, round(t, 6)] for t, vid in slowest], "flags": flags}
        self._out = [[] for _ in range(self.num_workers)]
        if self.stream is not None:
            self._streamed = [0] * self.num_workers
            self._pending = [0] * self.num_workers
            self._combinable = [0] * self.num_workers
            self._flush_due = False
        self._partials = {}
        return batches, done

    def _combine(self, batch: list[Message]) -> list[Message]:
        """Sender-side combining per (dst, tag), keeping each group at its first position."""
        combiners = self.combiners
        out: list[Message] = []
        index: dict[tuple[str, Any], int] = {}
        for m in batch:
            fn = combiners.get(m.tag)
            if fn is None:
                out.append(m)
                continue
            key = (m.dst, m.tag)
            i = index.get(key)
            if i is None:
                index[key] = len(out)
                out.append(m)
            else:
                prev = out[i]
                out[i] = Message(prev.src, prev.dst, prev.tag, fn(prev.payload, m.payload))
        return out

    def deliver(self, batches: list[list[Message]]) -> None:
        """Build the next inbox from one batch per source worker (in worker order)."""
        with gc_paused():
            self._deliver(batches)

    def _deliver(self, batches: list[list[Message]]) -> None:
        inbox: dict[str, list[Message]] = {}
        sources = 0
        for batch in batches:
            if not batch:
                continue
            sources += 1
            for m in batch:
                lst = inbox.get(m.dst)
                if lst is None:
                    inbox[m.dst] = [m]
                else:
                    lst.append(m)
        if sources > 1:  # each batch is already in (src, seq) order; merge them stably by src
            for lst in inbox.values():
                if len(lst) > 1:
                    lst.sort(key=_by_src)
        if self.combiners:
            for dst, lst in inbox.items():
                if len(lst) > 1:
                    inbox[dst] = self._combine(lst)
        self.inbox = inbox


    # -- checkpoints ----------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """This partition between supersteps: vertex states, halted set, the next inbox."""
        return {"worker": self.worker, "vertices": {vid: vertex_state(v) for vid, v in self.vertices.items()},
                "halted": sorted(self.halted),
                "inbox": [[m.src, m.dst, m.tag, m.payload] for lst in self.inbox.values() for m in lst]}

    def params_snapshot(self) -> dict[str, Any]:
        """``params_snapshot()`` of every vertex that has one (a parameter shard), by id; a vertex
        whose method returns None holds no parameters this time (a replica but the first)."""
        snaps = {vid: v.params_snapshot() for vid, v in self.vertices.items() if hasattr(v, "params_snapshot")}
        return {vid: plain(snap) for vid, snap in snaps.items() if snap is not None}

    def restore(self, snap: dict[str, Any]) -> None:
        """Inverse of ``snapshot`` (on a partition freshly built from the same graph and placement)."""
        if snap["worker"] != self.worker or set(snap["vertices"]) != set(self.vertices):
            raise MarianaError(f"checkpoint part of worker {snap['worker']} does not match worker {self.worker}'s "
                               "vertices: resume with the same job, config and worker count")
        for vid, state in snap["vertices"].items():
            load_vertex_state(self.vertices[vid], state)
        self.halted = set(snap["halted"])
        inbox: dict[str, list[Message]] = {}
        for src, dst, tag, payload in snap["inbox"]:
            inbox.setdefault(dst, []).append(Message(src, dst, tag, payload))
        self.inbox = inbox


class Coordinator:
    """The master's view of the loop: halting, master compute and the aggregate barrier."""

    def __init__(self, graph: Graph, num_vertices: int, max_supersteps: int | None = None) -> None:
        self.graph = graph
        self.num_vertices = num_vertices
        limits = [m for m in (max_supersteps, graph.max_supersteps) if m is not None]
        self.max_supersteps = min(limits) if limits else None
        self.superstep = 0
        self.aggregates: dict[str, Any] = {}
        self.broadcasts: dict[str, Any] = {}
        self.active = num_vertices
        self.in_flight = 0
        self.halt_reason = ""
        self.checkpoint_requested = False

    def snapshot(self) -> dict[str, Any]:
        return {"superstep": self.superstep, "aggregates": self.aggregates, "broadcasts": self.broadcasts,
                "active": self.active, "in_flight": self.in_flight}

    def restore(self, snap: dict[str, Any]) -> None:
        self.superstep, self.aggregates, self.broadcasts = snap["superstep"], snap["aggregates"], snap["broadcasts"]
        self.active, self.in_flight = snap["active"], snap["in_flight"]

    def checkpoint_due(self, every: int | None) -> bool:
        """After a barrier: is a checkpoint of the state before ``self.superstep`` due?"""
        if self.superstep < self.graph.first_checkpoint:
            return False  # (a request waits until a checkpoint can be taken)
        wanted, self.checkpoint_requested = self.checkpoint_requested, False
        return wanted or bool(every and self.superstep % every == 0)

    def next_begin(self) -> Begin | None:
        """The next superstep to run, or None when the job is over (``halt_reason`` says why)."""
        s = self.superstep
        if self.max_supersteps is not None and s >= self.max_supersteps:
            self.halt_reason = f"max_supersteps={self.max_supersteps} reached"
            return None
        if s > 0 and self.active == 0 and self.in_flight == 0:
            self.halt_reason = "all vertices halted and no message in flight"
            return None
        if self.graph.master_compute is not None:
            mctx = MasterContext(s, self.aggregates, self.broadcasts, self.num_vertices)
            try:
                self.graph.master_compute(mctx)
            except Exception as exc:  # noqa: BLE001
                raise VertexError("<master>", s, f"{type(exc).__name__}: {exc}", traceback.format_exc()) from exc
            if mctx.halted:
                self.halt_reason = mctx.halt_reason
                return None
            self.checkpoint_requested = mctx.checkpoint_requested
        return Begin(s, self.aggregates, dict(self.broadcasts))

    def barrier(self, dones: list[Done], wall_s: float) -> dict[str, Any]:
        """Reduce the workers' reports (in worker order); return the superstep's metrics line."""
        dones = sorted(dones, key=attrgetter("worker"))
        aggregates: dict[str, Any] = {}
        for name, agg in self.graph.aggregators.items():
            parts = [d.partials[name] for d in dones if name in d.partials]
            if not parts:
                continue
            acc = agg.identity()
            for p in parts:
                acc = agg.merge(acc, p)
            aggregates[name] = agg.result(acc)
        s = self.superstep
        self.aggregates = aggregates
        self.active = sum(d.active for d in dones)
        self.in_flight = sum(d.in_flight for d in dones)
        self.superstep = s + 1
        record: dict[str, Any] = {
            "superstep": s, "wall_s": round(wall_s, 6), "active": self.active,
            "computed": sum(d.computed for d in dones), "messages": sum(d.sent for d in dones),
            "delivered": self.in_flight,
        }
        record.update({k: tracing.jsonable(v) for k, v in aggregates.items()})
        record["workers"] = [{"worker": d.worker, "computed": d.computed, "messages_out": d.sent,
                              "active": d.active, "compute_s": round(d.compute_s, 6)} for d in dones]
        return record


#: payload types that travel as they are (``wire_value`` decides the rest)
_PLAIN = frozenset({float, bool, type(None), bytes})
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1  # msgpack's ints


def _payload(value: Any, call: str, arg: str) -> Any:
    """``value`` as the wire delivers it, on every runtime alike; a ``PayloadError`` names the
    call (``call % arg``, formatted only then)."""
    try:
        return wire_value(value)
    except PayloadError as exc:
        exc.problem = f"{call % (arg,)}: {exc.problem}"
        raise


#: ``Message(src, dst, tag, payload)`` without the Python ``__new__`` a NamedTuple adds: a
#: message's construction is on vertex mode's hot path (one per send)
_new_message = tuple.__new__


def _array_bytes(payload: Any) -> int:
    """Bytes of the arrays in a payload, looking one level into dicts, lists and tuples (cheap:
    it decides when queued messages are worth a part of their own, not what travels)."""
    n = getattr(payload, "nbytes", None)
    if isinstance(n, int):
        return n
    if isinstance(payload, dict):
        payload = payload.values()
    elif not isinstance(payload, (list, tuple)):
        return 0
    total = 0
    for v in payload:
        n = getattr(v, "nbytes", None)
        if isinstance(n, int):
            total += n
    return total


class gc_paused:
    """Pause the cyclic garbage collector for one phase of a superstep.

    A superstep allocates millions of short-lived message tuples that are never part of a
    cycle; generation-0 collections over them cost 35-45% of a vertex-mode PageRank run
    (bench/graph_local.py). Reference counting still frees everything at once; the collector
    resumes after the phase.
    """

    def __enter__(self) -> None:
        self.was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: Any) -> None:
        if self.was_enabled:
            gc.enable()
