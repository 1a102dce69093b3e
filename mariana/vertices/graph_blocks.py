"""Block vertices over a graph that was loaded in parts: each worker holds only its own vertices.

A ``LoadedBlock`` spends its first ``LOAD_STEPS`` supersteps loading (the ``io`` object of the
job layer reads this worker's input splits, sends every edge to the block owning its source and
builds a ``LocalGraph``), then runs its algorithm; ``step = superstep - LOAD_STEPS``.

Vertices are named by *keys*: int64 codes of the ids that sort like the id strings (for integer
ids) or the UTF-8 bytes of the ids (``S`` arrays, sent as ``uint8`` matrices). Keys sort in string
order of the ids, so sums run in ascending source id order (PageRank is bit-identical to
``PageRankVertex`` whatever the worker count) and the smallest key is the smallest id (WCC,
``graphalytics_loaded.WCCComponentsLoaded``; BFS and CDLP are there too, LCC in ``lcc_loaded``).
No array here is as long as the whole graph: a block holds its own vertices, their out-edges
(destination keys, destination blocks) and, for PageRank, the order of its in-edges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Protocol

import numpy as np

from ..engine import Context, Message, Vertex
from ..engine.state import default_state, load_default_state
from ..engine.memory import trim_heap
from ..errors import UsageError
from .block_kernels import (EDGE_PIECE, csr_sum, first_of_runs, group_by, import_traversals, relax, row_edge_pieces,
                            row_ids, row_pieces, select, transpose)
from .graph_algos import pagerank_shares, pagerank_update

__all__ = ["LOAD_STEPS", "LocalGraph", "LoadedBlock", "PageRankLoaded", "SSSPLoaded",
           "pack_keys", "unpack_keys", "loaded_pagerank_master", "BLOCK_TAG"]

#: Supersteps spent loading: parse the splits, route edges to their owners, build the blocks.
LOAD_STEPS = 3
#: PageRank's summation order is fixed this many in-edges at a time (bounds its temporaries, ~40
#: bytes an edge: at 2^18 the merge could be a two-worker scale-19 PageRank's peak; peaks over 8
#: interleaved runs 98-106 MiB at 2^18, 100-103 at 2^16, where the build's is; no slower)
ORDER_PIECE = 1 << 16
BLOCK_TAG = "block"
INF = float("inf")


@dataclass
class LocalGraph:
    """One block's vertices (``own``: sorted keys) and their out-edges in CSR form: each edge's
    destination as an int32 ``slot`` into ``targets`` (the distinct destination keys, sorted) and
    ``target_block`` (the block owning each), ``weight`` per edge or None; ``blocks``: the engine
    vertex id of every block. ``n`` (all vertices of the graph) is known one step later."""

    own: np.ndarray
    indptr: np.ndarray
    slot: np.ndarray
    targets: np.ndarray
    target_block: np.ndarray
    weight: np.ndarray | None
    blocks: list[str]
    n: int = -1

    def local(self, keys: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.own, keys)

    def src_rows(self) -> np.ndarray:
        """The local row of every edge (int32)."""
        return row_ids(self.indptr)

    def edges_of(self, rows: np.ndarray) -> np.ndarray:
        """Indices into ``dst`` of the out-edges of local rows ``rows``."""
        starts = self.indptr[rows]
        counts = self.indptr[rows + 1] - starts
        total = int(counts.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64)
        offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        return offsets + np.arange(total)

    def slots_are_rows(self) -> bool:
        """Whether the distinct targets are this block's own vertices, in order (one block where
        every vertex has in-edges): then a slot is a row, with nothing to look up."""
        return len(self.targets) == len(self.own) and bool(np.array_equal(self.targets, self.own))

    def drop_edges(self) -> None:
        """Let the edge arrays go once a kernel holds its own form of them: empty arrays, not
        ``[:0]`` views (a view keeps its whole base array alive: 4 bytes an edge for the job)."""
        self.slot, self.targets = np.empty(0, self.slot.dtype), np.empty(0, self.targets.dtype)
        self.target_block, self.weight = np.empty(0, self.target_block.dtype), None

    def nbytes(self) -> int:
        arrays = (self.own, self.indptr, self.slot, self.targets, self.target_block, self.weight)
        return sum(a.nbytes for a in arrays if a is not None)


class GraphIO(Protocol):
    """What the job layer gives a block: loading steps, and writing or returning its results."""

    def step(self, ctx: Context, messages: list[Message]) -> LocalGraph | None: ...

    def result(self, own: np.ndarray, values: np.ndarray, labels: bool) -> dict[str, Any]: ...

    url: str

    def key_of(self, name: str) -> Any: ...


def pack_keys(keys: np.ndarray) -> np.ndarray:
    """Keys as a wire-safe array: int64 as is, ``S`` strings as a (n, width) uint8 matrix."""
    if keys.dtype.kind == "S":
        width = max(keys.dtype.itemsize, 1)
        return np.ascontiguousarray(keys, dtype=f"S{width}").view(np.uint8).reshape(len(keys), width)
    return keys


def unpack_keys(a: np.ndarray) -> np.ndarray:
    if a.ndim == 2:
        return np.ascontiguousarray(a).view(f"S{a.shape[1]}").reshape(a.shape[0])
    return a


def _concat(messages: list[Message], key: str, dtype: Any = None, keys: bool = False) -> np.ndarray:
    parts = [m.payload[key] for m in messages if key in m.payload]
    if keys:
        parts = [unpack_keys(p) for p in parts]
    if not parts:
        return np.empty(0, dtype=dtype or np.int64)
    return np.concatenate(parts)


def _int32(a: np.ndarray) -> np.ndarray:
    """``a`` as int32 where its values fit (index arrays held for the whole job: half the bytes)."""
    return a.astype(np.int32) if a.size and a.max() < 2 ** 31 else a


def _in_order(dst: np.ndarray, src: np.ndarray) -> bool:
    """Whether (dst, src) pairs are sorted already."""
    if dst.size < 2:
        return True
    up, same = dst[1:] > dst[:-1], dst[1:] == dst[:-1]
    return bool(np.all(up | (same & (src[1:] >= src[:-1]))))


def group_min(rows: np.ndarray, vals: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Lower ``current[r]`` to the smallest of ``vals`` sent to row ``r``; the rows that went down."""
    if rows.size == 0:
        return rows
    if vals.dtype.kind in "iuf":  # numbers: one unbuffered minimum, no sort
        best = current.copy()
        np.minimum.at(best, rows, vals)
        r = np.flatnonzero(best < current)
        current[r] = best[r]
        return r
    order = np.lexsort((vals, rows))
    r, v = rows[order], vals[order]
    first = np.ones(r.size, dtype=bool)
    first[1:] = r[1:] != r[:-1]
    r, v = r[first], v[first]
    better = v < current[r]
    r = r[better]
    current[r] = v[better]
    return r


