"""BFS, CDLP and WCC over a graph loaded in parts (``graph_blocks.LoadedBlock``): each worker holds
only its own vertices and their out-edges, as for PageRank, SSSP and WCC.

The results are those of the vertex programs of ``vertices.graphalytics`` (BFS depths and CDLP
labels exactly). LCC's block class is in ``vertices.lcc_loaded``.

- ``BFSLoaded``: hop depths from the source along the loaded out-edges (both ways for an
  undirected graph: the loader routes each edge to both ends): ``SSSPLoaded`` with unit weights,
  so each block searches its own edges to the end in one superstep (a breadth-first traversal)
  and only edges that leave the block carry depths; one worker needs one superstep whatever the
  diameter.
- ``CDLPLoaded``: label propagation over in- plus out-neighbours counted per edge (an edge listed
  both ways counts twice, a self-loop counts the vertex's own label twice), ties to the smallest
  label. Step 0 sends every out-edge to its destination's block (the block learns its in-edges);
  then each block sends every neighbouring block, once per step, the labels of its vertices that
  have a neighbour there. Labels are the ids' integer values when every id is an integer (so the
  smallest label is the numerically smallest id, Graphalytics' order), else the ids' UTF-8 bytes
  (string order).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import Context, Message
from .block_kernels import components
from .graph_blocks import BLOCK_TAG, GraphIO, LoadedBlock, LocalGraph, SSSPLoaded, _concat, _Split, pack_keys
from .graphalytics import UNREACHABLE

__all__ = ["UNREACHABLE", "BFSLoaded", "CDLPLoaded", "WCCComponentsLoaded"]


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
# CDLP
# --------------------------------------------------------------------------------------------
class CDLPLoaded(LoadedBlock):
    """CDLP for a whole partition; the labels of ``CDLPVertex`` (see the module doc)."""

    state_fields = (*LoadedBlock.state_fields, "iterations", "lo", "nb_key", "nb_row", "pos", "routes", "row_key",
                    "span")

    def __init__(self, id: str, io: GraphIO, iterations: int) -> None:
        super().__init__(id, io)
        self.iterations = iterations
        self.routes: list[tuple[str, np.ndarray, np.ndarray | None]] = []
        self.nb_row = np.empty(0, np.int64)  # local row of every neighbour entry (a multiset)
        self.nb_key: np.ndarray | None = None  # its key, until ``pos`` is fixed
        self.pos: np.ndarray | None = None  # where each entry's label sits in a step's messages
        self.lo, self.span = 0, 0  # integer labels: the range of every id (span 0: rank the labels)
        self.row_key: np.ndarray | None = None  # row * span of every entry, in the sort key's dtype

    def loaded(self, ctx: Context) -> None:
        g = self.g
        assert g is not None
        self.value = g.own.copy() if g.own.dtype.kind == "S" else _integer_ids(g.own)
        if self.value.dtype.kind == "i" and len(self.value):  # every label is one of these ids
            ctx.aggregate("cdlp_lo", int(self.value.min()))
            ctx.aggregate("cdlp_hi", int(self.value.max()))

    def run(self, ctx: Context, messages: list[Message], step: int) -> None:
        g, label = self.g, self.value
        assert g is not None
        if step == 0:
            if label.dtype.kind == "i":
                self.lo = int(ctx.aggregated("cdlp_lo", 0))
                self.span = int(ctx.aggregated("cdlp_hi", 0)) - self.lo + 1
            if self.iterations > 0:
                _announce_in_edges(ctx, g, skip_loops=False)
            ctx.vote_to_halt()
            return
        s = step - 1  # rounds: labels sent in round s are taken up in round s + 1
        if s == 0:
            rows, keys, blk, _ = _neighbour_entries(g, messages)
            self.nb_row, self.nb_key = rows, keys
            if 0 < self.span and len(label) * self.span <= 2 ** 62:  # (row, label - lo) in one int
                kt: Any = np.uint32 if len(label) * self.span <= 2 ** 32 else np.int64  # 32-bit keys sort faster
                self.row_key = rows.astype(kt) * kt(self.span)
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
        lo = self.lo
        if self.row_key is not None:  # integer labels in a known range
            uniq, u = None, self.span
            key = np.sort(self.row_key + (lab - lo).astype(self.row_key.dtype))
        else:  # labels ranked first (bytes, or a range too wide)
            uniq, inverse = np.unique(lab, return_inverse=True)
            u = len(uniq)
            kt: Any = np.uint32 if len(label) * u <= 2 ** 32 else np.int64
            key = np.sort(self.nb_row.astype(kt) * kt(u) + inverse.reshape(-1).astype(kt))
        first = np.ones(key.size, dtype=bool)
        first[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(first)
        count = np.diff(np.append(starts, key.size))
        key = key[starts].astype(np.int64)
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
        rows = row[best]
        new = lab_code[best] + lo if uniq is None else uniq[lab_code[best]]
        changed = int(np.count_nonzero(label[rows] != new))
        if changed:
            ctx.aggregate("updated", changed)
        label[rows] = new

    def result(self) -> dict[str, Any]:
        g = self.g
        if g is None:
            return {"ids": [], "values": np.zeros(0)}
        return self.out.result(g.own, self.value, labels=self.value.dtype.kind == "S")
