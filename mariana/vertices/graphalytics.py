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
from .graph_algos import BLOCK_TAG, Subgraph, _concat

__all__ = ["UNREACHABLE", "BFSVertex", "BFSBlock", "CDLPVertex", "CDLPBlock", "LCCVertex", "LCCBlock"]

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


class BFSBlock(Vertex):
    """BFS for a whole partition; bit-identical to ``BFSVertex``.

    Depths only grow from one superstep to the next, so a vertex that was sent a depth once never
    needs another: ``sent`` filters the frontier's edges at the sender (each destination gets one
    message in the whole run), and a message needs no payload but its destination - it arrives in
    superstep s with depth s."""

    state_fields = (*Vertex.state_fields, "sent")

    def __init__(self, id: str, sub: Subgraph, source: int | None) -> None:
        super().__init__(id, np.full(len(sub.own), UNREACHABLE, dtype=np.int64))
        self.sub = sub
        self.source = source
        self.sent = np.zeros(sub.n, dtype=bool)

    def size_hint(self) -> int:
        return len(self.sub.own)

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        sub, depth, s = self.sub, self.value, ctx.superstep
        if s == 0:
            rows = np.empty(0, dtype=np.int64)
            if self.source is not None and len(sub.own):
                at = int(np.searchsorted(sub.own, self.source))
                if at < len(sub.own) and sub.own[at] == self.source:
                    rows = np.array([at])
                    depth[rows] = 0
        else:
            rows = sub.local(_concat(messages, "dst", np.int64))
            rows = rows[depth[rows] == UNREACHABLE]
            if len(messages) > 1:
                rows = np.unique(rows)
            depth[rows] = s
            if rows.size:
                ctx.aggregate("updated", int(rows.size))
        e = sub.edges_of(rows)
        if e.size:
            cand = sub.dst[e]
            cand = cand[~self.sent[cand]]
            if cand.size * 8 >= sub.n:
                mark = np.zeros(sub.n, dtype=bool)
                mark[cand] = True
                cand = np.flatnonzero(mark)
            else:
                cand = np.unique(cand)
            self.sent[cand] = True
            blk = sub.owner[cand]
            for b in np.unique(blk):
                ctx.send(sub.blocks[b], {"dst": cand[blk == b]}, tag=BLOCK_TAG)
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


class CDLPBlock(Vertex):
    """CDLP for a whole partition (``sub`` holds the edges in both directions, so out-neighbours
    are the neighbours); bit-identical to ``CDLPVertex``.

    Each superstep a block sends every neighbouring block (itself included) the labels of its
    vertices that have a neighbour there - one value per boundary vertex, not one per edge (the
    ids travel in superstep 0 only; the receiver fixes where each neighbour's label sits once).
    The receiver gathers the label of every neighbour entry, sorts (row, label) keys once and
    picks per row the largest count, smallest label."""

    state_fields = (*Vertex.state_fields, "pos")

    def __init__(self, id: str, sub: Subgraph, labels: np.ndarray, iterations: int) -> None:
        super().__init__(id, np.asarray(labels, dtype=np.int64).copy())
        self.sub = sub
        self.iterations = iterations
        src_local = sub.src_local
        blk = sub.owner[sub.dst]
        self.routes = []
        for b in np.unique(blk):
            rows = np.unique(src_local[blk == b])
            self.routes.append((sub.blocks[b], rows, sub.own[rows]))
        # row part of the (row, label) keys; 32-bit keys sort faster where n^2 fits
        self.key_dtype: Any = np.uint32 if sub.n * sub.n <= 2**32 else np.int64
        self.row_key = src_local.astype(self.key_dtype) * np.asarray(max(sub.n, 1), dtype=self.key_dtype)
        self.pos: np.ndarray | None = None  # where each neighbour entry's label sits in the messages

    def size_hint(self) -> int:
        return len(self.sub.own)

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        s, sub, label = ctx.superstep, self.sub, self.value
        if s > 0 and messages:
            if self.pos is None:
                ids = _concat(messages, "ids", np.int64)
                order = np.argsort(ids, kind="stable")
                self.pos = order[np.searchsorted(ids[order], sub.dst)]
            lab = _concat(messages, "label", np.int64)[self.pos]
            n = max(sub.n, 1)
            key = np.sort(self.row_key + lab.astype(self.key_dtype))
            first = np.ones(key.size, dtype=bool)
            first[1:] = key[1:] != key[:-1]
            starts = np.flatnonzero(first)
            count = np.diff(np.append(starts, key.size))
            key = key[starts]
            row, lab = key // n, key % n
            # per row (runs of equal row, labels ascending): the first label of the largest count
            row_start = np.ones(row.size, dtype=bool)
            row_start[1:] = row[1:] != row[:-1]
            bounds = np.flatnonzero(row_start)
            top = np.maximum.reduceat(count, bounds)
            group = np.cumsum(row_start) - 1
            best = np.flatnonzero(count == top[group])
            keep = np.ones(best.size, dtype=bool)
            keep[1:] = group[best[1:]] != group[best[:-1]]
            best = best[keep]
            rows, new = row[best], lab[best]
            changed = int(np.count_nonzero(label[rows] != new))
            if changed:
                ctx.aggregate("updated", changed)
            label[rows] = new
        if s < self.iterations:
            for block, rows, ids in self.routes:
                payload = {"label": label[rows]}
                if s == 0:
                    payload["ids"] = ids
                ctx.send(block, payload, tag=BLOCK_TAG)
        ctx.vote_to_halt()

    def result(self) -> dict[str, Any]:
        return {"ids": self.sub.ids, "values": self.value}


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


