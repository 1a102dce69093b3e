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

from ...engine import Context
from ...storage.graphalytics import UNREACHABLE
from ...storage.ids import Ids
from .algorithm import Algorithm, MIN_PROPAGATION
from .sssp import SOURCE, SSSPLoaded, SSSPVertex, check_source, from_source, source_of

__all__ = ["UNREACHABLE", "BFSVertex", "BFSLoaded", "ALGORITHM"]


class BFSVertex(SSSPVertex):
    """Hop depth from the source: ``SSSPVertex`` offering ``depth + 1`` along every out-edge."""

    __slots__ = ()

    state_fields = SSSPVertex.state_fields
    FAR = UNREACHABLE
    START = 0

    def relax(self, ctx: Context) -> None:
        depth = self.value + 1
        for dst, _ in self.edges:
            ctx.send(dst, depth)


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
    **MIN_PROPAGATION,
)
