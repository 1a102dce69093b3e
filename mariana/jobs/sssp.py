"""``mariana run sssp``: single-source shortest weighted paths (weight 1 where absent)."""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from ..engine import Graph, RunResult
from ..errors import UsageError
from ..storage.parts import discard_parts
from ..vertices.graph.sssp import OVERFLOW, SSSPLoaded, SSSPVertex
from .graphalytics import follow, load_graph, value_format, write_result
from .graphjob import GRAPH_KEYS, build_graph, build_loaded_graph, collect, parted_results
from ..storage.ids import Ids
from .registry import BuildContext, Job, Key

EXAMPLE_SOURCE = "amsterdam"


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    source = config["source"]
    if source is None:
        if config["graph"] is not None:
            raise UsageError("sssp needs a source vertex: --set source=VERTEX")
        source = EXAMPLE_SOURCE
    if config["mode"] == "block":
        top = config["top"]

        def summarize(ids: Ids, dist: np.ndarray) -> dict[str, Any]:
            reached = np.flatnonzero(dist != np.inf)
            best = reached[np.lexsort((ids.keys[reached], dist[reached]))[:top]] if top else reached[:0]
            over = np.flatnonzero(dist == OVERFLOW)[:1]  # (rows in id order: the block's first such vertex)
            return {"reached": int(reached.size),
                    "nearest": [[name, float(dist[i])] for name, i in zip(ids.of(best), best.tolist())],
                    "overflow": ids.of(over)[0] if over.size else None}

        g = build_loaded_graph("sssp", config, bctx, lambda bid, io: SSSPLoaded(bid, io, source),
                               undirected=not config["directed"], weights=True, nonnegative=True,
                               summarize=summarize, fmt=value_format(config, "float"), traversals=True)
    else:
        g = _whole_graph(config, bctx, source)
    g.add_combiner("min")
    g.add_aggregator("updated", "sum")
    return g


def _whole_graph(config: dict[str, Any], bctx: BuildContext, source: str) -> Graph:
    """Vertex mode: the graph read whole in every process."""
    edges = follow(load_graph(config, nonnegative=True), config)  # (a negative weight: a bad line)
    require_source(edges, source)
    return build_graph("sssp", edges, bctx, lambda vid, adj: SSSPVertex(vid, adj, vid == source))


def require_source(edges: Any, source: str) -> None:
    """A UsageError unless ``source`` is a vertex of ``edges`` (ids sorted)."""
    i = bisect.bisect_left(edges.ids, source)
    if i < len(edges.ids) and edges.ids[i] == source:
        return
    sample = ", ".join(edges.ids[:3])
    raise UsageError(f"source vertex '{source}' is not in {edges.url} ({edges.n} vertices, e.g. {sample})")


def refuse_overflow(result: RunResult, config: dict[str, Any]) -> None:
    """A UsageError naming the first vertex (in id order) whose distance passed float64's range
    (``OVERFLOW``: Graphalytics reads inf as unreachable, so no such distance is written); the
    parts the blocks wrote are discarded."""
    found = []
    for vid, value in result.values.items():
        if isinstance(value, dict) and "summary" in value:  # a block that wrote its part
            if value["summary"].get("overflow") is not None:
                found.append(value["summary"]["overflow"])
        elif isinstance(value, dict) and "ids" in value:  # a block's results, ids in order
            at = np.flatnonzero(np.asarray(value["values"]) == OVERFLOW)[:1]
            found += [value["ids"][int(i)] for i in at]
        elif value == OVERFLOW:
            found.append(vid)
    if found:
        if config["output"] and config["mode"] == "block":
            discard_parts(config["output"])
        raise UsageError(f"sssp: the distance to vertex {min(found)!r} overflows float64: the weights of its shortest "
                         f"path add up to {OVERFLOW:.6g} or more (scale the weights down)")


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    source = config["source"] or EXAMPLE_SOURCE
    refuse_overflow(result, config)
    parted = parted_results(result, config)
    if parted is not None:
        count = parted[0]
        reached_n = sum(s["reached"] for s in parted[1])
        nearest = sorted((tuple(r) for s in parted[1] for r in s["nearest"]), key=lambda r: (r[1], r[0]))
    else:
        rows = collect(result)
        write_result(config, rows, "float")
        count = len(rows)
        reached = sorted((r for r in rows if r[1] != float("inf")), key=lambda r: (r[1], r[0]))
        reached_n, nearest = len(reached), reached
    nearest = nearest[: config["top"]]
    lines = [f"sssp from {source}: {reached_n} of {count} vertices reachable, {result.supersteps} supersteps"]
    lines += [f"{vid:<24} {dist:g}" for vid, dist in nearest]
    if config["output"]:
        lines.append(f"wrote {count} distances to {config['output']}")
    return "\n".join(lines), {"vertices": count, "reachable": reached_n, "nearest": nearest}


JOB = Job(
    name="sssp",
    description="single-source shortest weighted paths over a directed edge list (Bellman-Ford supersteps)",
    keys=GRAPH_KEYS + (Key("source", None, "str", "the source vertex id (required with graph=)"),),
    build=build,
    finish=finish,
    progress_metric="updated",
)