def _send_min(ctx: Context, g: LocalGraph, pieces: Iterable[tuple[np.ndarray, np.ndarray]], dtype: np.dtype,
              key: str) -> None:
    """Send, per destination block, the smallest value for each destination over ``pieces`` of
    (slots of edges, the value of each edge), values of ``dtype``: numbers by one unbuffered
    minimum per distinct destination (no sort), byte strings by a sort of them all."""
    if dtype.kind in "iuf":
        _send_min_of(ctx, g, pieces, np.inf if dtype.kind == "f" else np.iinfo(dtype).max, key)
        return
    parts = list(pieces)  # byte-string labels: sort by (destination, value), first of each run
    if not parts:
        return
    slots, val = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    del parts
    order = np.lexsort((val, slots))
    s, v = slots[order], val[order]
    first = np.ones(s.size, dtype=bool)
    first[1:] = s[1:] != s[:-1]
    s, v = s[first], v[first]
    _send_by_block(ctx, g, g.target_block[s], {"dst": pack_keys(g.targets[s]), key: pack_keys(v)})


def _send_min_of(ctx: Context, g: LocalGraph, pieces: Iterable[tuple[np.ndarray, np.ndarray]], init: Any,
                 key: str) -> None:
    """Send, per destination block, the smallest value for each destination over ``pieces`` of
    (slots, numbers) (``init``: larger than any); nothing when there are none."""
    best = None
    for slots, vals in pieces:
        if best is None:
            best = np.full(len(g.targets), init, dtype=vals.dtype)
        np.minimum.at(best, slots, vals)
    if best is not None:
        t = np.flatnonzero(best < init)
        _send_by_block(ctx, g, g.target_block[t], {"dst": pack_keys(g.targets[t]), key: pack_keys(best[t])})


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


