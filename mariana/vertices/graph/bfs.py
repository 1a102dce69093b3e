"""Breadth-first search: the hop depth of every vertex from the source along out-edges;
unreachable = ``UNREACHABLE`` (int64 max, Graphalytics' value).

Two programs with the same depths: ``BFSVertex``, the classic Pregel vertex (``mode=vertex``,
the tests' oracle), and ``BFSLoaded``, ``sssp.SSSPLoaded`` with unit weights (``mode=block``):
each block searches its own edges to the end in one superstep (a breadth-first traversal) and
only edges that leave the block carry depths, so one worker needs one superstep whatever the
diameter. An undirected graph is loaded both ways (the loader routes each edge to both ends).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...engine import Context, Message, Vertex
from .sssp import SSSPLoaded

__all__ = ["UNREACHABLE", "BFSVertex", "BFSLoaded"]

#: BFS depth of an unreachable vertex (Graphalytics: Long.MAX_VALUE).
UNREACHABLE = int(np.iinfo(np.int64).max)


class BFSVertex(Vertex):
    """Hop depth from the source; relax out-edges when the depth improves (min combiner)."""

    __slots__ = ("is_source",)

    state_fields = (*Vertex.state_fields, "is_source")

    def __init__(self, id: str, edges: list[tuple[str, Any]], is_source: bool = False) -> None:
        super().__init__(id, UNREACHABLE, edges)
        self.is_source = is_source

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        if ctx.superstep == 0:
            improved = self.is_source
            if improved:
                self.value = 0
        else:
            best = min(m.payload for m in messages) if messages else UNREACHABLE
            improved = best < self.value
            if improved:
                self.value = best
                ctx.aggregate("updated", 1)
        if improved:
            depth = self.value + 1
            for dst, _ in self.edges:
                ctx.send(dst, depth)
        ctx.vote_to_halt()


class BFSLoaded(SSSPLoaded):
    """BFS for a whole partition; the depths of ``BFSVertex``. ``source_name``: the source id.

    SSSP with every edge at 1.0 (block-centric: a block's internal edges are searched to the end
    in one superstep, by a breadth-first traversal), depths reported as integers."""

    state_fields = SSSPLoaded.state_fields
    unit = True

    def result(self) -> dict[str, Any]:
        g = self.g
        if g is None:
            return {"ids": [], "values": np.zeros(0, dtype=np.int64)}
        depth = np.full(len(self.value), UNREACHABLE, dtype=np.int64)
        reached = np.isfinite(self.value)
        depth[reached] = self.value[reached].astype(np.int64)
        return self.out.result(g.own, depth, labels=False)
