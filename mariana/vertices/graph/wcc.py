"""Weakly connected components, each labelled by its smallest member (HashMin).

Two programs with the same labels: ``WCCVertex``, the classic Pregel vertex (``mode=vertex``,
the tests' oracle), and ``WCCComponentsLoaded``, a block program over edges loaded both ways
(``block.LoadedBlock``) that finds the components inside its block once and sends labels only
over edges that leave the block (``mode=block``). WCC only takes minima, which are exact.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ...engine import Context, Message, Vertex
from ...storage.graphalytics import output_format
from ...storage.ids import Ids, label_counts
from .algorithm import Algorithm, MIN_PROPAGATION
from .block import GraphIO, LoadedBlock, _concat, _integer_ids, _send_min, _Split, group_min
from .kernels import components, entry_value_pieces, import_traversals

__all__ = ["WCCVertex", "WCCComponentsLoaded", "ALGORITHM"]


class WCCVertex(Vertex):
    """HashMin label propagation over undirected edges: the label is the smallest id seen."""

    state_fields = Vertex.state_fields  # its whole state is its value

    def __init__(self, id: str, edges: list[tuple[str, Any]]) -> None:
        super().__init__(id, id, edges)

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        if ctx.superstep == 0:
            changed = True
        else:
            best = min(m.payload for m in messages)
            changed = best < self.value
            if changed:
                self.value = best
                ctx.aggregate("updated", 1)
        if changed:
            for dst, _ in self.edges:
                ctx.send(dst, self.value)
        ctx.vote_to_halt()


class WCCComponentsLoaded(LoadedBlock):
    """Weakly connected components over edges loaded both ways, block-centric: the components
    *inside* the block are found once (``kernels.components``: scipy's labelling, or hooking
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


# --------------------------------------------------------------------------------------------
# The algorithm as the framework runs it
# --------------------------------------------------------------------------------------------
def _summarize(config: dict[str, Any], ids: Ids, labels: Ids | np.ndarray) -> dict[str, Any]:
    names, counts = label_counts(labels)
    return {"labels": names, "counts": counts}


def _report(count: int, summaries: list[dict[str, Any]], config: dict[str, Any], result: Any,
            loading: int) -> tuple[list[str], dict[str, Any]]:
    sizes_counter: Counter[str] = Counter()
    for s in summaries:
        sizes_counter.update(dict(zip((str(x) for x in s["labels"]), s["counts"])))
    sizes = sizes_counter.most_common()
    largest = sorted(sizes, key=lambda c: (-c[1], c[0]))[: config["top"]]
    lines = [f"wcc: {len(sizes)} component(s) over {count} vertices, {result.supersteps} supersteps"]
    lines += [f"{label:<24} {size} vertices" for label, size in largest]
    return lines, {"vertices": count, "components": len(sizes), "largest": largest}


ALGORITHM = Algorithm(
    name="wcc",
    description="weakly connected components of an edge list read as undirected (HashMin)",
    # Graphalytics names a component by its numerically smallest member
    block=lambda bid, io, c: WCCComponentsLoaded(bid, io, output_format(c) == "graphalytics"),
    vertex=lambda edges, c: WCCVertex,
    edges=lambda edges, c: edges.undirected(),
    collected=lambda rows, c: [(vid, str(label)) for vid, label in rows],
    symmetric=lambda c: True,
    summarize=_summarize,
    report=_report,
    noun="labels",
    value="component",
    **MIN_PROPAGATION,
)