class LoadedBlock(Vertex):
    """Loads its part of the graph in supersteps 0..LOAD_STEPS-1, then runs ``run(ctx, messages, step)``."""

    #: the value; the loaded part of the graph goes into checkpoints through ``state_dict``
    state_fields = Vertex.state_fields
    #: caches derived from the state (attribute: its value before first use): a restore puts them
    #: back to that value, since a rollback rewinds the state they were derived from
    derived_fields: dict[str, Any] = {}

    def __init__(self, id: str, io: GraphIO) -> None:
        super().__init__(id, None)
        self.io: GraphIO | None = io
        self.out: GraphIO = io
        self.g: LocalGraph | None = None
        self.forget_derived()

    def forget_derived(self) -> None:
        """Drop every cache in ``derived_fields``; the algorithm derives each again on first use."""
        for name, empty in self.derived_fields.items():
            setattr(self, name, empty)

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        if ctx.superstep < LOAD_STEPS:
            assert self.io is not None
            g = self.io.step(ctx, messages)
            if g is not None:
                self.g = g
                self.loaded(ctx)
                self.io = None
                trim_heap()
            return
        g = self.g
        assert g is not None
        if g.n < 0:
            g.n = int(ctx.aggregated("load_vertices", 0))
        step = ctx.superstep - LOAD_STEPS
        self.run(ctx, messages, step)
        if step <= 1:
            # the loaded structures and the first rounds' (PageRank's summation order) are built
            # now: their temporaries' holes in the heap would stay resident for the whole run
            # (large arrays are cut from free heap before any mapping is made)
            trim_heap()

    def loaded(self, ctx: Context) -> None:
        """Called in the last loading superstep, once ``self.g`` holds this block's part."""
        assert self.g is not None
        self.value = np.zeros(len(self.g.own))

    def run(self, ctx: Context, messages: list[Message], step: int) -> None:
        ctx.vote_to_halt()

    def size_hint(self) -> int:
        return len(self.g.own) if self.g is not None else 1

    def state_dict(self) -> dict[str, Any]:
        """Checkpoints hold this block's part of the graph too (it was loaded, not built)."""
        state = default_state(self)
        g = self.g
        if g is not None:
            state["__graph__"] = {"own": g.own, "indptr": g.indptr, "slot": g.slot, "targets": g.targets,
                                  "target_block": g.target_block,
                                  "weight": g.weight, "blocks": g.blocks, "n": g.n}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        graph = state.pop("__graph__", None)
        if graph is not None:
            arrays: dict[str, Any] = {k: np.array(v) if isinstance(v, np.ndarray) else v for k, v in graph.items()}
            self.g = LocalGraph(**arrays)
            self.io = None
        load_default_state(self, state)
        # a rollback restores arrays in place: a cache keyed by an array's identity would survive
        # it and feed the old state into the next step
        self.forget_derived()

    def result(self) -> dict[str, Any]:
        g = self.g
        if g is None:
            return {"ids": [], "values": np.zeros(0)}
        return self.out.result(g.own, self.value, labels=False)


def _inside(g: LocalGraph, me: int) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray]:
    """What a split of block ``me``'s edges needs: ``(local, inside, indptr)``. ``local``: the row
    of each target, looked up once (None when the targets are the block's own vertices, every
    vertex with in-edges: a slot is a row); ``inside``: the mask of internal edges (both ends in
    the block), None when every edge is (one block), where ``indptr`` is ``g``'s own, else each
    row's count of internal edges cumulated (a segmented sum of the mask: a row per edge and its
    ``bincount`` took ~3x as long)."""
    local = None if g.slots_are_rows() else _int32(g.local(g.targets))
    inside_t = g.target_block == me
    if inside_t.all():
        return local, None, g.indptr
    inside = inside_t[g.slot]
    return local, inside, np.concatenate(([0], np.cumsum(_row_counts(g.indptr, inside))))


