"""BFS, CDLP and LCC (the LDBC Graphalytics algorithms the engine lacked) as vertex programs.

As in ``graph_algos``, each comes as a classic Pregel vertex (here, ``mode=vertex``) and as a
block vertex over a graph loaded in parts (``graphalytics_loaded``, ``lcc_loaded``, ``mode=block``) that give
bit-identical results: BFS depths and CDLP labels are integers chosen by minimum / count, LCC
values are exact integer triangle counts divided once.

- BFS: hop depth from the source along out-edges; unreachable = ``UNREACHABLE`` (int64 max,
  Graphalytics' value).
- CDLP: synchronous label propagation for ``iterations`` rounds; a vertex takes the label most
  frequent among its neighbours, ties to the smallest label. Neighbours are in- plus
  out-neighbours (the job gives the edges in both directions), so a vertex linked both ways
  counts twice, as Graphalytics defines it. Labels are integer ranks (the job maps them back).
- LCC: ``N(v)`` = in- plus out-neighbours without ``v``; ``lcc(v)`` = number of directed edges
  between members of ``N(v)`` / (|N(v)| (|N(v)| - 1)), 0 if |N(v)| < 2. Triangles are found
  with bounded message volume: edges are oriented from lower to higher (degree, id); a vertex
  sends each wedge of its higher neighbours ``(x, w)`` only to the lower end ``x``, which checks
  the closing edge. That is sum over v of C(d+(v), 2) wedges with d+(v) <= sqrt(2m), instead
  of sum of d(v)^2 for sending every neighbour list to every neighbour (docs/design-notes.md).
  Supersteps: 0 out-edges announce themselves (in-neighbours), 1 degrees, 2 wedges,
  3 closing checks send triangle credits, 4 the coefficient.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np

from ..engine import Context, Message, Vertex

__all__ = ["UNREACHABLE", "BFSVertex", "CDLPVertex", "LCCVertex"]

#: BFS depth of an unreachable vertex (Graphalytics: Long.MAX_VALUE).
UNREACHABLE = int(np.iinfo(np.int64).max)


# --------------------------------------------------------------------------------------------
# BFS
# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# CDLP
# --------------------------------------------------------------------------------------------
def _most_frequent(labels: Counter) -> int:
    """The most frequent label, ties to the smallest."""
    best, count = -1, -1
    for label, c in labels.items():
        if c > count or (c == count and label < best):
            best, count = label, c
    return best


class CDLPVertex(Vertex):
    """Label propagation; ``edges`` are the neighbour links (both directions), ``label`` the
    vertex's initial label (an integer whose order is the label order)."""

    __slots__ = ("iterations",)

    state_fields = (*Vertex.state_fields, "iterations")

    def __init__(self, id: str, edges: list[tuple[str, Any]], label: int, iterations: int) -> None:
        super().__init__(id, label, edges)
        self.iterations = iterations

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        s = ctx.superstep
        if s > 0 and messages:
            new = _most_frequent(Counter(m.payload for m in messages))
            if new != self.value:
                ctx.aggregate("updated", 1)
            self.value = new
        if s < self.iterations:
            for dst, _ in self.edges:
                ctx.send(dst, self.value)
        ctx.vote_to_halt()


# --------------------------------------------------------------------------------------------
# LCC
# --------------------------------------------------------------------------------------------
_POPCOUNT = (0, 1, 1, 2)  # code bit 1: v -> x exists, bit 2: x -> v exists


class LCCVertex(Vertex):
    """Local clustering coefficient with degree-ordered wedge checks (see the module doc)."""

    __slots__ = ("nbrs", "nbdeg", "credit")

    state_fields = (*Vertex.state_fields, "credit", "nbdeg", "nbrs")

    def __init__(self, id: str, edges: list[tuple[str, Any]]) -> None:
        super().__init__(id, 0.0, edges)
        self.nbrs: dict[str, int] = {}
        self.nbdeg: dict[str, int] = {}
        self.credit = 0

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        s, me = ctx.superstep, self.id
        if s == 0:  # tell out-neighbours about the edge
            for dst in {d for d, _ in self.edges if d != me}:
                ctx.send(dst, 0)
        elif s == 1:  # N(v) with direction codes; tell every neighbour our degree
            nbrs: dict[str, int] = {}
            for dst, _ in self.edges:
                if dst != me:
                    nbrs[dst] = nbrs.get(dst, 0) | 1
            for m in messages:
                nbrs[m.src] = nbrs.get(m.src, 0) | 2
            self.nbrs = nbrs
            for dst in nbrs:
                ctx.send(dst, len(nbrs))
        elif s == 2:  # wedges (x, w) of higher neighbours, sent to the lower end x
            self.nbdeg = {m.src: m.payload for m in messages}
            mine = (len(self.nbrs), me)
            higher = sorted((x for x in self.nbrs if (self.nbdeg[x], x) > mine), key=lambda x: (self.nbdeg[x], x))
            for i, x in enumerate(higher[:-1]):
                rest = higher[i + 1:]
                ctx.send(x, [_POPCOUNT[self.nbrs[x]], rest, [_POPCOUNT[self.nbrs[w]] for w in rest]])
        elif s == 3:  # close wedges: credit each triangle's corners with the opposite side's edges
            credits: dict[str, int] = defaultdict(int)
            for m in messages:
                m_vx, ws, m_vws = m.payload
                for w, m_vw in zip(ws, m_vws):
                    code = self.nbrs.get(w)
                    if code:
                        credits[m.src] += _POPCOUNT[code]
                        self.credit += m_vw
                        credits[w] += m_vx
            for dst in sorted(credits):
                ctx.send(dst, credits[dst])
        else:
            tri = self.credit + sum(m.payload for m in messages)
            d = len(self.nbrs)
            self.value = tri / (d * (d - 1)) if d > 1 else 0.0
            self.nbrs, self.nbdeg = {}, {}
            ctx.vote_to_halt()
