"""``mariana run bfs``: breadth-first search, the hop depth of every vertex from ``source``."""

from __future__ import annotations

from typing import Any

from ..engine import Graph, RunResult
from ..errors import UsageError
from ..vertices.graphalytics import UNREACHABLE, BFSBlock, BFSVertex
from .graphalytics import follow, load_graph, write_result
from .graphjob import GRAPH_KEYS, build_graph, collect
from .registry import BuildContext, Job, Key
from .sssp import EXAMPLE_SOURCE, _bisect


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    edges = follow(load_graph(config), config)
    source = config["source"]
    if source is None:
        if config["graph"] is not None:
            raise UsageError("bfs needs a source vertex: --set source=VERTEX")
        source = EXAMPLE_SOURCE
    try:
        src_index = _bisect(edges.ids, source)
    except ValueError:
        sample = ", ".join(edges.ids[:3])
        raise UsageError(f"source vertex '{source}' is not in {edges.url} "
                         f"({edges.n} vertices, e.g. {sample})") from None
    g = build_graph("bfs", edges, bctx, config["mode"],
                    lambda vid, adj: BFSVertex(vid, adj, vid == source),
                    lambda bid, sub: BFSBlock(bid, sub, src_index))
    g.add_combiner("min")
    g.add_aggregator("updated", "sum")
    return g


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    rows = collect(result)
    write_result(config, rows, "depth")
    reached = [d for _, d in rows if d != UNREACHABLE]
    levels: dict[int, int] = {}
    for d in reached:
        levels[d] = levels.get(d, 0) + 1
    source = config["source"] or EXAMPLE_SOURCE
    lines = [f"bfs from {source}: {len(reached)} of {len(rows)} vertices reachable, "
             f"depth {max(reached, default=0)}, {result.supersteps} supersteps"]
    lines += [f"depth {d:>6}: {levels[d]} vertices" for d in sorted(levels)[: config["top"]]]
    if config["output"]:
        lines.append(f"wrote {len(rows)} depths to {config['output']}")
    return "\n".join(lines), {"vertices": len(rows), "reachable": len(reached), "depth": max(reached, default=0),
                              "levels": {str(d): c for d, c in sorted(levels.items())}}


JOB = Job(
    name="bfs",
    description="breadth-first search: hop depth from a source along directed edges (Graphalytics BFS)",
    keys=GRAPH_KEYS + (Key("source", None, "str", "the source vertex id (required with graph=)"),),
    build=build,
    finish=finish,
    progress_metric="updated",
)
