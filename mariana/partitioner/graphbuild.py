"""A block's edges on the wire, and the block's CSR built from them (``GraphLoader``'s superstep 2).

The route sends each piece of a worker's input to every block in one *edge table*
(``edge_table``): the keys the piece's edges there use, once each and sorted (``kt``), with
each key's block (``ko``) and use (``kr``, bits: 1 a source, 2 a destination, 4 the source
of one-way edges here), and the one-way edges by source: ``sn``, how many edges each key with
bit 4 has (in ``kt`` order), and ``di``, each edge's destination as an int32 index into ``kt``,
the edges of one source together, in file order. An undirected graph's edges with both ends in
the block travel once, as ``bi``/``bj`` index pairs, for both directions. ``w``/``bw``: the
weights, in the same order.

The keys of a table are sorted as the block's rows are (``own``: every key sorted), so the
one-way edges of a table arrive in row order: the build places them where each row's edges go
with no sort (``build_block``, pass 3), and a run of a source's edges costs one count, not an
index per edge (a scale-19 piece: 145K edges to a block from 37K sources; with a source index
per edge, ``si``, the routed messages of a two-worker PageRank worker were 55 MiB, now 43).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..memory import trim_heap
from ..storage.ids import pack_keys, unpack_keys
from .csr import first_of_runs, group_by
from .fragment import LocalGraph
from .phase import Context, Message

__all__ = ["edge_table", "build_block", "BUILD_PIECE", "TRIM_BYTES"]

#: The build turns routed edges into rows and slots in pieces of about this many edges.
BUILD_PIECE = 1 << 20
#: ... and gives the heap back after placing this many bytes of messages (each trim costs the
#: faults of what is allocated again: after every message, +0.4 s on a scale-19 WCC build; this
#: often, none measurable, and one worker's peak 266-271 -> 258-261 MB)
TRIM_BYTES = 32 << 20
#: Pass 3 places the tables' one-way edges in this many stripes of rows, every table's part of a
#: stripe before the next stripe, and lets each stripe go once placed: the slots fill in row order
#: as the routed edges go (placed a table at a time, the first table's rows, all of them, touched
#: every page of the slots while every table was still held: a scale-19 two-worker PageRank's
#: peak, 16 MiB over the tables')
STRIPES = 16
#: ... giving the heap back after a stripe that freed this many bytes
STRIPE_TRIM = 1 << 20


class _Distinct:
    """The distinct values of parts, merged as they come: the parts of every message never exist
    at once. Each part is sorted, so a merge is a stable sort of a few sorted runs (a merge of
    runs, not a full sort), with no permutation array. A merge comes once the parts hold as many
    keys as the merged ones (+ 64K): waiting for twice as many (+ 256K) made it the build's peak
    on one worker and on two (scale-19 two-worker SSSP 133-141 -> 130-135 MiB, PageRank 107-113
    -> 106-107; the merges' time the same, 123 -> 127 ms on one worker)."""

    def __init__(self, empty: np.ndarray) -> None:
        self.keys = empty
        self.parts: list[np.ndarray] = []
        self.held = 0

    def add(self, keys: np.ndarray) -> None:
        self.parts.append(keys)
        self.held += len(keys)
        if self.held > len(self.keys) + (1 << 16):
            self._merge()

    def _merge(self) -> None:
        keys = np.concatenate([self.keys, *self.parts])
        self.keys, self.parts, self.held = self.keys[:0], [], 0  # (copied: not held through the sort)
        keys.sort(kind="stable")
        self.keys = keys[first_of_runs(keys)]

    def result(self) -> np.ndarray:
        """The distinct keys, sorted."""
        if self.parts:
            self._merge()
        return self.keys


def _used(index: np.ndarray, n: int) -> np.ndarray:
    """Which of ``n`` table entries ``index`` refers to (a mask)."""
    mask = np.zeros(n, dtype=bool)
    mask[index] = True
    return mask


def edge_table(keys: np.ndarray, owner: np.ndarray, src: np.ndarray, dst: np.ndarray,
               both: tuple[np.ndarray, np.ndarray] | None = None,
               weight: np.ndarray | None = None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Edges as they travel to their block (the module note): ``src``, ``dst`` (one way) and
    ``both`` (both ends in the block, undirected) index ``keys``; ``weight``: the one-way edges'.
    ~4 bytes an edge plus ~15 a source key and ~11 any other key. Also returns which of
    ``keys`` the table holds (indices)."""
    is_src, is_dst = _used(src, len(keys)), _used(dst, len(keys))
    if both is not None:
        ends = _used(both[0], len(keys)) | _used(both[1], len(keys))
        is_src |= ends
        is_dst |= ends
    used = np.flatnonzero(is_src | is_dst)
    used = used[np.argsort(keys[used], kind="stable")]
    at = np.empty(len(keys), dtype=np.int32)
    at[used] = np.arange(len(used), dtype=np.int32)
    ptr, order = group_by(at[src], len(used))  # the edges by source key, each source's in file order
    runs = np.diff(ptr)
    has_runs = runs > 0
    role = is_src[used].view(np.uint8) | (is_dst[used].view(np.uint8) << 1) | (has_runs.view(np.uint8) << 2)
    table = {"kt": pack_keys(keys[used]), "ko": owner[used], "kr": role,
             "sn": np.compress(has_runs, runs).astype(np.int32), "di": at[dst[order]]}
    if weight is not None:
        table["w"] = weight[order]
    if both is not None:
        table.update(bi=at[both[0]], bj=at[both[1]])
    return table, used


def _place(slot: np.ndarray, weight: np.ndarray | None, cursor: np.ndarray, rows: np.ndarray | None,
           n_row: np.ndarray, slots: np.ndarray, w: np.ndarray | None) -> None:
    """Edges in row order (``slots``, and ``w``: their weights; None: 1.0) to their rows' next
    places: ``n_row[j]`` of row ``rows[j]`` (None: of row ``j``, every row); those rows'
    ``cursor`` advanced past them. (Each row's first edge among them is worked out here, not
    passed in: an argument lives through the call, ~4 MB of a piece's rows at the build's peak.)"""
    first = np.cumsum(n_row, dtype=cursor.dtype)
    first -= n_row
    at = np.repeat((cursor if rows is None else cursor[rows]) - first, n_row)
    del first
    at += np.arange(len(slots), dtype=cursor.dtype)
    slot[at] = slots
    if weight is not None:
        weight[at] = 1.0 if w is None else w
    if rows is None:
        cursor += n_row
    else:
        cursor[rows] += n_row


def _place_runs(slot: np.ndarray, weight: np.ndarray | None, cursor: np.ndarray, rows: np.ndarray,
                runs: np.ndarray, slots: np.ndarray, w: np.ndarray | None) -> None:
    """Pass 3 for a table's one-way edges: ``runs[j]`` edges of row ``rows[j]`` (ascending, each
    once), their slots (and weights) together in that order: each row's next places, in pieces
    of about ``BUILD_PIECE`` edges, at row boundaries."""
    starts = np.concatenate(([0], np.cumsum(runs, dtype=np.int64)))
    a, m = 0, len(rows)
    while a < m:
        b = max(int(np.searchsorted(starts, starts[a] + BUILD_PIECE, side="right")) - 1, a + 1)
        e0, e1 = int(starts[a]), int(starts[b])
        _place(slot, weight, cursor, rows[a:b], runs[a:b], slots[e0:e1], None if w is None else w[e0:e1])
        a = b


def build_block(ctx: Context, messages: list[Message], *, numeric: bool, width: int, index: int,
                blocks: list[str], weights: bool,
                listed: Callable[[np.ndarray, list[np.ndarray]], np.ndarray] | None = None) -> LocalGraph:
    """The block's CSR from the edge tables routed to it, in bounded extra memory: the distinct
    sources and destinations first (per message, then merged), then each message's keys are
    looked up once (a row and a slot per key) and each row's edges counted (a table's one-way
    edges become their slots there, its rows one per source, and its key table goes), then
    each row's edges are placed: a table's one-way edges come in row order and go straight to
    their rows' next places; an undirected graph's edges with both ends here (``bi``/``bj``,
    placed both ways) by a counting sort by row, a piece at a time (``kernels.group_by``).
    A message is let go once placed. Inside a row the edges keep message order (messages by
    sender), which no algorithm depends on: each re-sorts or takes minima.

    ``weights``: keep the edges' weights (a graph whose weights are all 1.0 keeps none);
    ``listed``: with a ``vertices=`` file, the block's vertices from the keys its sources and
    the messages' ``listed`` parts (checked there: every endpoint must be listed)."""
    msgs = sorted(messages, key=lambda m: m.src)  # the same order on every runtime
    empty = np.empty(0, np.int64) if numeric else np.empty(0, f"S{width}")
    sources, dests, listed_parts = _Distinct(empty), _Distinct(empty), []
    for m in msgs:  # pass 1: the distinct ids (each message's key table is sorted and distinct)
        p = m.payload
        if "kt" in p:  # its sources, and every key owned here (not announced again)
            kt, role = unpack_keys(p["kt"]), p["kr"]  # (np.compress, not kt[mask]: kernels)
            sources.add(np.compress((role & 1).view(bool) | (p["ko"] == index), kt))
            dests.add(np.compress(((role >> 1) & 1).view(bool), kt))
        if "ann" in p:
            sources.add(unpack_keys(p.pop("ann")))
        if "listed" in p:
            listed_parts.append(unpack_keys(p.pop("listed")))
    own, targets = sources.result(), dests.result()
    del sources, dests
    # each destination's block, from the messages' key owners (one per id: no conflict)
    target_block = np.zeros(len(targets), dtype=np.int16)
    if listed is not None:  # every edge endpoint (all of them were announced) must be listed
        own = listed(own, listed_parts)
    # no message with weights: every weight is 1.0, and a graph without them is the same graph
    weighted = weights and any("w" in m.payload or "bw" in m.payload for m in msgs)
    k = len(own)
    row_t = np.int32 if k < 2 ** 31 else np.int64
    slot_t = np.int32 if len(targets) < 2 ** 31 else np.int64
    counts = np.zeros(k, dtype=np.int64)
    # per stripe of rows, per message: its one-way edges there as runs (rows, edges per row,
    # slots, weights); per message: its undirected pairs with both ends here as index arrays into
    # a row and a slot per key of its table (``lookup``), read twice (both ways), never stored twice
    Runs = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]
    Pairs = list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]
    stripes: list[list[Runs]] = [[] for _ in range(STRIPES)]
    bounds = np.linspace(0, k, STRIPES + 1).astype(np.int64)
    kept: list[tuple[tuple[np.ndarray, np.ndarray], Pairs]] = []
    freed = 0
    for m in msgs:  # pass 2: each key looked up once, each row's edges counted
        p = m.payload
        if "kt" not in p:
            continue
        kt, role, ko = unpack_keys(p.pop("kt")), p.pop("kr"), p.pop("ko")
        is_dst = np.flatnonzero((role >> 1) & 1)  # (positions, not masks)
        slot_of = np.zeros(len(kt), slot_t)
        at = np.searchsorted(targets, kt[is_dst])
        slot_of[is_dst] = at
        target_block[at] = ko[is_dst]
        lookup, pairs = None, []
        if "bi" in p:
            is_src = np.flatnonzero(role & 1)
            row_of = np.zeros(len(kt), row_t)
            row_of[is_src] = np.searchsorted(own, kt[is_src])
            bi, bj, bw = p.pop("bi"), p.pop("bj"), p.pop("bw", None) if weighted else None
            lookup, pairs = (row_of, slot_of), [(bi, bj, bw), (bj, bi, bw)]
            for src in (bi, bj):
                counts += np.bincount(row_of[src], minlength=k)
            rows = row_of[np.flatnonzero(role & 4)]
            del is_src
        else:
            rows = np.searchsorted(own, kt[np.flatnonzero(role & 4)]).astype(row_t)  # (ascending: kt is sorted)
        del kt, role, ko, at, is_dst
        runs, di = p.pop("sn"), p.pop("di")
        counts[rows] += runs  # (each row once in a table)
        w = p.pop("w", None) if weighted else None
        cut, starts = np.searchsorted(rows, bounds), np.concatenate(([0], np.cumsum(runs, dtype=np.int64)))
        for stripe, a, b in zip(stripes, cut[:-1].tolist(), cut[1:].tolist()):  # (rows ascending)
            if b > a:
                e0, e1 = int(starts[a]), int(starts[b])
                stripe.append((rows[a:b], runs[a:b], slot_of[di[e0:e1]], None if w is None else w[e0:e1].copy()))
        freed += di.nbytes + (slot_of.nbytes if lookup is None else 0)
        del di, slot_of, w
        if lookup is not None:
            kept.append((lookup, pairs))
        if freed >= TRIM_BYTES:  # the lookups then go where the heap has room, not beside the holes
            trim_heap()
            freed = 0
    indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    del counts
    edges = int(indptr[-1])
    slot = np.empty(edges, dtype=slot_t)
    weight = np.empty(edges) if weighted else None
    # each row's next place in the CSR: int32 where every place fits (the per-piece positions
    # and their arange then take 4 bytes an edge each, not 8: ~8 MB less at the build's peak)
    pos_t: Any = np.int32 if edges < 2 ** 31 else np.int64
    cursor = indptr[:-1].astype(pos_t)
    for i in range(STRIPES):  # pass 3: each row's edges to its next places (stable), a stripe at a time
        for runs_at in stripes[i]:
            _place_runs(slot, weight, cursor, *runs_at)
        freed += sum(a.nbytes for runs_at in stripes[i] for a in runs_at[2:] if a is not None)
        stripes[i] = []
        if freed >= STRIPE_TRIM:  # (its rows and counts: views of each table's, which go with the last stripe)
            trim_heap()
            freed = 0
    kept.reverse()
    while kept:  # ... then the pairs, message by message, by a counting sort by row, a piece at a time
        lookup, pairs = kept.pop()
        freed += sum(a.nbytes for a in (*lookup, *(a for pair in pairs for a in pair)) if a is not None)
        for src, dst, w in pairs:
            for lo in range(0, len(src), BUILD_PIECE):
                hi = lo + BUILD_PIECE
                ptr, order = group_by(lookup[0][src[lo:hi]], k)
                _place(slot, weight, cursor, None, np.diff(ptr), lookup[1][dst[lo:hi][order]],
                       None if w is None else w[lo:hi][order])
                del ptr, order
        del lookup, pairs
        if freed >= TRIM_BYTES:  # the placed messages were heap holes; the slots (one mapping) cannot reuse them
            trim_heap()
            freed = 0
    ctx.aggregate("load_vertices", k)
    ctx.aggregate("load_edges", edges)
    return LocalGraph(own, indptr, slot, targets, target_block, weight, blocks)

