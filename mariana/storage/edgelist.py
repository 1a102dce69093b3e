"""Edge-list files: ``src dst [weight]`` per line, ``#`` comments, blank lines ignored.

Vertex ids are strings; a vertex that appears only as a destination still exists. Vertices are
indexed 0..N-1 in sorted (string) order, the order every output file uses.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError
from .ids import decimal_len

__all__ = ["EdgeList", "InputError", "load_edges", "parse_edges", "example_graph_url", "table_ids", "table_weights",
           "table_columns", "text_fields"]


class InputError(UsageError):
    """A ``UsageError`` at a place of an input file: ``at``, the line (text) or row (tables) it
    names, so that of several bad lines the loader can name the first of the file."""

    def __init__(self, message: str, at: int) -> None:
        super().__init__(message)
        self.at = at

    def moved(self, url: str, at: int) -> "InputError":
        """The same error at line ``at`` of the file (its message named its line in a piece)."""
        prefix, message = f"{url}:{self.at}:", str(self)
        text = f"{url}:{at}:{message[len(prefix):]}" if message.startswith(prefix) else message
        return InputError(text, at)


@dataclass
class EdgeList:
    """A parsed edge list: sorted ids, edges as index arrays, weights (1.0 where absent)."""

    url: str
    ids: list[str]
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    lineno: np.ndarray

    @property
    def n(self) -> int:
        return len(self.ids)

    def where(self, edge: int) -> str:
        return f"{self.url}:{int(self.lineno[edge])}"

    def undirected(self) -> "EdgeList":
        """Every edge in both directions (self-loops once)."""
        keep = self.src != self.dst
        return EdgeList(self.url, self.ids, np.concatenate([self.src, self.dst[keep]]),
                        np.concatenate([self.dst, self.src[keep]]), np.concatenate([self.weight, self.weight[keep]]),
                        np.concatenate([self.lineno, self.lineno[keep]]))

    def adjacency(self, vertex_index: int | None = None) -> list[list[tuple[str, float]]]:
        """Out-edge lists ``[(dst id, weight), ...]`` per vertex, in file order."""
        out: list[list[tuple[str, float]]] = [[] for _ in self.ids]
        ids = self.ids
        for s, d, w in zip(self.src.tolist(), self.dst.tolist(), self.weight.tolist()):
            out[s].append((ids[d], w))
        return out


#: No edge-list line is this long: a longer one is another kind of file (the parsers' working
#: memory is many times the text's, so it is refused before they see it).
MAX_LINE = 1 << 20


def _check_line_length(text: str, url: str) -> None:
    """A ``UsageError`` naming the line if some line runs over ``MAX_LINE`` characters (one
    ``find`` per window of ``MAX_LINE``: a line of twice that surely fills a window)."""
    for start in range(0, len(text) - MAX_LINE + 1, MAX_LINE):
        if text.find("\n", start, start + MAX_LINE) < 0:
            lineno = text.count("\n", 0, start) + 1
            raise UsageError(f"{url}:{lineno}: a line of more than {MAX_LINE} characters "
                             f"(starting {_clip(text[start:start + 40])}): not an edge list")


def _clip(line: str, limit: int = 80) -> str:
    """``repr`` of a line for an error message, cut to ``limit`` characters."""
    line = line.strip()
    return repr(line) if len(line) <= limit else f"{line[:limit]!r}... ({len(line)} characters)"


def parse_edges(text: str, url: str) -> EdgeList:
    """Parse an edge list; any malformed line is a ``UsageError`` naming ``url:line``."""
    _check_line_length(text, url)
    fast = _parse_numeric(text, url)
    return fast if fast is not None else _parse_lines(text, url)


_COMMENT_BYTES = re.compile(rb"#[^\n]*")
_INT64 = np.iinfo(np.int64)


def _parse_numeric(text: str, url: str) -> EdgeList | None:
    """The common case in numpy: ASCII, integer vertex ids, the same number of fields (2 or 3)
    on every line that is not blank. 10x faster than ``_parse_lines``, with the same result;
    None for anything else (string ids, a bad line, ...): ``_parse_lines`` handles it, and
    names the line of any error."""
    table = numeric_table(text)
    if table is None:
        return None
    names, _, pairs, weight, lineno = table
    return EdgeList(url, names.tolist(), pairs[:, 0].copy(), pairs[:, 1].copy(), weight, lineno)


NumericTable = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
NumericEdges = tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]
def _tokens(text: str | bytes) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray] | None:
    """The fast parsers' first pass: (the bytes without comments, where each whitespace-separated
    token starts and stops, where each line break is), or None where ``str.split`` and
    ``splitlines`` could see other tokens or lines (not ASCII, a lone \\r, other control characters)."""
    if not text.isascii():
        return None
    raw = text if isinstance(text, bytes) else text.encode()
    if b"#" in raw:
        raw = _COMMENT_BYTES.sub(b"", raw)
    if b"\r" in raw and raw.count(b"\r") != raw.count(b"\r\n"):  # (a search for \r: ~6 ms less a piece)
        return None  # a lone \r ends a line for splitlines(): leave it to the line parser
    b = np.frombuffer(raw, np.uint8)
    if not b.size or b.max() == 127:
        return None
    low = np.flatnonzero(b < 32)  # tabs, line breaks, and control characters
    kind = b[low]
    if np.any((kind != 9) & (kind != 10) & (kind != 13)):
        return None  # other control characters are whitespace or line breaks for str.split()
    newlines = low[kind == 10]
    del low, kind
    solid = np.empty(len(b) + 1, dtype=bool)  # inside a token (after a space before the first byte)
    solid[0] = False
    np.greater(b, 32, out=solid[1:])
    flips = np.flatnonzero(solid[1:] != solid[:-1])  # where a token starts, then where it ends, ...
    if solid[-1]:
        flips = np.append(flips, len(b))
    del solid
    if len(b) < 2 ** 31:  # (int32 positions: 4 bytes a token less in every later step)
        flips = flips.astype(np.int32)
    del b
    return raw, flips[0::2], flips[1::2], newlines


def numeric_ids(text: str | bytes) -> np.ndarray | None:
    """The fast path of the ``vertices=`` parser: every id of a one-id-per-line text as int64, in
    file order, or None where the line parser must decide (a line of several fields, an id that
    is not the canonical decimal of its number, anything ``numeric_edges`` leaves to it)."""
    tokens = _tokens(text)
    if tokens is None:
        return None
    raw, first, stop, newlines = tokens
    if not first.size:
        return np.empty(0, np.int64)
    line = np.searchsorted(newlines, first)  # each token's line
    if bool((line[1:] == line[:-1]).any()):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            values = np.fromstring(raw, dtype=np.int64, sep=" ")
    except ValueError:
        return None
    if values.size != first.size or values.max() == _INT64.max or values.min() == _INT64.min:
        return None  # (overflow saturates)
    return values if np.array_equal(decimal_len(values), stop - first) else None


#: the fast edge parser reads a text in blocks of about this many bytes (cut after a line break):
#: every temporary of a block (token positions: ~2.4 bytes a byte of text) then stays under the
#: loader's mmap threshold and reuses heap memory. A 4 MB piece parsed whole made ~35 MB of fresh
#: mappings, each faulted in page by page: half its parse time (``memory``)
PARSE_BLOCK = 512 << 10


def numeric_edges(text: str | bytes | list[bytes]) -> NumericEdges | None:
    """The fast path of the edge parser: (the distinct ids as int64, in no particular order;
    edges as (m, 2) indices into them, int32 where they fit; the weights, or None where every
    line has two fields; the number of fields on each line, int8: a line with edges is
    ``np.flatnonzero(fields) + 1``), or None where the line parser must decide (anything but 2
    or 3 numeric fields per line, an id that is not the canonical decimal of its number).
    ``text``: str, or bytes (ASCII is checked first, so a caller need not decode), or bytes
    already in blocks of whole lines (as a loader reads them: no copy of the whole text). No id
    string is made: a worker that loads a part of a large graph holds 8 bytes per distinct id,
    not a string. Each ``PARSE_BLOCK`` of lines is read on its own (``_numeric_block``), then
    the ids of all of them are numbered at once."""
    if isinstance(text, list):
        pieces: Iterable[bytes] = text
    else:
        raw = text if isinstance(text, bytes) else text.encode()
        pieces = _blocks(raw, PARSE_BLOCK)
    blocks = []
    for block in pieces:
        if not block.isascii():
            return None
        part = _numeric_block(block)
        if part is None:
            return None
        blocks.append(part)
    k = {part[3] for part in blocks} - {0}  # (0: a block of blank or comment lines only)
    if len(k) != 1:
        return None
    ends = _cat([part[0] for part in blocks])
    weight = None if k == {2} else _cat([part[1] for part in blocks if part[1] is not None])
    fields = _cat([part[2] for part in blocks])
    del blocks
    unique, inverse = _unique(ends.reshape(-1))
    return unique, inverse.reshape(-1, 2), weight, fields


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate`` that does not copy a single array."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _blocks(raw: bytes, size: int) -> Iterator[bytes]:
    """``raw`` in blocks of about ``size`` bytes, each but the last ending with a line break."""
    start, n = 0, len(raw)
    while start < n:
        cut = raw.find(b"\n", start + size - 1) if start + size < n else -1
        end = n if cut < 0 else cut + 1
        yield raw[start:end]
        start = end


def _numeric_block(block: bytes) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, int] | None:
    """One block of ``numeric_edges``: (its edges' ids, (m, 2), int32 where every one fits, else
    int64; the weights or None; the fields on each of its lines, int8; the fields a line with
    edges has: 2, 3, or 0 where no line has any), or None. A few passes over the bytes, and
    where every line has the same 2 or 3 fields no search for line numbers."""
    tokens = _tokens(block)
    if tokens is None:
        return None
    raw, first, stop, newlines = tokens
    k = 2 if len(first) == 2 * len(newlines) else 3
    rows = len(first) // k
    if len(first) % k == 0 and len(newlines) == rows and rows and bool((stop[k - 1::k] <= newlines).all()) \
            and bool((newlines[:-1] < first[k::k]).all()):  # the usual case: k tokens on every line
        per_line = np.full(rows, k, dtype=np.int8)
    else:
        before = np.searchsorted(first, newlines)  # tokens before each line break
        per_line = np.diff(before, prepend=0, append=len(first))  # tokens on each line (the last: after the last break)
        if raw.endswith(b"\n"):  # (no line after the last break: the next block's first line is the next line)
            per_line = per_line[:-1]
        del before
        filled = per_line[per_line > 0]
        if not filled.size:
            return np.empty((0, 2), np.int64), None, per_line.astype(np.int8), 0
        k = int(filled[0])
        if k not in (2, 3) or not bool((filled == k).all()):
            return None
        per_line = per_line.astype(np.int8)
    del newlines
    columns = _weighted_columns(raw, first, stop) if k == 3 else None
    if columns is not None:  # canonical by construction
        return _narrow(columns[0]), columns[1], per_line, k
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            values = np.fromstring(raw, dtype=np.int64 if k == 2 else np.float64, sep=" ")
    except ValueError:
        return None
    if values.size != first.size:
        return None
    table = values.reshape(-1, k)
    weight = None
    if k == 3:
        weight, ends_ids = table[:, 2].copy(), table[:, :2]
        if not np.isfinite(weight).all() or np.any(np.abs(ends_ids) >= 2.0 ** 53) \
                or np.any(ends_ids != np.floor(ends_ids)):
            return None
        ends_ids = ends_ids.astype(np.int64)
    else:
        ends_ids = table
        if ends_ids.max() == _INT64.max or ends_ids.min() == _INT64.min:
            return None  # overflow saturates: leave it to the line parser
    del values, table
    # every id token must be the canonical decimal of its number ("007", "+7", "7.0" are other ids)
    token_len = (stop - first).reshape(-1, k)[:, :2].reshape(-1)
    if not np.array_equal(decimal_len(ends_ids.reshape(-1)), token_len):
        return None
    return _narrow(ends_ids), weight, per_line, k  # (int32: a piece's blocks and their concatenation, half the bytes)


def _weighted_columns(raw: bytes, first: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``src dst weight`` lines (tokens ``first``/``stop``, three per line) without numpy's float
    parser (~4x the time of the rest of a Graphalytics piece): the ids by ``canonical_ints``, the
    weights by ``plain_decimals``; None where a token needs the general path."""
    b = np.frombuffer(raw, np.uint8)
    ids = canonical_ints(b, first.reshape(-1, 3)[:, :2].reshape(-1), stop.reshape(-1, 3)[:, :2].reshape(-1))
    if ids is None:
        return None
    weight = plain_decimals(b, first[2::3], stop[2::3])
    return None if weight is None else (ids.reshape(-1, 2), weight)


