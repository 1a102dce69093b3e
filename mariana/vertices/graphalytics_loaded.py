"""BFS, CDLP and LCC over a graph loaded in parts (``graph_blocks.LoadedBlock``): each worker holds
only its own vertices and their out-edges, as for PageRank, SSSP and WCC.

The results are those of the vertex programs of ``vertices.graphalytics`` (BFS depths and CDLP
labels exactly, LCC to the bit: integer triangle counts divided once, as there).

- ``BFSLoaded``: hop depths from the source along the loaded out-edges (both ways for an
  undirected graph: the loader routes each edge to both ends). Depths only grow, so each
  destination is sent one message in the whole run (``sent`` marks it at the sender), carrying
  only its key: it arrives in step s with depth s.
- ``CDLPLoaded``: label propagation over in- plus out-neighbours counted per edge (an edge listed
  both ways counts twice, a self-loop counts the vertex's own label twice), ties to the smallest
  label. Step 0 sends every out-edge to its destination's block (the block learns its in-edges);
  then each block sends every neighbouring block, once per step, the labels of its vertices that
  have a neighbour there. Labels are the ids' integer values when every id is an integer (so the
  smallest label is the numerically smallest id, Graphalytics' order), else the ids' UTF-8 bytes
  (string order).
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
Degrees travel once per (vertex, neighbouring block), triangle credits once per (vertex, block
that closed a triangle of it); wedges go out in messages of at most ``WEDGE_CHUNK`` wedges.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import Context, Message
from ..errors import UsageError
from .graph_blocks import BLOCK_TAG, GraphIO, LoadedBlock, LocalGraph, _concat, pack_keys, unpack_keys
from .graphalytics import UNREACHABLE

__all__ = ["UNREACHABLE", "BFSLoaded", "CDLPLoaded", "LCCLoaded", "WCCGraphalyticsLoaded", "WEDGE_CHUNK"]

#: At most this many wedges per message (bounds the memory of LCC's steps 2 and 3).
WEDGE_CHUNK = 1 << 21
_POPCOUNT = np.array([0, 1, 1, 2], dtype=np.int8)  # code bit 1: v -> x exists, bit 2: x -> v exists


def _find_source(block: LoadedBlock, name: str) -> int:
    """The local row of vertex ``name`` (-1 if another block owns it, or no block)."""
    g = block.g
    assert g is not None
    key = block.out.key_of(name)
    i = int(g.local(np.asarray([key], dtype=g.own.dtype))[0]) if len(g.own) else 0
    return i if i < len(g.own) and g.own[i] == key else -1


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
class BFSLoaded(LoadedBlock):
    """BFS for a whole partition; the depths of ``BFSVertex``. ``source_name``: the source id."""

    state_fields = (*LoadedBlock.state_fields, "sent", "source_name", "source_row")

    def __init__(self, id: str, io: GraphIO, source_name: str) -> None:
        super().__init__(id, io)
        self.source_name = source_name

    def loaded(self, ctx: Context) -> None:
        g = self.g
        assert g is not None
        self.value = np.full(len(g.own), UNREACHABLE, dtype=np.int64)
        self.sent = np.zeros(len(g.targets), dtype=bool)
        self.source_row = _find_source(self, self.source_name)
        ctx.aggregate("source_found", int(self.source_row >= 0))

    def run(self, ctx: Context, messages: list[Message], s: int) -> None:
        g, depth = self.g, self.value
        assert g is not None
        if s == 0:
            if not ctx.aggregated("source_found", 0):
                raise UsageError(f"source vertex '{self.source_name}' is not in {self.out.url} ({g.n} vertices)")
            rows = np.array([self.source_row] if self.source_row >= 0 else [], dtype=np.int64)
        else:
            rows = np.unique(g.local(_concat(messages, "dst", g.own.dtype, keys=True)))
            rows = rows[depth[rows] == UNREACHABLE]
            if rows.size:
                ctx.aggregate("updated", int(rows.size))
        depth[rows] = s
        slots = np.unique(g.slot[g.edges_of(rows)])
        slots = slots[~self.sent[slots]]
        if slots.size:
            self.sent[slots] = True
            _send_by_block(ctx, g, g.target_block[slots], {"dst": pack_keys(g.targets[slots])})
        ctx.vote_to_halt()


# --------------------------------------------------------------------------------------------
# WCC named as Graphalytics names components
# --------------------------------------------------------------------------------------------
class WCCGraphalyticsLoaded(LoadedBlock):
    """HashMin over edges loaded both ways, the label being the smallest member in Graphalytics'
    order: the numerically smallest id when every id is an integer (``WCCLoaded`` takes the smallest
    id string, which is the same order for other ids)."""

    state_fields = LoadedBlock.state_fields

    def loaded(self, ctx: Context) -> None:
        g = self.g
        assert g is not None
        self.value = g.own.copy() if g.own.dtype.kind == "S" else _integer_ids(g.own)

    def run(self, ctx: Context, messages: list[Message], s: int) -> None:
        from .graph_blocks import _send_min, group_min

        g, label = self.g, self.value
        assert g is not None
        text = label.dtype.kind == "S"
        if s == 0:
            rows = np.arange(len(g.own))
        else:
            vals = _concat(messages, "label", label.dtype, keys=True) if text else _concat(messages, "label", np.int64)
            rows = group_min(g.local(_concat(messages, "dst", g.own.dtype, keys=True)), vals, label)
            if rows.size:
                ctx.aggregate("updated", int(rows.size))
        e = g.edges_of(rows)
        if e.size:
            src_rows = np.repeat(rows, g.indptr[rows + 1] - g.indptr[rows])
            _send_min(ctx, g, g.slot[e], label[src_rows], "label")
        ctx.vote_to_halt()

    def result(self) -> dict[str, Any]:
        g = self.g
        if g is None:
            return {"ids": [], "values": np.zeros(0)}
        return self.out.result(g.own, self.value, labels=self.value.dtype.kind == "S")


# --------------------------------------------------------------------------------------------
# CDLP
# --------------------------------------------------------------------------------------------
class CDLPLoaded(LoadedBlock):
    """CDLP for a whole partition; the labels of ``CDLPVertex`` (see the module doc)."""

    state_fields = (*LoadedBlock.state_fields, "iterations", "nb_row", "nb_key", "pos", "routes")

    def __init__(self, id: str, io: GraphIO, iterations: int) -> None:
        super().__init__(id, io)
        self.iterations = iterations
        self.routes: list[tuple[str, np.ndarray, np.ndarray | None]] = []
        self.nb_row = np.empty(0, np.int64)  # local row of every neighbour entry (a multiset)
        self.nb_key: np.ndarray | None = None  # its key, until ``pos`` is fixed
        self.pos: np.ndarray | None = None  # where each entry's label sits in a step's messages

    def loaded(self, ctx: Context) -> None:
        g = self.g
        assert g is not None
        self.value = g.own.copy() if g.own.dtype.kind == "S" else _integer_ids(g.own)

    def run(self, ctx: Context, messages: list[Message], step: int) -> None:
        g, label = self.g, self.value
        assert g is not None
        if step == 0:
            if self.iterations > 0:
                _announce_in_edges(ctx, g, skip_loops=False)
            ctx.vote_to_halt()
            return
        s = step - 1  # rounds: labels sent in round s are taken up in round s + 1
        if s == 0:
            rows, keys, blk, _ = _neighbour_entries(g, messages)
            self.nb_row, self.nb_key = rows, keys
            for b in np.unique(blk).tolist():
                r = np.unique(rows[blk == b])
                self.routes.append((g.blocks[b], r, pack_keys(g.own[r])))
            g.slot, g.targets, g.target_block, g.weight = g.slot[:0], g.targets[:0], g.target_block[:0], None
        elif messages:
            msgs = _by_sender(messages)
            text = label.dtype.kind == "S"
            if self.pos is None:
                ids = _concat(msgs, "ids", g.own.dtype, keys=True)
                order = np.argsort(ids, kind="stable")
                assert self.nb_key is not None
                self.pos = order[np.searchsorted(ids[order], self.nb_key)]
                self.nb_key = None
            lab = (_concat(msgs, "label", label.dtype, keys=True) if text else _concat(msgs, "label", np.int64))[self.pos]
            self._adopt(ctx, lab)
        if s < self.iterations:
            for i, (block, rows, ids) in enumerate(self.routes):
                payload: dict[str, Any] = {"label": pack_keys(label[rows]) if label.dtype.kind == "S" else label[rows]}
                if ids is not None:
                    payload["ids"] = ids
                    self.routes[i] = (block, rows, None)  # sent once
                ctx.send(block, payload, tag=BLOCK_TAG)
        ctx.vote_to_halt()

    def _adopt(self, ctx: Context, lab: np.ndarray) -> None:
        """Every row with neighbours takes their most frequent label, the smallest of a tie."""
        label = self.value
        if not lab.size:
            return
        uniq, code = np.unique(lab, return_inverse=True)
        u = np.int64(len(uniq))
        key = np.sort(self.nb_row * u + code.reshape(-1))
        first = np.ones(key.size, dtype=bool)
        first[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(first)
        count = np.diff(np.append(starts, key.size))
        key = key[starts]
        row, lab_code = key // u, key % u
        row_start = np.ones(row.size, dtype=bool)
        row_start[1:] = row[1:] != row[:-1]
        bounds = np.flatnonzero(row_start)
        top = np.maximum.reduceat(count, bounds)
        group = np.cumsum(row_start) - 1
        best = np.flatnonzero(count == top[group])
        keep = np.ones(best.size, dtype=bool)
        keep[1:] = group[best[1:]] != group[best[:-1]]
        best = best[keep]
        rows, new = row[best], uniq[lab_code[best]]
        changed = int(np.count_nonzero(label[rows] != new))
        if changed:
            ctx.aggregate("updated", changed)
        label[rows] = new

    def result(self) -> dict[str, Any]:
        g = self.g
        if g is None:
            return {"ids": [], "values": np.zeros(0)}
        return self.out.result(g.own, self.value, labels=self.value.dtype.kind == "S")


# --------------------------------------------------------------------------------------------
# LCC
# --------------------------------------------------------------------------------------------
class LCCLoaded(LoadedBlock):
    """LCC for a whole partition with degree-ordered wedge checks (see the module doc); the values
    of ``LCCVertex`` to the bit."""

    state_fields = (*LoadedBlock.state_fields, "code", "nb", "nb_blk", "nb_indptr")

    def loaded(self, ctx: Context) -> None:
        g = self.g
        assert g is not None
        self.value = np.zeros(len(g.own))
        self.nb_indptr = np.zeros(len(g.own) + 1, dtype=np.int64)
        self.nb = g.own[:0]                        # N(v) of every own row, sorted by key per row
        self.nb_blk = np.empty(0, dtype=np.int16)  # the block of each entry
        self.code = np.empty(0, dtype=np.int8)     # direction code of each entry

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
            tri = np.zeros(len(g.own), dtype=np.int64)
            if messages:
                np.add.at(tri, g.local(_concat(messages, "dst", g.own.dtype, keys=True)), _concat(messages, "c", np.int64))
            deg = np.diff(self.nb_indptr)
            denom = deg * (deg - 1)
            self.value = np.where(deg > 1, tri / np.maximum(denom, 1), 0.0)
            self.nb, self.nb_blk, self.code = self.nb[:0], self.nb_blk[:0], self.code[:0]
            ctx.vote_to_halt()

    def _neighbours(self, ctx: Context, messages: list[Message]) -> None:
        """N(v) with direction codes (bit 1 out, bit 2 in), deduplicated; degrees to neighbouring blocks."""
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
        for b in np.unique(self.nb_blk).tolist():
            r = np.unique(row[self.nb_blk == b])
            ctx.send(g.blocks[b], {"ids": pack_keys(g.own[r]), "deg": deg[r]}, tag=BLOCK_TAG)

    def _wedges(self, ctx: Context, messages: list[Message]) -> None:
        """Each pair of higher-ranked neighbours (x, w), rank x < rank w, to the block of x."""
        g = self.g
        assert g is not None
        rows_n = len(g.own)
        ids = _concat(messages, "ids", g.own.dtype, keys=True)
        degs = _concat(messages, "deg", np.int64)
        by_id = np.argsort(ids, kind="stable")
        nb_deg = degs[by_id[np.searchsorted(ids[by_id], self.nb)]] if self.nb.size else degs[:0]
        deg = np.diff(self.nb_indptr)
        row = np.repeat(np.arange(rows_n), deg)
        own_deg, own_key = deg[row], g.own[row]
        higher = np.flatnonzero((nb_deg > own_deg) | ((nb_deg == own_deg) & (self.nb > own_key)))
        # the higher neighbours of each row in rank order (degree, then id)
        rank_in_row = np.argsort(self.nb[higher], kind="stable")
        rank_in_row = rank_in_row[np.argsort(nb_deg[higher][rank_in_row], kind="stable")]
        higher = higher[rank_in_row[np.argsort(row[higher][rank_in_row], kind="stable")]]
        hrow, hnb, hblk = row[higher], self.nb[higher], self.nb_blk[higher]
        hmult = _POPCOUNT[self.code[higher]]
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
            _send_by_block(ctx, g, hblk[i], {"dst": pack_keys(hnb[i]), "w": pack_keys(hnb[j]), "wb": hblk[j],
                                             "v": pack_keys(g.own[hrow[i]]),
                                             "m": (hmult[i] * 4 + hmult[j]).astype(np.int8)})

    def _close(self, ctx: Context, messages: list[Message]) -> None:
        """Close the wedges x-w: credit v with the x-w edges, x with v-w, w with v-x."""
        g = self.g
        assert g is not None
        index = {b: i for i, b in enumerate(g.blocks)}
        uniq = np.unique(self.nb)
        u = np.int64(max(len(uniq), 1))
        row = np.repeat(np.arange(len(g.own), dtype=np.int64), np.diff(self.nb_indptr))
        closing = row * u + np.searchsorted(uniq, self.nb)  # sorted: entries are by (row, key)
        mult = _POPCOUNT[self.code].astype(np.int64)
        keys, blks, credits = [], [], []
        for msg in messages:
            p = msg.payload
            x, w, v = unpack_keys(p["dst"]), unpack_keys(p["w"]), unpack_keys(p["v"])
            m = p["m"].astype(np.int64)
            wc = np.minimum(np.searchsorted(uniq, w), len(uniq) - 1) if len(uniq) else np.zeros(len(w), np.int64)
            probe = g.local(x).astype(np.int64) * u + wc
            at = np.minimum(np.searchsorted(closing, probe), max(len(closing) - 1, 0))
            found = np.flatnonzero((uniq[wc] == w) & (closing[at] == probe)) if len(closing) else at[:0]
            mxw = mult[at[found]]
            keys += [v[found], x[found], w[found]]
            blks += [np.full(found.size, index[msg.src], np.int16), np.full(found.size, index[self.id], np.int16),
                     p["wb"][found].astype(np.int16)]
            credits += [mxw, m[found] & 3, m[found] >> 2]
        self.nb, self.nb_blk, self.code = self.nb[:0], self.nb_blk[:0], self.code[:0]  # step 4 needs the degrees only
        if not keys:
            return
        key, blk, credit = np.concatenate(keys), np.concatenate(blks), np.concatenate(credits)
        if not key.size:
            return
        order = np.argsort(key, kind="stable")
        key, blk, credit = key[order], blk[order], credit[order]
        first = np.ones(key.size, dtype=bool)
        first[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(first)
        total = np.add.reduceat(credit, starts)
        nz = np.flatnonzero(total)
        _send_by_block(ctx, g, blk[starts][nz], {"dst": pack_keys(key[starts][nz]), "c": total[nz]})
