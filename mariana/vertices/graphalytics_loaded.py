"""BFS and LCC over a graph loaded in parts (``graph_blocks.LoadedBlock``): each worker holds
only its own vertices and their out-edges, as for PageRank, SSSP and WCC (CDLP: ``cdlp_loaded``).

The results are those of the vertex programs of ``vertices.graphalytics`` (BFS depths
exactly, LCC to the bit: integer triangle counts divided once, as there).

- ``BFSLoaded``: hop depths from the source along the loaded out-edges (both ways for an
  undirected graph: the loader routes each edge to both ends): ``SSSPLoaded`` with unit weights,
  so each block searches its own edges to the end in one superstep (a breadth-first traversal)
  and only edges that leave the block carry depths; one worker needs one superstep whatever the
  diameter.
- ``LCCLoaded``: ``N(v)`` = in- plus out-neighbours without ``v``; ``lcc(v)`` = directed edges
  among ``N(v)`` / (|N(v)| (|N(v)| - 1)). Steps: 0 out-edges announce themselves (in-neighbours),
  1 ``N(v)`` with direction codes and degrees to neighbouring blocks, 2 wedges, 3 closing checks
  and triangle credits, 4 the coefficient.

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
that closed a triangle of it); wedges go out in messages of at most ``WEDGE_CHUNK`` wedges.
Memory per block: its neighbour entries (in + out, ~2x its out-edges) and one chunk of wedges.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import Context, Message
from .block_kernels import components
from .graph_blocks import BLOCK_TAG, GraphIO, LoadedBlock, LocalGraph, SSSPLoaded, _concat, _Split, pack_keys
from .graphalytics import UNREACHABLE

__all__ = ["UNREACHABLE", "BFSLoaded", "LCCLoaded", "WCCComponentsLoaded", "WEDGE_CHUNK"]

#: At most this many wedges per message (bounds the memory of LCC's steps 2 and 3).
WEDGE_CHUNK = 1 << 21
_POPCOUNT = np.array([0, 1, 1, 2], dtype=np.int8)  # code bit 1: v -> x exists, bit 2: x -> v exists


def _send_by_block(ctx: Context, g: LocalGraph, blk: np.ndarray, cols: dict[str, np.ndarray]) -> None:
    """Send the rows of ``cols`` (key columns packed already) to the block in ``blk`` of each row."""
    if len(g.blocks) == 1:
        if len(blk):
            ctx.send(g.blocks[0], cols, tag=BLOCK_TAG)
        return
    order = np.argsort(blk, kind="stable")
    bounds = np.searchsorted(blk[order], np.arange(len(g.blocks) + 1))
    for b in range(len(g.blocks)):
        sel = order[bounds[b]:bounds[b + 1]]
        if sel.size:
            ctx.send(g.blocks[b], {k: v[sel] for k, v in cols.items()}, tag=BLOCK_TAG)


def _integer_ids(keys: np.ndarray) -> np.ndarray:
    """The integer values of int64-coded (all-integer) ids."""
    from ..jobs.graphload import decode_keys  # the key codes live with the loader

    return decode_keys(keys).astype(np.int64) if len(keys) else np.empty(0, np.int64)


def _by_sender(messages: list[Message]) -> list[Message]:
    """``messages`` in sender order: the same order every step, whatever the arrival order."""
    return sorted(messages, key=lambda m: m.src)


def _announce_in_edges(ctx: Context, g: LocalGraph, skip_loops: bool) -> None:
    """Send every out-edge (src key, dst key) to the block of its destination."""
    rows = g.src_rows()
    dst = g.targets[g.slot]
    if skip_loops:
        keep = np.flatnonzero(g.own[rows] != dst)
        rows, dst, blk = rows[keep], dst[keep], g.target_block[g.slot[keep]]
    else:
        blk = g.target_block[g.slot]
    _send_by_block(ctx, g, blk, {"dst": pack_keys(dst), "src": pack_keys(g.own[rows])})


def _neighbour_entries(g: LocalGraph, messages: list[Message]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(local row, neighbour key, neighbour's block, code 1 out / 2 in) of every out-edge and of
    every in-edge announced in ``messages``."""
    index = {b: i for i, b in enumerate(g.blocks)}
    msgs = [m for m in _by_sender(messages) if "src" in m.payload]
    in_dst = _concat(msgs, "dst", g.own.dtype, keys=True)
    in_src = _concat(msgs, "src", g.own.dtype, keys=True)
    in_blk = np.repeat(np.array([index[m.src] for m in msgs], dtype=np.int16),
                       [len(m.payload["dst"]) for m in msgs]) if msgs else np.empty(0, np.int16)
    rows = np.concatenate([g.src_rows().astype(np.int64), g.local(in_dst).astype(np.int64)])
    keys = np.concatenate([g.targets[g.slot], in_src]) if len(in_src) else g.targets[g.slot]
    blk = np.concatenate([g.target_block[g.slot], in_blk]).astype(np.int16)
    code = np.concatenate([np.ones(len(g.slot), np.int8), np.full(len(in_src), 2, np.int8)])
    return rows, keys, blk, code