def canonical_ints(b: np.ndarray, first: np.ndarray, stop: np.ndarray) -> np.ndarray | None:
    """The int64 of every token ``b[first:stop]`` that is the canonical decimal of a number in
    [0, 10^18) (digits only, no leading zero); None if any token is not. A pass per digit
    position, each a gather of one byte per token."""
    length = stop - first
    if not length.size:
        return np.empty(0, np.int64)
    top = int(length.max())
    if top > 18 or int(length.min()) < 1 or bool(((b[first] == 48) & (length > 1)).any()):
        return None
    value = np.zeros(len(first), np.int64)
    last = len(b) - 1
    for j in range(top):
        d = b[first if j == 0 else np.minimum(first + j, last)] - np.uint8(48)  # (past a token's end: unused)
        has = length > j
        if bool((has & (d > 9)).any()):
            return None
        if j:
            value *= np.where(has, 10, 1)
        value += np.where(has, d, 0)
    return value


def plain_decimals(b: np.ndarray, first: np.ndarray, stop: np.ndarray) -> np.ndarray | None:
    """``float()`` of every token ``b[first:stop]`` written ``[sign] digits [. digits] [e [sign]
    digits]`` (a dot with digits on either side) with a significand below 2^53 and a decimal
    exponent within +-22, to the bit: the significand and 10^|e| are exact doubles, so one
    multiplication or division rounds once, correctly, as ``float()`` does (Clinger's fast path).
    None if any token is another kind (inf, nan, hex, underscores, longer or larger numbers)."""
    length = stop - first
    m, last = len(first), len(b) - 1
    if not m:
        return np.empty(0)
    mant, exp, frac, digits = (np.zeros(m, np.int64) for _ in range(4))
    dot, in_exp, exp_digits = np.zeros(m, bool), np.zeros(m, bool), np.zeros(m, np.int64)
    neg, exp_neg, after_e = np.zeros(m, bool), np.zeros(m, bool), np.zeros(m, bool)
    for j in range(int(length.max())):
        c = b[first if j == 0 else np.minimum(first + j, last)]
        has = length > j
        d = c - np.uint8(48)
        digit = has & (d <= 9)
        if j == 0:
            neg = c == 45
            sign = neg | (c == 43)
        else:
            sign = has & after_e & ((c == 45) | (c == 43))
            exp_neg |= sign & (c == 45)
        point = has & (c == 46) & ~dot & ~in_exp
        e = has & ((c == 101) | (c == 69)) & ~in_exp & (digits > 0)
        if bool((has & ~(digit | point | e | sign)).any()):
            return None
        dot |= point
        in_mant = digit & ~in_exp
        mant *= np.where(in_mant, 10, 1)
        mant += np.where(in_mant, d, 0)
        digits += in_mant
        frac += in_mant & dot
        in_e = digit & in_exp
        exp *= np.where(in_e, 10, 1)
        exp += np.where(in_e, d, 0)
        exp_digits += in_e
        in_exp |= e
        after_e = e
    if bool(((digits == 0) | (digits > 18) | (mant >= 2 ** 53) | (in_exp & (exp_digits == 0))
             | (exp_digits > 3)).any()):
        return None
    e10 = np.where(exp_neg, -exp, exp) - frac
    if bool((np.abs(e10) > 22).any()):
        return None
    scale = 10.0 ** np.abs(e10)
    value = np.where(e10 < 0, mant / scale, mant * scale)
    return np.where(neg, -value, value)


