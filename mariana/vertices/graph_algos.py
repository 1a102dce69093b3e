"""PageRank, single-source shortest paths and weakly connected components as vertex programs.

Each algorithm comes in two forms that give bit-identical results:

- a classic Pregel vertex (``PageRankVertex``, ``SSSPVertex``, ``WCCVertex``): one engine
  vertex per graph vertex, the clearest statement of the algorithm;
- a block vertex (``PageRankBlock``, ``SSSPBlock``, ``WCCBlock``): one engine vertex per
  partition holding its graph vertices as numpy arrays (the block-centric extension of Pregel),
  which exchanges one array message per neighbouring block and is ~250x faster in Python
  (bench/graph_local.py).

Determinism: PageRank sums incoming contributions in ascending source order in both forms
(the block form sorts once, then reuses the permutation) and reduces the dangling mass and the
L1 change with the exact ``fsum`` aggregator, so ranks do not depend on placement or worker
count. SSSP and WCC only take minima, which are exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine import Context, Message, Vertex
from .block_kernels import csr_sum

__all__ = [
    "PageRankVertex", "SSSPVertex", "WCCVertex", "Subgraph", "PageRankBlock", "SSSPBlock", "WCCBlock",
    "pagerank_master",
]

INF = float("inf")
#: Block messages are already combined per destination; no combiner applies to this tag.
BLOCK_TAG = "block"


# --------------------------------------------------------------------------------------------
# Classic vertex programs
# --------------------------------------------------------------------------------------------
class PageRankVertex(Vertex):
    """PageRank as in networkx / LDBC Graphalytics: start at 1/N, spread dangling rank uniformly.

    Edge values are ignored; parallel edges each carry a share. Needs aggregators ``dangling``
    and ``l1`` (both ``fsum``) and ``pagerank_master`` for the ``tol`` stop; ``track_l1=False``
    (used when ``tol=0``, which never stops early) skips the exact L1 reduction.
    """

    __slots__ = ("damping", "iterations", "track_l1")

    state_fields = (*Vertex.state_fields, "damping", "iterations", "track_l1")

    def __init__(self, id: str, edges: list[tuple[str, Any]], damping: float = 0.85, iterations: int = 100,
                 track_l1: bool = True) -> None:
        super().__init__(id, 0.0, edges)
        self.damping = damping
        self.iterations = iterations
        self.track_l1 = track_l1

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        n = ctx.num_vertices
        if ctx.superstep == 0:
            self.value = 1.0 / n
        else:
            incoming = 0.0
            for m in messages:
                incoming += m.payload
            dangling = ctx.aggregated("dangling", 0.0)
            d = self.damping
            new = (1.0 - d) / n + d * (incoming + dangling / n)
            if self.track_l1:
                ctx.aggregate("l1", abs(new - self.value))
            self.value = new
        if ctx.superstep >= self.iterations:
            ctx.vote_to_halt()
            return
        if self.edges:
            share = self.value / len(self.edges)
            for dst, _ in self.edges:
                ctx.send(dst, share)
        else:
            ctx.aggregate("dangling", self.value)


def pagerank_master(tol: float):
    """Master compute: stop once the L1 change of the last update falls below ``tol``."""

    def master(mctx) -> None:
        l1 = mctx.aggregates.get("l1")
        if mctx.superstep >= 2 and l1 is not None and l1 < tol:
            mctx.halt(f"converged: L1 change {l1:.3g} < tol {tol:g}")

    return master


class SSSPVertex(Vertex):
    """Bellman-Ford in supersteps: relax out-edges whenever the distance improves (min combiner)."""

    __slots__ = ("is_source",)

    state_fields = (*Vertex.state_fields, "is_source")

    def __init__(self, id: str, edges: list[tuple[str, Any]], is_source: bool = False) -> None:
        super().__init__(id, INF, edges)
        self.is_source = is_source

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        if ctx.superstep == 0:
            improved = self.is_source
            if improved:
                self.value = 0.0
        else:
            best = min(m.payload for m in messages) if messages else INF
            improved = best < self.value
            if improved:
                self.value = best
                ctx.aggregate("updated", 1)
        if improved:
            for dst, w in self.edges:
                ctx.send(dst, self.value + w)
        ctx.vote_to_halt()


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


# --------------------------------------------------------------------------------------------
# Block vertex programs
# --------------------------------------------------------------------------------------------
@dataclass
class Subgraph:
    """One block's share of a graph with N vertices indexed 0..N-1 in sorted id order.

    ``own``: sorted global indices of the vertices it holds; ``indptr``/``dst``/``weight``: their
    out-edges in CSR form (rows = ``own`` order); ``owner``: block index of every global vertex;
    ``blocks``: engine vertex id of every block; ``ids``: the string ids of ``own``.
    """

    n: int
    own: np.ndarray
    indptr: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    owner: np.ndarray
    blocks: list[str]
    ids: list[str]

    @property
    def src_local(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.own)), np.diff(self.indptr))

    def local(self, global_idx: np.ndarray) -> np.ndarray:
        """Local rows of global vertex indices this block owns: an offset when ``own`` is a
        contiguous range (one block, range placement), else a lookup table built once."""
        table = self.__dict__.get("_local")
        if table is None:
            own = self.own
            if not own.size or own[-1] - own[0] + 1 == own.size:
                table = int(own[0]) if own.size else 0
            else:
                table = np.zeros(self.n, dtype=np.int32 if own.size < 2**31 else np.int64)
                table[own] = np.arange(own.size)
            self.__dict__["_local"] = table
        if isinstance(table, int):
            return global_idx - table
        return table[global_idx].astype(np.int64)

    def edges_of(self, rows: np.ndarray) -> np.ndarray:
        """Indices into ``dst``/``weight`` of the out-edges of local rows ``rows``."""
        starts = self.indptr[rows]
        counts = self.indptr[rows + 1] - starts
        total = int(counts.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64)
        offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        return offsets + np.arange(total)


def _concat(messages: list[Message], key: str, dtype: Any) -> np.ndarray:
    if not messages:
        return np.empty(0, dtype=dtype)
    return np.concatenate([m.payload[key] for m in messages])


def _send_min(ctx: Context, sub: Subgraph, dst: np.ndarray, val: np.ndarray, key: str) -> None:
    """Combine (dst, val) pairs by minimum per destination and send one array batch per block."""
    if dst.size == 0:
        return
    if dst.size * 8 >= sub.n:  # a large frontier: a dense scatter-min, no sort (O(n + k)); values
        # sent (finite distances, labels < n) never equal the fill
        fill = np.inf if val.dtype.kind == "f" else np.iinfo(val.dtype).max
        best = np.full(sub.n, fill, dtype=val.dtype)
        np.minimum.at(best, dst, val)
        d = np.flatnonzero(best != fill)
        v = best[d]
    else:
        order = np.lexsort((val, dst))
        d, v = dst[order], val[order]
        first = np.ones(d.size, dtype=bool)
        first[1:] = d[1:] != d[:-1]
        d, v = d[first], v[first]
    blk = sub.owner[d]
    for b in np.unique(blk):
        sel = blk == b
        ctx.send(sub.blocks[b], {"dst": d[sel], key: v[sel]}, tag=BLOCK_TAG)


def _local_components(k: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """For every one of ``k`` rows, the smallest row of its component under the edges (u, v):
    hook every edge's larger root under the smaller, then jump pointers, until nothing moves."""
    parent = np.arange(k)
    if not u.size:
        return parent
    keep = u < v  # the edges come in both directions: one is enough
    u, v = u[keep], v[keep]
    while True:
        pu, pv = parent[u], parent[v]
        lo, hi = np.minimum(pu, pv), np.maximum(pu, pv)
        if np.array_equal(lo, hi):
            return parent
        np.minimum.at(parent, hi, lo)  # roots: every row points at its root after the jumps below
        while True:  # pointer jumping: every row straight to its root
            pp = parent[parent]
            if np.array_equal(pp, parent):
                break
            parent = pp


