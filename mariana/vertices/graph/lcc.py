"""LCC, the local clustering coefficient of every vertex (LDBC Graphalytics).

``LCCVertex`` is the classic Pregel vertex (``mode=vertex``, the tests' oracle): triangles are
found with bounded message volume, edges oriented from lower to higher (degree, id); a vertex
sends each wedge of its higher neighbours ``(x, w)`` only to the lower end ``x``, which checks
the closing edge. Supersteps: 0 out-edges announce themselves (in-neighbours), 1 degrees,
2 wedges, 3 closing checks send triangle credits, 4 the coefficient. ``LCCLoaded`` is the block
program over a graph loaded in parts (``block.LoadedBlock``); its values are those of
``LCCVertex`` to the bit (integer triangle counts divided once, as there).

- ``LCCLoaded``: ``N(v)`` = in- plus out-neighbours without ``v``; ``lcc(v)`` = directed edges
  among ``N(v)`` / (|N(v)| (|N(v)| - 1)). Steps: 0 out-edges announce themselves (in-neighbours),
  1 ``N(v)`` with direction codes and degrees to neighbouring blocks, 2 wedges: the first round
  of those that travel, 3 .. 2 + R one superstep a round: close the wedges that came, send
  triangle credits and the next round, 3 + R the coefficient (``directed=false``: no step 0,
  every edge is loaded both ways, so the out-edges are N(v) already). Rounds: a block sends at
  most ``WEDGES_PER_STEP / (blocks - 1)`` wedges a superstep, so no block receives more than
  ``WEDGES_PER_STEP`` at once whatever the graph (BSP holds a superstep's messages in the
  receiver's inbox until the next); the ``wedges_left`` aggregator (the wedges sent or still to
  send, summed) is 0 in the superstep after the last round everywhere at once, and the credits
  of that round arrive with it. With one block (one worker) every neighbour is local:
  step 0 does it all with ``triangles.triangle_credits`` (the same ranking, as two masked
  sparse products over the rank-oriented adjacency; on a bounded-degree graph, a grid, wedges
  oriented by row number and checked one by one; the same integers whichever runs) and sends
  nothing. With several blocks, step 2 does the same products for the wedges whose lower end
  x is in v's block (``oriented_triangles``: both lower corners here, w anywhere; w's credits
  sent at once to its block), and only the wedges whose x lives in another block travel.

Message volume of LCC: neighbours are ranked by (degree, id) and a vertex sends each wedge of two
*higher-ranked* neighbours (x, w) only to the lower end x, which checks the closing edge x-w in
its own adjacency. A vertex has at most sqrt(2m) higher-ranked neighbours (each has degree >= its
own), so the wedges sent are sum over v of C(d+(v), 2) <= m sqrt(2m)/2 over all vertices,
instead of the sum of d(v)^2 of sending every neighbour list to every neighbour: on a power-law
graph the hubs, which would dominate d(v)^2, send almost nothing, and the volume grows with the
number of edges between vertices of similar degree, not with the square of the largest degree.
Degrees travel once per (vertex, neighbouring block), with the vertex's *slot* (row at its owner
* blocks + owner), so a wedge is 13 bytes (three int32 slots and the direction counts) and its
receiver finds x's row without a search; the closing test is a hash-set probe. Triangle credits
of the receiving block's own vertices are summed in place, the others once per (vertex, block
that closed a triangle of it, in that round); wedges go out in messages of at most
``WEDGE_CHUNK`` wedges. Memory per block: its neighbour entries (in + out, ~2x its out-edges)
until step 2, then its higher-ranked ones (5 bytes each, the CSR the rounds read, and the
hash set of the closing edges built from them, 9 bytes a slot at a load of 1/4 to 1/8) and
the cumulated wedge counts of the entries whose wedges travel (12 bytes each); in a round one
round of wedges in (``WEDGES_PER_STEP`` x 13 bytes at most) and one out, and a chunk's
temporaries: never all the wedges at once.

Cost with the degree distribution: work and volume are O(sum over v of d+(v)^2) with d+(v) <=
min(d(v), sqrt(2m)) the higher-ranked neighbours: ~m on bounded-degree graphs (a grid: d+ <= 2),
O(m sqrt(m)) at worst on power-law graphs, never the sum of d(v)^2 of the unranked method (a hub
of degree d costs d^2 there). On one block, the kernel's products cost the length-2 rank-increasing
paths (sum over x of d-(x) d+(x)) plus the wedges that may close (a hashed test drops the rest
first), both within the same bound; its memory is a few arrays per neighbour entry and one chunk.
"""

