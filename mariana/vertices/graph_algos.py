"""PageRank, single-source shortest paths and weakly connected components as vertex programs.

Each algorithm comes in two forms that give bit-identical results:

- a classic Pregel vertex (``PageRankVertex``, ``SSSPVertex``, ``WCCVertex``): one engine
  vertex per graph vertex, the clearest statement of the algorithm (``mode=vertex``);
- a block vertex over a graph loaded in parts (``graph_blocks.PageRankLoaded``, ``SSSPLoaded``,
  ``graphalytics_loaded.WCCComponentsLoaded``): one engine vertex per partition holding its graph
  vertices as numpy arrays (the block-centric extension of Pregel), which exchanges one array
  message per neighbouring block and is ~250x faster in Python (bench/graph_local.py). The
  PageRank update they share lives here (``pagerank_update``, ``pagerank_shares``).

Determinism: PageRank sums incoming contributions in ascending source order in both forms
(the block form sorts once, then reuses the permutation) and reduces the dangling mass and the
L1 change with the exact ``fsum`` aggregator, so ranks do not depend on placement or worker
count. SSSP and WCC only take minima, which are exact.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from ..engine import Context, Message, Vertex

__all__ = ["PageRankVertex", "SSSPVertex", "WCCVertex", "pagerank_master", "pagerank_update", "pagerank_shares",
           "OVERFLOW", "may_overflow", "overflow_marks", "capped"]

INF = float("inf")
#: An SSSP distance whose finite sum of finite weights passes float64's range: float64's
#: largest value, not inf, which means unreachable (as Graphalytics reads it). A vertex at it
#: is reachable; the job refuses to report such a distance (jobs/sssp.py), and a sum that
#: rounds to exactly this value is refused with them (no float64 tells the two apart).
OVERFLOW = float(np.finfo(np.float64).max)


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
                d = self.value + w
                ctx.send(dst, d if d != INF else OVERFLOW)  # (a finite sum past float64's range)
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
# The PageRank step that every block form shares (vertices/graph_blocks.py)
# --------------------------------------------------------------------------------------------
def pagerank_update(ctx: Context, incoming: np.ndarray, value: np.ndarray, damping: float, track_l1: bool,
                    n: int) -> np.ndarray:
    """A block's new ranks from the sums of its in-edge contributions ``incoming`` (each added in
    ascending source order: the order every PageRank form shares, so their results are
    bit-identical)."""
    dangling = ctx.aggregated("dangling", 0.0)
    # (1 - d) / n + d * (incoming + dangling / n), in place in ``incoming`` (the same bits: the
    # same operations, each commutative)
    new = incoming
    new += dangling / n
    new *= damping
    new += (1.0 - damping) / n
    if track_l1:
        ctx.aggregate("l1", np.abs(new - value))
    return new


def pagerank_shares(ctx: Context, value: np.ndarray, outdeg: np.ndarray, dangling: np.ndarray | None = None) -> np.ndarray:
    """What each vertex sends along each out-edge; the rank of dangling vertices goes to the
    aggregate. ``outdeg`` may be given as floats already (the same quotients), ``dangling`` as
    the rows without out-edges (else found from ``outdeg``)."""
    rows = np.flatnonzero(outdeg == 0) if dangling is None else dangling
    if rows.size:
        ctx.aggregate("dangling", value[rows])
    return value / np.maximum(outdeg, 1)


# --------------------------------------------------------------------------------------------
# SSSP distances past float64's range, in the block form (graph_blocks.SSSPLoaded)
# --------------------------------------------------------------------------------------------
_WEIGHT_MAX: "weakref.WeakKeyDictionary[Any, float]" = weakref.WeakKeyDictionary()


def _weight_max(split: Any) -> float:
    """At least the largest weight of a block's edges (``graph_blocks._Split``: internal and
    boundary), found once per split."""
    top = _WEIGHT_MAX.get(split)
    if top is None:
        n = int(split.indptr[-1])
        weights = [w for w in (None if split.weight is None else split.weight[:n], split.b_weight)
                   if w is not None and w.size]
        top = max([1.0, *(float(w.max()) for w in weights)])  # (1.0: unit weights, and a bound for smaller ones)
        _WEIGHT_MAX[split] = top
    return top


def may_overflow(split: Any, dist: np.ndarray, rows: np.ndarray, down: np.ndarray) -> bool:
    """Whether a sum of the distance of some row of ``rows`` or ``down`` and one of its edges'
    weights can pass float64's range (a scalar test: its largest such distance plus the largest
    weight; the usual answer, no, costs nothing more)."""
    top = max((float(dist[r].max()) for r in (rows, down) if r.size), default=0.0)
    return top + _weight_max(split) == INF


def capped(d: np.ndarray, w: np.ndarray | float, on: bool) -> np.ndarray:
    """Candidate distances ``d + w``, a sum past float64's range as ``OVERFLOW`` (``on``: there
    may be one, from ``may_overflow``)."""
    if not on:
        return d + w
    with np.errstate(over="ignore"):
        return np.minimum(d + w, OVERFLOW)


def overflow_marks(relax: Any, split: Any, dist: np.ndarray, front: np.ndarray) -> np.ndarray:
    """After a block's relaxation (``relax``, over ``split``'s internal edges) from rows that
    changed (``front``): every row that an internal edge of a changed row reaches only by a sum
    past float64's range, set to ``OVERFLOW`` (as ``SSSPVertex`` sends such a sum), and what
    those rows reach in turn; the rows set. Only when ``may_overflow``."""
    with np.errstate(over="ignore"):  # (the sums that overflow are what this looks for)
        return _overflow_marks(relax, split, dist, front)


def _overflow_marks(relax: Any, split: Any, dist: np.ndarray, front: np.ndarray) -> np.ndarray:
    marked: list[np.ndarray] = []
    while front.size:
        starts = split.indptr[front]
        counts = split.indptr[front + 1] - starts
        total = int(counts.sum())
        if not total:
            break
        edge = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts) + np.arange(total)
        src, dst = np.repeat(front, counts), split.indices[edge]
        d = dist[src] + (1.0 if split.weight is None else split.weight[edge])
        hit = np.unique(dst[np.isinf(d) & np.isfinite(dist[src]) & np.isinf(dist[dst])])
        if not hit.size:
            break
        dist[hit] = OVERFLOW
        front = np.union1d(hit, relax(dist, hit))
        marked.append(front)
    return np.concatenate(marked) if marked else front[:0]