# --------------------------------------------------------------------------------------------
# BFS
# --------------------------------------------------------------------------------------------
class BFSLoaded(SSSPLoaded):
    """BFS for a whole partition; the depths of ``BFSVertex``. ``source_name``: the source id.

    SSSP with every edge at 1.0 (block-centric: a block's internal edges are searched to the end
    in one superstep, by a breadth-first traversal), depths reported as integers."""

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
# WCC, block-centric
# --------------------------------------------------------------------------------------------
class WCCComponentsLoaded(LoadedBlock):
    """Weakly connected components over edges loaded both ways, block-centric: the components
    *inside* the block are found once (``block_kernels.components``: scipy's labelling, or hooking
    and pointer jumping in numpy), a label that arrives spreads over a whole local component at once, and
    only edges that leave the block carry messages; on one worker the job takes one step whatever
    the diameter. The label is the smallest member: the smallest id string (``numeric=False``:
    the keys), or the numerically smallest id when every id is an integer (``numeric=True``,
    Graphalytics' naming)."""

    state_fields = (*LoadedBlock.state_fields, "boundary_rows", "boundary_slots", "comp", "numeric")

    def __init__(self, id: str, io: GraphIO, numeric: bool = False) -> None:
        super().__init__(id, io)
        self.numeric = numeric

    def loaded(self, ctx: Context) -> None:
        g = self.g
        assert g is not None
        self.value = _integer_ids(g.own) if self.numeric and g.own.dtype.kind != "S" else g.own.copy()

    def _components(self) -> None:
        """The components inside the block (step 0: processing, not loading)."""
        g = self.g
        assert g is not None
        sp = _Split(g, g.blocks.index(self.id))  # loaded both ways: the internal CSR is symmetric
        self.comp = components(sp.indptr, sp.indices, symmetric=True)
        self.boundary_rows = np.repeat(np.arange(len(g.own), dtype=np.int32), np.diff(sp.b_indptr))
        self.boundary_slots = sp.b_slot
        g.slot, g.indptr = g.slot[:0], g.indptr[:1]  # the boundary is all that is needed from here

    def run(self, ctx: Context, messages: list[Message], s: int) -> None:
        from .graph_blocks import _send_min, group_min

        if s == 0:
            self._components()
        g, label, comp = self.g, self.value, self.comp
        assert g is not None
        best = label.copy()  # indexed by row; what matters is the value at each component's root
        if s == 0:
            group_min(comp, label, best)  # every root takes its component's smallest label
            label[:] = best[comp]
            changed = np.ones(len(label), dtype=bool)
        else:
            text = label.dtype.kind == "S"
            vals = _concat(messages, "label", label.dtype, keys=True) if text else _concat(messages, "label", label.dtype)
            roots = group_min(comp[g.local(_concat(messages, "dst", g.own.dtype, keys=True))], vals, best)
            lowered = np.zeros(len(label), dtype=bool)
            lowered[roots] = True
            changed = lowered[comp]
            label[changed] = best[comp[changed]]
            if roots.size:
                ctx.aggregate("updated", int(np.count_nonzero(changed)))
        sel = np.flatnonzero(changed[self.boundary_rows])
        if sel.size:
            _send_min(ctx, g, self.boundary_slots[sel], label[self.boundary_rows[sel]], "label")
        ctx.vote_to_halt()

    def result(self) -> dict[str, Any]:
        g = self.g
        if g is None:
            return {"ids": [], "values": np.zeros(0)}
        return self.out.result(g.own, self.value, labels=not (self.numeric and g.own.dtype.kind != "S"))