from __future__ import annotations

import numpy as np

from collections import defaultdict
from typing import Any

from ...engine import Context, Message, Vertex
from ...partitioner.fragment import BLOCK_TAG
from ...storage.ids import Ids, pack_keys
from .algorithm import Algorithm, merged_top
from .block import GraphIO, LoadedBlock, _announce_in_edges, _concat, _neighbour_entries, _send_by_block
from .kernels import row_ids
from .triangles import oriented_triangles, triangle_credits

__all__ = ["LCCVertex", "LCCLoaded", "WEDGE_CHUNK", "WEDGES_PER_STEP", "ALGORITHM"]

#: At most this many wedges per message (bounds the temporaries of sending and closing them).
WEDGE_CHUNK = 1 << 21
#: At most this many wedges reach a block in one superstep (each of the other blocks sends it at
#: most its share, WEDGES_PER_STEP / (blocks - 1), or one vertex's wedges of one neighbour where
#: more): the bound on a block's inbox of wedges, 13 bytes each, whatever the graph.
WEDGES_PER_STEP = 1 << 25
_POPCOUNT = np.array([0, 1, 1, 2], dtype=np.int8)  # code bit 1: v -> x exists, bit 2: x -> v exists
_VERTEX_POPCOUNT = (0, 1, 1, 2)  # the same, as Python ints (LCCVertex)


# LCC
# --------------------------------------------------------------------------------------------
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
                ctx.send(x, [_VERTEX_POPCOUNT[self.nbrs[x]], rest, [_VERTEX_POPCOUNT[self.nbrs[w]] for w in rest]])
        elif s == 3:  # close wedges: credit each triangle's corners with the opposite side's edges
            credits: dict[str, int] = defaultdict(int)
            for m in messages:
                m_vx, ws, m_vws = m.payload
                for w, m_vw in zip(ws, m_vws):
                    code = self.nbrs.get(w)
                    if code:
                        credits[m.src] += _VERTEX_POPCOUNT[code]
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


class _KeySet:
    """A vectorised open-addressing hash map int64 key -> small int (linear probing): LCC's
    closing-edge test, one or two random reads per probe instead of a binary search."""

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


def _small(a: np.ndarray) -> np.ndarray:
    """Non-negative ints as int32 where they fit (the wire carries half the bytes)."""
    return a.astype(np.int32) if not a.size or int(a.max()) < 2 ** 31 else a