def pagerank_update(ctx: Context, incoming: np.ndarray, value: np.ndarray, damping: float, track_l1: bool,
                    n: int) -> np.ndarray:
    """A block's new ranks from the sums of its in-edge contributions ``incoming`` (each added in
    ascending source order: the order every PageRank form shares, so their results are
    bit-identical)."""
    dangling = ctx.aggregated("dangling", 0.0)
    new = (1.0 - damping) / n + damping * (incoming + dangling / n)
    if track_l1:
        ctx.aggregate("l1", np.abs(new - value))
    return new


def pagerank_shares(ctx: Context, value: np.ndarray, outdeg: np.ndarray) -> np.ndarray:
    """What each vertex sends along each out-edge; the rank of dangling vertices goes to the aggregate."""
    dangling_mask = outdeg == 0
    if dangling_mask.any():
        ctx.aggregate("dangling", value[dangling_mask])
    return value / np.maximum(outdeg, 1)


class PageRankBlock(Vertex):
    """PageRank for a whole partition; bit-identical to ``PageRankVertex``."""

    state_fields = (*Vertex.state_fields, "dpos", "perm")

    def __init__(self, id: str, sub: Subgraph, damping: float = 0.85, iterations: int = 100,
                 track_l1: bool = True) -> None:
        super().__init__(id, np.zeros(len(sub.own)))  # 0.0 before superstep 0, as PageRankVertex
        self.track_l1 = track_l1
        self.sub = sub
        self.damping = damping
        self.iterations = iterations
        self.outdeg = np.diff(sub.indptr)
        src_local = sub.src_local
        blk = sub.owner[sub.dst]
        # per destination block: which edges go there, their source rows and (global) endpoints
        self.routes = []
        for b in np.unique(blk):
            sel = np.flatnonzero(blk == b)
            src = sub.own[src_local[sel]]
            sel = sel[np.lexsort((src, sub.dst[sel]))]  # in the receiver's summation order already
            self.routes.append((sub.blocks[b], src_local[sel], sub.dst[sel], sub.own[src_local[sel]]))
        self.perm: np.ndarray | None = None  # None after setup: contributions arrive in order
        self.dpos: np.ndarray | None = None
        self._gather: Any = None

    def size_hint(self) -> int:
        return len(self.sub.own)

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        sub, n, s = self.sub, self.sub.n, ctx.superstep
        if n == 0:
            ctx.vote_to_halt()
            return
        if s == 0:
            self.value = np.full(len(sub.own), 1.0 / n)
        else:
            if self.dpos is None:  # first contributions carry the structure: fix the sum order once
                dst = _concat(messages, "dst", np.int64)
                src = _concat(messages, "src", np.int64)
                perm = np.lexsort((src, dst))
                self.dpos = sub.local(dst[perm])
                # one source block (or sorted runs that happen to merge in place): no gather needed
                self.perm = None if np.array_equal(perm, np.arange(perm.size)) else perm
            if self._gather is None:  # contributions in message order -> per row, ascending source
                cols = np.arange(len(self.dpos)) if self.perm is None else self.perm
                indptr = np.concatenate(([0], np.cumsum(np.bincount(self.dpos, minlength=len(sub.own)))))
                self._gather = csr_sum(indptr, cols)
            incoming = self._gather(_concat(messages, "val", np.float64))
            self.value = pagerank_update(ctx, incoming, self.value, self.damping, self.track_l1, n)
        if s >= self.iterations:
            ctx.vote_to_halt()
            return
        share = pagerank_shares(ctx, self.value, self.outdeg)
        for block, rows, dst, src in self.routes:
            payload = {"val": share[rows]}
            if s == 0:
                payload["dst"], payload["src"] = dst, src
            ctx.send(block, payload, tag=BLOCK_TAG)

    def result(self) -> dict[str, Any]:
        return {"ids": self.sub.ids, "values": self.value}