# --------------------------------------------------------------------------------------------
# LCC
# --------------------------------------------------------------------------------------------
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

    state_fields = (*LoadedBlock.state_fields, "closing_keys", "closing_mult", "code", "nb", "nb_blk", "nb_indptr", "tri")

    def loaded(self, ctx: Context) -> None:
        g = self.g
        assert g is not None
        self.value = np.zeros(len(g.own))
        self.nb_indptr = np.zeros(len(g.own) + 1, dtype=np.int64)
        self.nb = g.own[:0]                        # N(v) of every own row (keys), by (row, key)
        self.nb_blk = np.empty(0, dtype=np.int16)  # the block of each entry
        self.code = np.empty(0, dtype=np.int8)     # direction code of each entry
        self.closing_keys = np.empty(0, dtype=np.int64)  # step 2 -> 3: edges x - w, w ranked above x
        self.closing_mult = np.empty(0, dtype=np.int8)   # (row of x << 32 | slot of w) and their edge counts
        self.tri = np.zeros(len(g.own), dtype=np.int64)  # step 3 -> 4: triangle credits summed here

    def _me(self) -> int:
        assert self.g is not None
        return self.g.blocks.index(self.id)

    def run(self, ctx: Context, messages: list[Message], s: int) -> None:
        g = self.g
        assert g is not None
        if s == 0:  # out-edges announce themselves: in-neighbours
            _announce_in_edges(ctx, g, skip_loops=True)
        elif s == 1:
            self._neighbours(ctx, messages)
        elif s == 2:
            self._wedges(ctx, messages)
        elif s == 3:
            self._close(ctx, messages)
        else:
            tri = self.tri
            for m in messages:
                np.add.at(tri, m.payload["row"].astype(np.int64), m.payload["c"])
            deg = np.diff(self.nb_indptr)
            denom = deg * (deg - 1)
            self.value = np.where(deg > 1, tri / np.maximum(denom, 1), 0.0)
            ctx.vote_to_halt()

    def _neighbours(self, ctx: Context, messages: list[Message]) -> None:
        """N(v) with direction codes (bit 1 out, bit 2 in), deduplicated; degrees and slots to
        neighbouring blocks."""
        g = self.g
        assert g is not None
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
        g.slot, g.targets, g.target_block, g.weight = g.slot[:0], g.targets[:0], g.target_block[:0], None
        deg = np.diff(self.nb_indptr)
        w, me = len(g.blocks), self._me()
        for b in np.unique(self.nb_blk).tolist():
            r = np.unique(row[self.nb_blk == b])
            ctx.send(g.blocks[b], {"ids": pack_keys(g.own[r]), "deg": deg[r], "slot": _small(r * w + me)},
                     tag=BLOCK_TAG)

    def _wedges(self, ctx: Context, messages: list[Message]) -> None:
        """Each pair of higher-ranked neighbours (x, w), rank x < rank w, to the block of x;
        rank = (degree, slot): a total order every block computes alike."""
        g = self.g
        assert g is not None
        rows_n, w_n, me = len(g.own), len(g.blocks), self._me()
        ids = _concat(messages, "ids", g.own.dtype, keys=True)
        by_id = np.argsort(ids, kind="stable")
        at = by_id[np.searchsorted(ids[by_id], self.nb)] if self.nb.size else by_id[:0]
        nb_deg = _concat(messages, "deg", np.int64)[at].astype(np.int64)
        nb_slot = _concat(messages, "slot", np.int64)[at].astype(np.int64)
        deg = np.diff(self.nb_indptr)
        row = np.repeat(np.arange(rows_n, dtype=np.int64), deg)
        own_rank = (deg << 32) | (np.arange(rows_n, dtype=np.int64) * w_n + me)
        nb_rank = (nb_deg << 32) | nb_slot
        higher = np.flatnonzero(nb_rank > own_rank[row])
        higher = higher[np.lexsort((nb_rank[higher], row[higher]))]  # by row, then rank
        hrow, hslot = row[higher], nb_slot[higher]
        hmult = _POPCOUNT[self.code[higher]]
        self.closing_keys, self.closing_mult = (hrow << 32) | hslot, hmult
        self.nb, self.nb_blk, self.code = self.nb[:0], self.nb_blk[:0], self.code[:0]
        own_slot = np.arange(rows_n, dtype=np.int64) * w_n + me
        counts = np.bincount(hrow, minlength=rows_n)
        row_start = np.concatenate(([0], np.cumsum(counts)))
        cum = np.cumsum(counts * (counts - 1) // 2)
        lo = 0
        while lo < rows_n:  # rows [lo, hi) with at most WEDGE_CHUNK wedges (or one row)
            base = cum[lo - 1] if lo else 0
            hi = max(int(np.searchsorted(cum, base + WEDGE_CHUNK, side="right")), lo + 1)
            per_entry = np.arange(row_start[lo], row_start[hi])
            lo = hi
            if not per_entry.size:
                continue
            per = row_start[hrow[per_entry] + 1] - per_entry - 1  # pairs (i, j > i) within the row
            i = np.repeat(per_entry, per)
            if not i.size:
                continue
            j = np.arange(i.size) - np.repeat(np.cumsum(per) - per, per) + i + 1  # i ranks below j
            x = hslot[i]
            _send_by_block(ctx, g, (x % w_n).astype(np.int16),
                           {"x": _small(x), "w": _small(hslot[j]), "v": _small(own_slot[hrow[i]]),
                            "m": (hmult[i] * 4 + hmult[j]).astype(np.int8)})

    def _close(self, ctx: Context, messages: list[Message]) -> None:
        """Close the wedges x-w: credit v with the x-w edges, x with v-w, w with v-x. Credits of
        this block's own vertices (every x) are summed here; the others per vertex, then sent."""
        g = self.g
        assert g is not None
        w_n, me, rows_n = len(g.blocks), self._me(), len(g.own)
        closing = _KeySet(self.closing_keys, self.closing_mult)
        self.closing_keys, self.closing_mult = self.closing_keys[:0], self.closing_mult[:0]
        tri = np.zeros(rows_n, dtype=np.float64)  # exact: integer counts < 2^53
        slots, credits = [], []
        for msg in messages:
            p = msg.payload
            x_row = p["x"].astype(np.int64)
            if w_n > 1:
                x_row //= w_n
            mxw = closing.get((x_row << 32) | p["w"])
            found = np.flatnonzero(mxw)
            m = p["m"][found]
            tri += np.bincount(x_row[found], weights=m & 3, minlength=rows_n)
            for slot, credit in ((p["v"][found], mxw[found]), (p["w"][found], m >> 2)):
                if w_n == 1:
                    tri += np.bincount(slot, weights=credit, minlength=rows_n)
                else:
                    slots.append(slot.astype(np.int64))
                    credits.append(credit)
        self.tri = tri.astype(np.int64)
        if not slots:
            return
        slot, credit = np.concatenate(slots), np.concatenate(credits).astype(np.int64)
        del slots, credits
        blk = slot % w_n
        for b in np.flatnonzero(np.bincount(blk, minlength=w_n)).tolist():
            sel = np.flatnonzero(blk == b)
            total = np.bincount(slot[sel] // w_n, weights=credit[sel])
            if b == me:
                self.tri[:len(total)] += total.astype(np.int64)
                continue
            r = np.flatnonzero(total)
            ctx.send(g.blocks[b], {"row": _small(r), "c": total[r].astype(np.int64)}, tag=BLOCK_TAG)