class LCCLoaded(LoadedBlock):
    """LCC for a whole partition with degree-ordered wedge checks (see the module doc); the values
    of ``LCCVertex`` to the bit.

    From step 1 on a vertex is also named by its *slot* ``row * blocks + block`` (its local row at
    its owner, and the owner): slots travel with the degrees once, so wedges and credits carry
    4-byte slots instead of keys, and the receiver finds the row without a search."""

    state_fields = (*LoadedBlock.state_fields, "code", "nb", "nb_blk", "nb_indptr", "symmetric", "tri",
                    "wedge_at", "wedge_cum", "wedge_ent", "wedge_mult", "wedge_slot", "wedge_start")
    #: the closing-edge test of the wedges that arrive, built from ``wedge_start``/``wedge_slot``
    derived_fields = {"_closing": None}

    def __init__(self, id: str, io: GraphIO, symmetric: bool = False) -> None:
        super().__init__(id, io)
        self.symmetric = symmetric  # loaded both ways (an undirected graph): no transpose on one block
        self._closing: _KeySet | None

    def loaded(self, ctx: Context) -> None:
        g = self.g
        assert g is not None
        self.value = np.zeros(len(g.own))
        self.nb_indptr = np.zeros(len(g.own) + 1, dtype=np.int64)
        self.nb = g.own[:0]                        # N(v) of every own row (keys), by (row, key)
        self.nb_blk = np.empty(0, dtype=np.int16)  # the block of each entry
        self.code = np.empty(0, dtype=np.int8)     # direction code of each entry
        self.tri = np.zeros(len(g.own), dtype=np.int64)  # step 2 on: triangle credits summed here
        self._forget_wedges()

    def _forget_wedges(self) -> None:
        """Step 2 to the last round: each own row's higher-ranked neighbours (a CSR by row, then
        rank: the closing edges x - w, and the wedges that travel) and the cursor of the rounds."""
        self.wedge_start = np.zeros(1, dtype=np.int64)  # each row's first entry
        self.wedge_slot = np.empty(0, dtype=np.int64)   # the slot of each entry's neighbour
        self.wedge_mult = np.empty(0, dtype=np.int8)    # the edges between the row and it (1 or 2)
        self.wedge_ent = np.empty(0, dtype=np.int64)    # the entries x whose wedges travel (x in another block)
        self.wedge_cum = np.empty(0, dtype=np.int64)    # their wedges (x, w later in the row), cumulated
        self.wedge_at = 0                               # the next of them to send
        self._closing = None

    def _me(self) -> int:
        assert self.g is not None
        return self.g.blocks.index(self.id)

    def run(self, ctx: Context, messages: list[Message], s: int) -> None:
        g = self.g
        assert g is not None
        step = s + 1 if self.symmetric else s  # loaded both ways: the out-edges are N(v) already
        if s == 0 and len(g.blocks) == 1:  # every neighbour is here: no messages
            self._whole(ctx)
        elif step == 0:  # out-edges announce themselves: in-neighbours
            _announce_in_edges(ctx, g, skip_loops=True)
        elif step == 1:
            self._neighbours(ctx, messages)
        elif step == 2:
            self._wedges(ctx, messages)
        elif ctx.aggregated("wedges_left", 0):  # a round: close the wedges that came, send the next
            self._take_credits(messages)
            self._close(ctx, messages)
            self._send_round(ctx)
        else:  # every block sent its last round a superstep ago: every wedge closed, every credit here
            self._take_credits(messages)
            self._forget_wedges()
            self._coefficient(ctx)

    def _whole(self, ctx: Context) -> None:
        """The one-block job in one step: degrees and triangle sums by ``triangle_credits``."""
        g = self.g
        assert g is not None
        # the targets are own vertices (one block): every one of them when there are as many
        cols = g.slot if len(g.targets) == len(g.own) else g.local(g.targets)[g.slot]
        deg, self.tri = triangle_credits(g.indptr, cols, self.symmetric)
        g.drop_edges()
        self._coefficient(ctx, deg)  # (N(v) itself is not needed: nb_indptr stays empty)

    def _coefficient(self, ctx: Context, deg: np.ndarray | None = None) -> None:
        """lcc(v) = tri / (|N(v)| (|N(v)| - 1)), 0.0 where |N(v)| < 2 (tri is 0 there: no pairs)."""
        if deg is None:
            deg = np.diff(self.nb_indptr)
        denom = deg * (deg - 1)
        np.maximum(denom, 1, out=denom)
        self.value = np.true_divide(self.tri, denom)
        ctx.vote_to_halt()

    def _neighbours(self, ctx: Context, messages: list[Message]) -> None:
        """N(v) with direction codes (bit 1 out, bit 2 in), deduplicated; degrees and slots to
        neighbouring blocks."""
        g = self.g
        assert g is not None
        if self.symmetric:  # every edge loaded both ways: N(v) = the out-neighbours, each with code 3
            rows, slot = g.src_rows().astype(np.int64), g.slot.astype(np.int64)
            keep = np.flatnonzero(g.own[rows] != g.targets[slot])
            rows, slot = rows[keep], slot[keep]
            order = np.argsort(rows * max(len(g.targets), 1) + slot)  # by (row, key): slots follow the keys
            rows, slot = rows[order], slot[order]
            first = np.ones(rows.size, dtype=bool)
            first[1:] = (rows[1:] != rows[:-1]) | (slot[1:] != slot[:-1])
            starts = np.flatnonzero(first)
            self.code = np.full(starts.size, 3, dtype=np.int8)
            self.nb, self.nb_blk, row = g.targets[slot[starts]], g.target_block[slot[starts]].astype(np.int16), rows[starts]
        else:
            rows, keys, blk, code = _neighbour_entries(g, messages)
            keep = np.flatnonzero(g.own[rows] != keys)
            rows, keys, blk, code = rows[keep], keys[keep], blk[keep], code[keep]
            order = np.argsort(keys, kind="stable")
            order = order[np.argsort(rows[order], kind="stable")]  # by (row, key)
            rows, keys, blk, code = rows[order], keys[order], blk[order], code[order]
            first = np.ones(rows.size, dtype=bool)
            first[1:] = (rows[1:] != rows[:-1]) | (keys[1:] != keys[:-1])
            starts = np.flatnonzero(first)
            self.code = np.bitwise_or.reduceat(code, starts) if starts.size else code[:0]
            self.nb, self.nb_blk, row = keys[starts], blk[starts], rows[starts]
        self.nb_indptr = np.concatenate(([0], np.cumsum(np.bincount(row, minlength=len(g.own))))).astype(np.int64)
        g.drop_edges()
        deg = np.diff(self.nb_indptr)
        w, me = len(g.blocks), self._me()
        for b in np.unique(self.nb_blk).tolist():
            r = np.unique(row[self.nb_blk == b])
            ctx.send(g.blocks[b], {"ids": pack_keys(g.own[r]), "deg": deg[r], "slot": _small(r * w + me)},
                     tag=BLOCK_TAG)

    def _wedges(self, ctx: Context, messages: list[Message]) -> None:
        """Each pair of higher-ranked neighbours (x, w), rank x < rank w, to the block of x;
        rank = (degree, slot): a total order every block computes alike. The pairs whose x is
        here are counted at once (``_local_triangles``); the others travel in rounds, the first
        one now (``_send_round``)."""
        g = self.g
        assert g is not None
        rows_n, w_n, me = len(g.own), len(g.blocks), self._me()
        ids = _concat(messages, "ids", g.own.dtype, keys=True)
        by_id = np.argsort(ids, kind="stable")
        at = by_id[np.searchsorted(ids[by_id], self.nb)] if self.nb.size else by_id[:0]
        nb_deg = _concat(messages, "deg", np.int64)[at].astype(np.int64)
        nb_slot = _concat(messages, "slot", np.int64)[at].astype(np.int64)
        deg = np.diff(self.nb_indptr)
        row = row_ids(self.nb_indptr, np.int64)
        own_rank = (deg << 32) | (np.arange(rows_n, dtype=np.int64) * w_n + me)
        nb_rank = (nb_deg << 32) | nb_slot
        higher = np.flatnonzero(nb_rank > own_rank[row])
        higher = higher[np.lexsort((nb_rank[higher], row[higher]))]  # by row, then rank
        hrow, hslot = row[higher], nb_slot[higher]
        hmult = _POPCOUNT[self.code[higher]]
        self.nb, self.nb_blk, self.code = self.nb[:0].copy(), self.nb_blk[:0].copy(), self.code[:0].copy()
        del row, nb_rank, nb_deg, nb_slot, higher, at, by_id, ids
        counts = np.bincount(hrow, minlength=rows_n)
        row_start = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        lower_end = np.ones(hslot.size, dtype=bool)  # entries whose wedges (as x) travel
        if hslot.size:
            local = hslot % w_n == me
            if local.any():
                self._local_triangles(ctx, hrow, hslot, hmult, row_start, local)
                lower_end = ~local
        ent = np.flatnonzero(lower_end)
        per = row_start[hrow[ent] + 1] - ent - 1  # pairs (i, j > i) within the row
        ent = ent[per > 0]
        self.wedge_start, self.wedge_slot, self.wedge_mult = row_start, _small(hslot), hmult
        self.wedge_ent, self.wedge_cum, self.wedge_at = _small(ent), np.cumsum(per[per > 0]), 0
        self._send_round(ctx)

    def _send_round(self, ctx: Context) -> None:
        """The next round of travelling wedges: the next entries x with at most
        ``WEDGES_PER_STEP / (blocks - 1)`` wedges in all (or one entry's), each wedge to x's
        block, in messages of at most ``WEDGE_CHUNK``. ``wedges_left`` counts the wedges sent
        now or still to send, so every block sees the same superstep with none left."""
        g = self.g
        assert g is not None
        w_n, me = len(g.blocks), self._me()
        ent, cum, lo = self.wedge_ent, self.wedge_cum, self.wedge_at
        if lo >= ent.size:
            return
        done = int(cum[lo - 1]) if lo else 0
        ctx.aggregate("wedges_left", int(cum[-1]) - done)
        share = max(1, WEDGES_PER_STEP // max(w_n - 1, 1))  # what each block receives stays <= WEDGES_PER_STEP
        end = max(int(np.searchsorted(cum, done + share, side="right")), lo + 1)
        start, slot, mult = self.wedge_start, self.wedge_slot, self.wedge_mult
        while lo < end:  # entries [lo, hi) with at most WEDGE_CHUNK wedges (or one entry)
            base = int(cum[lo - 1]) if lo else 0
            hi = min(max(int(np.searchsorted(cum, base + WEDGE_CHUNK, side="right")), lo + 1), end)
            per_entry = ent[lo:hi].astype(np.int64)
            per = np.diff(cum[lo:hi], prepend=base)
            lo = hi
            i = np.repeat(per_entry, per)
            j = np.arange(i.size) - np.repeat(np.cumsum(per) - per, per) + i + 1  # i ranks below j
            v = np.repeat(np.searchsorted(start, per_entry, side="right") - 1, per) * w_n + me
            x = slot[i]
            _send_by_block(ctx, g, (x % w_n).astype(np.int16),
                           {"x": _small(x), "w": _small(slot[j]), "v": _small(v),
                            "m": (mult[i] * 4 + mult[j]).astype(np.int8)})
        self.wedge_at = end

    def _local_triangles(self, ctx: Context, hrow: np.ndarray, hslot: np.ndarray, hmult: np.ndarray,
                         row_start: np.ndarray, local: np.ndarray) -> None:
        """The triangles v < x < w whose two lower corners are this block's (w anywhere) by the
        kernel's masked products (``triangles.oriented_triangles``) instead of wedge
        messages: v's and x's credits summed here, w's too where w is here, else sent."""
        g = self.g
        assert g is not None
        rows_n, w_n, me = len(g.own), len(g.blocks), self._me()
        uniq, ucol = np.unique(hslot, return_inverse=True)  # the higher neighbours, compact
        order = np.lexsort((ucol, hrow))  # U by row, then column
        umult = None if bool((hmult == 2).all()) else hmult[order].astype(np.int64)
        lrow = np.where(local[order], hslot[order] // w_n, -1)
        low, high, mid = oriented_triangles(rows_n, len(uniq), row_start, ucol[order].reshape(-1), umult, lrow)
        tri = self.tri + low + mid
        own = uniq % w_n == me
        tri[uniq[own] // w_n] += high[own]  # (distinct rows)
        self.tri = tri
        far = np.flatnonzero(~own & (high != 0))
        self._send_credits(ctx, uniq[far], high[far])

    def _close(self, ctx: Context, messages: list[Message]) -> None:
        """Close the wedges x-w that came: credit v with the x-w edges, x with v-w, w with v-x.
        Credits of this block's own vertices (every x) are summed here; the others per vertex,
        then sent."""
        g = self.g
        assert g is not None
        w_n, rows_n = len(g.blocks), len(g.own)
        wedges = [m.payload for m in messages if "x" in m.payload]
        if not wedges:
            return
        if self._closing is None:
            keys = (row_ids(self.wedge_start, np.int64) << 32) | self.wedge_slot
            self._closing = _KeySet(keys, self.wedge_mult)
            del keys
        closing = self._closing
        slots, credits = [], []
        for p in wedges:
            x_row = p["x"].astype(np.int64) // w_n  # (several blocks: one block never gets here)
            mxw = closing.get((x_row << 32) | p["w"])
            found = np.flatnonzero(mxw)
            m = p["m"][found]
            self.tri += np.bincount(x_row[found], weights=m & 3, minlength=rows_n).astype(np.int64)
            for slot, credit in ((p["v"][found], mxw[found]), (p["w"][found], m >> 2)):
                slots.append(slot.astype(np.int64))
                credits.append(credit)
        del wedges
        slot, credit = np.concatenate(slots), np.concatenate(credits).astype(np.int64)
        del slots, credits
        self._send_credits(ctx, slot, credit)

    def _send_credits(self, ctx: Context, slot: np.ndarray, credit: np.ndarray) -> None:
        """Credit the vertices at ``slot``: this block's own rows here, the others summed per
        vertex and sent to their blocks (``_take_credits`` there)."""
        g = self.g
        assert g is not None
        w_n, me = len(g.blocks), self._me()
        blk = slot % w_n
        for b in np.flatnonzero(np.bincount(blk, minlength=w_n)).tolist():
            sel = np.flatnonzero(blk == b)
            total = np.bincount(slot[sel] // w_n, weights=credit[sel])  # exact: integer sums < 2^53
            if b == me:
                self.tri[:len(total)] += total.astype(np.int64)
                continue
            r = np.flatnonzero(total)
            ctx.send(g.blocks[b], {"row": _small(r), "c": total[r].astype(np.int64)}, tag=BLOCK_TAG)

    def _take_credits(self, messages: list[Message]) -> None:
        """Add the credits other blocks sent for this block's vertices."""
        for m in messages:
            if "c" in m.payload:
                np.add.at(self.tri, m.payload["row"].astype(np.int64), m.payload["c"])


# --------------------------------------------------------------------------------------------
# The algorithm as the framework runs it
# --------------------------------------------------------------------------------------------
def _summarize(config: dict[str, Any], ids: Ids, lcc: np.ndarray) -> dict[str, Any]:
    top = config["top"]
    best = np.lexsort((ids.keys, -lcc))[:top] if top else np.empty(0, np.int64)
    return {"sum": float(lcc.sum()), "top": [[name, float(lcc[i])] for name, i in zip(ids.of(best), best.tolist())]}


def _report(count: int, summaries: list[dict[str, Any]], config: dict[str, Any], result: Any,
            loading: int) -> tuple[list[str], dict[str, Any]]:
    total = sum(s["sum"] for s in summaries)
    top = merged_top(summaries, "top", config["top"])
    mean = total / count if count else 0.0
    lines = [f"lcc: {count} vertices, mean clustering coefficient {mean:.6f}"]
    lines += [f"{vid:<24} {c:.6f}" for vid, c in top]
    return lines, {"vertices": count, "mean": mean, "top": top}


ALGORITHM = Algorithm(
    name="lcc",
    description="local clustering coefficient; directed graphs use in- plus out-neighbours (Graphalytics LCC)",
    # directed: neighbours are in- plus out-neighbours, the numerator counts directed edges;
    # undirected: every edge both ways (the loader stores each edge both ways), edges / (d (d - 1) / 2)
    block=lambda bid, io, c: LCCLoaded(bid, io, not c["directed"]),
    vertex=lambda edges, c: LCCVertex,
    summarize=_summarize,
    report=_report,
    noun="coefficients",
    aggregators=(("wedges_left", "sum"),),  # (several blocks: the wedges not closed yet, every round)
)
