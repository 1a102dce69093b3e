"""LDBC Graphalytics' file conventions: the ``.v`` vertex file, the order of ids and labels,
and how values are written.

Output: Graphalytics writes ``vertex value`` lines (one space), ordered by vertex id numerically
when every id is an integer, BFS unreachable ``9223372036854775807``, SSSP unreachable
``Infinity``, labels (CDLP, WCC) as vertex ids and WCC components named by their numerically
smallest member. The engine's own format is ``vertex<TAB>value`` lines in string order (``inf``
for unreachable). Block mode writes the same bytes in parts (``graphoutput``); the whole-graph
writer here serves vertex mode.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import StorageError, UsageError
from .edgelist import BOM, EdgeList, text_fields
from .rundir import read_text, write_text

__all__ = ["UNREACHABLE", "output_format", "read_vertices", "with_vertices", "id_order", "label_ranks", "value_format", "write_rows"]

#: The depth of a vertex BFS does not reach (int64's largest value, as Graphalytics writes it).
UNREACHABLE = int(np.iinfo(np.int64).max)


def read_vertices(url: str) -> list[str]:
    """The vertex ids of a ``.v`` file (first field of each line; ``#`` comments, blanks ignored)."""
    try:
        text = read_text(url)
    except StorageError as exc:
        raise UsageError(f"cannot read vertices file: {exc}") from None
    text = text.removeprefix(BOM)  # (a byte-order mark is no part of the first id)
    ids: list[str] = []
    seen: dict[str, int] = {}
    for lineno, line, parts in text_fields(text):
        if len(parts) > 1:
            raise UsageError(f"{url}:{lineno}: expected one vertex id per line, found {len(parts)} fields: {line.strip()!r}")
        vid = parts[0]
        if vid in seen:
            raise UsageError(f"{url}:{lineno}: vertex {vid!r} listed twice (first at line {seen[vid]})")
        seen[vid] = lineno
        ids.append(vid)
    return ids


def with_vertices(edges: EdgeList, vertex_ids: Sequence[str], vertices_url: str) -> EdgeList:
    """``edges`` re-indexed over the sorted ``vertex_ids`` (a superset of the edge endpoints)."""
    ids = sorted(vertex_ids)
    if not edges.n:
        return EdgeList(edges.url, ids, edges.src, edges.dst, edges.weight, edges.lineno)
    table = np.asarray(ids) if ids else np.empty(0, dtype=str)
    old = np.asarray(edges.ids)
    at = np.searchsorted(table, old)
    at_c = np.minimum(at, max(len(ids) - 1, 0))
    missing = np.flatnonzero((at >= len(ids)) | (table[at_c] != old)) if len(ids) else np.arange(len(old))
    if missing.size:
        bad = int(missing[0])
        e = int(np.flatnonzero((edges.src == bad) | (edges.dst == bad))[0])
        raise UsageError(f"{edges.where(e)}: vertex {edges.ids[bad]!r} is not in {vertices_url}")
    return EdgeList(edges.url, ids, at[edges.src], at[edges.dst], edges.weight, edges.lineno)


def output_format(config: dict[str, Any]) -> str:
    """A graph job's output format: ``format=``, where ``auto`` is graphalytics when ``vertices=`` is set."""
    fmt = config.get("format", "auto")
    if fmt == "auto":
        return "graphalytics" if config.get("vertices") else "mariana"
    return str(fmt)


def _int_key(vid: str) -> int | None:
    try:
        x = int(vid)
    except ValueError:
        return None
    return x if str(x) == vid else None


def id_order(ids: Sequence[str]) -> list[int]:
    """Positions of ``ids`` in Graphalytics order: numeric if every id is an integer, else as given
    (``ids`` are in string order)."""
    keys = [_int_key(v) for v in ids]
    if any(k is None for k in keys):
        return list(range(len(ids)))
    return sorted(range(len(ids)), key=lambda i: keys[i])  # type: ignore[arg-type, return-value]


def label_ranks(ids: Sequence[str]) -> np.ndarray:
    """Rank of every vertex (``ids`` in string order) in label order (numeric for integer ids):
    CDLP's 'smallest label' compares these ranks."""
    order = id_order(ids)
    rank = np.empty(len(ids), dtype=np.int64)
    rank[np.asarray(order, dtype=np.int64)] = np.arange(len(ids))
    return rank


def _fmt_mariana_float(x: float) -> str:
    return "inf" if math.isinf(x) else repr(float(x))


def _fmt_graphalytics_float(x: float) -> str:
    return "Infinity" if math.isinf(x) else repr(float(x))


def value_format(graphalytics: bool, kind: str) -> Callable[[Any], str]:
    """How a value of ``kind`` (see ``write_rows``) is written, in Graphalytics' format or the engine's."""
    if kind == "float":
        return _fmt_graphalytics_float if graphalytics else _fmt_mariana_float
    if kind == "depth":
        return str if graphalytics else (lambda d: "inf" if d == UNREACHABLE else str(d))
    return str


def write_rows(url: str, rows: list[tuple[str, Any]], kind: str, graphalytics: bool) -> None:
    """Write ``rows`` (sorted by id string) to ``url`` whole.

    ``kind``: ``float`` (PR, LCC, SSSP), ``depth`` (BFS, ``UNREACHABLE``), ``label`` (CDLP: vertex
    ids), ``component`` (WCC: vertex ids; in Graphalytics format each component is named by its
    smallest member in Graphalytics order). A storage error is a ``UsageError``.
    """
    fmt = value_format(graphalytics, kind)
    if graphalytics:
        order = id_order([vid for vid, _ in rows])
        rows = [rows[i] for i in order]
        if kind == "component":  # name each component by its first member in Graphalytics order
            first: dict[Any, str] = {}
            for vid, lab in rows:
                first.setdefault(lab, vid)
            rows = [(vid, first[lab]) for vid, lab in rows]
    sep = " " if graphalytics else "\t"
    try:
        write_text(url, "".join(f"{vid}{sep}{fmt(v)}\n" for vid, v in rows))
    except StorageError as exc:
        raise UsageError(f"cannot write output: {exc}") from None
