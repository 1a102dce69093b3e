"""The block program's side of the framework: a ``LoadedBlock`` is one engine vertex per worker
that holds its partition of the graph (a ``LocalGraph``) and runs an algorithm over it as numpy
arrays (the block-centric extension of Pregel).

A ``LoadedBlock`` spends its first ``LOAD_STEPS`` supersteps loading (the ``io`` object the job
layer gives it reads this worker's input splits, sends every edge to the block owning its source
and builds a ``LocalGraph``), then runs its algorithm; ``step = superstep - LOAD_STEPS``. The
algorithms themselves are one module each beside this one (``pagerank``, ``sssp``, ``bfs``,
``wcc``, ``cdlp``, ``lcc``); what several of them share lives here: message helpers (minimum per
destination, per-block sends), the internal/boundary split of a block's edges (``_Split``) and
the in-edge announcements of the Graphalytics blocks.

Vertices are named by *keys*: int64 codes of the ids that sort like the id strings (for integer
ids) or the UTF-8 bytes of the ids (``S`` arrays, sent as ``uint8`` matrices). Keys sort in string
order of the ids, so sums run in ascending source id order (PageRank is bit-identical to
``PageRankVertex`` whatever the worker count) and the smallest key is the smallest id (WCC).
No array here is as long as the whole graph: a block holds its own vertices and their out-edges
(destination keys, destination blocks).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Protocol

import numpy as np

from ...engine import Context, Message, Vertex
from ...engine.state import default_state, load_default_state
from ...memory import trim_heap
from ...storage.ids import decode_keys, pack_keys, unpack_keys
from ...partitioner.fragment import BLOCK_TAG, LOAD_STEPS, LocalGraph
from .kernels import EDGE_PIECE, row_edge_pieces, row_pieces, select

__all__ = ["LoadedBlock", "GraphIO", "group_min"]

INF = float("inf")


class GraphIO(Protocol):
    """What the job layer gives a block: loading steps, and writing or returning its results."""

    def step(self, ctx: Context, messages: list[Message]) -> LocalGraph | None: ...

    def result(self, own: np.ndarray, values: np.ndarray, labels: bool) -> dict[str, Any]: ...

    url: str

    def key_of(self, name: str) -> Any: ...


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
    r, v = _least_per_key(rows, vals)
    better = v < current[r]
    r = r[better]
    current[r] = v[better]
    return r


def _least_per_key(keys: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct key once (ascending) with its smallest value: a sort by (key, value), the
    first of each run (for values ``np.minimum.at`` cannot take, such as byte strings)."""
    order = np.lexsort((vals, keys))
    k, v = keys[order], vals[order]
    first = np.ones(k.size, dtype=bool)
    first[1:] = k[1:] != k[:-1]
    return k[first], v[first]


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
    s, v = _least_per_key(slots, val)
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


class _Split:
    """A block's out-edges cut in two: internal ones (both ends here; a CSR over local rows) and
    boundary ones (a CSR of ``slot``s, for ``_send_min``). Derived from ``LocalGraph`` on first
    use, so it needs no checkpoint. ``room`` (several blocks): ``indices`` and ``weight`` have that
    many entries more after the internal CSR's (``kernels.Relaxer``'s super-source edges)."""

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
        at a time (``kernels.row_edge_pieces``)."""
        if self.b_slot.size:  # (one block: none at all)
            yield from row_edge_pieces(self.b_indptr, rows)


def _integer_ids(keys: np.ndarray) -> np.ndarray:
    """The integer values of int64-coded (all-integer) ids."""
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