class SSSPBlock(Vertex):
    """SSSP for a whole partition; bit-identical to ``SSSPVertex``."""

    state_fields = Vertex.state_fields  # its whole state is its value


    def __init__(self, id: str, sub: Subgraph, source: int | None) -> None:
        super().__init__(id, np.full(len(sub.own), INF))
        self.sub = sub
        self.source = source

    def size_hint(self) -> int:
        return len(self.sub.own)

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        sub, dist = self.sub, self.value
        if ctx.superstep == 0:
            rows = np.empty(0, dtype=np.int64)
            if self.source is not None and self.source in set(sub.own.tolist()):
                rows = sub.local(np.array([self.source]))
                dist[rows] = 0.0
        else:
            best = np.full(len(sub.own), INF)
            np.minimum.at(best, sub.local(_concat(messages, "dst", np.int64)), _concat(messages, "d", np.float64))
            rows = np.flatnonzero(best < dist)
            dist[rows] = best[rows]
            if rows.size:
                ctx.aggregate("updated", int(rows.size))
        e = sub.edges_of(rows)
        if e.size:
            src_rows = np.repeat(rows, sub.indptr[rows + 1] - sub.indptr[rows])
            _send_min(ctx, sub, sub.dst[e], dist[src_rows] + sub.weight[e], "d")
        ctx.vote_to_halt()

    def result(self) -> dict[str, Any]:
        return {"ids": self.sub.ids, "values": self.value}


