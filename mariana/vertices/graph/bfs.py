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
from ...storage.graphalytics import UNREACHABLE
from ...storage.ids import Ids
from .algorithm import Algorithm
from .sssp import SOURCE, SSSPLoaded, check_source, from_source, source_of

__all__ = ["UNREACHABLE", "BFSVertex", "BFSLoaded", "ALGORITHM"]

#: BFS depth of an unreachable vertex (Graphalytics: Long.MAX_VALUE).


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


# --------------------------------------------------------------------------------------------
# The algorithm as the framework runs it
# --------------------------------------------------------------------------------------------
def _summarize(config: dict[str, Any], ids: Ids, depth: np.ndarray) -> dict[str, Any]:
    reached = depth[depth != UNREACHABLE]
    levels, counts = np.unique(reached, return_counts=True)
    return {"levels": {str(d): int(c) for d, c in zip(levels.tolist(), counts.tolist())}}


def _report(count: int, summaries: list[dict[str, Any]], config: dict[str, Any], result: Any,
            loading: int) -> tuple[list[str], dict[str, Any]]:
    levels: dict[int, int] = {}
    for s in summaries:
        for d, c in s["levels"].items():
            levels[int(d)] = levels.get(int(d), 0) + c
    reached = sum(levels.values())
    depth = max(levels, default=0)
    lines = [f"bfs from {source_of(config)}: {reached} of {count} vertices reachable, "
             f"depth {depth}, {result.supersteps} supersteps"]
    lines += [f"depth {d:>6}: {levels[d]} vertices" for d in sorted(levels)[: config["top"]]]
    return lines, {"vertices": count, "reachable": reached, "depth": depth,
                   "levels": {str(d): c for d, c in sorted(levels.items())}}


ALGORITHM = Algorithm(
    name="bfs",
    description="breadth-first search: hop depth from a source along directed edges (Graphalytics BFS)",
    params=(SOURCE,),
    check=check_source("bfs"),
    block=lambda bid, io, c: BFSLoaded(bid, io, source_of(c)),
    vertex=from_source(BFSVertex),
    summarize=_summarize,
    report=_report,
    noun="depths",
    value="depth",
    traversals=True,
    combiner="min",
    aggregators=(("updated", "sum"),),
    progress_metric="updated",
)