def numeric_table(text: str) -> NumericTable | None:
    """``numeric_edges`` with the ids also as strings, both in string order, and the edges as
    ranks in that order (as ``_parse_lines`` numbers them)."""
    edges = numeric_edges(text)
    if edges is None:
        return None
    unique, inverse, weight, fields = edges
    names = unique.astype(str)
    order = np.argsort(names, kind="stable")
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    lineno = np.flatnonzero(fields) + 1
    return names[order], unique[order], rank[inverse], np.ones(len(inverse)) if weight is None else weight, lineno


def _narrow(values: np.ndarray) -> np.ndarray:
    """int64 ids as int32 when every one fits (``graphload._Chunk.ints`` widens them again)."""
    if values.size and -2 ** 31 < int(values.min()) and int(values.max()) < 2 ** 31:
        return values.astype(np.int32)
    return values


def _unique(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, return_inverse=True)`` with the distinct values as int64 (``a``: int32 or
    int64); by a lookup table when the ids are dense (no sort; the inverse int32 where it fits,
    as the loader keeps it)."""
    lo, hi = int(a.min()), int(a.max())
    if hi - lo > 4 * a.size + 1024:
        unique, inverse = np.unique(a, return_inverse=True)
        return unique.astype(np.int64, copy=False), inverse
    if 0 < lo and hi <= 4 * a.size + 1024:  # a table from 0: no shifted copy of a
        lo = 0
    at = a - lo if lo else a
    present = np.zeros(hi - lo + 1, bool)
    present[at] = True
    unique = np.flatnonzero(present)
    del present
    table = np.empty(hi - lo + 1, np.int32 if len(unique) < 2 ** 31 else np.int64)
    table[unique] = np.arange(len(unique))
    return unique + lo, table[at]


def text_fields(text: str) -> Iterator[tuple[int, str, list[str]]]:
    """``(line number, line without its comment, whitespace-split fields)`` of each line of a
    text graph file that holds any: ``#`` starts a comment, blank lines are skipped."""
    for lineno, line in enumerate(text.splitlines(), 1):
        hash_at = line.find("#")
        if hash_at >= 0:
            line = line[:hash_at]
        parts = line.split()
        if parts:
            yield lineno, line, parts


