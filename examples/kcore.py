"""k-core decomposition as a user's own graph job, in both of the engine's modes: every vertex's
core number (the largest k such that the vertex is in a subgraph where every vertex has at least
k neighbours), as ``networkx.core_number`` gives it. Edges are undirected; self-loops and repeated
edges do not count. The guide walks through it: docs/block-centric.md.

    mariana run kcore:ALGORITHM --set graph=edges.txt                # block mode (the default)
    mariana run kcore:ALGORITHM --set graph=edges.txt --set mode=vertex --workers 2
"""

from __future__ import annotations

from typing import Any

import numpy as np

import mariana
from mariana.jobs.graphjob import graph_job
from mariana.partitioner.fragment import BLOCK_TAG
from mariana.storage.ids import Ids, pack_keys, unpack_keys
from mariana.vertices.graph.algorithm import Algorithm
from mariana.vertices.graph.block import LoadedBlock
from mariana.vertices.graph.kernels import row_edges


def h_index(values: Any, cap: int) -> int:
    """The largest h <= cap such that at least h of ``values`` are >= h."""
    h = 0
    for v in sorted(values, reverse=True):
        if min(v, cap) <= h:
            break
        h += 1
    return h


class CoreVertex(mariana.Vertex):
    """Vertex mode (Montresor, De Pellegrini and Miorandi's distributed k-core): the estimate
    starts at the degree and drops to the h-index of the neighbours' estimates, capped at its own,
    until no estimate changes."""

    state_fields = (*mariana.Vertex.state_fields, "heard")

    def __init__(self, id: str, edges: list[tuple[str, Any]]) -> None:
        super().__init__(id, 0, sorted({(dst, None) for dst, _ in edges if dst != id}))
        self.heard: dict[str, int] = {}  # each neighbour's last estimate

    def compute(self, ctx: mariana.Context, messages: list[mariana.Message]) -> None:
        if ctx.superstep == 0:
            self.value = len(self.edges)
            ctx.send_to_neighbors(self.value)
        else:
            for m in messages:
                self.heard[m.src] = m.payload
            core = h_index(self.heard.values(), self.value)
            if core < self.value:
                self.value = core
                ctx.aggregate("lowered", 1)
                ctx.send_to_neighbors(core)
        ctx.vote_to_halt()


def local_cores(bound: np.ndarray, indptr: np.ndarray, nbr: np.ndarray, b_row: np.ndarray,
                b_core: np.ndarray) -> np.ndarray:
    """The largest ``core <= bound`` in which every row has at least ``core[row]`` neighbours of
    core >= ``core[row]``: the rows' neighbours in this block (a CSR ``indptr``, ``nbr``) with the
    cores found here, those in other blocks (an edge from row ``b_row[i]`` to a neighbour last
    heard at ``b_core[i]``) as heard. Peeling, level k = 1, 2, ...: a row whose ``bound`` is
    below k, or with fewer than k neighbours left at level k, leaves with core k - 1, and its
    leaving lowers its neighbours' counts within the same level."""
    n = len(bound)
    core = bound.copy()
    alive = np.ones(n, dtype=bool)
    count = np.diff(indptr) + np.bincount(b_row, minlength=n)  # neighbours still counted at level k
    order = np.argsort(b_core, kind="stable")  # the other blocks' neighbours leave by their heard core
    b_sorted = b_core[order]
    heard_gone, left, k = 0, n, 1
    while left:
        below = int(np.searchsorted(b_sorted, k))  # heard cores below k no longer count at level k
        np.subtract.at(count, b_row[order[heard_gone:below]], 1)
        heard_gone = below
        leave = np.flatnonzero(alive & ((count < k) | (bound < k)))
        while leave.size:
            alive[leave] = False
            core[leave] = np.minimum(bound[leave], k - 1)
            left -= leave.size
            hit = nbr[row_edges(indptr, leave)[1]]
            np.subtract.at(count, hit, 1)
            hit = hit[alive[hit]]
            leave = np.unique(hit[count[hit] < k])
        k += 1
    return core


