"""PageRank as defined by networkx and LDBC Graphalytics: start at 1/N, spread dangling rank
uniformly, stop after ``iterations`` updates or once the L1 change falls below ``tol``.

Two programs with bit-identical results:

- ``PageRankVertex``: the classic Pregel vertex, one engine vertex per graph vertex, the clearest
  statement of the algorithm (``mode=vertex``, and the tests' oracle);
- ``PageRankLoaded``: a block program over a partition loaded in parts (``block.LoadedBlock``),
  which exchanges one array message per neighbouring block (``mode=block``).

Both share the update (``pagerank_update``, ``pagerank_shares``) and the master compute
(``pagerank_master``); ``ALGORITHM`` runs them as a job (``algorithm.Algorithm``). Determinism:
PageRank sums incoming contributions in ascending source order in both forms (the block form
sorts once, then reuses the permutation) and reduces the dangling mass and the L1 change with
the exact ``fsum`` aggregator, so ranks do not depend on placement or worker count.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...engine import Context, Message, Vertex
from ...memory import trim_heap
from ...partitioner.fragment import BLOCK_TAG, LOAD_STEPS, LocalGraph
from ...storage.ids import Ids, pack_keys, unpack_keys
from .algorithm import Algorithm, Param, merged_top
from .block import GraphIO, LoadedBlock, _internal_csr, _look_up
from .kernels import csr_sum, first_of_runs, group_by, transpose

__all__ = ["PageRankVertex", "PageRankLoaded", "pagerank_master", "pagerank_update", "pagerank_shares", "ALGORITHM"]

#: PageRank's summation order is fixed this many in-edges at a time (bounds its temporaries, ~40
#: bytes an edge: at 2^18 the merge could be a two-worker scale-19 PageRank's peak; peaks over 8
#: interleaved runs 98-106 MiB at 2^18, 100-103 at 2^16, where the build's is; no slower)
ORDER_PIECE = 1 << 16


# --------------------------------------------------------------------------------------------
# The vertex program
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


def pagerank_master(tol: float, loading: int = 0):
    """Master compute: stop once the L1 change of the last update falls below ``tol`` (the first
    update is superstep ``loading + 1``, after the supersteps spent loading)."""

    def master(mctx) -> None:
        l1 = mctx.aggregates.get("l1")
        if mctx.superstep >= loading + 2 and l1 is not None and l1 < tol:
            mctx.halt(f"converged: L1 change {l1:.3g} < tol {tol:g}")

    return master


# --------------------------------------------------------------------------------------------
# The PageRank step both forms share
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


def _internal_in_edges(g: LocalGraph, me: int) -> tuple[np.ndarray, np.ndarray]:
    """The block's internal edges as a CSR over destination rows: ``(indptr, source rows)``, each
    row's sources ascending; the CSR of out-edges transposed by a counting sort
    (``kernels.transpose``), ~5 bytes an edge of temporaries. One block (every edge
    internal): ``g``'s edge arrays are let go as soon as they are read."""
    k = len(g.own)
    indptr, dst, inside = _internal_csr(g, me)
    if inside is None:  # one block: nothing else needs the edge arrays
        g.drop_edges()
    del inside
    tptr, src = transpose(indptr, dst, k)
    return tptr.astype(np.int64), src


