"""Single-source shortest paths (weight 1 where absent), as Bellman-Ford in supersteps.

Two programs with bit-identical results: ``SSSPVertex``, the classic Pregel vertex
(``mode=vertex``, the tests' oracle), and ``SSSPLoaded``, a block program over a partition loaded
in parts (``block.LoadedBlock``) that relaxes its internal edges to a fixpoint each superstep and
sends only over the edges that leave the block (``mode=block``). SSSP only takes minima, which
are exact, so the distances do not depend on placement or worker count. BFS is ``SSSPLoaded``
with unit weights (``bfs``).
"""

from __future__ import annotations

import bisect
import weakref
from typing import Any

import numpy as np

from ...engine import Context, Message, Vertex
from ...errors import UsageError
from ...storage.edgelist import EdgeList
from ...storage.ids import Ids
from .algorithm import Algorithm, MIN_PROPAGATION, Param, merged_top
from .block import GraphIO, LoadedBlock, _concat, _send_min_of, _Split, group_min
from .kernels import import_traversals, relax

__all__ = ["SSSPVertex", "SSSPLoaded", "OVERFLOW", "INF", "may_overflow", "overflow_marks", "capped", "ALGORITHM"]

INF = float("inf")
#: An SSSP distance whose finite sum of finite weights passes float64's range: float64's
#: largest value, not inf, which means unreachable (as Graphalytics reads it). A vertex at it
#: is reachable; the job refuses to report such a distance (``_refuse_overflow``), and a sum that
#: rounds to exactly this value is refused with them (no float64 tells the two apart).
OVERFLOW = float(np.finfo(np.float64).max)


class SSSPVertex(Vertex):
    """Bellman-Ford in supersteps: relax out-edges whenever the distance improves (min combiner).
    ``FAR`` is the value of a vertex not reached, ``START`` the source's; ``relax`` sends the
    offers along the out-edges (``BFSVertex`` counts hops instead)."""

    __slots__ = ("is_source",)

    state_fields = (*Vertex.state_fields, "is_source")
    FAR: Any = INF
    START: Any = 0.0

    def __init__(self, id: str, edges: list[tuple[str, Any]], is_source: bool = False) -> None:
        super().__init__(id, self.FAR, edges)
        self.is_source = is_source

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        if ctx.superstep == 0:
            improved = self.is_source
            if improved:
                self.value = self.START
        else:
            best = min(m.payload for m in messages) if messages else self.FAR
            improved = best < self.value
            if improved:
                self.value = best
                ctx.aggregate("updated", 1)
        if improved:
            self.relax(ctx)
        ctx.vote_to_halt()

    def relax(self, ctx: Context) -> None:
        for dst, w in self.edges:
            d = self.value + w
            ctx.send(dst, d if d != INF else OVERFLOW)  # (a finite sum past float64's range)


# --------------------------------------------------------------------------------------------
# SSSP distances past float64's range, in the block form (SSSPLoaded)
# --------------------------------------------------------------------------------------------
_WEIGHT_MAX: "weakref.WeakKeyDictionary[Any, float]" = weakref.WeakKeyDictionary()


def _weight_max(split: Any) -> float:
    """At least the largest weight of a block's edges (``block._Split``: internal and
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


class SSSPLoaded(LoadedBlock):
    """SSSP for a whole partition; bit-identical to ``SSSPVertex``. ``source``: its key.

    Block-centric: each superstep relaxes the block's internal edges to a fixpoint at once
    (``kernels.relax``: Dijkstra from the rows that improved) and sends only over edges that
    leave the block, so one worker needs one superstep whatever the diameter. Distances are the
    same left-to-right sums along the same shortest paths as Bellman-Ford's."""

    state_fields = (*LoadedBlock.state_fields, "source_name", "source_row")
    #: the internal/boundary split of the edges and its relaxation kernel (``_prepare``)
    derived_fields = {"_split": None, "_relax": None}
    #: every edge weighs 1.0 whatever the input says (BFS: hop counts)
    unit = False

    def __init__(self, id: str, io: GraphIO, source_name: str) -> None:
        super().__init__(id, io)
        self.source_name = source_name
        import_traversals()
        self._split: _Split | None
        self._relax: Any

    def loaded(self, ctx: Context) -> None:
        g = self.g
        assert g is not None
        self.value = np.full(len(g.own), INF)
        source = self.out.key_of(self.source_name)
        i = int(g.local(np.asarray([source], dtype=g.own.dtype))[0]) if len(g.own) else 0
        self.source_row = i if i < len(g.own) and g.own[i] == source else -1
        ctx.aggregate("source_found", int(self.source_row >= 0))
        self._prepare()

    def _prepare(self) -> None:
        """Split the edges and set up the relaxation: while loading, or after a restore."""
        assert self.g is not None
        if self.unit:
            self.g.weight = None
        g = self.g
        # several blocks: room for a super-source's edge to every row, so that a relaxation from
        # many seeds copies none of the block's edges (a copy per superstep: ~12 bytes an
        # internal edge, a two-worker scale-19 SSSP's peak)
        self._split = sp = _Split(g, g.blocks.index(self.id), room=len(g.own) if len(g.blocks) > 1 else 0)
        self._relax = relax(sp.indptr, sp.indices, sp.weight)  # None: unit weights
        if len(g.blocks) > 1:  # the split holds every edge: the graph's copy goes (4 bytes an edge,
            # 12 weighted: a two-worker scale-19 SSSP's rounds held it beside the split); a
            # checkpoint gets it back from the split (``state_dict``)
            g.slot, g.weight = np.empty(0, g.slot.dtype), None

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        g, sp = self.g, self._split
        if g is not None and sp is not None and len(g.blocks) > 1:
            state["__graph__"]["slot"], state["__graph__"]["weight"] = sp.whole(g)
        return state

    def run(self, ctx: Context, messages: list[Message], s: int) -> None:
        g, dist = self.g, self.value
        assert g is not None
        if self._split is None:
            self._prepare()
        sp = self._split
        assert sp is not None
        if s == 0:
            if not ctx.aggregated("source_found", 0):
                raise UsageError(f"source vertex '{self.source_name}' is not in {self.out.url} ({g.n} vertices)")
            rows = np.array([self.source_row] if self.source_row >= 0 else [], dtype=np.int64)
            dist[rows] = 0.0
        else:
            rows = group_min(g.local(_concat(messages, "dst", keys=True)), _concat(messages, "d", np.float64), dist)
        with np.errstate(over="ignore"):  # (a sum past float64's range is found below)
            down = self._relax(dist, rows)
        over = may_overflow(sp, dist, rows, down)  # a sum past float64's range: OVERFLOW, not unreachable
        if over:
            down = np.union1d(down, overflow_marks(self._relax, sp, dist, np.union1d(rows, down)))
        if down.size and (s > 0 or sp.b_slot.size):  # the union, by a mask (np.union1d sorts); unused
            # by a first step with no boundary edges (one block)
            changed = np.zeros(len(dist), dtype=bool)
            changed[rows] = True
            changed[down] = True
            rows = np.flatnonzero(changed)
        if s > 0 and rows.size:
            ctx.aggregate("updated", int(rows.size))
        w = sp.b_weight
        _send_min_of(ctx, g, ((sp.b_slot[e], capped(dist[src], 1.0 if w is None else w[e], over))
                              for src, e in sp.boundary_pieces(rows)), INF, "d")
        ctx.vote_to_halt()


