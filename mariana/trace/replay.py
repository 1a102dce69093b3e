"""``mariana trace replay``: rerun one vertex's ``compute`` in this process, from a checkpoint,
on the messages captured in the original run (``--capture GLOB``), e.g. under pdb.

The vertex is rebuilt by the job (by name, from ``job.json``), its state loaded from the newest
valid checkpoint at or before the superstep, and every captured ``compute`` from there to the
superstep is replayed with the inbox, aggregates and broadcasts it saw. What it sends is
compared with what it sent in the original run.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..engine.local import blas_threads_of
from ..engine.state import load_vertex_state
from ..engine.tracing import capture_path
from ..engine.vertex import Context, Message
from ..errors import UsageError
from ..jobs.registry import BuildContext, get_job, resolve_config
from ..storage import RunDir
from ..storage.checkpoint import Checkpoints, unpack

__all__ = ["replay", "format_replay", "same"]


class _Recorder:
    """Stands in for a Partition: records what the replayed vertex sends, aggregates, halts."""

    def __init__(self, vertex: Any) -> None:
        self.vertices = {vertex.id: vertex}
        self.sent: list[list[Any]] = []
        self.aggregated: list[list[Any]] = []
        self.halted = False

    def send(self, src: str, dst: str, tag: str | None, payload: Any) -> None:
        self.sent.append([dst, tag, payload])

    def flush(self) -> None:  # ctx.flush(): nothing leaves a replay
        pass

    def send_buffer(self, size: int, dtype: Any) -> Any:  # ctx.send_buffer: plain memory in a replay
        return np.zeros(size, dtype=dtype)

    def halt(self, vertex_id: str) -> None:
        self.halted = True

    def aggregate(self, vertex_id: str, name: str, value: Any) -> None:
        self.aggregated.append([name, value])


def same(a: Any, b: Any) -> bool:
    """Deep equality of payloads: arrays by dtype, shape and values (NaN equals NaN); lists and
    tuples alike (the wire turns tuples into lists)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and bool(
            np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def replay(run: str, vertex: str, superstep: int, pdb: bool = False) -> dict[str, Any]:
    """Replay ``vertex`` up to and including ``superstep``; returns what happened."""
    try:
        run_dir = RunDir(run, create=False)
        prev = run_dir.read_json("job.json")
    except Exception as exc:  # noqa: BLE001 - any failure here means "not a run directory"
        raise UsageError(f"{run}: not a run directory ({exc})") from None
    job = get_job(prev["job"])
    config = resolve_config(job, prev["config"])
    graph = job.build(config, BuildContext(prev["workers"], prev.get("placement_arg")))
    if vertex not in graph:
        raise UsageError(f"vertex {vertex!r} is not in the graph of job {job.name}")
    placement = graph.place(prev["workers"])
    ck = Checkpoints(run_dir)
    starts = [ss for ss in ck.supersteps() if ss <= superstep and ck.inspect(ss).valid]
    v = graph.instantiate(vertex)
    worker = placement.worker_of(vertex)
    if starts:  # the vertex as it was before superstep ``start``
        start = max(starts)
        load_vertex_state(v, ck.read(start, f"worker-{worker}")["vertices"][vertex])
    elif run_dir.exists(capture_path(vertex, 0)):
        start = 0  # as the job builds it: the state before superstep 0
    else:
        raise UsageError(f"no valid checkpoint at or before superstep {superstep} in {run} "
                         "(run with --set checkpoint_every=N, or capture from superstep 0)")
    replayed, result = [], {}
    with blas_threads_of(prev["workers"]):  # as the run's workers: OpenBLAS sums in an order set by its threads
        for t in range(start, superstep + 1):
            rel = capture_path(vertex, t)
            if not run_dir.exists(rel):
                if t == superstep:
                    raise UsageError(f"no capture of {vertex!r} at superstep {superstep} in {run} (did it compute "
                                     f"then, and was the run started with --capture matching it?)")
                continue  # it did not compute at t (halted, no messages)
            rec = unpack(run_dir.read_bytes(rel))
            recorder = _Recorder(v)
            ctx = Context(recorder, len(graph), worker, prev["workers"])
            ctx.begin(t, rec["aggregates"], rec["broadcasts"])
            ctx.bind(vertex, placement.device_of(vertex))
            inbox = [Message(src, vertex, tag, payload) for src, tag, payload in rec["inbox"]]
            if t == superstep and pdb:
                import pdb as debugger

                print(f"replaying {vertex} at superstep {t}: step into compute with 's'", flush=True)
                debugger.runcall(v.compute, ctx, inbox)
            else:
                v.compute(ctx, inbox)
            matches = same(recorder.sent, rec["outbox"])
            replayed.append({"superstep": t, "inbox": len(inbox), "sent": len(recorder.sent), "matches": matches})
            result = {"sent": recorder.sent, "original": rec["outbox"], "aggregated": recorder.aggregated,
                      "halted": recorder.halted, "matches": matches}
    return {"vertex": vertex, "superstep": superstep, "checkpoint": start, "from_checkpoint": bool(starts),
            "worker": worker, "replayed": replayed, **result}


def _describe(payload: Any) -> str:
    if isinstance(payload, np.ndarray):
        return f"array{list(payload.shape)} {payload.dtype}"
    if isinstance(payload, dict):
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in payload.items()) + "}"
    text = repr(payload)
    return text if len(text) <= 60 else text[:57] + "..."


def format_replay(r: dict[str, Any]) -> str:
    origin = (f"the checkpoint at superstep {r['checkpoint']}" if r.get("from_checkpoint")
              else "the state the job builds (superstep 0)")
    lines = [f"replayed {r['vertex']} (worker {r['worker']}) from {origin} "
             f"through superstep {r['superstep']}: {len(r['replayed'])} compute call(s)"]
    for step in r["replayed"]:
        lines.append(f"  superstep {step['superstep']}: {step['inbox']} in, {step['sent']} out, "
                     f"{'identical to the original run' if step['matches'] else 'DIFFERS from the original run'}")
    lines.append(f"sent at superstep {r['superstep']}:")
    lines += [f"  -> {dst} [{tag}] {_describe(p)}" for dst, tag, p in r["sent"][:50]]
    if len(r["sent"]) > 50:
        lines.append(f"  ... {len(r['sent']) - 50} more")
    return "\n".join(lines)
