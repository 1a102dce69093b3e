"""Partitioned graph loading, as Pregel and Giraph load graphs: every worker reads only its own
input splits and sends each edge to the block that owns its source vertex, in loading supersteps.

``GraphLoader`` is the ``GraphIO`` of ``vertices.graph.block.LoadedBlock``:

- superstep 0: list the input, cut it into splits (``storage.splits``), parse this worker's
  splits (the numeric fast path of ``edgelist``; the line parser names any bad line as
  ``file:line`` with its line number in the whole file), and aggregate what every worker must
  agree on (are all ids integers, their range, the longest id). A bad line (or table row) is not
  raised where it is found: each worker aggregates its first (``load_error``: file, split, line)
  and every worker raises the first of the input's at the start of superstep 1, so the line
  named does not depend on the worker count;
- superstep 1: turn ids into keys, send each edge to the owner of its source (an undirected
  graph: of both ends) and every id seen to its owner (a vertex seen only as a destination, or
  listed in the ``vertices=`` file, still exists): in the edge table sent to it, which names
  each key's owner, or else announced (the tables' form: ``graphbuild``);
- superstep 2: build the block: sorted own keys, CSR out-edges (``graphbuild.build_block``);
  aggregate the vertex count.

The owner of a vertex follows from its id alone: a hash of its key, or (``placement=range``,
integer ids) its position in [smallest id, largest id]. No process holds a whole-graph array.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from ..memory import (LOAD_MMAP_THRESHOLD, PARSE_HEAP_KEEP, RUN_MMAP_THRESHOLD, avoid_hugepage_stalls,
                             set_mmap_threshold, trim_heap)
from ..errors import UsageError
from ..storage.parquet import read_parquet_split
from ..storage.splits import (Split, _compressed, assigned, iter_text_split, lines_before, list_inputs, make_splits,
                              read_table_split, read_text_split, split_size)
from ..storage.ids import MAX_DIGITS, Ids, decimal_len, decode_keys, intkeys, pack_keys, strkeys
from ..storage.edgelist import (PARSE_BLOCK, EdgeList, InputError, _cat, _narrow, _parse_lines, _unique, numeric_edges,
                       numeric_ids, table_columns, table_ids, table_weights)
from .csr import group_by
from .fragment import BLOCK_TAG, LOAD_STEPS, LocalGraph
from .graphbuild import build_block, edge_table
from .phase import Context, Message
from ..storage.graphoutput import write_part

__all__ = ["GraphLoader", "LoadSpec", "LOAD_AGGREGATORS"]

#: The parser reads a split in pieces of this many bytes (its temporaries are ~10x a piece).
PIECE = 4 << 20
#: ... and an edge table in pieces of this many rows (~4 MB of int64 ids).
TABLE_PIECE = 1 << 18
LOAD_AGGREGATORS = {"load_error": "min", "load_numeric": "min", "load_lo": "min", "load_hi": "max", "load_width": "max",
                    "load_vertices": "sum", "load_edges": "sum", "source_found": "sum"}


def _hash_owner(keys: np.ndarray, workers: int) -> np.ndarray:
    """A well-mixed hash of keys (int64 or bytes), mod ``workers``."""
    if keys.dtype.kind == "S":
        width = keys.dtype.itemsize
        cols = np.ascontiguousarray(keys).view(np.uint8).reshape(len(keys), width)
        h = np.full(len(keys), 14695981039346656037, dtype=np.uint64)
        for c in range(width):
            h = (h ^ cols[:, c].astype(np.uint64)) * np.uint64(1099511628211)
    else:
        h = keys.astype(np.uint64)
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(31))) * np.uint64(0x9E3779B97F4A7C15)
        h = h ^ (h >> np.uint64(29))
    return (h % np.uint64(workers)).astype(np.int16)


@dataclass
class LoadSpec:
    """What to load: ``graph`` (file, directory or glob URL), ``vertices`` (a ``.v`` file of ids),
    whether edges count in both directions, whether weights are kept and must be >= 0."""

    graph: str
    vertices: str | None = None
    undirected: bool = False
    weights: bool = False
    nonnegative: bool = False
    split_mb: float = 64.0
    placement: str | None = None
    output: str | None = None
    #: output parts in Graphalytics' format: 'vertex value' lines, numeric order for integer ids
    graphalytics: bool = False


@dataclass
class _Chunk:
    """One parsed piece: its distinct ids, edges as (m, 2) indices into them, weights or None.

    Integer ids are held as ``values`` only (int32 where they fit, else int64: 4 or 8 bytes per
    distinct id), and ``names`` is None: their strings are made when keys are, one piece at a
    time. Other ids are ``names`` (``U``) and ``values`` is None."""

    split: Split
    names: np.ndarray | None
    values: np.ndarray | None
    pairs: np.ndarray
    weight: np.ndarray | None
    listed: bool = False  # ids of the vertices= file (every edge endpoint must be one of them)

    def ints(self) -> np.ndarray:
        """The integer ids as int64 (``values`` holds them as int32 where they fit: half the bytes
        of the parsed pieces a worker holds until they are routed)."""
        assert self.values is not None
        return self.values.astype(np.int64, copy=False)

    @property
    def size(self) -> int:
        return len(self.values) if self.names is None else len(self.names)  # type: ignore[arg-type]

    def ids(self) -> np.ndarray:
        """The ids as strings (``U``)."""
        if self.names is not None:
            return self.names
        assert self.values is not None
        return self.values.astype(f"U{MAX_DIGITS + 4}")

    def max_len(self) -> int:
        """The longest id, in characters."""
        if not self.size:
            return 1
        if self.names is None:
            assert self.values is not None
            return int(decimal_len(self.values).max())
        return int(np.char.str_len(self.names).max())


def _pieces(blocks: Iterator[bytes], size: int) -> Iterator[list[bytes]]:
    """Consecutive ``blocks`` grouped into pieces of about ``size`` bytes (the last may be less).

    A piece is read as blocks of ``PARSE_BLOCK`` (the parser's own unit) and kept as them: each
    block a heap allocation the next piece reuses. Read as one block of ``PIECE`` bytes, a piece
    was a fresh mapping every time (larger than the mmap threshold), faulted in page by page,
    and the parser copied it into its blocks anyway."""
    piece: list[bytes] = []
    held = 0
    for block in blocks:
        piece.append(block)
        held += len(block)
        if held >= size:
            yield piece
            piece, held = [], 0
    if piece:
        yield piece


class GraphLoader:
    """Loads one worker's part of a graph in ``LOAD_STEPS`` supersteps; writes its results.

    ``summarize(ids, values)``: the part's summary for the job's ``finish``; ``values`` is the
    block's array, or ``Ids`` when the values are labels (keys, decoded as the summary needs)."""

    def __init__(self, spec: LoadSpec, workers: int, blocks: list[str], index: int,
                 summarize: Callable[["Ids", Any], dict[str, Any]], fmt: Callable[[Any], str]) -> None:
        self.spec, self.workers, self.blocks, self.index = spec, workers, blocks, index
        self.summarize, self.fmt = summarize, fmt
        self.url = spec.graph
        self.chunks: list[_Chunk] = []
        self.numeric = True
        self.width = 1
        self.parsed = False

    # -- superstep 0 ---------------------------------------------------------------------------
    def _parse(self, ctx: Context) -> None:
        spec = self.spec
        inputs: list[tuple[str, Callable[[Split], list[_Chunk]]]] = [(spec.graph, self._parse_split)]
        if spec.vertices:
            inputs.append((spec.vertices, lambda split: [self._parse_vertices(split)]))
        files_before = 0
        for url, parse in inputs:
            files = list_inputs(url)
            order = {f: files_before + i for i, (f, _) in enumerate(files)}
            files_before += len(files)
            for split in self._my_splits(files):
                try:
                    self.chunks.extend(parse(split))
                except UsageError as exc:
                    # this worker's first bad line (its splits go in input order, each names its
                    # first): raised after this superstep, the first of every worker's (``step``),
                    # so that the line named does not depend on how many workers read the input
                    at = exc.at if isinstance(exc, InputError) else 0
                    ctx.aggregate("load_error", [order[split.url], split.start, at, str(exc)])
                    self.chunks = []
                    return
        numeric = all(c.values is not None or c.size == 0 for c in self.chunks)
        width = max((c.max_len() for c in self.chunks if c.size), default=1)
        if numeric and width > MAX_DIGITS:
            numeric = False
        ctx.aggregate("load_numeric", int(numeric))
        if not numeric:  # bytes, not characters, size the keys
            width = max((max(len(s.encode()) for s in c.ids().tolist()) for c in self.chunks if c.size),
                        default=1)
        ctx.aggregate("load_width", width)
        vals = [c.values for c in self.chunks if c.values is not None and c.values.size]
        if vals:
            ctx.aggregate("load_lo", int(min(v.min() for v in vals)))
            ctx.aggregate("load_hi", int(max(v.max() for v in vals)))

    def _my_splits(self, files: list[tuple[str, int]]) -> list[Split]:
        """This worker's splits of an input's ``files`` (``storage.splits``: even splits, dealt by
        bytes), in input order."""
        splits = make_splits(files, split_size(files, self.workers, int(self.spec.split_mb * (1 << 20))))
        return [split for _, split in assigned(splits, self.index, self.workers)]

    def _parse_split(self, split: Split) -> list[_Chunk]:
        """The edges of one split, parsed in pieces of at most ``PIECE`` bytes (cut at line ends),
        so the parser's temporaries stay small whatever the split size; each piece's reuse the
        heap the last one freed (``PARSE_HEAP_KEEP``: no trim between pieces)."""
        if split.kind == "parquet":
            return [self._table_chunk(split, t, first) for t, first in
                    read_parquet_split(split.url, (split.start, split.end), self.spec.weights, TABLE_PIECE)]
        if split.kind in ("npy", "npz"):  # in pieces of rows, but a deflated .npz cannot be entered midway
            step = TABLE_PIECE if split.kind == "npy" or not _compressed(split.url) else max(split.end - split.start, 1)
            subs = [Split(split.url, a, min(a + step, split.end), split.kind) for a in range(split.start, split.end, step)]
            return [self._table_chunk(sub, read_table_split(sub), sub.start) for sub in subs]
        chunks, above = [], 0
        for piece in _pieces(iter_text_split(split, PARSE_BLOCK), PIECE):  # never the split whole
            chunks.append(self._parse_piece(split, piece, above))
            above += sum(block.count(b"\n") for block in piece)
            del piece
        return chunks

    def _parse_piece(self, split: Split, piece: list[bytes], above: int) -> _Chunk:
        """One piece of lines, in the blocks it was read in; ``above``: how many lines of the split
        come before it."""
        spec = self.spec
        table = numeric_edges(piece)  # ASCII numbers: straight from the bytes
        if table is not None:
            values, pairs, weight, fields = table
            small = pairs.astype(np.int32, copy=False) if len(values) < 2 ** 31 else pairs
            chunk = _Chunk(split, None, _narrow(values), small, weight)
            if spec.nonnegative and weight is not None and bool((weight < 0).any()):  # (the only bad line here)
                e = int(np.flatnonzero(weight < 0)[0])
                line = lines_before(split) + above + int(np.flatnonzero(fields)[e]) + 1
                raise InputError(f"{split.url}:{line}: negative weight {weight[e]:g} (sssp needs weights >= 0)", line)
        else:
            el = self._parse_text(split, b"".join(piece), above)
            names = np.array(el.ids, dtype=str) if el.ids else np.empty(0, dtype="U1")
            chunk = _Chunk(split, names, None, np.stack([el.src, el.dst], axis=1), el.weight)
        if not spec.weights or chunk.weight is None or bool((chunk.weight == 1.0).all()):  # unit: held as none
            chunk.weight = None
        return chunk

    def _parse_text(self, split: Split, whole: bytes, above: int) -> EdgeList:
        """The line parser's edges of a piece's bytes (``above``: lines of the split before it),
        negative weights refused as the fast path refuses them. A bad piece raises the error of
        its first bad line of any kind, named by its line in the whole file: the lines before
        one that cannot be decoded or parsed are checked too (on the error path only)."""
        try:
            text = whole.decode("utf-8")
        except UnicodeDecodeError as exc:
            good = whole[:whole.rfind(b"\n", 0, exc.start) + 1]
            self._parse_text(split, good, above)  # (raises if a line before it is bad)
            line = lines_before(split) + above + good.count(b"\n") + 1
            raise InputError(f"{split.url}:{line}: not UTF-8 text ({exc.reason})", line) from None
        try:
            el = _parse_lines(text, split.url)
        except InputError as exc:
            good_text = "".join(text.splitlines(keepends=True)[:exc.at - 1])
            self._parse_text(split, good_text.encode(), above)
            raise exc.moved(split.url, lines_before(split) + above + exc.at) from None
        if self.spec.nonnegative:
            bad = np.flatnonzero(el.weight < 0)
            if bad.size:
                e = int(bad[0])
                line = lines_before(split) + above + int(el.lineno[e])
                raise InputError(f"{split.url}:{line}: negative weight {el.weight[e]:g} (sssp needs weights >= 0)",
                                 line)
        return el

    def _table_chunk(self, split: Split, t: dict[str, np.ndarray], first: int) -> _Chunk:
        """A piece of an edge table (``first``: the file's row number of its first row), checked
        by the rule vertex mode reads tables by (``edgelist.table_columns``)."""
        if "names" in t or t["src"].dtype.kind == "U" or t["dst"].dtype.kind == "U":  # Parquet string ids
            return self._named_table_chunk(split, t, first)
        trim_heap()
        src, dst, weight = table_columns(split.url, t, first, self.spec.nonnegative)
        ids = np.stack([src, dst], axis=1)
        del src, dst
        unique, inverse = _unique(ids.reshape(-1))  # by a lookup table when the ids are dense, as text
        del ids
        pairs = inverse.reshape(-1, 2)
        return _Chunk(split, None, unique, pairs.astype(np.int32) if len(unique) < 2 ** 31 else pairs,
                      weight if self.spec.weights else None)

    def _named_table_chunk(self, split: Split, t: dict[str, np.ndarray], first: int) -> _Chunk:
        """A Parquet table with string ids (``names`` and ``pairs``, or ``U`` arrays ``src`` and
        ``dst`` when one of them is a number column): like the ids of a text edge list. Of
        several bad rows (ids, weights), the error names the first."""
        errors: list[InputError] = []

        def checked(check: Callable[[], np.ndarray], stand_in: np.ndarray) -> np.ndarray:
            try:
                return check()
            except InputError as exc:
                errors.append(exc)
                return stand_in  # (the other checks still look for an earlier bad row)

        rows = len(t["pairs"]) if "names" in t else len(t["src"])
        weight = checked(lambda: table_weights(split.url, t["weight"], first, self.spec.nonnegative),
                         np.ones(rows)) if "weight" in t else np.ones(rows)
        if "names" in t:
            names, pairs = t["names"], t["pairs"]
        else:
            ends = []
            for a in (t["src"], t["dst"]):
                if a.dtype.kind != "U":
                    numbers = a
                    a = checked(lambda: table_ids(split.url, numbers, first).astype(str), np.full(len(a), "0"))
                ends.append(a)
            names, inverse = np.unique(np.concatenate(ends), return_inverse=True)
            pairs = inverse.reshape(2, -1).T
        bad = names == ""
        for c in "\t\n\r":  # an id must stay one field of one line of the output
            bad |= np.char.find(names, c) >= 0
        if bad.any():
            row = int(np.flatnonzero(bad[pairs].any(axis=1))[0])
            errors.append(InputError(f"{split.url}: row {first + row}: vertex id {str(names[pairs[row, 0]])!r} -> "
                                     f"{str(names[pairs[row, 1]])!r}: ids must be non-empty, without tabs or line "
                                     f"breaks", first + row))
        if errors:
            raise min(errors, key=lambda e: e.at)
        return _Chunk(split, names, None, pairs.astype(np.int32) if len(names) < 2 ** 31 else pairs,
                      weight if self.spec.weights else None)

    def _parse_vertices(self, split: Split) -> _Chunk:
        raw = read_text_split(split)
        ints = numeric_ids(raw)  # integer ids, one a line, none twice: numpy (~40x the line parser)
        if ints is not None:
            values = np.unique(ints)
            if values.size == ints.size:
                return _Chunk(split, None, values, np.empty((0, 2), np.int64), None, listed=True)
        undecodable = None  # (the line that cannot be decoded, why)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            good = raw[:raw.rfind(b"\n", 0, exc.start) + 1]  # the lines before it are checked first
            text, undecodable = good.decode("utf-8"), (good.count(b"\n") + 1, exc.reason)
        tokens = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        ids = sorted({t for t in tokens if t})
        if undecodable or len(ids) < sum(1 for t in tokens if t) or any(len(t.split()) > 1 for t in tokens):
            first: dict[str, int] = {}  # the first bad line of any kind (Graphalytics .v: one id per line)
            for i, t in enumerate(tokens):
                line = lines_before(split) + i + 1
                if len(t.split()) > 1:
                    raise InputError(f"{split.url}:{line}: expected one vertex id per line, "
                                     f"found {len(t.split())} fields: {t!r}", line)
                if t in first:
                    raise InputError(f"{split.url}:{line}: vertex {t!r} listed twice "
                                     f"(first at line {lines_before(split) + first[t] + 1})", line)
                if t:
                    first[t] = i
            assert undecodable is not None
            line = lines_before(split) + undecodable[0]
            raise InputError(f"{split.url}:{line}: not UTF-8 text ({undecodable[1]})", line)
        names = np.array(ids, dtype=str) if ids else np.empty(0, dtype="U1")
        values = None
        try:
            ints = np.array([int(t) for t in ids], dtype=np.int64)
            if all(str(v) == t for v, t in zip(ints.tolist(), ids)):
                values = ints
        except (ValueError, OverflowError):
            pass
        return _Chunk(split, names if values is None else None, values, np.empty((0, 2), np.int64), None,
                      listed=True)

    # -- superstep 1 ---------------------------------------------------------------------------
    def key_of(self, name: str) -> Any:
        """The key of id ``name`` (one that matches no vertex if it cannot be an id here)."""
        if self.numeric:
            ok = name.lstrip("-").isdigit() and str(int(name)) == name and len(name) <= MAX_DIGITS
            return int(strkeys(np.array([name]))[0]) if ok else -1
        raw = name.encode()
        return np.bytes_(raw) if len(raw) <= self.width and raw else np.bytes_(b"\xff" * (self.width + 1))

    def _keys(self, c: _Chunk) -> np.ndarray:
        if self.numeric:
            return intkeys(c.ints()) if c.values is not None else strkeys(c.ids())
        return np.char.encode(c.ids(), "utf-8").astype(f"S{self.width}") if c.size else \
            np.empty(0, f"S{self.width}")

    def _owners(self, c: _Chunk, keys: np.ndarray, lo: int, hi: int) -> np.ndarray:
        w = self.workers
        if w == 1:
            return np.zeros(len(keys), np.int16)
        if self.spec.placement == "range" and self.numeric and c.values is not None:
            span = max(hi - lo + 1, 1)
            return np.minimum(((c.ints() - lo) / span * w).astype(np.int64), w - 1).astype(np.int16)
        return _hash_owner(keys, w)

    def _route(self, ctx: Context) -> None:
        self.numeric = bool(ctx.aggregated("load_numeric", 1))
        self.width = int(ctx.aggregated("load_width", 1))
        lo, hi = int(ctx.aggregated("load_lo", 0)), int(ctx.aggregated("load_hi", 0))
        out: dict[int, dict[str, list[np.ndarray]]] = {}
        while self.chunks:  # each parsed piece is let go as soon as it is routed
            c = self.chunks.pop()
            keys = self._keys(c)
            owner = self._owners(c, keys, lo, hi)
            s, d = c.pairs[:, 0], c.pairs[:, 1]
            weight = c.weight
            if weight is not None and bool((weight == 1.0).all()):  # unit weights travel as none (1.0 when built)
                weight = None
            # each edge goes to the owner of its source, in file order; an undirected graph also
            # sends each edge between two blocks, reversed, to the owner of its destination, and an
            # edge inside one block (not a loop) once, as "b", for both ways (the receiver expands
            # it). One counting sort by (block, kind) groups them (masks and a sort per kind took
            # ~1.45x one block's whole route per block on two, scale-19 WCC), and another the
            # reversed ones: per group, the positions of the edges that go as they are and of those
            # that go reversed (after the others in a message).
            shares: list[tuple[int, np.ndarray | None, np.ndarray | None]] = [(0, None, None)] if len(s) else []
            if self.spec.undirected and self.workers == 1:  # a loop one way, every other edge as "b" (masks)
                loop = s == d
                shares = [(g, sel, None) for g, sel in ((0, loop), (1, ~loop)) if sel.any()]
            elif self.spec.undirected or self.workers > 1:
                groups, shares = 2 * self.workers, []
                group = owner[s].astype(np.int32) * 2  # per edge: 2 x its block, + 1 when it travels as "b"
                back: tuple[np.ndarray, np.ndarray] | None = None  # the reversed edges' (bounds, positions)
                if self.spec.undirected:
                    od = owner[d].astype(np.int32) * 2
                    cross = group != od
                    group += ~cross & (s != d)
                    at = np.flatnonzero(cross).astype(np.int32)
                    if at.size:  # grouped apart: no copy of the piece's columns with them appended
                        back = group_by(od[at], groups, values=at)
                    del od, cross, at
                bounds, order = group_by(group, groups)
                for g in range(groups):
                    rev = None if back is None or back[0][g] == back[0][g + 1] else back[1][back[0][g]:back[0][g + 1]]
                    if bounds[g + 1] > bounds[g] or rev is not None:
                        shares.append((g, order[bounds[g]:bounds[g + 1]], rev))
                del group, bounds, back
            for g, sel, rev in shares:
                box, kind = out.setdefault(g >> 1, {}), "b" if g & 1 else ""
                for col, ahead, behind in (("s", s, d), ("d", d, s), ("w", weight, weight)):
                    if ahead is not None:
                        box.setdefault(kind + col, []).append(ahead if sel is None else ahead[sel])
                        if rev is not None:
                            box[kind + col].append(behind[rev])
            # every id seen exists at its owner: the keys of a block's edge table tell it their
            # owners, so only the owned ids its table lacks are announced (one block: none)
            seen = np.flatnonzero(np.bincount(owner, minlength=self.workers))  # (a sort of the owners took ~4 %)
            for blk in seen.tolist():
                out.setdefault(blk, {})
            listed = c.listed
            del c, s, d, shares, weight
            # each piece leaves in its own messages: no concatenation of the whole share (that
            # held two copies of the largest column for a moment)
            none = np.empty(0, np.int32)
            for blk in sorted(out):
                box = out.pop(blk)
                payload: dict[str, np.ndarray] = {}
                mine = (owner == blk) if len(seen) > 1 else np.ones(len(keys), bool)
                if "s" in box or "bs" in box:
                    both_ends = (_cat(box.pop("bs")), _cat(box.pop("bd"))) if "bs" in box else None
                    payload, used = edge_table(keys, owner, _cat(box.pop("s", [none])), _cat(box.pop("d", [none])),
                                               both_ends, _cat(box.pop("w")) if "w" in box else None)
                    mine[used] = False
                    del used
                if mine.any():
                    payload["listed" if listed else "ann"] = pack_keys(np.compress(mine, keys))
                del mine
                payload.update({k: _cat(box.pop(k)) for k in list(box)})  # the weights of "b" edges
                ctx.send(self.blocks[blk], payload, tag=BLOCK_TAG)
            del keys, owner
            ctx.flush()  # the other workers' messages leave now (cluster runtime), not at the end

    # -- superstep 2 ---------------------------------------------------------------------------
    def _build(self, ctx: Context, messages: list[Message]) -> LocalGraph:
        """The block's CSR from the edge tables routed to it (``graphbuild.build_block``)."""
        return build_block(ctx, messages, numeric=self.numeric, width=self.width, index=self.index,
                           blocks=self.blocks, weights=self.spec.weights,
                           listed=self._listed if self.spec.vertices else None)

    def _listed(self, own: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
        """The block's vertices with a ``vertices=`` file: its ids owned here (``parts``), each
        listed once, and every edge endpoint owned here (``own``) among them."""
        listed = np.sort(np.concatenate(parts)) if parts else own[:0]
        twice = np.flatnonzero(listed[1:] == listed[:-1])
        if twice.size:  # in two splits (one split names its line)
            vid = str(decode_keys(listed[twice[:1]])[0])
            raise UsageError(f"{self.spec.vertices}: vertex {vid!r} listed twice")
        at = np.minimum(np.searchsorted(listed, own), max(len(listed) - 1, 0))
        missing = np.flatnonzero(listed[at] != own) if len(listed) else np.arange(len(own))
        if missing.size:
            vid = str(decode_keys(own[missing[:1]])[0])
            raise UsageError(f"{self.url}: vertex {vid!r} is not in {self.spec.vertices} "
                             f"(every edge endpoint must be listed there)")
        return listed

    def step(self, ctx: Context, messages: list[Message]) -> LocalGraph | None:
        s = ctx.superstep
        if s > 0 and not self.parsed:
            raise UsageError(f"cannot resume {ctx.vertex_id} from a checkpoint taken while it was loading its graph "
                             f"(superstep {s - 1} < {LOAD_STEPS}): run the job again from the start")
        try:
            if s == 1 and ctx.aggregated("load_error") is not None:  # [file, split, line, message]: the first
                raise UsageError(ctx.aggregated("load_error")[-1])
            if s == 0:
                self.parsed = True
                avoid_hugepage_stalls()
                set_mmap_threshold(LOAD_MMAP_THRESHOLD, keep=PARSE_HEAP_KEEP)
                self._parse(ctx)
            elif s == 1:
                set_mmap_threshold(LOAD_MMAP_THRESHOLD)
                self._route(ctx)
            elif s == LOAD_STEPS - 1:
                try:
                    return self._build(ctx, messages)
                finally:
                    set_mmap_threshold(RUN_MMAP_THRESHOLD)
            return None
        finally:
            trim_heap()

    # -- results -------------------------------------------------------------------------------
    def result(self, own: np.ndarray, values: np.ndarray, labels: bool) -> dict[str, Any]:
        """This block's results, written as its part of ``output`` (``storage.graphoutput``)."""
        return write_part(self.spec.output, self.index, own, values, labels, self.fmt, self.spec.graphalytics,
                          self.summarize)
