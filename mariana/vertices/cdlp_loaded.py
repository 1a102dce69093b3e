"""CDLP over a graph loaded in parts (``graph_blocks.LoadedBlock``): each worker holds only its
own vertices and their out-edges; the labels are exactly those of ``vertices.graphalytics.CDLPVertex``.

``CDLPLoaded``: label propagation over in- plus out-neighbours counted per edge (an edge listed
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
from .graph_blocks import BLOCK_TAG, GraphIO, LoadedBlock, _concat, pack_keys
from .graphalytics_loaded import _announce_in_edges, _by_sender, _integer_ids, _neighbour_entries

__all__ = ["CDLPLoaded"]


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