def _internal_rows(g: LocalGraph, local: np.ndarray | None, inside: np.ndarray, n: int, room: int = 0) -> np.ndarray:
    """The destination rows of the ``n`` internal edges, in CSR order, and ``room`` entries more:
    the internal slots selected into that array and looked up there, in place (no second array
    of 4 bytes an internal edge: a two-worker scale-19 WCC's first step, its peak)."""
    rows = np.empty(n + room, dtype=g.slot.dtype)
    select(inside, g.slot, out=rows[:n])
    if local is not None and local.dtype == rows.dtype:
        _look_up(local, rows[:n])
    elif local is not None:  # (rows beyond int32: another array)
        rows = np.concatenate((local[rows[:n]], np.empty(room, local.dtype)))
    return rows


def _internal_csr(g: LocalGraph, me: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The block's internal edges as a CSR over local rows: ``(indptr, destination rows, inside)``
    (``_inside``); with one block the CSR is ``g``'s own."""
    local, inside, indptr = _inside(g, me)
    if inside is None:
        return indptr, g.slot if local is None else local[g.slot], None
    return indptr, _internal_rows(g, local, inside, int(indptr[-1])), inside


def _look_up(table: np.ndarray, a: np.ndarray) -> None:
    """``a[:] = table[a]``, in place, a piece at a time (``np.take`` copies indices that share
    memory with its output: a piece's, not the whole array's; "clip": every entry is in range)."""
    for lo in range(0, len(a), EDGE_PIECE):
        np.take(table, a[lo:lo + EDGE_PIECE], out=a[lo:lo + EDGE_PIECE], mode="clip")


def _row_counts(indptr: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row of a CSR, how many of its entries ``mask`` marks (a sum over each non-empty row:
    ``reduceat`` runs a segment to the next index given, so an empty row cannot be among them).
    The mask is summed as bytes into int32 (~3x a sum into int64), a piece of rows at a time:
    ``reduceat`` into another type casts its whole input first (4 bytes an entry: +32 MiB, the
    peak of a two-worker scale-19 WCC's first step)."""
    counts = np.zeros(len(indptr) - 1, dtype=np.int64)
    for r0, r1 in row_pieces(indptr, EDGE_PIECE):
        e0, e1 = int(indptr[r0]), int(indptr[r1])
        full = r0 + np.flatnonzero(indptr[r0 + 1:r1 + 1] > indptr[r0:r1])
        if full.size:
            counts[full] = np.add.reduceat(mask[e0:e1].view(np.uint8), indptr[full] - e0,
                                           dtype=np.int32 if e1 - e0 < 2 ** 31 else np.int64)
    return counts


def _internal_in_edges(g: LocalGraph, me: int) -> tuple[np.ndarray, np.ndarray]:
    """The block's internal edges as a CSR over destination rows: ``(indptr, source rows)``, each
    row's sources ascending; the CSR of out-edges transposed by a counting sort
    (``block_kernels.transpose``), ~5 bytes an edge of temporaries. One block (every edge
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
    the order, every update is one sparse sum (``block_kernels.csr_sum``) over the vector of its
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


def loaded_pagerank_master(tol: float):
    """Master compute: stop once the L1 change of the last update falls below ``tol``."""

    def master(mctx) -> None:
        l1 = mctx.aggregates.get("l1")
        if mctx.superstep >= LOAD_STEPS + 2 and l1 is not None and l1 < tol:
            mctx.halt(f"converged: L1 change {l1:.3g} < tol {tol:g}")

    return master


class _Split:
    """A block's out-edges cut in two: internal ones (both ends here; a CSR over local rows) and
    boundary ones (a CSR of ``slot``s, for ``_send_min``). Derived from ``LocalGraph`` on first
    use, so it needs no checkpoint. ``room`` (several blocks): ``indices`` and ``weight`` have that
    many entries more after the internal CSR's (``block_kernels.Relaxer``'s super-source edges)."""

    def __init__(self, g: LocalGraph, me: int, room: int = 0, consume: bool = False) -> None:
        k = len(g.own)
        local, inside, self.indptr = _inside(g, me)
        if inside is None:  # one block (one worker): no boundary
            self.indices = g.slot if local is None else local[g.slot]
            self.weight = g.weight
            self.b_indptr, self.b_slot, self.b_weight = np.zeros(k + 1, dtype=np.int64), g.slot[:0], None
            return
        n = int(self.indptr[-1])
        self.b_indptr = g.indptr - self.indptr  # each row's edges less its internal ones, cumulated
        if consume and not room and g.weight is None and (local is None or local.dtype == g.slot.dtype):
            self._in_place(g, local, inside, n)
            return
        self.indices = _internal_rows(g, local, inside, n, room)
        if g.weight is None:
            self.weight = None
        else:
            self.weight = np.empty(n + room)
            select(inside, g.weight, out=self.weight[:n])
        out = np.logical_not(inside, out=inside)  # (in place: the mask is not needed again)
        self.b_slot = select(out, g.slot)
        self.b_weight = None if g.weight is None else select(out, g.weight)

    def _in_place(self, g: LocalGraph, local: np.ndarray | None, inside: np.ndarray, n: int) -> None:
        """``consume`` (the caller lets ``g.slot`` go): the split made in ``g.slot`` itself, the
        ``n`` internal edges' rows first, the boundary slots after, each part in CSR order (a
        two-worker scale-19 WCC's first step: one array of 4 bytes an edge and a boundary copy at
        once, not three halves and the graph's)."""
        slot = g.slot
        boundary = select(np.logical_not(inside, out=inside), slot)  # (the mask negated in place, and back)
        select(np.logical_not(inside, out=inside), slot, out=slot[:n])  # (compacted forwards in place)
        slot[n:] = boundary
        del boundary
        if local is not None:
            _look_up(local, slot[:n])
        self.indices, self.weight = slot[:n], None
        self.b_slot, self.b_weight = slot[n:], None

    def whole(self, g: LocalGraph) -> tuple[np.ndarray, np.ndarray | None]:
        """``g``'s slots and weights again, in the CSR of ``g.indptr``: each row's internal edges,
        then its boundary ones (the order in which a split of them gives back these two parts)."""
        n_in, in_count, b_count = int(self.indptr[-1]), np.diff(self.indptr), np.diff(self.b_indptr)
        # an edge's place: its row's start (the two parts' starts added) + its place in its part
        in_at = np.repeat(self.b_indptr[:-1], in_count) + np.arange(n_in)
        b_at = np.repeat(self.indptr[1:], b_count) + np.arange(len(self.b_slot))
        slot = np.empty(n_in + len(self.b_slot), dtype=self.b_slot.dtype)
        slot[b_at] = self.b_slot
        slot[in_at] = np.searchsorted(g.targets, g.own).astype(slot.dtype)[self.indices[:n_in]]  # a row's slot
        if self.weight is None:
            return slot, None
        weight = np.empty(len(slot))
        weight[in_at] = self.weight[:n_in]
        weight[b_at] = self.b_weight
        return slot, weight

    def boundary_pieces(self, rows: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(source row, index into ``b_slot``) of the boundary edges of ``rows``, a bounded piece
        at a time (``block_kernels.row_edge_pieces``)."""
        if self.b_slot.size:  # (one block: none at all)
            yield from row_edge_pieces(self.b_indptr, rows)


class SSSPLoaded(LoadedBlock):
    """SSSP for a whole partition; bit-identical to ``SSSPVertex``. ``source``: its key.

    Block-centric: each superstep relaxes the block's internal edges to a fixpoint at once
    (``block_kernels.relax``: Dijkstra from the rows that improved) and sends only over edges that
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
        from .graph_algos import capped, may_overflow, overflow_marks
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