def _parse_lines(text: str, url: str) -> EdgeList:
    """The line-by-line parser: any input, and the error message for a malformed line."""
    srcs: list[str] = []
    dsts: list[str] = []
    weights: list[float] = []
    linenos: list[int] = []
    for lineno, line, parts in text_fields(text):
        if len(parts) == 2:
            w = 1.0
        elif len(parts) == 3:
            try:
                w = float(parts[2])
            except ValueError:
                raise InputError(f"{url}:{lineno}: weight {parts[2]!r} is not a number", lineno) from None
            if not math.isfinite(w):
                raise InputError(f"{url}:{lineno}: weight {parts[2]!r} must be a finite number", lineno)
        else:
            what = "only one field" if len(parts) == 1 else f"{len(parts)} fields"
            raise InputError(f"{url}:{lineno}: expected 'src dst [weight]', found {what}: {_clip(line)}", lineno)
        srcs.append(parts[0])
        dsts.append(parts[1])
        weights.append(w)
        linenos.append(lineno)
    ids = sorted(set(srcs).union(dsts))
    index = {v: i for i, v in enumerate(ids)}
    m = len(srcs)
    return EdgeList(
        url, ids,
        np.fromiter((index[v] for v in srcs), dtype=np.int64, count=m),
        np.fromiter((index[v] for v in dsts), dtype=np.int64, count=m),
        np.asarray(weights, dtype=np.float64).reshape(m),
        np.asarray(linenos, dtype=np.int64).reshape(m),
    )


