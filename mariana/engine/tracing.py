"""Superstep traces (docs/traces.md): the records, NaN/Inf flags, message capture, the writer.

The partitions and runtimes fill the records; ``TraceWriter`` appends them to
``RUN/trace/worker-K.jsonl`` and ``RUN/trace/master.jsonl`` through ``mariana/storage``,
buffered and flushed every ``flush_every`` supersteps and at the end.
"""

from __future__ import annotations

import cmath
import fnmatch
import logging
import math
import statistics
from typing import Any

import numpy as np

from ..errors import StorageError
from ..storage import RunDir
from ..storage.checkpoint import pack

log = logging.getLogger(__name__)

__all__ = ["TraceWriter", "rewind", "Capture", "nonfinite", "state_flags", "master_record", "jsonable", "PHASES"]

#: The phases of a worker's superstep, in order; a trace record has ``PHASE_s`` seconds of each
#: (docs/traces.md). The one list the runtimes, ``trace summary`` and the Chrome export share.
PHASES = ("compute", "combine", "encode", "send", "wait", "barrier")
#: Arrays up to this many elements are scanned whole for NaN/Inf, larger ones on 4 evenly spaced
#: blocks of ``SAMPLE`` elements: a diverging model has NaNs everywhere, and a full scan of every
#: large array every superstep would cost more than the tracing budget (bench/tracing.py).
SCAN_LIMIT = 1 << 17
SAMPLE = 1 << 14


def nonfinite(value: Any, key: str = "payload", depth: int = 0, skip: set[int] | None = None) -> tuple[str, str] | None:
    """("nan" | "inf", where) for the first non-finite number in ``value``, else None; arrays whose
    owner's id is in ``skip`` (vertex state already scanned) are not scanned again."""
    with np.errstate(all="ignore"):  # x.x may overflow on finite data: _scan then looks closer
        return _scan(value, key, depth, skip)


def _scan(value: Any, key: str, depth: int, skip: set[int] | None) -> tuple[str, str] | None:
    if isinstance(value, float):
        if value != value:
            return "nan", key
        if value in (math.inf, -math.inf):
            return "inf", key
        return None
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fc" or value.size == 0:
            return None
        if skip and id(root(value)) in skip:
            return None
        flat = value.reshape(-1) if value.flags.c_contiguous else value.ravel(order="K")
        if flat.size > SCAN_LIMIT:
            step = flat.size // 4
            parts = [flat[i * step:i * step + SAMPLE] for i in range(4)]
        else:
            parts = [flat]
        finite = math.isfinite if value.dtype.kind == "f" else cmath.isfinite
        for part in parts:
            if finite(np.dot(part, part)):  # x.x is finite only if every x is; BLAS: 4x a sum's speed
                continue
            if np.isnan(part).any():
                return "nan", key
            if np.isinf(part).any():  # (x.x can overflow on finite data)
                return "inf", key
        return None
    if depth < 3 and isinstance(value, dict):
        for k, v in value.items():
            hit = _scan(v, f"{key}.{k}", depth + 1, skip)
            if hit:
                return hit
    elif depth < 3 and isinstance(value, (list, tuple)):
        for i, v in enumerate(value[:64]):
            hit = _scan(v, f"{key}[{i}]", depth + 1, skip)
            if hit:
                return hit
    return None


def state_flags(vertex: Any, scanned: set[int] | None = None) -> tuple[str, str] | None:
    """Non-finite numbers in a vertex's ``value`` and the arrays of its other state fields.

    The ids of the arrays scanned go into ``scanned``: messages that are views of them (a
    gradient slice, a shard's parameters) need no second scan."""
    with np.errstate(all="ignore"):
        value = vertex.value
        hit = _scan(value, "value", 0, None)
        if scanned is not None and isinstance(value, np.ndarray):
            scanned.add(id(value))
        if hit or not hasattr(vertex, "__dict__"):
            return hit
        for name in type(vertex).state_fields:
            v = getattr(vertex, name, None)
            if isinstance(v, np.ndarray) and name != "value":
                hit = _scan(v, name, 0, None)
                if scanned is not None:
                    scanned.add(id(v))
                if hit:
                    return hit
        return None


