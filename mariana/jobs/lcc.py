"""``mariana run lcc``: local clustering coefficient of every vertex (Graphalytics LCC)."""

from __future__ import annotations

from typing import Any

from ..engine import Graph, RunResult
from ..vertices.graphalytics import LCCBlock, LCCVertex
from .graphalytics import follow, load_graph, write_result
from .graphjob import GRAPH_KEYS, build_graph, collect
from .registry import BuildContext, Job


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    # directed: neighbours are in- plus out-neighbours, the numerator counts directed edges;
    # undirected: every edge both ways, which gives edges / (d (d - 1) / 2)
    edges = follow(load_graph(config), config)
    return build_graph("lcc", edges, bctx, config["mode"], LCCVertex, LCCBlock)


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    rows = collect(result)
    write_result(config, rows, "float")
    mean = sum(v for _, v in rows) / len(rows) if rows else 0.0
    top = sorted(rows, key=lambda r: (-r[1], r[0]))[: config["top"]]
    lines = [f"lcc: {len(rows)} vertices, mean clustering coefficient {mean:.6f}"]
    lines += [f"{vid:<24} {c:.6f}" for vid, c in top]
    if config["output"]:
        lines.append(f"wrote {len(rows)} coefficients to {config['output']}")
    return "\n".join(lines), {"vertices": len(rows), "mean": mean, "top": top}


JOB = Job(
    name="lcc",
    description="local clustering coefficient; directed graphs use in- plus out-neighbours (Graphalytics LCC)",
    keys=GRAPH_KEYS,
    build=build,
    finish=finish,
)
