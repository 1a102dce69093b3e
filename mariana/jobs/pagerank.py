"""``mariana run pagerank``: PageRank as defined by networkx and LDBC Graphalytics."""

from __future__ import annotations

from typing import Any

from ..engine import Graph, RunResult
from ..vertices.graph_algos import PageRankBlock, PageRankVertex, pagerank_master
from .graphalytics import follow, load_graph, write_result
from .graphjob import GRAPH_KEYS, build_graph, check_range, collect
from .registry import BuildContext, Job, Key


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    check_range(config, "damping", 0.0, 1.0)
    check_range(config, "iterations", 0)
    check_range(config, "tol", 0.0)
    d, it, l1 = config["damping"], config["iterations"], config["tol"] > 0
    edges = follow(load_graph(config), config)
    g = build_graph("pagerank", edges, bctx, config["mode"],
                    lambda vid, adj: PageRankVertex(vid, adj, d, it, l1),
                    lambda bid, sub: PageRankBlock(bid, sub, d, it, l1))
    g.add_aggregator("dangling", "fsum")
    g.add_aggregator("l1", "fsum")
    g.master_compute = pagerank_master(config["tol"])
    return g


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    rows = collect(result)
    write_result(config, rows, "float")
    top = sorted(rows, key=lambda r: (-r[1], r[0]))[: config["top"]]
    updates = max(result.supersteps - 1, 0)
    lines = [f"pagerank: {len(rows)} vertices, {updates} update(s) ({result.halt_reason})"]
    lines += [f"{i + 1:>4}  {vid:<24} {rank:.10f}" for i, (vid, rank) in enumerate(top)]
    if config["output"]:
        lines.append(f"wrote {len(rows)} ranks to {config['output']}")
    return "\n".join(lines), {"vertices": len(rows), "updates": updates, "top": top}


JOB = Job(
    name="pagerank",
    description="PageRank (networkx/Graphalytics definition) of a directed edge list",
    keys=GRAPH_KEYS + (
        Key("damping", 0.85, "float", "damping factor (probability of following a link)"),
        Key("iterations", 100, "int", "at most this many rank updates"),
        Key("tol", 1e-10, "float", "stop once the L1 change of an update falls below this"),
    ),
    build=build,
    finish=finish,
    progress_metric="l1",
)
