"""LDBC Graphalytics input and output conventions, shared by the six graph jobs.

Input: ``graph=`` an edge file (``src dst [weight]``), ``vertices=`` the ``.v`` file (one vertex
id per line; isolated vertices included, and every edge endpoint must be listed), and
``directed=true|false`` (an undirected graph lists each edge once; the jobs then follow every
edge both ways).

Output: ``format=graphalytics`` writes ``vertex value`` lines (one space) as Graphalytics does:
ordered by vertex id numerically when every id is an integer, BFS unreachable
``9223372036854775807``, SSSP unreachable ``Infinity``, labels (CDLP, WCC) as vertex ids and WCC
components named by their numerically smallest member. ``format=mariana`` keeps the engine's
``vertex<TAB>value`` lines in string order (``inf`` for unreachable). ``format=auto`` (default)
is ``graphalytics`` when ``vertices=`` is given, otherwise ``mariana``, so the plain edge-list
jobs behave as before.

Block mode reads every job's graph in parts with all of these conventions (``partitioner/graphload.py``:
``directed=false`` routes each edge to both ends, the owner of each vertex checks it against the
``.v`` file, each worker writes its part with ``storage.graphoutput.write_part`` and the parts are merged in
the same order); vertex mode reads the whole graph in every process (``load_graph``) and writes
with ``write_result``. Both give the same bytes.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import StorageError, UsageError
from ..storage import read_text, write_text
from ..storage.compression import require
from ..storage.parts import check_output
from ..storage.edgelist import BOM, EdgeList, load_edges
from .registry import Key

__all__ = ["GRAPHALYTICS_KEYS", "read_vertices", "with_vertices", "load_graph", "output_format",
           "id_order", "label_ranks", "write_result", "value_format"]

GRAPHALYTICS_KEYS = (
    Key("vertices", None, "str", "Graphalytics .v file: every vertex id, one per line (isolated vertices "
        "included); implies format=graphalytics under format=auto"),
    Key("directed", True, "bool", "false: the edge file lists each undirected edge once; jobs follow it both ways"),
    Key("format", "auto", "str", "output lines: graphalytics ('vertex value', Graphalytics' conventions), "
        "mariana ('vertex<TAB>value'), auto (graphalytics when vertices= is set)",
        choices=("auto", "mariana", "graphalytics")),
)


def read_vertices(url: str) -> list[str]:
    """The vertex ids of a ``.v`` file (first field of each line; ``#`` comments, blanks ignored)."""
    try:
        text = read_text(url)
    except StorageError as exc:
        raise UsageError(f"cannot read vertices file: {exc}") from None
    text = text.removeprefix(BOM)  # (a byte-order mark is no part of the first id)
    ids: list[str] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        hash_at = line.find("#")
        if hash_at >= 0:
            line = line[:hash_at]
        parts = line.split()
        if not parts:
            continue
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


def load_graph(config: dict[str, Any], nonnegative: bool = False) -> EdgeList:
    """The edge list of ``graph=`` over the vertices of ``vertices=`` (if set), as stored: the
    caller applies ``directed`` (see ``follow``). ``nonnegative``: a negative weight is a bad line
    (``load_edges``)."""
    require(config.get("output"))  # (the output's format and place: said before the run, not after it)
    check_output(config.get("output"))
    edges = load_edges(config["graph"], nonnegative=nonnegative)
    if config.get("vertices"):
        edges = with_vertices(edges, read_vertices(config["vertices"]), config["vertices"])
    return edges


def follow(edges: EdgeList, config: dict[str, Any]) -> EdgeList:
    """The edges a directed algorithm follows: as listed, or both ways for ``directed=false``."""
    return edges if config.get("directed", True) else edges.undirected()


def output_format(config: dict[str, Any]) -> str:
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


def value_format(config: dict[str, Any], kind: str) -> Callable[[Any], str]:
    """How a value of ``kind`` (see ``write_result``) is written in the output format of ``config``."""
    graphalytics = output_format(config) == "graphalytics"
    if kind == "float":
        return _fmt_graphalytics_float if graphalytics else _fmt_mariana_float
    if kind == "depth":
        from ..vertices.graph.bfs import UNREACHABLE

        return str if graphalytics else (lambda d: "inf" if d == UNREACHABLE else str(d))
    return str


def write_result(config: dict[str, Any], rows: list[tuple[str, Any]], kind: str) -> None:
    """Write ``rows`` (sorted by id string) to ``config['output']`` if set.

    ``kind``: ``float`` (PR, LCC, SSSP), ``depth`` (BFS, int64 max = unreachable), ``label``
    (CDLP: vertex ids), ``component`` (WCC: vertex ids; in Graphalytics format each component is
    named by its smallest member in Graphalytics order).
    """
    url = config.get("output")
    if not url:
        return
    graphalytics = output_format(config) == "graphalytics"
    fmt = value_format(config, kind)
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