class WCCBlock(Vertex):
    """WCC for a whole partition (edges must be given in both directions); labels are global
    indices, so the smallest index is the smallest id in string order.

    Block-centric: the components *inside* the block are found once, in superstep 0, by
    min-label hooking and pointer jumping over its internal edges (O(log n) vectorised rounds,
    not one superstep per hop), and a label that arrives later spreads over a whole local
    component at once; only edges that leave the block carry messages. On one worker the job
    takes two supersteps whatever the diameter. Same labels as ``WCCVertex`` (the minimum over
    the component)."""

    state_fields = Vertex.state_fields  # its whole state is its value (the rest is derived from sub)

    def __init__(self, id: str, sub: Subgraph) -> None:
        super().__init__(id, sub.own.copy())
        self.sub = sub
        src = sub.src_local
        inside = sub.owner[sub.dst] == sub.owner[sub.own[0]] if len(sub.own) else np.zeros(0, dtype=bool)
        self.comp = _local_components(len(sub.own), src[inside], sub.local(sub.dst[inside]))
        out = np.flatnonzero(~inside)
        self.boundary = (src[out], sub.dst[out])  # (local row, global destination) of edges leaving

    def size_hint(self) -> int:
        return len(self.sub.own)

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        sub, label, comp = self.sub, self.value, self.comp
        if ctx.superstep == 0:
            label[:] = label[comp]  # every row takes its local component's smallest index
            changed = np.ones(len(sub.own), dtype=bool)
        else:
            best = np.full(len(sub.own), np.iinfo(np.int64).max)
            np.minimum.at(best, comp[sub.local(_concat(messages, "dst", np.int64))], _concat(messages, "label", np.int64))
            new = np.minimum(label, best[comp])  # components are indexed by their smallest row
            changed = new < label
            label[changed] = new[changed]
            if changed.any():
                ctx.aggregate("updated", int(changed.sum()))
        rows, dst = self.boundary
        sel = changed[rows]
        if sel.any():
            _send_min(ctx, sub, dst[sel], label[rows[sel]], "label")
        ctx.vote_to_halt()

    def result(self) -> dict[str, Any]:
        return {"ids": self.sub.ids, "values": self.value}