def root(a: np.ndarray) -> np.ndarray:
    """The array that owns ``a``'s memory (``a`` itself when it is not a view)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


class Capture:
    """Stores what matching vertices received and sent at each superstep (``--capture GLOB``)."""

    def __init__(self, pattern: str, run_dir: RunDir, limit_bytes: int = 64 << 20) -> None:
        self.pattern, self.run_dir, self.limit = pattern, run_dir, limit_bytes
        self.used = 0
        self._warned = False

    def matches(self, vertex_id: str) -> bool:
        return fnmatch.fnmatchcase(vertex_id, self.pattern)

    def store(self, vertex_id: str, superstep: int, inbox: list, outbox: list, aggregates: dict, broadcasts: dict) -> None:
        data = pack({"superstep": superstep, "vertex": vertex_id,
                     "inbox": [[m.src, m.tag, m.payload] for m in inbox],
                     "outbox": [[m.dst, m.tag, m.payload] for m in outbox],
                     "aggregates": aggregates, "broadcasts": broadcasts})
        if self.used + len(data) > self.limit:
            if not self._warned:
                log.warning("capture limit of %d MB reached at superstep %d: later supersteps are not captured",
                            self.limit >> 20, superstep)
                self._warned = True
            return
        self.used += len(data)
        try:
            self.run_dir.write_bytes(capture_path(vertex_id, superstep), data)
        except StorageError as exc:
            log.warning("could not store the capture of %s at superstep %d: %s", vertex_id, superstep, exc)


def capture_path(vertex_id: str, superstep: int) -> str:
    """Where ``--capture`` stores a vertex's messages of one superstep (a part file, storage.partfile)."""
    safe = str(vertex_id).replace("/", "%2F")
    return f"capture/{safe}/ss-{superstep:06d}.part"


def master_record(superstep: int, start: float, end: float, arrivals: dict[int, float],
                  aggregates: dict[str, Any], busy: dict[int, float] | None = None) -> dict[str, Any]:
    """The master's line: wall time, arrivals at the barrier, the straggler and its lag.

    The straggler is the worker that was busy longest (arrival minus time spent waiting for
    peers' batches): a worker waiting for a slow peer arrives just after it, but is not slow.
    """
    rec: dict[str, Any] = {"superstep": superstep, "start": start, "end": end, "wall_s": end - start,
                           "arrivals": {str(k): round(v, 6) for k, v in sorted(arrivals.items())}}
    busy = busy or arrivals
    if busy:
        straggler = max(busy, key=lambda k: (busy[k], -k))
        rec["straggler"] = straggler
        rec["lag_s"] = round(busy[straggler] - statistics.median(busy.values()), 6)
    rec["aggregates"] = {k: jsonable(v) for k, v in aggregates.items()}
    return rec


class TraceWriter:
    """Buffered JSON-lines writer for ``RUN/trace/``; a storage failure disables it with a warning."""

    def __init__(self, run_dir: RunDir, flush_every: int = 20) -> None:
        self.run_dir, self.flush_every = run_dir, flush_every
        self.pending: dict[str, list[dict[str, Any]]] = {}
        self.lines = 0
        self.enabled = True

    def worker(self, record: dict[str, Any]) -> None:
        self._add(f"trace/worker-{record['worker']}.jsonl", record)

    def master(self, record: dict[str, Any]) -> None:
        self._add("trace/master.jsonl", record)

    def event(self, event: str, **fields: Any) -> None:
        self._add("trace/master.jsonl", {"event": event, **fields})
        self.flush()

    def end_superstep(self) -> None:
        self.lines += 1
        if self.lines % self.flush_every == 0:
            self.flush()

    def _add(self, rel: str, record: dict[str, Any]) -> None:
        if self.enabled:
            self.pending.setdefault(rel, []).append(record)

    def flush(self) -> None:
        if not self.enabled:
            return
        pending, self.pending = self.pending, {}
        try:
            for rel, records in pending.items():
                self.run_dir.append_jsonl(rel, records)
        except StorageError as exc:
            log.warning("tracing stops: %s", exc)
            self.enabled = False



def rewind(run_dir: RunDir, superstep: int) -> None:
    """Drop the metrics and trace records of ``superstep`` and later from ``run_dir`` (a resume
    or a rollback replays those supersteps); trace events are kept."""
    run_dir.truncate_jsonl("metrics.jsonl", lambda r: r.get("superstep", 0) < superstep)
    for name in run_dir.list("trace"):
        run_dir.truncate_jsonl(f"trace/{name}", lambda r: "event" in r or r.get("superstep", 0) < superstep)


def jsonable(value: Any, max_items: int = 64) -> Any:
    """A JSON-safe view of an aggregate: small arrays as lists, large ones summarised."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, np.ndarray):
        if value.size <= max_items:
            return [jsonable(x) for x in value.ravel().tolist()]
        return {"shape": list(value.shape), "dtype": str(value.dtype), "norm": float(np.linalg.norm(value))}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value
