"""Jobs for ``bench/transport.py``; cluster workers import them as ``transport_jobs:NAME``.

The launcher passes the caller's ``sys.path`` on to the worker processes (``PYTHONPATH``), so
``bench/`` only has to be on ``sys.path`` of the process that calls ``run_job``.

- ``barrier``: ``vertices`` vertices spread round-robin over the workers; they never halt and
  never send, so every superstep is the bare barrier: BEGIN -> compute (nothing) -> one empty
  BATCH to every peer -> DONE. Runs ``max_supersteps`` supersteps.
- ``bigarray``: vertex ``src`` on worker 0 sends one float32 array of ``elements`` elements to
  vertex ``dst`` on worker 1 in every superstep (the same array object each time, built once and
  only on worker 0); ``dst`` checks the shape and dtype of what it got. Extra workers (if any)
  hold nothing. Runs ``supersteps`` supersteps; ``dst`` reports how many arrays it received and
  how many had the wrong shape (``result()`` stays small, so FINISH moves no bulk data).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mariana import Graph, Vertex
from mariana.jobs import BuildContext, Job, Key
from mariana.partitioner import ExplicitStrategy


# -- barrier: an empty superstep -----------------------------------------------------------
class Idle(Vertex):
    """Never halts, never sends."""

    def compute(self, ctx, messages) -> None:
        pass


def build_barrier(config: dict[str, Any], bctx: BuildContext) -> Graph:
    n = config["vertices"]
    g = Graph("barrier")
    ids = [f"v{i:04d}" for i in range(n)]
    g.add_vertices(Idle(vid, 0) for vid in ids)
    g.placement = ExplicitStrategy({vid: i % bctx.workers for i, vid in enumerate(ids)})
    g.max_supersteps = config["max_supersteps"]
    return g


# -- bigarray: one large array worker 0 -> worker 1 every superstep -------------------------
class ArraySource(Vertex):
    def __init__(self, id: str, elements: int) -> None:
        super().__init__(id, 0)
        self.elements = elements
        self.array: np.ndarray | None = None

    def compute(self, ctx, messages) -> None:
        if self.array is None:  # built on the owning worker only, once; never modified afterwards
            self.array = np.arange(self.elements, dtype=np.float32)
        ctx.send("dst", self.array)
        self.value += 1  # arrays sent


class ArraySink(Vertex):
    def __init__(self, id: str, elements: int) -> None:
        super().__init__(id, {"received": 0, "bad": 0})
        self.elements = elements

    def compute(self, ctx, messages) -> None:
        for m in messages:
            p = m.payload
            ok = isinstance(p, np.ndarray) and p.shape == (self.elements,) and p.dtype == np.float32
            self.value["received"] += 1
            self.value["bad"] += 0 if ok else 1


def build_bigarray(config: dict[str, Any], bctx: BuildContext) -> Graph:
    if bctx.workers < 2:
        raise ValueError("bigarray needs at least 2 workers (source on worker 0, sink on worker 1)")
    n = config["elements"]
    g = Graph("bigarray")
    g.add_lazy("src", lambda: ArraySource("src", n))
    g.add_lazy("dst", lambda: ArraySink("dst", n))
    g.placement = ExplicitStrategy({"src": 0, "dst": 1})
    g.max_supersteps = config["supersteps"]
    return g


barrier = Job(name="barrier", description="transport bench: empty supersteps (barrier latency)",
              keys=(Key("vertices", 4, "int", "idle vertices, round-robin over the workers"),
                    Key("max_supersteps", 300, "int", "supersteps to run")),
              build=build_barrier)

bigarray = Job(name="bigarray", description="transport bench: one float32 array worker 0 -> worker 1 per superstep",
               keys=(Key("elements", 16 * 1024 * 1024, "int", "float32 elements per array (16M = 64 MiB)"),
                     Key("supersteps", 10, "int", "supersteps to run (the array is sent in every one)")),
               build=build_bigarray)
