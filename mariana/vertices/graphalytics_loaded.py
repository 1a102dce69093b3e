"""BFS and WCC over a graph loaded in parts (``graph_blocks.LoadedBlock``): each worker holds
only its own vertices and their out-edges, as for PageRank and SSSP, and the helpers the
Graphalytics blocks share (CDLP: ``vertices.cdlp_loaded``; LCC: ``vertices.lcc_loaded``).

The results are those of the vertex programs of ``vertices.graphalytics`` (BFS depths exactly).

- ``BFSLoaded``: hop depths from the source along the loaded out-edges (both ways for an
  undirected graph: the loader routes each edge to both ends): ``SSSPLoaded`` with unit weights,
  so each block searches its own edges to the end in one superstep (a breadth-first traversal)
  and only edges that leave the block carry depths; one worker needs one superstep whatever the
  diameter.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import Context, Message
from .block_kernels import components, entry_value_pieces, import_traversals
from .graph_blocks import GraphIO, LoadedBlock, LocalGraph, SSSPLoaded, _concat, _send_by_block, _Split, pack_keys
from .graphalytics import UNREACHABLE

__all__ = ["UNREACHABLE", "BFSLoaded", "WCCComponentsLoaded"]


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

    state_fields = (*LoadedBlock.state_fields, "boundary_indptr", "boundary_slots", "comp", "numeric")

    def __init__(self, id: str, io: GraphIO, numeric: bool = False) -> None:
        super().__init__(id, io)
        self.numeric = numeric
        import_traversals()

    def loaded(self, ctx: Context) -> None:
        g = self.g
        assert g is not None
        self.value = _integer_ids(g.own) if self.numeric and g.own.dtype.kind != "S" else g.own.copy()

    def _components(self) -> None:
        """The components inside the block (step 0: processing, not loading)."""
        g = self.g
        assert g is not None
        if len(g.blocks) == 1:  # every edge internal: the slots with the row of each target (only the
            # entries the labelling reads are looked up: few of them on a dense graph)
            cols = None if g.slots_are_rows() else g.local(g.targets)
            self.comp = components(g.indptr, g.slot, symmetric=True, cols=cols)
            self.boundary_indptr, self.boundary_slots = np.zeros(len(g.own) + 1, np.int64), np.empty(0, g.slot.dtype)
            # only the boundary is needed from here (empty copies: a [:0] view keeps the whole array)
            g.slot, g.indptr = np.empty(0, g.slot.dtype), g.indptr[:1].copy()
        else:
            # loaded both ways: the internal CSR is symmetric. The split is made in the graph's
            # slots, which go from the graph before the labelling (the split holds every edge once)
            sp = _Split(g, g.blocks.index(self.id), consume=True)
            g.slot, g.indptr = np.empty(0, g.slot.dtype), g.indptr[:1].copy()
            self.comp = components(sp.indptr, sp.indices, symmetric=True)
            # the boundary edges by row (no row per edge: 4 bytes an edge less for the whole run)
            self.boundary_indptr, self.boundary_slots = sp.b_indptr, sp.b_slot

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
        # the labels of the rows that changed (step 0: all) onto their boundary edges, a bounded
        # piece at a time (selected whole, the edges took ~16 bytes each at once: a worker's peak)
        if self.boundary_slots.size:
            pieces = entry_value_pieces(self.boundary_indptr, self.boundary_slots, label, np.flatnonzero(changed))
            _send_min(ctx, g, pieces, label.dtype, "label")
        ctx.vote_to_halt()

    def result(self) -> dict[str, Any]:
        g = self.g
        if g is None:
            return {"ids": [], "values": np.zeros(0)}
        return self.out.result(g.own, self.value, labels=not (self.numeric and g.own.dtype.kind != "S"))