#: At most this many wedges per message (bounds the memory of superstep 2 and 3).
WEDGE_CHUNK = 1 << 21


class _KeySet:
    """A vectorised open-addressing hash map int64 key -> small int (linear probing): the
    closing-edge test of LCC, one or two random reads per probe instead of a binary search."""

    EMPTY = -1

    def __init__(self, keys: np.ndarray, vals: np.ndarray) -> None:
        bits = max(4, int(4 * max(keys.size, 1) - 1).bit_length())  # load factor <= 1/4
        self.shift = np.uint64(64 - bits)
        self.mask = (1 << bits) - 1
        self.keys = np.full(1 << bits, self.EMPTY, dtype=np.int64)
        self.vals = np.zeros(1 << bits, dtype=np.int8)
        slot = self._hash(keys)
        pending = np.arange(keys.size)
        while pending.size:
            sp, kp = slot[pending], keys[pending]
            free = self.keys[sp] == self.EMPTY
            self.keys[sp[free]] = kp[free]  # one of several claimants wins each free slot
            won = self.keys[sp] == kp
            self.vals[sp[won]] = vals[pending[won]]
            pending = pending[~won]
            slot[pending] = (slot[pending] + 1) & self.mask

    def _hash(self, keys: np.ndarray) -> np.ndarray:
        h = keys.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        return (h >> self.shift).astype(np.int64)

    def get(self, probe: np.ndarray) -> np.ndarray:
        """The value of every probe key, 0 where absent."""
        out = np.zeros(probe.size, dtype=np.int8)
        slot = self._hash(probe)
        pending = np.arange(probe.size)
        while pending.size:
            sp = slot[pending]
            t = self.keys[sp]
            hit = t == probe[pending]
            out[pending[hit]] = self.vals[sp[hit]]
            pending = pending[~hit & (t != self.EMPTY)]
            slot[pending] = (slot[pending] + 1) & self.mask
        return out


