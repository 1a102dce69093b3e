"""``mariana run wcc``: weakly connected components, labelled by their smallest vertex id."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..engine import Graph, RunResult
from ..vertices.graph_algos import WCCBlock, WCCVertex
from .graphalytics import load_graph, write_result
from .graphjob import GRAPH_KEYS, build_graph, collect
from .registry import BuildContext, Job


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    edges = load_graph(config).undirected()
    g = build_graph("wcc", edges, bctx, config["mode"], WCCVertex, WCCBlock)
    g.add_combiner("min")
    g.add_aggregator("updated", "sum")
    return g


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    rows = collect(result)
    if rows and not isinstance(rows[0][1], str):  # block mode labels are global indices
        ids = [vid for vid, _ in rows]
        rows = [(vid, ids[label]) for vid, label in rows]
    write_result(config, rows, "component")
    sizes = Counter(label for _, label in rows).most_common()
    largest = sorted(sizes, key=lambda c: (-c[1], c[0]))[: config["top"]]
    lines = [f"wcc: {len(sizes)} component(s) over {len(rows)} vertices, {result.supersteps} supersteps"]
    lines += [f"{label:<24} {size} vertices" for label, size in largest]
    if config["output"]:
        lines.append(f"wrote {len(rows)} labels to {config['output']}")
    return "\n".join(lines), {"vertices": len(rows), "components": len(sizes), "largest": largest}


JOB = Job(
    name="wcc",
    description="weakly connected components of an edge list read as undirected (HashMin)",
    keys=GRAPH_KEYS,
    build=build,
    finish=finish,
    progress_metric="updated",
)