#: a UTF-8 byte-order mark, decoded: some editors start a file with one; it is no part of the first id
BOM = "\ufeff"


def example_graph_url() -> str:
    """The small example graph shipped with the package."""
    from importlib.resources import files

    return str(files("mariana.jobs") / "data" / "example.e")


def load_edges(url: str | None, vertices: str | None = None, nonnegative: bool = False) -> EdgeList:
    """Read and parse the whole graph input at ``url`` (path or fsspec URL of a file, directory or
    glob; None: the shipped example) in this process, plus the ids of a ``vertices`` file.
    ``nonnegative``: a negative weight is a bad line (sssp), so that of several bad lines the
    first is named, as block mode names it.

    This is what ``mode=vertex`` reads; block mode loads in parts (partitioner/graphload.py).
    """
    from .splits import Split, list_inputs, read_table_split, read_text_split, whole_split

    if url == "":
        raise UsageError("config key 'graph' is empty: give an edge-list path or URL, or leave it out for the example")
    url = url or example_graph_url()
    files = list_inputs(url)
    from .parquet import PARQUET_EXTS

    parts = []
    for f, size in files:
        if f.endswith(PARQUET_EXTS):
            parts.append(parse_edges(_parquet_text(f, size, nonnegative), f))
            continue
        if f.endswith((".npy", ".npz")):
            from .splits import table_rows

            t = read_table_split(Split(f, 0, table_rows(f)[0], f[-3:]))
            src, dst, weight = table_columns(f, t, 0, nonnegative)
            lines = [f"{a} {b} {w!r}" for a, b, w in zip(src.tolist(), dst.tolist(),
                                                        (np.ones(len(src)) if weight is None else weight).tolist())]
            parts.append(parse_edges("\n".join(lines) + "\n", f))
            continue
        parts.append(_parse_file(read_text_split(whole_split(f, size)), f, nonnegative))  # (without a BOM)
    extra: list[str] = []
    if vertices:
        for f, size in list_inputs(vertices):
            raw = read_text_split(whole_split(f, size))
            extra += [t for t in (line.split("#", 1)[0].strip() for line in raw.decode("utf-8").splitlines()) if t]
    return _combine(parts, url, extra)