# --------------------------------------------------------------------------------------------
# The algorithm as the framework runs it
# --------------------------------------------------------------------------------------------
#: The source vertex of the shipped example graph.
EXAMPLE_SOURCE = "amsterdam"
SOURCE = Param("source", None, "str", "the source vertex id (required with graph=)")


def source_of(config: dict[str, Any]) -> str:
    """The source vertex: ``source=``, or the shipped example's when no graph is given."""
    return config["source"] or EXAMPLE_SOURCE


def check_source(name: str) -> Any:
    """A config check: ``source=`` is required once ``graph=`` is set."""
    def check(config: dict[str, Any]) -> None:
        if config["source"] is None and config["graph"] is not None:
            raise UsageError(f"{name} needs a source vertex: --set source=VERTEX")
    return check


def require_source(edges: EdgeList, source: str) -> None:
    """A UsageError unless ``source`` is a vertex of ``edges`` (ids sorted)."""
    i = bisect.bisect_left(edges.ids, source)
    if i < len(edges.ids) and edges.ids[i] == source:
        return
    sample = ", ".join(edges.ids[:3])
    raise UsageError(f"source vertex '{source}' is not in {edges.url} ({edges.n} vertices, e.g. {sample})")


def from_source(vertex: Any) -> Any:
    """Vertex mode's factory of ``vertex(id, edges, is_source)``, once the source is in the graph."""
    def make(edges: EdgeList, config: dict[str, Any]) -> Any:
        source = source_of(config)
        require_source(edges, source)
        return lambda vid, adj: vertex(vid, adj, vid == source)
    return make


def _summarize(config: dict[str, Any], ids: Ids, dist: np.ndarray) -> dict[str, Any]:
    top = config["top"]
    reached = np.flatnonzero(dist != np.inf)
    best = reached[np.lexsort((ids.keys[reached], dist[reached]))[:top]] if top else reached[:0]
    over = np.flatnonzero(dist == OVERFLOW)[:1]  # (rows in id order: the part's first such vertex)
    return {"reached": int(reached.size),
            "nearest": [[name, float(dist[i])] for name, i in zip(ids.of(best), best.tolist())],
            "overflow": ids.of(over)[0] if over.size else None}


def _refuse_overflow(summaries: list[dict[str, Any]], config: dict[str, Any]) -> None:
    """A UsageError naming the first vertex (in id order) whose distance passed float64's range
    (``OVERFLOW``: Graphalytics reads inf as unreachable, so no such distance is written)."""
    found = [s["overflow"] for s in summaries if s.get("overflow") is not None]
    if found:
        raise UsageError(f"sssp: the distance to vertex {min(found)!r} overflows float64: the weights of its shortest "
                         f"path add up to {OVERFLOW:.6g} or more (scale the weights down)")


def _report(count: int, summaries: list[dict[str, Any]], config: dict[str, Any], result: Any,
            loading: int) -> tuple[list[str], dict[str, Any]]:
    reached = sum(s["reached"] for s in summaries)
    nearest = merged_top(summaries, "nearest", config["top"], descending=False)
    lines = [f"sssp from {source_of(config)}: {reached} of {count} vertices reachable, {result.supersteps} supersteps"]
    lines += [f"{vid:<24} {dist:g}" for vid, dist in nearest]
    return lines, {"vertices": count, "reachable": reached, "nearest": nearest}


ALGORITHM = Algorithm(
    name="sssp",
    description="single-source shortest weighted paths over a directed edge list (Bellman-Ford supersteps)",
    params=(SOURCE,),
    check=check_source("sssp"),
    block=lambda bid, io, c: SSSPLoaded(bid, io, source_of(c)),
    vertex=from_source(SSSPVertex),
    summarize=_summarize,
    refuse=_refuse_overflow,
    report=_report,
    noun="distances",
    weights=True,
    nonnegative=True,
    **MIN_PROPAGATION,
)