class LCCBlock(Vertex):
    """LCC for a whole partition, the same supersteps as ``LCCVertex`` with arrays; degrees
    travel once per (boundary vertex, neighbouring block), wedges in chunks of ``WEDGE_CHUNK``."""

    state_fields = (*Vertex.state_fields, "closing_keys", "closing_mult", "code", "nb", "nb_indptr")

    def __init__(self, id: str, sub: Subgraph) -> None:
        super().__init__(id, np.zeros(len(sub.own)))
        self.sub = sub
        self.nb_indptr = np.zeros(len(sub.own) + 1, dtype=np.int64)
        self.nb = np.empty(0, dtype=np.int64)    # N(v) of every own row, sorted per row (global ids)
        self.code = np.empty(0, dtype=np.int8)   # direction code of each entry
        self.closing_keys = np.empty(0, dtype=np.int64)  # superstep 2 -> 3: closing edges x -> w (x n + w)
        self.closing_mult = np.empty(0, dtype=np.int8)   # and their edge counts (plain arrays: checkpointable)

    def size_hint(self) -> int:
        return len(self.sub.own)

    def _send_grouped(self, ctx: Context, dst: np.ndarray, **cols: np.ndarray) -> None:
        if len(self.sub.blocks) == 1:
            ctx.send(self.sub.blocks[0], {"dst": dst, **cols}, tag=BLOCK_TAG)
            return
        blk = self.sub.owner[dst]
        for b in np.flatnonzero(np.bincount(blk, minlength=len(self.sub.blocks))):
            sel = np.flatnonzero(blk == b)
            ctx.send(self.sub.blocks[int(b)], {"dst": dst[sel], **{k: v[sel] for k, v in cols.items()}}, tag=BLOCK_TAG)

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        s, sub = ctx.superstep, self.sub
        rows_n, n = len(sub.own), max(sub.n, 1)
        if s == 0:  # out-edges announce themselves: in-neighbours
            src = sub.own[sub.src_local]
            keep = src != sub.dst
            self._send_grouped(ctx, sub.dst[keep], src=src[keep])
        elif s == 1:  # N(v) with direction codes (bit 1 out, bit 2 in); degrees to neighbouring blocks
            in_row = sub.local(_concat(messages, "dst", np.int64))
            in_src = _concat(messages, "src", np.int64)
            out_row = sub.src_local
            keep = sub.own[out_row] != sub.dst
            key = np.concatenate([(out_row[keep] * n + sub.dst[keep]) * 4 + 1, (in_row * n + in_src) * 4 + 2])
            key.sort()
            pair = key >> 2
            first = np.ones(pair.size, dtype=bool)
            first[1:] = pair[1:] != pair[:-1]
            starts = np.flatnonzero(first)
            self.code = np.bitwise_or.reduceat((key & 3).astype(np.int8), starts) if starts.size else np.empty(0, np.int8)
            pair = pair[starts]
            self.nb, row = pair % n, pair // n
            self.nb_indptr = np.concatenate(([0], np.cumsum(np.bincount(row, minlength=rows_n)))).astype(np.int64)
            deg = np.diff(self.nb_indptr)
            blk = sub.owner[self.nb]
            for b in np.unique(blk):
                r = np.unique(row[blk == b])
                ctx.send(sub.blocks[int(b)], {"ids": sub.own[r], "deg": deg[r]}, tag=BLOCK_TAG)
        elif s == 2:  # wedges of higher neighbours, to their lower-ranked end
            deg_of = np.zeros(sub.n, dtype=np.int64)
            deg_of[_concat(messages, "ids", np.int64)] = _concat(messages, "deg", np.int64)
            deg = np.diff(self.nb_indptr)
            row = np.repeat(np.arange(rows_n), deg)
            rank_nb = deg_of[self.nb] * n + self.nb  # rank = (degree, id) as one integer
            higher = rank_nb > (deg * n + sub.own)[row]
            hrow, hnb, hrank = row[higher], self.nb[higher], rank_nb[higher]
            hmult = np.asarray(_POPCOUNT, dtype=np.int8)[self.code[higher]]
            self.closing_keys, self.closing_mult = sub.own[hrow] * n + hnb, hmult  # rank x < rank w
            counts = np.bincount(hrow, minlength=rows_n)
            wedges = counts * (counts - 1) // 2
            row_start = np.concatenate(([0], np.cumsum(counts)))
            cum = np.cumsum(wedges)
            idt = np.int32 if sub.n < 2**31 else np.int64
            lo = 0
            while lo < rows_n:  # rows [lo, hi) with at most WEDGE_CHUNK wedges (or one row)
                base = cum[lo - 1] if lo else 0
                hi = max(int(np.searchsorted(cum, base + WEDGE_CHUNK, side="right")), lo + 1)
                r = np.arange(lo, hi)
                lo = hi
                per_entry = np.arange(row_start[r[0]], row_start[r[-1] + 1])
                if not per_entry.size:
                    continue
                erow = hrow[per_entry]
                per = row_start[erow + 1] - per_entry - 1  # pairs (i, j > i) within the row
                i = np.repeat(per_entry, per)
                if not i.size:
                    continue
                j = np.arange(i.size) - np.repeat(np.cumsum(per) - per, per) + i + 1
                swap = hrank[i] > hrank[j]
                x = np.where(swap, hnb[j], hnb[i])
                w = np.where(swap, hnb[i], hnb[j])
                mult = np.where(swap, hmult[j] * 4 + hmult[i], hmult[i] * 4 + hmult[j]).astype(np.int8)
                self._send_grouped(ctx, x.astype(idt), w=w.astype(idt), v=sub.own[hrow[i]].astype(idt), m=mult)
        elif s == 3:  # close the wedges: credit v with x-w, x with v-w, w with v-x
            credit = np.zeros(sub.n, dtype=np.float64)
            closing = _KeySet(self.closing_keys, self.closing_mult)
            for msg in messages:
                p = msg.payload
                x, w, v, m = (p["dst"].astype(np.int64), p["w"].astype(np.int64), p["v"].astype(np.int64),
                              p["m"].astype(np.int64))
                mxw = closing.get(x * n + w).astype(np.int64)
                found = mxw > 0
                x, w, v, m, mxw = x[found], w[found], v[found], m[found], mxw[found]
                credit += np.bincount(v, weights=mxw, minlength=sub.n)
                credit += np.bincount(x, weights=m & 3, minlength=sub.n)
                credit += np.bincount(w, weights=m >> 2, minlength=sub.n)
            self.closing_keys, self.closing_mult = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int8)
            dst = np.flatnonzero(credit)
            if dst.size:
                self._send_grouped(ctx, dst, c=credit[dst].astype(np.int64))
        else:
            tri = np.zeros(rows_n, dtype=np.int64)
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