class CoreBlock(LoadedBlock):
    """Block mode: one vertex per worker holding its part of the graph (``self.g``, a
    ``LocalGraph``). Each superstep peels the whole block at once (``local_cores``), taking the
    neighbours in other blocks at their last heard core, and tells the other blocks only the
    cores that went down; on one worker the job takes one superstep."""

    state_fields = (*LoadedBlock.state_fields, "heard")
    #: built from ``self.g`` on first use (after a restore too), so not checkpointed
    derived_fields = {"_edges": None}

    def loaded(self, ctx: mariana.Context) -> None:
        g = self.g
        rows = g.src_rows()
        keep = g.targets[g.slot] != g.own[rows]  # no self-loops, and each neighbour once
        pairs = np.unique(rows[keep].astype(np.int64) * len(g.targets) + g.slot[keep])
        rows, g.slot = pairs // len(g.targets), (pairs % len(g.targets)).astype(g.slot.dtype)
        g.indptr = np.searchsorted(rows, np.arange(len(g.own) + 1))
        self.value = np.diff(g.indptr)  # the degree: the first bound on the core
        self.heard = np.full(len(g.targets), np.iinfo(np.int64).max)  # by neighbour: its last core heard

    def _prepare(self) -> None:
        """Split the edges into the block's own (a CSR of local rows) and those leaving it."""
        g = self.g
        rows = g.src_rows()
        inside = g.target_block[g.slot] == g.blocks.index(self.id)
        indptr = np.concatenate(([0], np.cumsum(np.bincount(rows[inside], minlength=len(g.own)))))
        nbr = g.local(g.targets[g.slot[inside]])
        b_row, b_slot = rows[~inside], g.slot[~inside]
        to_block = g.target_block[b_slot]
        tell = [np.unique(b_row[to_block == b]) for b in range(len(g.blocks))]  # rows with a neighbour in block b
        self._edges = (indptr, nbr, b_row, b_slot, tell)

    def run(self, ctx: mariana.Context, messages: list[mariana.Message], step: int) -> None:
        if self._edges is None:
            self._prepare()
        g = self.g
        indptr, nbr, b_row, b_slot, tell = self._edges
        for m in messages:  # cores of neighbours in other blocks that went down
            self.heard[np.searchsorted(g.targets, unpack_keys(m.payload["src"]))] = m.payload["core"]
        core = local_cores(self.value, indptr, nbr, b_row, self.heard[b_slot])
        lowered = core < self.value
        if step > 0:
            ctx.aggregate("lowered", int(np.count_nonzero(lowered)))
        else:
            lowered[:] = True  # the first estimates: every one is news
        self.value = core
        for b, rows in enumerate(tell):
            rows = rows[lowered[rows]]
            if rows.size:
                ctx.send(g.blocks[b], {"src": pack_keys(g.own[rows]), "core": core[rows]}, tag=BLOCK_TAG)
        ctx.vote_to_halt()


def summarize(config: dict[str, Any], ids: Ids, cores: np.ndarray) -> dict[str, Any]:
    return {"max_core": int(cores.max(initial=0))}


def report(count: int, summaries: list[dict[str, Any]], config: dict[str, Any], result: mariana.RunResult,
           loading: int) -> tuple[list[str], dict[str, Any]]:
    top = max((s["max_core"] for s in summaries), default=0)
    return [f"kcore: {count} vertices, largest core {top}, {result.supersteps} supersteps"], \
        {"vertices": count, "max_core": top}


ALGORITHM = Algorithm(
    name="kcore",
    description="core number of every vertex of an undirected edge list",
    block=lambda bid, io, config: CoreBlock(bid, io),
    vertex=lambda edges, config: CoreVertex,
    symmetric=lambda config: True,  # block mode: every edge loaded both ways
    edges=lambda edges, config: edges.undirected(),  # vertex mode: the same
    summarize=summarize,
    report=report,
    noun="cores",
    value="core",
    aggregators=(("lowered", "sum"),),
    progress_metric="lowered",
)
JOB = graph_job(ALGORITHM)
