"""``mariana run bfs``: breadth-first search, the hop depth of every vertex from ``source``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import Graph, RunResult
from ..errors import UsageError
from ..vertices.graph.bfs import UNREACHABLE, BFSLoaded, BFSVertex
from .graphalytics import follow, load_graph, value_format, write_result
from .graphjob import GRAPH_KEYS, build_graph, build_loaded_graph, collect, parted_results
from ..storage.ids import Ids
from .registry import BuildContext, Job, Key
from .sssp import EXAMPLE_SOURCE, require_source


def _summarize(ids: Ids, depth: np.ndarray) -> dict[str, Any]:
    reached = depth[depth != UNREACHABLE]
    levels, counts = np.unique(reached, return_counts=True)
    return {"levels": {str(d): int(c) for d, c in zip(levels.tolist(), counts.tolist())}}


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    source = config["source"]
    if source is None:
        if config["graph"] is not None:
            raise UsageError("bfs needs a source vertex: --set source=VERTEX")
        source = EXAMPLE_SOURCE
    if config["mode"] == "block":
        g = build_loaded_graph("bfs", config, bctx, lambda bid, io: BFSLoaded(bid, io, source),
                               undirected=not config["directed"], summarize=_summarize,
                               fmt=value_format(config, "depth"), traversals=True)
    else:
        edges = follow(load_graph(config), config)
        require_source(edges, source)
        g = build_graph("bfs", edges, bctx, lambda vid, adj: BFSVertex(vid, adj, vid == source))
    g.add_combiner("min")
    g.add_aggregator("updated", "sum")
    return g


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    parted = parted_results(result, config)
    levels: dict[int, int] = {}
    if parted is not None:
        count = parted[0]
        for s in parted[1]:
            for d, c in s["levels"].items():
                levels[int(d)] = levels.get(int(d), 0) + c
    else:
        rows = collect(result)
        write_result(config, rows, "depth")
        count = len(rows)
        for _, d in rows:
            if d != UNREACHABLE:
                levels[d] = levels.get(d, 0) + 1
    reached = sum(levels.values())
    depth = max(levels, default=0)
    source = config["source"] or EXAMPLE_SOURCE
    lines = [f"bfs from {source}: {reached} of {count} vertices reachable, "
             f"depth {depth}, {result.supersteps} supersteps"]
    lines += [f"depth {d:>6}: {levels[d]} vertices" for d in sorted(levels)[: config["top"]]]
    if config["output"]:
        lines.append(f"wrote {count} depths to {config['output']}")
    return "\n".join(lines), {"vertices": count, "reachable": reached, "depth": depth,
                              "levels": {str(d): c for d, c in sorted(levels.items())}}


JOB = Job(
    name="bfs",
    description="breadth-first search: hop depth from a source along directed edges (Graphalytics BFS)",
    keys=GRAPH_KEYS + (Key("source", None, "str", "the source vertex id (required with graph=)"),),
    build=build,
    finish=finish,
    progress_metric="updated",
)
