"""BFS, CDLP and LCC (the LDBC Graphalytics algorithms the engine lacked) as vertex programs.

As in ``graph_algos``, each comes as a classic Pregel vertex and as a block vertex (one per
partition, numpy arrays) that give bit-identical results: BFS depths and CDLP labels are
integers chosen by minimum / count, LCC values are exact integer triangle counts divided once.

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
from .graph_algos import BLOCK_TAG, Subgraph, _concat, _send_min

__all__ = ["UNREACHABLE", "BFSVertex", "BFSBlock", "CDLPVertex", "CDLPBlock", "LCCVertex", "LCCBlock"]

#: BFS depth of an unreachable vertex (Graphalytics: Long.MAX_VALUE).
UNREACHABLE = int(np.iinfo(np.int64).max)


# --------------------------------------------------------------------------------------------
# BFS
# --------------------------------------------------------------------------------------------
class BFSVertex(Vertex):
    """Hop depth from the source; relax out-edges when the depth improves (min combiner)."""

    __slots__ = ("is_source",)

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


class BFSBlock(Vertex):
    """BFS for a whole partition; bit-identical to ``BFSVertex``."""

    static_attributes = ("sub", "source")

    def __init__(self, id: str, sub: Subgraph, source: int | None) -> None:
        super().__init__(id, np.full(len(sub.own), UNREACHABLE, dtype=np.int64))
        self.sub = sub
        self.source = source

    def size_hint(self) -> int:
        return len(self.sub.own)

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        sub, depth = self.sub, self.value
        if ctx.superstep == 0:
            rows = np.empty(0, dtype=np.int64)
            if self.source is not None and len(sub.own):
                at = int(np.searchsorted(sub.own, self.source))
                if at < len(sub.own) and sub.own[at] == self.source:
                    rows = np.array([at])
                    depth[rows] = 0
        else:
            best = np.full(len(sub.own), UNREACHABLE, dtype=np.int64)
            np.minimum.at(best, sub.local(_concat(messages, "dst", np.int64)), _concat(messages, "d", np.int64))
            rows = np.flatnonzero(best < depth)
            depth[rows] = best[rows]
            if rows.size:
                ctx.aggregate("updated", int(rows.size))
        e = sub.edges_of(rows)
        if e.size:
            src_rows = np.repeat(rows, sub.indptr[rows + 1] - sub.indptr[rows])
            _send_min(ctx, sub, sub.dst[e], depth[src_rows] + 1, "d")
        ctx.vote_to_halt()

    def result(self) -> dict[str, Any]:
        return {"ids": self.sub.ids, "values": self.value}


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


class CDLPBlock(Vertex):
    """CDLP for a whole partition (``sub`` holds the edges in both directions); the sender
    pre-counts (destination, label) pairs, the receiver sums the counts and picks per vertex
    the largest count, smallest label. Bit-identical to ``CDLPVertex``."""

    static_attributes = ("sub", "iterations", "routes")

    def __init__(self, id: str, sub: Subgraph, labels: np.ndarray, iterations: int) -> None:
        super().__init__(id, np.asarray(labels, dtype=np.int64).copy())
        self.sub = sub
        self.iterations = iterations
        src_local = sub.src_local
        blk = sub.owner[sub.dst]
        self.routes = []
        for b in np.unique(blk):
            sel = np.flatnonzero(blk == b)
            self.routes.append((sub.blocks[b], src_local[sel], sub.dst[sel]))

    def size_hint(self) -> int:
        return len(self.sub.own)

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        s, sub, label = ctx.superstep, self.sub, self.value
        if s > 0 and messages:
            dst = sub.local(_concat(messages, "dst", np.int64))
            lab = _concat(messages, "label", np.int64)
            cnt = _concat(messages, "count", np.int64)
            dst, lab, cnt = _sum_pairs(dst, lab, cnt)
            # per destination: largest count first, then smallest label
            order = np.lexsort((lab, -cnt, dst))
            d = dst[order]
            first = np.ones(d.size, dtype=bool)
            first[1:] = d[1:] != d[:-1]
            rows, new = d[first], lab[order][first]
            changed = int(np.count_nonzero(label[rows] != new))
            if changed:
                ctx.aggregate("updated", changed)
            label[rows] = new
        if s < self.iterations:
            for block, rows, dst in self.routes:
                d, lab, cnt = _sum_pairs(dst, label[rows], np.ones(dst.size, dtype=np.int64))
                ctx.send(block, {"dst": d, "label": lab, "count": cnt}, tag=BLOCK_TAG)
        ctx.vote_to_halt()

    def result(self) -> dict[str, Any]:
        return {"ids": self.sub.ids, "values": self.value}


def _sum_pairs(dst: np.ndarray, lab: np.ndarray, cnt: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sum ``cnt`` over equal (dst, lab) pairs; the pairs come back sorted by (dst, lab)."""
    if dst.size == 0:
        return dst, lab, cnt
    order = np.lexsort((lab, dst))
    d, lb = dst[order], lab[order]
    first = np.ones(d.size, dtype=bool)
    first[1:] = (d[1:] != d[:-1]) | (lb[1:] != lb[:-1])
    starts = np.flatnonzero(first)
    return d[starts], lb[starts], np.add.reduceat(cnt[order], starts)