#: the largest magnitude of a table's integer id: 63 bits, as int64 holds it with either sign
ID_LIMIT = 2 ** 63 - 1


def table_ids(url: str, a: np.ndarray, first: int) -> np.ndarray:
    """The vertex ids of one column of an edge table (.npy, .npz, Parquet) as int64: the one rule
    of both modes (block mode's loader, vertex mode's ``load_edges``). An id is an integer of
    at most 63 bits (signed or unsigned dtypes; uint64 ids from 2^63 and int64's smallest value,
    -2^63, are refused: neither has a 63-bit magnitude), or a float that is a whole number below
    2^53 in magnitude (each such float is exactly one integer, written as the integer, ``2`` not
    ``2.0``). Any other dtype (bool, complex, bytes, ...) is refused by dtype; a bad value by
    the file's row number of it (``first``: the row number of ``a[0]``)."""
    kind = a.dtype.kind
    if kind not in "iuf":
        raise InputError(f"{url}: vertex ids must be integers of at most 63 bits, found dtype {a.dtype}", first)
    if not a.size:
        return a.astype(np.int64)
    if kind == "f":
        bad = ~(np.isfinite(a) & (np.abs(a) < 2.0 ** 53))
        bad[~bad] = a[~bad] != np.floor(a[~bad])
    elif kind == "u" and a.dtype.itemsize == 8:
        if int(a.max()) <= ID_LIMIT:  # (one pass: the usual case)
            return a.astype(np.int64)
        bad = a > np.uint64(ID_LIMIT)
    elif kind == "i" and a.dtype.itemsize == 8:
        if int(a.min()) >= -ID_LIMIT:
            return a
        bad = a < -ID_LIMIT
    else:
        return a.astype(np.int64)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(f"{url}: vertex ids must be integers of at most 63 bits, found {a[row].item()!r} "
                         f"({a.dtype}) in row {first + row}", first + row)
    return a.astype(np.int64)


def table_weights(url: str, w: np.ndarray, first: int, nonnegative: bool = False) -> np.ndarray:
    """The weights of an edge table as float64 (both modes): an integer or float dtype (bool,
    complex and others refused by dtype), every value finite and, ``nonnegative``, >= 0 (the
    first bad row named, ``first`` the row number of ``w[0]``)."""
    if w.dtype.kind not in "iuf":
        raise InputError(f"{url}: weights must be numbers, found dtype {w.dtype}", first)
    weight = w.astype(np.float64)
    bad = ~np.isfinite(weight)
    if nonnegative:
        bad |= weight < 0
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        if np.isfinite(weight[row]):
            raise InputError(f"{url}: row {first + row}: negative weight {weight[row]:g} (sssp needs weights >= 0)",
                             first + row)
        raise InputError(f"{url}: row {first + row}: weight must be a finite number", first + row)
    return weight


