"""``mariana run sssp``: single-source shortest weighted paths (weight 1 where absent)."""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from ..engine import Graph, RunResult
from ..errors import UsageError
from ..vertices.graph_algos import SSSPBlock, SSSPVertex
from .graphalytics import follow, load_graph, write_result
from .graphjob import GRAPH_KEYS, build_graph, collect
from .registry import BuildContext, Job, Key

EXAMPLE_SOURCE = "amsterdam"


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    edges = follow(load_graph(config), config)
    source = config["source"]
    if source is None:
        if config["graph"] is not None:
            raise UsageError("sssp needs a source vertex: --set source=VERTEX")
        source = EXAMPLE_SOURCE
    negative = np.flatnonzero(edges.weight < 0)
    if negative.size:
        e = int(negative[0])
        raise UsageError(f"{edges.where(e)}: negative weight {edges.weight[e]:g} (sssp needs weights >= 0)")
    try:
        src_index = _bisect(edges.ids, source)
    except ValueError:
        sample = ", ".join(edges.ids[:3])
        raise UsageError(f"source vertex '{source}' is not in {edges.url} "
                         f"({edges.n} vertices, e.g. {sample})") from None
    g = build_graph("sssp", edges, bctx, config["mode"],
                    lambda vid, adj: SSSPVertex(vid, adj, vid == source),
                    lambda bid, sub: SSSPBlock(bid, sub, src_index))
    g.add_combiner("min")
    g.add_aggregator("updated", "sum")
    return g


def _bisect(ids: list[str], v: str) -> int:
    """Index of ``v`` in the sorted ``ids`` (ValueError if absent)."""
    i = bisect.bisect_left(ids, v)
    if i < len(ids) and ids[i] == v:
        return i
    raise ValueError(v)


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    rows = collect(result)
    write_result(config, rows, "float")
    reached = sorted((r for r in rows if r[1] != float("inf")), key=lambda r: (r[1], r[0]))
    source = config["source"] or EXAMPLE_SOURCE
    lines = [f"sssp from {source}: {len(reached)} of {len(rows)} vertices reachable, {result.supersteps} supersteps"]
    lines += [f"{vid:<24} {dist:g}" for vid, dist in reached[: config["top"]]]
    if config["output"]:
        lines.append(f"wrote {len(rows)} distances to {config['output']}")
    return "\n".join(lines), {"vertices": len(rows), "reachable": len(reached), "nearest": reached[: config["top"]]}


JOB = Job(
    name="sssp",
    description="single-source shortest weighted paths over a directed edge list (Bellman-Ford supersteps)",
    keys=GRAPH_KEYS + (Key("source", None, "str", "the source vertex id (required with graph=)"),),
    build=build,
    finish=finish,
    progress_metric="updated",
)