# --------------------------------------------------------------------------------------------
# LCC
# --------------------------------------------------------------------------------------------
_POPCOUNT = (0, 1, 1, 2)  # code bit 1: v -> x exists, bit 2: x -> v exists


class LCCVertex(Vertex):
    """Local clustering coefficient with degree-ordered wedge checks (see the module doc)."""

    __slots__ = ("nbrs", "nbdeg", "credit")

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


class LCCBlock(Vertex):
    """LCC for a whole partition, the same supersteps as ``LCCVertex`` with arrays."""

    static_attributes = ("sub",)

    def __init__(self, id: str, sub: Subgraph) -> None:
        super().__init__(id, np.zeros(len(sub.own)))
        self.sub = sub
        self.nb_indptr = np.zeros(len(sub.own) + 1, dtype=np.int64)
        self.nb = np.empty(0, dtype=np.int64)    # N(v) of every own row, sorted per row (global ids)
        self.code = np.empty(0, dtype=np.int8)   # direction code of each entry
        self.credit = np.zeros(len(sub.own), dtype=np.int64)

    def size_hint(self) -> int:
        return len(self.sub.own)

    def _send_grouped(self, ctx: Context, dst: np.ndarray, **cols: np.ndarray) -> None:
        blk = self.sub.owner[dst]
        order = np.argsort(blk, kind="stable")
        blk_sorted = blk[order]
        bounds = np.flatnonzero(np.diff(blk_sorted)) + 1
        for sel in np.split(order, bounds):
            if sel.size:
                payload = {"dst": dst[sel], **{k: v[sel] for k, v in cols.items()}}
                ctx.send(self.sub.blocks[int(blk[sel[0]])], payload, tag=BLOCK_TAG)

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        s, sub = ctx.superstep, self.sub
        rows_n, n = len(sub.own), sub.n
        if s == 0:
            src = sub.own[sub.src_local]
            keep = src != sub.dst
            self._send_grouped(ctx, sub.dst[keep], src=src[keep])
        elif s == 1:
            in_row = sub.local(_concat(messages, "dst", np.int64))
            in_src = _concat(messages, "src", np.int64)
            out_row = sub.src_local
            keep = sub.own[out_row] != sub.dst
            row = np.concatenate([out_row[keep], in_row])
            nb = np.concatenate([sub.dst[keep], in_src])
            code = np.concatenate([np.ones(int(keep.sum()), np.int8), np.full(in_row.size, 2, np.int8)])
            key = row * n + nb
            order = np.argsort(key, kind="stable")
            key, code = key[order], code[order]
            first = np.ones(key.size, dtype=bool)
            first[1:] = key[1:] != key[:-1]
            starts = np.flatnonzero(first)
            self.code = np.bitwise_or.reduceat(code, starts) if starts.size else code
            key = key[starts]
            self.nb = key % n if n else key
            row = key // n if n else key
            self.nb_indptr = np.concatenate(([0], np.cumsum(np.bincount(row, minlength=rows_n)))).astype(np.int64)
            deg = np.diff(self.nb_indptr)
            self._send_grouped(ctx, self.nb, src=sub.own[row], deg=deg[row])
        elif s == 2:
            x = _concat(messages, "dst", np.int64)
            v = _concat(messages, "src", np.int64)
            dv = _concat(messages, "deg", np.int64)
            order = np.lexsort((v, x))  # the (row, neighbour) order of nb
            nbdeg = dv[order]
            deg = np.diff(self.nb_indptr)
            row = np.repeat(np.arange(rows_n), deg)
            mydeg, me = deg[row], sub.own[row]
            higher = (nbdeg > mydeg) | ((nbdeg == mydeg) & (self.nb > me))
            # higher neighbours of each row, in rank order (degree, id)
            hrow, hnb, hdeg = row[higher], self.nb[higher], nbdeg[higher]
            hmult = np.asarray(_POPCOUNT, dtype=np.int64)[self.code[higher]]
            order = np.lexsort((hnb, hdeg, hrow))
            hrow, hnb, hmult = hrow[order], hnb[order], hmult[order]
            # every pair (i, j), i < j, within a row: x = hnb[i], w = hnb[j]
            counts = np.bincount(hrow, minlength=rows_n)
            row_end = np.cumsum(counts)[hrow]
            pos = np.arange(hrow.size)
            per = row_end - pos - 1
            i = np.repeat(pos, per)
            total = int(per.sum())
            j = np.arange(total) - np.repeat(np.cumsum(per) - per, per) + i + 1
            if total:
                self._send_grouped(ctx, hnb[i], w=hnb[j], v=sub.own[hrow[i]], mvx=hmult[i], mvw=hmult[j])
        elif s == 3:
            x = _concat(messages, "dst", np.int64)
            w = _concat(messages, "w", np.int64)
            v = _concat(messages, "v", np.int64)
            mvx = _concat(messages, "mvx", np.int64)
            mvw = _concat(messages, "mvw", np.int64)
            xrow = sub.local(x)
            keys = np.repeat(np.arange(rows_n), np.diff(self.nb_indptr)) * n + self.nb
            probe = xrow * n + w
            at = np.searchsorted(keys, probe)
            at_c = np.minimum(at, max(keys.size - 1, 0))
            found = (at < keys.size) & (keys[at_c] == probe) if keys.size else np.zeros(probe.size, dtype=bool)
            mxw = np.asarray(_POPCOUNT, dtype=np.int64)[self.code[at_c[found]]] if found.any() else np.empty(0, np.int64)
            np.add.at(self.credit, xrow[found], mvw[found])
            dst = np.concatenate([v[found], w[found]])
            val = np.concatenate([mxw, mvx[found]])
            if dst.size:
                order = np.argsort(dst, kind="stable")
                d, c = dst[order], val[order]
                first = np.ones(d.size, dtype=bool)
                first[1:] = d[1:] != d[:-1]
                starts = np.flatnonzero(first)
                self._send_grouped(ctx, d[starts], c=np.add.reduceat(c, starts))
        else:
            tri = self.credit.copy()
            if messages:
                np.add.at(tri, sub.local(_concat(messages, "dst", np.int64)), _concat(messages, "c", np.int64))
            deg = np.diff(self.nb_indptr)
            denom = deg * (deg - 1)
            self.value = np.where(deg > 1, tri / np.maximum(denom, 1), 0.0)
            self.nb = np.empty(0, dtype=np.int64)
            self.code = np.empty(0, dtype=np.int8)
            ctx.vote_to_halt()

    def result(self) -> dict[str, Any]:
        return {"ids": self.sub.ids, "values": self.value}