def table_columns(url: str, t: dict[str, np.ndarray], first: int,
                  nonnegative: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A piece of an edge table checked: its ``src`` and ``dst`` ids (``table_ids``; a column of
    strings, as Parquet gives them, as it is) and ``weight`` (``table_weights``; None where the
    table has none). Of several bad rows the error names the first, whatever each is."""
    def ids(a: np.ndarray) -> np.ndarray:
        return a if a.dtype.kind == "U" else table_ids(url, a, first)

    checks = (lambda: ids(t["src"]), lambda: ids(t["dst"]),
              lambda: table_weights(url, t["weight"], first, nonnegative) if "weight" in t else None)
    out: list[Any] = []
    errors: list[InputError] = []
    for check in checks:
        try:
            out.append(check())
        except InputError as exc:
            errors.append(exc)
    if errors:
        raise min(errors, key=lambda e: e.at)
    return out[0], out[1], out[2]


def _parse_file(raw: bytes, url: str, nonnegative: bool) -> EdgeList:
    """``parse_edges`` of a whole text file's bytes; a bad file raises the error of its first bad
    line of any kind (one that cannot be decoded or parsed, a negative weight where
    ``nonnegative``), named as block mode names it: the lines before a line that cannot be
    decoded or parsed are checked too (on the error path only)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        good = raw[:raw.rfind(b"\n", 0, exc.start) + 1]
        _parse_file(good, url, nonnegative)  # (raises if a line before it is bad)
        line = good.count(b"\n") + 1
        raise InputError(f"{url}:{line}: not UTF-8 text ({exc.reason})", line) from None
    try:
        edges = parse_edges(text, url)
    except InputError as exc:
        _parse_file("".join(text.splitlines(keepends=True)[:exc.at - 1]).encode(), url, nonnegative)
        raise
    if nonnegative:
        bad = np.flatnonzero(edges.weight < 0)
        if bad.size:
            e = int(bad[0])
            raise InputError(f"{edges.where(e)}: negative weight {edges.weight[e]:g} (sssp needs weights >= 0)",
                             int(edges.lineno[e]))
    return edges


def _parquet_text(url: str, size: int, nonnegative: bool = False) -> str:
    """A whole Parquet edge table as edge-list text (``mode=vertex`` reads graphs whole)."""
    from .parquet import parquet_splits, read_parquet_split

    lines: list[str] = []
    for groups in parquet_splits(url, size, max(size, 1)):
        for t, first in read_parquet_split(url, groups, weights=True):
            if "names" in t:
                src, dst = t["names"][t["pairs"][:, 0]], t["names"][t["pairs"][:, 1]]
            else:
                src, dst = t["src"], t["dst"]
            ends = table_columns(url, {"src": src, "dst": dst, **({"weight": t["weight"]} if "weight" in t else {})},
                                 first, nonnegative)
            weight = np.ones(len(ends[0])) if ends[2] is None else ends[2]
            lines += [f"{a} {b} {w!r}" for a, b, w in zip(ends[0].tolist(), ends[1].tolist(), weight.tolist())]
    return "\n".join(lines) + "\n"


def _combine(parts: list[EdgeList], url: str, extra: list[str]) -> EdgeList:
    """One edge list of several (their ids merged) plus isolated vertices ``extra``."""
    if len(parts) == 1 and not extra:
        return parts[0]
    ids = sorted(set().union(*(p.ids for p in parts), extra))
    index = np.array(ids, dtype=object)
    src, dst = [], []
    for p in parts:
        remap = np.searchsorted(index, np.array(p.ids, dtype=object)) if p.ids else np.zeros(0, np.int64)
        src.append(remap[p.src].astype(np.int64))
        dst.append(remap[p.dst].astype(np.int64))
    cat = np.concatenate
    return EdgeList(url, ids, cat(src) if src else np.zeros(0, np.int64), cat(dst) if dst else np.zeros(0, np.int64),
                    cat([p.weight for p in parts]) if parts else np.zeros(0),
                    cat([p.lineno for p in parts]) if parts else np.zeros(0, np.int64))
