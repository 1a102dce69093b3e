"""``mariana run pagerank``: PageRank as defined by networkx and LDBC Graphalytics."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import Graph, RunResult
from ..partitioner.fragment import LOAD_STEPS
from ..vertices.graph.pagerank import PageRankLoaded, PageRankVertex, loaded_pagerank_master, pagerank_master
from .graphalytics import follow, load_graph, value_format, write_result
from .graphjob import GRAPH_KEYS, build_graph, build_loaded_graph, check_range, collect, parted_results
from ..storage.ids import Ids
from .registry import BuildContext, Job, Key


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    check_range(config, "damping", 0.0, 1.0)
    check_range(config, "iterations", 0)
    check_range(config, "tol", 0.0)
    d, it, l1 = config["damping"], config["iterations"], config["tol"] > 0
    if config["mode"] == "block":
        top = config["top"]

        def summarize(ids: Ids, ranks: np.ndarray) -> dict[str, Any]:
            best = np.lexsort((ids.keys, -ranks))[:top] if top else np.empty(0, np.int64)
            return {"top": [[name, float(ranks[i])] for name, i in zip(ids.of(best), best.tolist())]}

        g = build_loaded_graph("pagerank", config, bctx, lambda bid, io: PageRankLoaded(bid, io, d, it, l1),
                               undirected=not config["directed"], summarize=summarize,
                               fmt=value_format(config, "float"))
        g.master_compute = loaded_pagerank_master(config["tol"])
    else:
        edges = follow(load_graph(config), config)
        g = build_graph("pagerank", edges, bctx, lambda vid, adj: PageRankVertex(vid, adj, d, it, l1))
        g.master_compute = pagerank_master(config["tol"])
    g.add_aggregator("dangling", "fsum")
    g.add_aggregator("l1", "fsum")
    return g


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    parted = parted_results(result, config)
    if parted is not None:
        count = parted[0]
        top = sorted((tuple(r) for s in parted[1] for r in s["top"]), key=lambda r: (-r[1], r[0]))[: config["top"]]
    else:
        rows = collect(result)
        write_result(config, rows, "float")
        count = len(rows)
        top = sorted(rows, key=lambda r: (-r[1], r[0]))[: config["top"]]
    loading = LOAD_STEPS if config["mode"] == "block" else 0
    updates = max(result.supersteps - 1 - loading, 0)
    lines = [f"pagerank: {count} vertices, {updates} update(s) ({result.halt_reason})"]
    lines += [f"{i + 1:>4}  {vid:<24} {rank:.10f}" for i, (vid, rank) in enumerate(top)]
    if config["output"]:
        lines.append(f"wrote {count} ranks to {config['output']}")
    return "\n".join(lines), {"vertices": count, "updates": updates, "top": top}


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
