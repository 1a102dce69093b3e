"""What pagerank, sssp and wcc share: config keys, graph construction in both modes, output."""

from __future__ import annotations

import math
from typing import Any, Callable

from ..engine import Graph, RunResult, Vertex
from ..errors import StorageError, UsageError
from ..partitioner import ExplicitStrategy
from ..storage import write_text
from ..vertices.graph_algos import Subgraph
from .edgelist import EdgeList, block_subgraphs
from .graphalytics import GRAPHALYTICS_KEYS
from .registry import BuildContext, Key

__all__ = ["GRAPH_KEYS", "build_graph", "collect", "write_output"]

GRAPH_KEYS = (
    Key("graph", None, "str", "edge list (path or fsspec URL): 'src dst [weight]' per line; default: shipped example"),
    Key("output", None, "str", "write 'vertex<TAB>value' lines here, sorted by vertex id"),
    Key("mode", "block", "str", "block: one numpy block vertex per worker (fast); vertex: one vertex per graph vertex",
        choices=("block", "vertex")),
    Key("top", 10, "int", "how many results to print"),
) + GRAPHALYTICS_KEYS


def build_graph(name: str, edges: EdgeList, bctx: BuildContext, mode: str,
                make_vertex: Callable[[str, list[tuple[str, Any]]], Vertex],
                make_block: Callable[[str, Subgraph], Vertex]) -> Graph:
    """One vertex per graph vertex (``mode=vertex``) or one block vertex per worker (``block``).

    Either way graph vertices are placed on workers by ``bctx.placement``.
    """
    g = Graph(name=name)
    if mode == "vertex":
        for vid, adj in zip(edges.ids, edges.adjacency()):
            g.add_vertex(make_vertex(vid, adj))
        g.placement = bctx.placement
        return g
    for b, sub in enumerate(block_subgraphs(edges, bctx.workers, bctx.placement, f"{name}-block-")):
        g.add_lazy(sub.blocks[b], lambda bid=sub.blocks[b], sub=sub: make_block(bid, sub), size_hint=len(sub.own))
    # block b lives on worker b; the strategy the user chose placed the graph vertices into blocks
    g.placement = ExplicitStrategy(lambda vid: int(vid.rsplit("-", 1)[1]), name=bctx.placement or "hash")
    return g


def collect(result: RunResult) -> list[tuple[str, Any]]:
    """(graph vertex id, value) pairs sorted by id, from vertex or block results."""
    rows: list[tuple[str, Any]] = []
    for vid, value in result.values.items():
        if isinstance(value, dict) and "ids" in value:
            rows.extend(zip(value["ids"], value["values"].tolist()))
        else:
            rows.append((vid, value))
    rows.sort(key=lambda r: r[0])
    return rows


def fmt_float(x: float) -> str:
    return "inf" if math.isinf(x) else repr(float(x))


def write_output(url: str | None, rows: list[tuple[str, Any]], fmt: Callable[[Any], str]) -> None:
    """Write ``vertex<TAB>value`` lines (already sorted) to ``url`` if given."""
    if not url:
        return
    try:
        write_text(url, "".join(f"{vid}\t{fmt(v)}\n" for vid, v in rows))
    except StorageError as exc:
        raise UsageError(f"cannot write output: {exc}") from None


def check_range(config: dict[str, Any], key: str, lo: float | None = None, hi: float | None = None) -> None:
    v = config[key]
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        bounds = f">= {lo}" if hi is None else f"between {lo} and {hi}"
        raise UsageError(f"config key '{key}' must be {bounds}, got {v!r}")
