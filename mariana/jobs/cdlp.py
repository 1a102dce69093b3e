"""``mariana run cdlp``: community detection by label propagation (Graphalytics CDLP)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ..engine import Graph, RunResult
from ..vertices.graphalytics import CDLPBlock, CDLPVertex
from .edgelist import EdgeList
from .graphalytics import label_ranks, load_graph, write_result
from .graphjob import GRAPH_KEYS, build_graph, check_range, collect
from .registry import BuildContext, Job, Key


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    check_range(config, "iterations", 0)
    it = config["iterations"]
    edges = both_ways(load_graph(config))
    rank = label_ranks(edges.ids)
    index = {vid: i for i, vid in enumerate(edges.ids)} if config["mode"] == "vertex" else {}
    g = build_graph("cdlp", edges, bctx, config["mode"],
                    lambda vid, adj: CDLPVertex(vid, adj, int(rank[index[vid]]), it),
                    lambda bid, sub: CDLPBlock(bid, sub, rank[sub.own], it))
    g.add_aggregator("updated", "sum")
    return g


def both_ways(edges: EdgeList) -> EdgeList:
    """In- plus out-neighbours as a multiset: every edge in both directions, so a pair linked both
    ways counts twice and a self-loop counts the vertex's own label twice (in and out). An
    undirected graph (each edge listed once) gives each neighbour once per edge."""
    return EdgeList(edges.url, edges.ids, np.concatenate([edges.src, edges.dst]), np.concatenate([edges.dst, edges.src]),
                    np.concatenate([edges.weight, edges.weight]), np.concatenate([edges.lineno, edges.lineno]))


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    rows = collect(result)
    ids = [vid for vid, _ in rows]
    by_rank = [ids[i] for i in label_ranks(ids).argsort().tolist()]
    rows = [(vid, by_rank[lab]) for vid, lab in rows]
    write_result(config, rows, "label")
    sizes = Counter(label for _, label in rows).most_common()
    largest = sorted(sizes, key=lambda c: (-c[1], c[0]))[: config["top"]]
    lines = [f"cdlp: {len(sizes)} communit{'y' if len(sizes) == 1 else 'ies'} over {len(rows)} vertices "
             f"after {config['iterations']} iteration(s)"]
    lines += [f"{label:<24} {size} vertices" for label, size in largest]
    if config["output"]:
        lines.append(f"wrote {len(rows)} labels to {config['output']}")
    return "\n".join(lines), {"vertices": len(rows), "communities": len(sizes), "largest": largest}


JOB = Job(
    name="cdlp",
    description="community detection by synchronous label propagation, ties to the smallest label (Graphalytics CDLP)",
    keys=GRAPH_KEYS + (Key("iterations", 10, "int", "label propagation rounds"),),
    build=build,
    finish=finish,
    progress_metric="updated",
)