def _in_edges_by_block(g: LocalGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every out-edge of the block by (destination block, destination key, source row), with one
    transpose: ``(targets, bounds, column indptr, source rows)``; ``targets`` are the destination
    keys grouped by block (key order inside a group), block ``b``'s being
    ``targets[bounds[b]:bounds[b + 1]]``, and column ``c``'s source rows
    ``rows[indptr[c]:indptr[c + 1]]`` (ascending). The edge arrays of ``g`` are let go."""
    bounds, by_block = group_by(g.target_block, len(g.blocks))
    column = np.empty(len(by_block), dtype=np.int32 if len(by_block) < 2 ** 31 else np.int64)
    column[by_block] = np.arange(len(by_block))
    cols = column[g.slot]
    targets = g.targets[by_block]
    del column, by_block
    g.drop_edges()
    tptr, rows = transpose(g.indptr, cols, len(targets))
    return targets, bounds, tptr, rows


class PageRankLoaded(LoadedBlock):
    """PageRank for a whole partition; bit-identical to ``PageRankVertex`` (contributions summed in
    ascending source id order, dangling mass and L1 change with the exact ``fsum``).

    Block-centric: edges between two vertices of this block never become messages; their
    contributions come from the block's own shares. Once the first contributions have told it
    the order, every update is one sparse sum (``kernels.csr_sum``) over the vector of its
    own shares followed by the values other blocks sent, in the summation order fixed once.
    Another block gets one value per source vertex with edges into it (not one per edge)."""

    state_fields = (*LoadedBlock.state_fields, "damping", "in_cols", "in_indptr", "iterations", "local_in", "outdeg",
                    "routes", "track_l1")
    #: the summing kernel, the shares sent last step (with the value they came from), the
    #: divisor and the dangling rows
    derived_fields = {"_gather": None, "_shares": None, "_divisor": None, "_dangling": None}

    def __init__(self, id: str, io: GraphIO, damping: float = 0.85, iterations: int = 100,
                 track_l1: bool = True) -> None:
        super().__init__(id, io)
        self.damping, self.iterations, self.track_l1 = damping, iterations, track_l1
        #: per other block: (its id, the rows whose shares it gets, the structure sent once and dropped:
        #: each edge's destination and source as int32 indices into the route's distinct keys)
        self.routes: list[tuple[str, np.ndarray, dict[str, np.ndarray] | None]] = []
        self.local_in: tuple[np.ndarray, np.ndarray] | None = None  # internal in-edges (indptr, src row)
        self.in_indptr: np.ndarray | None = None
        self.in_cols: np.ndarray | None = None
        self._gather: Any
        self._shares: tuple[np.ndarray, np.ndarray] | None
        self._divisor: np.ndarray | None
        self._dangling: np.ndarray | None

    def loaded(self, ctx: Context) -> None:
        g = self.g
        assert g is not None
        self.value = np.zeros(len(g.own))
        self.outdeg = np.diff(g.indptr)
        me = g.blocks.index(self.id)
        if len(g.blocks) == 1:
            self.local_in = _internal_in_edges(g, me)
            return
        # one transpose orders every edge by (destination block, destination key, source row):
        # this block's internal in-edges and each other block's route (the receiver's order).
        # Both stay in its array: the internal part as a view, each route's part turned into its
        # sources' indices in place (a copy of each was 4 bytes an edge beside the whole array:
        # +16 MiB at the end of a two-worker scale-19 PageRank's build, 89-102 MiB there)
        targets, bounds, tptr, rows = _in_edges_by_block(g)
        for b in range(len(g.blocks)):
            c0, c1 = int(bounds[b]), int(bounds[b + 1])
            e0, e1 = int(tptr[c0]), int(tptr[c1])
            counts = np.diff(tptr[c0:c1 + 1])
            if b == me:  # a destination here is a row (own and targets sort alike)
                per_row = np.zeros(len(g.own), dtype=np.int64)
                per_row[g.local(targets[c0:c1])] = counts
                self.local_in = (np.concatenate(([0], np.cumsum(per_row))), rows[e0:e1])
                continue
            if e0 == e1:
                continue
            rows_b = rows[e0:e1]
            # one value per source vertex, not per edge (the receiver's sum picks it once per edge);
            # the structure, compactly: the edges by destination key (``dk``, how many into each:
            # ``dn``), each edge's source as an int32 index into this route's distinct sources
            # (4 bytes an edge; an index of the destination per edge too made it 8)
            used = counts > 0
            dk, dn = targets[c0:c1][used], counts[used].astype(np.int32)
            present = np.zeros(len(g.own), dtype=bool)
            present[rows_b] = True
            senders = np.flatnonzero(present)
            col = rows_b  # (each source row's place among the senders, in place)
            _look_up((np.cumsum(present) - 1).astype(rows.dtype), col)
            self.routes.append((g.blocks[b], senders, {"dn": dn, "dk": pack_keys(dk), "col": col,
                                                        "sk": pack_keys(g.own[senders])}))
        # the structure travels once (step 0); then only values

    def _order(self, messages: list[Message]) -> None:
        """Fix the summation order from the first contributions: per destination row, by source
        key, over x = [own shares..., each message's values...] (``in_indptr``, ``in_cols``).

        The in-edges come in runs (this block's internal ones, then each sender's), each sorted by
        (destination row, source key) already; they are merged ``ORDER_PIECE`` edges' worth of
        destination rows at a time, so the temporaries stay small (a whole-block sort key, its
        argsort and the gathers took ~24 bytes an in-edge at once)."""
        g = self.g
        assert g is not None and self.local_in is not None
        k = len(g.own)
        lptr, lsrc = self.local_in
        self.local_in = None
        parts = [m.payload for m in messages]
        if not parts:  # one run, in order already: the internal sources are the columns
            self.in_cols, self.in_indptr = lsrc, lptr
            return
        # sources: ranks among this block's keys and every sender's distinct source keys (no key
        # is in two blocks); the message arrays are let go as they are read
        sk = [g.own] + [unpack_keys(p.pop("sk")) for p in parts]
        at = np.cumsum([0] + [len(x) for x in sk]).tolist()
        rank = np.empty(at[-1], np.int32 if at[-1] < 2 ** 31 else np.int64)
        # (sorted runs: the stable sort is a merge, ~10x a quicksort)
        rank[np.argsort(np.concatenate(sk), kind="stable")] = np.arange(len(rank), dtype=rank.dtype)
        del sk
        offsets = np.cumsum([0, k] + [len(p["val"]) for p in parts]).tolist()  # each run's place in x
        # each run: (its pointers by destination row, source columns within the run, the run's
        # source ranks, the run's place in x); a sender's edges come by destination key (its
        # sorted ``dk``, ``dn`` edges into each), so its rows need no array of 4 bytes an edge
        runs = [(lptr, lsrc, rank[:k], 0)]
        for i, p in enumerate(parts, 1):
            per_row = np.zeros(k, dtype=np.int64)
            per_row[g.local(unpack_keys(p.pop("dk")))] = p.pop("dn")
            runs.append((np.concatenate(([0], np.cumsum(per_row))), p.pop("col"), rank[at[i]:at[i + 1]], offsets[i]))
            del per_row
        indptr = np.sum([ptr for ptr, *_ in runs], axis=0)
        cols = np.empty(int(indptr[-1]), dtype=np.int32 if offsets[-1] < 2 ** 31 else np.int64)
        # the internal run waits at the end of the merged array, and the merged rows are written
        # in front of it: rows lo..hi end at indptr[hi] = lptr[hi] + (the other runs' edges so far),
        # never past where the internal run's rows from hi on begin (tail + lptr[hi]), and each
        # piece reads its slices before writing. Its own array goes, and the heap with it (it was
        # cut from free heap, not mapped: a hole until trimmed). Beside the merged array, it and
        # the holes were a two-worker scale-19 PageRank's peak: 99-104 MiB at the merge's end, 79-82 now
        tail = len(cols) - len(lsrc)
        cols[tail:] = lsrc
        runs[0] = (lptr, cols[tail:], rank[:k], 0)
        del lsrc
        trim_heap()
        stops = np.append(np.searchsorted(indptr, np.arange(ORDER_PIECE, indptr[-1], ORDER_PIECE)), k)
        stops = stops[first_of_runs(stops)]  # (sorted; np.unique's first call imports numpy.ma: ~17 ms a worker)
        lo, width = 0, len(rank)
        for hi in stops.tolist():  # rows lo..hi-1: a slice of every run
            key = np.concatenate([np.repeat(np.arange(lo, hi, dtype=np.int64) * width, np.diff(ptr[lo:hi + 1]))
                                  + r[c[ptr[lo]:ptr[hi]]] for ptr, c, r, _ in runs])
            col = np.concatenate([c[ptr[lo]:ptr[hi]] + off for ptr, c, _, off in runs])
            if key.size > 1 and not bool(np.all(key[1:] >= key[:-1])):
                col = col[np.argsort(key, kind="stable")]
            cols[indptr[lo]:indptr[hi]] = col
            lo = hi
        self.in_cols, self.in_indptr = cols, indptr

    def run(self, ctx: Context, messages: list[Message], s: int) -> None:
        g = self.g
        assert g is not None
        n = g.n
        if n == 0:
            ctx.vote_to_halt()
            return
        if s == 0:
            self.value = np.full(len(g.own), 1.0 / n)
        else:
            if self.in_cols is None:
                self._order(messages)
                trim_heap()  # its temporaries' holes, before the first sums fault pages in again
            assert self.in_cols is not None and self.in_indptr is not None
            if self._gather is None:
                self._gather = csr_sum(self.in_indptr, self.in_cols)
            sent = self._shares  # what this block sent itself last step, from the value it has now
            shares = sent[1] if sent is not None and sent[0] is self.value else self.value / np.maximum(self.outdeg, 1)
            vals = [m.payload["val"] for m in messages]
            x = np.concatenate((shares, *vals)) if vals else shares
            self.value = pagerank_update(ctx, self._gather(x), self.value, self.damping, self.track_l1, n)
        if s >= self.iterations:
            ctx.vote_to_halt()
            return
        if self._divisor is None:  # fixed for the run: max(out-degree, 1) as floats, the rows without out-edges
            self._divisor = np.maximum(self.outdeg, 1).astype(np.float64)
            self._dangling = np.flatnonzero(self.outdeg == 0)
        share = pagerank_shares(ctx, self.value, self._divisor, self._dangling)
        self._shares = (self.value, share)
        for i, (block, senders, structure) in enumerate(self.routes):
            payload: dict[str, Any] = {"val": share[senders]}
            if structure is not None:
                payload.update(structure)
                self.routes[i] = (block, senders, None)  # sent once; not kept
            ctx.send(block, payload, tag=BLOCK_TAG)


# --------------------------------------------------------------------------------------------
# The algorithm as the framework runs it
# --------------------------------------------------------------------------------------------
def _summarize(config: dict[str, Any], ids: Ids, ranks: np.ndarray) -> dict[str, Any]:
    top = config["top"]
    best = np.lexsort((ids.keys, -ranks))[:top] if top else np.empty(0, np.int64)
    return {"top": [[name, float(ranks[i])] for name, i in zip(ids.of(best), best.tolist())]}


def _report(count: int, summaries: list[dict[str, Any]], config: dict[str, Any], result: Any,
            loading: int) -> tuple[list[str], dict[str, Any]]:
    top = merged_top(summaries, "top", config["top"])
    updates = max(result.supersteps - 1 - loading, 0)
    lines = [f"pagerank: {count} vertices, {updates} update(s) ({result.halt_reason})"]
    lines += [f"{i + 1:>4}  {vid:<24} {rank:.10f}" for i, (vid, rank) in enumerate(top)]
    return lines, {"vertices": count, "updates": updates, "top": top}


ALGORITHM = Algorithm(
    name="pagerank",
    description="PageRank (networkx/Graphalytics definition) of a directed edge list",
    params=(
        Param("damping", 0.85, "float", "damping factor (probability of following a link)", 0.0, 1.0),
        Param("iterations", 100, "int", "at most this many rank updates", 0),
        Param("tol", 1e-10, "float", "stop once the L1 change of an update falls below this", 0.0),
    ),
    block=lambda bid, io, c: PageRankLoaded(bid, io, c["damping"], c["iterations"], c["tol"] > 0),
    vertex=lambda edges, c: lambda vid, adj: PageRankVertex(vid, adj, c["damping"], c["iterations"], c["tol"] > 0),
    master=lambda c, block: pagerank_master(c["tol"], LOAD_STEPS if block else 0),
    summarize=_summarize,
    report=_report,
    noun="ranks",
    aggregators=(("dangling", "fsum"), ("l1", "fsum")),
    progress_metric="l1",
)
